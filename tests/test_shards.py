"""Sharded records equal single-process records trial for trial, byte for byte (reference models)."""
from __future__ import annotations

import io

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shovir_core import cli, protocols
from shovir_core.protocols.shards import assign
from shovir_core.records import Shard
from shovir_core.records import RecordError, Run, load_run
from shovir_core.records.files import PART_RE
from shovir_core.records.shards import read_markers

MODALENS = {"dataset": "demo-64px", "model": "ref-anchored@0.5", "ssim_size": 64, "n_patients": 6,
            "batch_cases": 2}
SHOVIR = {"dataset": "demo", "model": "ref-image-classifier", "min_count": 20, "max_per_class": 2,
          "ps": [0.0, 0.6, 1.0], "reference_labels": "dataset", "reference_text": "template", "chunk_size": 8}
CASES = {"modalens": (MODALENS, "case_id"), "shovir": (SHOVIR, "image_id")}
SESSION_COUNTS = ("n_model_calls_this_session", "generation_seconds_this_session")


def sorted_trials(run: Run) -> pd.DataFrame:
    return run.trials.sort_values("trial_id", kind="mergesort").reset_index(drop=True)


def parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


def assert_identical(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    for col in a.columns:  # every output column, byte for byte
        assert parquet_bytes(a[[col]]) == parquet_bytes(b[[col]]), col


def test_assignment_is_balanced_and_depends_only_on_the_set():
    keys = [f"case{i}" for i in range(10)]
    a = assign(keys, 3)
    assert a == assign(list(reversed(keys)) + keys[:4], 3)  # order and repeats do not matter
    sizes = pd.Series(a).value_counts()
    assert sorted(sizes) == [3, 3, 4]
    with pytest.raises(ValueError, match="positive integer"):
        assign(keys, 0)


@pytest.mark.parametrize("protocol", sorted(CASES))
def test_sharded_record_equals_the_single_process_record(protocol, tmp_path, monkeypatch):
    spec, unit = CASES[protocol]
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
    single = protocols.run(protocol, "eq", spec, progress=False)
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
    for index in (2, 0):
        partial = protocols.run(protocol, "eq", spec, progress=False, shard=Shard(index, 3))
        assert partial.status == "started"
        with pytest.raises(RecordError, match="no complete record"):
            load_run(protocol, "eq")
    sharded = protocols.run(protocol, "eq", spec, progress=False, shard=Shard(1, 3))
    assert sharded.status == "complete" and sharded.run_id == single.run_id
    assert sharded.info.shards == 3 and single.info.shards == 1
    assert sharded.info.spec_passed == spec
    a, b = sorted_trials(single), sorted_trials(sharded)
    assert len(a) == single.info.n_trials == sharded.info.n_trials and len(a) > 40
    measured = list(getattr(protocols.get_protocol(protocol), "MEASURED_COLUMNS", ()))
    for col in measured:  # timings: present on every trial, not outputs, so not compared
        assert col in a and col in b and (a[col].dropna() >= 0).all() and (b[col].dropna() >= 0).all()
    assert_identical(a.drop(columns=measured), b.drop(columns=measured))
    drop = lambda c: {k: v for k, v in c.items() if k not in SESSION_COUNTS}  # noqa: E731
    assert drop(single.info.counts) == drop(sharded.info.counts)
    # each unit (case / image) lies in exactly one shard's parts, and the shards are the assigned ones
    owner = assign(a[unit], 3)
    for part in sharded.part_paths():
        token = PART_RE.match(part.name).group("token")
        units = set(pq.read_table(part, columns=[unit]).column(unit).to_pylist())
        assert {owner[u] for u in units} == {Shard.from_token(token).index}
    markers = read_markers(sharded.path)
    assert sorted(markers) == ["s000of003", "s001of003", "s002of003"]
    assert all(m["status"] == "done" for m in markers.values())
    assert sum(m["planned"] for m in markers.values()) == len(a)  # exact: trials that cannot exist are dropped
    from shovir_core.records import shard_progress

    assert all(row["planned"] == row["written"] for row in shard_progress(sharded.path))
    # the same shard run again is a no-op on the complete record
    again = protocols.run(protocol, "eq", spec, progress=False, shard=Shard(0, 3))
    assert again.path == sharded.path and len(again.trials) == len(a)


def test_unshardable_records_take_the_shards_in_turn(runs_root, capsys):
    """The data chapter's two cohort records cannot be sharded: each is made whole, the first by shard 0 and
    the second by shard 1 (protocols.whole_record_shards), so two shards make them side by side."""
    assert cli.main(["run", "data", "--shards", "2", "--shard", "1", "-q"]) == 0
    made = sorted(p.parent.parent.name for p in runs_root.glob("cohort/*/*/manifest.json"))
    assert made == ["demo-64px"]  # shard 1 made the second record, whole, and left the first to shard 0
    assert "shard 1/2: runs/cohort/demo-64px/" in capsys.readouterr().out
    assert cli.main(["run", "data", "--shards", "2", "--shard", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert "shard 0/2: runs/cohort/demo-bbox/" in out and "complete" in out and "demo-64px" not in out
    assert load_run("cohort", "demo-bbox").info.shards == 1 and load_run("cohort", "demo-64px").info.shards == 1
    assert cli.main(["run", "data", "--shard", "0"]) == 2  # --shard needs --shards


def test_records_complete_finishes_a_record_whose_last_shard_died(runs_root, capsys):
    spec = {**MODALENS, "n_patients": 3}
    for index in range(2):
        protocols.run("modalens", "late", spec, progress=False, shard=Shard(index, 2))
    run = load_run("modalens", "late")
    # undo the completion as if the last shard died between its marker and the manifest
    m = run.manifest
    m.update(status="started", parts=None, shards=None)
    (run.path / "manifest.json").write_text(__import__("json").dumps(m))
    rid = run.run_id
    assert cli.main(["records", "complete", rid, "-q"]) == 0
    assert f"{rid}: complete" in capsys.readouterr().out
    assert load_run("modalens", "late").info.n_trials == run.info.n_trials
    assert cli.main(["records", "complete", rid]) == 0  # already complete


def test_records_complete_refuses_while_shards_are_missing(runs_root, capsys):
    spec = {**MODALENS, "n_patients": 3}
    partial = protocols.run("modalens", "open", spec, progress=False, shard=Shard(0, 2))
    assert cli.main(["records", "complete", partial.run_id]) == 1
    assert "not every shard has finished" in capsys.readouterr().err
    assert cli.main(["jobs", "status", "data"]) == 0  # records of other notebooks: "not started" rows


def test_sharded_layer_record_equals_the_single_process_record(tmp_path, monkeypatch):
    """modalens-layers (App. N's lens and knockout) deals cases to shards after the knockout's case sample is
    drawn from the whole grid: the sharded record holds the same trials, the same readouts and the same
    per-layer values (a transformer's batches differ between the two layouts, so floats within 1e-5)."""
    import json
    from pathlib import Path

    import numpy as np

    pytest.importorskip("transformers")
    fixture = Path(__file__).parent / "fixtures" / "mimic_jpg"
    base = {"dataset": f"mimic-jpg:{fixture}", "ssim_size": 32, "model": "tiny-gemma3", "batch_cases": 1}
    for key, spec, column in (("lens", base, "lens_c"),
                              ("ko", {**base, "analysis": "knockout", "design": "one_q", "knockout_n_cases": 3,
                                      "knockout_case_seed": 1}, "ko_d")):
        monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
        single = protocols.run("modalens-layers", key, spec, progress=False)
        monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
        for index in (1, 0):
            assert protocols.run("modalens-layers", key, spec, progress=False, shard=Shard(index, 2)) is not None
        sharded = load_run("modalens-layers", key)
        assert sharded.run_id == single.run_id and sharded.info.shards == 2
        a, b = sorted_trials(single), sorted_trials(sharded)
        assert len(a) == len(b) > 2 and a["trial_id"].tolist() == b["trial_id"].tolist()
        for side in ("c", "d"):
            assert a[f"readout_{side}"].tolist() == b[f"readout_{side}"].tolist()
        np.testing.assert_allclose(np.array([json.loads(x) for x in a[column]]),
                                   np.array([json.loads(x) for x in b[column]]), atol=1e-5)
        owner = assign(a["case_id"], 2)
        assert {owner[c] for c in a["case_id"]} == {0, 1}, "both shards held cases"
        assert single.info.counts.get("n_cases_run") == sharded.info.counts.get("n_cases_run")


def test_interventions_shard_by_case_and_steering_shards_share_one_fitted_direction(tmp_path, monkeypatch):
    """modalens-interventions: a patching record is dealt by case over shards and equals the single-process
    one; so is a steering record, whose shards stage the chunks of the direction's fit in the open record and
    read all of them: the second shard fits nothing again and steers along the first one's direction."""
    from pathlib import Path

    import numpy as np

    pytest.importorskip("transformers")
    from shovir_core.models import interventions as iv

    fixture = Path(__file__).parent / "fixtures" / "mimic_jpg"
    base = {"dataset": f"mimic-jpg:{fixture}", "ssim_size": 32, "model": "tiny-gemma3", "batch_cases": 1,
            "design": "one_q", "patch_layers": [1], "patch_scopes": ["answer"]}
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
    single = protocols.run("modalens-interventions", "p", base, progress=False)
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
    for index in (1, 0):
        protocols.run("modalens-interventions", "p", base, progress=False, shard=Shard(index, 2))
    sharded = load_run("modalens-interventions", "p")
    assert sharded.info.shards == 2 and sharded.run_id == single.run_id
    a, b = sorted_trials(single), sorted_trials(sharded)
    assert a["trial_id"].tolist() == b["trial_id"].tolist() and len({assign(a["case_id"], 2)[c] for c in a["case_id"]}) == 2
    np.testing.assert_allclose(a["margin_c"], b["margin_c"], atol=1e-5)
    assert a["readout_d"].tolist() == b["readout_d"].tolist()
    assert single.info.counts["n_trials_run"] == sharded.info.counts["n_trials_run"]

    steer = {**base, "analysis": "steering", "steer_classes": "key", "steer_scales": [0, 2]}
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
    one = protocols.run("modalens-interventions", "s", steer, progress=False)
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
    fitted = []
    real = iv.answer_residuals_at
    monkeypatch.setattr(iv, "answer_residuals_at", lambda vlm, reqs, **kw: fitted.append(len(reqs)) or real(vlm, reqs, **kw))
    first = protocols.run("modalens-interventions", "s", steer, progress=False, shard=Shard(1, 2))
    assert first.status == "started" and len(fitted) > 1, "alone, shard 1 fitted every chunk"
    assert sum(fitted) == 2 * one.info.counts["n_fit_trials"], "one request per side of every fit trial"
    assert any(first.path.glob(".staged/steer-fit-*/*.npz")), "the fit's chunks are staged in the open record"
    n_chunks = len(fitted)
    whole = protocols.run("modalens-interventions", "s", steer, progress=False, shard=Shard(0, 2))
    assert len(fitted) == n_chunks, "shard 0 read the staged fit and computed none of it"
    assert whole.status == "complete" and whole.info.shards == 2 and whole.run_id == one.run_id
    assert not (whole.path / ".staged").exists(), "the staged chunks go when the record completes"
    assert whole.info.counts["direction_norms"] == one.info.counts["direction_norms"]
    for key in ("n_trials_run", "n_fit_trials", "n_findings_run"):
        assert whole.info.counts[key] == one.info.counts[key], key
    a, b = sorted_trials(one), sorted_trials(whole)
    assert a["trial_id"].tolist() == b["trial_id"].tolist() and len({assign(a["case_id"], 2)[c] for c in a["case_id"]}) == 2
    np.testing.assert_allclose(b["margin_c"], a["margin_c"], atol=1e-5)
    np.testing.assert_allclose(b["margin_d"], a["margin_d"], atol=1e-5)
    assert a["readout_c"].tolist() == b["readout_c"].tolist()