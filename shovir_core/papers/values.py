"""The published numbers of both papers, read from the data files shipped in this package.

Each paper has a YAML file of values (``data/<paper>.yaml``); ShoViR's Table 1 is a
CSV (``data/shovir_table1.csv``) laid out as in the paper. Values keep the text the
paper prints (``"4.70"``, not ``4.7``): the number of reported decimals sets the
rounding interval that the audit propagates. YAML is read with ``yaml.BaseLoader``
so that no scalar is converted implicitly.

Value fields
------------
``id``        unique within the paper (dotted, e.g. ``t4.acc_concordant``)
``location``  table, figure, section or appendix where the paper prints it
``value``     the number (or label) as printed, without thousands separators
``unit``      ``count`` (exact integer), ``%``, ``pp``, ``proportion``, ``score``,
              ``ratio``, ``layer``, ``label`` (a name) or ``set`` (names joined by ``;``)
``desc``      what the number is
``ci``        optional ``[low, high]`` 95% interval as printed
``keys``      optional selectors (``dataset``, ``model``, ``metric``...) for :func:`select`
``note``      optional remark
"""
from __future__ import annotations

import csv
import hashlib
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from types import MappingProxyType

from .. import yaml_text

from ..errors import ShovirError

__all__ = [
    "PAPERS", "UNITS", "Reported", "PaperDataError", "load_values", "data_files",
    "data_sha256", "parse_number",
]

PAPERS: dict[str, str] = {
    "shovir": "ShoViR: A Benchmark for Evaluating Vision Shortcut Learning in Radiology Report Generation "
              "(arXiv 2606.30201)",
    "modalens": "ModaLens: Measuring Image Sensitivity in Report-Conditioned Medical VLMs (arXiv 2609.15635)",
}
"""The papers whose numbers are shipped, with their titles."""

UNITS = ("count", "%", "pp", "proportion", "score", "ratio", "layer", "label", "set")
CATEGORICAL_UNITS = ("label", "set")

_NUMBER = re.compile(r"^[+-]?(\d+)(\.(\d+))?$")
_DATA_PACKAGE = "shovir_core.papers.data"


class PaperDataError(ShovirError, ValueError):
    """A data file of published numbers is malformed (the message names the file and the item)."""


def parse_number(text: str, *, where: str) -> tuple[float, int]:
    """``(value, decimals)`` of a printed number such as ``"-0.50"`` or ``"+12.37"``.

    Raises
    ------
    PaperDataError
        When ``text`` is not a plain decimal number (thousands separators are refused,
        so that ``"3,199"`` cannot be read as two numbers).
    """
    s = str(text).strip().replace("\u2212", "-")
    m = _NUMBER.match(s)
    if not m:
        raise PaperDataError(f"{where}: {text!r} is not a plain decimal number (write 44786, not 44,786)")
    return float(s), len(m.group(3) or "")


@dataclass(frozen=True)
class Reported:
    """One published value as the paper prints it.

    Attributes
    ----------
    value : float or str or frozenset
        The number, or the label / set of labels of a categorical claim.
    decimals : int
        Decimals printed (0 for counts and labels).
    exact : bool
        True for counts and labels: no rounding interval.
    """

    paper: str
    id: str
    location: str
    text: str
    unit: str
    desc: str
    value: float | str | frozenset
    decimals: int = 0
    ci: tuple[str, str] | None = None
    keys: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    note: str = ""

    @property
    def categorical(self) -> bool:
        return self.unit in CATEGORICAL_UNITS

    @property
    def exact(self) -> bool:
        return self.unit == "count" or self.categorical

    @property
    def quantum(self) -> float:
        """One unit in the last printed digit (0 for exact values)."""
        return 0.0 if self.exact else 10.0 ** (-self.decimals)

    @property
    def half_width(self) -> float:
        """Half the rounding interval of the printed value."""
        return self.quantum / 2

    @property
    def ci_values(self) -> tuple[float, float] | None:
        if self.ci is None:
            return None
        lo, _ = parse_number(self.ci[0], where=f"{self.paper}:{self.id} ci")
        hi, _ = parse_number(self.ci[1], where=f"{self.paper}:{self.id} ci")
        return lo, hi


def _item(paper: str, raw: dict, *, where: str) -> Reported:
    if not isinstance(raw, dict):
        raise PaperDataError(f"{where}: each value must be a mapping, got {raw!r}")
    missing = [k for k in ("id", "location", "value", "unit", "desc") if not raw.get(k)]
    if missing:
        raise PaperDataError(f"{where} ({raw.get('id', '?')}): missing {missing}")
    unknown = set(raw) - {"id", "location", "value", "unit", "desc", "ci", "keys", "note"}
    if unknown:
        raise PaperDataError(f"{where} ({raw['id']}): unknown fields {sorted(unknown)}")
    vid, unit, text = raw["id"], raw["unit"], str(raw["value"]).strip()
    if unit not in UNITS:
        raise PaperDataError(f"{where} ({vid}): unit {unit!r} not in {UNITS}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", vid):
        raise PaperDataError(f"{where}: id {vid!r} must be dotted identifiers (letters, digits, '_')")
    decimals = 0
    if unit == "label":
        value: float | str | frozenset = text
    elif unit == "set":
        value = frozenset(s.strip() for s in text.split(";") if s.strip())
    else:
        value, decimals = parse_number(text, where=f"{where} ({vid})")
        if unit == "count" and decimals:
            raise PaperDataError(f"{where} ({vid}): a count cannot have decimals ({text!r})")
    ci = raw.get("ci")
    if ci is not None:
        if not (isinstance(ci, list) and len(ci) == 2):
            raise PaperDataError(f"{where} ({vid}): ci must be [low, high]")
        ci = (str(ci[0]), str(ci[1]))
    keys = raw.get("keys") or {}
    if not isinstance(keys, dict):
        raise PaperDataError(f"{where} ({vid}): keys must be a mapping")
    item = Reported(paper=paper, id=vid, location=raw["location"], text=text, unit=unit, desc=raw["desc"],
                    value=value, decimals=decimals, ci=ci,
                    keys=MappingProxyType({str(k): str(v) for k, v in keys.items()}), note=raw.get("note", ""))
    if ci is not None:
        item.ci_values  # validates the interval's numbers
    return item


def _read(name: str) -> str:
    return resources.files(_DATA_PACKAGE).joinpath(name).read_text(encoding="utf-8")


def data_files(paper: str) -> tuple[str, ...]:
    """Names of the data files (under ``shovir_core/papers/data``) that hold ``paper``'s numbers and checks."""
    _check_paper(paper)
    names = [f"{paper}.yaml", f"{paper}_checks.yaml"]
    if paper == "shovir":
        names.insert(1, "shovir_table1.csv")
    return tuple(names)


def data_sha256(paper: str) -> str:
    """SHA-256 over the data files of ``paper`` (names and contents, in a fixed order)."""
    h = hashlib.sha256()
    for name in data_files(paper):
        h.update(name.encode())
        h.update(b"\0")
        h.update(_read(name).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _check_paper(paper: str) -> None:
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; known: {sorted(PAPERS)}")


TABLE1_METRICS = ("F1_14", "F1_5", "F1_RG", "GREEN", "BLEU_1", "BLEU_4", "ROUGE_L")
"""ShoViR Table 1 metric columns, in the paper's order (Δ_FN columns: F1_14 and F1_5)."""


def _table1() -> list[Reported]:
    """ShoViR Table 1 (wide CSV, one row per dataset × model) as long-form values."""
    rows = list(csv.DictReader(_read("shovir_table1.csv").splitlines()))
    expected = (["dataset", "model"] + [f"baseline.{m}" for m in TABLE1_METRICS]
                + [f"full_noise.{m}" for m in TABLE1_METRICS] + ["delta_fn.F1_14", "delta_fn.F1_5"])
    if not rows or list(rows[0]) != expected:
        raise PaperDataError(f"shovir_table1.csv: header must be {expected}")
    out = []
    for i, row in enumerate(rows, start=2):
        ds, model = row["dataset"], row["model"]
        for col in expected[2:]:
            arm, metric = col.split(".")
            where = f"shovir_table1.csv line {i} column {col}"
            value, decimals = parse_number(row[col], where=where)
            out.append(Reported(
                paper="shovir", id=f"t1.{ds}.{model.replace('-', '_')}.{arm}.{metric}", location="Table 1",
                text=row[col].strip(), unit="score", value=value, decimals=decimals,
                desc=f"{model} on {ds}: {metric} ({arm.replace('_', ' ')})",
                keys=MappingProxyType({"table": "1", "dataset": ds, "model": model, "arm": arm, "metric": metric})))
    return out


@lru_cache(maxsize=None)
def load_values(paper: str) -> MappingProxyType:
    """Every published value of ``paper`` as ``{id: Reported}`` (read-only).

    Raises
    ------
    PaperDataError
        On a malformed item or a duplicate id (the message names both).
    """
    _check_paper(paper)
    name = f"{paper}.yaml"
    doc = yaml_text.base_load(_read(name))
    if not isinstance(doc, dict) or doc.get("paper") != paper or not isinstance(doc.get("values"), list):
        raise PaperDataError(f"{name}: expected a mapping with 'paper: {paper}' and a 'values' list")
    items = [_item(paper, raw, where=f"{name} item {i}") for i, raw in enumerate(doc["values"])]
    if paper == "shovir":
        items += _table1()
    out: dict[str, Reported] = {}
    for item in items:
        if item.id in out:
            raise PaperDataError(f"{paper}: duplicate value id {item.id!r}")
        out[item.id] = item
    for item in out.values():
        if not item.categorical and not math.isfinite(item.value):
            raise PaperDataError(f"{paper}:{item.id}: value is not finite")
    return MappingProxyType(out)
