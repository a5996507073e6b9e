"""The metric schema: names, display labels, directions and formats in one data file.

``shovir_core/resources/metrics.yaml`` holds one entry per metric (in the manner of
HELM's ``schema.yaml``); tables and glue read it through this module so that a
metric is named and formatted the same way everywhere.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import pandas as pd
from .. import yaml_text

from .. import paths

__all__ = ["MetricSpec", "metric_schema", "metric_spec", "format_metric", "display_frame", "SCHEMA_FILE",
           "significant", "never_zero"]

SCHEMA_FILE = "metrics.yaml"
_DIRECTIONS = ("higher", "lower", "none")
_FIELDS = ("display", "direction", "format", "scale", "unit", "range", "description", "paper")


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the schema.

    Attributes
    ----------
    name : str
        Schema key (``"flip_rate"``).
    display : str
        Header used in tables.
    direction : {"higher", "lower", "none"}
        Which way is better; ``"none"`` for descriptive quantities.
    format : str
        Format spec applied to ``value * scale``.
    scale : float
        Multiplier before formatting (100 for percentages and percentage points).
    unit : str
        Suffix after the formatted number (``"%"``, ``"pp"``, ``"x"`` or ``""``).
    range : tuple
        Admissible unscaled values ``(lo, hi)``; ``None`` for an open end.
    description, paper : str
        One-sentence definition and where the paper defines it.
    """

    name: str
    display: str
    direction: Literal["higher", "lower", "none"]
    format: str
    scale: float
    unit: str
    range: tuple[float | None, float | None]
    description: str
    paper: str

    def format_value(self, value: float) -> str:
        """Format ``value`` for display (``"4.70%"``, ``"+12.37 pp"``, ``"0.648"``); NaN gives ``"–"``."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        x = float(value) * self.scale
        fmt = self.format
        if math.isfinite(x) and abs(x) >= 1e4:  # large values: thousands separated, no exponent
            precision = _PLAIN_SPEC.match(fmt)
            if precision and precision.group(3) in ("g", "G") and abs(x) >= 10 ** int(precision.group(2) or 6):
                fmt = f"{precision.group(1)},.0f"
            elif precision:
                fmt = f"{precision.group(1)},.{precision.group(2) or 6}{precision.group(3) or 'f'}"
        text = never_zero(x, format(x, fmt))  # a tiny non-zero value gets significant digits, never 0.000
        if self.unit == "%":
            return text + "%"
        return f"{text} {self.unit}" if self.unit in ("pp",) else text + self.unit

    def check(self, value: float) -> float:
        """Return ``value`` if it lies in the admissible range (NaN passes), else raise ValueError."""
        v = float(value)
        lo, hi = self.range
        if not math.isnan(v) and ((lo is not None and v < lo - 1e-12) or (hi is not None and v > hi + 1e-12)):
            raise ValueError(f"metric {self.name!r}: value {v} outside its range [{lo}, {hi}]")
        return v


_PLAIN_SPEC = re.compile(r"^([+\- ]?)\.(\d+)([fFgG%]?)$")
_FIXED_TEXT = re.compile(r"^([+\-−]?)([\d,]*\.?\d*)(.*)$", re.S)


def significant(value: float, digits: int = 2) -> str:
    """``value`` to ``digits`` significant digits in plain decimals (``0.00018``, ``4.9e−07`` below 1e−6)."""
    if value == 0 or not math.isfinite(value):
        return format(value, "g")
    exp = math.floor(math.log10(abs(value)))
    if exp < -6:
        return format(value, f".{digits - 1}e")
    decimals = max(0, digits - 1 - exp)
    return format(value, f",.{decimals}f")


def never_zero(value: float, text: str, *, digits: int = 2) -> str:
    """``text`` (``value`` formatted at a fixed precision), unless it reads as zero while ``value`` is
    not: then ``value`` to ``digits`` significant digits, so a tiny positive time never prints 0.000.
    Values within 1e−12 of zero (rounding noise of a difference) stay zero."""
    if not math.isfinite(value) or abs(value) < 1e-12:
        return text
    m = _FIXED_TEXT.match(text)
    if m and m.group(2) and set(m.group(2)) <= set("0.,"):
        return ("+" if m.group(1) == "+" and value > 0 else "") + significant(value, digits) + m.group(3)
    return text


def _parse(name: str, entry: dict) -> MetricSpec:
    missing = [f for f in _FIELDS if f not in entry]
    if missing:
        raise ValueError(f"{SCHEMA_FILE}: metric {name!r} lacks {missing}")
    if entry["direction"] not in _DIRECTIONS:
        raise ValueError(f"{SCHEMA_FILE}: metric {name!r} has direction {entry['direction']!r}; use one of {_DIRECTIONS}")
    format(1.0, entry["format"])  # raises on a bad spec
    lo, hi = entry["range"]
    return MetricSpec(name=name, display=str(entry["display"]), direction=entry["direction"],
                      format=str(entry["format"]), scale=float(entry["scale"]), unit=str(entry["unit"]),
                      range=(lo, hi), description=str(entry["description"]), paper=str(entry["paper"]))


@lru_cache(maxsize=1)
def metric_schema() -> dict[str, MetricSpec]:
    """All metrics of ``resources/metrics.yaml`` by name (parsed and validated once)."""
    raw = yaml_text.safe_load((paths.resources_root() / SCHEMA_FILE).read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or "metrics" not in raw:
        raise ValueError(f"{SCHEMA_FILE}: expected a mapping with a 'metrics' key")
    return {name: _parse(name, entry) for name, entry in raw["metrics"].items()}


def metric_spec(name: str) -> MetricSpec:
    """The schema entry of ``name``; unknown names raise a KeyError listing the known ones."""
    schema = metric_schema()
    try:
        return schema[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; {SCHEMA_FILE} defines {sorted(schema)}") from None


def format_metric(name: str, value: float) -> str:
    """Format ``value`` as the schema says for metric ``name``.

    >>> format_metric("flip_rate", 2105 / 44786)
    '4.70%'
    """
    return metric_spec(name).format_value(value)


def display_frame(frame: pd.DataFrame, metrics: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Format metric columns as the schema says and rename them to their display names.

    Parameters
    ----------
    frame : DataFrame
        Numeric metric columns (other columns pass through unchanged).
    metrics : mapping, optional
        Column -> schema metric name; by default every column named like a
        schema metric is formatted.

    >>> display_frame(pd.DataFrame({"flip_rate": [0.047], "ratio": [3.63]})).iloc[0].tolist()
    ['4.70%', '3.6x']
    """
    mapping = dict(metrics) if metrics is not None else {c: c for c in frame.columns if c in metric_schema()}
    missing = [c for c in mapping if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks metric columns {missing}")
    out = frame.copy()
    names = {}
    for col, name in mapping.items():
        spec = metric_spec(name)
        out[col] = [spec.format_value(v) for v in frame[col]]
        names[col] = spec.display
    return out.rename(columns=names)
