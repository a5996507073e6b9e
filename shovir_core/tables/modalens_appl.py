"""ModaLens Appendix L: the second question template.

One-question design, no answer instruction, report present and absent, both images, under the
default template ("Does this chest X-ray show <finding>?") and the second ("Is <finding> present
on this chest X-ray?"; composite "Is any acute cardiopulmonary finding present on this chest
X-ray?"). The paper reports the report-presence difference as P − A (negative) and the
template × report interaction (P − A)_alt − (P − A)_default, all four arms on the same draws.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..stats import clustered_balanced_accuracy, bootstrap_rates
from .result import TableResult

__all__ = ["ARMS", "template_table", "template_accuracy", "PAPER_KEYS", "AUDIT_PREFIXES"]

ARMS = ("P", "A", "P_alt", "A_alt")
"""Default template P / A and second template P / A."""

AUDIT_PREFIXES = ("l.",)
"""Audit checks of this appendix (the identities the published numbers satisfy)."""


def _need(arms: Mapping, what: str) -> None:
    missing = [k for k in ARMS if k not in arms]
    if missing:
        raise ValueError(f"{what}: arms {missing} missing (have {sorted(arms)})")


def template_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                   readout: str = "lowercase") -> TableResult:
    """Flip rates per arm, the report difference P − A per template and the interaction.

    Values (``l.`` keys): ``<arm>.flip_rate`` (+ lo/hi, flips), ``default.P_minus_A.diff_pp``,
    ``alt.P_minus_A.diff_pp``, ``template_x_report.interaction_pp`` (each + lo/hi),
    ``alt_minus_default.P.diff_pp`` and ``...A.diff_pp``, ``n_trials``.
    """
    _need(arms, "template_table")
    r = flip_rate_rows({k: arms[k] for k in ARMS}, readout=readout, n_draws=n_draws, seed=seed, key="l",
                       pairs={"default.P_minus_A": ("P", "A"), "alt.P_minus_A": ("P_alt", "A_alt"),
                              "alt_minus_default.P": ("P_alt", "P"), "alt_minus_default.A": ("A_alt", "A")},
                       interactions={"template_x_report": ("P_alt", "A_alt", "P", "A")})
    frame = r.frame.assign(template=["default", "default", "alt", "alt"], report=["present", "absent"] * 2)
    return TableResult(frame[["template", "report", "flip_rate", "flip_rate_lo", "flip_rate_hi", "flips", "n_trials"]],
                       r.values, index=("template", "report"), metrics={k: v for k, v in r.metrics.items() if k in frame.columns},
                       labels={"template": "template", "report": "report", "flips": "flips", "n_trials": "trials"},
                       caption="Second template: flip rate per arm (one-question, no instruction)")


def template_accuracy(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                      readout: str = "lowercase") -> TableResult:
    """Balanced accuracy, sensitivity and specificity on the original image (its own label) per arm.

    Values ``l.<arm>.balanced_accuracy`` / ``sensitivity`` / ``specificity`` (+ lo/hi) and
    ``l.<arm>.yes_rate``.
    """
    _need(arms, "template_accuracy")
    paired = paired_trials({k: arms[k] for k in ARMS})
    values: dict = {}
    rows = []
    for name, t in paired.items():
        yc, _, valid = answers(t, readout)
        tc = t["target_c"].to_numpy(dtype=float)
        m = valid & ~np.isnan(tc)
        y, g = yc[m], tc[m]
        f = pd.DataFrame({"patient_id": t["patient_id"].to_numpy()[m], "tp": y * g, "fn": (1 - y) * g,
                          "tn": (1 - y) * (1 - g), "fp": y * (1 - g), "pos": g, "neg": 1 - g, "yes": y})
        rates = {"sensitivity": ("tp", "pos"), "specificity": ("tn", "neg"), "yes_rate": "yes"}
        res = bootstrap_rates(f, rates=rates, n_draws=n_draws, seed=seed)
        out = clustered_balanced_accuracy(y, g, clusters=f["patient_id"].to_numpy(), n_draws=n_draws, seed=seed)
        ba = (out["balanced_accuracy"], out["lo"], out["hi"])
        put_interval(values, f"l.{name}.balanced_accuracy", ba)
        for k in ("sensitivity", "specificity", "yes_rate"):
            put_interval(values, f"l.{name}.{k}", res[k])
        rows.append({"arm": name, "balanced_accuracy": ba[0], "balanced_accuracy_lo": ba[1],
                     "balanced_accuracy_hi": ba[2], "sensitivity": res["sensitivity"][0],
                     "specificity": res["specificity"][0], "yes_rate": res["yes_rate"][0], "trials": int(m.sum())})
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("arm",), metrics={"balanced_accuracy": "balanced_accuracy", "sensitivity": "sensitivity",
                                               "specificity": "specificity"},
                       labels={"arm": "arm", "balanced_accuracy_lo": "BA 95% low", "balanced_accuracy_hi": "BA 95% high",
                               "yes_rate": "yes rate", "trials": "trials"},
                       caption="Original image, against its own label: balanced accuracy per template and report arm")


PAPER_KEYS: dict[str, str] = {
    "l.P_alt.flip_rate": "l.P", "l.A_alt.flip_rate": "l.A", "l.alt.P_minus_A.diff_pp": "l.diff",
    "l.default.P_minus_A.diff_pp": "l.default_diff", "l.template_x_report.interaction_pp": "l.interaction",
    "l.A.balanced_accuracy": "l.ba_A_default", "l.A.specificity": "l.spec_A_default",
    "l.P.flip_rate": "t2.oneq.P_rerun", "l.A.flip_rate": "t2.oneq.A",
    "l.A_alt.balanced_accuracy": "l.ba_A", "l.A_alt.specificity": "l.spec_A", "l.P.balanced_accuracy": "l.ba_P",
}
"""Run value key -> published value id (ModaLens App. L)."""
