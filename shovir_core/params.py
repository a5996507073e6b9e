"""Notebook parameter files ``params/<notebook>/<profile>.yaml``, the chapters of ``_toc.yml``, and
the records a notebook's params name.

Below ``book`` (the runner), ``jobs`` (shard tasks) and ``tables`` (the reproduction map), which all
read them; notebooks reach :func:`load_runs` as ``book.load_runs``."""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from . import yaml_text

from . import paths
from .errors import ShovirError

__all__ = ["ParamsError", "load_params", "profile_defaults", "declared_parameters", "profiles_of", "toc_notebooks", "load_runs", "PROFILES_DIR"]


class ParamsError(ShovirError, ValueError):
    """A params file is missing or malformed."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")
_RUN_KEYS = {"protocol", "name", "spec"}
_INJECTED = {"profile", "run_ids"}


def _check_name(value, what: str, path) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        raise ParamsError(f"{path}: {what} must be a name of letters, digits and . _ @ + - (no '/', no '..'), "
                          f"got {value!r}")
    return value


PROFILES_DIR = "_profiles"
"""``params/_profiles/<profile>.yaml``: the parameters every chapter gets on a profile (seeds, draws,
``reproduces_paper`` ...), merged under each chapter's own ``parameters``."""


def _read_yaml(path: Path):
    try:
        return yaml_text.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParamsError(f"{path}: not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError as exc:
        raise ParamsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _check_parameters(parameters, path: Path) -> dict:
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise ParamsError(f"{path}: 'parameters' must be a mapping of papermill parameters, got {parameters!r}")
    for name in parameters:
        if not isinstance(name, str) or not name.isidentifier():
            raise ParamsError(f"{path}: parameter name {name!r} is not a Python identifier")
        if name in _INJECTED:
            raise ParamsError(f"{path}: parameter {name!r} is set by the runner (profile and run ids); remove it")
    return parameters


_PARAMETERS_CELL = re.compile(r'^# %%[^\n]*tags=\[[^\]\n]*"parameters"[^\n]*\n(.*?)(?=^# %%|\Z)', re.M | re.S)
_ASSIGNED = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=", re.M)


def declared_parameters(notebook: str) -> set[str] | None:
    """The names a notebook's ``parameters`` cell assigns (``None`` when ``notebooks/<notebook>.py``
    does not exist): the profile defaults a notebook gets are those it declares.

    >>> sorted(declared_parameters("modalens_appl"))[:3]
    ['bootstrap_seed', 'n_draws', 'profile']
    """
    path = paths.notebooks_root() / f"{notebook}.py"
    if not path.is_file():
        return None
    cell = _PARAMETERS_CELL.search(path.read_text(encoding="utf-8"))
    return set(_ASSIGNED.findall(cell.group(1))) if cell else set()


def profile_defaults(profile: str) -> dict:
    """The parameters of ``params/_profiles/<profile>.yaml`` (``{}`` when the profile has no such file).

    Raises :class:`ParamsError` for a file that is not ``{parameters: {name: value}}``.
    """
    _check_name(profile, "the profile name", "params")
    path = paths.params_root() / PROFILES_DIR / f"{profile}.yaml"
    if not path.is_file():
        return {}
    data = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict) or set(data) - {"parameters"}:
        raise ParamsError(f"{path}: a profile file is a mapping with one key, 'parameters', got "
                          f"{sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__}")
    return _check_parameters(data.get("parameters"), path)


def load_params(notebook: str, profile: str) -> dict:
    """``{"runs": {key: {protocol, name, spec}}, "parameters": {...}}`` for one notebook/profile.

    ``parameters`` are the profile's defaults (:func:`profile_defaults`) the notebook declares
    (:func:`declared_parameters`; all of them when there is no notebook source), updated with the
    chapter's own ``parameters`` (a chapter's value wins).

    Raises :class:`ParamsError` naming the file and the offending entry: a YAML syntax error (with
    its line), a file that is not a mapping, ``runs`` or ``parameters`` that are not mappings, a run
    without ``protocol``/``name``, an unknown protocol, a name that is not a plain name, a ``spec``
    that is not a mapping, unknown keys, and parameters the runner injects itself.
    """
    _check_name(notebook, "the notebook name", "params")
    _check_name(profile, "the profile name", "params")
    path = paths.params_root() / notebook / f"{profile}.yaml"
    if not path.is_file():
        have = profiles_of(notebook)
        raise ParamsError(f"no params file {path} (profiles of {notebook!r}: {have or 'none'})")
    data = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: must be a mapping with 'runs' and 'parameters', got a {type(data).__name__}")
    unknown = set(data) - {"runs", "parameters", "requires"}
    if unknown:
        raise ParamsError(f"{path}: unknown top-level keys {sorted(map(str, unknown))} "
                          "(allowed: runs, parameters, requires)")
    runs = data.get("runs")
    if runs is None:
        runs = {}
    if not isinstance(runs, dict):
        raise ParamsError(f"{path}: 'runs' must be a mapping key -> {{protocol, name, spec}}, got a "
                          f"{type(runs).__name__} (write `runs: {{cohort: {{protocol: cohort, name: demo}}}}`)")
    from .protocols import REGISTRY

    for key, r in runs.items():
        if not isinstance(key, str) or not key:
            raise ParamsError(f"{path}: run keys must be strings, got {key!r}")
        if not isinstance(r, dict) or not {"protocol", "name"} <= set(r):
            raise ParamsError(f"{path}: run {key!r} needs 'protocol' and 'name' (and optionally 'spec'), got {r!r}")
        extra = set(r) - _RUN_KEYS
        if extra:
            raise ParamsError(f"{path}: run {key!r} has unknown keys {sorted(map(str, extra))} "
                              "(allowed: protocol, name, spec)")
        if r["protocol"] not in REGISTRY:
            raise ParamsError(f"{path}: run {key!r}: unknown protocol {r['protocol']!r}; known: {sorted(REGISTRY)}")
        _check_name(r["name"], f"run {key!r}: 'name'", path)
        spec = r.setdefault("spec", {})
        if not isinstance(spec, dict):
            raise ParamsError(f"{path}: run {key!r}: 'spec' must be a mapping of spec keys (omit it for the "
                              f"defaults), got {'null' if spec is None else repr(spec)}")
    from .rehearsal.scaling import rehearsal_scale, scale_design

    scale = rehearsal_scale()  # a reduced rehearsal: the designs' sample sizes scale with its tree
    if scale is not None:
        for r in runs.values():
            r["spec"] = scale_design(r["protocol"], r["spec"], scale)
    defaults = profile_defaults(profile)
    declared = declared_parameters(notebook)
    if declared is not None:
        defaults = {k: v for k, v in defaults.items() if k in declared}
    parameters = {**defaults, **_check_parameters(data.get("parameters"), path)}
    return {"runs": runs, "parameters": parameters,
            "requires": data.get("requires") or None, "path": path}


def profiles_of(notebook: str) -> list[str]:
    return sorted(p.stem for p in (paths.params_root() / notebook).glob("*.yaml"))


def toc_notebooks(toc: Path | None = None) -> list[str]:
    """Notebook names (``book/<name>`` entries with a ``notebooks/<name>.py`` source), in toc order."""
    toc = toc or paths.repo_root() / "_toc.yml"
    if not Path(toc).is_file():
        raise ParamsError(f"no table of contents {toc}")
    try:
        data = yaml_text.safe_load(Path(toc).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ParamsError(f"{toc}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
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


def load_runs(notebook: str, *, profile: str = "demo", run_ids: Mapping[str, str] | None = None) -> dict:
    """The records a notebook reads, as ``{key: records.Run}``.

    ``run_ids`` (injected by ``shovir book``) pins each key to
    ``<protocol>/<name>/<hash12>``; without it the ids are derived from
    ``params/<notebook>/<profile>.yaml``, so a notebook opened by hand reads the
    records its params name.
    """
    from .protocols import run_id as _run_id
    from .records import load_run

    if run_ids is None:
        spec = load_params(notebook, profile)
        run_ids = {k: _run_id(r["protocol"], r["name"], r["spec"]) for k, r in spec["runs"].items()}
    out = {}
    for key, rid in run_ids.items():
        protocol, name, h = rid.split("/")
        out[key] = load_run(protocol, name, h)
    return out
