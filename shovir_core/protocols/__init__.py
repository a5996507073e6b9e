"""Experiment protocols: params -> trials -> records.

Each protocol is a module exposing ``SPEC`` (a :class:`~shovir_core.protocols.spec.SpecSchema`
declaring every key), ``resolve_spec(spec) -> dict`` (validate, fill every default, pin dataset and
model identity; the result is hashed into the record's identity) and
``execute(name, spec, *, progress=True, execution=None) -> records.Run`` where ``execution`` holds
the execution-only settings (batch and chunk sizes), which never enter the identity. Modules are
imported lazily, so listing protocols stays light.

:func:`run` hands the writer a protocol opens two things through
:func:`shovir_core.records.writer_defaults` (so protocol modules keep calling
``RunWriter(PROTOCOL, name, spec, ...)`` unchanged): the spec *as passed*, stored beside the
resolved one, and this process's shard. Protocols in :data:`SHARDED` split their grid with
:func:`shovir_core.protocols.shards.select`; each of the others is made whole by one shard
(:func:`whole_record_shards`: the groups of such records take the shards in turn).
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..records import Run, Shard, load_run, record_dir, spec_hash, writer_defaults
from ..records.schema import SHORT_HASH
from . import catalog as _catalog  # noqa: F401  (installs the $SHOVIR_MODELS reader in the model registry)
from .spec import SpecError

__all__ = ["REGISTRY", "SHARDED", "get_protocol", "resolve", "run", "run_id", "is_complete", "prefill",
           "record_groups", "whole_record_shards"]

REGISTRY: dict[str, str] = {
    "modalens": "shovir_core.protocols.modalens",
    "cohort": "shovir_core.protocols.cohort",
    "labeller-validation": "shovir_core.protocols.labeller_validation",
    "audit": "shovir_core.protocols.audit",
    "shovir": "shovir_core.protocols.shovir",
    "perturbations": "shovir_core.protocols.perturbations",
    "modalens-distance": "shovir_core.protocols.modalens_distance",
    "accounting": "shovir_core.protocols.accounting",
    "modalens-layers": "shovir_core.protocols.modalens_layers",
    "modalens-interventions": "shovir_core.protocols.modalens_interventions",
    "modalens-probes": "shovir_core.protocols.modalens_probes",
    "modalens-surrogate": "shovir_core.protocols.modalens_surrogate",
    "rehearsal": "shovir_core.protocols.rehearsal",
    "modalens-noreport": "shovir_core.protocols.noreport",
}

SHARDED: frozenset[str] = frozenset({"modalens", "shovir", "modalens-layers", "modalens-interventions",
                                     "modalens-probes"})
"""Protocols whose ``execute`` splits the trial grid by shard (:mod:`shovir_core.protocols.shards`). Two of
them keep some records whole (their ``sharded(spec)`` says False: ``modalens-interventions``' steering fits
one direction for all its trials, ``modalens-probes``' tuned lens would be trained by every shard), which one
shard then makes alone (:func:`whole_record_shards`)."""


def _sharded(protocol: str, resolved: dict) -> bool:
    """Whether records of ``protocol`` with the resolved spec are split by shard."""
    if protocol not in SHARDED:
        return False
    decide = getattr(get_protocol(protocol), "sharded", None)
    return True if decide is None else bool(decide(resolved))


def get_protocol(name: str) -> ModuleType:
    try:
        return importlib.import_module(REGISTRY[name])
    except KeyError:
        raise SpecError(f"unknown protocol {name!r}; known: {sorted(REGISTRY)}") from None


def resolve(protocol: str, spec: dict) -> dict:
    """The resolved spec (every default filled in)."""
    return get_protocol(protocol).resolve_spec(dict(spec or {}))


def run_id(protocol: str, name: str, spec: dict) -> str:
    """``<protocol>/<name>/<hash12>`` of the record a spec maps to."""
    return f"{protocol}/{name}/{spec_hash(resolve(protocol, spec))[:SHORT_HASH]}"


def is_complete(protocol: str, name: str, spec: dict, *, resolved: bool = False) -> bool:
    """Whether the record of ``spec`` exists and is complete (``resolved``: ``spec`` is already resolved)."""
    path = record_dir(protocol, name, spec if resolved else resolve(protocol, spec))
    return (path / "manifest.json").is_file() and Run(path).status == "complete"


def prefill(targets, *, progress: bool = True, shard: Shard | None = None) -> None:
    """Score the arms of ``targets`` (``(protocol, name, spec)`` triples) together where a protocol can.

    A protocol with a ``prefill_arms`` function (ModaLens) scores the records it is given in one
    pass that shares their prompt prefixes, filling the inference cache; :func:`run` then makes each
    record from the cache. With ``shard`` only that shard's part is scored (as :func:`run` would).
    Notebooks (:func:`shovir_core.book.runner.make_records`) and cluster shards
    (:class:`shovir_core.jobs.ShardTask`) both call it before making their records.
    """
    by_protocol: dict[str, list] = {}
    for protocol, name, spec in targets:
        by_protocol.setdefault(protocol, []).append((name, spec))
    for protocol, runs in by_protocol.items():
        pool = getattr(get_protocol(protocol), "prefill_arms", None)
        if pool is not None and len(runs) > 1:
            pool(runs, progress=progress, shard=shard if protocol in SHARDED else None)


def record_groups(targets, resolved: list[dict] | None = None) -> list[list[tuple]]:
    """``targets`` (``(protocol, name, spec)`` triples) split into the groups best made in one process;
    ``resolved``: their specs already resolved, in the same order (else each ``group_key`` resolves its own).

    A protocol's ``group_key(spec)`` says which of its records share work in a process: ModaLens arms that
    :func:`prefill` scores together (same model and cases), the two tuned-lens records of one model (one
    trained lens). Targets with equal keys form a group; each other target is a group of its own. Groups
    keep the targets' order and are ordered by their first target, so :func:`prefill` on each group scores
    exactly what one call on all ``targets`` would.
    """
    groups: dict[tuple, list[tuple]] = {}
    for i, target in enumerate(targets):
        protocol, _, spec = target
        key_of = getattr(get_protocol(protocol), "group_key", None)
        if key_of is None:
            key = None
        else:
            key = key_of(spec) if resolved is None else key_of(resolved[i], resolved=True)
        groups.setdefault(("", i) if key is None else (protocol, key), []).append(target)
    return list(groups.values())


def whole_record_shards(targets, count: int) -> list[int | None]:
    """For each of ``targets`` (``(protocol, name, spec)`` triples), the shard of ``count`` that makes its record
    whole, or ``None`` where the record is split by shard.

    The records that cannot be split are taken in :func:`record_groups` (records sharing work -- the two
    tuned-lens records of one trained lens -- stay in one process) and the groups take the shards in turn, so
    that two whole records of a chapter run on different shards instead of one after the other on shard 0.
    The answer depends on the targets and ``count`` alone, so every shard computes the same.
    """
    whole: list[tuple] = []
    for target in targets:
        protocol, _, spec = target
        if protocol not in SHARDED:
            whole.append(target)
        elif getattr(get_protocol(protocol), "sharded", None) is not None:  # decided per record: resolve the spec
            if not _sharded(protocol, get_protocol(protocol).resolve_spec(dict(spec or {}))):
                whole.append(target)
    owner: dict[int, int] = {}
    for i, group in enumerate(record_groups(whole)):
        for target in group:
            owner[id(target)] = i % int(count)
    return [owner.get(id(t)) for t in targets]


def run(protocol: str, name: str, spec: dict, *, progress: bool = True, shard: Shard | None = None,
        whole_by: int = 0) -> Run | None:
    """Make the record of ``spec`` (resuming a partial one); return it.

    With ``shard`` (``Shard(i, n)``, ``n > 1``) this process makes only its shard of the grid;
    the returned record is complete once every shard has finished (check ``.status``). Protocols
    outside :data:`SHARDED` (or whose ``sharded(spec)`` says no) are made whole by shard ``whole_by``
    (:func:`whole_record_shards`; default 0); other shards skip them and get ``None``.
    """
    module = get_protocol(protocol)
    resolved = module.resolve_spec(dict(spec or {}))
    h = spec_hash(resolved)
    if shard is not None and shard.sharded and not _sharded(protocol, resolved):
        if shard.index != int(whole_by) % shard.count:
            return None  # whatever its shard has done by now: a shard's report must not depend on timing
        shard = None
    if is_complete(protocol, name, resolved, resolved=True):
        return load_run(protocol, name, h)
    path = record_dir(protocol, name, resolved)
    if shard is not None and shard.sharded:  # shards of one record write side by side by design
        with writer_defaults(spec_passed=dict(spec or {}), shard=shard):
            module.execute(name, resolved, progress=progress, execution=module.SPEC.execution(spec))
    else:
        # one process makes a record; another that asks for it meanwhile waits, then reads it
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f".{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if is_complete(protocol, name, resolved, resolved=True):
                return load_run(protocol, name, h)
            with writer_defaults(spec_passed=dict(spec or {}), shard=shard):
                module.execute(name, resolved, progress=progress, execution=module.SPEC.execution(spec))
    if Run(path).status == "complete":
        return load_run(protocol, name, h)
    return Run(path)
