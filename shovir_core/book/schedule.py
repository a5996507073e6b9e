"""``shovir book --jobs K``: the book as tasks, each record made once, each notebook as soon as its records exist.

The records of every chapter are pooled first: a record (a run identity, ``<protocol>/<name>/<hash>``) that
several chapters name is made once, by the task of the first chapter in toc order that names it (the one that
made it when chapters ran one after another). A chapter's own records are split into the groups
:func:`shovir_core.protocols.record_groups` gives (the ModaLens arms one prefill scores together, the
tuned-lens records that share one trained lens; each other record alone), one task per group, so a chapter's
slow records spread over the workers and the arms are scored with the same prompt-prefix sharing as
``shovir run <chapter>``. A notebook only reads records: it starts as
soon as the tasks making its records have finished; ``requires: records`` (the reproduction map, which reads
every chapter's records and nothing a notebook writes) waits for every other chapter's records, ``requires:
all`` for every other notebook, ``requires: [a, b]`` for those named.

Two processes never make the same record: the plan gives each run identity to one task, and
:func:`shovir_core.protocols.run` holds a per-record lock (``fcntl.flock``) while it makes one, so a second
``shovir book`` (or ``shovir run``) that asks for it meanwhile waits and then reads it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from tqdm import tqdm

from ..errors import ShovirError
from ..file_cache import checked_once
from ..params import load_params

__all__ = ["BookPlan", "book_plan", "execute_parallel", "start_workers"]


@dataclass
class BookPlan:
    """Tasks of a parallel book run and the order they may run in (see the module docstring).

    ``tasks``: key -> a picklable callable of no argument (notebooks are keyed by their name, record tasks
    ``<notebook>[records i/n]``); ``after``: key -> keys that must finish first; ``priority``: keys in the order
    ready tasks are started (notebooks first, then record tasks in toc order, rehearsals before transformers'
    records before prefill groups of several arms before single records: :func:`_start_rank`); ``run_ids``:
    notebook -> its params' run keys -> run ids; ``records``: record task -> the run ids it makes.
    """
    tasks: dict[str, Callable[[], object]] = field(default_factory=dict)
    after: dict[str, set[str]] = field(default_factory=dict)
    priority: list[str] = field(default_factory=list)
    run_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    records: dict[str, list[str]] = field(default_factory=dict)


def _requires(spec: dict, names: list[str], everyone: list[str], n: str) -> set[str]:
    req = spec["requires"]
    if req == "all":
        return {m for m in everyone if m != n}
    if req == "records":
        return set()  # the plan adds every other chapter's record tasks
    if req:
        if not isinstance(req, list) or not all(isinstance(x, str) for x in req):
            from .runner import BookError

            raise BookError(f"{spec['path']}: 'requires' must be 'all', 'records' or a list of notebook names, "
                            f"got {req!r}")
        return {m for m in req if m in names and m != n}
    return set()


def _start_rank(group: list[tuple]) -> int:
    """Which ready record tasks start first, longest expected first: a rehearsal (a whole chapter of a
    credentialed profile in a process of its own: 20-40 s of the demo book on 2 cores), then records of a
    transformer (ref-vlm, the tiny models: 10-90 s), then groups of arms, then the rest (reference models:
    a few seconds). A long task started last runs alone at the end while the other workers idle (the
    demo book's reduced rehearsal, toc-ordered near the end, did for 28 s; then VQA-RAD's ref-vlm record
    for 19 s)."""
    from ..models.registry import is_reference

    if any(protocol == "rehearsal" for protocol, _, _ in group):
        return 0
    if any(isinstance(spec.get("model"), str) and not is_reference(spec["model"]) for _, _, spec in group):
        return 1
    return 2 if len(group) > 1 else 3


def book_plan(names: list[str], profile: str, *, skip_complete: bool = True) -> BookPlan:
    """The tasks that make the records of notebooks ``names`` (toc order) once each and execute the notebooks.

    Records already complete get no task (``skip_complete``); the notebook reads them as they are.
    """
    with checked_once():  # each dataset's files stat-ed once while the plan resolves every spec
        return _plan(names, profile, skip_complete=skip_complete)


def _plan(names: list[str], profile: str, *, skip_complete: bool) -> BookPlan:
    from ..protocols import is_complete, record_groups, resolve
    from ..records import spec_hash
    from ..records.schema import SHORT_HASH
    from .runner import BookError, execute_notebook, make_record_group

    resolved: dict[str, dict] = {}  # run id -> resolved spec (a record several chapters name is resolved once)
    seen: dict[str, str] = {}  # (protocol, name, spec as JSON) -> run id

    def identity(r: dict) -> str:
        text = json.dumps([r["protocol"], r["name"], r["spec"]], sort_keys=True, default=str)
        if text not in seen:
            spec = resolve(r["protocol"], r["spec"])
            seen[text] = f"{r['protocol']}/{r['name']}/{spec_hash(spec)[:SHORT_HASH]}"  # as protocols.run_id
            resolved[seen[text]] = spec
        return seen[text]

    specs = {n: load_params(n, profile) for n in names}
    everyone = [n for n in names if specs[n]["requires"] != "all"]
    plan = BookPlan()
    made_by: dict[str, str | None] = {}  # run id -> the task making it (None: complete already)
    record_tasks: list[tuple[int, int, str]] = []
    for n in names:
        ids: dict[str, str] = {}
        new: dict[str, tuple[str, dict]] = {}  # run id -> (key, run) of this chapter's records no task makes yet
        for key, r in specs[n]["runs"].items():
            try:
                rid = identity(r)
            except Exception as exc:  # noqa: BLE001 - the spec is refused: say which chapter and record
                raise BookError(f"{n}: record {key!r} ({r['protocol']}/{r['name']}): "
                                f"{type(exc).__name__}: {exc}") from exc
            ids[key] = rid
            if rid not in made_by and rid not in new:
                new[rid] = (key, r)
        for rid, (key, r) in list(new.items()):
            if skip_complete and is_complete(r["protocol"], r["name"], resolved[rid], resolved=True):
                made_by[rid] = None
                del new[rid]
        targets = [(r["protocol"], r["name"], r["spec"]) for _, r in new.values()]
        member = {id(t): (rid, key, r) for t, (rid, (key, r)) in zip(targets, new.items())}
        groups = record_groups(targets, resolved=[resolved[rid] for rid in new])  # resolved once, above
        for i, group in enumerate(groups):
            task = f"{n}[records {i + 1}/{len(groups)}]"
            members = [member[id(t)] for t in group]
            plan.tasks[task] = partial(make_record_group, n, {key: r for _, key, r in members}, profile=profile,
                                       progress=False)
            plan.after[task] = set()
            plan.records[task] = [rid for rid, _, _ in members]
            for rid, _, _ in members:
                made_by[rid] = task
            record_tasks.append((_start_rank(group), len(record_tasks), task))
        plan.run_ids[n] = ids
        plan.tasks[n] = partial(execute_notebook, n, profile=profile, run_ids=ids)
        plan.after[n] = {made_by[rid] for rid in ids.values() if made_by[rid] is not None}
        plan.after[n] |= _requires(specs[n], names, everyone, n)
    for n in names:
        if specs[n]["requires"] == "records":  # it runs beside the last notebooks instead of alone after them
            plan.after[n] |= {task for task in plan.records if not task.startswith(f"{n}[records ")}
    plan.priority = [n for n in names] + [task for _, _, task in sorted(record_tasks)]
    return plan


def _warm() -> None:
    """A worker's first job: import what the book's tasks import (the runner, the protocols, torch)."""
    import torch  # noqa: F401

    from .. import protocols  # noqa: F401
    from . import runner  # noqa: F401


def start_workers(jobs: int):
    """``jobs`` worker processes, started now and importing what the tasks need (:func:`_warm`), for
    :func:`execute_parallel`'s ``pool``: the book's workers then import while the main process plans
    (about 5 s on 2 cores, one of them idle otherwise)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    for _ in range(jobs):
        pool.submit(_warm)  # each submission starts one more worker while none is idle
    return pool


def execute_parallel(tasks: dict[str, Callable[[], object]], *, after: dict[str, set[str]], jobs: int,
                     progress: bool = True, priority: list[str] | None = None, desc: str = "book",
                     pool=None) -> dict[str, object]:
    """Run each of ``tasks`` (key -> picklable callable) in up to ``jobs`` processes, none before the tasks
    ``after[key]`` names have finished; ready tasks start in ``priority`` order (default: ``tasks``' order).

    Returns key -> result. When a task fails, the running ones finish, none is started, and the first
    failure is raised (the others and the tasks not started are named on stderr). ``pool``: workers
    already started (:func:`start_workers`), shut down here like the pool made otherwise.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    order = {k: i for i, k in enumerate(priority or tasks)}
    unknown = {d for deps in after.values() for d in deps} - set(tasks)
    if unknown:
        raise ShovirError(f"book schedule: tasks wait for unknown tasks {sorted(unknown)}")
    remaining = sorted(tasks, key=lambda k: order.get(k, len(order)))
    finished: set[str] = set()
    running: dict = {}
    done: dict[str, object] = {}
    failures: list[tuple[str, BaseException]] = []
    bar = tqdm(total=len(tasks), desc=f"{desc} ({jobs} at once)", unit="task", disable=not progress)
    if pool is None:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        while remaining or running:
            if not failures:
                ready = [k for k in remaining if after.get(k, set()) <= finished]
                for k in ready[:jobs - len(running)]:
                    running[pool.submit(tasks[k])] = k
                    remaining.remove(k)
            if not running:
                break
            bar.set_postfix_str("running: " + ", ".join(sorted(running.values())))
            completed, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in completed:
                k = running.pop(fut)
                try:
                    done[k] = fut.result()
                except Exception as exc:  # noqa: BLE001 - reported below, after the running ones finish
                    failures.append((k, exc))
                finished.add(k)
                bar.update()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        bar.close()
    pool.shutdown()
    if failures:
        name, exc = failures[0]
        others = [k for k, _ in failures[1:]]
        if others or remaining:
            print(f"shovir book: {name} failed" + (f"; also failed: {others}" if others else "")
                  + (f"; not started: {remaining}" if remaining else ""), file=sys.stderr)
        raise exc
    return done
