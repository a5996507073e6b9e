"""The modalens-probes protocol on tiny-gemma3: frozen hash, disjoint cohort, compact rows, tuned-lens records."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from shovir_core.protocols import modalens_probes as mp  # noqa: E402
from shovir_core.protocols import run  # noqa: E402
from shovir_core.stats.probes import FrozenConfigError, config_sha256  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
BASE = {"dataset": "demo-64px", "ssim_size": 64, "model": "tiny-gemma3", "n_patients": 8, "subset_seed": 0,
        "design": "one_q"}
PROBE = {**BASE, "analysis": "probe", "probe_layer": 1, "probe_n_patients": 4, "probe_folds": 2, "probe_n_draws": 50}
LENS = {**BASE, "analysis": "tuned-lens", "lens_steps": 3, "lens_heldout": 0.01}


def test_spec_keys_split_by_analysis():
    p = mp.resolve_spec(dict(PROBE))
    assert p["probe_layer"] == 1 and "lens_steps" not in p
    assert mp.resolve_spec({**PROBE, "lens_steps": 9}) == p, "tuned-lens keys never split a probe record"
    lens = mp.resolve_spec(dict(LENS))
    assert "probe_layer" not in lens and lens["lens_steps"] == 3
    with pytest.raises(Exception, match="analysis"):
        mp.resolve_spec({**BASE, "analysis": "steering"})
    with pytest.raises(Exception, match="probe_folds"):
        mp.resolve_spec({**PROBE, "probe_folds": 1})


def test_disjoint_cohort_excludes_the_evaluation_patients():
    spec = mp.resolve_spec(dict(PROBE))
    test, disjoint, counts = mp.cohorts(spec)
    held = set(test["patient_id"]) | set(test["sub_patient_id"])
    assert not held & (set(disjoint["patient_id"]) | set(disjoint["sub_patient_id"]))
    assert counts["n_disjoint_patients"] == 4 == disjoint["patient_id"].nunique()
    again = mp.cohorts(spec)[1]
    assert again["case_id"].tolist() == disjoint["case_id"].tolist()
    other = mp.cohorts(mp.resolve_spec({**PROBE, "probe_seed": 1}))[1]
    assert set(other["patient_id"]) != set(disjoint["patient_id"])


def test_probe_record_hash_round_trips_and_rows_are_compact(runs_root):
    rec = run("modalens-probes", "t.probe", dict(PROBE), progress=False)
    t, counts = rec.trials, rec.manifest["counts"]
    cfg = json.loads(counts["protocol"])
    assert config_sha256(cfg) == counts["protocol_sha256"], "the recorded hash is the configuration's"
    assert set(t["protocol_sha256"]) == {counts["protocol_sha256"]}
    spec = mp.resolve_spec(dict(PROBE))
    assert mp.probe_config(spec, 2) == cfg
    assert set(t["split"]) == {"test", "disjoint"}
    for col in ("probe_flip_score", "attention_mass", "input_gradient", "lens_c", "lens_d"):
        assert col in t
    assert t["probe_flip_score"].between(0, 1).all()
    lens = np.asarray([json.loads(v) for v in t["lens_c"]])
    assert lens.shape == (len(t), 3, 2)
    np.testing.assert_allclose(lens[:, -1, 0], t["logit_yes_c"], atol=1e-4)
    assert not any(t[c].dtype == object and t[c].astype(str).str.len().max() > 2000 for c in t.columns), \
        "no hidden states in the rows"
    assert rec.manifest["status"] == "complete"


def test_a_changed_protocol_is_refused(runs_root, monkeypatch):
    spec = dict(PROBE)
    calls = {"n": 0}
    real = mp.probe_config

    def drifting(s, n):
        calls["n"] += 1
        cfg = real(s, n)
        if calls["n"] > 1:  # the configuration seen after the run differs from the frozen one
            cfg["probe"]["C"] = 2.0
        return cfg

    monkeypatch.setattr(mp, "probe_config", drifting)
    with pytest.raises(FrozenConfigError, match="changed"):
        run("modalens-probes", "t.drift", spec, progress=False)


def test_probe_layer_outside_the_model_raises(runs_root):
    with pytest.raises(ValueError, match="probe_layer"):
        run("modalens-probes", "t.bad", {**PROBE, "probe_layer": 9}, progress=False)


def test_tuned_lens_record(runs_root):
    rec = run("modalens-probes", "t.lens", dict(LENS), progress=False)
    t = rec.trials
    corpus, trials = t[t["kind"] == "corpus"], t[t["kind"] == "trial"]
    assert len(corpus) == rec.manifest["counts"]["n_corpus_heldout"] > 0
    kl = np.asarray([json.loads(v) for v in corpus["kl_logit"]])
    assert kl.shape[1] == 3 and np.all(kl[:, -1] == 0)
    logit = np.asarray([json.loads(v) for v in trials["lens_c"]])
    tuned = np.asarray([json.loads(v) for v in trials["tuned_c"]])
    np.testing.assert_allclose(logit[:, -1], tuned[:, -1], atol=1e-6)
    np.testing.assert_allclose(logit[:, -1, 0], trials["logit_yes_c"], atol=1e-4)
    info = json.loads(rec.manifest["counts"]["lens_training"])
    assert info["steps"] == 3 and info["sha256"] == rec.manifest["counts"]["lens_sha256"]
    again = run("modalens-probes", "t.lens", dict(LENS), progress=False)
    assert again.path == rec.path


@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_probe_chapter_params_resolve(profile, monkeypatch):
    """Every record the chapter's params name resolves (mimic: MedGemma-27B on the fixture)."""
    from shovir_core.params import load_params

    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    monkeypatch.setenv("SHOVIR_WIKITEXT103", str(Path(__file__).parent / "fixtures" / "wikitext103"))
    params = load_params("modalens_appn_probes", profile)
    assert {"probe", "lens_P", "lens_A"} <= set(params["runs"])
    for r in params["runs"].values():
        assert r["protocol"] == "modalens-probes"
        spec = mp.resolve_spec(dict(r["spec"]))
        assert spec["model"] == ("medgemma-27b" if profile == "mimic" else "ref-vlm")
        if profile == "demo":
            from shovir_core.models.ref_vlm import EVAL_COHORT

            assert {k: spec[k] for k in EVAL_COHORT} == EVAL_COHORT, "the demo cohort is ref-vlm's held-out one"


def test_an_interrupted_probe_record_resumes_to_the_same_rows(runs_root, monkeypatch):
    whole = run("modalens-probes", "t.whole", dict(PROBE), progress=False).trials
    real = mp._apply
    state = {"n": 0}

    def interrupted(probe, X, mask=None):
        state["n"] += 1
        if state["n"] == 1:
            raise KeyboardInterrupt("stopped during the disjoint cohort")
        return real(probe, X, mask)

    monkeypatch.setattr(mp, "_apply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run("modalens-probes", "t.resume", dict(PROBE), progress=False)
    calls = _count_chunks(monkeypatch)
    resumed = run("modalens-probes", "t.resume", dict(PROBE), progress=False)
    assert resumed.manifest["status"] == "complete"
    assert calls == [], "every chunk of both splits was staged before the fit: the resumed run refits and writes"
    cols = [c for c in whole.columns if c != "run_id"]
    a = whole[cols].sort_values("trial_id").reset_index(drop=True)
    b = resumed.trials[cols].sort_values("trial_id").reset_index(drop=True)
    import pandas as pd

    pd.testing.assert_frame_equal(a, b)


def test_a_probe_record_killed_in_the_test_split_resumes_its_staged_chunks(runs_root, monkeypatch):
    """No test row is written before the probes are fitted on the whole split, so its chunks are staged:
    a resumed run computes only the chunks it has not staged, also when it stops in the disjoint cohort,
    and ends with the rows of an uninterrupted run and no staged files."""
    import pandas as pd

    from shovir_core.records import record_dir
    from shovir_core.records.stage import STAGE_DIR

    spec = {**PROBE, "batch_cases": 2}  # execution-only: several chunks, same identity
    whole = run("modalens-probes", "t.stage-whole", dict(spec), progress=False).trials
    n_test = whole.loc[whole["split"] == "test", "case_id"].nunique()
    n_disjoint = whole.loc[whole["split"] == "disjoint", "case_id"].nunique()
    test_chunks, disjoint_chunks = -(-n_test // 2), -(-n_disjoint // 2)
    assert test_chunks >= 3 and disjoint_chunks >= 2, "the test needs several chunks of each split"
    real, calls = mp._probe_chunk, []

    def stop_at(n):
        def chunk(*args, **kwargs):
            calls.append(args[2]["split"].iloc[0])
            if len(calls) == n:
                raise KeyboardInterrupt(f"stopped at chunk {n}")
            return real(*args, **kwargs)
        return chunk

    record = record_dir("modalens-probes", "t.stage-resume", mp.resolve_spec(dict(spec)))
    monkeypatch.setattr(mp, "_probe_chunk", stop_at(3))  # two test chunks staged, the third killed
    with pytest.raises(KeyboardInterrupt):
        run("modalens-probes", "t.stage-resume", dict(spec), progress=False)
    assert len(list((record / STAGE_DIR).rglob("*.parquet"))) == 2
    calls.clear()
    monkeypatch.setattr(mp, "_probe_chunk", stop_at(test_chunks - 2 + 2))  # then killed in the disjoint cohort
    with pytest.raises(KeyboardInterrupt):
        run("modalens-probes", "t.stage-resume", dict(spec), progress=False)
    assert calls == ["test"] * (test_chunks - 2) + ["disjoint"] * 2, "the staged test chunks were not computed again"
    calls.clear()
    monkeypatch.setattr(mp, "_probe_chunk", stop_at(0))
    resumed = run("modalens-probes", "t.stage-resume", dict(spec), progress=False)
    assert calls == ["disjoint"] * (disjoint_chunks - 1), "only the disjoint chunk that was not written"
    assert resumed.manifest["status"] == "complete" and not (record / STAGE_DIR).exists()
    cols = [c for c in whole.columns if c != "run_id"]
    pd.testing.assert_frame_equal(whole[cols].sort_values("trial_id").reset_index(drop=True),
                                  resumed.trials[cols].sort_values("trial_id").reset_index(drop=True))


def test_a_resumed_probe_record_computes_no_disjoint_chunk_it_has_written(runs_root, monkeypatch):
    """A record killed after writing a disjoint chunk's rows, and resumed without its staged chunks (as one
    staged by earlier code, which staged the test split only, or with its staged folder lost): the fit needs
    every test chunk again, but a written disjoint chunk is not computed again."""
    import shutil

    import pandas as pd

    from shovir_core.records import record_dir
    from shovir_core.records.stage import STAGE_DIR

    spec = {**PROBE, "batch_cases": 2}
    whole = run("modalens-probes", "t.written-whole", dict(spec), progress=False).trials
    n_chunks = {split: -(-whole.loc[whole["split"] == split, "case_id"].nunique() // 2) for split in ("test", "disjoint")}
    assert n_chunks["disjoint"] >= 2, "the test needs several disjoint chunks"
    real, state = mp._apply, {"n": 0}

    def interrupted(probe, X, mask=None):
        state["n"] += 1
        if state["n"] == 3:  # each chunk applies both probes: the second disjoint chunk
            raise KeyboardInterrupt("stopped after the first disjoint chunk's rows")
        return real(probe, X, mask)

    monkeypatch.setattr(mp, "_apply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run("modalens-probes", "t.written", dict(spec), progress=False)
    monkeypatch.setattr(mp, "_apply", real)
    shutil.rmtree(record_dir("modalens-probes", "t.written", mp.resolve_spec(dict(spec))) / STAGE_DIR)
    calls = _count_chunks(monkeypatch)
    resumed = run("modalens-probes", "t.written", dict(spec), progress=False)
    assert calls == ["test"] * n_chunks["test"] + ["disjoint"] * (n_chunks["disjoint"] - 1)
    cols = [c for c in whole.columns if c != "run_id"]
    pd.testing.assert_frame_equal(whole[cols].sort_values("trial_id").reset_index(drop=True),
                                  resumed.trials[cols].sort_values("trial_id").reset_index(drop=True))


def test_an_interrupted_tuned_lens_record_resumes_to_the_same_rows(runs_root, monkeypatch):
    from shovir_core.models import tuned_lens as tl

    spec = {**LENS, "batch_cases": 20}  # execution-only: several parts, same identity
    whole = run("modalens-probes", "t.lens-whole", dict(spec), progress=False).trials
    real = tl.answer_readouts
    state = {"n": 0}

    def interrupted(*args, **kwargs):
        state["n"] += 1
        if state["n"] == 2:
            raise KeyboardInterrupt("stopped after the first chunk")
        return real(*args, **kwargs)

    monkeypatch.setattr(tl, "answer_readouts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run("modalens-probes", "t.lens-resume", dict(spec), progress=False)
    resumed = run("modalens-probes", "t.lens-resume", dict(spec), progress=False)
    cols = [c for c in whole.columns if c != "run_id"]
    import pandas as pd

    pd.testing.assert_frame_equal(whole[cols].sort_values("trial_id").reset_index(drop=True),
                                  resumed.trials[cols].sort_values("trial_id").reset_index(drop=True))


def test_the_two_arms_train_the_tuned_lens_once(runs_root, monkeypatch):
    """Table 34's report-present and report-absent records train the same translators (the lens reads the
    corpus, never a trial): a process trains them once; another seed trains again."""
    from shovir_core.models import tuned_lens as tl

    mp._TRAINED.clear()
    real, calls = tl.train_tuned_lens, []

    def counted(*args, **kwargs):
        calls.append(kwargs["seed"])
        return real(*args, **kwargs)

    monkeypatch.setattr(tl, "train_tuned_lens", counted)
    present = run("modalens-probes", "t.lens-P", {**LENS, "report": "present"}, progress=False)
    absent = run("modalens-probes", "t.lens-A", {**LENS, "report": "absent"}, progress=False)
    assert calls == [0]
    assert present.manifest["counts"]["lens_sha256"] == absent.manifest["counts"]["lens_sha256"]
    assert present.manifest["counts"]["lens_training"] == absent.manifest["counts"]["lens_training"]
    other = run("modalens-probes", "t.lens-A1", {**LENS, "report": "absent", "lens_seed": 1}, progress=False)
    assert calls == [0, 1] and other.manifest["counts"]["lens_sha256"] != absent.manifest["counts"]["lens_sha256"]
    mp._TRAINED.clear()
    monkeypatch.setattr(tl, "train_tuned_lens", real)
    fresh = run("modalens-probes", "t.lens-A2", {**LENS, "report": "absent", "n_patients": 7}, progress=False)
    assert fresh.manifest["counts"]["lens_sha256"] == absent.manifest["counts"]["lens_sha256"]  # trained again: the same


def test_the_probe_record_is_split_and_the_lens_pair_made_whole(runs_root):
    """``--shards 2``: the probe record is split by chunks of the test split; the tuned-lens pair (one trained
    lens: one group) is made whole by one shard; a ModaLens arm is split as before."""
    from shovir_core.jobs import ShardTask
    from shovir_core.jobs.task import RunTarget
    from shovir_core.protocols import whole_record_shards

    mp._TRAINED.clear()
    targets = [("modalens-probes", "w.probe", dict(PROBE)), ("modalens-probes", "w.lens-P", {**LENS, "report": "present"}),
               ("modalens-probes", "w.lens-A", {**LENS, "report": "absent"}), ("modalens", "w.arm", dict(BASE))]
    assert whole_record_shards(targets, 2) == [None, 0, 0, None]
    assert whole_record_shards(targets, 3) == [None, 0, 0, None]
    task = ShardTask([RunTarget(*t) for t in targets[:3]], count=2, env={})
    made = task(1)  # shard 1 alone: its chunks of the probe record, staged; the lens pair is shard 0's
    assert [rid.split("/")[1] for rid in made] == ["w.probe"] and set(made.values()) != {"complete"}
    assert not list(runs_root.glob("modalens-probes/w.lens-*/*/manifest.json"))
    made = task(0)  # shard 0: the lens pair, and its chunks; every chunk is then staged, so it fits and writes
    assert sorted(rid.split("/")[1] for rid in made) == ["w.lens-A", "w.lens-P", "w.probe"]
    assert set(made.values()) == {"complete"}
    mp._TRAINED.clear()


def _count_chunks(monkeypatch) -> list:
    """The split (``test`` / ``disjoint``) of every chunk the probe record computes from now on."""
    calls, real = [], mp._probe_chunk

    def counted(*args, **kwargs):
        calls.append(args[2]["split"].iloc[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(mp, "_probe_chunk", counted)
    return calls


def _chunk_locks(spec: dict, name: str, shard) -> list:
    """Hold the chunk locks of the chunks (both splits) that are not ``shard``'s, as a partner shard computing
    them would (flock: a second open file conflicts also within one process)."""
    from shovir_core.protocols import shards
    from shovir_core.records import record_dir
    from shovir_core.records.stage import Stage
    from shovir_core.stats.probes import FrozenConfig

    resolved = mp.resolve_spec(dict(spec))
    frozen = FrozenConfig.freeze(mp.probe_config(resolved, 2))
    stage = Stage(record_dir("modalens-probes", name, resolved), mp.stage_phase(frozen))
    test_cases, disjoint_cases, _ = mp.cohorts(resolved)
    splits = [mp._split_trials(resolved, test_cases, "test")[0],
              mp._split_trials(mp.pool_dataset_spec(resolved), disjoint_cases, "disjoint")[0]]
    keys = [stage.key(part["trial_id"]) for trials in splits for part in mp._chunks(trials, int(spec["batch_cases"]))]
    mine = set(shards.mine(keys, shard))
    held = []
    for key in keys:
        if key not in mine:
            lock = stage.lock(f"chunk-{key}")
            assert lock.acquire() is None
            held.append(lock)
    return held


def test_a_sharded_probe_record_equals_one_process(runs_root, monkeypatch):
    """Two shards stage their chunks of both splits; the one that stages the last chunk fits on the whole test
    split in its order and scores the staged disjoint chunks, so the record holds the rows and probe scores
    one process writes, and no staged file is left."""
    import pandas as pd

    from shovir_core.records import Shard, record_dir, shard_progress
    from shovir_core.records.stage import STAGE_DIR

    spec = {**PROBE, "batch_cases": 2}
    whole = run("modalens-probes", "s.whole", dict(spec), progress=False).trials
    calls = _count_chunks(monkeypatch)
    held = _chunk_locks(spec, "s.sharded", Shard(0, 2))  # shard 1 is computing its chunks meanwhile
    first = run("modalens-probes", "s.sharded", dict(spec), progress=False, shard=Shard(0, 2))
    n_first = len(calls)
    assert first.status != "complete" and set(calls) == {"test", "disjoint"}, \
        "the first shard stages its chunks of both splits, and only those"
    (row,) = shard_progress(first.path)
    assert row["planned"] == row["staged"] > 0 and row["written"] == 0, \
        "`shovir jobs status` shows the staged trials"
    for lock in held:
        lock.release()
    second = run("modalens-probes", "s.sharded", dict(spec), progress=False, shard=Shard(1, 2))
    n_chunks = {split: -(-whole.loc[whole["split"] == split, "case_id"].nunique() // 2) for split in ("test", "disjoint")}
    assert {split: calls.count(split) for split in n_chunks} == n_chunks, "each chunk computed once"
    assert 0 < n_first < sum(n_chunks.values()) and n_chunks["disjoint"] >= 2, "the shards shared the work"
    assert second.status == "complete"
    record = record_dir("modalens-probes", "s.sharded", mp.resolve_spec(dict(spec)))
    assert not (record / STAGE_DIR).exists()
    cols = [c for c in whole.columns if c != "run_id"]
    pd.testing.assert_frame_equal(whole[cols].sort_values("trial_id").reset_index(drop=True),
                                  second.trials[cols].sort_values("trial_id").reset_index(drop=True))


def test_a_shard_done_early_computes_its_partners_chunks(runs_root, monkeypatch):
    """A shard alone (its partner busy with a whole record, or not started) computes every chunk nobody has
    claimed, fits and writes the rows; the partner then finds them written and computes nothing."""
    from shovir_core.records import Shard

    spec = {**PROBE, "batch_cases": 2}
    calls = _count_chunks(monkeypatch)
    first = run("modalens-probes", "e.sharded", dict(spec), progress=False, shard=Shard(1, 2))
    assert first.status != "complete" and "disjoint" in calls, "it staged every chunk, fitted and went on"
    n_first = len(calls)
    second = run("modalens-probes", "e.sharded", dict(spec), progress=False, shard=Shard(0, 2))
    assert second.status == "complete" and len(calls) == n_first, "the partner found every row written"


def test_shards_that_chunk_the_test_split_differently_still_make_the_record(runs_root):
    """Shards run with different ``batch_cases`` stage chunks none of the others asks for: each then computes
    its own chunking (wasted work), and the record holds the rows of one process with the fitting shard's
    chunking (batches of other sizes round differently, about 1e-6 in a logit), never a mixture."""
    import pandas as pd

    from shovir_core.records import Shard

    whole = run("modalens-probes", "m.whole", {**PROBE, "batch_cases": 3}, progress=False).trials
    held = _chunk_locks({**PROBE, "batch_cases": 2}, "m.mixed", Shard(0, 2))
    first = run("modalens-probes", "m.mixed", {**PROBE, "batch_cases": 2}, progress=False, shard=Shard(0, 2))
    assert first.status != "complete"
    for lock in held:
        lock.release()
    done = run("modalens-probes", "m.mixed", {**PROBE, "batch_cases": 3}, progress=False, shard=Shard(1, 2))
    assert done.status == "complete"
    cols = [c for c in whole.columns if c != "run_id"]
    pd.testing.assert_frame_equal(whole[cols].sort_values("trial_id").reset_index(drop=True),
                                  done.trials[cols].sort_values("trial_id").reset_index(drop=True))
