"""Notebook parameter files: ``params/<notebook>/<profile>.yaml``."""
from __future__ import annotations

from pathlib import Path

import yaml

from .. import paths

__all__ = ["ParamsError", "load_params", "profiles_of", "toc_notebooks"]


class ParamsError(ValueError):
    """A params file is missing or malformed."""


def load_params(notebook: str, profile: str) -> dict:
    """``{"runs": {key: {protocol, name, spec}}, "parameters": {...}}`` for one notebook/profile."""
    path = paths.params_root() / notebook / f"{profile}.yaml"
    if not path.is_file():
        have = profiles_of(notebook)
        raise ParamsError(f"no params file {path} (profiles of {notebook!r}: {have or 'none'})")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = set(data) - {"runs", "parameters", "requires"}
    if unknown:
        raise ParamsError(f"{path}: unknown top-level keys {sorted(unknown)}")
    runs = data.get("runs") or {}
    for key, r in runs.items():
        if not isinstance(r, dict) or not {"protocol", "name"} <= set(r):
            raise ParamsError(f"{path}: run {key!r} needs 'protocol' and 'name' (and optionally 'spec')")
        r.setdefault("spec", {})
    return {"runs": runs, "parameters": data.get("parameters") or {},
            "requires": data.get("requires") or None, "path": path}


def profiles_of(notebook: str) -> list[str]:
    return sorted(p.stem for p in (paths.params_root() / notebook).glob("*.yaml"))


def toc_notebooks(toc: Path | None = None) -> list[str]:
    """Notebook names (``book/<name>`` entries with a ``notebooks/<name>.py`` source), in toc order."""
    toc = toc or paths.repo_root() / "_toc.yml"
    data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    files: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for k in ("root", "file"):
                if isinstance(node.get(k), str):
                    files.append(node[k])
            for v in node.values():
                if isinstance(v, (list, dict)):
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    out = []
    for f in files:
        stem = Path(f).with_suffix("").name
        if Path(f).parent.name == "book" and (paths.notebooks_root() / f"{stem}.py").is_file():
            out.append(stem)
    return out
