import json
import multiprocessing as mp

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shovir_core import records
from shovir_core.records import RecordError, RunWriter, load_run, runs_df, spec_hash, trials_df

SPEC = {"dataset": "demo", "p": [0.0, 0.5, 1.0], "seed": 7}


def _rows(ids):
    return [{"trial_id": f"t{i}", "value": float(i), "text": f"report {i}"} for i in ids]


def test_round_trip_and_manifest(runs_root):
    with RunWriter("proto", "demo", SPEC, dataset={"name": "demo", "sha256": "abc"},
                   model={"id": "ref-x", "revision": "r1"}, seeds={"perturb": 7}) as w:
        assert w.append(_rows(range(5))) == 5
        w.append(_rows(range(5, 8)))
        w.complete(n_cells=2)
    run = load_run("proto", "demo")
    m = run.manifest
    assert m["status"] == "complete" and m["counts"] == {"n_trials": 8, "n_cells": 2}
    assert m["spec"] == SPEC and m["spec_sha256"] == spec_hash(SPEC)
    assert run.path.name == spec_hash(SPEC)[:12]
    prov = m["provenance"]
    for key in ("git", "packages", "python", "platform", "seeds"):
        assert key in prov
    assert {"commit", "dirty"} <= set(prov["git"])
    assert prov["seeds"] == {"perturb": 7} and "pandas" in prov["packages"]
    assert m["model"]["revision"] == "r1" and m["dataset"]["sha256"] == "abc"
    assert m["started"] and m["ended"]
    df = trials_df(run)
    assert df["trial_id"].tolist() == [f"t{i}" for i in range(8)]
    assert (df["run_id"] == run.run_id).all()
    listing = runs_df()
    assert listing.loc[0, "run_id"] == run.run_id and listing.loc[0, "n_trials"] == 8


def test_spec_hash_identity(runs_root):
    assert spec_hash({"a": 1, "b": [1, 2]}) == spec_hash({"b": [1, 2], "a": 1})
    assert spec_hash({"a": 1}) != spec_hash({"a": 2})
    w1, w2 = RunWriter("p", "n", {"a": 1}), RunWriter("p", "n", {"a": 2})
    assert w1.path != w2.path and w1.path == RunWriter("p", "n", {"a": 1}).path


def test_resume_skips_done_trials(runs_root):
    with pytest.raises(KeyboardInterrupt):
        with RunWriter("p", "n", SPEC) as w:
            w.append(_rows(range(3)))
            raise KeyboardInterrupt
    assert json.loads((w.path / "manifest.json").read_text())["status"] == "failed"
    with RunWriter("p", "n", SPEC) as w2:
        assert w2.done_ids == {"t0", "t1", "t2"}
        assert w2.append(_rows(range(6))) == 3  # t0..t2 skipped, t3..t5 written
        w2.complete()
    df = load_run("p", "n").trials
    assert sorted(df["trial_id"]) == [f"t{i}" for i in range(6)]
    assert load_run("p", "n").manifest["resumed"] == 1


def _crash_mid_part(root, spec):
    """Child process: write one part, start a second (temp file only), then die."""
    import os

    os.environ["SHOVIR_RUNS"] = str(root)
    w = RunWriter("p", "crash", spec)
    w.open()
    w.append(_rows(range(4)))
    from shovir_core.records.files import temp_path

    pq.write_table(pa.Table.from_pylist(_rows(range(4, 8))), temp_path(w.parts_dir))  # this pid's temp name
    os._exit(1)  # killed before the rename: no cleanup, no status update


def test_crash_between_part_files_loses_nothing(runs_root):
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_crash_mid_part, args=(runs_root, SPEC))
    proc.start()
    proc.join()
    assert proc.exitcode == 1
    with RunWriter("p", "crash", SPEC) as w:
        assert w.done_ids == {f"t{i}" for i in range(4)}
        assert not list(w.parts_dir.glob(".*.tmp"))  # the half-written part of the dead pid is gone
        w.append(_rows(range(10)))
        w.complete()
    ids = load_run("p", "crash").trials["trial_id"]
    assert sorted(ids) == sorted(f"t{i}" for i in range(10)) and ids.is_unique


def test_errors(runs_root):
    with RunWriter("p", "e", SPEC) as w:
        with pytest.raises(RecordError, match="duplicate trial_id 't1'"):
            w.append(_rows([1, 1]))
        with pytest.raises(RecordError, match="needs a 'trial_id'"):
            w.append([{"x": 1}])
        w.complete()
        with pytest.raises(RecordError, match="complete"):
            w.append(_rows([9]))
    with pytest.raises(RecordError, match="may only hold"):
        RunWriter("p", "bad name", SPEC)
    with pytest.raises(RecordError, match="JSON-serialisable"):
        RunWriter("p", "n", {"y": object()})
    with pytest.raises(RecordError, match="no complete record p/missing"):
        load_run("p", "missing")


def test_complete_record_is_reused(runs_root):
    with RunWriter("p", "r", SPEC) as w:
        w.append(_rows(range(2)))
        w.complete()
    with RunWriter("p", "r", SPEC) as again:
        assert again.is_complete and again.done_ids == {"t0", "t1"}


def test_cohort_protocol_round_trip(runs_root):
    from shovir_core.protocols import run, run_id

    r = run("cohort", "demo", {"dataset": "demo"}, progress=False)
    assert r.run_id == run_id("cohort", "demo", {"dataset": "demo"})
    t = r.trials
    assert len(t) == 184 and t["trial_id"].is_unique
    assert r.manifest["dataset"]["n_boxes"] == 212
    assert run("cohort", "demo", {"dataset": "demo"}).path == r.path  # complete: reused
    with pytest.raises(ValueError, match=r"unknown key\(s\) \[.nope.\]"):
        run("cohort", "demo", {"dataset": "demo", "nope": 1})


def test_completing_removes_the_staged_phases_also_when_another_shard_completed_first(runs_root):
    """A record's staged chunks go when it completes; a shard that finds it completed by another (after it made
    a staged phase's lock, say), or that opened it complete, removes what it left too."""
    from shovir_core.records import Shard
    from shovir_core.records.stage import STAGE_DIR

    late = RunWriter("proto", "staged", SPEC, shard=Shard(1, 2)).__enter__()
    with RunWriter("proto", "staged", SPEC, shard=Shard(0, 2)) as first:
        first.stage("phase").save(pd.DataFrame(_rows(range(2))), {"x": [1.0, 2.0]})
        first.append(_rows(range(2)))
        assert not first.complete()  # shard 1 is still open
    late.append(_rows(range(2, 4)))
    assert late.shard_done()  # both shards done: the next complete() completes the record
    with RunWriter("proto", "staged", SPEC, shard=Shard(0, 2)) as other:  # completes it meanwhile
        assert other.complete()
    assert not (late.path / STAGE_DIR).exists()
    assert late.stage("phase").lock("fit").acquire() is None  # made after the completion
    assert (late.path / STAGE_DIR).exists()
    assert late.complete() and not (late.path / STAGE_DIR).exists()
    with RunWriter("proto", "staged", SPEC, shard=Shard(0, 2)) as opened_complete:  # a shard that opened it complete
        opened_complete.stage("phase").lock("fit").acquire()
        assert opened_complete.complete() and not (late.path / STAGE_DIR).exists()
