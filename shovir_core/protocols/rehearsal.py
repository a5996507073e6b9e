"""``rehearsal``: a rehearsal of a credentialed profile as a run record (the rehearsal page reads it).

One record per (profile, scale, seed, pixels, chapters, stand-in): :func:`execute` runs
:func:`shovir_core.rehearsal.run.rehearse` into a folder of its own under the runs root and stores
one row per record each rehearsed chapter made (``kind = "record"``: its protocol, run id and
trials, model requests, and the paper's denominator for the record with the verdict and its reason,
:mod:`shovir_core.rehearsal.denominators`) and one per chapter (``kind = "chapter"``: status, wall
time, peak memory, trials and model requests, and the real run's command). The rehearsal's own records and notebooks stay in that folder; nothing in them is a
result (see :mod:`shovir_core.rehearsal.run`).
"""
from __future__ import annotations

import hashlib
import json

from ..records import Run, RunWriter, load_run, spec_hash
from .spec import Field, SpecSchema

__all__ = ["resolve_spec", "execute", "SPEC", "PROTOCOL", "report_rows"]

PROTOCOL = "rehearsal"
SPEC = SpecSchema(PROTOCOL, [
    Field("profile", str, "mimic", choices=("mimic", "padchest"), doc="the credentialed profile rehearsed"),
    Field("scale", float, 1.0, range=(0.001, 1.0), doc="share of the papers' sizes (1 = full scale)"),
    Field("seed", int, 0, range=(0, None), doc="seed of the synthetic tree"),
    Field("pixels", str, "small", choices=("small", "full"), doc="image size of the synthetic tree"),
    Field("only", (list, type(None)), None, items=str, doc="chapters to rehearse (default: every chapter of the profile)"),
    Field("stand_in", (str, type(None)), None, doc="one stand-in for every real model (default: per kind)"),
    Field("code_sha256", (str, type(None)), None, pin=True,
          doc="pinned hash of the code a rehearsal runs (package, notebooks, params, toc): new code, new rehearsal"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`)."""

_COLUMNS = ["trial_id", "kind", "chapter", "status", "seconds", "peak_mb", "trials", "model_calls", "record_key",
            "run_id", "record_protocol", "record_status", "paper_item", "paper_trials", "paper_trials_scaled",
            "compared", "compared_trials", "difference", "verdict", "reason", "command", "error", "stand_ins"]


def code_sha256() -> str:
    """SHA-256 over the files a rehearsal executes or judges by: ``shovir_core/**/*.py``, the package's
    resources (``shovir_core/resources/**/*.yaml``: the paper denominators its verdicts read),
    ``notebooks/*.py``, ``params/**/*.yaml`` and ``_toc.yml`` (relative paths and bytes), so a rehearsal
    record is never reused across a change of the code it rehearsed or of the counts it compares with."""
    from .. import paths

    root = paths.repo_root()
    files = sorted([*(root / "shovir_core").rglob("*.py"), *(root / "shovir_core" / "resources").rglob("*.yaml"),
                    *(root / "notebooks").glob("*.py"),
                    *(root / "params").rglob("*.yaml"), root / "_toc.yml"])
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def resolve_spec(spec: dict) -> dict:
    """Validate (:data:`SPEC`), fill the defaults and pin the code's hash."""
    out = SPEC.resolve(spec)
    SPEC.pin(out, "code_sha256", code_sha256(), what="the code a rehearsal runs")
    return out


def report_rows(report: dict) -> list[dict]:
    """The record rows of a rehearsal report (:func:`shovir_core.rehearsal.run.rehearse`)."""
    rows = []
    for c in report["chapters"]:
        base = {"chapter": c["chapter"], "status": c["status"]}
        rows.append({**base, "trial_id": f"chapter|{c['chapter']}", "kind": "chapter",
                     "seconds": c["seconds"], "peak_mb": c.get("peak_mb"), "trials": c.get("trials"),
                     "model_calls": c.get("model_calls"), "command": c["command"],
                     "error": (c.get("error") or [None])[0], "stand_ins": ", ".join(c["stand_ins"])})
        for r in c.get("records", []):
            rows.append({**base, "trial_id": f"record|{c['chapter']}|{r['key']}", "kind": "record",
                         "record_key": r["key"], "run_id": r["run_id"], "record_protocol": r["protocol"],
                         "record_status": r["status"], "trials": r["trials"], "seconds": r["seconds"],
                         **{k: r.get(k) for k in ("model_calls", "paper_item", "paper_trials", "paper_trials_scaled",
                                                  "compared", "compared_trials", "difference", "verdict", "reason")}})
    return [{k: r.get(k) for k in _COLUMNS} for r in rows]


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Rehearse ``spec["profile"]`` and store its report as rows (``execution``: none are declared)."""
    from .. import paths
    from ..rehearsal.run import rehearse
    from ..rehearsal.synthetic import PLANTED

    root = paths.runs_root() / "rehearsal" / spec_hash(spec)[:12]
    report = rehearse(spec["profile"], only=spec["only"], stand_in=spec["stand_in"], scale=spec["scale"],
                      seed=spec["seed"], pixels=spec["pixels"], root=root, progress=progress,
                      overlap=False)  # inside `shovir book`, whose other workers already fill the cores
    with RunWriter(PROTOCOL, name, spec, seeds={"tree": spec["seed"]}) as writer:
        if not writer.is_complete:
            writer.append(report_rows(report))
            writer.complete(n_chapters=len(report["chapters"]),
                            n_failed=sum(c["status"] != "ok" for c in report["chapters"]),
                            seconds_total=report["seconds"], tree_sha256=report["tree_sha256"],
                            planted=json.dumps(report["planted"], sort_keys=True),
                            planted_full_scale=json.dumps(PLANTED, sort_keys=True))
    return load_run(PROTOCOL, name, spec_hash(spec))
