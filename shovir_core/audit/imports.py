"""``shovir import``: answers made elsewhere, read back into records with the same integrity checks.

Formats (chosen by the file's suffix and columns):

reports, JSONL    one object per line ``{"trial_id": "shovir/...", "report": "..."}`` (``generated`` or
                  ``prediction`` are read as ``report``)
reports, ShoViR-Bench output JSON
                  the array ``[{"image_path": ..., "prediction": ...}, ...]`` that the authors' runner writes
                  (``write_json`` / ``flatten_results`` of arco-group/ShoViR-Bench
                  ``src/benchmark/hf_runner.py``@07a7a6d); ``image_path`` is this export's image path, and
                  the report answers every trial that shows that image
yes/no, JSONL or CSV
                  ``trial_id``, ``answer`` (yes/no; also true/false, 1/0) and/or ``logit_yes`` + ``logit_no``
                  (the readout is then their argmax, ties read no), optional ``family_logit_yes``,
                  ``family_logit_no`` and ``generated`` (a free-text answer)

Checks, before anything is written: every id is one the export made (unknown ids are refused, naming
them), none is repeated (naming them), every exported trial of the file's kind is answered (naming the
missing), trials that show the same input got the same answer, and every value parses. A bad file
writes nothing. A good one is stored under ``<runs>/imports/<name>/`` (the answers keyed by model input,
the original file's SHA-256, and ``model.yaml``: a catalogue entry with ``adapter: imported``), and the
records of the audit are made from it by the protocols themselves.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from ..models.imported import ANSWER_FILES
from .export import read_export
from .plan import AuditError

__all__ = ["import_answers", "ImportError_", "imports_root", "read_answers", "register_imports"]


class ImportError_(AuditError):  # noqa: N801 - not the builtin ImportError
    """An answer file does not match its export (one line naming the ids or the value)."""


def imports_root() -> Path:
    """``<runs>/imports``: one folder per imported model."""
    from ..paths import runs_root

    return runs_root() / "imports"


def register_imports() -> list[str]:
    """Register every imported model (``<runs>/imports/*/model.yaml``) with the registry."""
    from ..protocols.catalog import register_catalogue

    names: list[str] = []
    root = imports_root()
    if root.is_dir():
        for f in sorted(root.glob("*/model.yaml")):
            names += register_catalogue(f)
    return names


def _names(ids, limit: int = 5) -> str:
    ids = sorted(ids)
    shown = ", ".join(repr(i) for i in ids[:limit])
    return f"{shown}{f' and {len(ids) - limit} more' if len(ids) > limit else ''} ({len(ids)} in all)"


def read_answers(path: str | Path) -> tuple[list[dict], str]:
    """The rows of an answer file and its format (``jsonl``, ``csv`` or ``shovir-bench``)."""
    import pandas as pd

    path = Path(path).expanduser()
    if not path.is_file():
        raise ImportError_(f"import: {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, dtype={"trial_id": str, "answer": str, "generated": str}, keep_default_na=False)
            rows = frame.to_dict("records")
            for r in rows:
                for k, v in list(r.items()):
                    if v == "":
                        r[k] = None
            return rows, "csv"
        if suffix == ".json":
            data = json.loads(path.read_text())
            if not isinstance(data, list) or not all(isinstance(r, dict) and "image_path" in r for r in data):
                raise ImportError_(f"import: {path} is JSON but not the ShoViR-Bench output format (a list of "
                                   "objects with image_path and prediction)")
            return data, "shovir-bench"
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ImportError_(f"import: {path} line {n} is not a JSON object")
                rows.append(row)
        return rows, "jsonl"
    except (json.JSONDecodeError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ImportError_(f"import: {path} cannot be parsed as {suffix.lstrip('.') or 'JSONL'} "
                           f"({' '.join(str(exc).split())})") from None


def _yes_no(value, *, where: str) -> str:
    text = str(value).strip().lower().rstrip(".")
    if text in ("yes", "true", "1", "y"):
        return "yes"
    if text in ("no", "false", "0", "n"):
        return "no"
    raise ImportError_(f"import: {where}: answer {value!r} is not yes or no")


def _number(value, *, where: str, key: str) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ImportError_(f"import: {where}: {key} {value!r} is not a number") from None
    if not math.isfinite(out):
        raise ImportError_(f"import: {where}: {key} {value!r} is not finite")
    return out


def _report_answers(rows: list[dict], fmt: str, trials: list[dict]) -> dict[str, dict]:
    """trial id -> {"generated": text} of a reports file (ids checked by the caller)."""
    if fmt == "shovir-bench":
        by_image: dict[str, list[str]] = {}
        for t in trials:
            by_image.setdefault(t["image"], []).append(t["trial_id"])
        seen: set[str] = set()
        dup, unknown, out = set(), set(), {}
        for r in rows:
            image = str(r["image_path"]).replace("\\", "/")
            if image in seen:
                dup.add(image)
            seen.add(image)
            if image not in by_image:
                unknown.add(image)
                continue
            for tid in by_image[image]:
                out[tid] = r.get("prediction")
        if dup:
            raise ImportError_(f"import: image paths answered more than once: {_names(dup)}")
        if unknown:
            raise ImportError_(f"import: image paths that are not in the export: {_names(unknown)}")
        missing = set(by_image) - seen
        if missing:
            raise ImportError_(f"import: exported images without an answer: {_names(missing)}")
        rows = [{"trial_id": k, "report": v} for k, v in out.items()]
    out = {}
    for r in rows:
        text = next((r[k] for k in ("report", "generated", "prediction") if r.get(k) is not None), None)
        if not isinstance(text, str):
            raise ImportError_(f"import: trial {r['trial_id']!r}: no report text (a string under 'report')")
        out[r["trial_id"]] = {"generated": text}
    return out


def _yes_no_answers(rows: list[dict]) -> dict[str, dict]:
    out = {}
    for r in rows:
        where = f"trial {r['trial_id']!r}"
        ly = _number(r.get("logit_yes"), where=where, key="logit_yes")
        ln = _number(r.get("logit_no"), where=where, key="logit_no")
        if (ly is None) != (ln is None):
            raise ImportError_(f"import: {where}: give both logit_yes and logit_no, or neither")
        answer = r.get("answer")
        if answer is None and ly is None:
            raise ImportError_(f"import: {where}: needs an answer (yes/no) or logit_yes and logit_no")
        readout = _yes_no(answer, where=where) if answer is not None else ("yes" if ly > ln else "no")
        row = {"readout": readout, "logit_yes": ly, "logit_no": ln}
        fy = _number(r.get("family_logit_yes"), where=where, key="family_logit_yes")
        fn = _number(r.get("family_logit_no"), where=where, key="family_logit_no")
        if fy is not None and fn is not None:
            row.update(family_logit_yes=fy, family_logit_no=fn, family_readout="yes" if fy > fn else "no")
        if r.get("generated") is not None:
            row["generated"] = str(r["generated"])
        out[r["trial_id"]] = row
    return out


def import_answers(path: str | Path, *, name: str, export: str | Path, kind: str | None = None,
                   make: bool = True, progress: bool = True) -> dict:
    """Check an answer file against its export and store it as the imported model ``name``.

    Parameters
    ----------
    path
        The answer file (formats in the module docstring).
    name
        The model's name (a new name, or a model imported before: its other kind of answers is kept).
    export
        The folder ``shovir audit --export`` wrote.
    kind
        ``report`` or ``yes_no`` (default: from the file).
    make
        Also make the audit's records of this kind from the answers (:func:`shovir_core.audit.make_records`).

    Returns ``{"name", "kind", "n_answers", "folder", "runs"}`` (``runs``: key -> record, when ``make``).

    Raises
    ------
    ImportError_
        Naming the unknown, repeated or missing trial ids, or the value that does not parse; nothing is
        written then.
    """
    import yaml

    from ..protocols.catalog import ENTRY, CatalogueError
    from ..models.registry import REGISTRY

    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ImportError_(f"import: model name {name!r} may hold only letters, digits, '.', '_' and '-' "
                           "(and starts with a letter or digit)")
    info, trials = read_export(export)
    rows, fmt = read_answers(path)
    if not rows:
        raise ImportError_(f"import: {path} holds no answers")
    if kind is None:
        kind = "report" if fmt == "shovir-bench" or any(k in rows[0] for k in ("report", "prediction")) else "yes_no"
    if kind not in ANSWER_FILES:
        raise ImportError_(f"import: kind {kind!r}; use one of {list(ANSWER_FILES)}")
    wanted = [t for t in trials if t["kind"] == kind]
    if not wanted:
        raise ImportError_(f"import: the export {export} has no {kind} trials (profile {info['profile']!r}, "
                           f"only {info['only']!r})")
    if fmt != "shovir-bench":
        if any("trial_id" not in r or r["trial_id"] in (None, "") for r in rows):
            raise ImportError_(f"import: {path}: every answer needs a trial_id")
        ids = [str(r["trial_id"]) for r in rows]
        for r, i in zip(rows, ids):
            r["trial_id"] = i
        counts: dict[str, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        dup = {i for i, c in counts.items() if c > 1}
        if dup:
            raise ImportError_(f"import: trial ids answered more than once: {_names(dup)}")
        known = {t["trial_id"] for t in wanted}
        unknown = set(ids) - known
        if unknown:
            other = {t["trial_id"] for t in trials} & unknown
            hint = f" ({len(other)} of them are {'yes_no' if kind == 'report' else 'report'} trials)" if other else ""
            raise ImportError_(f"import: trial ids that are not {kind} trials of the export: {_names(unknown)}{hint}")
        missing = known - set(ids)
        if missing:
            raise ImportError_(f"import: exported {kind} trials without an answer: {_names(missing)}")
    answers = _report_answers(rows, fmt, wanted) if kind == "report" else _yes_no_answers(rows)
    by_input: dict[str, dict] = {}
    clash = set()
    for t in wanted:
        a = answers[t["trial_id"]]
        if t["input"] in by_input and by_input[t["input"]]["answer"] != a:
            clash.add(t["trial_id"])
        by_input.setdefault(t["input"], {"answer": a, "trial_id": t["trial_id"]})
    if clash:
        raise ImportError_(f"import: trials that show the same model input as another trial got a different "
                           f"answer: {_names(clash)}")
    folder = imports_root() / name
    entry_file = folder / "model.yaml"
    if name in REGISTRY and not entry_file.is_file():
        raise ImportError_(f"import: {name!r} is a registered model; import under another name")
    try:
        entry = ENTRY.resolve({"adapter": "imported", "answers": ".",
                               "notes": f"answers imported by shovir import (profile {info['profile']})"})
    except ValueError as exc:  # pragma: no cover - the entry is built here
        raise CatalogueError(str(exc)) from None
    # everything checked: write
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"input": k, **v["answer"], "trial_id": v["trial_id"]}, sort_keys=True)
             for k, v in sorted(by_input.items())]
    tmp = folder / (ANSWER_FILES[kind] + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(folder / ANSWER_FILES[kind])
    meta_file = folder / "import.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    meta[kind] = {"file": str(Path(path).expanduser().resolve()), "format": fmt,
                  "file_sha256": hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest(),
                  "n_answers": len(answers), "export": str(Path(export).expanduser().resolve()),
                  "profile": info["profile"]}
    meta_file.write_text(json.dumps(meta, indent=2, sort_keys=True))
    entry_file.write_text(yaml.safe_dump({"models": {name: {k: v for k, v in entry.items()
                                                              if k in ("adapter", "answers", "notes")}}}))
    if name in REGISTRY:  # re-imported in this process: the entry is the same, the answers changed
        REGISTRY.pop(name)
        from ..protocols import catalog

        catalog._LOADED.pop(str(entry_file.resolve()), None)
    register_imports()
    out = {"name": name, "kind": kind, "n_answers": len(answers), "folder": str(folder), "runs": {}}
    if make:
        from .plan import audit_runs, make_records

        # the model's identity covers all its answers: remake the records of every kind it now has,
        # so that `shovir audit NAME` finds them complete
        kinds = {k for k, f in ANSWER_FILES.items() if (folder / f).is_file()}
        only = None if len(kinds) == 2 else ("shovir" if kind == "report" else "modalens")
        out["runs"] = make_records(audit_runs(name, profile=info["profile"], only=only), progress=progress)
    return out
