"""Formulas of the ModaLens appendices on the prompt and the report (App. D, H, M); the
interactions of App. L and M are contrasts of :func:`shovir_core.stats.bootstrap_rates`.

* :func:`yes_no_total_variation` / :func:`still_apart` -- Table 27: the two images' yes/no
  distributions at the answer position differ by more than 0.05 in total variation;
* :func:`uncertain_flips` / :func:`abstained` -- App. M: answers with the Uncertain option;
* :func:`signed_gap`, :func:`chronology`, :func:`gap_bins` -- App. D: the substitute study
  later or earlier than the source study, and by how much;
* :func:`variant_changes` (:func:`variant_changes_by_arm` over arms) -- App. H, L, M: what a prompt
  variant (text first, a second template, reversed options) changed in a reference model's answers
  (the reference models read the asked finding, never the prompt's wording or order, so the list
  must be empty).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "yes_no_total_variation", "still_apart", "TV_THRESHOLD", "abstained", "uncertain_flips",
    "variant_changes", "variant_changes_by_arm", "signed_gap", "chronology", "gap_bins", "GAP_BINS",
]

TV_THRESHOLD = 0.05
"""Total-variation threshold of the "still apart" count (ModaLens Appendix N.1 / Table 27)."""


def yes_no_total_variation(margin_c, margin_d) -> np.ndarray:
    """Total variation between the two images' yes/no distributions, ``|σ(m_c) − σ(m_d)|``.

    The distribution over {yes, no} renormalised from the two logits has p(yes) = σ(m), m the
    margin logit_yes − logit_no, so the total variation of two such distributions is the
    absolute difference of their p(yes).

    >>> yes_no_total_variation([0.0, 2.0], [0.0, -2.0]).round(3).tolist()
    [0.0, 0.762]
    """
    mc, md = np.asarray(margin_c, dtype=float), np.asarray(margin_d, dtype=float)
    if mc.shape != md.shape:
        raise ValueError(f"margins differ in shape: {mc.shape} vs {md.shape}")
    if np.isnan(mc).any() or np.isnan(md).any():
        raise ValueError("margins contain NaN")
    return np.abs(1.0 / (1.0 + np.exp(-mc)) - 1.0 / (1.0 + np.exp(-md)))


def still_apart(margin_c, margin_d, *, threshold: float = TV_THRESHOLD) -> np.ndarray:
    """1 where the two images' yes/no distributions differ by more than ``threshold`` (either answer wins)."""
    return (yes_no_total_variation(margin_c, margin_d) > threshold).astype(np.int8)


def abstained(answers) -> np.ndarray:
    """1 where a parsed generated answer is ``Uncertain``."""
    return (pd.Series(answers).astype(object) == "Uncertain").to_numpy().astype(np.int8)


def uncertain_flips(answer_c, answer_d, *, options=("Yes", "No", "Uncertain")) -> tuple[np.ndarray, np.ndarray]:
    """Flips counting a change to or from Uncertain as a change, and the scoreable mask.

    Returns ``(flip, valid)``: ``flip`` is 1[answer_c ≠ answer_d] where both answers are one of
    ``options``; ``valid`` is False where either is unscoreable or missing.

    >>> f, v = uncertain_flips(["Yes", "Uncertain", "No", "unscoreable"], ["Uncertain", "Uncertain", "No", "No"])
    >>> f.tolist(), v.tolist()
    ([1, 0, 0, 0], [True, True, True, False])
    """
    c, d = pd.Series(answer_c).astype(object).to_numpy(), pd.Series(answer_d).astype(object).to_numpy()
    if len(c) != len(d):
        raise ValueError(f"answers differ in length: {len(c)} vs {len(d)}")
    valid = np.isin(c, list(options)) & np.isin(d, list(options))
    return ((c != d) & valid).astype(np.int8), valid


def variant_changes(default: pd.DataFrame, variant: pd.DataFrame, *, columns=("readout_c", "readout_d"),
                    margins=("margin_c", "margin_d"), atol: float = 1e-12, same_trials: bool = False) -> list[str]:
    """What ``variant`` (the trials of a prompt variant) changed against ``default`` (ModaLens App. H,
    L, M): one line per ``columns`` entry that differs on some trial and per ``margins`` entry that
    moves by more than ``atol``; empty when the variant leaves the answers unchanged.

    Every default trial must be in the variant (``same_trials``: and no other).

    >>> d = pd.DataFrame({"trial_id": ["a", "b"], "readout_c": [1, 0], "readout_d": [1, 1],
    ...                   "margin_c": [0.5, -0.2], "margin_d": [0.1, 0.3]})
    >>> variant_changes(d, d.iloc[::-1])
    []
    >>> variant_changes(d, d.assign(readout_d=[1, 0], margin_c=[0.5, -0.25]))
    ['readout_d differs on 1 of 2 trials', 'margin_c moves by up to 0.05']
    """
    d, v = default.set_index("trial_id"), variant.set_index("trial_id")
    missing = d.index.difference(v.index)
    extra = v.index.difference(d.index) if same_trials else v.index[:0]
    if len(missing) or len(extra):
        return [f"the variant lacks {len(missing)} and adds {len(extra)} of the default's {len(d)} trials"]
    v = v.loc[d.index]
    out = [f"{c} differs on {int((d[c] != v[c]).sum())} of {len(d)} trials" for c in columns
           if not (d[c] == v[c]).all()]
    for c in margins or ():
        delta = np.abs(d[c].to_numpy(float) - v[c].to_numpy(float))
        if not (delta <= atol).all():
            out.append(f"{c} moves by up to {float(np.nanmax(delta)):.3g}")
    return out


def variant_changes_by_arm(groups: Mapping[str, Mapping[str, pd.DataFrame]], *, variant: str,
                           reports: Sequence[str] = ("P", "A"), **options) -> list[str]:
    """:func:`variant_changes` of each group's ``<report>_<variant>`` arm against its ``<report>`` arm,
    one line ``"<group>, report <report>: <change>"`` per change; empty when the prompt variant leaves
    every answer (and margin) unchanged, as it must for the reference models (ModaLens App. H, L, M:
    text first ``tf``, second template ``alt``, reversed options ``rev``). ``options`` go to
    :func:`variant_changes`.

    >>> d = pd.DataFrame({"trial_id": ["a"], "readout_c": [1], "readout_d": [0], "margin_c": [0.5], "margin_d": [0.1]})
    >>> variant_changes_by_arm({"ref": {"P": d, "P_alt": d, "A": d, "A_alt": d.assign(readout_d=[1])}}, variant="alt")
    ['ref, report A: readout_d differs on 1 of 1 trials']
    """
    return [f"{name}, report {report}: {change}" for name, group in groups.items() for report in reports
            for change in variant_changes(group[report], group[f"{report}_{variant}"], **options)]


def signed_gap(trials: pd.DataFrame) -> tuple[pd.Series, str]:
    """The substitute study's time relative to the source study, and its unit.

    ``gap_days`` (substitute − source, days; MIMIC-CXR study dates) when the record has it, else the
    difference of the NIH follow-up numbers (``follow_up_d − follow_up_c``, in visits), else all NaN
    (``"none"``). Cross-patient pairs have no chronology (NaN).
    """
    same = (trials["pair_type"] == "same-patient").to_numpy() if "pair_type" in trials.columns else \
        np.ones(len(trials), dtype=bool)
    if "gap_days" in trials.columns and trials["gap_days"].notna().any():
        gap, unit = trials["gap_days"].astype(float), "days"
    elif {"follow_up_c", "follow_up_d"} <= set(trials.columns):
        gap = trials["follow_up_d"].astype(float) - trials["follow_up_c"].astype(float)
        unit = "follow-up visits"
    else:
        return pd.Series(np.nan, index=trials.index), "none"
    return gap.where(same), unit


def chronology(gap) -> np.ndarray:
    """``later`` (substitute after the source), ``earlier``, ``tie`` (same time) or ``undated`` per pair.

    >>> chronology([3.0, -1.0, 0.0, float("nan")]).tolist()
    ['later', 'earlier', 'tie', 'undated']
    """
    g = np.asarray(gap, dtype=float)
    return np.where(np.isnan(g), "undated", np.where(g > 0, "later", np.where(g < 0, "earlier", "tie")))


GAP_BINS: dict[str, tuple[tuple[float, str], ...]] = {
    "days": ((30.0, "<= 30 days"), (365.0, "31-365 days"), (np.inf, "> 365 days")),
    "follow-up visits": ((1.0, "1 visit"), (3.0, "2-3 visits"), (np.inf, ">= 4 visits")),
}
"""Upper bounds (inclusive) and labels of the time-gap bins of Table 11, per unit."""


def gap_bins(gap, unit: str) -> np.ndarray:
    """The :data:`GAP_BINS` label of each ``|gap|`` (``"undated"`` where NaN).

    >>> gap_bins([-10, 400, 200, float("nan")], "days").tolist()
    ['<= 30 days', '> 365 days', '31-365 days', 'undated']
    """
    if unit not in GAP_BINS:
        raise ValueError(f"gap_bins: unit {unit!r}; use one of {sorted(GAP_BINS)}")
    g = np.abs(np.asarray(gap, dtype=float))
    out = np.full(g.shape, "undated", dtype=object)
    todo = ~np.isnan(g)
    for bound, label in GAP_BINS[unit]:
        hit = todo & (g <= bound)
        out[hit] = label
        todo &= ~hit
    return out
