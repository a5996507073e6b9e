"""A small, safe arithmetic language over published values, with rounding intervals.

Checks are written as expressions such as ``t4.n_correct_orig / design.all14_trials``
or ``argmin(select(table="1", dataset="PadChest", arm="delta_fn", metric="F1_14"))``.
Names are value ids of one paper; only the operators ``+ - * /`` and the functions
in :data:`FUNCTIONS` are allowed (the expression is parsed with :mod:`ast`, never
``eval``-ed).

Every rounded input stands for an interval (the printed value ± half a unit in its
last digit). :func:`evaluate` returns the value at the printed inputs and the range
over the corners of those intervals (all corners for up to
:data:`MAX_CORNER_INPUTS` inputs; beyond that, first-order propagation for numbers
and a fixed sample of corners for labels). Counts are exact.
"""
from __future__ import annotations

import ast
import hashlib
import itertools
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from . import derive
from .values import Reported
from ..errors import ShovirError

__all__ = ["Evaluation", "ExpressionError", "Selection", "evaluate", "FUNCTIONS", "MAX_CORNER_INPUTS"]

MAX_CORNER_INPUTS = 10
_SHRINK = 1 - 1e-9  # keep corners strictly inside the half-open rounding interval
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class ExpressionError(ShovirError, ValueError):
    """An expression is malformed, names an unknown value, or cannot be evaluated."""


@dataclass(frozen=True)
class Selection:
    """Published values picked by their keys (``select(dataset="MIMIC", ...)``)."""

    items: tuple[Reported, ...]


@dataclass(frozen=True)
class Evaluation:
    """Result of an expression.

    Attributes
    ----------
    value : float or str or frozenset
        At the printed inputs.
    low, high : float
        Range over the inputs' rounding intervals (NaN for labels).
    possible : frozenset
        Labels reachable inside the rounding intervals (empty for numbers).
    inputs : tuple of str
        Ids of the rounded inputs that were varied.
    """

    value: float | str | frozenset
    low: float
    high: float
    possible: frozenset
    inputs: tuple[str, ...]

    @property
    def categorical(self) -> bool:
        return not isinstance(self.value, float)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Context:
    def __init__(self, values: Mapping[str, Reported], overrides: Mapping[str, float], record: set | None):
        self.values, self.overrides, self.record = values, overrides, record

    def number(self, item: Reported) -> float | str | frozenset:
        if item.categorical:
            return item.value
        if self.record is not None and not item.exact:
            self.record.add(item.id)
        return self.overrides.get(item.id, item.value)

    def numbers(self, arg) -> list[float]:
        if isinstance(arg, Selection):
            return [self.number(it) for it in arg.items]
        return [arg]


def _by(sel: Selection, by: str) -> list[str]:
    missing = [it.id for it in sel.items if by not in it.keys]
    if missing:
        raise ExpressionError(f"values {missing[:3]} have no key {by!r}")
    return [it.keys[by] for it in sel.items]


def _need_selection(name: str, arg) -> Selection:
    if not isinstance(arg, Selection):
        raise ExpressionError(f"{name}() takes a select(...) as its first argument")
    return arg


def _extreme(ctx, sel, by, pick):
    sel = _need_selection("argmin/argmax", sel)
    nums, labels = ctx.numbers(sel), _by(sel, by)
    best = pick(range(len(nums)), key=lambda i: nums[i])
    return labels[best]


def _ranked(ctx, sel, k, by, largest):
    sel = _need_selection("top/bottom", sel)
    nums, labels = ctx.numbers(sel), _by(sel, by)
    order = sorted(range(len(nums)), key=lambda i: nums[i], reverse=largest)
    return frozenset(labels[i] for i in order[: int(k)])


def _rank(ctx, sel, label, by, largest):
    sel = _need_selection("rank", sel)
    nums, labels = ctx.numbers(sel), _by(sel, by)
    if label not in labels:
        raise ExpressionError(f"rank(): {label!r} is not among {labels}")
    mine = nums[labels.index(label)]
    return float(1 + sum((v > mine) if largest else (v < mine) for v in nums))


def _flat(ctx, args) -> list[float]:
    out = []
    for a in args:
        out.extend(ctx.numbers(a))
    if not out:
        raise ExpressionError("aggregate of nothing")
    return out


FUNCTIONS = {
    "min": lambda ctx, *a: min(_flat(ctx, a)),
    "max": lambda ctx, *a: max(_flat(ctx, a)),
    "sum": lambda ctx, *a: math.fsum(_flat(ctx, a)),
    "mean": lambda ctx, *a: math.fsum(_flat(ctx, a)) / len(_flat(ctx, a)),
    "count": lambda ctx, sel: float(len(_need_selection("count", sel).items)),
    "abs": lambda ctx, x: abs(x),
    "argmin": lambda ctx, sel, by="model": _extreme(ctx, sel, by, min),
    "argmax": lambda ctx, sel, by="model": _extreme(ctx, sel, by, max),
    "top": lambda ctx, sel, k, by="model": _ranked(ctx, sel, k, by, True),
    "bottom": lambda ctx, sel, k, by="model": _ranked(ctx, sel, k, by, False),
    "rank_desc": lambda ctx, sel, label, by="model": _rank(ctx, sel, label, by, True),
    "rank_asc": lambda ctx, sel, label, by="model": _rank(ctx, sel, label, by, False),
    "implied_rate": lambda ctx, rate, n, scale=100.0: derive.implied_rate(rate, n, scale),
    "kappa_from_agreement": lambda ctx, a, s, p: derive.kappa_from_agreement(a, s, p),
    "balanced_accuracy_from_yes": lambda ctx, y, npos, nneg, spec: derive.balanced_accuracy_from_yes(
        y, npos, nneg, spec),
    "interaction": lambda ctx, full, report_q, image_q, q: derive.interaction(full, report_q, image_q, q),
}
"""Functions an expression may call. ``select`` (by keys) is built in; ``implied_rate``
reads its inputs at their printed values (its point is to test them)."""

_POINT_ONLY = {"implied_rate"}


class _Compiled:
    def __init__(self, text: str, values: Mapping[str, Reported]):
        self.text, self.values = text, values
        self._selections: dict[tuple, Selection] = {}
        try:
            self.tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"cannot parse {text!r}: {exc.msg}") from None
        self._validate(self.tree.body)

    def _validate(self, node):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in {*FUNCTIONS, "select"}:
                raise ExpressionError(f"{self.text!r}: unknown function {ast.unparse(node.func)!r}")
            for a in node.args:
                self._validate(a)
            for kw in node.keywords:
                if kw.arg is None:
                    raise ExpressionError(f"{self.text!r}: **kwargs are not allowed")
                self._validate(kw.value)
            return
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = _dotted(node)
            if name is None or name not in self.values:
                close = [k for k in self.values if name and k.startswith(name.split(".")[0])][:5]
                raise ExpressionError(f"{self.text!r}: unknown value {name!r}" + (f" (ids like {close})" if close else ""))
            return
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._validate(node.left)
            self._validate(node.right)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            self._validate(node.operand)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) \
                and not isinstance(node.value, bool):
            return
        raise ExpressionError(f"{self.text!r}: {type(node).__name__} is not allowed ({ast.unparse(node)!r})")

    def run(self, ctx: _Context):
        return self._ev(self.tree.body, ctx)

    def _ev(self, node, ctx: _Context):
        if isinstance(node, ast.Constant):
            return float(node.value) if isinstance(node.value, int) else node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            return ctx.number(self.values[_dotted(node)])
        if isinstance(node, ast.UnaryOp):
            v = self._num(self._ev(node.operand, ctx), node)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            left = self._num(self._ev(node.left, ctx), node)
            right = self._num(self._ev(node.right, ctx), node)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError(f"{self.text!r}: division by zero in {ast.unparse(node)!r}")
            return _BINOPS[type(node.op)](left, right)
        name = node.func.id
        inner = _Context(ctx.values, {}, None) if name in _POINT_ONLY else ctx
        kwargs = {kw.arg: self._ev(kw.value, inner) for kw in node.keywords}
        if name == "select":
            return self._select(kwargs)
        args = [self._ev(a, inner) for a in node.args]
        try:
            return FUNCTIONS[name](inner, *args, **kwargs)
        except TypeError as exc:
            raise ExpressionError(f"{self.text!r}: bad arguments to {name}(): {exc}") from None

    def _num(self, v, node):
        if not isinstance(v, float):
            raise ExpressionError(f"{self.text!r}: {ast.unparse(node)!r} mixes a label or selection into arithmetic")
        return v

    def _select(self, keys: dict) -> Selection:
        keys = {k: str(v) for k, v in keys.items()}
        cache_key = tuple(sorted(keys.items()))
        if cache_key not in self._selections:
            items = tuple(it for it in self.values.values()
                          if all(it.keys.get(k) == v for k, v in keys.items()))
            if not items:
                raise ExpressionError(f"{self.text!r}: select({keys}) matches no value")
            self._selections[cache_key] = Selection(items)
        return self._selections[cache_key]


def _as_result(v, text):
    if isinstance(v, Selection):
        raise ExpressionError(f"{text!r}: a selection must be reduced (min, max, argmin, ...)")
    return v


def evaluate(text: str, values: Mapping[str, Reported]) -> Evaluation:
    """Evaluate ``text`` over ``values``; see the module docstring for the interval rule.

    Raises
    ------
    ExpressionError
        Naming the expression and the offending part.
    """
    compiled = _Compiled(text, values)
    used: set[str] = set()
    point = _as_result(compiled.run(_Context(values, {}, used)), text)
    inputs = tuple(sorted(used))
    half = {i: values[i].half_width * _SHRINK for i in inputs}

    def at(signs):
        overrides = {i: values[i].value + s * half[i] for i, s in zip(inputs, signs)}
        return compiled.run(_Context(values, overrides, None))

    if isinstance(point, (str, frozenset)):
        if len(inputs) <= MAX_CORNER_INPUTS:
            corners = itertools.product((-1, 1), repeat=len(inputs))
        else:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rng = np.random.default_rng(seed)
            corners = (tuple(row) for row in rng.choice([-1, 1], size=(4096, len(inputs))))
        possible = frozenset({point, *(at(c) for c in corners)})
        return Evaluation(point, math.nan, math.nan, possible, inputs)
    if len(inputs) <= MAX_CORNER_INPUTS:
        outs = [point, *(at(c) for c in itertools.product((-1, 1), repeat=len(inputs)))]
        lo, hi = min(outs), max(outs)
    else:
        spread = 0.0
        for k in range(len(inputs)):
            signs = [0] * len(inputs)
            devs = []
            for s in (-1, 1):
                signs[k] = s
                devs.append(abs(at(signs) - point))
            spread += max(devs)
        lo, hi = point - spread, point + spread
    return Evaluation(float(point), float(lo), float(hi), frozenset(), inputs)
