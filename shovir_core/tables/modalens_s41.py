"""Companions of ModaLens §4.1: the 13-finding design and the substitute redraws (Appendix G).

* :func:`design_comparison` -- the all-14 primary design beside the 13-finding design (the
  composite question excluded), lowercase readout on the plain prompt and the generated answer
  under the instruction (the paper: 4.78% / 18.14%, 13.36 [12.16, 14.57]; generated 4.42 / 19.93,
  15.5 [14.5, 16.5]);
* :func:`seed_table` -- the one-question design with the substitute drawn under seeds 0, 1 and 2:
  flip rates per seed, the spread across seeds, the report effect per seed, the interval that
  resamples patients and the substitute draw jointly (``cluster_bootstrap(substitute=...)``), and
  the cases that flip under at least one / all seeds.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..stats import bootstrap_rates
from .modalens import DESIGN_LABELS, design_subset
from .result import TableResult

__all__ = ["design_comparison", "seed_table", "PAPER_KEYS", "AUDIT_PREFIXES"]

AUDIT_PREFIXES = ("g.seed.", "t15.", "design.f13_trials", "g.f13.", "t5.instr.", "t2.oneq.A_rate",
                  "t2.oneq.P_rerun_rate")
"""Audit checks of these companions (the identities the published numbers satisfy)."""


def design_comparison(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                      n_draws_primary: int | None = None) -> TableResult:
    """All-14 vs 13-finding: FR with and without the report, and A − P, per readout.

    ``arms`` maps ``P``, ``A`` (plain prompt) and optionally ``P_instr``, ``A_instr`` (the answer
    instruction, for the generated readout) to all-14 trials. The all-14 rows are the headline
    estimates of ModaLens Tables 2 and 3, bootstrapped with ``n_draws_primary`` draws as those tables
    are (:func:`shovir_core.tables.modalens.primary_comparison`), so each prints the interval it has
    on every page; the 13-finding rows with ``n_draws``. Values ``s41.<design>.<readout>.``
    ``P.flip_rate`` / ``A.flip_rate`` (+ lo/hi) and ``A_minus_P.diff_pp`` (+ lo/hi), and
    ``s41.<design>.n_trials`` and ``s41.<design>.n_questions``.
    """
    for k in ("P", "A"):
        if k not in arms:
            raise ValueError(f"design_comparison: arm {k!r} missing (have {sorted(arms)})")
    blocks = [("lowercase", "P", "A")]
    if "P_instr" in arms and "A_instr" in arms:
        blocks.append(("generated", "P_instr", "A_instr"))
    values: dict = {}
    rows = []
    for design in ("all14", "f13"):
        for readout, p, a in blocks:
            sub = {"P": design_subset(arms[p], design), "A": design_subset(arms[a], design)}
            draws = n_draws_primary if design == "all14" and n_draws_primary else n_draws
            r = flip_rate_rows(sub, readout=readout, n_draws=draws, seed=seed, key=f"s41.{design}.{readout}",
                               pairs={"A_minus_P": ("A", "P")})
            values.update(r.values)
            k = f"s41.{design}.{readout}"
            values[f"s41.{design}.n_trials"] = int(len(sub["P"]))
            values[f"s41.{design}.n_questions"] = int(sub["P"]["finding"].nunique())
            rows.append({"design": DESIGN_LABELS[design], "readout": readout, "P": values[f"{k}.P.flip_rate"],
                         "A": values[f"{k}.A.flip_rate"], "diff": values[f"{k}.A_minus_P.diff_pp"] / 100,
                         "diff_lo": values[f"{k}.A_minus_P.diff_pp_lo"] / 100,
                         "diff_hi": values[f"{k}.A_minus_P.diff_pp_hi"] / 100, "trials": values[f"{k}.n_trials"]})
    return TableResult(pd.DataFrame(rows), values,
                       index=("design", "readout"), metrics={"P": "flip_rate_present", "A": "flip_rate_absent", "diff": "paired_diff", "diff_lo": "paired_diff_lo",
                                "diff_hi": "paired_diff_hi"},
                       labels={"design": "design", "readout": "readout", "trials": "trials"},
                       caption="All-14 beside the 13-finding design (composite excluded)")


def seed_table(arms: Mapping[int, tuple[pd.DataFrame, pd.DataFrame]], *, n_draws: int, seed: int) -> TableResult:
    """Substitute redraws: per seed FR_P, FR_A and A − P; spreads; the joint patient × seed interval.

    ``arms`` maps a substitute seed to its (report present, report absent) one-question trials.
    Every seed has the same cases and questions (only the substitute differs). Values (``s41.seed.``):
    ``<s>.P`` / ``<s>.A`` flip rates and ``<s>.effect_pp`` (A − P, + lo/hi), ``P_spread_pp`` /
    ``A_spread_pp`` / ``effect_spread_pp`` (max − min over seeds; ``max_change_pp`` is the effect's
    spread, the paper's "changes the effect by at most"), ``joint.effect_pp`` (+ lo/hi: patients and seeds resampled
    jointly), ``any_P`` / ``all_P`` / ``any_A`` / ``all_A`` (cases flipping under at least one /
    every seed), ``n_seeds``, ``n_cases``, ``n_changed_substitutes`` (cases whose substitute differs
    between seeds).
    """
    seeds = sorted(arms)
    if len(seeds) < 2:
        raise ValueError(f"seed_table: need at least two substitute seeds, got {seeds}")
    flat = {f"{k}{s}": arms[s][i] for s in seeds for i, k in enumerate(("P", "A"))}
    paired = paired_trials(flat)
    values: dict = {"s41.seed.n_seeds": len(seeds)}
    flips = {}
    rows = []
    stack = []
    for s in seeds:
        p, a = paired[f"P{s}"], paired[f"A{s}"]
        if not (p["substitute_seed"] == s).all():
            raise ValueError(f"seed_table: the record given for seed {s} has substitute seeds "
                             f"{sorted(p['substitute_seed'].unique())}")
        r = flip_rate_rows({"P": p, "A": a}, readout="lowercase", n_draws=n_draws, seed=seed, key="x",
                           pairs={"effect": ("A", "P")})
        for k in ("P", "A"):
            put_interval(values, f"s41.seed.{s}.{k}", (r.values[f"x.{k}.flip_rate"], r.values[f"x.{k}.flip_rate_lo"],
                                                       r.values[f"x.{k}.flip_rate_hi"]))
            values[f"s41.seed.{s}.{k}_flips"] = r.values[f"x.{k}.flips"]
        put_interval(values, f"s41.seed.{s}.effect_pp", (r.values["x.effect.diff_pp"], r.values["x.effect.diff_pp_lo"],
                                                         r.values["x.effect.diff_pp_hi"]))
        for k, t in (("P", p), ("A", a)):
            yc, yd, _ = answers(t, "lowercase")
            flips[(k, s)] = (yc != yd)
        rows.append({"seed": s, "P": values[f"s41.seed.{s}.P"], "A": values[f"s41.seed.{s}.A"],
                     "effect": values[f"s41.seed.{s}.effect_pp"] / 100,
                     "effect_lo": values[f"s41.seed.{s}.effect_pp_lo"] / 100,
                     "effect_hi": values[f"s41.seed.{s}.effect_pp_hi"] / 100,
                     "P flips": values[f"s41.seed.{s}.P_flips"], "A flips": values[f"s41.seed.{s}.A_flips"]})
        stack.append(pd.DataFrame({"patient_id": p["patient_id"].to_numpy(), "substitute_seed": s,
                                   "fP": flips[("P", s)].astype(float), "fA": flips[("A", s)].astype(float)}))
    frame = pd.DataFrame(rows)
    for col, k in (("P", "P_spread_pp"), ("A", "A_spread_pp"), ("effect", "effect_spread_pp")):
        values[f"s41.seed.{k}"] = 100 * float(frame[col].max() - frame[col].min())
    values["s41.seed.max_change_pp"] = values["s41.seed.effect_spread_pp"]  # the paper's "changes the effect by <= 0.34"
    joint = bootstrap_rates(pd.concat(stack, ignore_index=True), rates={"P": "fP", "A": "fA"},
                            contrasts={"effect": ("diff", "A", "P")}, n_draws=n_draws, seed=seed,
                            substitute="substitute_seed")
    put_interval(values, "s41.seed.joint.effect_pp", joint["effect"], scale=100)
    for k in ("P", "A"):
        m = np.vstack([flips[(k, s)] for s in seeds])
        values[f"s41.seed.any_{k}"] = int(m.any(axis=0).sum())
        values[f"s41.seed.all_{k}"] = int(m.all(axis=0).sum())
    subs = np.vstack([paired[f"P{s}"]["sub_image_id"].to_numpy() for s in seeds])
    values["s41.seed.n_cases"] = int(paired[f"P{seeds[0]}"]["case_id"].nunique())
    values["s41.seed.n_changed_substitutes"] = int((subs != subs[0]).any(axis=0).sum())
    return TableResult(frame, values,
                       index=("seed",), metrics={"P": "flip_rate_present", "A": "flip_rate_absent", "effect": "paired_diff",
                                "effect_lo": "paired_diff_lo", "effect_hi": "paired_diff_hi"},
                       labels={"seed": "substitute seed", "P flips": "P flips", "A flips": "A flips"},
                       caption="Substitute redraws (one-question): flip rates and the report effect per seed")


PAPER_KEYS: dict[str, str] = {
    "s41.f13.lowercase.P.flip_rate": "t15.P", "s41.f13.lowercase.A.flip_rate": "t15.A",
    "s41.f13.lowercase.A_minus_P.diff_pp": "t15.diff", "s41.f13.generated.P.flip_rate": "t15.gen.P",
    "s41.f13.generated.A.flip_rate": "t15.gen.A", "s41.f13.generated.A_minus_P.diff_pp": "t15.gen.diff",
    "s41.all14.lowercase.P.flip_rate": "t2.all14.P", "s41.all14.lowercase.A.flip_rate": "t2.all14.A",
    "s41.all14.lowercase.A_minus_P.diff_pp": "t2.all14.diff", "s41.f13.n_trials": "design.f13_trials",
    "s41.seed.0.P": "g.seed.P0", "s41.seed.1.P": "g.seed.P1", "s41.seed.2.P": "g.seed.P2",
    "s41.seed.0.A": "g.seed.A0", "s41.seed.1.A": "g.seed.A1", "s41.seed.2.A": "g.seed.A2",
    "s41.seed.0.effect_pp": "g.seed.effect0", "s41.seed.1.effect_pp": "g.seed.effect1",
    "s41.seed.2.effect_pp": "g.seed.effect2", "s41.seed.P_spread_pp": "g.seed.P_spread",
    "s41.seed.A_spread_pp": "g.seed.A_spread", "s41.seed.max_change_pp": "g.seed.max_change",
    "s41.seed.joint.effect_pp_lo": "g.seed.ci_lo", "s41.seed.joint.effect_pp_hi": "g.seed.ci_hi",
    "s41.seed.any_P": "g.seed.any_P", "s41.seed.all_P": "g.seed.all_P", "s41.seed.any_A": "g.seed.any_A",
    "s41.seed.all_A": "g.seed.all_A",
}
"""Run value key -> published value id (§4.1, Table 15, Appendix G)."""
