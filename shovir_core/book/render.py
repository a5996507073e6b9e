"""Render chapter tables for readers: MyST ``list-table`` markup with a number, a caption and a CSV.

:func:`table_markdown` turns a :class:`~shovir_core.tables.result.TableResult` into the MyST
Markdown that a notebook cell outputs (``text/markdown``; the book parses it with
``nb_render_markdown_format: myst``), so every table of the book is a numbered Sphinx table
(``Book table 3``) that the text cross-references with ``{numref}`tbl-<name>```. Cells are formatted
once, by quantity:

* frame columns named in ``TableResult.metrics`` by ``resources/metrics.yaml`` (display name,
  scale, unit, format);
* integer counts with thousands separators; other numbers with one precision per column
  (``formats`` or 3 decimals);
* booleans as ``yes`` / ``no``; missing values (NaN, None) as the table's ``missing`` text
  (``"n/a"`` unless the table says why, e.g. ``"not run"``).

Wide frames are reshaped first: a frame with two column levels is stacked (the top level becomes a
row group), and a frame still clearly wider than :data:`WIDTH_BUDGET_PX` is split into balanced
parts (:func:`split_plan`) that each repeat the row key, keep an estimate with its interval bounds,
and hold at least two data columns; a table that is only slightly too wide, or cannot be split that
way, scrolls inside its own container instead. ``groups`` splits long tables by a column into one
table per section. The unformatted frame is written beside the book as CSV and linked under the
table (``{download}`` role), so the numbers a reader sees are downloadable at full precision.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from .. import paths
from ..metrics.schema import never_zero

__all__ = ["OUTPUT_DIR_ENV", "output_dir", "default_name", "caption_name", "NBSP", "VERDICT_COLUMN", "WIDTH_BUDGET_PX", "BookTable", "table_markdown",
           "format_frame", "auto_intervals", "split_plan", "tables_dir", "check_name", "RECORD_COLUMN", "ROW_METRIC_COLUMN"]

OUTPUT_DIR_ENV = "SHOVIR_BOOK_DIR"
"""The folder the executed notebook is written to (set by the runner; ``book/`` otherwise). Tables
write their CSV to ``<it>/_tables/`` and figures their PNG to ``<it>/_figures/``, so the links in
the notebook's output (relative to the notebook) resolve when the book is built."""

TABLES_LINK_DIR = "_tables"
"""The CSVs' folder relative to the executed notebook (``book/_tables/<name>.csv``)."""

WIDTH_BUDGET_PX = 930
"""Estimated width (CSS px) a table part may take; the book's text column is 936 px at 1400 px."""

ROW_METRIC_COLUMN = "metric"
"""A column of this name holding schema metric names formats each row's float columns by its metric
(long tables whose rows are different quantities); it is not shown itself."""

NBSP = "\u00a0"
"""Joins the words of a number with its unit and interval, so it never breaks across lines."""

VERDICT_COLUMN = "verdict"
"""A column of this name whose value is the same on every row becomes a note under the table."""

CHAPTER_COLUMNS = ("chapter", "notebook")
"""Columns of these names hold chapter names; a cell naming a chapter of the book links to it."""

RECORD_COLUMN = "run_id"
"""A column of this name holds run ids; its cells link to the record's manifest (``{record}`` role)."""

_FONT_PX = 14.0      # the table font: 0.875 rem
_MONO_CHAR_PX = 7.8  # advance of the run ids' monospace font (0.8 rem)
_CELL_PAD_PX = 18    # left + right padding of a cell (0.45 rem each) and its border
_WRAP_PX = 170       # a text column is made about this wide before it wraps (at spaces)
_SCROLL_SLACK = 1.15
"""A table up to this many times the budget stays whole and scrolls inside its container."""
_SOFT_BOND_PX = 150  # cost of a part boundary between columns that belong together
_MAX_PLANS = 20000   # splits tried per number of parts (wider tables scroll)
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")
"""A snake_case identifier (``image_first``, ``report_present``): shown with spaces."""
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|{}$~])")
_LIST_MARKER = re.compile(r"^([+\-]|\d+[.)])(\s|$)")


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid table/figure name (lower-case words joined by ``-``)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"table/figure name {name!r} must be lower-case letters and digits joined by '-' "
                         "(e.g. 'sv-t1'); it becomes the label 'tbl-<name>' and the CSV '<name>.csv'")
    return name


def caption_name(caption: str, *parts: str, kind: str = "table", words: int = 7) -> str:
    """A name for an unnamed table or figure, made from its caption: the caption's first ``words``
    words (before the bracketed note of what ran), then 6 hex of caption and content, so the CSV a
    reader downloads says what it holds (``flip-rates-by-finding-report-present-3f2a1c.csv``).

    >>> caption_name("Table 2: flip rates, report present [demo: NIH 64 px]", "a,b")[:34]
    'table-2-flip-rates-report-present-'
    """
    import hashlib

    head = (caption or "").split(" [")[0]
    slug = "-".join(re.findall(r"[a-z0-9]+", head.lower().replace("−", "-"))[:words])[:60].strip("-")
    digest = hashlib.sha1("\x1f".join([caption or "", *map(str, parts)]).encode()).hexdigest()[:6]
    return f"{slug}-{digest}" if slug else f"{kind}-{digest}"


def default_name(*parts: str, kind: str = "table") -> str:
    """A stable name for an unnamed table or figure: ``<kind>-<10 hex of its caption and content>``.

    It depends on nothing but what is shown, so re-executing the notebook (nbval) reproduces it, and
    two chapters showing the same table share one CSV. Unnamed tables get no label (nothing can
    cross-reference them), so equal names never collide.
    """
    import hashlib

    digest = hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:10]
    return f"{kind}-{digest}"


def output_dir() -> Path:
    """The executed notebook's folder: ``$SHOVIR_BOOK_DIR`` or ``book/``."""
    env = os.environ.get(OUTPUT_DIR_ENV)
    return Path(env) if env else paths.book_root()


def tables_dir() -> Path:
    """The folder the CSVs are written to: ``<output_dir>/_tables``."""
    return output_dir() / TABLES_LINK_DIR


# --------------------------------------------------------------------------- cell formatting
def _is_missing(v) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def _cell(v, *, fmt: str | None, missing: str) -> str:
    if _is_missing(v):
        return missing
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if fmt is None:  # a number of its own (a column of mixed quantities)
            return _free_number(float(v)).replace("-", "−")
        return never_zero(float(v), format(float(v), fmt)).replace("-", "−")
    text = str(v)
    if "-" in text and _NUMERIC_TEXT.match(text):  # a number formatted upstream (TableResult.display)
        return text.replace("-", "−")
    if _SNAKE.match(text):  # an identifier (`image_first`) reads as words
        return text.replace("_", " ")
    return _nowrap_numbers(text)


_INTERVAL_TEXT = re.compile(r"\[([+\-−]?[\d.,]+%?), ([+\-−]?[\d.,]+%?)\]")
_NUMBER_UNIT = re.compile(r"(\d) (pp|%)(?=\W|$)")
_BEFORE_INTERVAL = re.compile(r"(\d|%|\bpp) (\[[+\-−]?[\d.,]+%?,)")


def _nowrap_numbers(text: str) -> str:
    """Non-breaking spaces inside intervals, between a number and its unit and between an estimate
    and its interval (``"+7.8 pp [6.9, 8.8]"`` is one word), so no number breaks across lines.

    >>> _nowrap_numbers("+7.8 pp [6.9, 8.8]") == "+7.8\u00a0pp\u00a0[6.9,\u00a08.8]"
    True
    >>> _nowrap_numbers("3 of 5 [demo: NIH 64 px]") == "3 of 5 [demo: NIH 64 px]"
    True
    """
    if not isinstance(text, str) or " " not in text:
        return text
    text = _NUMBER_UNIT.sub("\\1" + NBSP + "\\2", _INTERVAL_TEXT.sub("[\\1," + NBSP + "\\2]", text))
    return _BEFORE_INTERVAL.sub("\\1" + NBSP + "\\2", text)


def _free_number(v: float) -> str:
    """A float with no column format: an integer-valued count as a count, else 3 decimals (2
    significant digits when that would read 0.000), thousands separated."""
    if v.is_integer() and abs(v) < 1e15 and (abs(v) >= 100 or v == 0):
        return f"{int(v):,}"
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    return never_zero(v, f"{v:,.3f}")


def _column_format(values: pd.Series) -> str:
    """One fixed precision for a float column without a format: 3 decimals, fewer for large
    values (``,.0f`` from 1,000), more when the smallest non-zero value would read 0.00x (two
    significant digits of it, at most 6 decimals); thousands separated."""
    a = values.abs()
    nz = a[a > 0]
    if not len(nz):
        return ",.3f"
    small, big = nz.min(), a.max()
    if small >= 1000:
        return ",.0f"
    if small >= 100:
        return ",.1f"
    if small < 0.01 and big < 1000:
        return f",.{min(6, 1 - math.floor(math.log10(small)))}f"
    return ",.3f"


def _metric_cell(spec, v, missing: str) -> str:
    if _is_missing(v):
        return missing
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        return _cell(v, fmt=None, missing=missing)
    # a typographic minus, as the papers print it; "+4.28 pp" is one word
    return _nowrap_numbers(spec.format_value(v).replace("-", "−"))


def _header(col, labels: Mapping, metrics: Mapping) -> str:
    if col in labels:
        return str(labels[col])
    if col in metrics:
        from ..metrics.schema import metric_spec

        return metric_spec(metrics[col]).display
    text = str(col)
    return text.replace("_", " ") if "_" in text and " " not in text else text


def format_frame(frame: pd.DataFrame, *, metrics: Mapping[str, str] | None = None,
                 labels: Mapping[str, str] | None = None, formats: Mapping[str, str] | None = None,
                 missing: str | Mapping[str, str] = "n/a",
                 intervals: Mapping[str, tuple[str, str]] | None = None) -> pd.DataFrame:
    """Every cell of ``frame`` as reader text, headers renamed (index levels become columns).

    Parameters
    ----------
    metrics : mapping
        Column -> metric of ``resources/metrics.yaml`` (formatted as the schema says).
    labels : mapping
        Column -> header (wins over the metric's display name).
    formats : mapping
        Column -> format spec for numeric non-metric columns (default ``.3f``; integers and
        integer-valued floats print as counts).
    missing : str or mapping
        Text for a missing value (per column when a mapping; ``"n/a"`` otherwise).
    intervals : mapping, optional
        Column -> ``(low column, high column)``: the interval is printed in the column's cells
        (``+12.37 pp [+11.19, +13.57]``) and its two columns are not shown (the CSV keeps them).
        By default every ``X`` with ``X_lo`` and ``X_hi`` columns (:func:`auto_intervals`); ``{}``
        shows the bounds as columns.
    """
    from ..metrics.schema import metric_spec

    metrics, labels, formats = dict(metrics or {}), dict(labels or {}), dict(formats or {})
    flat = frame.copy()
    if not isinstance(flat.index, pd.RangeIndex) or flat.index.name is not None:
        names = [n if n is not None else "" for n in flat.index.names]
        flat.index.names = names
        flat = flat.reset_index()
    row_metrics = None
    if ROW_METRIC_COLUMN in flat.columns and ROW_METRIC_COLUMN not in metrics:
        from ..metrics.schema import metric_schema

        names = flat[ROW_METRIC_COLUMN]
        if names.map(lambda m: isinstance(m, str) and m in metric_schema()).all():
            row_metrics = [metric_spec(m) for m in names]
            flat = flat.drop(columns=[ROW_METRIC_COLUMN])
    out = {}
    for col in flat.columns:
        miss = missing.get(col, "n/a") if isinstance(missing, Mapping) else missing
        s = flat[col]
        if col in CHAPTER_COLUMNS or col == RECORD_COLUMN:  # names kept as they are (they become links)
            vals = [miss if _is_missing(v) else str(v) for v in s]
        elif col in metrics:
            spec = metric_spec(metrics[col])
            vals = [_metric_cell(spec, v, miss) for v in s]
        elif row_metrics is not None and pd.api.types.is_float_dtype(s) and col not in formats:
            vals = [_metric_cell(spec, v, miss) for spec, v in zip(row_metrics, s)]
        else:
            fmt = formats.get(col)
            numeric = pd.api.types.is_float_dtype(s) and not s.isna().all()
            finite = s[np.isfinite(s)] if numeric else s.iloc[:0]
            counts = numeric and len(finite) and np.allclose(finite % 1, 0) and 1 < finite.abs().max() < 1e15
            if fmt is None and counts:
                vals = [_cell(v, fmt=None, missing=miss) if _is_missing(v) or math.isinf(v) else f"{int(v):,}"
                        for v in s]
            elif fmt is None and numeric:  # a whole count among fractions (a column of mixed quantities) stays whole
                fmt = _column_format(finite)
                vals = [f"{int(v):,}" if not _is_missing(v) and math.isfinite(v) and float(v).is_integer()
                        and 1000 <= abs(v) < 1e15 else _cell(v, fmt=fmt, missing=miss) for v in s]
            else:
                vals = [_cell(v, fmt=fmt, missing=miss) for v in s]
        out[col] = vals
    shown = list(flat.columns)
    if intervals is None:
        intervals = auto_intervals(list(flat.columns))
    for col, (lo, hi) in intervals.items():
        for c in (col, lo, hi):
            if c not in out:
                raise ValueError(f"intervals: {c!r} is not a column of the table; columns: {shown}")
        miss = missing.get(lo, "n/a") if isinstance(missing, Mapping) else missing
        if col in metrics:
            specs = [metric_spec(metrics[col])] * len(flat)
        elif row_metrics is not None and col not in formats and pd.api.types.is_float_dtype(flat[col]):
            specs = row_metrics
        else:
            specs = [None] * len(flat)
        # significant-digit formats: the bounds take the estimate's decimals ("−0.0581 [−0.1326, 0.0220]")
        lows = [_at_decimals(spec, v, x, a) for spec, v, x, a in zip(specs, out[col], flat[lo], out[lo])]
        highs = [_at_decimals(spec, v, y, b) for spec, v, y, b in zip(specs, out[col], flat[hi], out[hi])]
        # one word: an estimate and its interval never break across lines (non-breaking spaces)
        out[col] = [v if (a == miss or b == miss or _is_missing(x) or _is_missing(y))
                    else f"{v} [{_strip_unit(a)}, {_strip_unit(b)}]".replace(" ", NBSP)
                    for v, a, b, x, y in zip(out[col], lows, highs, flat[lo], flat[hi])]
        shown = [c for c in shown if c not in (lo, hi)]
    # every number with its unit and interval is one word, whichever path formatted it
    text = pd.DataFrame({c: [_nowrap_numbers(v) for v in out[c]] for c in shown}, columns=shown)
    headers = []
    for c in shown:
        h = str(_header(c, labels, metrics))
        headers.append(f"{h} [95% CI]" if c in intervals and "[" not in h else h)
    text.columns = headers
    return text


def auto_intervals(columns) -> dict:
    """``X`` with ``X_lo`` and ``X_hi`` (or ``lo``/``hi`` right after ``X``) -> the interval of ``X``."""
    cols = list(columns)
    out = {}
    for c in cols:
        if isinstance(c, str) and f"{c}_lo" in cols and f"{c}_hi" in cols:
            out[c] = (f"{c}_lo", f"{c}_hi")
    if "lo" in cols and "hi" in cols:
        i = cols.index("lo")
        if i > 0 and cols[i - 1] not in out and cols[i - 1] not in ("lo", "hi"):
            out[cols[i - 1]] = ("lo", "hi")
    return out


_DECIMALS = re.compile(r"^[+\-−]?[\d,]*(?:\.(\d+))?")


def _at_decimals(spec, estimate_text: str, value, text: str) -> str:
    """``value`` (an interval bound) at the decimals of ``estimate_text`` when ``spec`` formats to
    significant digits (``.4g``); ``text`` (its own formatting) otherwise."""
    if spec is None or not spec.format.endswith(("g", "G")) or _is_missing(value) \
            or not isinstance(value, (int, float, np.number)) or isinstance(value, (bool, np.bool_)):
        return text
    m = _DECIMALS.match(str(estimate_text))
    if not m or not m.group(0) or "e" in str(estimate_text):
        return text
    decimals = len(m.group(1) or "")
    x = float(value) * spec.scale
    sign = "+" if spec.format.startswith("+") else ""
    number = never_zero(x, format(x, f"{sign},.{decimals}f"))
    unit = spec.unit
    number = number + "%" if unit == "%" else (f"{number} {unit}" if unit == "pp" else number + unit)
    return number.replace("-", "−")


def _strip_unit(text: str) -> str:
    for unit in (" pp", NBSP + "pp", "%", "x"):
        if text.endswith(unit):
            return text[: -len(unit)]
    return text


# --------------------------------------------------------------------------- reshaping
def _flat_name(name) -> str:
    """An index level named by a column tuple (``("model", "")``) as one name (``"model"``)."""
    if isinstance(name, tuple):
        return " ".join(str(x) for x in name if str(x))
    return name


def _stack_column_levels(frame: pd.DataFrame, metrics: dict, labels: Mapping | None = None
                         ) -> tuple[pd.DataFrame, dict]:
    """Move the top column level into the rows: ``(arm, metric)`` columns become an ``arm`` row group.

    Each original row is followed by its groups in column order, so a model's Baseline, Full Noise and
    Δ_FN rows stand together; ``metrics`` keyed by ``(group, column)`` apply to the inner column,
    and ``labels`` of group values (``"FullNoise"`` -> ``"Full Noise"``) name the row groups.
    """
    labels = labels or {}
    name = frame.columns.names[0] or ""
    groups = list(dict.fromkeys(frame.columns.get_level_values(0)))
    inner = list(dict.fromkeys(frame.columns.get_level_values(1)))
    has_index = not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None
    index_names = [n if n is not None else "row" for n in frame.index.names] if has_index else []
    keys, rows = [], []
    for idx in frame.index:
        for g in groups:
            if g not in frame.columns.get_level_values(0):
                continue
            row = frame.loc[idx, g]
            if not isinstance(row, pd.Series):  # a group with one inner column selects a scalar
                inner_of_g = [c[1] for c in frame.columns if c[0] == g]
                row = pd.Series([row], index=inner_of_g[:1])
            shown = labels.get(g, g)
            keys.append(((*idx,) if isinstance(idx, tuple) else (idx,)) + (shown,) if has_index else (shown,))
            rows.append(row.reindex(inner))
    out = pd.DataFrame(rows, columns=inner)
    out.index = pd.MultiIndex.from_tuples(keys, names=index_names + [name]) if has_index else \
        pd.Index([k[0] for k in keys], name=name)
    flat = {**{k[1]: v for k, v in metrics.items() if isinstance(k, tuple)},
            **{k: v for k, v in metrics.items() if not isinstance(k, tuple)}}
    return out, {k: v for k, v in flat.items() if k in inner}


@lru_cache(maxsize=2)
def _font(bold: bool):
    """DejaVu Sans (shipped with matplotlib) at the table font size: the widest common sans-serif,
    so widths measured with it are an upper bound for the fonts a reader's browser picks."""
    from matplotlib import font_manager, ft2font

    path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans",
                                                             weight="bold" if bold else "normal"))
    font = ft2font.FT2Font(path)
    font.set_size(_FONT_PX, 72)  # points at 72 dpi: one point is one CSS px
    return font


@lru_cache(maxsize=65536)
def _text_px(text: str, bold: bool = False) -> float:
    """Width in CSS px of ``text`` in the table font (headers are bold)."""
    if not text:
        return 0.0
    font = _font(bold)
    font.set_text(text, 0.0)
    return font.get_width_height()[0] / 64.0


_BREAKS = re.compile(r"[ \t\n]+")
"""Where a cell's text may wrap (a non-breaking space joins a number with its unit and interval)."""


def _est_width(text: pd.DataFrame, record_cols: set[int] = frozenset(),
               skip: frozenset = frozenset()) -> list[float]:
    """Estimated CSS px per column: numbers on one line, text wrapped at spaces to about
    :data:`_WRAP_PX` (never narrower than its longest word), headers wrapped at spaces, run ids
    (monospace at 0.8 rem) on one line."""
    numeric = _numeric_columns(text, skip)
    widths = []
    for j, col in enumerate(text.columns):
        head = max((_text_px(w, True) for w in str(col).split()), default=0.0)
        cells = [str(v) for v in text[col]]
        if j in record_cols:
            body = max((len(v) for v in cells), default=0) * _MONO_CHAR_PX
        elif j in numeric:
            body = max((_text_px(v) for v in cells), default=0.0)
        else:
            longest_word = max((_text_px(w) for v in cells for w in _BREAKS.split(v)), default=0.0)
            body = max(min(max((_text_px(v) for v in cells), default=0.0), _WRAP_PX), longest_word)
        widths.append(max(head, body) + _CELL_PAD_PX)
    return widths


_LOW = re.compile(r"(^|[\s_:.(])(low|lo|lower)\)?$|^2\.5 ?%$", re.IGNORECASE)
_HIGH = re.compile(r"(^|[\s_:.(])(high|hi|upper)\)?$|^97\.5 ?%$", re.IGNORECASE)
_COUNT_TEXT = re.compile(r"^[+\-−]?\d{1,3}(,\d{3})*$")


def _is_count_column(cells) -> bool:
    vals = [v for v in cells if v not in ("", "\u00a0", "n/a", "–")]
    return bool(vals) and all(_COUNT_TEXT.match(v) for v in vals)


def _first_word(header) -> str:
    words = re.findall(r"[A-Za-zΔμ]+\w*", str(header))
    return words[0].lower() if words else ""


def _units(headers: list, raw: list, data: list[int]) -> list[list[int]]:
    """``data`` columns grouped into runs that must stay in one part: an estimate with the
    low/high columns of its interval right after it (``X``, ``X_lo``, ``X_hi``; headers ending
    in ``low`` / ``high``, or ``2.5%`` / ``97.5%``)."""
    def is_low(j):
        return bool(_LOW.search(str(headers[j]))) or (raw[j] is not None and str(raw[j]).endswith(("_lo", "_low")))

    def is_high(j):
        return bool(_HIGH.search(str(headers[j]))) or (raw[j] is not None and str(raw[j]).endswith(("_hi", "_high")))

    units: list[list[int]] = []
    i = 0
    while i < len(data):
        j = data[i]
        if i + 1 < len(data) and is_low(j) and is_high(data[i + 1]):
            pair = [j, data[i + 1]]
            if units and len(units[-1]) == 1 and not is_low(units[-1][0]) and units[-1][0] == j - 1:
                units[-1] += pair  # the estimate the bounds belong to
            else:
                units.append(pair)
            i += 2
            continue
        units.append([j])
        i += 1
    return units


def _cut_penalty(left: int, right: int, headers: list, counts: set[int], numeric: set[int]) -> float:
    """How much a part boundary between columns ``left`` and ``right`` costs (CSS px): columns
    naming the same quantity (``SSIM q1`` | ``SSIM median``) and a value with the count that
    follows it (``Flip rate`` | ``flips``) belong together."""
    penalty = 0.0
    a, b = _first_word(headers[left]), _first_word(headers[right])
    if a and a == b:
        penalty += _SOFT_BOND_PX
    if left in numeric and left not in counts and right in counts:
        penalty += _SOFT_BOND_PX
    return penalty


def split_plan(widths: list[float], keys: list[int], units: list[list[int]], *, budget: float,
               penalties: Mapping[int, float] | None = None, slack: float | None = None) -> list[list[int]] | None:
    """The data columns of each part of a split table, or ``None`` to keep the table whole.

    ``widths`` are the columns' estimated px, ``keys`` the row-key columns every part repeats,
    ``units`` the data columns in order, grouped into runs that stay together. A table up to
    ``slack`` × ``budget`` wide stays whole (it scrolls inside its container rather than being cut
    into silly parts). Otherwise the fewest parts that each fit in ``slack`` × ``budget`` are chosen,
    every part holding at least two data columns (or one unit of several), the most even widths
    and the cheapest boundaries (``penalties[i]``: the cost of a boundary before unit ``i``)
    winning. ``None`` when no such split exists (the table scrolls).
    """
    slack = _SCROLL_SLACK if slack is None else slack
    penalties = penalties or {}
    if sum(widths) <= budget * slack or len(units) < 2:
        return None
    key_w = sum(widths[j] for j in keys)
    unit_w = [sum(widths[j] for j in u) for u in units]
    n = len(units)
    for k in range(2, n + 1):
        if math.comb(n - 1, k - 1) > _MAX_PLANS:
            return None
        best, best_cost = None, math.inf
        for cuts in combinations(range(1, n), k - 1):
            bounds = (0, *cuts, n)
            parts = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
            if any(sum(len(units[i]) for i in p) < 2 for p in parts):
                continue
            pw = [key_w + sum(unit_w[i] for i in p) for p in parts]
            if max(pw) > budget * slack:
                continue
            cost = (max(pw) - min(pw) + sum(penalties.get(c, 0.0) for c in cuts)
                    + 4 * sum(max(0.0, w - budget) for w in pw))
            if cost < best_cost:
                best, best_cost = parts, cost
        if best is not None:
            return [[j for i in p for j in units[i]] for p in best]
    return None


def _row_key(text: pd.DataFrame, numeric: set[int], *, most: int = 3) -> list[int]:
    """A flat table's row key: the fewest leading text columns (at most ``most``) whose values tell
    every row apart (``paper`` + ``item``; a run id alone); the first text column when none do;
    nothing when the table starts with a number."""
    lead = []
    for j in range(min(most, text.shape[1] - 1)):
        if j in numeric:
            break
        lead.append(j)
        if not text.iloc[:, lead].duplicated().any():
            return lead
    return lead[:1]


def _split_columns(text: pd.DataFrame, n_keys: int, budget: float,
                   record_cols: set[int] = frozenset(), skip: frozenset = frozenset(),
                   raw: list | None = None) -> list[pd.DataFrame]:
    """``text`` as one table, or as parts that each repeat the row key (:func:`split_plan`).

    The row key is the index levels; in a flat table, the leading text columns that tell its rows
    apart (:func:`_row_key`), so every part's rows can be matched.
    """
    headers = list(text.columns)
    raw = list(raw) if raw is not None and len(raw) == len(headers) else [None] * len(headers)
    widths = _est_width(text, record_cols, skip)
    numeric = _numeric_columns(text, skip)
    keys = list(range(n_keys)) or _row_key(text, numeric)
    data = [j for j in range(text.shape[1]) if j not in keys]
    units = _units(headers, raw, data)
    counts = {j for j in numeric if _is_count_column(text.iloc[:, j])}
    penalties = {i: _cut_penalty(units[i - 1][-1], units[i][0], headers, counts, numeric)
                 for i in range(1, len(units))}
    plan = split_plan(widths, keys, units, budget=budget, penalties=penalties)
    if plan is None:
        return [text]
    return [text.iloc[:, keys + part] for part in plan]


# --------------------------------------------------------------------------- MyST
def _escape(text: str) -> str:
    text = str(text).replace("\n", " ")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if _LIST_MARKER.match(text):
        text = "\\" + text
    return text if text.strip() else "\u00a0"


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _is_chapter(value: str) -> bool:
    return bool(_NAME_CHAPTER.match(str(value))) and (paths.notebooks_root() / f"{value}.py").is_file()


_NAME_CHAPTER = re.compile(r"^[a-z0-9_]+$")
_ROLE_UNSAFE = re.compile(r"[`<>]")
_SNAKE_TOKEN = re.compile(r"(?<![A-Za-z0-9])[a-z][a-z0-9]*_[a-z0-9_]+")
"""A lower-case identifier inside a token (``'libra_llama_3',``); notation such as ``Δ_FN`` is not one."""


@lru_cache(maxsize=None)
def chapter_title(name: str) -> str:
    """The title of chapter ``name``: the first ``# # <title>`` line of ``notebooks/<name>.py``."""
    path = paths.notebooks_root() / f"{name}.py"
    if not path.is_file():
        return ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# # "):
            return line[4:].strip()
    return ""


def _cell_markup(value: str, header_is_record: bool, header_is_chapter: bool = False) -> str:
    if header_is_record and value not in ("", "n/a"):
        return "{record}`" + value + "`"
    if header_is_chapter and _is_chapter(value):  # a chapter of the book: a link titled by the chapter
        title = chapter_title(value)
        return "{doc}`" + (f"{_ROLE_UNSAFE.sub('', title)} <{value}>" if title else value) + "`"
    if _SNAKE_TOKEN.search(str(value)) and "`" not in str(value):  # identifiers inside a text read as code
        tokens = str(value).split(" ")
        return " ".join(("`" + t + "`") if _SNAKE_TOKEN.search(t) else (_escape(t) if t else "")
                        for t in tokens).strip() or _escape(value)
    if _ISO_DATE.match(str(value)):  # a date is one word: non-breaking hyphens keep "2026-12-01" on one line
        return str(value).replace("-", "\u2011")
    return _escape(value)


def _blank_repeats(text: pd.DataFrame, n_keys: int) -> pd.DataFrame:
    """Row labels that repeat the row above are left blank, so grouped rows read as blocks.

    Only the outer row-label columns are blanked (never the innermost one), and a label is blanked
    only while every label to its left repeats too.
    """
    out = text.copy()
    for i in range(1, len(text)):
        for j in range(max(n_keys - 1, 0)):
            if text.iat[i, j] != text.iat[i - 1, j]:
                break
            out.iat[i, j] = ""
    return out


def _list_table(text: pd.DataFrame, *, caption: str, label: str | None, record_cols: set[int],
                numeric_cols: set[int], chapter_cols: set[int] = frozenset()) -> str:
    title = _escape(caption).replace("\u00a0", "") if caption else ""
    if not len(text):  # a list-table needs a body: say there is nothing instead
        return f"{title + ': ' if title else ''}*no rows* (nothing of this kind in this run)."
    lines = [("````{list-table} " + title).rstrip(), ":header-rows: 1"]
    if label:
        lines.append(f":name: {label}")
    classes = ["shovir-table"] + [f"num-{i + 1}" for i in sorted(numeric_cols)]
    lines += [f":class: {' '.join(classes)}", ""]
    rows = [list(text.columns)] + text.to_numpy().tolist()
    for r, row in enumerate(rows):
        for j, v in enumerate(row):
            cell = _escape(v) if r == 0 else _cell_markup(v, j in record_cols, j in chapter_cols)
            lines.append(("* - " if j == 0 else "  - ") + cell)
    lines.append("````")
    return "\n".join(lines)


_NUMBER = r"[+\-−]?[\d,]*\.?\d+(e[+\-]?\d+)?"
_NUMERIC_TEXT = re.compile(rf"^{_NUMBER}\s?(%|pp|x)?(\s\[{_NUMBER},\s{_NUMBER}\])?$|^n/a$|^–$|^∞$")


def _numeric_columns(text: pd.DataFrame, skip: frozenset = frozenset()) -> set[int]:
    """Columns whose cells are all numbers (cells reading as a missing value, ``skip``, aside)."""
    out = set()
    for j, col in enumerate(text.columns):
        vals = [v for v in text[col] if v not in ("", "\u00a0") and v not in skip]
        if vals and all(_NUMERIC_TEXT.match(v) for v in vals) and not all(v == "n/a" for v in vals):
            out.add(j)
    return out


@dataclass
class BookTable:
    """A rendered table: what a notebook cell displays (MyST Markdown; plain text for consoles)."""

    markdown: str
    plain: str
    csv_path: Path | None

    def _repr_markdown_(self) -> str:
        return self.markdown

    def __repr__(self) -> str:  # text/plain (nbval, consoles)
        return self.plain


def table_markdown(table, *, name: str | None, caption: str | None = None, formats: Mapping[str, str] | None = None,
                   missing: str | Mapping[str, str] | None = None, groups: str | None = None,
                   budget_px: float = WIDTH_BUDGET_PX, write_csv: bool = True,
                   note: str | None = None, intervals: Mapping[str, tuple[str, str]] | None = None,
                   collapsed: bool = False, label: bool = True, drop_empty: bool = True) -> BookTable:
    """MyST markup of ``table`` (a TableResult) as one or more numbered tables, with a CSV link.

    Parameters
    ----------
    name : str or None
        Lower-case name (``"sv-t1"``): the label ``tbl-<name>`` (``{numref}`tbl-sv-t1```) and the
        CSV ``_tables/<name>.csv``. Without a name the table is numbered but cannot be referenced
        and has no CSV.
    caption : str, optional
        Replaces ``table.caption``; one is required.
    groups : str, optional
        A column (or index level) whose values split the rows into one table per section.
    note : str, optional
        A sentence printed under the table (e.g. why some cells read "not run").
    intervals : mapping, optional
        Column -> ``(low, high)`` columns printed in its cells (see :func:`format_frame`).
    drop_empty : bool
        Leave out columns with no value at all, naming them under the table.
    label : bool
        Give the (first) table the label ``tbl-<name>`` (False for automatic names).
    collapsed : bool
        Put each section's table in a closed dropdown titled by the section and its row count, so a
        long table (an audit's every check) leaves the page short; the reader opens what they need.
    """
    if name is not None:
        check_name(name)
    if missing is None:  # the table's own word for a missing value, unless it is a bare dash
        na_rep = getattr(table, "na_rep", None)
        missing = na_rep if na_rep and na_rep.strip(" –-") else "n/a"
    caption = caption if caption is not None else (getattr(table, "caption", "") or "")
    frame = table.frame
    metrics = {c: m for c, m in (table.metrics or {}).items()}
    labels = dict(table.labels or {})
    csv_path = None
    if write_csv and name is not None:
        csv_path = tables_dir() / f"{name}.csv"
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        out = frame.copy()
        if isinstance(out.columns, pd.MultiIndex):
            out.columns = [" / ".join(str(x) for x in c if str(x)) for c in out.columns]
        keep_index = not isinstance(out.index, pd.RangeIndex) or out.index.name is not None
        out.to_csv(csv_path, index=keep_index, float_format="%.10g")
    index_cols = [c for c in (getattr(table, "index", ()) or ()) if c in frame.columns]
    if index_cols:  # TableResult.index: the columns shown as row labels
        frame = frame.set_index(index_cols)
        frame.index.names = [_flat_name(n) for n in frame.index.names]
    if isinstance(frame.columns, pd.MultiIndex):
        frame, metrics = _stack_column_levels(frame, metrics, labels)
    skip = frozenset(["n/a", "–"] + (list(missing.values()) if isinstance(missing, Mapping) else [missing]))
    if VERDICT_COLUMN in frame.columns and len(frame) > 1 and frame[VERDICT_COLUMN].nunique(dropna=False) == 1:
        # a verdict that is the same on every row is said once, under the table
        same = f"Verdict on every row: {frame[VERDICT_COLUMN].iloc[0]}."
        note = f"{same} {note}" if note else same
        frame = frame.drop(columns=[VERDICT_COLUMN])
    dropped = []
    if drop_empty:  # a column with no value at all carries nothing: say so once instead
        empty = [c for c in frame.columns if frame[c].map(_is_missing).all() and c != groups]
        if empty and len(empty) < frame.shape[1]:
            dropped = [_header(c, labels, metrics) for c in empty]
            frame = frame.drop(columns=empty)
            if intervals:  # an interval whose bounds are all missing has nothing to print
                intervals = {c: pair for c, pair in intervals.items() if not set(pair) & set(empty)}
    n_keys = frame.index.nlevels if (not isinstance(frame.index, pd.RangeIndex) or frame.index.name) else 0
    sections: list[tuple[str | None, pd.DataFrame]]
    if groups is not None:
        g = frame.reset_index() if groups in (frame.index.names or []) else frame
        if groups not in g.columns:
            raise ValueError(f"groups={groups!r} is not a column of the table; columns: {list(g.columns)}")
        sections = [(str(k), part.drop(columns=[groups])) for k, part in g.groupby(groups, sort=False)]
        if groups in (frame.index.names or []):
            keep = [n for n in frame.index.names if n != groups]
            sections = [(k, p.set_index(keep) if keep else p) for k, p in sections]
            n_keys = len(keep)
    else:
        sections = [(None, frame)]
    blocks, plains = [], []
    first = True
    short = caption.split(". ")[0].rstrip(".") if caption else ""
    ran = re.search(r"\s(\[[^\]]*\])\s*$", caption or "")  # what ran ([demo: ...]) ends every part's caption
    if ran and ran.group(1) not in short:
        short = f"{short} {ran.group(1)}"
    for s_i, (section, part) in enumerate(sections):
        text = format_frame(part, metrics=metrics, labels=labels, formats=formats, missing=missing,
                            intervals=intervals)
        all_cols = list(part.reset_index().columns if n_keys else part.columns)
        pairs = auto_intervals(all_cols) if intervals is None else intervals
        raw_cols = [c for c in all_cols
                    if c != ROW_METRIC_COLUMN and not any(c in pair for pair in pairs.values())]
        record_cols = {j for j, c in enumerate(raw_cols) if c == RECORD_COLUMN}
        chapter_cols = {j for j, c in enumerate(raw_cols) if c in CHAPTER_COLUMNS}
        chunks = _split_columns(text, n_keys, budget_px, record_cols, skip, raw=raw_cols)
        section_blocks = []
        for k, chunk in enumerate(chunks):
            head = caption if (s_i == 0 and k == 0) else short
            cap = head if section is None else f"{head.rstrip('.')} — {section}".lstrip(" —")
            if len(chunks) > 1:
                cap = f"{cap.rstrip('.')} (part {k + 1} of {len(chunks)})" if cap else f"Part {k + 1} of {len(chunks)}"
            shown = _blank_repeats(chunk, n_keys)
            cols = [list(text.columns).index(c) for c in chunk.columns]
            recs = {i for i, c in enumerate(cols) if c in record_cols}
            chaps = {i for i, c in enumerate(cols) if c in chapter_cols}
            block = _list_table(shown, caption=cap, label=f"tbl-{name}" if (name and label and first) else None,
                                record_cols=recs, numeric_cols=_numeric_columns(chunk, skip), chapter_cols=chaps)
            section_blocks.append(block)
            plains.append(cap + "\n" + chunk.to_string(index=False))
            first = False
        if collapsed:
            title = _escape(str(section if section is not None else (short or "Table")).replace("_", " "))
            rows = f"{len(part)} row{'s' if len(part) != 1 else ''}"
            inner = "\n\n".join(section_blocks)
            section_blocks = [f"`````{{dropdown}} {title} ({rows})\n:class-container: shovir-dropdown\n\n{inner}\n`````"]
        blocks.extend(section_blocks)
    footer = []
    if dropped:
        footer.append(_escape(f"Not shown, no value in this run: {', '.join(map(str, dropped))}."))
    if note:
        footer.append(_escape(note))
    if csv_path is not None:
        footer.append("{download}`Download this table (CSV) <" + f"{TABLES_LINK_DIR}/{name}.csv" + ">`")
    markdown = "\n\n".join(blocks)
    if footer:
        markdown += "\n\n" + " · ".join(footer) + "\n"
    return BookTable(markdown=markdown, plain="\n\n".join(plains), csv_path=csv_path)
