"""Experiment protocols: params -> trials -> records.

Each protocol is a module exposing ``SPEC`` (a :class:`~shovir_core.protocols.spec.SpecSchema`
declaring every key), ``resolve_spec(spec) -> dict`` (validate, fill every default, pin dataset and
model identity; the result is hashed into the record's identity) and
``execute(name, spec, *, progress=True, execution=None) -> records.Run`` where ``execution`` holds
the execution-only settings (batch and chunk sizes), which never enter the identity. Modules are
imported lazily, so listing protocols stays light.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..records import Run, load_run, record_dir, spec_hash
from ..records.schema import SHORT_HASH

__all__ = ["REGISTRY", "get_protocol", "resolve", "run", "run_id", "is_complete"]

REGISTRY: dict[str, str] = {
    "modalens": "shovir_core.protocols.modalens",
    "cohort": "shovir_core.protocols.cohort",
    "labeller-validation": "shovir_core.protocols.labeller_validation",
    "audit": "shovir_core.protocols.audit",
    "shovir": "shovir_core.protocols.shovir",
    "perturbations": "shovir_core.protocols.perturbations",
    "modalens-layers": "shovir_core.protocols.modalens_layers",
}


def get_protocol(name: str) -> ModuleType:
    try:
        return importlib.import_module(REGISTRY[name])
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; known: {sorted(REGISTRY)}") from None


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


def run(protocol: str, name: str, spec: dict, *, progress: bool = True) -> Run:
    """Make the record of ``spec`` (resuming a partial one); return it when complete."""
    module = get_protocol(protocol)
    resolved = module.resolve_spec(dict(spec or {}))
    h = spec_hash(resolved)
    if is_complete(protocol, name, resolved, resolved=True):
        return load_run(protocol, name, h)
    module.execute(name, resolved, progress=progress, execution=module.SPEC.execution(spec))
    return load_run(protocol, name, h)
