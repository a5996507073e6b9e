"""Declared protocol specs: fields with types, allowed values, ranges and defaults.

Every protocol declares its spec once as a :class:`SpecSchema`. :meth:`SpecSchema.resolve` fills the
defaults and validates every key, raising one :class:`SpecError` that names the key, the value and
what is allowed. Fields marked ``execution=True`` (chunk and batch sizes, device, progress) change
how a record is made, not what it holds: they are returned apart and never enter the hashed
identity, so changing a batch size reuses the same record.

>>> schema = SpecSchema("demo", [
...     Field("model", str, "ref-blind-prior", doc="registry name"),
...     Field("p", float, 1.0, range=(0.0, 1.0)),
...     Field("order", str, "image_first", choices=("image_first", "text_first")),
...     Field("batch_cases", int, 64, range=(1, None), execution=True),
... ])
>>> schema.resolve({"p": 0.4})
{'model': 'ref-blind-prior', 'order': 'image_first', 'p': 0.4}
>>> schema.execution({"batch_cases": 8})
{'batch_cases': 8}
>>> schema.resolve({"order": "sideways"})
Traceback (most recent call last):
...
shovir_core.protocols.spec.SpecError: demo spec: 'order' = 'sideways' is not allowed; use one of ['image_first', 'text_first']
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Field", "SpecSchema", "SpecError", "REQUIRED"]


class SpecError(ValueError):
    """A protocol spec has an unknown, mistyped or out-of-range key."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of a field the spec must set."""

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping"}


@dataclass(frozen=True)
class Field:
    """One spec key.

    Parameters
    ----------
    name : str
        The key.
    type : type or tuple of types
        ``bool``, ``int``, ``float`` (ints are accepted and converted), ``str``, ``list`` or ``dict``;
        a tuple admits several (``(str, type(None))`` for an optional string).
    default : object
        Filled in when the key is absent; :data:`REQUIRED` makes it mandatory.
    choices : sequence, optional
        Allowed values (for lists: allowed items).
    range : (lo, hi), optional
        Inclusive bounds of a number (``None`` for an open end).
    execution : bool
        An execution-only setting, kept out of the hashed identity.
    check : callable, optional
        ``check(value) -> str | None``: a message when the value is not allowed.
    doc : str
        One line shown in error messages and ``--help`` texts.
    """

    name: str
    type: type | tuple[type, ...]
    default: Any = REQUIRED
    choices: Sequence | None = None
    range: tuple[float | None, float | None] | None = None
    execution: bool = False
    check: Callable[[Any], str | None] | None = None
    doc: str = ""

    def _types(self) -> tuple[type, ...]:
        return self.type if isinstance(self.type, tuple) else (self.type,)

    def describe(self) -> str:
        names = [_TYPE_NAMES.get(t, "null" if t is type(None) else t.__name__) for t in self._types()]
        return " or ".join(names)

    def coerce(self, value: Any, where: str) -> Any:
        """The validated value (ints widened to float where a float is declared; tuples to lists)."""
        types = self._types()
        if value is None and type(None) in types:
            return None
        if isinstance(value, tuple):
            value = list(value)
        ok = False
        for t in types:
            if t is bool:
                ok = isinstance(value, bool)
            elif t in (int, float):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    t is float or float(value).is_integer())
                if ok:
                    value = float(value) if t is float else int(value)
            else:
                ok = isinstance(value, t)
            if ok:
                break
        if not ok:
            raise SpecError(f"{where}: {self.name!r} = {value!r} must be {self.describe()}"
                            + (f" ({self.doc})" if self.doc else ""))
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{where}: {self.name!r} = {value!r} must be finite")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            if bad:
                raise SpecError(f"{where}: {self.name!r} = {value!r} is not allowed; "
                                f"use {'items of' if isinstance(value, list) else 'one of'} {list(self.choices)}")
        if self.range is not None and isinstance(value, (int, float)):
            lo, hi = self.range
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise SpecError(f"{where}: {self.name!r} = {value!r} is outside "
                                f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]")
        if self.check is not None:
            msg = self.check(value)
            if msg:
                raise SpecError(f"{where}: {self.name!r} = {value!r}: {msg}")
        return value


class SpecSchema:
    """The declared spec of one protocol (see the module docstring)."""

    def __init__(self, protocol: str, fields: Iterable[Field]) -> None:
        self.protocol = protocol
        self.fields: dict[str, Field] = {}
        for f in fields:
            if f.name in self.fields:
                raise ValueError(f"{protocol}: field {f.name!r} declared twice")
            self.fields[f.name] = f

    @property
    def defaults(self) -> dict:
        """Every identity key with its default (``REQUIRED`` where there is none)."""
        return {k: f.default for k, f in self.fields.items() if not f.execution}

    def _check_keys(self, spec: Mapping) -> None:
        if not isinstance(spec, Mapping):
            raise SpecError(f"{self.protocol} spec must be a mapping, got {type(spec).__name__}")
        unknown = sorted(set(spec) - set(self.fields))
        if unknown:
            raise SpecError(f"{self.protocol} spec: unknown key(s) {unknown}; "
                            f"allowed: {sorted(self.fields)}")

    def _resolve(self, spec: Mapping, execution: bool) -> dict:
        self._check_keys(spec)
        where = f"{self.protocol} spec"
        out = {}
        for name in sorted(self.fields):
            f = self.fields[name]
            if f.execution is not execution:
                continue
            if name in spec:
                out[name] = f.coerce(spec[name], where)
            elif f.default is REQUIRED:
                raise SpecError(f"{where}: {name!r} is required ({f.describe()}"
                                + (f"; {f.doc}" if f.doc else "") + ")")
            else:
                out[name] = f.default if not isinstance(f.default, (list, dict)) else type(f.default)(f.default)
        return out

    def resolve(self, spec: Mapping | None) -> dict:
        """The identity part of ``spec``: every non-execution key validated, defaults filled, sorted."""
        return self._resolve(dict(spec or {}), execution=False)

    def execution(self, spec: Mapping | None) -> dict:
        """The execution-only settings of ``spec`` (defaults filled); never hashed."""
        return self._resolve(dict(spec or {}), execution=True)

    def identity(self, spec: Mapping | None) -> dict:
        """``spec`` without its execution-only keys (unknown keys still raise)."""
        spec = dict(spec or {})
        self._check_keys(spec)
        return {k: v for k, v in spec.items() if not self.fields[k].execution}
