"""Cluster options of a job array: from a YAML file, overridden on the command line."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from .. import yaml_text

from ..errors import UsageError

__all__ = ["ClusterOptions", "load_cluster_options", "parse_time"]


def parse_time(value) -> int:
    """Minutes of a SLURM time limit: ``90``, ``"90"``, ``"1:30:00"``, ``"2-00:00:00"`` or ``"45:00"``.

    >>> parse_time("1:30:00"), parse_time("2-00:00:00"), parse_time(45), parse_time("45:00")
    (90, 2880, 45, 45)
    """
    if isinstance(value, bool):
        raise UsageError(f"time {value!r}: give minutes or [D-]HH:MM:SS")
    if isinstance(value, (int, float)):
        minutes = int(value)
    else:
        m = re.fullmatch(r"\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\s*", str(value))
        if not m:
            raise UsageError(f"time {value!r}: give minutes or [D-]HH:MM:SS")
        days, a, b, c = (int(x) if x else None for x in m.groups())
        if b is None:  # minutes (or D-HH)
            minutes = (days or 0) * 1440 + (a * 60 if days is not None else a)
        elif c is None:  # MM:SS (or D-HH:MM)
            minutes = (days or 0) * 1440 + (a * 60 + b if days is not None else a + (1 if b else 0))
        else:
            minutes = (days or 0) * 1440 + a * 60 + b + (1 if c else 0)
    if minutes < 1:
        raise UsageError(f"time {value!r} must be at least one minute")
    return minutes


@dataclass(frozen=True)
class ClusterOptions:
    """How each shard task runs (SLURM options; the local executor uses ``time`` and the GPU count)."""

    partition: str | None = None
    """SLURM partition (``--partition``)."""
    time: int = 24 * 60
    """Time limit per task, minutes (``--time``); a task that reaches it is requeued and resumes."""
    gpus_per_task: int = 1
    """GPUs per shard task (``--gpus-per-task``); 0 runs on the CPU."""
    cpus_per_task: int | None = None
    """CPU cores per task (``--cpus-per-task``)."""
    mem: str | None = None
    """Memory per node, e.g. ``"64G"`` (``--mem``)."""
    array_parallelism: int = 64
    """Most array tasks running at once (``--array=0-N%P``)."""
    account: str | None = None
    """SLURM account (``--account``)."""
    qos: str | None = None
    """Quality of service (``--qos``)."""
    constraint: str | None = None
    """Node features, e.g. ``"h100"`` (``--constraint``)."""
    setup: tuple[str, ...] = ()
    """Shell lines run before each task (``module load ...``, ``source .venv/bin/activate``)."""
    sbatch: dict = field(default_factory=dict)
    """Extra ``#SBATCH`` options, name -> value (e.g. ``{"mail-type": "END"}``)."""
    max_requeues: int = 3
    """How many times a preempted or timed-out task is requeued."""

    def with_overrides(self, **values) -> "ClusterOptions":
        """These options with every non-``None`` value of ``values`` replacing its field."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown cluster option(s) {unknown}; known: {sorted(known)}")
        changes = {k: v for k, v in values.items() if v is not None}
        if "time" in changes:
            changes["time"] = parse_time(changes["time"])
        if "setup" in changes:
            changes["setup"] = tuple(changes["setup"])
        if "sbatch" in changes:
            changes["sbatch"] = {**self.sbatch, **dict(changes["sbatch"])}
        out = replace(self, **changes)
        for name in ("gpus_per_task", "array_parallelism", "max_requeues"):
            v = getattr(out, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name != "array_parallelism" else 1):
                raise UsageError(f"cluster option {name} = {v!r} must be a non-negative integer")
        return out

    def slurm_parameters(self, *, job_name: str) -> dict:
        """``submitit.SlurmExecutor.update_parameters`` keywords."""
        params = {"job_name": job_name, "time": self.time, "gpus_per_task": self.gpus_per_task or None,
                  "ntasks_per_node": 1, "nodes": 1, "array_parallelism": self.array_parallelism,
                  "setup": list(self.setup), "additional_parameters": dict(self.sbatch)}
        for name in ("partition", "cpus_per_task", "mem", "account", "qos", "constraint"):
            if getattr(self, name) is not None:
                params[name] = getattr(self, name)
        return {k: v for k, v in params.items() if v is not None}


def load_cluster_options(path: str | Path | None = None, **overrides) -> ClusterOptions:
    """Options from a YAML file (keys: the fields of :class:`ClusterOptions`), then ``overrides``."""
    base = ClusterOptions()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"no cluster options file {path}")
        data = yaml_text.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise UsageError(f"{path}: a cluster options file is a mapping of option -> value")
        try:
            base = base.with_overrides(**data)
        except ValueError as exc:
            raise UsageError(f"{path}: {exc}") from None
    return base.with_overrides(**overrides)
