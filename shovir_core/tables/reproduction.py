"""The reproduction map: what reproducing each table, figure and appendix of both papers takes.

One row per item of :file:`shovir_core/resources/reproduction.yaml` (every table, figure and appendix
of ShoViR and ModaLens): the chapter and params files that reproduce it, the demo records it reads,
the number of trials at the paper's scale (an expression over the papers' published values,
:mod:`shovir_core.papers`, times the design's factors), the measured time per trial on this machine
for the tiny and reference models (the demo records' ``seconds`` / ``n_trials``), the projected
GPU-hours on one GPU (trials x the GPU time per trial of a benchmark output in
``benchmarks/results/*.json``, scaled linearly from the benchmark model's parameter count to the
paper model's) and the ``shovir run ... --executor slurm`` command. Nothing is typed: a cell
without a record or benchmark output says so.
"""
from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from .. import yaml_text

from .. import paths
from ..vocab import P_GRID, SHOVIR_CONDITIONS
from .result import TableResult

__all__ = ["load_catalog", "chapter_runs", "gpu_seconds_per_trial", "reproduction_table", "design_factors",
           "WORK_KINDS", "CLUSTER_EXAMPLE", "status_of", "status_table", "STATUSES", "BUILT_ON_DEMO", "REHEARSED",
           "NEEDS_CREDENTIALED", "NEEDS_CREDENTIALED_DATA", "NOT_BUILT"]

WORK_KINDS = ("generate", "score", "score+generate", "layerwise", "none")
CLUSTER_EXAMPLE = "params/cluster.example.yaml"
_KEYS = {"paper", "item", "title", "notebook", "work", "profiles", "trials", "factors", "params_b", "note"}


def load_catalog() -> list[dict]:
    """The items of ``resources/reproduction.yaml`` (validated)."""
    data = yaml_text.safe_load(resources.files("shovir_core.resources").joinpath("reproduction.yaml").read_text("utf-8"))
    items = data["items"]
    seen = set()
    for it in items:
        unknown = set(it) - _KEYS
        if unknown:
            raise ValueError(f"reproduction.yaml: item {it.get('item')!r} has unknown keys {sorted(unknown)}")
        if it["paper"] not in ("shovir", "modalens") or it.get("work") not in WORK_KINDS:
            raise ValueError(f"reproduction.yaml: item {it!r}: paper must be shovir|modalens and work one of {WORK_KINDS}")
        if (it["paper"], it["item"]) in seen:
            raise ValueError(f"reproduction.yaml: {it['paper']} {it['item']!r} listed twice")
        seen.add((it["paper"], it["item"]))
    return items


def design_factors() -> dict[str, int]:
    """Names a catalog's ``factors`` may use, from the shared vocabulary and the published values."""
    from ..papers import evaluate, load_values

    models = evaluate('count(select(table="1", dataset="MIMIC", arm="baseline", metric="F1_14"))',
                      load_values("shovir")).value
    return {"n_p": len(P_GRID), "n_image_conditions": 2, "n_disease_conditions": len(SHOVIR_CONDITIONS) - 2,
            "n_shovir_models": int(models)}


def _paper_trials(item: dict, values: dict, factors: dict) -> float:
    from ..papers import evaluate

    if not item.get("trials"):
        return np.nan
    n = evaluate(item["trials"], values[item["paper"]]).value
    for f in item.get("factors") or []:
        n *= factors[f] if isinstance(f, str) else int(f)
    return float(n)


def chapter_runs(*, profile: str = "demo", notebooks=None) -> dict:
    """``{"<notebook>.<key>": Run}`` of every chapter's records that exist (missing ones are left out)."""
    from ..params import load_runs, toc_notebooks
    from ..records import RecordError

    out = {}
    for nb in notebooks or toc_notebooks():
        if nb == "reproduction_map":
            continue
        try:
            runs = load_runs(nb, profile=profile)
        except (RecordError, ValueError):
            continue
        out.update({f"{nb}.{k}": r for k, r in runs.items()})
    return out


def _seconds_per_trial(runs: dict, notebook: str, kind: str) -> float:
    """Measured seconds per trial of a chapter's demo records of one model kind (``tiny`` / ``ref``)."""
    secs = trials = 0.0
    for key, run in runs.items():
        if not key.startswith(f"{notebook}."):
            continue
        model = (run.info.model or {}).get("id") if isinstance(run.info.model, dict) else None
        if not model or not model.startswith(f"{kind}-") or run.info.seconds is None or not run.info.n_trials:
            continue
        secs += run.info.seconds
        trials += run.info.n_trials
    return secs / trials if trials else np.nan


def gpu_seconds_per_trial(folder: Path | None = None) -> dict[str, dict]:
    """GPU time per trial by kind of work, from benchmark outputs (``benchmarks/results/*.json``).

    ``generate``: ``benchmarks/generation.py`` (seconds per report, batched); ``score``:
    ``benchmarks/inference.py`` (two requests per ModaLens trial, prefix reuse), ``score+generate``
    the same with ``--answer-tokens``. Only outputs measured on a CUDA device count. Each entry has
    ``seconds``, ``parameters`` (of the benchmark model), ``gpu`` and ``source``.
    """
    folder = Path(folder or paths.repo_root() / "benchmarks" / "results")
    out: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            r = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not str(r.get("device", "")).startswith("cuda"):
            continue
        if r.get("benchmark") == "generation":
            entry = {"seconds": r["batched"]["seconds_per_report"], "parameters": r["parameters"],
                     "gpu": r.get("gpu"), "source": path.name}
            out.setdefault("generate", entry)
        elif "reuse" in r and "trials" in r:
            entry = {"seconds": 2.0 / r["reuse"]["trials_per_s"], "parameters": r["text_params_excl_embeddings"],
                     "gpu": r.get("gpu"), "source": path.name}
            out.setdefault("score+generate" if r.get("answer_tokens") else "score", entry)
    return out


def _command(notebook: str | None, profiles: list[str], *, shards: int) -> str | None:
    if not notebook or not profiles:
        return None
    return " ; ".join(f"shovir run {notebook} --profile {p} --shards {shards} --executor slurm --cluster {CLUSTER_EXAMPLE}"
                      for p in profiles)


def rehearsed_trials(runs: dict) -> dict[tuple[str, str], float]:
    """``{(chapter, profile): trials}`` of the full-scale rehearsals among ``runs`` (scale 1, chapters ran)."""
    out: dict[tuple[str, str], float] = {}
    for run in runs.values():
        if run.info.protocol != "rehearsal" or float(run.info.spec.get("scale", 0)) != 1.0:
            continue
        t = run.trials
        t = t[(t["kind"] == "chapter") & (t["status"] == "ok")].drop_duplicates("chapter")
        for chapter, trials in zip(t["chapter"], t["trials"].astype(float)):
            out[(chapter, run.info.spec["profile"])] = trials
    return out


def _full_rehearsals() -> dict:
    """The complete full-scale rehearsal records of the credentialed profiles, where they exist."""
    from ..params import load_runs
    from ..records import RecordError

    out = {}
    for profile in ("mimic", "padchest"):
        try:
            out.update({f"rehearsal.{profile}.{k}": r for k, r in load_runs("rehearsal", profile=profile).items()})
        except (RecordError, ValueError, KeyError):
            continue
    return out


def reproduction_table(runs: dict, *, shards: int = 16, benchmarks: Path | None = None) -> TableResult:
    """The reproduction map (see the module docstring) from the chapters' records ``runs``.

    ``runs`` is :func:`chapter_runs` (``{"<notebook>.<key>": Run}``); ``shards`` the shard count the
    commands use; ``benchmarks`` the folder of benchmark outputs.
    """
    from ..params import profiles_of
    from ..papers import load_values

    values = {p: load_values(p) for p in ("shovir", "modalens")}
    factors = design_factors()
    gpu = gpu_seconds_per_trial(benchmarks)
    notebooks = {p.stem for p in paths.notebooks_root().glob("*.py")}
    rehearsed = rehearsed_trials({**runs, **_full_rehearsals()})
    rows = []
    for it in load_catalog():
        nb = it.get("notebook") if it.get("notebook") in notebooks else None
        have = profiles_of(nb) if nb else []
        paper_profiles = [p for p in it.get("profiles") or [] if p in have]
        demo = sorted(r.run_id for k, r in runs.items() if nb and k.startswith(f"{nb}."))
        trials = _paper_trials(it, values, factors)
        bench = gpu.get(it["work"])
        gpu_s = np.nan
        if bench is not None and it["work"] != "none":
            scale = (it["params_b"] * 1e9 / bench["parameters"]) if it.get("params_b") else 1.0
            gpu_s = bench["seconds"] * scale
        hours = 0.0 if it["work"] == "none" else (trials * gpu_s / 3600.0 if np.isfinite(trials) else np.nan)
        rows.append({
            "paper": it["paper"], "item": it["item"], "title": it["title"], "notebook": nb or "not built yet",
            "params": ", ".join(f"params/{nb}/{p}.yaml" for p in have) if nb else "",
            "demo_records": len(demo), "paper_trials": trials, "work": it["work"],
            "rehearsed_trials": (sum(rehearsed[(nb, p)] for p in paper_profiles if (nb, p) in rehearsed)
                                 if nb and any((nb, p) in rehearsed for p in paper_profiles) else np.nan),
            "s_per_trial_tiny_cpu": _seconds_per_trial(runs, nb, "tiny") if nb else np.nan,
            "s_per_trial_ref_cpu": _seconds_per_trial(runs, nb, "ref") if nb else np.nan,
            "s_per_trial_gpu": gpu_s, "gpu_hours": hours,
            "command": _command(nb, paper_profiles, shards=shards) or "",
            "note": it.get("note", ""),
        })
    frame = pd.DataFrame(rows)
    priced = frame[(frame["work"] != "none") & frame["paper_trials"].notna()]
    values_out = {
        "n_items": int(len(frame)), "n_items_shovir": int((frame["paper"] == "shovir").sum()),
        "n_items_modalens": int((frame["paper"] == "modalens").sum()),
        "n_with_notebook": int((frame["notebook"] != "not built yet").sum()),
        "n_with_command": int((frame["command"] != "").sum()),
        "n_model_items": int((frame["work"] != "none").sum()),
        "paper_trials_total": float(priced["paper_trials"].sum()),
        "n_gpu_benchmarks": int(len(gpu)),
        "gpu_hours_total": float(priced["gpu_hours"].sum()) if priced["gpu_hours"].notna().all() and len(gpu) else math.nan,
        "shards": int(shards),
        "n_rehearsed": int(frame["rehearsed_trials"].notna().sum()),
    }
    for paper in ("shovir", "modalens"):
        t = frame[(frame["paper"] == paper) & frame["s_per_trial_tiny_cpu"].notna()]
        values_out[f"{paper}.s_per_trial_tiny_cpu"] = float(t["s_per_trial_tiny_cpu"].median()) if len(t) else math.nan
    values_out = {k: ("not measured" if isinstance(v, float) and not math.isfinite(v)
                      else (float(f"{v:.3g}") if isinstance(v, float) and k != "paper_trials_total" else v))
                  for k, v in values_out.items()}
    values_out["paper_trials_total"] = int(values_out["paper_trials_total"])
    labels = {"paper_trials": "trials at the paper's scale", "s_per_trial_tiny_cpu": "s / trial, tiny model, this CPU",
              "s_per_trial_ref_cpu": "s / trial, reference models, this CPU", "s_per_trial_gpu": "s / trial, one GPU",
              "gpu_hours": "projected GPU-hours", "demo_records": "demo records", "command": "paper-scale command",
              "rehearsed_trials": "trials in the full-scale rehearsal"}
    caption = ("Every table, figure and appendix of both papers: chapter, params, demo records, trials at the "
               "paper's scale, measured time per trial, projected GPU-hours and the SLURM command.")
    return TableResult(frame=frame, values=values_out, labels=labels, caption=caption).with_runs(runs)


BUILT_ON_DEMO = "built on the demo"
REHEARSED = "built, and rehearsed at the paper's scale"
NEEDS_CREDENTIALED = "built on the demo; the paper's scale needs credentialed data and a GPU"
NEEDS_CREDENTIALED_DATA = "built on the demo; the paper's scale needs credentialed data (no model)"
NOT_BUILT = "not built"
STATUSES = (BUILT_ON_DEMO, REHEARSED, NEEDS_CREDENTIALED, NEEDS_CREDENTIALED_DATA, NOT_BUILT)
"""What this build shows of a paper item (:func:`status_table`)."""

CREDENTIALED_PROFILES = ("mimic", "padchest")
REHEARSAL_PROFILES = ("rehearsal", "paper-scale")
"""Params profiles that run a chapter at the paper's scale on public (or synthetic) data."""


def status_of(item: dict, *, notebooks: set[str], profiles: list[str]) -> str:
    """The status of one catalogue ``item`` (:data:`STATUSES`) given the chapters that exist and the
    params profiles of its chapter.

    >>> status_of({"notebook": None, "work": "none"}, notebooks=set(), profiles=[])
    'not built'
    >>> status_of({"notebook": "t1", "work": "generate", "profiles": ["mimic"]}, notebooks={"t1"}, profiles=["demo", "mimic"])
    "built on the demo; the paper's scale needs credentialed data and a GPU"
    """
    nb = item.get("notebook")
    if not nb or nb not in notebooks:
        return NOT_BUILT
    if any(p in profiles for p in REHEARSAL_PROFILES):
        return REHEARSED
    if any(p in CREDENTIALED_PROFILES for p in item.get("profiles") or []):
        return NEEDS_CREDENTIALED_DATA if item.get("work") == "none" else NEEDS_CREDENTIALED
    return BUILT_ON_DEMO


def status_table() -> TableResult:
    """What this build shows of every paper item of the catalogue: one row per item with its chapter
    and :func:`status_of`; ``values`` count the items per status (``n_<status words>``) and per paper."""
    from ..params import profiles_of

    notebooks = {p.stem for p in paths.notebooks_root().glob("*.py")}
    rows = []
    for it in load_catalog():
        nb = it.get("notebook") if it.get("notebook") in notebooks else None
        status = status_of(it, notebooks=notebooks, profiles=profiles_of(nb) if nb else [])
        rows.append({"paper": {"shovir": "ShoViR", "modalens": "ModaLens"}[it["paper"]], "item": it["item"],
                     "title": it["title"], "chapter": nb or "none", "status": status})
    frame = pd.DataFrame(rows, columns=["paper", "item", "title", "chapter", "status"])
    keys = {BUILT_ON_DEMO: "built_demo", REHEARSED: "rehearsed", NEEDS_CREDENTIALED: "needs_credentialed_gpu",
            NEEDS_CREDENTIALED_DATA: "needs_credentialed_data", NOT_BUILT: "not_built"}
    values = {f"n_{keys[s]}": int((frame["status"] == s).sum()) for s in STATUSES}
    values["n_items"] = int(len(frame))
    values["n_built"] = int((frame["status"] != NOT_BUILT).sum())
    caption = ("What this build shows of each table, figure and section of both papers (the reproduction "
               "map's catalogue): the chapter that builds it and whether it runs on the demo only, has been "
               "rehearsed at the paper's scale, needs the credentialed data (and a GPU) for the paper's scale, or "
               "is not built.")
    return TableResult(frame=frame, values=values, caption=caption, labels={"item": "paper item"})
