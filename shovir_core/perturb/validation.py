"""Validation of the perturbation API's arguments: every bad value is refused with its name and value.

Rules (ShoViR §3 for the meaning of each argument):

* ``p`` and every entry of ``ps``: a real number (``int``, ``float``, numpy numbers, any
  :class:`numbers.Real`) in [0, 1]; ``bool`` and strings are refused, NaN and infinities too;
  ``ps`` is a non-empty sequence, never a single number or a string;
* ``item_id``: required, a non-empty string or an integer (not a bool); it is part of the random
  stream, so ``None`` would give every item the same noise;
* ``seed``, ``max_retries``, ``limit``: integers (not bools) with their lower bounds;
* ``target``: one of the classes of the image's boxes, spelled exactly as the boxes spell it. A target
  that names a class only under the case-insensitive rule of :func:`class_key` (Unicode case folding,
  runs of spaces and underscores as one space, outer spaces dropped), such as ``"atelectasis"`` for
  ``"Atelectasis"``, is refused with the exact spelling in the message (issue 29: a wrong-case DOCO target
  was accepted without a word). Boxes are still compared with the target by :func:`class_key`, so a box
  spelled differently from the target is a target box, never a co-finding box of DOCO.
* lists of names (``conditions``, ``classes``): a sequence of strings, never a bare string (which
  would be read character by character).
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import ShovirError

__all__ = [
    "PerturbInputError", "UnknownTargetError", "check_real", "check_int", "check_item_id", "check_p_grid",
    "check_names", "class_key", "resolve_target",
]


class PerturbInputError(ShovirError, ValueError):
    """A perturbation argument was refused; the message names the argument and the value."""


class UnknownTargetError(PerturbInputError):
    """The target class is not a class of the image's boxes."""


def _where(item_id) -> str:
    return f"item {item_id!r}: " if item_id is not None else ""


def check_real(value, name: str, *, lo: float | None = None, hi: float | None = None, item_id=None) -> float:
    """``value`` as a float; a bool, a string, NaN, an infinity or a value outside [lo, hi] is refused."""
    span = f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else ""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise PerturbInputError(f"{_where(item_id)}{name} must be a real number{span} (not a bool or a string), "
                                f"got {value!r}")
    x = float(value)
    if not math.isfinite(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise PerturbInputError(f"{_where(item_id)}{name} must lie in [{lo:g}, {hi:g}], got {value!r}"
                                if span else f"{_where(item_id)}{name} must be a finite number, got {value!r}")
    return x


def check_int(value, name: str, *, lo: int | None = None, item_id=None) -> int:
    """``value`` as an int; bools, floats and strings are refused, and values below ``lo``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise PerturbInputError(f"{_where(item_id)}{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise PerturbInputError(f"{_where(item_id)}{name} must be at least {lo}, got {value!r}")
    return int(value)


def check_item_id(item_id):
    """``item_id`` when it is a non-empty string or an integer (it seeds the item's random stream)."""
    if isinstance(item_id, (bool, np.bool_)) or not isinstance(item_id, (str, int, np.integer)) or (
            isinstance(item_id, str) and not item_id.strip()):
        raise PerturbInputError(f"item_id is required: a non-empty string or an integer identifying the item "
                                f"(it is part of the random stream), got {item_id!r}")
    return int(item_id) if isinstance(item_id, np.integer) else item_id


def check_p_grid(ps, name: str = "ps", *, item_id=None) -> list[float]:
    """A non-empty sequence of strengths in [0, 1] (see :func:`check_real`)."""
    if isinstance(ps, (str, bytes, numbers.Number, np.generic)) or not isinstance(ps, (Sequence, np.ndarray)):
        raise PerturbInputError(f"{_where(item_id)}{name} must be a sequence of numbers in [0, 1], got {ps!r}")
    out = [check_real(p, f"{name}[{i}]" if name != "p" else "p", lo=0.0, hi=1.0, item_id=item_id)
           for i, p in enumerate(ps)]
    if not out:
        raise PerturbInputError(f"{_where(item_id)}{name} is empty: give at least one p in [0, 1]")
    return out


def check_names(values, name: str, *, allowed: Iterable[str] | None = None) -> list[str]:
    """A non-empty sequence of strings (never one string), each in ``allowed`` when given."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray, set, frozenset)):
        raise PerturbInputError(f"{name} must be a list of names, got {values!r}"
                                + (f" (write [{values!r}] for one)" if isinstance(values, str) else ""))
    out = list(values)
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise PerturbInputError(f"{name} must hold non-empty strings, got {bad[0]!r}")
    if not out:
        raise PerturbInputError(f"{name} is empty")
    if allowed is not None:
        allowed = tuple(allowed)
        unknown = [v for v in out if v not in allowed]
        if unknown:
            raise PerturbInputError(f"unknown {name} {unknown}; choose from {list(allowed)}")
    return out


_SPACES = re.compile(r"[\s_]+")


def class_key(name: str) -> str:
    """The case-insensitive key of a class name.

    >>> class_key(" Pleural_effusion "), class_key("PLEURAL  EFFUSION")
    ('pleural effusion', 'pleural effusion')
    """
    return _SPACES.sub(" ", str(name).casefold()).strip()


def resolve_target(target, classes: Iterable[str], *, item_id=None, condition: str | None = None) -> str:
    """``target`` when it is one of ``classes`` (exact spelling, see the module docstring); else
    :class:`UnknownTargetError`, naming the exact spelling when only the case or spacing differs."""
    if not isinstance(target, str) or not target.strip():
        raise PerturbInputError(f"{_where(item_id)}target must be a class name, got {target!r}")
    classes = list(dict.fromkeys(classes))
    if target in classes:
        return target
    matches = [c for c in classes if class_key(c) == class_key(target)]
    what = f"{condition} " if condition else ""
    if matches:
        raise UnknownTargetError(f"{_where(item_id)}{what}target {target!r} is not spelled as a class of the image's "
                                 f"boxes: did you mean {matches[0]!r}? (class names are matched exactly)")
    raise UnknownTargetError(f"{_where(item_id)}{what}target {target!r} is not a class of the image's boxes "
                             f"{sorted(classes)} (matched exactly or case-insensitively)")
