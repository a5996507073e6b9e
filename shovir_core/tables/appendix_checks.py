"""The published-number checks (the audit's Part E rows) of one appendix, for its chapter.

Each appendix chapter shows the consistency checks of its appendix (stated value, recomputed
value, status; :func:`shovir_core.papers.audit.audit`) beside this run's values, so a reader sees
which published numbers hold together before comparing them with a run.
"""
from __future__ import annotations

import pandas as pd

__all__ = ["appendix_checks"]

_COLUMNS = ["id", "description", "stated", "recomputed", "status"]
"""What a chapter shows of a check: the description says the recomputation in words (the audit's
``formula`` expression stays in the audit chapter and its CSV, not in the appendix tables)."""


def appendix_checks(location: str, *, paper: str = "modalens") -> pd.DataFrame:
    """The audit rows of ``paper`` whose location names ``location`` (e.g. ``"Appendix E"``).

    >>> bool(appendix_checks("Appendix E")["id"].str.startswith("modalens.e.").any())
    True
    """
    from ..papers.audit import audit

    rows = audit(paper)
    hit = rows["location"].str.contains(location, regex=False)
    if not hit.any():
        raise ValueError(f"no check of {paper!r} names the location {location!r}")
    return rows.loc[hit, _COLUMNS].reset_index(drop=True)
