"""One torch thread or two for the demo models: same record ids, trial rows and inference-cache entries."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from shovir_core.models import threads

pytest.importorskip("torch")

from test_shards import SESSION_COUNTS, assert_identical, sorted_trials  # noqa: E402

SPECS = [("modalens", "threads.ref-vlm", {"dataset": "demo-64px", "model": "ref-vlm", "ssim_size": 64,
                                         "n_patients": 2, "batch_cases": 2}),
         ("modalens", "threads.cnn", {"dataset": "demo-64px", "model": "ref-anchored@0.5", "ssim_size": 64,
                                      "n_patients": 2, "batch_cases": 2})]

SCRIPT = """
import json, sys, torch
from shovir_core import protocols
ids = [protocols.run(p, n, s, progress=False).run_id for p, n, s in json.loads(sys.argv[1])]
print(json.dumps({"ids": ids, "threads": torch.get_num_threads()}))
"""


def _make(root: Path, n_threads: int) -> dict:
    env = {**os.environ, "SHOVIR_RUNS": str(root), threads.ENV: str(n_threads)}
    env.pop("OMP_NUM_THREADS", None)  # the setting under test decides, not the shell's
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(SPECS)], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cache(root: Path) -> dict[str, str]:
    with sqlite3.connect(root / ".cache" / "inference" / "inference.sqlite") as con:
        return dict(con.execute("SELECT key, value FROM results"))


def test_thread_count_changes_no_record_and_no_cache_entry(tmp_path, monkeypatch):
    one, two = _make(tmp_path / "one", 1), _make(tmp_path / "two", 2)
    assert (one["threads"], two["threads"]) == (1, 2)  # the setting took effect where the models loaded
    assert one["ids"] == two["ids"]
    for root in (tmp_path / "one", tmp_path / "two"):
        assert len(_cache(root)) > 0
    assert _cache(tmp_path / "one") == _cache(tmp_path / "two")  # keys and stored outputs
    from shovir_core.records import load_run

    for protocol, name, _ in SPECS:
        runs = []
        for root in (tmp_path / "one", tmp_path / "two"):
            monkeypatch.setenv("SHOVIR_RUNS", str(root))
            trials = sorted_trials(load_run(protocol, name))
            timings = [c for c in trials.columns if c in SESSION_COUNTS or c.endswith("_seconds")]
            runs.append(trials.drop(columns=timings))
        assert len(runs[0]) > 0
        assert_identical(*runs)


def test_the_setting_is_validated(monkeypatch):
    monkeypatch.setenv(threads.ENV, "0")
    with pytest.raises(ValueError, match=threads.ENV):
        threads.demo_threads()
    monkeypatch.delenv(threads.ENV)
    assert threads.demo_threads() == 1
