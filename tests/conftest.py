"""Fixtures for the whole suite. Tests never touch the network, and read only files of this repository."""
from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    """An empty runs root for tests that write records."""
    root = tmp_path / "runs"
    monkeypatch.setenv("SHOVIR_RUNS", str(root))
    return root


@pytest.fixture
def check_table():
    """Assert the table contract of a ``TableResult``: known metrics, a display with one readable
    header per column and one row per frame row."""
    def check(table):
        from shovir_core.metrics.schema import metric_schema
        from shovir_core.tables import TableResult

        assert isinstance(table, TableResult)
        assert set(table.metrics.values()) <= set(metric_schema())
        shown = table.display()
        assert len(shown) == len(table.frame)
        assert shown.columns.is_unique, f"display headers repeat: {list(shown.columns)}"
        return shown
    return check
