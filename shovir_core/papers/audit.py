"""Audit the papers' published numbers: recompute every derivable number and compare.

The checks of a paper come from three places:

* ``data/<paper>_checks.yaml``: hand-written checks, each an expression over the
  paper's values (:mod:`.expression`) for the stated number and for its recomputation
  (rates from counts, differences, ratios, sums of denominators, 2×2 interactions,
  κ from agreement, balanced accuracy from answer counts, restated values, and text
  claims against the paper's own tables);
* ShoViR Table 1: every Δ_FN cell against Baseline − Full Noise Image (generated);
* every value printed with a 95% interval: the estimate lies inside it (generated).

Comparison rule
---------------
A rounded input stands for its rounding interval, so a recomputation is a range.
``==`` passes when the stated value is within the tolerance of that range; the
default tolerance is ±1 in the stated value's last digit,
and a check may set ``tolerance_units`` (e.g. 0.5 for a rate that must be a
correctly rounded ``k/n``) or an absolute ``tolerance``. Inequalities
(``<=``, ``>=``, ``<``, ``>``) pass when some value inside the range satisfies
them against the bound widened by half a unit of its last digit (a value that
rounds to the bound satisfies it). A label claim passes when the stated label is
reachable inside the rounding intervals. A check that fails is ``flagged``: an
expected, documented discrepancy of the paper, not an error of the audit.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import pandas as pd
from .. import yaml_text

from .expression import ExpressionError, evaluate
from .values import TABLE1_METRICS, PaperDataError, Reported, _check_paper, load_values, parse_number

__all__ = [
    "Check", "KINDS", "OPS", "AUDIT_COLUMNS", "load_checks", "checks_of", "run_check", "audit", "engine_sha256",
]

KINDS = (
    "rate_from_counts", "implied_count", "difference", "ratio", "sum", "product", "delta_column",
    "interaction", "kappa", "balanced_accuracy", "restatement", "bound", "ci_contains", "text_claim",
)
"""Kinds of check, used to group the audit table."""

OPS = ("==", "<=", ">=", "<", ">")

AUDIT_COLUMNS = [
    "id", "paper", "location", "kind", "description", "op", "stated", "recomputed",
    "stated_value", "recomputed_value", "difference", "recomputed_low", "recomputed_high", "tolerance",
    "status", "formula", "inputs", "note",
]
"""Columns of :func:`audit`, in order."""


@dataclass(frozen=True)
class Check:
    """One consistency check of a paper (see the module docstring for the rule)."""

    paper: str
    id: str
    location: str
    kind: str
    desc: str
    stated: str
    recompute: str
    op: str = "=="
    tolerance: float | None = None
    tolerance_units: float | None = None
    note: str = ""


_CHECK_FIELDS = {"id", "location", "kind", "desc", "stated", "recompute", "op", "tolerance",
                 "tolerance_units", "note"}


def _check(paper: str, raw: dict, where: str) -> Check:
    if not isinstance(raw, dict):
        raise PaperDataError(f"{where}: each check must be a mapping")
    missing = [k for k in ("id", "location", "kind", "desc", "stated", "recompute") if not raw.get(k)]
    if missing:
        raise PaperDataError(f"{where} ({raw.get('id', '?')}): missing {missing}")
    unknown = set(raw) - _CHECK_FIELDS
    if unknown:
        raise PaperDataError(f"{where} ({raw['id']}): unknown fields {sorted(unknown)}")
    if raw["kind"] not in KINDS:
        raise PaperDataError(f"{where} ({raw['id']}): kind {raw['kind']!r} not in {KINDS}")
    if raw["stated"].strip() == raw["recompute"].strip():
        raise PaperDataError(f"{where} ({raw['id']}): stated and recompute are the same expression")
    op = raw.get("op", "==")
    if op not in OPS:
        raise PaperDataError(f"{where} ({raw['id']}): op {op!r} not in {OPS}")
    tol = float(raw["tolerance"]) if "tolerance" in raw else None
    units = float(raw["tolerance_units"]) if "tolerance_units" in raw else None
    if tol is not None and units is not None:
        raise PaperDataError(f"{where} ({raw['id']}): give tolerance or tolerance_units, not both")
    return Check(paper=paper, id=f"{paper}.{raw['id']}", location=raw["location"], kind=raw["kind"],
                 desc=raw["desc"], stated=str(raw["stated"]), recompute=str(raw["recompute"]), op=op,
                 tolerance=tol, tolerance_units=units, note=raw.get("note", ""))


def _table1_delta_checks() -> list[Check]:
    values = load_values("shovir")
    out = []
    for item in values.values():
        k = item.keys
        if k.get("table") != "1" or k.get("arm") != "delta_fn":
            continue
        stem = item.id.rsplit(".", 2)[0]
        metric = k["metric"]
        out.append(Check(
            paper="shovir", id=f"shovir.t1.delta.{k['dataset']}.{k['model'].replace('-', '_')}.{metric}",
            location="Table 1", kind="delta_column",
            desc=f"Δ_FN {metric} of {k['model']} on {k['dataset']} = Baseline − Full Noise Image",
            stated=item.id, recompute=f"{stem}.baseline.{metric} - {stem}.full_noise.{metric}"))
    if len(out) != 32 or not set(TABLE1_METRICS) >= {c.id.rsplit(".", 1)[1] for c in out}:
        raise PaperDataError(f"ShoViR Table 1 must have 32 Δ_FN cells, found {len(out)}")
    return out


@lru_cache(maxsize=None)
def load_checks(paper: str) -> tuple[Check, ...]:
    """The hand-written checks of ``paper`` (``data/<paper>_checks.yaml``)."""
    _check_paper(paper)
    name = f"{paper}_checks.yaml"
    text = resources.files("shovir_core.papers.data").joinpath(name).read_text(encoding="utf-8")
    doc = yaml_text.base_load(text)
    if not isinstance(doc, dict) or doc.get("paper") != paper or not isinstance(doc.get("checks"), list):
        raise PaperDataError(f"{name}: expected a mapping with 'paper: {paper}' and a 'checks' list")
    return tuple(_check(paper, raw, f"{name} item {i}") for i, raw in enumerate(doc["checks"]))


def checks_of(paper: str) -> tuple[Check, ...]:
    """Every check of ``paper``: hand-written, then generated (Table 1 Δ columns; intervals).

    Raises
    ------
    PaperDataError
        On duplicate check ids.
    """
    checks = list(load_checks(paper))
    if paper == "shovir":
        checks += _table1_delta_checks()
    seen: set[str] = set()
    for c in checks:
        if c.id in seen:
            raise PaperDataError(f"{paper}: duplicate check id {c.id!r}")
        seen.add(c.id)
    return tuple(checks)


def _fmt(v, decimals: int | None) -> str:
    if isinstance(v, frozenset):
        return "; ".join(sorted(v))
    if isinstance(v, str):
        return v
    if not math.isfinite(v):
        return ""
    if decimals in (0, None) and float(v).is_integer():
        return str(int(v))
    d = 4 if decimals is None else min(decimals + 2, 6)
    return f"{v:.{d}f}"


def _is_literal(expr: str) -> bool:
    try:
        parse_number(expr, where="stated")
    except PaperDataError:
        return False
    return True


def _single_id(expr: str, values: Mapping[str, Reported]) -> Reported | None:
    return values.get(expr.strip())


def run_check(check: Check, values: Mapping[str, Reported] | None = None) -> dict:
    """Evaluate one check; returns a row of :func:`audit` (a dict with :data:`AUDIT_COLUMNS`).

    Raises
    ------
    ExpressionError
        Naming the check when an expression is malformed or names an unknown value.
    """
    values = load_values(check.paper) if values is None else values
    try:
        stated = evaluate(check.stated, values)
        rec = evaluate(check.recompute, values)
    except ExpressionError as exc:
        raise ExpressionError(f"check {check.id}: {exc}") from None
    ref = _single_id(check.stated, values)
    row = {"id": check.id, "paper": check.paper, "location": check.location, "kind": check.kind,
           "description": check.desc, "op": check.op, "formula": check.recompute,
           "inputs": ", ".join(rec.inputs), "note": check.note}
    if stated.categorical or rec.categorical:
        if not (stated.categorical and rec.categorical):
            raise ExpressionError(f"check {check.id}: compares a label with a number")
        if check.op != "==":
            raise ExpressionError(f"check {check.id}: labels compare with '==' only")
        passed = stated.value in rec.possible
        row.update(stated=_fmt(stated.value, None), recomputed=_fmt(rec.value, None),
                   stated_value=math.nan, recomputed_value=math.nan, difference=math.nan, recomputed_low=math.nan,
                   recomputed_high=math.nan, tolerance=math.nan,
                   status="passed" if passed else "flagged")
        return row
    quantum = ref.quantum if ref is not None else 0.0
    if check.tolerance is not None:
        tol = check.tolerance
    else:
        units = check.tolerance_units if check.tolerance_units is not None else (1.0 if check.op == "==" else 0.5)
        tol = units * quantum
    if ref is not None or not stated.inputs:
        s_lo = s_hi = stated.value
    else:
        s_lo, s_hi = stated.low, stated.high
    eps = 1e-9 * max(1.0, abs(stated.value), abs(rec.value))
    if check.op == "==":
        gap = max(0.0, s_lo - rec.high, rec.low - s_hi)
        passed = gap <= tol + eps
    elif check.op in ("<=", "<"):
        passed = rec.low <= s_hi + tol + eps if check.op == "<=" else rec.low < s_hi + tol + eps
    else:
        passed = rec.high >= s_lo - tol - eps if check.op == ">=" else rec.high > s_lo - tol - eps
    decimals = ref.decimals if ref is not None else None
    if ref is not None:
        stated_text = ref.text
    elif _is_literal(check.stated):
        stated_text = check.stated.strip()
    else:
        stated_text = _fmt(stated.value, decimals)
    row.update(stated=stated_text, recomputed=_fmt(rec.value, decimals), stated_value=float(stated.value),
               recomputed_value=float(rec.value), difference=float(stated.value) - float(rec.value),
               recomputed_low=float(rec.low),
               recomputed_high=float(rec.high), tolerance=float(tol),
               status="passed" if passed else "flagged")
    return row


def _ci_rows(paper: str, values: Mapping[str, Reported]) -> list[dict]:
    rows = []
    for item in values.values():
        if item.ci is None:
            continue
        lo, hi = item.ci_values
        tol = item.half_width
        inside = lo <= hi and lo - tol <= item.value <= hi + tol
        rows.append({
            "id": f"{paper}.ci.{item.id}", "paper": paper, "location": item.location, "kind": "ci_contains",
            "description": f"the estimate of '{item.desc}' lies inside its 95% interval", "op": "==",
            "stated": item.text, "recomputed": f"[{item.ci[0]}, {item.ci[1]}]",
            "stated_value": float(item.value), "recomputed_value": math.nan, "difference": math.nan,
            "recomputed_low": lo,
            "recomputed_high": hi, "tolerance": tol, "status": "passed" if inside else "flagged",
            "formula": f"{item.id}.ci", "inputs": item.id, "note": "",
        })
    return rows


def audit(paper: str) -> pd.DataFrame:
    """Run every check of ``paper``; one row per check with :data:`AUDIT_COLUMNS`.

    ``status`` is ``passed`` or ``flagged``; ``stated``/``recomputed`` are display
    strings, ``*_value``/``recomputed_low``/``recomputed_high`` the numbers (NaN for
    label claims).

    Examples
    --------
    >>> df = audit("shovir")
    >>> sorted(df["status"].unique())
    ['flagged', 'passed']
    """
    _check_paper(paper)
    values = load_values(paper)
    rows = [run_check(c, values) for c in checks_of(paper)] + _ci_rows(paper, values)
    df = pd.DataFrame(rows, columns=AUDIT_COLUMNS)
    if df["id"].duplicated().any():
        raise PaperDataError(f"{paper}: duplicate check id {df['id'][df['id'].duplicated()].iloc[0]!r}")
    return df


def engine_sha256() -> str:
    """SHA-256 of the audit's source files (so a change of arithmetic makes a new record)."""
    import hashlib

    h = hashlib.sha256()
    pkg = resources.files("shovir_core.papers")
    for name in ("audit.py", "derive.py", "expression.py", "values.py"):
        h.update(name.encode() + b"\0" + pkg.joinpath(name).read_bytes() + b"\0")
    return h.hexdigest()

