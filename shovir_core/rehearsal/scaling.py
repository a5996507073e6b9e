"""A reduced rehearsal's designs: the fixed sample sizes of the papers' designs, scaled with the tree.

A rehearsal at ``--scale s < 1`` writes a tree with the papers' cohort sizes times ``s``
(:func:`shovir_core.rehearsal.synthetic.planted`). Some designs draw a fixed number of patients or
cases from that cohort -- the reference-model validation's 40 patients (ModaLens §4.2), App. N.2's
knockout sample of 400 cases from 282 patients with 300 decisive, App. N.3's 650 probe patients from
the training pool and its 150 steering cases per finding -- and a fixed number cannot be drawn from a
cohort of 1 % of the size. In a reduced rehearsal (and only there: ``$SHOVIR_REHEARSAL_SCALE``, set by
``shovir rehearse`` in every chapter's process) :func:`shovir_core.params.load_params` scales each such
size by the share the tree keeps of the population it is drawn from (:data:`DESIGN_SIZES`), keeping
at least :data:`MIN_SIZE` units where there are so many, so the reduced rehearsal runs the same design
at about the same proportions. At scale 1 nothing changes: the full
rehearsal runs the papers' sizes, as the real run does.

The tuned lens of App. N.1 (Table 34) has two sizes that are not drawn from a planted cohort but
scale with the tree all the same (:data:`LENS_SIZES`): its training steps (the paper's 2,000) and the
corpus texts it draws (``lens_max_texts``, 50,000 WikiText-103 paragraphs; the synthetic corpus has
``max(200, 50,000 x scale)``, :func:`shovir_core.rehearsal.synthetic.write_wikitext`). Each becomes
``round(size x scale)``, at least its floor: 100 steps (the first training length the paper logs,
829.1 after 100 steps; the training-log table keeps that row) and 200 texts (the synthetic corpus's
own floor). At 1 % the lens trains 100 steps on 500 texts instead of 2,000 steps: the 2,000 steps of a
62-layer stand-in alone took longer than every other chapter of the profile together. The rehearsal
report lists, per chapter, every spec key a reduced rehearsal changed (``scaled``: paper -> run).
"""
from __future__ import annotations

import os

from ..errors import UsageError

__all__ = ["REHEARSAL_SCALE_ENV", "DESIGN_SIZES", "LENS_SIZES", "MIN_SIZE", "rehearsal_scale", "scale_design",
           "scaled_keys"]

REHEARSAL_SCALE_ENV = "SHOVIR_REHEARSAL_SCALE"
"""The scale of the rehearsal a process runs in (unset, or 1: the papers' sizes)."""

DESIGN_SIZES: dict[str, dict[str, str]] = {
    "modalens": {"n_patients": "ml_patients"},
    "modalens-surrogate": {"n_patients": "ml_patients"},
    "modalens-distance": {"n_patients": "ml_patients"},
    "modalens-layers": {"n_patients": "ml_patients", "knockout_n_patients": "ml_patients",
                        "knockout_n_cases": "ml_cases", "knockout_n_decisive": "ml_cases"},
    "modalens-interventions": {"n_patients": "ml_patients", "steer_cases_per_finding": "ml_cases",
                               "knockout_n_patients": "ml_patients", "knockout_n_cases": "ml_cases",
                               "knockout_n_decisive": "ml_cases"},
    "modalens-probes": {"n_patients": "ml_patients", "probe_n_patients": "ml_train_patients"},
}
"""Per protocol, the spec keys that are sample sizes, and the planted population each is drawn from
(a key of :func:`shovir_core.rehearsal.synthetic.planted`)."""

LENS_SIZES: dict[str, dict[str, int]] = {
    "modalens-probes": {"lens_steps": 100, "lens_max_texts": 200},
}
"""Per protocol, the spec keys that scale with the rehearsal's scale itself (no planted population), and
the floor of each: the tuned lens's training steps and corpus texts (see the module's docstring)."""


def rehearsal_scale() -> float | None:
    """The scale of ``$SHOVIR_REHEARSAL_SCALE`` (``None`` when unset or 1)."""
    raw = os.environ.get(REHEARSAL_SCALE_ENV)
    if not raw:
        return None
    try:
        scale = float(raw)
    except ValueError:
        raise UsageError(f"${REHEARSAL_SCALE_ENV} must be a number in (0, 1], got {raw!r}") from None
    if not 0 < scale <= 1:
        raise UsageError(f"${REHEARSAL_SCALE_ENV} must be in (0, 1], got {raw!r}")
    return None if scale == 1 else scale


MIN_SIZE = 20
"""A reduced design keeps at least this many of the units it draws (or all the reduced tree has, or the
paper's size when smaller): at 1 % a proportional share of 40 patients is one patient, on whom a macro
average over findings with both targets, a probe's fit or a per-finding steering sample has nothing
to work on. (Found by the 1 % rehearsal: §4.2's validation on one patient gave NaN macro effects.)"""


def scale_design(protocol: str, spec: dict, scale: float) -> dict:
    """``spec`` with its sample sizes scaled to a tree of ``scale`` (a new dict; other keys unchanged).

    Each size becomes ``round(size x planted / paper)`` of its population, at least
    ``min(size, population, MIN_SIZE)`` and at most the planted population; the knockout keeps its
    constraints (cases >= patients; its non-decisive cases scale with the tree, the rest are decisive).

    >>> scale_design("modalens", {"n_patients": 40, "model": "m"}, 0.01)
    {'n_patients': 10, 'model': 'm'}
    >>> scale_design("modalens-layers", {"knockout_n_patients": 282, "knockout_n_cases": 400,
    ...                                  "knockout_n_decisive": 300}, 0.01)
    {'knockout_n_patients': 10, 'knockout_n_cases': 20, 'knockout_n_decisive': 19}
    >>> scale_design("modalens-probes", {"lens_steps": 2000, "lens_max_texts": 50000}, 0.01)
    {'lens_steps': 100, 'lens_max_texts': 500}
    """
    from .synthetic import PLANTED, planted

    out = dict(spec)
    for key, floor in LENS_SIZES.get(protocol, {}).items():
        value = out.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = min(value, max(floor, round(value * scale)))
    sizes = DESIGN_SIZES.get(protocol)
    if not sizes:
        return out
    counts = planted(scale).counts
    for key, population in sizes.items():
        value = out.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            share = counts[population] / PLANTED[population]
            floor = max(1, min(value, counts[population], MIN_SIZE))
            out[key] = min(counts[population], max(floor, round(value * share)))
    cases, patients, decisive = (spec.get(k) for k in ("knockout_n_cases", "knockout_n_patients", "knockout_n_decisive"))
    if isinstance(cases, int) and isinstance(patients, int):
        out["knockout_n_cases"] = max(out["knockout_n_cases"], out["knockout_n_patients"])
    if isinstance(decisive, int) and isinstance(cases, int) and cases:
        # the non-decisive cases scale with the tree and the rest are decisive: a small tree has few
        # non-decisive cases (the 1 % tree: 3 of 32), so a proportional 25 % of 20 cases cannot be drawn
        non_decisive = round((cases - decisive) * counts["ml_cases"] / PLANTED["ml_cases"])
        out["knockout_n_decisive"] = max(0, out["knockout_n_cases"] - non_decisive)
    return out


def scaled_keys(runs: dict, scale: float) -> dict[str, dict[str, list]]:
    """Per run key of a chapter's ``runs`` (the paper's specs, unscaled), ``{spec key: [paper, run]}`` of
    every size a rehearsal at ``scale`` changes (empty at scale 1); the rehearsal report's ``scaled``.

    >>> scaled_keys({"lens": {"protocol": "modalens-probes", "spec": {"lens_steps": 2000, "lens_seed": 0}}}, 0.01)
    {'lens': {'lens_steps': [2000, 100]}}
    """
    if scale >= 1:
        return {}
    out = {}
    for key, r in runs.items():
        new = scale_design(r["protocol"], r["spec"], scale)
        diff = {k: [r["spec"].get(k), v] for k, v in new.items() if r["spec"].get(k) != v}
        if diff:
            out[key] = diff
    return out
