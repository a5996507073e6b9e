"""All report-generation metrics of ShoViR Table 1 in one call.

``report_metrics`` scores generated reports against references: BLEU-1/4 and
ROUGE-L on the text, F1_14 / F1_5 (micro and macro) on CheXpert labels, and the
model-based metrics (RadGraph F1, GREEN) when their weights are local —
otherwise reported unavailable with the reason.

Reference labels (the ``reference`` option):

``"report"`` (default)
    the reference reports are labelled by the same labeller as the generated
    ones — the F1-CheXbert convention of report-generation papers;
``"dataset"``
    the dataset's own labels (``reference_labels``, CheXpert codes), e.g. the
    MIMIC-CXR CheXpert labels of each study.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pandas as pd

from .classification import per_class_f1, report_label_f1
from .external import MetricResult, compute_external
from .text import nlg_metrics

__all__ = ["report_metrics", "ReportScores"]


class ReportScores(dict):
    """Metric name -> value (float), plus ``per_class`` (DataFrame), ``labels`` and ``unavailable``.

    ``unavailable`` maps each model-based metric that could not run to its reason.
    """


def report_metrics(hypotheses: Sequence[str], references: Sequence[str] | None = None, *,
                   reference: Literal["report", "dataset"] = "report",
                   reference_labels: pd.DataFrame | None = None, labeller: str = "rules",
                   uncertain: Literal["negative", "positive", "excluded"] = "negative",
                   external: Sequence[str] = ("f1_radgraph", "green")) -> ReportScores:
    """Score generated reports.

    Parameters
    ----------
    hypotheses : sequence of str
        Generated reports.
    references : sequence of str, optional
        Reference reports, paired by position; needed for BLEU / ROUGE / model-based
        metrics and for ``reference="report"``.
    reference : {"report", "dataset"}
        Where the reference labels come from (see the module docstring).
    reference_labels : DataFrame, optional
        CheXpert codes per hypothesis (rows paired by position), for ``reference="dataset"``.
    labeller : str
        Labeller registry name for the generated (and reference) reports.
    uncertain : {"negative", "positive", "excluded"}
        Handling of uncertain codes in F1.
    external : sequence of str
        Model-based metrics to attempt.

    Returns
    -------
    ReportScores
    """
    from ..labeling import label_reports

    hyps = list(hypotheses)
    refs = None if references is None else list(references)
    if refs is not None and len(refs) != len(hyps):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    pred = label_reports(hyps, labeller=labeller)
    if reference == "report":
        if refs is None:
            raise ValueError("reference='report' needs the reference reports")
        ref = label_reports(refs, labeller=labeller)
    elif reference == "dataset":
        if reference_labels is None:
            raise ValueError("reference='dataset' needs reference_labels (CheXpert codes per hypothesis)")
        if len(reference_labels) != len(hyps):
            raise ValueError(f"{len(hyps)} hypotheses but {len(reference_labels)} rows of reference labels")
        ref = reference_labels.reset_index(drop=True)
    else:
        raise ValueError(f"reference must be 'report' or 'dataset', got {reference!r}")
    out = ReportScores()
    if refs is not None:
        out.update(nlg_metrics(hyps, refs))
    out.update(report_label_f1(pred, ref, uncertain=uncertain))
    out["per_class"] = per_class_f1(pred, ref, uncertain=uncertain)
    out["labels"] = {"hypothesis": pred, "reference": ref}
    out["unavailable"] = {}
    for name in external:
        res: MetricResult = (compute_external(name, hyps, refs) if refs is not None
                             else MetricResult(name=name, available=False, reason="no reference reports"))
        if res.available:
            out[name] = res.value
        else:
            out["unavailable"][name] = res.reason
    return out
