"""Each benchmark's ratio printed beside its limit, with a verdict (imported by the scripts beside it).

A ratio compares two paths timed in the same process (a baseline and the optimised path), so load
from other processes moves both; the limit is the issue's target for that ratio.
"""
from __future__ import annotations

__all__ = ["verdict"]


def verdict(name: str, ratio: float, *, at_least: float | None = None, at_most: float | None = None) -> str:
    """``"<name> = 1.23x (limit >= 3x): NOT met"``; exactly one of ``at_least``/``at_most``.

    >>> verdict("speed-up", 4.0, at_least=3)
    'speed-up = 4.00x (limit >= 3x): met'
    >>> verdict("lens / plain", 1.5, at_most=1.2)
    'lens / plain = 1.50x (limit <= 1.2x): NOT met'
    """
    if (at_least is None) == (at_most is None):
        raise ValueError("verdict: give exactly one of at_least, at_most")
    limit, ok, sign = (at_least, ratio >= at_least, ">=") if at_least is not None else (at_most, ratio <= at_most, "<=")
    return f"{name} = {ratio:.2f}x (limit {sign} {limit:g}x): {'met' if ok else 'NOT met'}"
