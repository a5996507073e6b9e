"""One shard of a set of records, as a picklable callable for ``submitit``."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..records import RecordBusyError, Shard, canonical_json

__all__ = ["RunTarget", "ShardTask", "targets_of", "pinned_environment", "BUSY"]

BUSY = "being written"
"""The status a shard reports for a record (or its part of one) that another live process is writing:
the shard leaves it to that process and goes on with its other records."""

_PINNED = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass(frozen=True)
class RunTarget:
    """One record to make: the params-file entry ``notebook``/``key`` -> (protocol, name, spec)."""

    protocol: str
    name: str
    spec: dict
    notebook: str | None = None
    key: str | None = None


def targets_of(notebooks, *, profile: str = "demo") -> list[RunTarget]:
    """The records the notebooks' params files name (each record once, in notebook order)."""
    from ..params import load_params

    out, seen = [], set()
    for nb in notebooks:
        for key, r in load_params(nb, profile)["runs"].items():
            ident = (r["protocol"], r["name"], canonical_json(r["spec"]))
            if ident not in seen:
                seen.add(ident)
                out.append(RunTarget(r["protocol"], r["name"], dict(r["spec"]), notebook=nb, key=key))
    return out


def pinned_environment() -> dict[str, str]:
    """Environment a task must see as the submitting process does: every ``SHOVIR_*`` variable,
    the offline switches, and the runs root as an absolute path."""
    from .. import paths

    env = {k: v for k, v in os.environ.items() if k.startswith("SHOVIR_") or k in _PINNED}
    env["SHOVIR_RUNS"] = str(paths.runs_root())
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _job_log() -> str | None:
    """The stdout log of the submitit job this process runs in (``None`` outside one)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    try:
        import submitit

        return str(submitit.JobEnvironment().paths.stdout)
    except Exception:  # noqa: BLE001 - a log path is a convenience, never a failure
        return None


class ShardTask:
    """Make shard ``index`` of ``count`` of every target record: ``task(index)``.

    The shard's arms are first scored together where a protocol can (prompt prefixes shared,
    :func:`shovir_core.protocols.prefill`); records of protocols that cannot be sharded are made
    whole, each by one shard, their groups taking the shards in turn
    (:func:`shovir_core.protocols.whole_record_shards`), before the shard's part of the split records.
    Returns ``{run_id: status}`` of the records this shard touched; a record whose part another live process
    is writing (the same shard submitted twice) is left to it, with the status ``"being written by <host> <pid>"``.
    :meth:`checkpoint` is submitit's preemption/timeout hook: the task is requeued with the same arguments and
    resumes, since records skip trials already stored.
    """

    def __init__(self, targets: list[RunTarget], *, count: int, env: dict[str, str] | None = None,
                 progress: bool = False) -> None:
        if not targets:
            raise ValueError("ShardTask: no records to make")
        Shard(0, count)  # validates count
        self.targets, self.count = list(targets), int(count)
        self.env = dict(env if env is not None else pinned_environment())
        self.progress = progress

    def __call__(self, index: int) -> dict[str, str]:
        from ..protocols import prefill, run, whole_record_shards

        os.environ.update(self.env)
        log = _job_log()
        if log:
            os.environ["SHOVIR_JOB_LOG"] = log
        shard = Shard(int(index), self.count)
        triples = [(t.protocol, t.name, t.spec) for t in self.targets]
        prefill(list(triples), progress=self.progress, shard=shard)
        owners = whole_record_shards(triples, self.count) if self.count > 1 else [0] * len(triples)
        # this shard's whole records first: a probe record's shards compute the chunks their partners have
        # not started (modalens_probes._execute_probe), so the split work fills in around the whole records
        order = sorted(range(len(triples)), key=lambda i: owners[i] is None)
        done = {}
        for t, owner in ((self.targets[i], owners[i]) for i in order):
            try:
                record = run(t.protocol, t.name, t.spec, progress=self.progress, shard=shard, whole_by=owner or 0)
            except RecordBusyError as exc:  # another live process makes this part: not a failure, and nothing lost
                done[exc.run_id] = f"{BUSY} by {exc.holder}"
                continue
            if record is not None:
                done[record.run_id] = record.status
        return done

    def checkpoint(self, index: int):
        """Requeue this shard unchanged (submitit calls it on preemption or timeout)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, index)

    def __repr__(self) -> str:
        return f"ShardTask({len(self.targets)} record(s), count={self.count})"
