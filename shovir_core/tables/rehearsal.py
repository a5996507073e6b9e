"""The rehearsal page: each rehearsed chapter's status, cost and trials beside the papers' counts.

Built from ``rehearsal`` records (:mod:`shovir_core.protocols.rehearsal`). A chapter's trials are the
sum over the records it made; the papers' stated trial counts are the reproduction catalogue's items
of that chapter (``shovir_core/resources/reproduction.yaml``, evaluated over the published values).
A difference is named, never hidden: at a reduced scale every count is smaller by design, and where a
chapter's records count trials differently from the catalogue item (one row per image and condition
vs per model) the note says which.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..records import Run
from .result import TableResult

__all__ = ["rehearsal_chapters", "rehearsal_records"]

_STATUS = {"ok": "ran to the end", "failed": "failed"}


def rehearsal_chapters(runs: dict[str, Run]) -> TableResult:
    """One row per (rehearsal, chapter, paper item): status, wall time, peak memory, trials vs paper."""
    frames = []
    for key, run in runs.items():
        t = run.trials
        t = t[t["kind"] == "chapter"].copy()
        t.insert(0, "rehearsal", key)
        t["scale"] = float(run.info.spec["scale"])
        frames.append(t)
    t = pd.concat(frames, ignore_index=True)
    expected = t["paper_trials"].astype(float) * t["scale"]
    frame = pd.DataFrame({
        "rehearsal": t["rehearsal"], "chapter": t["chapter"], "status": t["status"].map(_STATUS).fillna(t["status"]),
        "seconds": t["seconds"].astype(float), "peak_mb": t["peak_mb"].astype(float),
        "trials": t["trials"].astype(float), "paper_item": t["paper_item"].fillna("no stated count"),
        "paper_trials": t["paper_trials"].astype(float),
        "ratio_to_scaled_paper": t["trials"].astype(float) / expected.where(expected > 0),
        "stand_ins": t["stand_ins"], "error": t["error"].fillna(""),
    })
    chapters = t.drop_duplicates(["rehearsal", "chapter"])
    values = {
        "n_chapters": int(len(chapters)), "n_ok": int((chapters["status"] == "ok").sum()),
        "n_failed": int((chapters["status"] != "ok").sum()),
        "max_peak_mb": float(np.nanmax(chapters["peak_mb"].astype(float))) if chapters["peak_mb"].notna().any() else
        float("nan"),
        "seconds_total": float(chapters["seconds"].astype(float).sum()),
        "failed_chapters": ", ".join(sorted(set(chapters.loc[chapters["status"] != "ok", "chapter"]))) or "none",
    }
    for key, run in runs.items():
        values[f"{key}.scale"] = float(run.info.spec["scale"])
        values[f"{key}.profile"] = run.info.spec["profile"]
        counts = run.info.counts or {}
        for name, n in json.loads(counts.get("planted_full_scale", "{}")).items():
            values[f"planted.{name}"] = int(n)
    return TableResult(frame, values=values, metrics={"seconds": "wall_seconds", "peak_mb": "memory_mb"},
                       labels={"rehearsal": "rehearsal", "chapter": "chapter", "status": "status",
                               "trials": "trials (rehearsal)", "paper_item": "paper item",
                               "paper_trials": "trials (paper)", "ratio_to_scaled_paper": "rehearsal / (paper × scale)",
                               "stand_ins": "stand-in models", "error": "error"},
                       caption="Each rehearsed chapter: whether it ran to the end, its wall time and peak memory on "
                               "this machine (non-model work plus the stand-ins), and its trials beside the paper's "
                               "stated count for the same item.").with_runs(runs)


def rehearsal_records(runs: dict[str, Run]) -> TableResult:
    """One row per record a rehearsed chapter made: protocol, run id, status, trials."""
    frames = []
    for key, run in runs.items():
        t = run.trials
        t = t[t["kind"] == "record"].copy()
        t.insert(0, "rehearsal", key)
        frames.append(t)
    t = pd.concat(frames, ignore_index=True)
    frame = t[["rehearsal", "chapter", "record_key", "record_protocol", "record_status", "trials"]].copy()
    frame["trials"] = frame["trials"].astype(float)
    return TableResult(frame, values={"n_records": int(len(frame))},
                       labels={"rehearsal": "rehearsal", "chapter": "chapter", "record_key": "record",
                               "record_protocol": "protocol", "record_status": "status", "trials": "trials"},
                       caption="Every record the rehearsal made, with its trial count (the rehearsal's own runs "
                               "root; stand-in models on synthetic data).").with_runs(runs)
