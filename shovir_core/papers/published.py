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

__all__ = ["derived_source", "published", "published_value", "PaperNumber", "paper_source", "equals_published"]

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


class PaperNumber(float):
    """A published value (or one bound of its interval) carried as a number that remembers its source.

    ``float`` arithmetic on it returns a plain ``float`` (a value derived from a published one is the
    run's or the reader's, not the paper's), so only a value taken as it is keeps the tag; the book's
    glue helpers (:func:`shovir_core.book.glue.glue`) refuse to paste a tagged value with run
    provenance and paste it as the paper's instead.

    >>> x = PaperNumber(4.26, paper="modalens", id="t3.gen.P", scale=0.01)
    >>> x.source()["id"], float(x)
    ('t3.gen.P', 4.26)
    """

    paper: str
    id: str
    part: str
    scale: float

    def __new__(cls, value, *, paper: str, id: str, part: str = "value", scale: float = 1.0):
        self = super().__new__(cls, value)
        self.paper, self.id, self.part, self.scale = paper, id, part, float(scale)
        return self

    def __reduce__(self):  # pickles (and copies) with its source
        return (_paper_number, (float(self), self.paper, self.id, self.part, self.scale))

    def source(self) -> dict:
        """``{"paper", "id", "location", "text", "part", "scale"}``: where the paper prints it."""
        return paper_source(self.paper, self.id, part=self.part, scale=self.scale)


def _paper_number(value, paper, id, part, scale):
    return PaperNumber(value, paper=paper, id=id, part=part, scale=scale)


def paper_source(paper: str, id: str, *, part: str = "value", scale: float = 1.0) -> dict:
    """The provenance entry of a published value: paper, id, where it is printed and as what text."""
    item = load_values(paper)[id]
    text = item.text if part == "value" else (item.ci or ("", ""))[0 if part == "lo" else 1]
    return {"paper": paper, "id": id, "location": item.location, "text": text, "unit": item.unit,
            "part": part, "scale": float(scale)}


def derived_source(paper: str, expression: str, *, scale: float = 1.0) -> dict:
    """The provenance entry of a value derived from published ones by ``expression`` (ids of ``paper``
    joined by ``+ - * /``, :mod:`shovir_core.papers.expression`): what :func:`paper_source` gives a
    stored value, with ``derived`` (the ids it reads), ``anchor`` (the first of them, where the book
    links) and ``number`` (its value times ``scale``).

    >>> s = derived_source("modalens", "design.patients - design.single_study_patients")
    >>> s["number"], s["derived"], s["text"]
    (274.0, ['design.patients', 'design.single_study_patients'], '293 − 19 = 274')
    """
    import re

    from .expression import evaluate

    values = load_values(paper)
    result = evaluate(expression, values)
    if isinstance(result.value, (str, frozenset)):
        raise ValueError(f"derived_source: {expression!r} gives a label, not a number")
    ids = list(dict.fromkeys(t for t in re.findall(r"[A-Za-z_][\w.]*", expression) if t in values))
    if not ids:
        raise ValueError(f"derived_source: {expression!r} reads no stored value of {paper!r}")
    shown = expression
    for i in sorted(ids, key=len, reverse=True):
        shown = re.sub(rf"(?<![\w.]){re.escape(i)}(?![\w.])", values[i].text, shown)
    number = float(result.value)
    text = f"{number:g}" if number == int(number) else f"{number:.4g}"
    return {"paper": paper, "id": expression, "anchor": ids[0], "derived": ids,
            "location": ", ".join(dict.fromkeys(values[i].location for i in ids)),
            "text": f"{shown.replace(' - ', ' − ')} = {text}", "unit": values[ids[0]].unit,
            "part": "value", "scale": float(scale), "number": number * scale}


def equals_published(value, *, scales=(1.0, 0.01, 100.0)) -> list[str]:
    """``paper:id`` of every stored published number (or interval bound) equal to ``value`` at one of
    ``scales`` (the paper's % and pp as fractions, or a fraction as %); empty for a non-number."""
    import math

    from .values import PAPERS

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np
        except ImportError:  # pragma: no cover
            return []
        if not isinstance(value, np.number):
            return []
    x = float(value)
    if not math.isfinite(x):
        return []
    out = []
    for paper in PAPERS:
        for item in load_values(paper).values():
            if item.categorical:
                continue
            numbers = [float(item.value)] + list(item.ci_values or ())
            if any(math.isclose(x, n * s, rel_tol=1e-9, abs_tol=1e-12) for n in numbers for s in scales):
                out.append(f"{paper}:{item.id}")
    return out
