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
