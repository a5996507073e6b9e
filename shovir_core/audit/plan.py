"""The records of one model's audit, from ``params/report_card/<profile>.yaml``.

The file names the ShoViR record (image and disease level) and the ModaLens arms of the primary
design (report present / absent, without and with the answer instruction) with ``{model}`` (and
``{arm}``) placeholders; :func:`audit_runs` fills them for one model. Records are made by
:func:`shovir_core.protocols.run`: complete ones are reused and interrupted ones resume.
"""
from __future__ import annotations

from ..errors import ShovirError
from ..paths import params_root

__all__ = ["AuditError", "AUDIT_PARAMS", "ONLY", "audit_runs", "audit_parameters", "make_records"]

class AuditError(ShovirError, ValueError):
    """An audit cannot run as asked (an unknown profile, model or export folder); one line."""


AUDIT_PARAMS = "report_card"
"""Folder of ``params/`` holding the audit's records per profile."""

ONLY = ("shovir", "modalens")


def _load(profile: str) -> dict:
    from .. import yaml_text

    path = params_root() / AUDIT_PARAMS / f"{profile}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in (params_root() / AUDIT_PARAMS).glob("*.yaml"))
        raise AuditError(f"audit: no profile {profile!r} ({path} is missing); profiles: {', '.join(have)}")
    return yaml_text.safe_load(path.read_text())


def _fill(value, **names):
    if isinstance(value, str):
        return value.format(**names) if "{" in value and "${" not in value else value
    if isinstance(value, dict):
        return {k: _fill(v, **names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, **names) for v in value]
    return value


def audit_runs(model: str, *, profile: str = "demo", only: str | None = None) -> dict[str, tuple[str, str, dict]]:
    """``key -> (protocol, name, spec)`` of the records ``model``'s card reads.

    Keys: ``shovir`` and ``modalens.<arm>`` (``P``, ``A``, ``P_instr``, ``A_instr``); ``only``
    keeps one protocol.

    >>> sorted(audit_runs("ref-anchored@0.5", only="modalens"))
    ['modalens.A', 'modalens.A_instr', 'modalens.P', 'modalens.P_instr']
    >>> audit_runs("ref-anchored@0.5", only="shovir")["shovir"][1]
    'audit.ref-anchored-0.5'
    """
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "-", model)  # record names hold letters, digits, '.', '_' and '-'
    if only not in (None, *ONLY):
        raise AuditError(f"audit: --only {only!r}; use one of {list(ONLY)}")
    data = _load(profile)
    out: dict[str, tuple[str, str, dict]] = {}
    if only in (None, "shovir"):
        s = data["shovir"]
        out["shovir"] = ("shovir", _fill(s["name"], model=safe), _fill(s["spec"], model=model))
    if only in (None, "modalens"):
        m = data["modalens"]
        for arm, extra in m["arms"].items():
            spec = {**_fill(m["spec"], model=model), **extra}
            out[f"modalens.{arm}"] = ("modalens", _fill(m["name"], model=safe, arm=arm), spec)
    return out


def audit_parameters(profile: str = "demo") -> dict:
    """The card's parameters of ``profile`` (bootstrap draws and seed, whether it is the papers' setting)."""
    return dict(_load(profile).get("parameters") or {})


def make_records(targets: dict[str, tuple[str, str, dict]], *, progress: bool = True) -> dict:
    """Make (or resume) every record of ``targets``; returns ``key -> Run``. The ModaLens arms are
    scored together first (:func:`shovir_core.protocols.prefill`: each image prefix prefilled once)."""
    from ..protocols import prefill, run

    prefill([t for t in targets.values() if t[0] == "modalens"], progress=progress)
    return {key: run(protocol, name, spec, progress=progress) for key, (protocol, name, spec) in targets.items()}
