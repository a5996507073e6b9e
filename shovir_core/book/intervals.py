"""One interval per estimate, book-wide: the glued intervals of the executed notebooks, compared.

Issue 30: the demo's all-14 A − P report effect printed as [3.69, 4.68] on two pages and [3.70, 4.68]
on three, because two chapters bootstrapped the same contrast of the same records with different
numbers of draws. :func:`interval_conflicts` reads every executed notebook of the book, pairs each
glued estimate with its glued interval bounds (``<x>_lo`` / ``<x>_hi`` keys, the way
:func:`shovir_core.metrics.arms.put_interval` and the tables modules name them) and the
records the glue index gives it (``metadata.shovir.glue``, :mod:`shovir_core.book.publish`), and
reports two intervals of one estimate -- the same non-zero value from an overlapping set of records --
that differ.
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GluedInterval", "glued_values", "glued_intervals", "interval_conflicts", "CONTRASTS"]

CONTRASTS = r"diff|minus|effect|interaction"
"""Glue keys of contrasts (A − P, order effects, interactions): the estimates the book test holds to one
interval (``interval_conflicts(book, only=CONTRASTS)``)."""

_LO = re.compile(r"_lo(?=_|$)|(?<=\.)lo$")


@dataclass(frozen=True)
class GluedInterval:
    """An estimate glued with its interval bounds in one notebook, and the records behind it."""

    notebook: str
    key: str
    estimate: float
    lo: float
    hi: float
    records: frozenset


def glued_values(notebook: dict) -> dict[str, object]:
    """Glue key -> value (its ``text/plain`` read back) of one executed notebook (nbformat JSON)."""
    out = {}
    for cell in notebook.get("cells", []):
        for o in cell.get("outputs", []) or []:
            name = ((o.get("metadata") or {}).get("scrapbook") or {}).get("name")
            text = (o.get("data") or {}).get("application/papermill.record/text/plain")
            if name is None or text is None:
                continue
            try:
                out[name] = ast.literal_eval(text if isinstance(text, str) else "".join(text))
            except (ValueError, SyntaxError):
                out[name] = text
    return out


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def glued_intervals(notebook: dict, name: str) -> list[GluedInterval]:
    """Every ``(estimate, lo, hi)`` glued in ``notebook`` (keys ``<x>_lo``, ``<x>_hi`` beside ``<x>``:
    ``a.diff_pp`` with ``a.diff_pp_lo`` or ``a.diff_lo_pp``), with the records its glue index names.

    >>> nb = {"cells": [{"outputs": [
    ...     {"data": {"application/papermill.record/text/plain": repr(v)},
    ...      "metadata": {"scrapbook": {"name": k}}} for k, v in
    ...     (("t.diff_pp", 4.2), ("t.diff_lo_pp", 3.69), ("t.diff_hi_pp", 4.68))]}],
    ...       "metadata": {"shovir": {"glue": {"t.diff_pp": [{"run_id": "m/a/1"}]}}}}
    >>> [(g.key, g.lo, g.hi, sorted(g.records)) for g in glued_intervals(nb, "x")]
    [('t.diff_pp', 3.69, 4.68, ['m/a/1'])]
    """
    values = glued_values(notebook)
    index = ((notebook.get("metadata") or {}).get("shovir") or {}).get("glue") or {}
    out = []
    for key in values:
        m = _LO.search(key)
        if not m:
            continue
        est_key = key[:m.start()] + key[m.end():]
        hi_key = key[:m.start()] + ("_hi" if m.group(0) == "_lo" else "hi") + key[m.end():]
        est, lo, hi = (_number(values.get(k)) for k in (est_key, key, hi_key))
        if est is None or lo is None or hi is None or est_key.endswith("."):
            continue
        records = frozenset(r.get("run_id") for r in (index.get(est_key) or []) if isinstance(r, dict))
        out.append(GluedInterval(name, est_key, est, lo, hi, records))
    return out


def interval_conflicts(book_dir: Path, *, only: str | None = None) -> list[str]:
    """Estimates glued with two different intervals in the executed notebooks of ``book_dir``.

    Two glued intervals belong to one estimate when their estimates are the same non-zero number and
    their records overlap; they conflict when a bound differs (beyond float noise). ``only`` (a
    regular expression) keeps the estimates whose glue key it matches (:data:`CONTRASTS`).
    """
    found: list[GluedInterval] = []
    for path in sorted(Path(book_dir).glob("*.ipynb")):
        found += glued_intervals(json.loads(path.read_text(encoding="utf-8")), path.stem)
    if only is not None:
        found = [g for g in found if re.search(only, g.key)]
    by_estimate: dict[float, list[GluedInterval]] = {}
    for g in found:
        if g.estimate != 0 and math.isfinite(g.estimate) and g.records:
            by_estimate.setdefault(g.estimate, []).append(g)
    out = []
    for est, group in by_estimate.items():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                same = math.isclose(a.lo, b.lo, rel_tol=1e-9, abs_tol=1e-12) and \
                    math.isclose(a.hi, b.hi, rel_tol=1e-9, abs_tol=1e-12)
                if not same and a.records & b.records:
                    out.append(f"{est:g}: [{a.lo:g}, {a.hi:g}] ({a.notebook}: {a.key}) but [{b.lo:g}, {b.hi:g}] "
                               f"({b.notebook}: {b.key}) from the same records")
    return out
