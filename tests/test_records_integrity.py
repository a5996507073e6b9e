"""Record integrity: damaged or edited records are refused, named, and flagged by the CLI."""
import json
import multiprocessing as mp
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shovir_core import cli
from shovir_core.records import (SCHEMA_VERSION, Manifest, RecordError, Run, RunWriter, Shard, load_run,
                                 runs_df, trials_df)
from shovir_core.records.files import claim_part, part_files, temp_path
from shovir_core.records.schema import ManifestError, migrate

SPEC = {"dataset": "demo", "p": [0.0, 0.5, 1.0], "seed": 7}
FIXTURES = Path(__file__).parent / "fixtures" / "records_v1"


def _rows(ids):
    return [{"trial_id": f"t{i}", "value": float(i), "text": f"report {i}"} for i in ids]


def _make(root: Path, name: str = "good", spec: dict = SPEC) -> Path:
    with RunWriter("proto", name, spec, root=root, spec_passed={"dataset": "demo"}) as w:
        for chunk in (range(0, 4), range(4, 7), range(7, 10)):
            w.append(_rows(chunk))
        assert w.complete(n_cells=3) is True
    return w.path


@pytest.fixture
def record(runs_root):
    return _make(runs_root)


def test_complete_record_lists_its_parts(record):
    run = load_run("proto", "good")
    m = run.info
    assert m.schema_version == SCHEMA_VERSION == 2
    assert m.spec == SPEC and m.spec_passed == {"dataset": "demo"} and m.shards == 1
    assert [p.file for p in m.parts] == ["part-000000.parquet", "part-000001.parquet", "part-000002.parquet"]
    assert [p.n_rows for p in m.parts] == [4, 3, 3] and m.n_trials == 10 == len(run.trials)
    assert all(p.size == (record / "parts" / p.file).stat().st_size for p in m.parts)
    assert m.seconds is not None and m.seconds >= 0  # the writer's wall time
    assert Manifest.from_dict(m.to_dict()) == m  # the typed manifest round-trips through JSON


def _delete_part(rec):
    (rec / "parts" / "part-000001.parquet").unlink()


def _duplicate_part(rec):
    shutil.copy(rec / "parts" / "part-000001.parquet", rec / "parts" / "part-000003.parquet")


def _duplicate_part_copy_name(rec):
    shutil.copy(rec / "parts" / "part-000001.parquet", rec / "parts" / "part-000001 (copy).parquet")


def _truncate_part(rec):
    p = rec / "parts" / "part-000002.parquet"
    p.write_bytes(p.read_bytes()[:-40])


def _edit_part_same_size(rec):
    p = rec / "parts" / "part-000000.parquet"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte flipped, size unchanged
    p.write_bytes(bytes(data))


def _foreign_part(rec):
    pq.write_table(pa.Table.from_pylist(_rows([20, 21])), rec / "parts" / "part-s000of002-000000.parquet")


def _manifest_edit(change):
    def edit(rec):
        path = rec / "manifest.json"
        m = json.loads(path.read_text())
        change(m)
        path.write_text(json.dumps(m))
    return edit


def _not_json(rec):
    (rec / "manifest.json").write_text('{"schema_version": 2, "status": "comp')


def _no_manifest(rec):
    (rec / "manifest.json").unlink()


CORRUPTIONS = {
    "deleted part": (_delete_part, r"part\(s\) \['part-000001.parquet'\] listed in the manifest are missing"),
    "duplicated part": (_duplicate_part, r"foreign file\(s\) \['part-000003.parquet'\]"),
    "duplicated part (copy name)": (_duplicate_part_copy_name, r"foreign file\(s\) \['part-000001 \(copy\).parquet'\]"),
    "truncated part": (_truncate_part, r"part part-000002.parquet has \d+ bytes, the manifest says \d+"),
    "edited part": (_edit_part_same_size, r"part part-000000.parquet does not match its SHA-256"),
    "foreign part": (_foreign_part, r"foreign file\(s\) \['part-s000of002-000000.parquet'\]"),
    "edited spec": (_manifest_edit(lambda m: m["spec"].update(seed=8)),
                    r"the stored spec hashes to .* but spec_sha256 is .*edited"),
    "edited spec_sha256": (_manifest_edit(lambda m: m.update(spec_sha256="0" * 64)),
                           r"the stored spec hashes to .* but spec_sha256 is 000000000000"),
    "edited n_trials": (_manifest_edit(lambda m: m["counts"].update(n_trials=9)),
                        r"the parts list 10 trial rows, the manifest says n_trials = 9"),
    "moved record": (_manifest_edit(lambda m: m.update(name="other", run_id="proto/other/x")),
                     r"manifest names proto/other"),
    "non-JSON manifest": (_not_json, r"manifest.json is unreadable or not JSON"),
    "invalid manifest": (_manifest_edit(lambda m: m.pop("spec")), r"manifest lacks the field\(s\) \['spec'\]"),
    "newer schema": (_manifest_edit(lambda m: m.update(schema_version=99)), r"schema version 99 is newer"),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_corrupt_copies_are_refused_and_named(record, runs_root, tmp_path, monkeypatch, capsys, how):
    corrupt, message = CORRUPTIONS[how]
    root = tmp_path / "copy"
    shutil.copytree(runs_root, root)
    rec = root / record.relative_to(runs_root)
    corrupt(rec)
    monkeypatch.setenv("SHOVIR_RUNS", str(root))
    with pytest.raises(RecordError, match=message) as err:
        load_run("proto", "good", rec.name)
    assert str(rec) in str(err.value)  # the message names the record's path
    with pytest.raises(RecordError, match=message):
        Run(rec).trials
    if (rec / "manifest.json").is_file():
        with pytest.raises(RecordError, match=message):
            trials_df(rec)
    with pytest.raises(RecordError, match=message):
        runs_df()
    # verify and list report it without a traceback; the good original still verifies
    capsys.readouterr()
    assert cli.main(["records", "verify"]) == 1
    out = capsys.readouterr().out
    bad = [line for line in out.splitlines() if line.startswith("BAD ")]
    assert len(bad) == 1 and bad[0].startswith(f"BAD proto/good/{rec.name}: ")
    assert cli.main(["records", "verify", f"proto/good/{rec.name}"]) == 1
    assert cli.main(["records", "list"]) == 0
    listing = capsys.readouterr().out
    assert f"BAD proto/good/{rec.name}" in listing
    report = runs_df(on_error="report")
    assert report["problem"].notna().sum() == 1
    monkeypatch.setenv("SHOVIR_RUNS", str(runs_root))
    assert cli.main(["records", "verify"]) == 0


def test_manifest_less_record_is_flagged(record, runs_root, capsys):
    _no_manifest(record)
    assert cli.main(["records", "verify"]) == 1
    assert "no manifest.json" in capsys.readouterr().out
    assert cli.main(["records", "list"]) == 0


def test_verify_passes_good_records_and_names_missing_ones(record, runs_root, capsys):
    _make(runs_root, name="second")
    assert cli.main(["records", "verify"]) == 0
    out = capsys.readouterr().out
    assert "verified 2 record(s)" in out and "0 bad" in out and "BAD" not in out
    assert cli.main(["records", "verify", "proto/nope/abcdefabcdef"]) == 1
    assert "BAD proto/nope/abcdefabcdef: no record" in capsys.readouterr().out
    assert cli.main(["records", "verify", "not-a-run-id"]) == 2


def test_verification_is_done_once_per_run(record, monkeypatch):
    from shovir_core.records import integrity

    calls = []
    real = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256", lambda p: calls.append(p) or real(p))
    run = Run(record)
    run.trials
    run.verify()
    run.trials
    assert len(calls) == 3  # one hash per part, once


# -- schema versions ---------------------------------------------------------------------------
def test_v1_manifest_fixture_migrates(runs_root):
    shutil.copytree(FIXTURES, runs_root)
    raw = json.loads(next(runs_root.glob("proto/v1fixture/*/manifest.json")).read_text())
    assert raw["schema_version"] == 1 and "parts" not in raw and "spec_passed" not in raw
    m = Manifest.from_dict(raw)
    assert m.schema_version == 2 and m.parts is None and m.spec_passed is None and m.shards is None
    assert m.spec == raw["spec"] and m.counts == raw["counts"] and m.provenance == raw["provenance"]
    run = load_run("proto", "v1fixture")
    assert run.info == m and sorted(run.trials["trial_id"]) == [f"t{i}" for i in range(5)]
    assert cli.main(["records", "verify"]) == 0
    # schema 1 has no part hashes: a deleted part still fails the row count
    next(runs_root.glob("proto/v1fixture/*/parts/part-000001.parquet")).unlink()
    with pytest.raises(RecordError, match="parts hold 3 trial rows, the manifest says n_trials = 5"):
        load_run("proto", "v1fixture")


def test_resuming_a_v1_record_rewrites_it_as_v2(runs_root):
    shutil.copytree(FIXTURES, runs_root)
    path = next(runs_root.glob("proto/v1fixture/*"))
    m = json.loads((path / "manifest.json").read_text())
    m["status"] = "started"
    (path / "manifest.json").write_text(json.dumps(m))
    with RunWriter("proto", "v1fixture", m["spec"]) as w:
        assert w.done_ids == {f"t{i}" for i in range(5)}
        w.append(_rows(range(5, 7)))
        w.complete()
    run = load_run("proto", "v1fixture")
    assert run.info.schema_version == 2 and run.info.n_trials == 7 and len(run.info.parts) == 3


def test_migrate_rejects_unknown_versions():
    with pytest.raises(ManifestError, match="newer"):
        migrate({"schema_version": 3})
    with pytest.raises(ManifestError, match="not an integer"):
        migrate({"schema_version": "2"})
    with pytest.raises(ManifestError, match="unknown manifest field"):
        Manifest.from_dict({"schema_version": 2, "protocol": "p", "name": "n", "run_id": "p/n/x", "status": "started",
                            "spec": {}, "spec_sha256": "x", "extra": 1})


def test_protocol_run_stores_the_passed_spec(runs_root):
    from shovir_core.protocols import run

    r = run("cohort", "demo", {"dataset": "demo"}, progress=False)
    assert r.info.spec_passed == {"dataset": "demo"}
    assert set(r.info.spec) == {"dataset", "dataset_sha256"}


# -- concurrency -------------------------------------------------------------------------------
def test_claim_never_replaces_a_part(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    theirs = parts / "part-000000.parquet"
    theirs.write_bytes(b"theirs")
    tmp = temp_path(parts)
    tmp.write_bytes(b"mine")
    final, number = claim_part(tmp, parts, None, 0)
    assert (final.name, number) == ("part-000001.parquet", 1)
    assert theirs.read_bytes() == b"theirs" and final.read_bytes() == b"mine" and not tmp.exists()


def _hold_in_flight(root, ready, release, shard=None):
    """Child: open the record, leave an in-flight temp part, wait, then finish its trials."""
    import os

    os.environ["SHOVIR_RUNS"] = str(root)
    with RunWriter("proto", "busy", SPEC, shard=shard) as w:
        w.append(_rows(range(3)))
        tmp = temp_path(w.parts_dir)
        pq.write_table(pa.Table.from_pylist(_rows(range(3, 6))), tmp)
        ready.set()
        release.wait(60)
        assert tmp.exists()  # nobody touched this process's in-flight file
        tmp.unlink()
        w.append(_rows(range(3, 6)))
        w.complete()


@pytest.mark.parametrize("sharded", [False, True])
def test_second_process_does_not_touch_in_flight_files(runs_root, sharded):
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    theirs = Shard(0, 2) if sharded else None
    proc = ctx.Process(target=_hold_in_flight, args=(runs_root, ready, release, theirs))
    proc.start()
    try:
        assert ready.wait(60)
        temps = list(runs_root.glob("proto/busy/*/parts/.w*.tmp"))
        assert len(temps) == 1
        record = temps[0].parents[1]
        with pytest.raises(RecordError, match="being written by"):  # the same shard, or another split
            RunWriter("proto", "busy", SPEC, shard=theirs).open()
        if sharded:
            # another shard opens the record (and clears stale temps) but leaves the live temp alone
            with RunWriter("proto", "busy", SPEC, shard=Shard(1, 2)) as other:
                assert other.done_ids == {"t0", "t1", "t2"}
                assert other.append(_rows(range(6, 8))) == 2
                assert other.complete() is False  # shard 0 is still running
        else:
            with pytest.raises(RecordError, match="single-process writer is being written by .* same --shards"):
                RunWriter("proto", "busy", SPEC, shard=Shard(1, 2)).open()
        assert Run(record).status == "started" and len(Run(record).trials) == (5 if sharded else 3)
        assert temps[0].exists()
    finally:
        release.set()
        proc.join(60)
    assert proc.exitcode == 0
    run = load_run("proto", "busy")
    assert sorted(run.trials["trial_id"]) == sorted(f"t{i}" for i in range(8 if sharded else 6))


def _shard_writer(root, index, count, ids, go):
    import os

    os.environ["SHOVIR_RUNS"] = str(root)
    go.wait(60)
    with RunWriter("proto", "sharded", SPEC, shard=Shard(index, count)) as w:
        w.plan_shard(len(ids))
        for i in ids:  # one part per trial: the two writers' parts interleave in time
            w.append(_rows([i]))
        w.complete(n_cells=1)


def test_two_shard_processes_make_one_record(runs_root):
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_shard_writer, args=(runs_root, k, 2, list(range(k, 12, 2)), go)) for k in (0, 1)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    run = load_run("proto", "sharded")
    m = run.info
    assert m.status == "complete" and m.shards == 2 and m.n_trials == 12 and m.counts["n_cells"] == 1
    assert m.seconds > 0  # both shards' wall time
    assert sorted(run.trials["trial_id"]) == sorted(f"t{i}" for i in range(12))
    names = [p.file for p in m.parts]
    assert all(n.startswith(("part-s000of002-", "part-s001of002-")) for n in names) and len(names) == 12
    assert names == sorted(names) == [p.name for p in part_files(run.path / "parts")]


def test_unfinished_shard_leaves_the_record_open(runs_root):
    with RunWriter("proto", "half", SPEC, shard=Shard(0, 2)) as w:
        w.append(_rows([0, 1]))
        assert w.complete() is False
    run = Run(w.path)
    assert run.status == "started" and run.verify() is run and len(run.trials) == 2
    with pytest.raises(RecordError, match="no complete record"):
        load_run("proto", "half")
    with RunWriter("proto", "half", SPEC, shard=Shard(1, 2)) as w2:
        assert w2.append(_rows([1, 2])) == 1  # t1 is already stored by shard 0
        assert w2.complete() is True
    assert load_run("proto", "half").info.n_trials == 3
