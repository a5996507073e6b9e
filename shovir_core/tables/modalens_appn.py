"""Tables of the ModaLens Appendix N chapter (logit lens, attention knockout) from ``modalens-layers`` records.

* :func:`planted_facts` -- a reference model's stated behaviour measured on the evaluation cohort:
  flip rates with and without the report, report agreement, image-only balanced accuracy;
* :func:`lens_table` -- per layer, projected-answer disagreement between the two images (Figure 6,
  Table 36), mean |Δ projected margin| (Figure 3A), agreement with the final answer against the
  majority floor (Figure 3B), with the calibration depth, the settling layer and the "still apart"
  counts against the flips (Table 27) as glue values;
* :func:`knockout_table` -- flip rate by knockout start layer per arm, with patient-clustered
  intervals, and the share of substitute-side answers that agree with the report's label (Figure 7);
* :func:`knockout_overlap` -- overlap of the flipped-case sets of two knockout arms per start layer
  (Jaccard, φ, with a shuffled-pairing null of φ), as ModaLens App. N.2 reports between arms;
* :func:`settling_table` -- the settling depth with and without the report on the same trials: medians,
  the paired mean difference against a patient sign-flip null, and the median per-case |difference|
  against a shuffled-pairing null (ModaLens App. N.1).

Every function returns a :class:`~shovir_core.tables.result.TableResult`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics import layers as ly
from ..metrics.arms import rate_interval
from ..metrics.modalens import balanced_accuracy
from ..protocols.modalens_layers import lens_array
from ..stats import nulls
from ..stats.overlap import jaccard, phi
from .result import TableResult

__all__ = ["planted_facts", "absent_by_finding", "lens_table", "knockout_table", "KNOCKOUT_ARM_LABELS", "knockout_overlap", "settling_table",
           "layer_intervals", "still_apart_table", "knockout_difference", "calibration_table", "PAPER_KEYS"]

PAPER_KEYS: dict[str, str] = {
    "lens.present.endpoint_disagreement": "n1.endpoint_P", "lens.absent.endpoint_disagreement": "n1.endpoint_A",
    "lens.present.calibration_depth": "n1.depth",
    "at.present.disagreement": "n1.l25_P", "at.absent.disagreement": "n1.l25_A", "at.disagreement_diff_pp": "n1.l25_diff",
    "at.present.balanced_agreement": "n1.ba46_P", "at.absent.balanced_agreement": "n1.ba46_A",
    "settle.present.median": "n1.settle_P", "settle.absent.median": "n1.settle_A",
    "settle.paired_mean_diff": "n1.settle_diff",
    "t27.image_first.n_still_apart": "n1.still_apart_if", "t27.image_first.n_flips": "n1.still_apart_flips_if",
    "t27.text_first.n_still_apart": "n1.still_apart_tf", "t27.text_first.n_flips": "n1.still_apart_flips_tf",
    "ko.n_cases": "n2.cases", "ko.n_patients": "n2.patients", "ko.n_decisive": "n2.decisive",
    "ko.n_layers": "n2.layers_run",
    "ko.report_all.first.flip_rate": "n2.cum_L0", "ko.end_P": "n2.end_P", "ko.end_A": "n2.end_A",
    "ko.single.max_flip_rate": "n2.single_max", "ko.report_answer.max_flip_rate": "n2.answer_only_max",
    "ko.diff.image_matched.at_pp": "n2.L16_diff",
}
"""Run value key (the Appendix N chapter's glue values) -> published value id (paper ``modalens``, App. N.1-N.2).
The layer-specific published values (layer 25's disagreement, layer 46's balanced agreement, layer 16's
paired difference) are compared at the layers the profile names (the chapter's parameters)."""


def _balanced_accuracy(pred_yes: np.ndarray, target: np.ndarray) -> float:
    """Balanced accuracy over trials with a binary target (NaN targets dropped; NaN with one class)."""
    t = np.asarray(target, dtype=float)
    ok = ~np.isnan(t)
    return float(balanced_accuracy(np.asarray(pred_yes, dtype=bool)[ok], t[ok], both_classes=True))


def planted_facts(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """Flip rates P and A (patient-clustered intervals), report agreement with the report present, and the
    image-only balanced accuracy (pooled over questions, and the mean over findings with both classes)."""
    rows, values = [], {}
    for arm, t in (("present", present), ("absent", absent)):
        flip = rate_interval(t, (t["readout_c"] != t["readout_d"]).to_numpy(), n_draws=n_draws, seed=seed)
        yes = (t["readout_c"] == "yes").to_numpy()
        target = t["target_c"].to_numpy(dtype=float)
        ok = ~np.isnan(target)
        agree = float((yes[ok] == (target[ok] == 1)).mean())
        per = [_balanced_accuracy(yes[g.index], g["target_c"]) for _, g in t.reset_index(drop=True).groupby("finding")]
        macro = float(np.nanmean(per)) if np.isfinite(per).any() else float("nan")
        rows.append({"arm": arm, "n_trials": len(t), "flip_rate": flip["estimate"], "lo": flip["lo"],
                     "hi": flip["hi"], "label_agreement": agree,
                     "balanced_accuracy": _balanced_accuracy(yes, target), "macro_balanced_accuracy": macro})
        values.update({f"{arm}.flip_rate": flip["estimate"], f"{arm}.flip_lo": flip["lo"],
                       f"{arm}.flip_hi": flip["hi"], f"{arm}.label_agreement": agree,
                       f"{arm}.balanced_accuracy": rows[-1]["balanced_accuracy"],
                       f"{arm}.macro_balanced_accuracy": macro, f"{arm}.n_trials": len(t)})
    values["ratio"] = values["absent.flip_rate"] / max(values["present.flip_rate"], 1e-12)
    frame = pd.DataFrame(rows)
    return TableResult(frame, values=values,
                       metrics={"flip_rate": "flip_rate", "lo": "flip_rate", "hi": "flip_rate",
                                "balanced_accuracy": "balanced_accuracy",
                                "label_agreement": "accuracy"},
                       labels={"arm": "report", "n_trials": "trials", "lo": "flip 95% lo", "hi": "flip 95% hi",
                               "macro_balanced_accuracy": "balanced accuracy (mean over findings)",
                               "label_agreement": "agreement with the report's label"},
                       caption="Planted facts of the reference model on the held-out evaluation patients.")


def absent_by_finding(absent: pd.DataFrame, *, n_draws: int, seed: int, level: float = 0.95) -> TableResult:
    """Per question, the report-absent answers on the original image: how far each one follows the image.

    One row per finding (and the composite): ``n_trials``, ``n_positive`` (original images whose label is
    positive), ``yes_rate``, ``flip_rate`` (the image swap changes the answer) and the balanced accuracy of the
    answer against the original image's label with its patient-clustered percentile interval (NaN where the
    cohort has a single class). A finding is *below chance* when its balanced accuracy is under 0.5, *at
    chance* when the interval holds 0.5, *constant* when every answer is the same. Values (``absent_pf.``
    keys; the composite is left out of the counts): ``<finding>.{yes_rate,flip_rate,ba,ba_lo,ba_hi}``,
    ``n_findings``, ``n_both_classes``, ``n_below_chance``, ``n_below_at_chance``, ``n_at_chance``,
    ``n_constant``, ``n_constant_no_positive`` (constant findings without a positive image), ``below_chance``
    and ``constant`` (their names).
    """
    from ..stats import cluster_bootstrap
    from ..vocab import COMPOSITE

    rows = []
    for finding, t in absent.groupby("finding", sort=True):
        yes = (t["readout_c"] == "yes").to_numpy()
        label = t["target_c"].to_numpy(dtype=float)
        ok = ~np.isnan(label)
        pos, neg = ok & (label == 1), ok & (label == 0)
        row = {"finding": finding, "n_trials": int(len(t)), "n_positive": int(pos.sum()),
               "yes_rate": float(yes.mean()), "flip_rate": float((t["readout_c"] != t["readout_d"]).mean()),
               "ba": float("nan"), "ba_lo": float("nan"), "ba_hi": float("nan")}
        if pos.any() and neg.any():
            frame = pd.DataFrame({"patient_id": t["patient_id"].to_numpy(), "pos": pos * 1.0, "neg": neg * 1.0,
                                  "tp": (pos & yes) * 1.0, "tn": (neg & ~yes) * 1.0})
            res = cluster_bootstrap(frame, cluster="patient_id", sums={c: c for c in ("pos", "neg", "tp", "tn")},
                                    statistic=lambda s: {"ba": 0.5 * (np.divide(s["tp"], s["pos"], where=s["pos"] > 0,
                                                                                out=np.full(np.shape(s["pos"]), np.nan))
                                                                      + np.divide(s["tn"], s["neg"], where=s["neg"] > 0,
                                                                                  out=np.full(np.shape(s["neg"]), np.nan)))},
                                    n_draws=n_draws, rng=np.random.default_rng(seed), level=level)
            row["ba"], row["ba_lo"], row["ba_hi"] = (float(x) for x in res.interval("ba"))
        rows.append(row)
    frame = pd.DataFrame(rows)
    f = frame[frame["finding"] != COMPOSITE]
    both = f[f["ba"].notna()]
    below = both[both["ba"] < 0.5]
    at_chance = both[(both["ba_lo"] <= 0.5) & (0.5 <= both["ba_hi"])]
    constant = f[(f["yes_rate"] == 0) | (f["yes_rate"] == 1)]
    values: dict = {"absent_pf.n_findings": int(len(f)), "absent_pf.n_both_classes": int(len(both)),
                    "absent_pf.n_below_chance": int(len(below)),
                    "absent_pf.n_below_at_chance": int(below["finding"].isin(at_chance["finding"]).sum()),
                    "absent_pf.n_at_chance": int(len(at_chance)), "absent_pf.n_constant": int(len(constant)),
                    "absent_pf.n_constant_no_positive": int((constant["n_positive"] == 0).sum()),
                    "absent_pf.below_chance": ", ".join(below["finding"]),
                    "absent_pf.constant": ", ".join(constant["finding"])}
    for r in frame.to_dict("records"):
        key = r["finding"].lower().replace(" ", "_")
        values.update({f"absent_pf.{key}.{k}": r[k] for k in ("yes_rate", "flip_rate", "ba", "ba_lo", "ba_hi")})
    return TableResult(frame, values, index=("finding",),
                       metrics={"yes_rate": "yes_rate", "flip_rate": "flip_rate", "ba": "balanced_accuracy",
                                "ba_lo": "balanced_accuracy", "ba_hi": "balanced_accuracy",
                                "n_trials": "count", "n_positive": "count"},
                       labels={"finding": "question", "n_trials": "trials", "n_positive": "positive originals",
                               "yes_rate": "yes rate", "flip_rate": "flip rate", "ba": "balanced accuracy",
                               "ba_lo": f"BA {level:.0%} lo", "ba_hi": f"BA {level:.0%} hi"},
                       caption="Report absent, per question: how far the image-only answer follows the original "
                               "image")


def lens_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int, tv: float = 0.05) -> TableResult:
    """Per layer and arm (e.g. ``{"present": ..., "absent": ...}`` lens records): disagreement, mean |Δm|,
    agreement with the final answer and its majority floor, balanced agreement."""
    rows, values = [], {}
    for arm, t in arms.items():
        m_c, m_d = ly.margins(lens_array(t["lens_c"])), ly.margins(lens_array(t["lens_d"]))
        dis = ly.disagreement(m_c, m_d)
        delta = ly.mean_abs_delta(m_c, m_d)
        agree, floor = ly.agreement_with_final(m_c)
        bal = ly.balanced_agreement(m_c)
        for layer in range(m_c.shape[1]):
            rows.append({"arm": arm, "layer": layer, "disagreement": dis[layer], "mean_abs_delta_margin": delta[layer],
                         "agreement_final": agree[layer], "majority_floor": floor, "balanced_agreement": bal[layer]})
        flips = (t["readout_c"] != t["readout_d"]).to_numpy()
        apart = ly.still_apart(m_c, m_d, threshold=tv)
        depth = ly.calibration_depth(m_c, clusters=t["patient_id"].to_numpy(), n_draws=n_draws,
                                     rng=np.random.default_rng(seed))
        settle = ly.settling_layer(m_c)
        values.update({
            f"{arm}.n_layers": int(m_c.shape[1] - 1), f"{arm}.flip_rate": float(flips.mean()),
            f"{arm}.endpoint_disagreement": float(dis[-1]), f"{arm}.max_disagreement": float(dis.max()),
            f"{arm}.peak_layer": int(np.argmax(dis)),
            f"{arm}.n_flips": int(flips.sum()), f"{arm}.n_still_apart": int(apart.sum()),
            f"{arm}.n_still_apart_not_flipped": int((apart & ~flips).sum()),
            f"{arm}.calibration_depth": depth["layer"], f"{arm}.calibration_depth_lo": depth["low"],
            f"{arm}.calibration_depth_hi": depth["high"], f"{arm}.settling_median": float(np.median(settle)),
            f"{arm}.settling_mean": float(settle.mean()), f"{arm}.majority_floor": floor,
        })
    frame = pd.DataFrame(rows)
    return TableResult(frame, index=("arm", "layer"), values=values,
                       metrics={"disagreement": "flip_rate", "mean_abs_delta_margin": "mean_abs_margin_change",
                                "agreement_final": "accuracy", "majority_floor": "majority_baseline",
                                "balanced_agreement": "balanced_accuracy"},
                       labels={"arm": "report", "layer": "layer (0 = embeddings)",
                               "disagreement": "projected disagreement", "agreement_final": "agreement with final",
                               "balanced_agreement": "balanced agreement with final"},
                       caption="Logit lens per layer: disagreement between the two images, |Δ projected margin|, "
                               "agreement with the final answer.")


KNOCKOUT_ARM_LABELS = {"report_answer": "report → answer query", "report_all": "report → every non-image query",
                       "report_single": "report → every non-image query, start layer only",
                       "report_matched": "first report tokens (matched to the question)",
                       "question": "question line", "image_matched": "image tokens (matched to the report)",
                       "image_all": "every image token", "random_matched": "random positions (matched in number)"}
"""Knockout arm key (the glue keys' stem) -> the row label the table shows."""


def knockout_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Flip rate (with intervals) and report-label agreement on the substitute by knockout start layer.

    ``arms`` maps an arm label (e.g. ``"report/answer"``) to a knockout record's trials.
    """
    rows, values = [], {}
    for arm, t in arms.items():
        ko_c, ko_d = lens_array(t["ko_c"]), lens_array(t["ko_d"])
        layers = [int(x) for x in json.loads(t["ko_layers"].iloc[0])]
        target = t["target_c"].to_numpy(dtype=float)
        ok = ~np.isnan(target)
        for j, layer in enumerate(layers):
            yc, yd = ko_c[:, j, 0] > ko_c[:, j, 1], ko_d[:, j, 0] > ko_d[:, j, 1]
            r = rate_interval(t, yc != yd, n_draws=n_draws, seed=seed)
            follows = float((yd[ok] == (target[ok] == 1)).mean())
            rows.append({"arm": KNOCKOUT_ARM_LABELS.get(arm, arm), "start_layer": layer, "flip_rate": r["estimate"],
                         "flip_rate_lo": r["lo"], "flip_rate_hi": r["hi"],
                         "report_label_agreement": follows, "n_trials": r["n"]})
            values.update({f"{arm}.L{layer}.flip_rate": r["estimate"], f"{arm}.L{layer}.lo": r["lo"],
                           f"{arm}.L{layer}.hi": r["hi"], f"{arm}.L{layer}.report_label_agreement": follows})
    frame = pd.DataFrame(rows)
    return TableResult(frame, values=values, index=("arm", "start_layer"),
                       metrics={"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate", "flip_rate_hi": "flip_rate",
                                "report_label_agreement": "accuracy", "n_trials": "count"},
                       labels={"arm": "blocked span / query scope", "start_layer": "start layer",
                               "flip_rate": "flip rate [95% CI]", "n_trials": "trials",
                               "report_label_agreement": "substitute answer = report label"},
                       caption="Attention knockout: flip rate by start layer (cumulative to the last layer).")


def _ko_flips(t: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """Per trial (index ``trial_id``) and knockout start layer, whether the knocked-out answers flip."""
    ko_c, ko_d = lens_array(t["ko_c"]), lens_array(t["ko_d"])
    layers = [int(x) for x in json.loads(t["ko_layers"].iloc[0])]
    flips = (ko_c[:, :, 0] > ko_c[:, :, 1]) != (ko_d[:, :, 0] > ko_d[:, :, 1])
    return pd.DataFrame(flips, index=t["trial_id"].to_numpy(), columns=layers), layers


def knockout_overlap(arms: Mapping[str, pd.DataFrame], pairs, *, n_perm: int, seed: int) -> TableResult:
    """Overlap of the flipped-case sets of knockout arms at each start layer both arms ran.

    ``pairs``: ``(arm, arm)`` names of ``arms`` (knockout records of the same trials). Per pair and
    layer: the flip counts, Jaccard |A ∩ B| / |A ∪ B| and φ of the two flip indicators
    (:mod:`shovir_core.stats.overlap`), and φ's two-sided p-value against a null that shuffles the
    pairing of trials within finding (:func:`shovir_core.stats.nulls.shuffled_pairing_null`). NaN where
    an indicator is constant (no flips).
    """
    flips = {name: _ko_flips(t) for name, t in arms.items()}
    finding = {name: t.set_index("trial_id")["finding"] for name, t in arms.items()}
    rows, values = [], {}
    for a, b in pairs:
        (fa, la), (fb, lb) = flips[a], flips[b]
        common = fa.index.intersection(fb.index)
        if not len(common):
            raise ValueError(f"knockout_overlap: arms {a!r} and {b!r} share no trials")
        for layer in [x for x in la if x in lb]:
            x, y = fa.loc[common, layer].to_numpy(), fb.loc[common, layer].to_numpy()
            j, ph = jaccard(x, y), phi(x, y)
            p = float("nan")
            if np.isfinite(ph):
                null = nulls.shuffled_pairing_null(x.astype(float), y.astype(float), phi,
                                                   groups=finding[a].loc[common].to_numpy(), n_perm=n_perm,
                                                   rng=np.random.default_rng([seed, layer]))
                p = null["p_value"]
            rows.append({"pair": f"{a} vs {b}", "start_layer": layer, "n_trials": int(len(common)),
                         "flips_a": int(x.sum()), "flips_b": int(y.sum()), "both": int((x & y).sum()),
                         "jaccard": j, "phi": ph, "phi_p": p})
            key = f"{a}.{b}.L{layer}"
            values.update({f"{key}.jaccard": j, f"{key}.phi": ph, f"{key}.phi_p": p, f"{key}.both": int((x & y).sum())})
    frame = pd.DataFrame(rows)
    return TableResult(frame, index=("pair", "start_layer"), values=values, metrics={"jaccard": "share", "phi": "phi", "phi_p": "p_value"},
                       labels={"pair": "arms", "start_layer": "start layer", "n_trials": "n",
                               "flips_a": "flips (first)", "flips_b": "flips (second)", "both": "flip in both",
                               "jaccard": "Jaccard", "phi": "φ", "phi_p": "φ p (shuffled pairing)"},
                       caption="Overlap of the flipped-case sets of two knockout arms by start layer.")


def settling_table(present: pd.DataFrame, absent: pd.DataFrame, *, n_perm: int, seed: int,
                   n_draws: int = 2000) -> TableResult:
    """Settling depth of the source image's projected answer with and without the report, paired by trial.

    The settling layer (:func:`shovir_core.metrics.layers.settling_layer`) is the first layer from
    which the projected answer equals the final one. On the trials both lens records hold: medians
    per arm; the paired mean difference present − absent with its two-sided p-value under a patient
    sign-flip null (:func:`shovir_core.stats.nulls.sign_flip_null`); the median per-trial
    |difference| with the mean and p-value of a null that shuffles the pairing within finding
    (:func:`shovir_core.stats.nulls.shuffled_pairing_null`) -- ModaLens App. N.1 reports that the
    shuffled pairing reproduces the observed median per-case difference. The paired mean difference also
    gets a patient-clustered percentile interval over ``n_draws`` draws (the paper: 1.56 layers [0.88, 2.21]).
    """
    p = present.set_index("trial_id")
    a = absent.set_index("trial_id")
    common = p.index.intersection(a.index)
    if not len(common):
        raise ValueError("settling_table: the two lens records share no trials")
    sp = ly.settling_layer(ly.margins(lens_array(p.loc[common, "lens_c"])))
    sa = ly.settling_layer(ly.margins(lens_array(a.loc[common, "lens_c"])))
    diff = (sp - sa).astype(float)
    flip = nulls.sign_flip_null(diff, clusters=p.loc[common, "patient_id"].to_numpy(), n_perm=n_perm,
                                rng=np.random.default_rng([seed, 0]))

    def median_abs(x, y):
        return float(np.median(np.abs(np.asarray(x, float) - np.asarray(y, float))))

    shuffled = nulls.shuffled_pairing_null(sp.astype(float), sa.astype(float), median_abs,
                                           groups=p.loc[common, "finding"].to_numpy(), n_perm=n_perm,
                                           rng=np.random.default_rng([seed, 1]))
    ci = rate_interval(p.loc[common].reset_index(), diff, n_draws=n_draws, seed=seed)
    values = {"n_trials": int(len(common)), "present.median": float(np.median(sp)),
              "paired_mean_diff_lo": ci["lo"], "paired_mean_diff_hi": ci["hi"],
              "absent.median": float(np.median(sa)), "present.mean": float(sp.mean()), "absent.mean": float(sa.mean()),
              "paired_mean_diff": flip["observed"], "paired_mean_diff_p": flip["p_value"],
              "median_abs_diff": shuffled["observed"], "median_abs_diff_null_mean": shuffled["null_mean"],
              "median_abs_diff_p": shuffled["p_value"], "n_perm": int(n_perm)}
    nan = float("nan")
    rows = [{"quantity": "median settling layer, report present", "value": values["present.median"], "lo": nan,
             "hi": nan, "null": np.nan, "p": np.nan},
            {"quantity": "median settling layer, report absent", "value": values["absent.median"], "lo": nan,
             "hi": nan, "null": np.nan, "p": np.nan},
            {"quantity": "paired mean difference present − absent (layers)", "value": values["paired_mean_diff"],
             "lo": ci["lo"], "hi": ci["hi"], "null": 0.0, "p": values["paired_mean_diff_p"]},
            {"quantity": "median per-trial |difference| (layers)", "value": values["median_abs_diff"], "lo": nan,
             "hi": nan, "null": values["median_abs_diff_null_mean"], "p": values["median_abs_diff_p"]}]
    return TableResult(pd.DataFrame(rows), values=values,
                       metrics={"value": "value", "lo": "value", "hi": "value", "null": "value", "p": "p_value"},
                       labels={"value": "observed", "lo": "95% lo", "hi": "95% hi", "null": "null mean",
                               "p": "two-sided p"}, index=("quantity",),
                       caption="Settling depth with and without the report on the same trials, against "
                               "sign-flip and shuffled-pairing nulls.")


def _ba_interval(frame: pd.DataFrame, *, n_draws: int, seed: int) -> tuple[float, float, float]:
    """Balanced agreement of ``pred`` with ``final`` (bools) with its patient-clustered interval."""
    from ..stats.bootstrap import cluster_bootstrap

    p, f = frame["pred"].to_numpy(bool), frame["final"].to_numpy(bool)
    data = pd.DataFrame({"patient_id": frame["patient_id"].to_numpy(), "tp": (p & f).astype(float),
                         "fn": (~p & f).astype(float), "tn": (~p & ~f).astype(float), "fp": (p & ~f).astype(float)})
    if not f.any() or f.all():
        return float("nan"), float("nan"), float("nan")

    def stat(s):
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"ba": (s["tp"] / (s["tp"] + s["fn"]) + s["tn"] / (s["tn"] + s["fp"])) / 2}

    res = cluster_bootstrap(data, cluster="patient_id", sums={"tp": "tp", "fn": "fn", "tn": "tn", "fp": "fp"},
                            statistic=stat, n_draws=n_draws, rng=np.random.default_rng(seed))
    return res.interval("ba")


def layer_intervals(present: pd.DataFrame, absent: pd.DataFrame, *, disagreement_layer: int, agreement_layer: int,
                    n_draws: int, seed: int) -> TableResult:
    """Intervals at two lens layers (ModaLens App. N.1): the projected-answer disagreement between the two
    images at ``disagreement_layer`` per arm and its paired difference present − absent (in points, on the
    trials both records hold), and the balanced agreement of the projected answer with the model's own
    output at ``agreement_layer`` per arm; patient-clustered percentile bootstraps. The paper reports layer
    25's disagreement 0.2000 [0.179, 0.219] vs 0.0067 and 19.3 points [17.2, 21.3], and layer 46's balanced
    agreement 0.909 [0.894, 0.924] (P) and 0.760 [0.729, 0.790] (A). Layer k reads the residual after k
    decoder layers (0 = the embeddings)."""
    p, a = present.set_index("trial_id"), absent.set_index("trial_id")
    common = p.index.intersection(a.index)
    if not len(common):
        raise ValueError("layer_intervals: the two lens records share no trials")
    rows, values, dis = [], {"disagreement_layer": int(disagreement_layer),
                             "agreement_layer": int(agreement_layer), "n_trials": int(len(common))}, {}
    for arm, t in (("present", p.loc[common]), ("absent", a.loc[common])):
        m_c, m_d = ly.margins(lens_array(t["lens_c"])), ly.margins(lens_array(t["lens_d"]))
        for layer, key in ((disagreement_layer, "disagreement_layer"), (agreement_layer, "agreement_layer")):
            if not 0 <= layer < m_c.shape[1]:
                raise ValueError(f"layer_intervals: {key} = {layer} outside the lens's 0..{m_c.shape[1] - 1}")
        frame = t.reset_index()
        dis[arm] = ((m_c[:, disagreement_layer] > 0) != (m_d[:, disagreement_layer] > 0)).astype(float)
        r = rate_interval(frame, dis[arm], n_draws=n_draws, seed=seed)
        ba = _ba_interval(pd.DataFrame({"patient_id": frame["patient_id"], "pred": m_c[:, agreement_layer] > 0,
                                        "final": m_c[:, -1] > 0}), n_draws=n_draws, seed=seed)
        rows.append({"quantity": f"disagreement at layer {disagreement_layer}", "arm": arm, "value": r["estimate"],
                     "lo": r["lo"], "hi": r["hi"]})
        rows.append({"quantity": f"balanced agreement with the output at layer {agreement_layer}", "arm": arm,
                     "value": ba[0], "lo": ba[1], "hi": ba[2]})
        values.update({f"{arm}.disagreement": r["estimate"], f"{arm}.disagreement_lo": r["lo"],
                       f"{arm}.disagreement_hi": r["hi"], f"{arm}.balanced_agreement": ba[0],
                       f"{arm}.balanced_agreement_lo": ba[1], f"{arm}.balanced_agreement_hi": ba[2]})
    d = rate_interval(p.loc[common].reset_index(), dis["present"] - dis["absent"], n_draws=n_draws, seed=seed)
    values.update({"disagreement_diff_pp": 100 * d["estimate"], "disagreement_diff_pp_lo": 100 * d["lo"],
                   "disagreement_diff_pp_hi": 100 * d["hi"]})
    rows.append({"quantity": f"disagreement at layer {disagreement_layer}, present − absent (points)",
                 "arm": "paired", "value": 100 * d["estimate"], "lo": 100 * d["lo"], "hi": 100 * d["hi"]})
    return TableResult(pd.DataFrame(rows), values=values, index=("quantity", "arm"),
                       metrics={"value": "value", "lo": "value", "hi": "value"},
                       labels={"arm": "report", "value": "estimate", "lo": "95% lo", "hi": "95% hi"},
                       caption="Logit lens at two layers, with patient-clustered intervals: disagreement between "
                               "the two images and its paired difference, balanced agreement with the output.")


def still_apart_table(arms: Mapping[str, pd.DataFrame], *, tv: float = 0.05) -> TableResult:
    """Table 27: per arm (e.g. ``{"image_first": ..., "text_first": ...}``, report-present lens records)
    the trials whose two images' final yes/no distributions are more than ``tv`` apart in total
    variation ("still apart") against the flips (ModaLens App. N.1: 48 vs 6 image first, 122 vs 33 text
    first)."""
    rows, values = [], {}
    for arm, t in arms.items():
        m_c, m_d = ly.margins(lens_array(t["lens_c"])), ly.margins(lens_array(t["lens_d"]))
        flips = (t["readout_c"] != t["readout_d"]).to_numpy()
        apart = ly.still_apart(m_c, m_d, threshold=tv)
        row = {"arm": arm.replace("_", " "), "n_trials": int(len(t)), "n_still_apart": int(apart.sum()),
               "n_flips": int(flips.sum()), "n_apart_not_flipped": int((apart & ~flips).sum())}
        rows.append(row)
        values.update({f"{arm}.{k}": v for k, v in row.items() if k != "arm"})
    return TableResult(pd.DataFrame(rows), values=values, index=("arm",),
                       metrics={k: "count" for k in ("n_trials", "n_still_apart", "n_flips", "n_apart_not_flipped")},
                       labels={"arm": "prompt order", "n_trials": "trials", "n_still_apart": f"still apart (TV > {tv})",
                               "n_flips": "flips", "n_apart_not_flipped": "apart, not flipped"},
                       caption="Table 27: pairs whose final-layer yes/no distributions stay apart, against the flips "
                               "(report present).")


def knockout_difference(arm: pd.DataFrame, controls: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                        subset: np.ndarray | None = None) -> TableResult:
    """Per start layer both ran, the paired flip-rate difference of a knockout ``arm`` minus each control
    (points, patient-clustered percentile interval) on their common trials (``subset``: trial ids, e.g.
    the decisive cases). ModaLens App. N.2: "the paired patient-clustered difference clears zero against
    both controls at layers 0, 4, 8, 12, 16 and 20 ... at layer 16 by +7.75 points [4.67, 11.03]"."""
    fa, la = _ko_flips(arm)
    pid = arm.set_index("trial_id")["patient_id"]
    rows, values = [], {}
    for name, t in controls.items():
        fb, lb = _ko_flips(t)
        common = fa.index.intersection(fb.index)
        if subset is not None:
            common = common.intersection(pd.Index(subset))
        frame = pd.DataFrame({"patient_id": pid.loc[common].to_numpy()})
        for layer in [x for x in la if x in lb]:
            d = fa.loc[common, layer].to_numpy(float) - fb.loc[common, layer].to_numpy(float)
            r = rate_interval(frame, d, n_draws=n_draws, seed=seed)
            rows.append({"control": KNOCKOUT_ARM_LABELS.get(name, name), "start_layer": layer,
                         "n_trials": int(len(common)), "diff": r["estimate"], "lo": r["lo"],
                         "hi": r["hi"], "clears_zero": bool(r["lo"] > 0 or r["hi"] < 0)})
            values.update({f"{name}.L{layer}_pp": 100 * r["estimate"], f"{name}.L{layer}_pp_lo": 100 * r["lo"],
                           f"{name}.L{layer}_pp_hi": 100 * r["hi"]})
    return TableResult(pd.DataFrame(rows), values=values, index=("control", "start_layer"),
                       metrics={"diff": "paired_diff", "lo": "paired_diff", "hi": "paired_diff", "n_trials": "count"},
                       labels={"control": "control arm", "start_layer": "start layer", "n_trials": "trials",
                               "diff": "report arm − control", "clears_zero": "interval excludes 0"},
                       caption="Knockout: the report arm's flip rate minus each control's, paired by trial, with "
                               "patient-clustered intervals.")


def calibration_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Per lens arm the calibration depth -- the first layer whose projected answer agrees with the model's
    own output better than the best constant (balanced agreement > 0.5) -- with its patient-clustered
    interval and the balanced agreement there (ModaLens App. N.1: layer 46 "in all 2,000 draws and all
    eight arms"); ``values["agree_all"]`` says whether every arm's depth and interval are one layer."""
    rows, values = [], {}
    for arm, t in arms.items():
        m_c = ly.margins(lens_array(t["lens_c"]))
        depth = ly.calibration_depth(m_c, clusters=t["patient_id"].to_numpy(), n_draws=n_draws,
                                     rng=np.random.default_rng(seed))
        bal = ly.balanced_agreement(m_c)
        at = float(bal[depth["layer"]]) if depth["layer"] < len(bal) else float("nan")
        rows.append({"arm": arm, "n_trials": int(len(t)), "depth": depth["layer"], "depth_lo": depth["low"],
                     "depth_hi": depth["high"], "balanced_agreement": at})
        values.update({f"{arm}.depth": depth["layer"], f"{arm}.depth_lo": depth["low"], f"{arm}.depth_hi": depth["high"],
                       f"{arm}.balanced_agreement": at})
    frame = pd.DataFrame(rows)
    values["n_arms"] = int(len(frame))
    values["agree_all"] = bool(len(frame) and frame[["depth", "depth_lo", "depth_hi"]].nunique().max() == 1
                               and frame["depth"].nunique() == 1)
    values["min_depth"], values["max_depth"] = int(frame["depth"].min()), int(frame["depth"].max())
    return TableResult(frame, values=values, index=("arm",),
                       metrics={"n_trials": "count", "depth": "value", "depth_lo": "value", "depth_hi": "value",
                                "balanced_agreement": "balanced_accuracy"},
                       labels={"arm": "lens arm", "n_trials": "trials", "depth": "calibration depth",
                               "depth_lo": "95% lo", "depth_hi": "95% hi",
                               "balanced_agreement": "balanced agreement there"},
                       caption="Calibration depth per lens arm: the first layer whose projection agrees with the "
                               "model's output better than a constant, with patient-clustered intervals.")
