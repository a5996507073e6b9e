"""Metrics of both papers; names, directions and formats live in ``resources/metrics.yaml``.

* :mod:`.text` — BLEU-1/4 (sacrebleu), ROUGE-L (rouge-score);
* :mod:`.classification` — per-class F1, F1_14 / F1_5 (micro, macro), μ-F1;
* :mod:`.shovir` — Δ_FN, Δ_X, flip rate FR^c_X (per item and as functions of counts);
* :mod:`.sensitivity` — the authors' attack-sensitivity score S_AUC and its RO-corrected Δ;
* :mod:`.target_class` — per-target-class CheXbert F1 with the authors' bootstrap (500 resamples, seed 3);
* :mod:`.modalens` — flip rates, margins, accuracies, κ, transitions, interaction;
* :mod:`.arms` — ModaLens arms: answers under a readout, arms paired on common trials, flip rates with
  patient-clustered intervals, paired differences and interactions;
* :mod:`.external` — RadGraph F1, GREEN, BERTScore when local weights are present;
* :mod:`.report` — all report-generation metrics of ShoViR Table 1 in one call;
* :mod:`.schema` — the metric schema loader.
"""
from .classification import (CLASS_SETS, binarize, confusion_by_class, f1_chexbert, f1_from_counts, f1_score, mu_f1,
                             per_class_f1, prf_from_counts, report_label_f1, weighted_mean)
from .external import (EXTERNAL_METRICS, ExternalMetric, MetricResult, compute_external,
                       external_availability, register_external_metric)
from .modalens import (MODALITY_CELLS, accuracy, aurc, auroc, balanced_accuracy, balanced_accuracy_from_counts,
                       cohen_kappa, confusion, flip_rate, flips, interaction_from_cells, majority_baseline, margin,
                       margin_change_stats, modality_interaction, paired_difference, precision, rate_from_counts,
                       ratio, response_bias_floor, sensitivity, share_larger_without_report, margin_change_comparison, specificity,
                       target_aligned_change, transitions)
from .report import ReportScores, report_metrics
from .schema import MetricSpec, display_frame, format_metric, metric_schema, metric_spec
from .shovir import (delta_fn, delta_x, flip_indicators, flip_rate_by_class, flip_rate_from_counts, mu_f1_from_counts,
                     pooled_flip_rate, shortcut_counts, shortcut_from_counts, shortcut_scores)
from .attack_sensitivity import s_auc, sensitivity_deltas, sensitivity_scores
from .target_class import PythonChoiceStream, binarize_chexbert, target_class_f1
from .text import bleu, bleu_parts, nlg_metrics, rouge_l

__all__ = [
    "bleu", "bleu_parts", "rouge_l", "nlg_metrics",
    "CLASS_SETS", "binarize", "confusion_by_class", "per_class_f1", "f1_score", "f1_chexbert",
    "report_label_f1", "mu_f1", "f1_from_counts", "prf_from_counts", "weighted_mean",
    "delta_fn", "delta_x", "flip_indicators", "flip_rate_from_counts", "mu_f1_from_counts", "shortcut_counts",
    "shortcut_from_counts", "shortcut_scores", "flip_rate_by_class", "pooled_flip_rate",
    "s_auc", "sensitivity_scores", "sensitivity_deltas", "PythonChoiceStream", "binarize_chexbert", "target_class_f1",
    "flips", "flip_rate", "rate_from_counts", "balanced_accuracy_from_counts", "paired_difference", "ratio", "margin", "margin_change_stats",
    "share_larger_without_report", "margin_change_comparison", "target_aligned_change", "confusion", "accuracy", "sensitivity",
    "specificity", "precision", "balanced_accuracy", "majority_baseline", "cohen_kappa",
    "response_bias_floor", "transitions", "modality_interaction", "interaction_from_cells",
    "MODALITY_CELLS", "auroc", "aurc",
    "MetricResult", "ExternalMetric", "EXTERNAL_METRICS", "register_external_metric",
    "compute_external", "external_availability",
    "report_metrics", "ReportScores",
    "MetricSpec", "metric_schema", "metric_spec", "format_metric", "display_frame",
]
