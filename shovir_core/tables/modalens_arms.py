"""Shared machinery of the ModaLens appendix tables on the prompt and the report (D, H, L, M,
text controls, §4.1 companions): several arms paired on their common trials, rates of per-trial
indicators with patient-clustered intervals, and contrasts between arms computed inside each draw.

Arms are the ``trials`` frames of ``modalens`` records (one record per dataset, model and arm).
Every interval comes from :func:`shovir_core.stats.bootstrap_rates` (a patient-clustered percentile
bootstrap in which all rates and all their contrasts are evaluated on the same draws; ModaLens §3,
"Statistics").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..stats import bootstrap_rates
from .modalens import answers, pair_arms
from .result import TableResult

__all__ = [
    "paired_trials", "flip_frame", "flip_rate_rows", "put_interval", "audit_rows",
]

def paired_trials(arms: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The arms restricted to their common trial ids, in one order (:func:`tables.modalens.pair_arms`)."""
    names = list(arms)
    if len(names) == 1:
        return {names[0]: arms[names[0]].sort_values("trial_id").reset_index(drop=True)}
    return dict(zip(names, pair_arms(*arms.values(), names=names)))


def flip_frame(arms: Mapping[str, pd.DataFrame], *, readout: str | Mapping[str, str] = "lowercase") -> pd.DataFrame:
    """One row per common trial scoreable in every arm: ids and ``flip__<arm>`` (1 = the answer moved).

    ``readout`` is one readout for all arms or a mapping arm -> readout. ``frame.attrs`` holds
    ``n_common`` (common trials) and ``n_excluded`` (of those, unscoreable in some arm).
    """
    paired = paired_trials(arms)
    first = next(iter(paired.values()))
    valid = np.ones(len(first), dtype=bool)
    flips = {}
    for name, t in paired.items():
        r = readout if isinstance(readout, str) else readout[name]
        yc, yd, v = answers(t, r)
        flips[name] = (yc != yd).astype(float)
        valid &= v
    keep = ["trial_id", "patient_id", "case_id", "finding"]
    out = first[keep].copy()
    for name, f in flips.items():
        out[f"flip__{name}"] = f
    out = out[valid].reset_index(drop=True)
    out.attrs.update(n_common=int(len(first)), n_excluded=int((~valid).sum()))
    return out


def put_interval(values: dict, key: str, interval: tuple[float, float, float], *, scale: float = 1.0) -> None:
    """``values[key]``, ``values[key_lo]``, ``values[key_hi]`` from ``(estimate, lo, hi)`` times ``scale``."""
    est, lo, hi = interval
    values[key], values[f"{key}_lo"], values[f"{key}_hi"] = scale * est, scale * lo, scale * hi


def flip_rate_rows(arms: Mapping[str, pd.DataFrame], *, reference: str | None = None,
                   readout: str | Mapping[str, str] = "lowercase", n_draws: int, seed: int, key: str,
                   pairs: Mapping[str, tuple[str, str]] | None = None,
                   interactions: Mapping[str, tuple[str, str, str, str]] | None = None) -> TableResult:
    """Flip rate of every arm on their common trials, with paired differences and interactions.

    ``reference`` adds, per arm, the paired difference arm − reference. ``pairs`` maps a name to
    ``(a, b)`` for further differences a − b, ``interactions`` to ``(a, b, c, d)`` for
    (a − b) − (c − d). Values (keys under ``key``): ``<arm>.flip_rate`` (+``_lo``, ``_hi``),
    ``<arm>.flips``, ``<arm>.vs_<reference>.diff_pp`` (+ lo/hi), ``<name>.diff_pp`` and
    ``<name>.interaction_pp`` (+ lo/hi), ``n_trials``, ``n_patients``, ``n_excluded``.
    """
    frame = flip_frame(arms, readout=readout)
    if frame.empty:
        raise ValueError(f"flip_rate_rows ({key}): no trial is scoreable in every arm")
    names = list(arms)
    if reference is not None and reference not in names:
        raise ValueError(f"flip_rate_rows ({key}): reference arm {reference!r} not in {names}")
    rates = {n: f"flip__{n}" for n in names}
    contrasts: dict[str, tuple] = {}
    if reference is not None:
        contrasts.update({f"{n}.vs_{reference}": ("diff", n, reference) for n in names if n != reference})
    for name, (a, b) in (pairs or {}).items():
        contrasts[name] = ("diff", a, b)
    for name, (a, b, c, d) in (interactions or {}).items():
        contrasts[f"{name}.interaction"] = ("interaction", a, b, c, d)
    res = bootstrap_rates(frame, rates=rates, contrasts=contrasts, n_draws=n_draws, seed=seed)
    values: dict = {}
    rows = []
    for n in names:
        put_interval(values, f"{key}.{n}.flip_rate", res[n])
        values[f"{key}.{n}.flips"] = int(frame[f"flip__{n}"].sum())
        row = {"arm": n, "flip_rate": res[n][0], "flip_rate_lo": res[n][1], "flip_rate_hi": res[n][2],
               "flips": int(frame[f"flip__{n}"].sum())}
        if reference is not None:
            c = res.get(f"{n}.vs_{reference}", (0.0, 0.0, 0.0))
            row.update({"diff": c[0], "diff_lo": c[1], "diff_hi": c[2]})
            if n != reference:
                put_interval(values, f"{key}.{n}.vs_{reference}.diff_pp", c, scale=100)
        rows.append(row)
    for name in (pairs or {}):
        put_interval(values, f"{key}.{name}.diff_pp", res[name], scale=100)
    for name in (interactions or {}):
        put_interval(values, f"{key}.{name}.interaction_pp", res[f"{name}.interaction"], scale=100)
    values.update({f"{key}.n_trials": int(len(frame)), f"{key}.n_patients": int(frame["patient_id"].nunique()),
                   f"{key}.n_excluded": int(frame.attrs["n_excluded"])})
    out = pd.DataFrame(rows)
    out["n_trials"] = int(len(frame))
    metrics = {"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate_lo", "flip_rate_hi": "flip_rate_hi"}
    if reference is not None:
        metrics.update({"diff": "paired_diff", "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"})
    return TableResult(out, values, metrics=metrics, labels={"arm": "arm", "flips": "flips", "n_trials": "trials"},
                       caption=f"Flip rates on {len(frame)} common trials ({readout if isinstance(readout, str) else 'per-arm'} readout)")


# --------------------------------------------------------------------------- the paper
def audit_rows(prefixes: Iterable[str], *, ids: Sequence[str] = ()) -> TableResult:
    """The audit's checks of ModaLens (:func:`shovir_core.papers.audit`) whose id starts with a prefix
    or is listed in ``ids``: location, description, stated, recomputed, status, indexed by the check id
    without the ``modalens.`` prefix (``d.strata``; interval checks ``ci.<value id>``)."""
    from ..papers import audit
    from .audit import audit_table

    prefixes = tuple(prefixes)
    checks = audit("modalens")
    checks = checks.assign(id=checks["id"].str.removeprefix("modalens."))  # "d.strata", "ci.d.hist.fr"
    keep = checks["id"].map(lambda i: i.startswith(prefixes) or i in set(ids)
                            or i.removeprefix("ci.").startswith(prefixes))
    if not keep.any():
        raise ValueError(f"audit_rows: no ModaLens check matches {prefixes} / {list(ids)}")
    return audit_table(checks[keep])
