"""The Labeller chapter's tables, from a ``labeller-validation`` record (one row per IU X-ray report).

Scores come from :mod:`shovir_core.tables.labeller_scores` (per-class counts against the MeSH
reference, micro-F1, the bootstrapped difference of two labellers); every function returns a
:class:`~shovir_core.tables.result.TableResult` whose ``values`` are glue keys without the ``lv.``
namespace.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .labeller_scores import label_frames, micro_f1, micro_f1_difference, score_labels, split_rows
from ..metrics.classification import prf_from_counts
from .result import TableResult, frame_of, run_ids_of

__all__ = ["validation_scores", "reference_positives", "side_by_side", "micro_f1_overview", "labeller_difference"]

_SCORE_COLUMNS = ["split", "labeller", "uncertain", "class", "tp", "fp", "fn", "tn", "support", "n",
                  "precision", "recall", "f1"]
_SCORE_METRICS = {**{c: "count" for c in ("tp", "fp", "fn", "tn", "support", "n")},
                  "precision": "precision", "recall": "recall", "f1": "f1_class"}


def _class_key(name: str) -> str:
    return name.lower().replace(" ", "_")


def validation_scores(trials: pd.DataFrame, *, labellers: Sequence[str], splits: Sequence[str] = ("dev", "test", "all"),
                      uncertain: Sequence[str] = ("negative", "positive")) -> TableResult:
    """Long table of per-class and micro scores from a ``labeller-validation`` record.

    Frame columns ``split labeller uncertain class tp fp fn tn support n precision recall f1``;
    ``class == "micro"`` rows pool the counts over classes. ``values``:
    ``<split>.<labeller>.u_<policy>.micro_f1``; per class under the ``negative`` policy
    ``<split>.<labeller>.<class>.{precision,recall,f1}``; ``n_reports.<split>`` (and ``.all``),
    ``n_classes``, and ``dev_minus_test.<labeller>.micro_f1`` (negative policy).
    """
    rows = []
    for split in splits:
        sub = split_rows(trials, split)
        for lab in labellers:
            pred, ref = label_frames(sub, lab)
            for u in uncertain:
                t = score_labels(pred, ref, uncertain=u)
                micro = t[["tp", "fp", "fn", "tn", "support", "n"]].sum().to_frame("micro").T
                p, r, _ = prf_from_counts(micro.tp, micro.fp, micro.fn, zero_division=np.nan)
                micro = micro.assign(precision=p, recall=r, f1=micro_f1(t))
                both = pd.concat([t, micro]).rename_axis("class").reset_index()
                rows.append(both.assign(split=split, labeller=lab, uncertain=u))
    frame = pd.concat(rows, ignore_index=True)[_SCORE_COLUMNS]
    values = {}
    for r in frame[frame["class"] == "micro"].to_dict("records"):
        values[f"{r['split']}.{r['labeller']}.u_{r['uncertain']}.micro_f1"] = float(r["f1"])
    for r in frame[(frame["class"] != "micro") & (frame["uncertain"] == "negative")].to_dict("records"):
        for metric in ("precision", "recall", "f1"):
            values[f"{r['split']}.{r['labeller']}.{_class_key(r['class'])}.{metric}"] = float(r[metric])
    n_reports = trials.groupby("split").size()
    values.update({f"n_reports.{split}": int(n) for split, n in n_reports.items()})
    values["n_reports.all"] = int(n_reports.sum())
    values["n_classes"] = int(frame.loc[frame["class"] != "micro", "class"].nunique())
    for lab in labellers:
        dev, test = (f"{s}.{lab}.u_negative.micro_f1" for s in ("dev", "test"))
        if dev in values and test in values:
            values[f"dev_minus_test.{lab}.micro_f1"] = values[dev] - values[test]
    labels = {"tp": "TP", "fp": "FP", "fn": "FN", "tn": "TN", "support": "reference positives", "n": "reports scored"}
    return TableResult(frame, values, metrics=dict(_SCORE_METRICS), labels=labels,
                       index=("split", "labeller", "uncertain", "class"),
                       caption="Per-class and micro scores of each labeller against the MeSH reference.")


def reference_positives(scores, *, labeller: str | None = None, uncertain: str = "negative") -> TableResult:
    """Reference positives per class (rows, plus ``micro`` = all classes) and split (columns).

    ``scores``: :func:`validation_scores`; the counts are the same for every labeller and policy
    (``labeller`` defaults to the first).
    """
    s = frame_of(scores)
    lab = labeller or s["labeller"].iloc[0]
    sub = s[(s["labeller"] == lab) & (s["uncertain"] == uncertain)]
    wide = sub.pivot(index="class", columns="split", values="support").astype(int)
    order = [c for c in dict.fromkeys(sub["class"]) if c != "micro"] + ["micro"]
    wide = wide.loc[order, [c for c in dict.fromkeys(sub["split"])]]
    wide.columns.name = None
    return TableResult(wide, metrics={c: "count" for c in wide.columns}, labels={c: c for c in wide.columns},
                       run_ids=run_ids_of(scores),
                       caption="Reference (MeSH) positives per class and split.")


def side_by_side(scores, *, split: str = "test", uncertain: str = "negative") -> TableResult:
    """Wide table: rows classes (+ ``micro``), columns (labeller, precision / recall / F1), plus support."""
    s = frame_of(scores)
    sub = s[(s["split"] == split) & (s["uncertain"] == uncertain)]
    if sub.empty:
        raise ValueError(f"no scores for split {split!r} with uncertain={uncertain!r}")
    wide = sub.pivot(index="class", columns="labeller", values=["precision", "recall", "f1"])
    wide = wide.swaplevel(0, 1, axis=1).sort_index(axis=1, level=0, sort_remaining=False)
    order = [c for c in dict.fromkeys(sub["class"]) if c != "micro"] + ["micro"]
    support = sub.drop_duplicates("class").set_index("class")["support"]
    wide = wide.loc[order]
    wide.insert(0, ("reference", "positives"), support.loc[order].astype(int))
    wide.columns.names = [None, None]
    metrics = {col: ("count" if col[0] == "reference" else {"f1": "f1_class"}.get(col[1], col[1]))
               for col in wide.columns}
    return TableResult(wide, metrics=metrics, labels={"positives": "positives"}, run_ids=run_ids_of(scores),
                       caption=f"Precision, recall and F1 per class on the {split} reports "
                               f"(uncertain labeller codes as {uncertain}); the last row pools the counts.")


def micro_f1_overview(scores, *, splits: Sequence[str] = ("dev", "test", "all")) -> TableResult:
    """Micro-F1 per split (rows) for each (labeller, uncertain policy) (columns)."""
    s = frame_of(scores)
    micro = s[s["class"] == "micro"].set_index(["split", "labeller", "uncertain"])["f1"]
    wide = micro.unstack(["labeller", "uncertain"]).loc[list(splits)]
    return TableResult(wide, metrics={col: "f1_micro" for col in wide.columns},
                       labels={"negative": "uncertain → negative", "positive": "uncertain → positive"},
                       run_ids=run_ids_of(scores), caption="Micro-F1 of each labeller by split and uncertainty policy.")


def labeller_difference(trials: pd.DataFrame, *, a: str, b: str, split: str = "test", uncertain: str = "negative",
                        n_draws: int = 10_000, rng: np.random.Generator) -> TableResult:
    """Micro-F1 of labeller ``a`` minus ``b`` on ``split`` with its report-level bootstrap interval.

    One row (:func:`shovir_core.tables.labeller_scores.micro_f1_difference`). ``values``:
    ``<split>.<a>_minus_<b>.{diff,lo,hi}`` and ``bootstrap.n_draws``.
    """
    d = micro_f1_difference(trials, a=a, b=b, split=split, uncertain=uncertain, n_draws=n_draws, rng=rng)
    frame = pd.DataFrame([d])
    stem = f"{split}.{a}_minus_{b}"
    values = {f"{stem}.diff": float(d["diff"]), f"{stem}.lo": float(d["lo"]), f"{stem}.hi": float(d["hi"]),
              "bootstrap.n_draws": int(d["n_draws"])}
    return TableResult(frame, values,
                       metrics={"diff": "f1_difference", "lo": "f1_difference", "hi": "f1_difference",
                                "f1_a": "f1_micro", "f1_b": "f1_micro", "n_reports": "count", "n_draws": "count"},
                       labels={"diff": f"micro-F1 {a} − {b}", "lo": "95% lo", "hi": "95% hi", "f1_a": f"micro-F1 {a}",
                               "f1_b": f"micro-F1 {b}", "n_reports": "reports", "n_draws": "bootstrap draws"},
                       caption=f"Micro-F1 of {a} minus {b} on the {split} reports, report-level percentile bootstrap.")
