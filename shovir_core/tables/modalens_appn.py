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
from ..metrics.modalens import balanced_accuracy
from ..protocols.modalens_layers import lens_array
from ..stats import nulls
from ..stats.overlap import jaccard, phi
from .modalens import rate_interval
from .result import TableResult

__all__ = ["planted_facts", "lens_table", "knockout_table", "KNOCKOUT_ARM_LABELS", "knockout_overlap", "settling_table"]


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
                       metrics={"flip_rate": "flip_rate", "balanced_accuracy": "balanced_accuracy",
                                "label_agreement": "accuracy"},
                       labels={"arm": "report", "n_trials": "trials", "lo": "flip 95% lo", "hi": "flip 95% hi",
                               "macro_balanced_accuracy": "balanced accuracy (mean over findings)",
                               "label_agreement": "agreement with the report's label"},
                       caption="Planted facts of the reference model on the held-out evaluation patients.")


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
    return TableResult(frame, values=values,
                       metrics={"disagreement": "flip_rate", "mean_abs_delta_margin": "mean_abs_margin_change",
                                "agreement_final": "accuracy", "majority_floor": "majority_baseline",
                                "balanced_agreement": "balanced_accuracy"},
                       labels={"arm": "report", "layer": "layer (0 = embeddings)",
                               "disagreement": "projected disagreement", "agreement_final": "agreement with final",
                               "balanced_agreement": "balanced agreement with final"},
                       caption="Logit lens per layer: disagreement between the two images, |Δ projected margin|, "
                               "agreement with the final answer.")


KNOCKOUT_ARM_LABELS = {"report_answer": "report → answer query", "report_all": "report → every non-image query",
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
    return TableResult(frame, values=values, metrics={"jaccard": "share", "phi": "phi", "phi_p": "p_value"},
                       labels={"pair": "arms", "start_layer": "start layer", "n_trials": "n",
                               "flips_a": "flips (first)", "flips_b": "flips (second)", "both": "flip in both",
                               "jaccard": "Jaccard", "phi": "φ", "phi_p": "φ p (shuffled pairing)"},
                       caption="Overlap of the flipped-case sets of two knockout arms by start layer.")


def settling_table(present: pd.DataFrame, absent: pd.DataFrame, *, n_perm: int, seed: int) -> TableResult:
    """Settling depth of the source image's projected answer with and without the report, paired by trial.

    The settling layer (:func:`shovir_core.metrics.layers.settling_layer`) is the first layer from
    which the projected answer equals the final one. On the trials both lens records hold: medians
    per arm; the paired mean difference present − absent with its two-sided p-value under a patient
    sign-flip null (:func:`shovir_core.stats.nulls.sign_flip_null`); the median per-trial
    |difference| with the mean and p-value of a null that shuffles the pairing within finding
    (:func:`shovir_core.stats.nulls.shuffled_pairing_null`) -- ModaLens App. N.1 reports that the
    shuffled pairing reproduces the observed median per-case difference.
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
    values = {"n_trials": int(len(common)), "present.median": float(np.median(sp)),
              "absent.median": float(np.median(sa)), "present.mean": float(sp.mean()), "absent.mean": float(sa.mean()),
              "paired_mean_diff": flip["observed"], "paired_mean_diff_p": flip["p_value"],
              "median_abs_diff": shuffled["observed"], "median_abs_diff_null_mean": shuffled["null_mean"],
              "median_abs_diff_p": shuffled["p_value"], "n_perm": int(n_perm)}
    rows = [{"quantity": "median settling layer, report present", "value": values["present.median"], "null": np.nan,
             "p": np.nan},
            {"quantity": "median settling layer, report absent", "value": values["absent.median"], "null": np.nan,
             "p": np.nan},
            {"quantity": "paired mean difference present − absent (layers)", "value": values["paired_mean_diff"],
             "null": 0.0, "p": values["paired_mean_diff_p"]},
            {"quantity": "median per-trial |difference| (layers)", "value": values["median_abs_diff"],
             "null": values["median_abs_diff_null_mean"], "p": values["median_abs_diff_p"]}]
    return TableResult(pd.DataFrame(rows), values=values, metrics={"value": "value", "null": "value", "p": "p_value"},
                       labels={"value": "observed", "null": "null mean", "p": "two-sided p"}, index=("quantity",),
                       caption="Settling depth with and without the report on the same trials, against "
                               "sign-flip and shuffled-pairing nulls.")
