"""ShoViR's published Table 1 and Figure 2-3 values, shown on the ShoViR pages beside this run's.

The paper's numbers are a data file of the package (:mod:`shovir_core.papers`, ShoViR Table 1 and the
values §4.2-4.3 state for Figures 2 and 3(a)); these tables show them as the paper prints them, one
row per model and dataset, so a reader sees the paper's Table 1 on the page that rebuilds it. Each
metric column names its implementation here and in the paper (:func:`metric_columns`): the rule
labeller behind F1_14 / F1_5 here, CheXbert in the paper; F1-RadGraph and GREEN read "unavailable"
where this build did not run them.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from .result import TableResult

__all__ = ["LABELLERS", "metric_columns", "published_table1", "published_figures"]

LABELLERS = {"rules": "rule labeller", "chexbert": "CheXbert"}
"""The report labellers the ShoViR protocol takes (spec ``labeller``), by display name."""

_T1_METRICS = ("F1_14", "F1_5", "F1_RG", "GREEN", "BLEU_1", "BLEU_4", "ROUGE_L")
_PAPER_IMPL = {"F1_14": "CheXbert", "F1_5": "CheXbert", "F1_RG": "RadGraph", "GREEN": "GREEN (LLM judge)",
               "BLEU_1": "BLEU", "BLEU_4": "BLEU", "ROUGE_L": "ROUGE-L"}
_RUN_IMPL = {"F1_RG": "radgraph", "GREEN": "green_score", "BLEU_1": "sacrebleu", "BLEU_4": "sacrebleu",
             "ROUGE_L": "rouge-score"}
_SCHEMA = {"F1_14": "f1_14_micro", "F1_5": "f1_5_micro", "F1_RG": "f1_radgraph", "GREEN": "green",
           "BLEU_1": "bleu1", "BLEU_4": "bleu4", "ROUGE_L": "rouge_l"}
_ARMS = {"baseline": "Baseline", "full_noise": "Full Noise", "delta_fn": "Δ_FN"}
_DISPLAY = {"F1_14": "F1-14", "F1_5": "F1-5", "F1_RG": "F1-RadGraph", "GREEN": "GREEN", "BLEU_1": "BLEU-1",
            "BLEU_4": "BLEU-4", "ROUGE_L": "ROUGE-L"}


def metric_columns(labeller: str = "rules", unavailable: Mapping[str, str] | None = None) -> dict[str, str]:
    """Schema metric -> column header naming the implementation here and in the paper.

    >>> metric_columns("rules", {"green": "no local weights"})["f1_14_micro"]
    'F1-14 (rule labeller; paper: CheXbert)'
    >>> metric_columns("rules", {"green": "no local weights"})["green"]
    'GREEN (unavailable here; paper: GREEN (LLM judge))'
    """
    unavailable = dict(unavailable or {})
    out = {}
    for paper_name, schema in _SCHEMA.items():
        here = LABELLERS.get(labeller, labeller) if paper_name in ("F1_14", "F1_5") else _RUN_IMPL[paper_name]
        if schema in unavailable:
            here = "unavailable here"
        paper = _PAPER_IMPL[paper_name]
        shown = _DISPLAY[paper_name]
        out[schema] = f"{shown} ({here}; paper: {paper})" if here != paper else f"{shown} ({paper})"
    return out


def published_table1() -> TableResult:
    """ShoViR Table 1 as the paper prints it: one row per dataset and model, a column per arm and metric
    (Baseline, Full Noise, Δ_FN for F1_14 and F1_5), the paper's implementations in the headers."""
    from ..papers import published

    pub = published("shovir", table="1")
    pub = pub.assign(column=pub["arm"].map(_ARMS) + " " + pub["metric"])
    frame = pub.pivot_table(index=["dataset", "model"], columns="column", values="value", sort=False)
    order = [f"{_ARMS[a]} {m}" for a in ("baseline", "full_noise") for m in _T1_METRICS] \
        + [f"Δ_FN {m}" for m in ("F1_14", "F1_5")]
    frame = frame[[c for c in order if c in frame.columns]].reset_index()
    frame["dataset"] = frame["dataset"].map({"MIMIC": "MIMIC-CXR", "PadChest": "PadChest-GR"}).fillna(frame["dataset"])
    labels = {c: c.replace("F1_14", "F1-14").replace("F1_5", "F1-5").replace("F1_RG", "F1-RG")
              .replace("BLEU_1", "BLEU-1").replace("BLEU_4", "BLEU-4").replace("ROUGE_L", "ROUGE-L")
              for c in frame.columns}
    caption = ("ShoViR Table 1 as published: Baseline and Full Noise Image per model, with Δ_FN; F1-14 and F1-5 "
               "from CheXbert labels, F1-RG from RadGraph, GREEN from its LLM judge (the paper's implementations).")
    return TableResult(frame=frame, values={"n_rows": int(len(frame))}, labels=labels, caption=caption)


def published_figures() -> TableResult:
    """The values ShoViR's text states for Figure 2 (μ-F1 at p) and Figure 3(a) (flip rate, Δ) as one
    table: figure, dataset, model, condition, quantity, value."""
    from ..papers import published

    pub = published("shovir")
    pub = pub[pub["figure"].isin(["2", "3a"])] if "figure" in pub.columns else pub.iloc[:0]
    quantity = {"mu_F1": "μ-F1", "FR": "flip rate", "delta_F1": "Δ μ-F1 (RO − condition)"}
    frame = pd.DataFrame({
        "figure": pub["figure"].map({"2": "Figure 2", "3a": "Figure 3(a)"}),
        "dataset": pub["dataset"].map({"MIMIC": "MIMIC-CXR", "PadChest": "PadChest-GR"}).fillna(pub["dataset"]),
        "model": pub["model"], "condition": pub["condition"],
        "quantity": [quantity.get(m, m) + (f" at p = {float(p) / 100:.1f}" if pd.notna(p) else "")
                     for m, p in zip(pub["metric"], pub["p"])],
        "paper value": pub["value"], "where": pub["location"]}).reset_index(drop=True)
    caption = ("The values ShoViR's text states for Figures 2 and 3(a), as published (the paper's models on "
               "MIMIC-CXR and PadChest-GR, labels from CheXbert).")
    return TableResult(frame=frame, values={"n_values": int(len(frame))}, caption=caption)
