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

A list field declares the type of its items; ``choices`` and ``range`` then apply to every item, and
a string where a list is expected is refused, never iterated:

>>> grid = SpecSchema("demo", [
...     Field("ps", list, [0.0, 1.0], items=float, range=(0.0, 1.0), min_items=1, unique=True),
...     Field("conditions", list, ["OCO"], items=str, choices=("RO", "OCO", "DOCO")),
... ])
>>> grid.resolve({"ps": [0, 0.5]})
{'conditions': ['OCO'], 'ps': [0.0, 0.5]}
>>> grid.resolve({"ps": 0.5})
Traceback (most recent call last):
...
shovir_core.protocols.spec.SpecError: demo spec: 'ps' = 0.5 must be a list of numbers
>>> grid.resolve({"conditions": "OCO"})
Traceback (most recent call last):
...
shovir_core.protocols.spec.SpecError: demo spec: 'conditions' = 'OCO' must be a list of strings
>>> grid.resolve({"ps": [0.5, 1.5]})
Traceback (most recent call last):
...
shovir_core.protocols.spec.SpecError: demo spec: 'ps' = [0.5, 1.5]: item 1.5 is outside [0.0, 1.0]

A field marked ``pin=True`` holds what the record depends on (a dataset's content hash, a model's
fingerprint): ``None`` in a spec as written, filled by ``resolve_spec`` with :meth:`SpecSchema.pin`,
which refuses a pinned value that no longer matches, so a resolved spec resolves to itself and a
changed dataset never reuses a record:

>>> pins = SpecSchema("demo", [Field("dataset_sha256", (str, type(None)), None, pin=True)])
>>> out = pins.resolve({})
>>> pins.pin(out, "dataset_sha256", "ab" * 32, what="dataset 'demo'")
>>> out["dataset_sha256"][:4]
'abab'
>>> pins.pin({"dataset_sha256": "0" * 64}, "dataset_sha256", "ab" * 32, what="dataset 'demo'")
Traceback (most recent call last):
...
shovir_core.protocols.spec.SpecError: demo: dataset 'demo' changed: it is abababababab..., the spec pins 000000000000...
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ShovirError

__all__ = ["Field", "SpecSchema", "SpecError", "StaleSpecError", "REQUIRED"]


class SpecError(ShovirError, ValueError):
    """A protocol spec has an unknown, mistyped or out-of-range key, a combination of keys the
    protocol cannot run, or a pinned value (a dataset's content hash, a model's fingerprint) that no
    longer matches."""


class StaleSpecError(ShovirError, RuntimeError):
    """What a resolved spec pins (a dataset, a model, a resource) changed between resolving the spec
    and executing it."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of a field the spec must set."""

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping"}


def _match(value: Any, types: tuple[type, ...]) -> tuple[bool, Any]:
    """Whether ``value`` is one of ``types`` (bools are not numbers; ints widen to float where a
    float is declared, integral floats narrow to int where an int is), and the converted value."""
    for t in types:
        if t is type(None):
            if value is None:
                return True, None
        elif t is bool:
            if isinstance(value, bool):
                return True, value
        elif t in (int, float):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    t is float or float(value).is_integer()):
                return True, float(value) if t is float else int(value)
        elif t is list:
            if isinstance(value, (list, tuple)):
                return True, list(value)
        elif isinstance(value, t):
            return True, value
    return False, value


def _names(types: tuple[type, ...], *, plural: bool = False) -> str:
    names = [(_PLURALS if plural else _TYPE_NAMES).get(t, "null" if t is type(None) else t.__name__)
             for t in types]
    return " or ".join(names)


_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings", list: "lists",
            dict: "mappings"}


@dataclass(frozen=True)
class Field:
    """One spec key.

    Parameters
    ----------
    name : str
        The key.
    type : type or tuple of types
        ``bool``, ``int``, ``float`` (ints are accepted and converted), ``str``, ``list`` or ``dict``;
        a tuple admits several (``(str, type(None))`` for an optional string). A boolean is never
        taken for a number, and a string never for a list.
    default : object
        Filled in when the key is absent; :data:`REQUIRED` makes it mandatory.
    choices : sequence, optional
        Allowed values (for lists: allowed items).
    range : (lo, hi), optional
        Inclusive bounds of a number, or of every item of a list of numbers (``None``: an open end).
    items : type or tuple of types, optional
        The type of every item of a list value (same rules as ``type``).
    min_items : int, optional
        The fewest items a list value may have.
    unique : bool
        A list value's items must be distinct.
    execution : bool
        An execution-only setting, kept out of the hashed identity.
    pin : bool
        A value ``resolve_spec`` pins (:meth:`SpecSchema.pin`); its default must be ``None``.
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
    items: type | tuple[type, ...] | None = None
    min_items: int | None = None
    unique: bool = False
    execution: bool = False
    check: Callable[[Any], str | None] | None = None
    doc: str = ""
    pin: bool = False

    def _types(self) -> tuple[type, ...]:
        return self.type if isinstance(self.type, tuple) else (self.type,)

    def _item_types(self) -> tuple[type, ...] | None:
        if self.items is None:
            return None
        return self.items if isinstance(self.items, tuple) else (self.items,)

    def describe(self) -> str:
        """What the field accepts, in words (``a list of numbers or null``)."""
        items = self._item_types()
        names = []
        for t in self._types():
            if t is list and items is not None:
                names.append(f"a list of {_names(items, plural=True)}")
            else:
                names.append(_names((t,)))
        return " or ".join(names)

    def _fail(self, where: str, value: Any, what: str) -> SpecError:
        return SpecError(f"{where}: {self.name!r} = {value!r}{what}")

    def _check_number(self, value: Any, where: str, shown: Any, item: bool) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        prefix = f": item {value!r}" if item else ""
        if isinstance(value, float) and not math.isfinite(value):
            raise self._fail(where, shown, f"{prefix} must be finite")
        if self.range is not None:
            lo, hi = self.range
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise self._fail(where, shown, f"{prefix} is outside "
                                 f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]")

    def coerce(self, value: Any, where: str) -> Any:
        """The validated value (ints widened to float where a float is declared; tuples to lists)."""
        ok, value = _match(value, self._types())
        if not ok:
            raise self._fail(where, value, f" must be {self.describe()}" + (f" ({self.doc})" if self.doc else ""))
        if value is None:
            return None
        if isinstance(value, list):
            item_types = self._item_types()
            if item_types is not None:
                out = []
                for item in value:
                    good, item = _match(item, item_types)
                    if not good:
                        raise self._fail(where, value, f": item {item!r} must be {_names(item_types)}")
                    out.append(item)
                value = out
            if self.min_items is not None and len(value) < self.min_items:
                raise self._fail(where, value, f" needs at least {self.min_items} item(s)")
            if self.unique:
                seen: list = []
                for item in value:
                    if item in seen:
                        raise self._fail(where, value, f": item {item!r} is repeated")
                    seen.append(item)
            for item in value:
                self._check_number(item, where, value, item=True)
        else:
            self._check_number(value, where, value, item=False)
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            if bad:
                raise SpecError(f"{where}: {self.name!r} = {value!r} is not allowed; "
                                f"use {'items of' if isinstance(value, list) else 'one of'} {list(self.choices)}"
                                + (f" ({self.doc})" if self.doc else ""))
        if self.check is not None:
            msg = self.check(value)
            if msg:
                raise self._fail(where, value, f": {msg}")
        return value


def _short(value) -> str:
    """A pinned value in a message: a hash's first 12 characters, a fingerprint's ``sha256`` (or the
    hash of its JSON)."""
    if isinstance(value, dict):
        import hashlib
        import json

        value = value.get("sha256") or hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        return f"fingerprint {str(value)[:12]}..."
    return f"{str(value)[:12]}..."


class SpecSchema:
    """The declared spec of one protocol (see the module docstring)."""

    def __init__(self, protocol: str, fields: Iterable[Field]) -> None:
        self.protocol = protocol
        self.fields: dict[str, Field] = {}
        for f in fields:
            if f.name in self.fields:
                raise ValueError(f"{protocol}: field {f.name!r} declared twice")
            if f.pin and (f.default is not None or f.execution):
                raise ValueError(f"{protocol}: pinned field {f.name!r} must default to None and be part of the identity")
            self.fields[f.name] = f

    @property
    def defaults(self) -> dict:
        """Every identity key with its default (``REQUIRED`` where there is none)."""
        return {k: f.default for k, f in self.fields.items() if not f.execution}

    def _as_dict(self, spec: Mapping | None) -> dict:
        if spec is None:
            return {}
        if not isinstance(spec, Mapping):
            raise SpecError(f"{self.protocol} spec must be a mapping, got {type(spec).__name__}")
        return dict(spec)

    def _check_keys(self, spec: Mapping) -> None:
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

    def pin(self, spec: dict, key: str, value, *, what: str) -> None:
        """Pin ``spec[key] = value`` (the current hash or fingerprint of ``what``); a value the spec
        already pins that differs is a :class:`SpecError` naming ``what`` and both values."""
        field = self.fields.get(key)
        if field is None or not field.pin:
            raise KeyError(f"{self.protocol}: {key!r} is not a field declared with pin=True")
        pinned = spec.get(key)
        if pinned is not None and pinned != value:
            raise SpecError(f"{self.protocol}: {what} changed: it is {_short(value)}, the spec pins {_short(pinned)}")
        spec[key] = value

    def resolve(self, spec: Mapping | None) -> dict:
        """The identity part of ``spec``: every non-execution key validated, defaults filled, sorted.

        Execution-only keys present in ``spec`` are validated too (a bad batch size fails here, not
        half-way through a run) and left out of the result."""
        spec = self._as_dict(spec)
        self._resolve(spec, execution=True)
        return self._resolve(spec, execution=False)

    def execution(self, spec: Mapping | None) -> dict:
        """The execution-only settings of ``spec`` (defaults filled); never hashed."""
        return self._resolve(self._as_dict(spec), execution=True)

    def identity(self, spec: Mapping | None) -> dict:
        """``spec`` without its execution-only keys (unknown keys still raise)."""
        spec = self._as_dict(spec)
        self._check_keys(spec)
        return {k: v for k, v in spec.items() if not self.fields[k].execution}
