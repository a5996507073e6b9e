"""Shard tasks through submitit: local processes, one killed mid-way and resubmitted; SLURM options."""
from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from shovir_core import protocols
from shovir_core.jobs import ClusterOptions, RunTarget, ShardTask, load_cluster_options, status
from shovir_core.jobs.submit import run_local
from shovir_core.records import load_run
from shovir_core.records.shards import read_markers

from test_shards import MODALENS, assert_identical, sorted_trials

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the wrapper below travels to the job by value

SPEC = {**MODALENS, "batch_cases": 1}  # one part per case: a shard writes several parts


class DieAfterParts:
    """Run ``task``; shard ``victim`` dies like a SIGKILL (``os._exit``, no cleanup) after ``parts`` parts."""

    def __init__(self, task: ShardTask, *, victim: int, parts: int) -> None:
        self.task, self.victim, self.parts = task, victim, parts

    def __call__(self, index: int):
        if index == self.victim:
            from shovir_core.records import RunWriter

            real, written = RunWriter.append, []

            def append(writer, rows):
                n = real(writer, rows)
                written.append(n)
                if sum(1 for k in written if k) >= self.parts:
                    os._exit(137)
                return n

            RunWriter.append = append
        return self.task(index)


def test_killed_shard_is_resubmitted_and_the_record_completes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
    single = protocols.run("modalens", "jobs", SPEC, progress=False)
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
    task = ShardTask([RunTarget("modalens", "jobs", SPEC)], count=3)
    assert task.env["SHOVIR_RUNS"] == str(tmp_path / "sharded")
    options = ClusterOptions(gpus_per_task=0, time=20)
    import submitit.local.local as submitit_local

    asked, result = [], submitit_local.LocalJob.result
    monkeypatch.setattr(submitit_local.LocalJob, "result", lambda job: asked.append(job.job_id) or result(job))
    outcomes = run_local(DieAfterParts(task, victim=1, parts=1), [0, 1, 2], options=options,
                         folder=tmp_path / "jobs" / "%j", gpus=[], poll_s=0.2)
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].stderr.endswith("log.err") and "log" in outcomes[1].stderr
    assert "died before finishing: exit status 137 (128 + 9: as if killed by SIGKILL" in outcomes[1].error, \
        outcomes[1].error
    assert "Loading pickle" not in outcomes[1].error
    assert outcomes[1].job_id not in asked  # told at once, without submitit's 15 s wait for the result file
    path = single.path.parents[3] / "sharded" / single.path.relative_to(single.path.parents[2])
    markers = read_markers(path)
    assert markers["s001of003"]["status"] == "running"  # died without a word
    progress = status([RunTarget("modalens", "jobs", SPEC)]).set_index("shard")
    assert progress.loc["1/3", "record"] == "started" and progress.loc["1/3", "status"] == "stopped"
    assert progress.loc["0/3", "status"] == "done"
    assert 0 < progress.loc["1/3", "written"] < progress.loc["1/3", "planned"]
    assert progress.loc["0/3", "written"] == progress.loc["0/3", "planned"]
    assert progress.loc["0/3", "log"].endswith("log.out")
    from shovir_core import cli  # `records complete` says what `jobs status` says: the dead shard stopped

    assert cli.main(["records", "complete", single.run_id]) == 1
    err = capsys.readouterr().err
    assert "3 of 3 shard markers" in err and "stopped (process gone): 1/3" in err and "running" not in err, err

    again = run_local(task, [1], options=options, folder=tmp_path / "jobs" / "%j", gpus=[], poll_s=0.2)
    assert again[0].ok and again[0].result == {single.run_id: "complete"}
    sharded = load_run("modalens", "jobs")
    assert sharded.info.shards == 3 and sharded.info.n_trials == single.info.n_trials
    assert_identical(sorted_trials(single), sorted_trials(sharded))  # nothing lost, nothing duplicated


def test_a_shard_another_live_process_writes_is_left_to_it(tmp_path, monkeypatch, capsys):
    """The same shard started twice: the second leaves the record's part to the live writer and says so,
    instead of failing (the record is not damaged, and nothing was lost)."""
    from shovir_core import cli
    from shovir_core.jobs.submit import ShardOutcome
    from shovir_core.records import record_dir
    from shovir_core.records.files import TryLock

    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path))
    resolved = protocols.get_protocol("modalens").resolve_spec(dict(SPEC))
    path = record_dir("modalens", "jobs", resolved)
    held = TryLock(path / ".writer-s001of003.lock")  # shard 1/3's writer, as a live run holds it
    assert held.acquire() is None
    try:
        result = ShardTask([RunTarget("modalens", "jobs", SPEC)], count=3, env={})(1)
    finally:
        held.release()
    (run_id, state), = result.items()
    assert run_id == f"modalens/jobs/{path.name}" and state.startswith("being written by ") and str(os.getpid()) in state
    assert not any(path.glob("parts/*.parquet"))  # it wrote nothing
    assert cli._print_outcomes([ShardOutcome(index=1, job_id="7", result=result)]) == 0  # not a failure
    out = capsys.readouterr()
    assert f"shard 1: {run_id} being written by" in out.out and "left to it: nothing is lost" in out.out
    assert "FAILED" not in out.out + out.err
    import pickle

    from shovir_core.records import RecordBusyError

    back = pickle.loads(pickle.dumps(RecordBusyError("busy", run_id=run_id, holder="h 1")))  # from a worker process
    assert (str(back), back.run_id, back.holder) == ("busy", run_id, "h 1")


def test_checkpoint_requeues_the_same_shard():
    task = ShardTask([RunTarget("cohort", "demo", {"dataset": "demo"})], count=4, env={})
    delayed = task.checkpoint(2)
    assert delayed.function is task and delayed.args == (2,)


def test_cluster_options_reach_the_sbatch_file(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "cluster.yaml"
    config.write_text("partition: gpu\ntime: '1:30:00'\ngpus_per_task: 1\nmem: 64G\narray_parallelism: 2\n"
                      "setup: [module load cuda]\nsbatch: {mail-type: END}\n")
    options = load_cluster_options(config, mem="80G", cpus_per_task=8)
    ex = submitit.SlurmExecutor(folder=tmp_path / "jobs" / "%j")
    ex.update_parameters(**options.slurm_parameters(job_name="shovir-test"))
    ex.parameters["map_count"] = 3  # what map_array sets for a 3-task array
    text = ex._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --gpus-per-task=1",
                 "#SBATCH --mem=80G", "#SBATCH --cpus-per-task=8", "#SBATCH --array=0-2%2",
                 "#SBATCH --mail-type=END", "#SBATCH --signal=USR2@90", "module load cuda"):
        assert line in text, line
    with pytest.raises(ValueError, match="unknown cluster option"):
        load_cluster_options(None, gpus=2)
    with pytest.raises(ValueError, match="give minutes"):
        load_cluster_options(None, time="soon")


FAKE_SLURM = __import__("pathlib").Path(__file__).parent / "fixtures" / "fakeslurm" / "fakeslurm.py"


class PreemptAfterParts:
    """Run ``task``; shard ``victim`` is preempted (SIGUSR2, as SLURM signals it) after ``parts`` parts.

    Its checkpoint requeues the plain task, so the requeued attempt runs to the end."""

    def __init__(self, task: ShardTask, *, victim: int, parts: int) -> None:
        self.task, self.victim, self.parts = task, victim, parts

    def __call__(self, index: int):
        if index == self.victim:
            import signal

            from shovir_core.records import RunWriter

            real, written = RunWriter.append, []

            def append(writer, rows):
                n = real(writer, rows)
                written.append(n)
                if sum(1 for k in written if k) == self.parts:
                    os.kill(os.getpid(), signal.SIGUSR2)
                    import time

                    time.sleep(30)  # the handler checkpoints, requeues and exits before this ends
                return n

            RunWriter.append = append
        return self.task(index)

    def checkpoint(self, index: int):
        return self.task.checkpoint(index)


def test_slurm_array_with_a_preempted_task_requeues_and_completes(tmp_path, monkeypatch):
    import time

    from shovir_core.jobs.submit import submit

    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "single"))
    single = protocols.run("modalens", "slurm", SPEC, progress=False)
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    for tool in ("sbatch", "srun", "scontrol"):
        (bin_dir / tool).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SLURM}" {tool} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_STATE", str(state))
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "sharded"))
    task = ShardTask([RunTarget("modalens", "slurm", SPEC)], count=3)
    jobs = submit(PreemptAfterParts(task, victim=2, parts=1), [0, 1, 2],
                  options=ClusterOptions(gpus_per_task=0, time=30, array_parallelism=3),
                  folder=tmp_path / "jobs" / "%j", job_name="shovir-test")
    assert [j.job_id for j in jobs] == ["4200_0", "4200_1", "4200_2"]
    sbatch_file = next((tmp_path / "jobs").glob("**/*.sh")).read_text()
    assert "#SBATCH --array=0-2%3" in sbatch_file and "#SBATCH --signal=USR2@90" in sbatch_file
    target = [RunTarget("modalens", "slurm", SPEC)]
    deadline = time.time() + 300
    while time.time() < deadline and status(target)["record"].iloc[0] != "complete":
        time.sleep(1)
    assert (state / "requeues.log").read_text().split() == ["4200_2"]  # the preempted task, requeued once
    sharded = load_run("modalens", "slurm")
    assert sharded.info.shards == 3
    assert_identical(sorted_trials(single), sorted_trials(sharded))
    for job in jobs:  # every task ended with a result (the requeued one on its second attempt)
        while time.time() < deadline and not job.paths.result_pickle.exists():
            time.sleep(0.5)
        kind, result = __import__("submitit").core.utils.pickle_load(job.paths.result_pickle)
        assert kind == "success" and result[single.run_id] in ("complete", "started"), (kind, result)
    log = jobs[2].paths.stderr.read_text()
    assert "Caught signal SIGUSR2" in log and "this job is preempted" in log  # submitit's handler ran


def test_cli_runs_shards_with_the_local_executor(runs_root, capsys):
    from shovir_core import cli

    assert cli.main(["run", "data", "--shards", "2", "--executor", "local", "--gpus-per-task", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert "shard 0: cohort/demo-bbox/" in out and "shard 1: cohort/demo-64px/" in out  # whole records in turn
    assert load_run("cohort", "demo-bbox").status == "complete" and load_run("cohort", "demo-64px").status == "complete"
    assert list((runs_root / ".jobs").glob("*/*_0_log.out"))  # each task's log, under the runs root
    assert cli.main(["jobs", "status", "data"]) == 0
    assert "complete" in capsys.readouterr().out
