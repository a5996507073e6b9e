"""Tables 26 (frozen-protocol probe) and 34 (tuned vs logit lens) of ModaLens Appendix N from ``modalens-probes`` records.

* :func:`protocol_check` -- the frozen probe configuration of a record: its recorded SHA-256 against
  the hash recomputed from the stored configuration and against every row's ``protocol_sha256``;
* :func:`probe_table` -- Table 26: each frozen baseline (the test-split value) beside the disjoint
  cohort's value with its patient-clustered interval, the difference and the two-sided decision, with
  the test settings read from the frozen configuration (not from the notebook);
* :func:`tuned_lens_table` -- Table 34: per lens and layer the KL to the final distribution on the
  held-out corpus and at the ModaLens answer position, and the agreement of the projected answer with
  the model's final answer.

Every function returns a :class:`~shovir_core.tables.result.TableResult`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics import layers as ly
from ..protocols.modalens_layers import lens_array
from ..stats.probes import aurc, auroc, clustered_difference_test, config_sha256, stratified_auroc
from .result import TableResult

__all__ = ["protocol_check", "probe_table", "tuned_lens_table", "paper_values", "training_log", "STATISTICS",
           "PAPER_KEYS", "LOG_STEPS"]

LOG_STEPS = (100, 1000, 2000)
"""Training lengths whose best KL the paper's tuned-lens record logs (829.1 / 233.4 / 195.4 on WikiText-103)."""

PAPER_KEYS = {
    "probe.auroc_drop": "n3.auroc_drop", "probe.unchanged_test": "n3.unchanged_13",
    "probe.n_disjoint_patients": "n3.probe_cohort", "probe.n_test_patients": "n3.probe_test_patients",
    "probe.n_baselines": "n3.probe_baselines", "probe.n_draws": "n3.probe_draws", "probe.alpha": "n3.probe_alpha",
    "lens.heldout_kl": "o.tuned.final_kl",
    "lens.best_loss.100": "o.tuned.kl_100", "lens.best_loss.1000": "o.tuned.kl_1000",
    "lens.best_loss.2000": "o.tuned.best_kl",
}
"""Run value key (:func:`paper_values`) -> published value id (paper ``modalens``, Appendix N.3 and the
tuned-lens training records)."""

STATISTICS: dict[str, str] = {
    "unchanged_rate": "unchanged-answer rate",
    "probe_auroc": "swap-change probe AUROC",
    "probe_aurc": "AURC, probe score",
    "attention_mass_aurc": "AURC, image-token attention mass",
    "input_gradient_aurc": "AURC, input gradient",
    "settling_layer_median": "settling layer (median)",
    "label_probe_auroc": "substitute-label probe AUROC within question (reference check)",
    "margin_label_auroc": "substitute-label AUROC of the model's own margin within question (reference)",
}
"""Rows of Table 26: the six frozen baselines of the paper's protocol, then this repository's label probe and
the same AUROC of the model's own final margin on the substitute (what a last-layer probe can at best recover)."""


def protocol_check(trials: pd.DataFrame, counts: Mapping) -> TableResult:
    """The recorded protocol hash, recomputed from the stored configuration, and the rows' hashes."""
    cfg = json.loads(counts["protocol"])
    recorded = str(counts["protocol_sha256"])
    recomputed = config_sha256(cfg)
    rows = sorted(set(trials["protocol_sha256"].astype(str)))
    ok = recomputed == recorded and rows == [recorded]
    frame = pd.DataFrame([{"recorded": recorded[:8], "recomputed": recomputed[:8],
                           "rows": ", ".join(r[:8] for r in rows), "round_trip": ok}])
    values = {"recorded_prefix": recorded[:8], "recomputed_prefix": recomputed[:8], "round_trip": ok,
              "layer": cfg["probe"]["flip_layer"], "label_layer": cfg["probe"]["label_layer"],
              "n_draws": cfg["test"]["n_draws"], "alpha": cfg["test"]["alpha"],
              "disjoint_n_patients": cfg["split"]["disjoint"]["n_patients"], "n_baselines": len(cfg["baselines"])}
    return TableResult(frame, values=values,
                       labels={"recorded": "recorded SHA-256 (prefix)", "recomputed": "recomputed (prefix)",
                               "rows": "hash in the rows", "round_trip": "round trip"},
                       caption="The frozen probe protocol: the SHA-256 recorded before the run, recomputed from the "
                               "stored configuration, and the hash every row carries.")


def _stats(t: pd.DataFrame) -> dict:
    """Per-row arrays the statistics of Table 26 are evaluated on."""
    flip = (t["readout_c"] != t["readout_d"]).to_numpy().astype(float)
    label = t["target_d"].to_numpy(dtype=float)
    return {"flip": flip, "probe": t["probe_flip_score"].to_numpy(dtype=float),
            "attn": t["attention_mass"].to_numpy(dtype=float), "grad": t["input_gradient"].to_numpy(dtype=float),
            "settle": ly.settling_layer(ly.margins(lens_array(t["lens_c"]))).astype(float),
            "label": label, "label_score": t["probe_label_score"].to_numpy(dtype=float),
            # the questions as integer codes in their sorted order: the strata of stratified_auroc, in the
            # same order as the ids (sorting strings was a fifth of a bootstrap draw)
            "question": np.unique(t["question_id"].astype(str).to_numpy(), return_inverse=True)[1].ravel(),
            "margin_d": t["margin_d"].to_numpy(dtype=float)}


def _statistic(name: str, a: dict, rows: np.ndarray) -> float:
    if name == "unchanged_rate":
        return float(1 - a["flip"][rows].mean())
    if name == "probe_auroc":
        return auroc(a["probe"][rows], a["flip"][rows])
    if name == "probe_aurc":
        return aurc(a["probe"][rows], a["flip"][rows])
    if name == "attention_mass_aurc":
        return aurc(a["attn"][rows], a["flip"][rows])
    if name == "input_gradient_aurc":
        return aurc(a["grad"][rows], a["flip"][rows])
    if name == "settling_layer_median":
        return float(np.median(a["settle"][rows]))
    if name == "label_probe_auroc":
        ok = rows[~np.isnan(a["label"][rows])]
        return stratified_auroc(a["label_score"][ok], a["label"][ok], a["question"][ok])
    if name == "margin_label_auroc":
        ok = rows[~np.isnan(a["label"][rows])]
        return stratified_auroc(a["margin_d"][ok], a["label"][ok], a["question"][ok])
    raise ValueError(f"unknown statistic {name!r}; known: {sorted(STATISTICS)}")


def probe_table(trials: pd.DataFrame, counts: Mapping) -> TableResult:
    """Table 26: frozen test-split baselines against the disjoint cohort (two-sided clustered test).

    ``counts`` is the record's manifest counts (the frozen configuration fixes the draws, the level
    and the seed). The label-probe row is also tested against chance (AUROC 0.5).
    """
    cfg = json.loads(counts["protocol"])
    test_cfg = cfg["test"]
    test, disjoint = trials[trials["split"] == "test"], trials[trials["split"] == "disjoint"]
    if test.empty or disjoint.empty:
        raise ValueError("probe_table: the record needs both a test and a disjoint split")
    a_test, a_dis = _stats(test), _stats(disjoint)
    clusters = disjoint["patient_id"].astype(str).to_numpy()
    all_test = np.arange(len(test))
    rows, values = [], {}
    for name, label in STATISTICS.items():
        baseline = _statistic(name, a_test, all_test)
        res = clustered_difference_test(clusters, lambda r, n=name: _statistic(n, a_dis, r), baseline=baseline,
                                        n_draws=int(test_cfg["n_draws"]), seed=int(test_cfg["seed"]),
                                        alpha=float(test_cfg["alpha"]))
        rows.append({"statistic": label, "key": name, "test": baseline, "disjoint": res["estimate"],
                     "lo": res["lo"], "hi": res["hi"], "diff": res["diff"], "diff_lo": res["diff_lo"],
                     "diff_hi": res["diff_hi"], "rejects": res["rejects"]})
        values.update({f"{name}.{k}": v for k, v in rows[-1].items() if k not in ("statistic", "key")})
    lab = values
    values["label_probe_auroc.above_chance"] = bool(lab["label_probe_auroc.lo"] > 0.5)
    values.update({"n_test_trials": int(len(test)), "n_disjoint_trials": int(len(disjoint)),
                   "n_test_patients": int(test["patient_id"].nunique()),
                   "n_disjoint_patients": int(disjoint["patient_id"].nunique()),
                   "n_test_flips": int(a_test["flip"].sum()), "n_disjoint_flips": int(a_dis["flip"].sum()),
                   "n_rejected": int(sum(r["rejects"] for r in rows if r["key"] in cfg["baselines"])),
                   "n_draws": int(test_cfg["n_draws"])})
    frame = pd.DataFrame(rows).drop(columns="key")
    return TableResult(frame, values=values,
                       metrics={"test": "value", "disjoint": "value", "lo": "value", "hi": "value", "diff": "value",
                                "diff_lo": "value", "diff_hi": "value"},
                       labels={"statistic": "statistic", "test": "test split (frozen baseline)",
                               "disjoint": "disjoint cohort", "lo": "95% lo", "hi": "95% hi",
                               "diff": "difference", "diff_lo": "difference 95% lo", "diff_hi": "difference 95% hi",
                               "rejects": "rejects equality"},
                       caption="Table 26: the frozen probe protocol's test-split baselines against the disjoint "
                               "cohort, with patient-clustered percentile intervals and the two-sided decision.")


def _corpus(t: pd.DataFrame) -> dict[str, np.ndarray]:
    c = t[t["kind"] == "corpus"]
    return {lens: np.asarray([json.loads(v) for v in c[f"kl_{lens}"]], dtype=float) for lens in ("logit", "tuned")}


def tuned_lens_table(arms: Mapping[str, pd.DataFrame]) -> TableResult:
    """Table 34: logit vs tuned lens per arm and layer (entries ``0 .. L``; ``L`` is the model's own readout).

    Columns: ``corpus_kl`` (mean over held-out corpus texts of the per-text mean KL to the final
    distribution), ``answer_kl`` (mean over trials and both images at the ModaLens answer position) and
    ``agreement_final`` (share of trials and sides whose projected answer equals the final answer).
    """
    rows, values = [], {}
    for arm, t in arms.items():
        corpus = _corpus(t)
        trials = t[t["kind"] == "trial"]
        final = np.concatenate([ly.answers(ly.margins(lens_array(trials[f"lens_{s}"])))[:, -1] for s in "cd"])
        per = {}
        for lens, col in (("logit", "lens"), ("tuned", "tuned")):
            m = np.concatenate([ly.margins(lens_array(trials[f"{col}_{s}"])) for s in "cd"])
            kl = np.concatenate([np.asarray([json.loads(v) for v in trials[f"kl_{lens}_{s}"]]) for s in "cd"])
            agree = (ly.answers(m) == final[:, None]).mean(axis=0)
            per[lens] = {"corpus": corpus[lens].mean(axis=0), "answer": kl.mean(axis=0), "agree": agree}
            for layer in range(m.shape[1]):
                rows.append({"arm": arm, "lens": lens, "layer": layer, "corpus_kl": per[lens]["corpus"][layer],
                             "answer_kl": per[lens]["answer"][layer], "agreement_final": agree[layer]})
        inner = slice(0, len(per["logit"]["corpus"]) - 1)  # the last entry is the readout for both lenses
        tuned_c, logit_c = per["tuned"]["corpus"][inner], per["logit"]["corpus"][inner]
        values.update({
            f"{arm}.n_layers": int(len(per["logit"]["corpus"]) - 1),
            f"{arm}.n_heldout": int(len(corpus["logit"])), f"{arm}.n_trials": int(len(trials)),
            f"{arm}.corpus.logit_mean": float(logit_c.mean()), f"{arm}.corpus.tuned_mean": float(tuned_c.mean()),
            f"{arm}.corpus.tuned_sum": float(tuned_c.sum()),
            f"{arm}.corpus.logit_L0": float(logit_c[0]), f"{arm}.corpus.tuned_L0": float(tuned_c[0]),
            f"{arm}.corpus.tuned_at_most_logit": bool(np.all(tuned_c <= logit_c)),
            f"{arm}.corpus.tuned_nonincreasing": bool(np.all(np.diff(per["tuned"]["corpus"]) <= 0)),
            f"{arm}.corpus.logit_nonincreasing": bool(np.all(np.diff(per["logit"]["corpus"]) <= 0)),
            f"{arm}.answer.logit_mean": float(per["logit"]["answer"][inner].mean()),
            f"{arm}.answer.tuned_mean": float(per["tuned"]["answer"][inner].mean()),
            f"{arm}.answer.n_layers_tuned_below": int((per["tuned"]["answer"][inner] < per["logit"]["answer"][inner]).sum()),
            f"{arm}.agree.logit_mean": float(per["logit"]["agree"][inner].mean()),
            f"{arm}.agree.tuned_mean": float(per["tuned"]["agree"][inner].mean()),
            f"{arm}.agree.n_layers_tuned_above": int((per["tuned"]["agree"][inner] > per["logit"]["agree"][inner]).sum()),
            f"{arm}.agree.endpoint_equal": bool(per["tuned"]["agree"][-1] == per["logit"]["agree"][-1] == 1.0),
        })
    frame = pd.DataFrame(rows)
    return TableResult(frame, values=values,
                       metrics={"corpus_kl": "kl_divergence", "answer_kl": "kl_divergence",
                                "agreement_final": "accuracy"},
                       labels={"arm": "report", "lens": "lens", "layer": "layer (0 = embeddings)",
                               "corpus_kl": "KL to final, held-out corpus", "answer_kl": "KL to final, answer position",
                               "agreement_final": "agreement with the final answer"},
                       caption="Table 34: the tuned lens beside the logit lens: KL to the final layer's distribution "
                               "on the held-out corpus and at the answer position, and agreement with the final answer.")


def training_log(counts: Mapping, *, steps=LOG_STEPS) -> TableResult:
    """The tuned lens's training log (a ``modalens-probes`` tuned-lens record's ``lens_training``): the best
    training loss -- the KL to the final layer summed over the translated layers, per batch -- up to each
    of ``steps`` the run reached, beside the corpus and its size. The paper logged its best *validation*
    KL after 100, 1,000 and 2,000 steps of separate runs on WikiText-103 (829.1, 233.4, 195.4); this is the
    training loss of one run read at those steps, the closest record this protocol keeps."""
    info = json.loads(counts["lens_training"])
    loss = np.asarray(info["loss"], dtype=float)
    rows, values = [], {"n_steps": int(info["steps"]), "n_texts": int(info["n_texts"])}
    for s in steps:
        if s <= len(loss):
            best = float(loss[:s].min())
            rows.append({"steps": int(s), "best_loss": best, "final_loss": float(loss[s - 1])})
            values[f"best_loss.{s}"] = best
    return TableResult(pd.DataFrame(rows, columns=["steps", "best_loss", "final_loss"]), values=values,
                       index=("steps",), metrics={"best_loss": "value", "final_loss": "value"},
                       labels={"steps": "training steps", "best_loss": "best training KL so far",
                               "final_loss": "KL at that step"},
                       caption="The tuned lens's training log: KL summed over the translated layers.")


def paper_values(probe: TableResult, protocol: TableResult, lens: TableResult, *, arm: str = "present") -> dict:
    """The run's values under the keys of :data:`PAPER_KEYS`.

    ``probe.auroc_drop`` is the test-split minus disjoint probe AUROC (the paper's "falls by 0.334");
    ``lens.heldout_kl`` the tuned lens's held-out corpus KL summed over the translated layers of ``arm``
    (the paper's final validation KL of its WikiText-103 training).
    """
    pv, cv, lv = probe.values, protocol.values, lens.values
    return {"probe.auroc_drop": pv["probe_auroc.test"] - pv["probe_auroc.disjoint"],
            "probe.unchanged_test": pv["unchanged_rate.test"], "probe.n_disjoint_patients": pv["n_disjoint_patients"],
            "probe.n_test_patients": pv["n_test_patients"], "probe.n_baselines": cv["n_baselines"], "probe.n_draws": cv["n_draws"],
            "probe.alpha": cv["alpha"], "lens.heldout_kl": lv[f"{arm}.corpus.tuned_sum"]}
