"""Every path of the project, derived from one root.

The repository root is found from this file; each location can be moved with an
environment variable so that credentialed runs can live outside the repository.

========================  =====================  ===========================
location                  environment variable   default
========================  =====================  ===========================
run records               ``SHOVIR_RUNS``        ``<repo>/runs``
embedded demo data        ``SHOVIR_DEMO_DATA``   ``<repo>/data/demo``
notebook parameters       --                     ``<repo>/params``
notebook sources          --                     ``<repo>/notebooks``
executed notebooks/book   --                     ``<repo>/book``
========================  =====================  ===========================
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "repo_root", "runs_root", "demo_data_root", "data_root", "params_root",
    "notebooks_root", "book_root", "resources_root",
]

_PACKAGE = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The repository root (the directory holding ``pyproject.toml``)."""
    env = os.environ.get("SHOVIR_ROOT")
    if env:
        return Path(env).resolve()
    return _PACKAGE.parent


def _env_or(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def runs_root() -> Path:
    """Root of the run records (``runs/<protocol>/<name>/<spec-hash>/``)."""
    return _env_or("SHOVIR_RUNS", repo_root() / "runs")


def data_root() -> Path:
    """Root of the data shipped with the repository."""
    return repo_root() / "data"


def demo_data_root() -> Path:
    """The embedded public demo data (NIH ChestX-ray14 subsets)."""
    return _env_or("SHOVIR_DEMO_DATA", data_root() / "demo")


def params_root() -> Path:
    return repo_root() / "params"


def notebooks_root() -> Path:
    return repo_root() / "notebooks"


def book_root() -> Path:
    return repo_root() / "book"


def resources_root() -> Path:
    """Data files shipped inside the package (metric schema, label maps...)."""
    return _PACKAGE / "resources"
