"""shovir_core: the thin core of the ShoViR / ModaLens companion.

Importing the package is light: submodules (and torch/transformers, which only
``shovir_core.models`` imports) load on first use.
"""
from __future__ import annotations

import importlib

__all__ = ["__version__"]
__version__ = "0.1.0"

_SUBMODULES = {
    "paths", "labels", "data", "records", "perturb", "models", "labeling",
    "metrics", "stats", "protocols", "tables", "book", "papers",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
