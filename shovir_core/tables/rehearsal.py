"""The rehearsal page: each rehearsed chapter's status and cost, and every record's trials beside the
paper's denominator for it.

Built from ``rehearsal`` records (:mod:`shovir_core.protocols.rehearsal`). Per record, the paper's
stated count for such a record comes from the registry :file:`shovir_core/resources/denominators.yaml`
(:mod:`shovir_core.rehearsal.denominators`), evaluated over the published values at the rehearsal's
planted sizes: the record's trials are equal to it, differ for a reason the registry names, have no
stated count (and the reason why), or differ unexplained -- a defect to look at, never hidden.

Per chapter, the model requests are the records' inference-cache entries (the distinct requests a
record made; records of protocols without a request cache are counted apart). Projected GPU-hours
need a benchmark output measured on a GPU (``benchmarks/results/*.json``,
:func:`shovir_core.tables.reproduction.gpu_seconds_per_trial`); where there is none the values say so
instead of giving a number.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..records import Run
from .result import TableResult

__all__ = ["rehearsal_chapters", "rehearsal_records", "rehearsal_what", "chapter_work", "NO_BENCHMARK"]

_STATUS = {"ok": "ran to the end", "failed": "failed"}

NO_BENCHMARK = ("no benchmark output measured on a GPU exists in this build (benchmarks/results/*.json), "
                "so no GPU-hours are projected")


def _rows(runs: dict[str, Run], kind: str) -> pd.DataFrame:
    frames = []
    for key, run in runs.items():
        t = run.trials
        t = t[t["kind"] == kind].copy()
        t.insert(0, "rehearsal", key)
        t["scale"] = float(run.info.spec["scale"])
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


def chapter_work() -> dict[str, str]:
    """``{chapter: kind of model work}`` from the reproduction catalogue (the first item of the chapter
    whose work is not ``none``; ``generate`` / ``score`` / ``score+generate`` / ``layerwise``)."""
    from .reproduction import load_catalog

    out: dict[str, str] = {}
    for item in load_catalog():
        if item.get("notebook") and item.get("work") != "none":
            out.setdefault(item["notebook"], item["work"])
    return out


def _gpu_hours(frame: pd.DataFrame, benchmarks) -> pd.Series:
    """Full-scale GPU-hours per chapter row: the trials of the records it made first / scale x the
    benchmark's GPU seconds per trial of the chapter's kind of work (NaN without a benchmark of that kind)."""
    from .reproduction import gpu_seconds_per_trial

    gpu = gpu_seconds_per_trial(benchmarks)
    work = chapter_work()
    seconds = frame["chapter"].map(lambda c: (gpu.get(work.get(c, "none")) or {}).get("seconds", np.nan)).astype(float)
    return frame["new_trials"].astype(float) / frame["scale"] * seconds / 3600.0


def rehearsal_chapters(runs: dict[str, Run], *, benchmarks=None) -> TableResult:
    """One row per (rehearsal, chapter): status, wall time, peak memory, trials, model requests and the
    projected GPU-hours at the paper's scale (``benchmarks``: the folder of benchmark outputs)."""
    from .reproduction import gpu_seconds_per_trial

    t = _rows(runs, "chapter").drop_duplicates(["rehearsal", "chapter"])  # old records: one row per paper item
    if "model_calls" not in t:
        t["model_calls"] = np.nan
    frame = pd.DataFrame({
        "rehearsal": t["rehearsal"], "chapter": t["chapter"], "status": t["status"].map(_STATUS).fillna(t["status"]),
        "seconds": t["seconds"].astype(float), "peak_mb": t["peak_mb"].astype(float),
        "trials": t["trials"].astype(float), "model_calls": t["model_calls"].astype(float),
        "scale": t["scale"], "stand_ins": t["stand_ins"], "error": t["error"].replace("", np.nan),
    }).reset_index(drop=True)
    # a record several chapters read (Table 1's are Figure 2's) is made once: its trials and requests count
    # for the first chapter that made it (the profile's order), so the column sums to the profile's work
    records = _rows(runs, "record")
    if "model_calls" not in records:
        records["model_calls"] = np.nan
    first = records.drop_duplicates(["rehearsal", "run_id"])
    new = first.groupby(["rehearsal", "chapter"]).agg(new_trials=("trials", "sum"), new_calls=("model_calls", "sum"),
                                                      n_calls=("model_calls", "count"))
    frame = frame.join(new, on=["rehearsal", "chapter"])
    frame["new_trials"] = frame["new_trials"].fillna(0).astype(float)
    frame["new_calls"] = frame["new_calls"].where(frame["n_calls"] > 0).astype(float)
    frame = frame.drop(columns=["n_calls"])
    frame["gpu_hours"] = _gpu_hours(frame, benchmarks)
    gpu = gpu_seconds_per_trial(benchmarks)
    values = {
        "n_chapters": int(len(frame)), "n_ok": int((t["status"] == "ok").sum()),
        "n_failed": int((t["status"] != "ok").sum()),
        "max_peak_mb": float(np.nanmax(frame["peak_mb"])) if frame["peak_mb"].notna().any() else float("nan"),
        "seconds_total": float(frame["seconds"].sum()),
        "failed_chapters": ", ".join(sorted(set(t.loc[t["status"] != "ok", "chapter"]))) or "none",
        "model_calls_total": int(frame["new_calls"].sum()),
        "n_chapters_without_calls": int((frame["model_calls"].isna() & (frame["status"] == _STATUS["ok"])).sum()),
        "n_gpu_benchmarks": int(len(gpu)),
        "gpu_note": (NO_BENCHMARK if not gpu else
                     "projected from the benchmark outputs " + ", ".join(sorted({b["source"] for b in gpu.values()}))),
    }
    if frame["gpu_hours"].notna().any():
        values["gpu_hours_total"] = float(frame["gpu_hours"].sum())
    for key, run in runs.items():
        values[f"{key}.scale"] = float(run.info.spec["scale"])
        values[f"{key}.profile"] = run.info.spec["profile"]
        counts = run.info.counts or {}
        for name, n in json.loads(counts.get("planted_full_scale", "{}")).items():
            values[f"planted.{name}"] = int(n)
    if frame["gpu_hours"].isna().all():
        frame = frame.drop(columns=["gpu_hours"])
    return TableResult(frame.drop(columns=["scale"]), values=values,
                       metrics={"seconds": "wall_seconds", "peak_mb": "memory_mb"},
                       labels={"rehearsal": "rehearsal", "chapter": "chapter", "status": "status",
                               "trials": "trials (rehearsal)", "model_calls": "model requests",
                               "new_trials": "trials of records made first here",
                               "new_calls": "model requests of records made first here",
                               "gpu_hours": "projected GPU-hours (paper's scale)",
                               "stand_ins": "stand-in models", "error": "error"},
                       caption="Each rehearsed chapter: whether it ran to the end, its wall time and peak memory on "
                               "this machine (non-model work plus the stand-ins), its trials and the distinct model "
                               "requests its records made (inference-cache entries; blank where a record keeps no "
                               "request cache), and the part of both in records no earlier chapter made.").with_runs(runs)


def rehearsal_what(runs: dict[str, Run]) -> str:
    """What the rehearsal tables show, for their captions: the synthetic trees (profile and scale of each
    rehearsal) and the CPU stand-ins its chapters ran in place of the papers' models."""
    t = _rows(runs, "chapter")
    stand_ins = sorted({s.strip() for v in t["stand_ins"].dropna() for s in str(v).split(",") if s.strip()})
    trees = ", ".join(f"{run.info.spec['profile']} at scale {float(run.info.spec['scale']):g}" for run in runs.values())
    return (f"data: synthetic trees in the credentialed layouts with planted sizes ({trees}); models: CPU "
            f"stand-ins of the papers' models ({', '.join(stand_ins) or 'none'})")


def rehearsal_records(runs: dict[str, Run]) -> TableResult:
    """One row per record a rehearsed chapter made: its trials beside the paper's denominator for it
    (at the rehearsal's scale), the verdict and the reason."""
    from ..rehearsal.denominators import DIFFERS, EQUAL, NO_COUNT, UNEXPLAINED

    t = _rows(runs, "record")
    for column in ("paper_item", "paper_trials", "paper_trials_scaled", "compared", "compared_trials", "difference",
                   "verdict", "reason", "model_calls"):
        if column not in t:
            t[column] = np.nan
    frame = pd.DataFrame({
        "rehearsal": t["rehearsal"], "chapter": t["chapter"], "record_key": t["record_key"],
        "record_protocol": t["record_protocol"], "trials": t["trials"].astype(float),
        "model_calls": t["model_calls"].astype(float), "compared": t["compared"].fillna("all trials"),
        "compared_trials": t["compared_trials"].astype(float),
        "paper_trials_scaled": t["paper_trials_scaled"].astype(float), "paper_trials": t["paper_trials"].astype(float),
        "paper_item": t["paper_item"].fillna("no rule"), "verdict": t["verdict"].fillna(UNEXPLAINED),
        "difference": t["difference"].astype(float), "reason": t["reason"].fillna(""),
    })
    verdicts = frame["verdict"]
    values = {"n_records": int(len(frame)), "n_equal": int((verdicts == EQUAL).sum()),
              "n_differs": int((verdicts == DIFFERS).sum()), "n_no_count": int((verdicts == NO_COUNT).sum()),
              "n_unexplained": int((verdicts == UNEXPLAINED).sum()),
              "unexplained": ", ".join(f"{c}/{k}" for c, k in frame.loc[verdicts == UNEXPLAINED,
                                                                         ["chapter", "record_key"]].values) or "none"}
    return TableResult(frame, values=values,
                       labels={"rehearsal": "rehearsal", "chapter": "chapter", "record_key": "record",
                               "record_protocol": "protocol", "trials": "trials", "model_calls": "model requests",
                               "compared": "compared", "compared_trials": "trials compared",
                               "paper_trials_scaled": "paper's denominator (at this scale)",
                               "paper_trials": "paper's denominator (full scale)", "paper_item": "where the paper states it",
                               "verdict": "verdict", "difference": "difference", "reason": "reason"},
                       caption="Every record the rehearsal made: its trials (or the cells compared) beside the paper's "
                               "stated denominator for such a record, evaluated at the rehearsal's planted sizes, and "
                               "whether they are equal, differ for the reason given, or have no stated count."
                       ).with_runs(runs)
