"""Look published values up by their keys, for "paper vs this run" columns.

Keys carried by the values (every value can also be fetched by ``id``):

* ShoViR ``table="1"``: ``dataset`` (``MIMIC``, ``PadChest``), ``model`` (as printed, e.g.
  ``MAIRA-2``), ``arm`` (``baseline``, ``full_noise``, ``delta_fn``), ``metric`` (``F1_14``,
  ``F1_5``, ``F1_RG``, ``GREEN``, ``BLEU_1``, ``BLEU_4``, ``ROUGE_L``);
* ShoViR ``figure="2"`` (μ-F1 at p=100%: ``dataset, model, condition, p, metric``),
  ``figure="3a"`` (``dataset, model, condition`` OCO/DOCO, ``metric`` FR/delta_F1) and
  ``figure="3b"`` (``dataset, class, condition, metric``) for the values the text states;
* ModaLens ``table`` in ``2, 3, 4, 5, 15, 17`` with ``design`` (``all14``, ``one_q``, ``f13``),
  ``order``, ``report`` (``present``/``absent``), ``readout``, ``prompt``, ``image``, ``finding``
  and ``metric`` (``flip_rate``, ``paired_diff``, ``ratio``, ``accuracy``, ``balanced_accuracy``).

``published(paper)`` with no selector lists every value with its key columns.

Examples
--------
>>> published_value("shovir", table="1", dataset="MIMIC", model="RaDialog", arm="baseline", metric="F1_14")
0.596
>>> published("shovir", table="1", dataset="MIMIC", model="RaDialog", metric="F1_14")[["arm", "value"]]
          arm  value
0    baseline  0.596
1  full_noise  0.230
2    delta_fn  0.366
"""
from __future__ import annotations

import pandas as pd

from .values import load_values

__all__ = ["published", "published_value"]

_COLUMNS = ["id", "paper", "location", "desc", "reported", "value", "unit", "ci_low", "ci_high"]


def _matches(paper: str, id: str | None, keys: dict) -> list:
    values = load_values(paper)
    if id is not None:
        if id not in values:
            raise KeyError(f"{paper}: no published value {id!r}")
        items = [values[id]]
    else:
        items = list(values.values())
    keys = {k: str(v) for k, v in keys.items()}
    return [it for it in items if all(it.keys.get(k) == v for k, v in keys.items())]


def published(paper: str, *, id: str | None = None, **keys) -> pd.DataFrame:
    """Published values of ``paper`` whose keys match ``keys`` (all values when none given).

    Parameters
    ----------
    paper : {"shovir", "modalens"}
    id : str, optional
        One value id (e.g. ``"t4.acc_concordant"``).
    **keys
        Selectors such as ``table="1"``, ``dataset="MIMIC"``, ``model="RaDialog"``,
        ``arm="baseline"``, ``metric="F1_14"`` (compared as strings).

    Returns
    -------
    DataFrame
        One row per value: ``id, paper, location, desc, reported`` (text as printed),
        ``value`` (float; NaN for labels), ``unit``, ``ci_low``, ``ci_high``, and one
        column per key the matched values carry. Empty when nothing matches.
    """
    rows = []
    for it in _matches(paper, id, keys):
        ci = it.ci_values or (float("nan"), float("nan"))
        rows.append({"id": it.id, "paper": paper, "location": it.location, "desc": it.desc, "reported": it.text,
                     "value": float("nan") if it.categorical else float(it.value), "unit": it.unit,
                     "ci_low": ci[0], "ci_high": ci[1], **dict(it.keys)})
    df = pd.DataFrame(rows)
    return df if rows else pd.DataFrame(columns=_COLUMNS)


def published_value(paper: str, *, id: str | None = None, **keys) -> float:
    """The single published number matching ``id`` and/or ``keys``.

    Raises
    ------
    LookupError
        When no value or more than one matches (the message lists the candidates),
        or the match is a label, not a number.
    """
    items = _matches(paper, id, keys)
    if len(items) != 1:
        ids = [it.id for it in items][:10]
        raise LookupError(f"{paper}: {len(items)} published values match {keys or id}; "
                          f"need exactly one{f' (candidates: {ids})' if ids else ''}")
    if items[0].categorical:
        raise LookupError(f"{paper}:{items[0].id} is a label ({items[0].text!r}), not a number")
    return float(items[0].value)
