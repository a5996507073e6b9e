"""YAML documents parsed by libyaml's C parser where PyYAML was built with it, else by PyYAML's own.

The C parser reads the project's YAML about ten times faster than the pure-Python one (each of the book's
kernels parses the papers' values, checks and metrics once: 15 s of the demo book's worker time went to it);
both build the same documents from the project's files (``tests/test_yaml_text.py`` compares them file by file).
"""
from __future__ import annotations

import yaml

__all__ = ["safe_load", "base_load"]

_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BASE = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


def safe_load(text: str):
    """As :func:`yaml.safe_load` (tags of the safe schema: numbers, booleans, null ...)."""
    return yaml.load(text, Loader=_SAFE)


def base_load(text: str):
    """As ``yaml.load(text, Loader=yaml.BaseLoader)``: every scalar a string."""
    return yaml.load(text, Loader=_BASE)
