"""Start shard tasks with ``submitit``: local processes, or one SLURM job array."""
from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import ShovirError
from .options import ClusterOptions
from .task import ShardTask

__all__ = ["submit", "wait", "run_local", "JobFailure", "ShardOutcome", "default_folder", "local_gpus", "EXECUTORS"]

EXECUTORS = ("local", "slurm")


class JobFailure(ShovirError, RuntimeError):
    """One or more shard tasks failed; the message names each task's log."""


@dataclass
class ShardOutcome:
    """What one shard task did: its result, or its error and log paths."""

    index: int
    job_id: str
    result: dict | None = None
    error: str | None = None
    stdout: str | None = None
    stderr: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def default_folder() -> Path:
    """``<runs root>/.jobs/%j``: submitit's pickles and each task's logs."""
    return paths.runs_root() / ".jobs" / "%j"


def local_gpus() -> list[int]:
    """GPU indices a local run can use: ``$CUDA_VISIBLE_DEVICES`` if set, else torch's count (none
    without CUDA)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return list(range(len([x for x in env.split(",") if x.strip()])))
    try:
        import torch
    except ImportError:
        return []
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _outcome(index: int, job, *, exited: bool = False) -> ShardOutcome:
    """The outcome of a finished job. ``exited``: the job was a local process that has exited, so a
    missing result file will not appear later (submitit would wait 15 s for a slow shared filesystem)."""
    from submitit.core.utils import UncompletedJobError

    out = ShardOutcome(index=index, job_id=str(job.job_id), stdout=str(job.paths.stdout),
                       stderr=str(job.paths.stderr))
    died = "died before finishing: {}; its trials so far are kept (resubmit the shard)"
    if exited and not job.paths.result_pickle.exists():  # told at once: no result file will appear
        out.error = died.format(_how_it_ended(job))
        return out
    try:
        out.result = job.result()
    except UncompletedJobError:  # the task died without a word (no result, no exception pickled)
        out.error = died.format(_how_it_ended(job))
    except Exception as exc:  # noqa: BLE001 - reported with the task's logs
        out.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    return out


def _how_it_ended(job) -> str:
    """The exit status or signal the local wrapper wrote (:mod:`.exit_status`), else the scheduler's state."""
    import json

    from .exit_status import describe_exit, exit_file

    path = exit_file(job.paths.folder, str(job.job_id))
    if path.is_file():
        try:
            return describe_exit(int(json.loads(path.read_text(encoding="utf-8"))["returncode"]))
        except (OSError, ValueError, KeyError):
            pass
    try:
        state = job.state
    except Exception:  # noqa: BLE001 - a state is a courtesy
        state = "UNKNOWN"
    return f"no exit status recorded (job state {state})"


def run_local(task: ShardTask, indices, *, options: ClusterOptions | None = None, folder: Path | None = None,
              gpus: list[int] | None = None, parallel: int | None = None, poll_s: float = 1.0) -> list[ShardOutcome]:
    """Run shard tasks as local processes (``submitit.LocalExecutor``) and wait for all of them.

    With GPUs (``gpus``, default :func:`local_gpus`) at most one task runs per GPU, each seeing only
    its GPU (``CUDA_VISIBLE_DEVICES``); on the CPU ``parallel`` tasks (default: all) run at once,
    the cores split between them (``OMP_NUM_THREADS``).
    """
    import submitit

    options = options or ClusterOptions(gpus_per_task=0)
    folder = Path(folder or default_folder())
    gpus = local_gpus() if gpus is None else list(gpus)
    queue = [int(i) for i in indices]
    slots = len(gpus) if gpus and options.gpus_per_task else (parallel or len(queue) or 1)
    threads = max(1, (os.cpu_count() or 1) // min(slots, max(1, len(queue))))
    running: dict[int, tuple[int, object, int | None]] = {}
    free_gpus = list(gpus) if gpus and options.gpus_per_task else []
    outcomes = []
    while queue or running:
        while queue and len(running) < slots:
            index = queue.pop(0)
            ex = submitit.LocalExecutor(folder=folder, max_num_timeout=options.max_requeues,
                                        python=f"{shlex.quote(sys.executable)} -m shovir_core.jobs.exit_status")
            gpu = free_gpus.pop(0) if free_gpus else None
            params = {"timeout_min": options.time, "setup": list(options.setup)}
            if gpu is not None:
                params.update(gpus_per_node=1, visible_gpus=(gpu,))
            elif "OMP_NUM_THREADS" not in os.environ:
                params["setup"] = [*params["setup"], f"export OMP_NUM_THREADS={threads}"]
            ex.update_parameters(**params)
            running[index] = (index, ex.submit(task, index), gpu)
        time.sleep(poll_s)
        for index in [i for i, (_, job, _) in running.items() if job.done()]:
            _, job, gpu = running.pop(index)
            if gpu is not None:
                free_gpus.append(gpu)
            outcomes.append(_outcome(index, job, exited=True))
    return sorted(outcomes, key=lambda o: o.index)


def submit(task: ShardTask, indices, *, options: ClusterOptions, folder: Path | None = None,
           job_name: str = "shovir") -> list:
    """Submit shard tasks as one SLURM job array (``submitit.SlurmExecutor.map_array``); returns the jobs.

    Each task is requeued up to ``options.max_requeues`` times on preemption or timeout
    (:meth:`ShardTask.checkpoint`) and resumes its records.
    """
    import submitit

    ex = submitit.SlurmExecutor(folder=Path(folder or default_folder()), max_num_timeout=options.max_requeues)
    ex.update_parameters(**options.slurm_parameters(job_name=job_name))
    indices = [int(i) for i in indices]
    return ex.map_array(task, indices)


def wait(jobs, indices) -> list[ShardOutcome]:
    """Wait for submitted jobs; one outcome per shard (errors name the task's logs)."""
    return [_outcome(i, job) for i, job in zip(indices, jobs)]


def raise_failures(outcomes: list[ShardOutcome]) -> None:
    """Raise :class:`JobFailure` naming every failed shard and its log."""
    bad = [o for o in outcomes if not o.ok]
    if bad:
        lines = [f"shard {o.index} (job {o.job_id}) failed: {o.error}; log: {o.stderr}" for o in bad]
        raise JobFailure("\n".join(lines))
