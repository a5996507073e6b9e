"""The rehearsal page's tables (shovir_core.tables.rehearsal) from a rehearsal record's rows: every record's
verdict is counted, a record two chapters read is made (and counted) once, and GPU-hours are projected only
from a benchmark output measured on a GPU."""
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from shovir_core.protocols.rehearsal import report_rows
from shovir_core.tables.rehearsal import NO_BENCHMARK, rehearsal_chapters, rehearsal_records, rehearsal_what


def _record(key, run_id, trials, calls, verdict, **extra):
    return {"key": key, "run_id": run_id, "protocol": "shovir", "status": "complete", "trials": trials, "seconds": 1.0,
            "model_calls": calls, "paper_item": "ShoViR §3.1", "paper_trials": 2780, "paper_trials_scaled": 640,
            "compared": "cells Baseline, FullNoise", "compared_trials": 640, "difference": 0, "verdict": verdict,
            "reason": "Table 1's cells", **extra}


def _run(scale=0.02):
    report = {"chapters": [
        {"chapter": "shovir_table1", "status": "ok", "seconds": 10.0, "peak_mb": 500.0, "trials": 9000,
         "model_calls": 7000, "command": "shovir run shovir_table1", "stand_ins": ["ref-context-shortcut"],
         "records": [_record("a", "shovir/a/1", 4500, 3500, "equal"), _record("b", "shovir/b/1", 4500, 3500, "equal")]},
        # Figure 2 reads Table 1's records: nothing new to make
        {"chapter": "shovir_figures", "status": "ok", "seconds": 5.0, "peak_mb": 400.0, "trials": 4500,
         "model_calls": 3500, "command": "shovir run shovir_figures", "stand_ins": ["ref-context-shortcut"],
         "records": [_record("a", "shovir/a/1", 4500, 3500, "equal")]},
        {"chapter": "shovir_suppl_a", "status": "ok", "seconds": 2.0, "peak_mb": 300.0, "trials": 178,
         "model_calls": 5, "command": "shovir run shovir_suppl_a", "stand_ins": [],
         "records": [_record("accounting", "accounting/x/1", 168, None, "no stated count", paper_trials=None,
                             paper_trials_scaled=None, difference=None),
                     _record("odd", "shovir/odd/1", 10, 5, "differs (not explained)", difference=-630)]},
    ]}
    trials = pd.DataFrame(report_rows(report))
    info = SimpleNamespace(spec={"scale": scale, "profile": "padchest"}, counts={})
    return {"padchest": SimpleNamespace(run_id="rehearsal/padchest-reduced/abc", trials=trials, info=info)}


def test_every_records_verdict_is_counted_and_the_unexplained_named():
    rec = rehearsal_records(_run())
    v = rec.values
    assert (v["n_records"], v["n_equal"], v["n_no_count"], v["n_unexplained"], v["n_differs"]) == (5, 3, 1, 1, 0)
    assert v["unexplained"] == "shovir_suppl_a/odd"
    assert rec.frame.loc[rec.frame["record_key"] == "odd", "difference"].item() == -630


def test_a_record_two_chapters_read_is_counted_once(tmp_path):
    ch = rehearsal_chapters(_run(), benchmarks=tmp_path)
    f = ch.frame.set_index("chapter")
    assert f.loc["shovir_figures", "new_trials"] == 0 and f.loc["shovir_table1", "new_trials"] == 9000
    assert ch.values["model_calls_total"] == 7000 + 5  # not 7000 + 3500 + 5
    assert ch.values["n_chapters_without_calls"] == 0  # suppl_a made a record with a request cache
    assert ch.values["gpu_note"] == NO_BENCHMARK and "gpu_hours" not in ch.frame
    assert "gpu_hours_total" not in ch.values


@pytest.mark.parametrize("device,projected", [("cuda", True), ("cpu", False)])
def test_gpu_hours_come_from_a_gpu_benchmark_only(tmp_path, device, projected):
    out = {"benchmark": "generation", "device": device, "gpu": "H200", "parameters": 4e9,
           "batched": {"seconds_per_report": 0.5}}
    (tmp_path / "generation.json").write_text(json.dumps(out))
    ch = rehearsal_chapters(_run(scale=0.02), benchmarks=tmp_path)
    if not projected:
        assert ch.values["gpu_note"] == NO_BENCHMARK
        return
    f = ch.frame.set_index("chapter")
    # shovir_table1's work is `generate` (reproduction catalogue): 9,000 trials at 2 % scale, 0.5 s each
    assert f.loc["shovir_table1", "gpu_hours"] == pytest.approx(9000 / 0.02 * 0.5 / 3600)
    assert f.loc["shovir_figures", "gpu_hours"] == 0
    assert "generation.json" in ch.values["gpu_note"]


def test_the_caption_names_the_data_and_the_stand_ins():
    what = rehearsal_what(_run(scale=0.02))
    assert "padchest at scale 0.02" in what and "ref-context-shortcut" in what and "synthetic" in what


def test_the_cli_summarises_each_chapters_verdicts(monkeypatch, capsys):
    import argparse

    from shovir_core.rehearsal import cli, run

    report = {"report": "r.json", "seconds": 1.0, "peak_mb_together": 10.0, "chapters": [
        {"chapter": "shovir_table1", "status": "ok", "seconds": 2.0, "records_seconds": 1.5,
         "notebook_seconds": 0.5, "peak_mb": 10.0,
         "records": [{"verdict": "equal"}, {"verdict": "equal"}, {"verdict": "differs (not explained)"}]},
        {"chapter": "modalens_s41", "status": "failed", "seconds": 1.0, "error": ["boom"]}]}
    monkeypatch.setattr(run, "rehearse", lambda *a, **k: report)
    args = argparse.Namespace(profile="padchest", only=None, stand_in=None, scale=0.02, seed=0, pixels="small",
                              shards=None, root=None, quiet=True, overlap=True)
    assert cli.main(args) == 1  # a failed chapter
    out = capsys.readouterr().out
    assert "1 differs (not explained), 2 equal" in out and "no records" in out and "boom" in out
    assert "(records 2 s, notebook 0 s)" in out and '"peak_mb_together": 10.0' in out


def test_a_rehearsal_record_follows_the_denominators_it_judges_by(tmp_path, monkeypatch):
    """Stored verdicts compare with ``resources/denominators.yaml``: editing it must make a new rehearsal record."""
    from shovir_core import paths
    from shovir_core.protocols.rehearsal import code_sha256

    (tmp_path / "shovir_core" / "resources").mkdir(parents=True)
    (tmp_path / "shovir_core" / "x.py").write_text("x = 1\n")
    counts = tmp_path / "shovir_core" / "resources" / "denominators.yaml"
    counts.write_text("rules: []\n")
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path)
    before = code_sha256()
    counts.write_text("rules: [{chapter: shovir_table1}]\n")
    assert code_sha256() != before
