"""The paper's own consistency checks (identities its published numbers satisfy) beside the same identities on this run.

A chapter names the published checks its tables touch (ids of ``papers/data/<paper>_checks.yaml``)
and, for each, the same identity recomputed from its records (e.g. "label-changed + unchanged =
trials" with this run's counts). :func:`part_e_beside` puts the audit's verdict on the published
numbers next to the run's, so a reader sees both that the paper is internally consistent and
that the run satisfies the identity the paper relies on.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Mapping

import pandas as pd

from .result import TableResult

__all__ = ["RunCheck", "part_e_beside"]

_OPS = {"==": None, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def RunCheck(identity: str, stated: float, recomputed: float, *, op: str = "==", tol: float = 1e-9) -> dict:
    """One identity on the run: ``stated op recomputed`` (``==`` within ``tol``)."""
    if op not in _OPS:
        raise ValueError(f"op {op!r} not in {sorted(_OPS)}")
    return {"identity": identity, "stated": float(stated), "recomputed": float(recomputed), "op": op, "tol": tol}


def _holds(c: Mapping) -> bool:
    a, b = c["stated"], c["recomputed"]
    if math.isnan(a) or math.isnan(b):
        return False
    if c["op"] == "==":
        return abs(a - b) <= c["tol"]
    return bool(_OPS[c["op"]](a, b))


def part_e_beside(checks: Mapping[str, Mapping], *, paper: str = "modalens") -> TableResult:
    """The published checks ``checks`` names, each beside the run's version of its identity.

    Parameters
    ----------
    checks : mapping
        Check id of the paper's check file (without the ``<paper>.`` prefix) -> :func:`RunCheck`.
    paper : str
        ``"modalens"`` or ``"shovir"``.

    Returns
    -------
    TableResult
        One row per check: the paper's ``description``, ``paper stated``, ``paper recomputed``,
        ``paper status`` (the audit's verdict) and the run's ``identity``, ``run stated``, ``run
        recomputed``, ``run holds``. Values: ``part_e.n``, ``part_e.run_holds`` (all hold),
        ``part_e.paper_passed`` (number the audit passes).
    """
    from ..papers import audit

    table = audit(paper).set_index("id")
    rows = []
    for cid, c in checks.items():
        key = f"{paper}.{cid}"
        if key not in table.index:
            raise KeyError(f"no published check {cid!r} in {paper}'s check file")
        a = table.loc[key]
        rows.append({"check": cid, "location": a["location"], "description": a["description"],
                     "paper stated": a["stated"], "paper recomputed": a["recomputed"], "paper status": a["status"],
                     "identity on this run": c["identity"], "run stated": c["stated"],
                     "run recomputed": c["recomputed"], "run holds": _holds(c)})
    frame = pd.DataFrame(rows)
    values = {"part_e.n": len(frame), "part_e.run_holds": bool(frame["run holds"].all()) if len(frame) else True,
              "part_e.paper_passed": int((frame["paper status"] == "passed").sum()) if len(frame) else 0}
    return TableResult(frame, values, caption="The paper's consistency checks beside the same identities on this run.")
