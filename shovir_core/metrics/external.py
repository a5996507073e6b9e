"""Model-based report metrics (RadGraph F1, GREEN, BERTScore) behind one plug-in interface.

These metrics need a model's weights. The project never downloads them: a metric
runs only when its Python package is installed and its weights are on local disk
(``weights=`` or the environment variable named in :data:`EXTERNAL_METRICS`).
Otherwise :func:`compute_external` returns a :class:`MetricResult` with
``available=False`` and the reason — never a silent zero, and the book prints
"unavailable (<reason>)" in the table cell.

A new metric is plugged in with :func:`register_external_metric`; the adapter
receives the hypotheses, the references and the local weights path, and returns
``(corpus_value, per_sample_values)``. The three built-in adapters follow the
packages' documented calls; they cannot be exercised in this repository's tests
(no weights are shipped), which check the unavailable path and the plug-in path.
"""
from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["MetricResult", "ExternalMetric", "EXTERNAL_METRICS", "register_external_metric",
           "compute_external", "external_availability"]

Adapter = Callable[[list[str], list[str], Path], tuple[float, "np.ndarray | None"]]


@dataclass(frozen=True)
class MetricResult:
    """Outcome of a model-based metric: a value, or the reason there is none.

    ``value`` is ``None`` (never 0) when ``available`` is False.
    """

    name: str
    available: bool
    value: float | None = None
    reason: str = ""
    per_sample: np.ndarray | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        """JSON-friendly summary (``per_sample`` omitted)."""
        return {"name": self.name, "available": self.available, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class ExternalMetric:
    """Registry entry: the package the adapter imports, where its weights come from, the adapter."""

    name: str
    package: str
    weights_env: str
    adapter: Adapter
    citation: str = ""


def _bertscore(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    from bert_score import BERTScorer  # optional dependency

    num_layers = int(os.environ.get("SHOVIR_BERTSCORE_LAYERS", "9"))
    scorer = BERTScorer(model_type=str(weights), num_layers=num_layers, lang="en")
    _, _, f = scorer.score(hyps, refs)
    f = np.asarray(f.tolist(), dtype=float)
    return float(f.mean()), f


def _radgraph(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    from radgraph import F1RadGraph  # optional dependency

    metric = F1RadGraph(reward_level="partial", model_type="radgraph",
                        model_cache_dir=str(weights), tokenizer_cache_dir=str(weights))
    mean, per_sample, *_ = metric(hyps=hyps, refs=refs)
    return float(mean), np.asarray(per_sample, dtype=float)


def _green(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    from green_score import GREEN  # optional dependency

    with tempfile.TemporaryDirectory() as out:
        scorer = GREEN(str(weights), output_dir=out)
        mean, _std, scores, *_ = scorer(refs, hyps)
    return float(mean), np.asarray(scores, dtype=float)


EXTERNAL_METRICS: dict[str, ExternalMetric] = {
    "bertscore": ExternalMetric("bertscore", "bert_score", "SHOVIR_BERTSCORE_WEIGHTS", _bertscore,
                                "Zhang T. et al., BERTScore, ICLR 2020"),
    "f1_radgraph": ExternalMetric("f1_radgraph", "radgraph", "SHOVIR_RADGRAPH_WEIGHTS", _radgraph,
                                  "Jain S. et al., RadGraph, NeurIPS Datasets 2021; Delbrouck J.-B. et al., 2022"),
    "green": ExternalMetric("green", "green_score", "SHOVIR_GREEN_WEIGHTS", _green,
                            "Ostmeier S. et al., GREEN, Findings of EMNLP 2024"),
}
"""Model-based metrics by schema name."""


def register_external_metric(name: str, *, package: str, weights_env: str, adapter: Adapter,
                             citation: str = "", replace: bool = False) -> ExternalMetric:
    """Add (or with ``replace=True`` override) a model-based metric adapter."""
    if name in EXTERNAL_METRICS and not replace:
        raise ValueError(f"external metric {name!r} is already registered (pass replace=True)")
    entry = ExternalMetric(name, package, weights_env, adapter, citation)
    EXTERNAL_METRICS[name] = entry
    return entry


def _entry(name: str) -> ExternalMetric:
    try:
        return EXTERNAL_METRICS[name]
    except KeyError:
        raise KeyError(f"unknown external metric {name!r}; registered: {sorted(EXTERNAL_METRICS)}") from None


def external_availability(name: str, *, weights: str | os.PathLike | None = None) -> tuple[bool, str, Path | None]:
    """Whether metric ``name`` can run here: ``(available, reason, weights_path)``."""
    entry = _entry(name)
    if importlib.util.find_spec(entry.package) is None:
        return False, f"python package {entry.package!r} is not installed", None
    location = weights if weights is not None else os.environ.get(entry.weights_env)
    if not location:
        return False, f"no local weights: pass weights= or set {entry.weights_env}", None
    path = Path(location).expanduser()
    if not path.exists():
        return False, f"weights path {str(path)!r} does not exist", None
    return True, "", path


def compute_external(name: str, hypotheses: Sequence[str], references: Sequence[str], *,
                     weights: str | os.PathLike | None = None) -> MetricResult:
    """Run model-based metric ``name`` if its package and local weights are present.

    Returns ``MetricResult(available=False, reason=...)`` when they are not;
    errors raised by an available metric propagate.
    """
    hyps, refs = list(hypotheses), list(references)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    ok, reason, path = external_availability(name, weights=weights)
    if not ok:
        return MetricResult(name=name, available=False, reason=reason)
    value, per_sample = _entry(name).adapter(hyps, refs, path)
    return MetricResult(name=name, available=True, value=float(value), per_sample=per_sample)
