"""Run a local shard task's command and write how it ended beside its log, so a dead shard is reported
with its exit status or signal rather than submitit's ``UncompletedJobError: ... Loading pickle``.

``python -m shovir_core.jobs.exit_status ARGS...`` runs ``python ARGS...`` (submitit's task command)
as a child with the same output, forwards the signals submitit sends (interrupt, preemption), and
when the child ends abnormally writes ``<job folder>/<job id>_<task>_exit.json`` with its
``returncode`` (negative: the signal) before exiting the same way. Used as the local executor's
``python`` (:func:`shovir_core.jobs.submit.run_local`); read by :func:`exit_file` and
:func:`describe_exit`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["exit_file", "describe_exit", "main"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def exit_file(folder: str | Path, job_id: str, task: int = 0) -> Path:
    """Where the wrapper writes how task ``task`` of local job ``job_id`` ended."""
    return Path(folder) / f"{job_id}_{task}_exit.json"


def describe_exit(returncode: int) -> str:
    """``killed by signal 9 (SIGKILL)`` / ``exit status 137 (128 + 9: as if killed by SIGKILL, e.g. out of memory)``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-returncode} ({name})"
    if returncode > 128:
        try:
            name = signal.Signals(returncode - 128).name
        except ValueError:
            return f"exit status {returncode}"
        hint = ", e.g. out of memory" if name == "SIGKILL" else ""
        return f"exit status {returncode} (128 + {returncode - 128}: as if killed by {name}{hint})"
    return f"exit status {returncode}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    child = subprocess.Popen([sys.executable, *argv])
    for sig in _FORWARDED:
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - wait() retries on EINTR itself
            continue
    job_id = os.environ.get("SUBMITIT_LOCAL_JOB_ID")
    if code != 0 and job_id and argv:
        from submitit.core.utils import JobPaths

        folder = JobPaths(argv[-1], job_id, int(os.environ.get("SUBMITIT_LOCAL_LOCALID", "0"))).folder
        exit_file(folder, job_id, int(os.environ.get("SUBMITIT_LOCAL_LOCALID", "0"))).write_text(
            json.dumps({"returncode": code, "pid": child.pid}) + "\n", encoding="utf-8")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
