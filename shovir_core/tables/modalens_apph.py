"""ModaLens Appendix H: text-block order (the text block before the image block).

* :func:`order_counts` -- the per-arm counts of Table 27: flips, and pairs "still apart" (the two
  images' yes/no distributions at the answer position differ by more than 0.05 in total variation,
  whichever answer wins; :func:`shovir_core.metrics.prompt_variants.still_apart`), with the order
  effect (text first − image first) per report arm and the report effect (A − P) per order;
* :func:`per_finding_order_effects` -- per finding, the text-first effect on the report-absent
  flip rate (the paper: −21.7 to +14.3 pp, 9 findings down, 5 up, all-14).
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..metrics.prompt_variants import TV_THRESHOLD, still_apart
from ..stats import bootstrap_rates
from .result import TableResult

__all__ = ["ARMS", "order_counts", "per_finding_order_effects", "PAPER_KEYS", "AUDIT_PREFIXES"]

ARMS = ("P", "A", "P_tf", "A_tf")
"""Image first P / A and text first P / A."""

AUDIT_PREFIXES = ("t2.oneq.tf_P", "t2.oneq.order_effect", "t2.oneq.doubles", "t2.pf.", "t2.all14.tf_", "n1.still")
"""Audit checks of the order analysis (the identities the published numbers satisfy)."""


def order_counts(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int, key: str,
                 threshold: float = TV_THRESHOLD) -> TableResult:
    """Table 27 counts and the order effects of one design (lowercase readout and margins).

    Values (under ``key``): ``<arm>.flips``, ``<arm>.still_apart``, ``<arm>.still_apart_not_flipped``,
    ``<arm>.flipped_not_apart``, ``<arm>.flip_rate`` (+ lo/hi); ``P.tf_minus_if`` and
    ``A.tf_minus_if`` (order effect per report arm), ``if.A_minus_P`` and ``tf.A_minus_P`` (report
    effect per order) as ``.diff_pp`` (+ lo/hi); ``order_x_report.interaction_pp``; ``n_trials``.
    """
    missing = [k for k in ARMS if k not in arms]
    if missing:
        raise ValueError(f"order_counts: arms {missing} missing (have {sorted(arms)})")
    r = flip_rate_rows({k: arms[k] for k in ARMS}, readout="lowercase", n_draws=n_draws, seed=seed, key=key,
                       pairs={"P.tf_minus_if": ("P_tf", "P"), "A.tf_minus_if": ("A_tf", "A"),
                              "if.A_minus_P": ("A", "P"), "tf.A_minus_P": ("A_tf", "P_tf")},
                       interactions={"order_x_report": ("A_tf", "P_tf", "A", "P")})
    values = dict(r.values)
    paired = paired_trials({k: arms[k] for k in ARMS})
    rows = []
    for name, t in paired.items():
        yc, yd, _ = answers(t, "lowercase")
        flip = yc != yd
        apart = still_apart(t["margin_c"], t["margin_d"], threshold=threshold).astype(bool)
        counts = {"flips": int(flip.sum()), "still_apart": int(apart.sum()),
                  "still_apart_not_flipped": int((apart & ~flip).sum()), "flipped_not_apart": int((flip & ~apart).sum())}
        for k, v in counts.items():
            values[f"{key}.{name}.{k}"] = v
        rows.append({"arm": name, "order": "text first" if name.endswith("_tf") else "image first",
                     "report": "present" if name.startswith("P") else "absent", **counts,
                     "flip_rate": values[f"{key}.{name}.flip_rate"], "trials": int(len(t))})
    values[f"{key}.tv_threshold"] = float(threshold)
    return TableResult(pd.DataFrame(rows), values, index=("arm",), metrics={"flip_rate": "flip_rate"},
                       labels={"arm": "arm", "order": "order", "report": "report", "flips": "flips",
                               "still_apart": f"still apart (TV > {threshold:g})",
                               "still_apart_not_flipped": "still apart, not flipped",
                               "flipped_not_apart": "flipped, not still apart", "trials": "trials"},
                       caption="Text-block order: flips and still-apart pairs per arm (Table 27 counts)")


def per_finding_order_effects(absent: pd.DataFrame, absent_tf: pd.DataFrame, *, n_draws: int, seed: int,
                              key: str = "h.pf") -> TableResult:
    """Per finding, FR_A(text first) − FR_A(image first) with a patient-clustered interval.

    Values: ``<question_id>.diff_pp`` (+ lo/hi), ``n_down`` / ``n_up`` / ``n_zero`` (findings whose
    report-absent flip rate falls / rises / stays under text first), ``min_pp`` / ``max_pp``.
    """
    a, b = paired_trials({"if": absent, "tf": absent_tf}).values()
    ya_c, ya_d, _ = answers(a, "lowercase")
    yb_c, yb_d, _ = answers(b, "lowercase")
    frame = pd.DataFrame({"patient_id": a["patient_id"].to_numpy(), "finding": a["finding"].to_numpy(),
                          "question_id": a["question_id"].to_numpy(), "f_if": (ya_c != ya_d).astype(float),
                          "f_tf": (yb_c != yb_d).astype(float)})
    res = bootstrap_rates(frame, rates={"if": "f_if", "tf": "f_tf"}, contrasts={"diff": ("diff", "tf", "if")},
                          n_draws=n_draws, seed=seed, strata="question_id")
    values: dict = {}
    rows = []
    for qid, r in res.items():
        put_interval(values, f"{key}.{qid}.diff_pp", r["diff"], scale=100)
        rows.append({"question": qid, "finding": frame.loc[frame["question_id"] == qid, "finding"].iloc[0],
                     "image_first": r["if"][0], "text_first": r["tf"][0], "diff": r["diff"][0],
                     "diff_lo": r["diff"][1], "diff_hi": r["diff"][2],
                     "trials": int((frame["question_id"] == qid).sum())})
    out = pd.DataFrame(rows).sort_values("diff").reset_index(drop=True)
    d = out["diff"].to_numpy()
    values.update({f"{key}.n_down": int((d < 0).sum()), f"{key}.n_up": int((d > 0).sum()),
                   f"{key}.n_zero": int((d == 0).sum()), f"{key}.min_pp": 100 * float(d.min()),
                   f"{key}.max_pp": 100 * float(d.max()), f"{key}.n_findings": int(len(out))})
    return TableResult(out, values, index=("question",), metrics={"image_first": "flip_rate_image_first", "text_first": "flip_rate_text_first", "diff": "paired_diff",
                                             "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"},
                       labels={"question": "question", "finding": "finding", "trials": "trials"},
                       caption="Per finding, report absent: text-first minus image-first flip rate")


PAPER_KEYS: dict[str, str] = {
    "h.oneq.P.flip_rate": "t2.oneq.P", "h.oneq.P_tf.flip_rate": "t2.oneq.tf_P",
    "h.oneq.P.tf_minus_if.diff_pp": "t2.oneq.order_effect", "h.oneq.A.flip_rate": "t2.oneq.A",
    "h.all14.P.tf_minus_if.diff_pp": "t2.all14.tf_P_shift", "h.all14.A.tf_minus_if.diff_pp": "t2.all14.tf_A_shift",
    "h.all14.tf.A_minus_P.diff_pp": "t2.all14.tf_diff",
    "h.pf.n_down": "t2.pf.tf_n_down", "h.pf.n_up": "t2.pf.tf_n_up", "h.pf.min_pp": "t2.pf.tf_lo",
    "h.pf.max_pp": "t2.pf.tf_hi",
}
"""Run value key -> published value id (Table 2's order rows, App. H). Table 27's still-apart counts
(``n1.still_apart_*``) come from the 400-case knockout set of App. N.2 and are shown beside this
chapter's counts without a verdict."""
