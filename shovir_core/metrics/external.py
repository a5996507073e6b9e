"""Model-based report metrics (RadGraph F1, GREEN, BERTScore) behind one plug-in interface.

These metrics need a model's weights. The project never downloads them: a metric
runs only when its Python package is installed and its weights are on local disk
(``weights=`` or the environment variable named in :data:`EXTERNAL_METRICS`).
Otherwise :func:`compute_external` returns a :class:`MetricResult` with
``available=False`` and the reason — never a silent zero, and the book prints
"unavailable (<reason>)" in the table cell.

The built-in adapters call the maintained packages the ShoViR authors use
(``evaluations/run_eval.py`` @07a7a6d):

``f1_radgraph``  ``radgraph.F1RadGraph(reward_level="partial", model_type="radgraph")`` (the ``radgraph``
                 package, ``pip install radgraph``); ``$SHOVIR_RADGRAPH_WEIGHTS`` is its model cache
                 folder holding ``radgraph/`` (``config.json``, ``vocabulary/``, ``weights.th``: the
                 extracted ``radgraph.tar.gz`` of ``StanfordAIMI/RRG_scorers``), or that ``radgraph/``
                 folder itself; its BERT tokenizer (named in ``config.json``) must be in the local
                 Hugging Face cache. Per sample: the partial-reward F1 (0 for an empty report).
``green``        ``GREEN(model_name=<local folder>, output_dir=...)`` from the ``green_score`` package
                 (the GREEN repository) or ``radeval.metrics.green_score`` (RadEval, which vendors it);
                 ``$SHOVIR_GREEN_WEIGHTS`` is a local copy of ``StanfordAIMI/GREEN-radllama2-7b``.
                 Per sample: the GREEN score.
``bertscore``    ``bert_score.BERTScorer`` with a local model folder.

Every result carries a **version**: the metric, its package and version, its settings and a
fingerprint of the weights folder (file names and sizes, JSON configs' bytes); per-sample scores
are cached under it (:mod:`.store`), so a record's scores are computed once. A new metric is
plugged in with :func:`register_external_metric`; the adapter receives the hypotheses, the
references and the local weights path, and returns ``(corpus_value, per_sample_values)``.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["MetricResult", "ExternalMetric", "EXTERNAL_METRICS", "register_external_metric",
           "compute_external", "external_availability", "metric_version", "weights_fingerprint"]

Adapter = Callable[[list[str], list[str], Path], tuple[float, "np.ndarray | None"]]


@dataclass(frozen=True)
class MetricResult:
    """Outcome of a model-based metric: a value, or the reason there is none.

    ``value`` is ``None`` (never 0) when ``available`` is False. ``version`` identifies the metric
    that produced the values (:func:`metric_version`), ``source`` says whether they were
    ``"computed"``, read from a record's ``"cache"``, or both.
    """

    name: str
    available: bool
    value: float | None = None
    reason: str = ""
    per_sample: np.ndarray | None = field(default=None, repr=False)
    version: str | None = None
    source: str = ""

    def as_dict(self) -> dict:
        """JSON-friendly summary (``per_sample`` omitted)."""
        return {"name": self.name, "available": self.available, "value": self.value, "reason": self.reason,
                "version": self.version, "source": self.source}


@dataclass(frozen=True)
class ExternalMetric:
    """Registry entry: the package(s) the adapter imports, where its weights come from, the adapter.

    ``package`` may name alternatives separated by ``|`` (the first importable one is used);
    ``settings`` are the adapter's fixed options, part of the metric version.
    """

    name: str
    package: str
    weights_env: str
    adapter: Adapter
    citation: str = ""
    settings: dict = field(default_factory=dict)
    needs: str = ""

    def packages(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.package.split("|"))


def _first_importable(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:  # a dotted name whose parent is absent
            continue
    return None


def _bertscore(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    from bert_score import BERTScorer  # optional dependency

    num_layers = int(os.environ.get("SHOVIR_BERTSCORE_LAYERS", "9"))
    scorer = BERTScorer(model_type=str(weights), num_layers=num_layers, lang="en")
    _, _, f = scorer.score(hyps, refs)
    f = np.asarray(f.tolist(), dtype=float)
    return float(f.mean()), f


def radgraph_cache_dir(weights: Path) -> Path:
    """The ``model_cache_dir`` the ``radgraph`` package expects (it reads ``<dir>/radgraph/``)."""
    weights = Path(weights)
    if (weights / "radgraph" / "config.json").is_file():
        return weights
    if weights.name == "radgraph" and (weights / "config.json").is_file():
        return weights.parent
    raise FileNotFoundError(f"{weights} is not a RadGraph model folder: expected {weights / 'radgraph' / 'config.json'} "
                            "(the extracted radgraph.tar.gz of StanfordAIMI/RRG_scorers)")


def _radgraph(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    from radgraph import F1RadGraph  # optional dependency

    settings = EXTERNAL_METRICS["f1_radgraph"].settings
    metric = F1RadGraph(reward_level=settings["reward_level"], model_type=settings["model_type"],
                        model_cache_dir=str(radgraph_cache_dir(weights)))
    mean, per_sample, *_ = metric(hyps=hyps, refs=refs)
    return float(mean), np.asarray(per_sample, dtype=float)


def _green(hyps: list[str], refs: list[str], weights: Path) -> tuple[float, np.ndarray]:
    module = _first_importable(EXTERNAL_METRICS["green"].packages())
    GREEN = importlib.import_module(module).GREEN  # noqa: N806 - the package's class name
    with tempfile.TemporaryDirectory() as out:
        scorer = GREEN(str(weights), output_dir=out)
        mean, _std, scores, *_ = scorer(refs, hyps)
    return float(mean), np.asarray(scores, dtype=float)


EXTERNAL_METRICS: dict[str, ExternalMetric] = {
    "bertscore": ExternalMetric("bertscore", "bert_score", "SHOVIR_BERTSCORE_WEIGHTS", _bertscore,
                                "Zhang T. et al., BERTScore, ICLR 2020"),
    "f1_radgraph": ExternalMetric("f1_radgraph", "radgraph", "SHOVIR_RADGRAPH_WEIGHTS", _radgraph,
                                  "Jain S. et al., RadGraph, NeurIPS Datasets 2021; Delbrouck J.-B. et al., 2022",
                                  settings={"reward_level": "partial", "model_type": "radgraph"},
                                  needs="its BERT tokenizer in the local Hugging Face cache"),
    "green": ExternalMetric("green", "green_score|radeval.metrics.green_score", "SHOVIR_GREEN_WEIGHTS", _green,
                            "Ostmeier S. et al., GREEN, Findings of EMNLP 2024",
                            settings={"model": "StanfordAIMI/GREEN-radllama2-7b"}),
}
"""Model-based metrics by schema name."""


def register_external_metric(name: str, *, package: str, weights_env: str, adapter: Adapter,
                             citation: str = "", replace: bool = False, settings: dict | None = None) -> ExternalMetric:
    """Add (or with ``replace=True`` override) a model-based metric adapter."""
    if name in EXTERNAL_METRICS and not replace:
        raise ValueError(f"external metric {name!r} is already registered (pass replace=True)")
    entry = ExternalMetric(name, package, weights_env, adapter, citation, dict(settings or {}))
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
    if _first_importable(entry.packages()) is None:
        names = " or ".join(repr(p) for p in entry.packages())
        return False, f"python package {names} is not installed", None
    location = weights if weights is not None else os.environ.get(entry.weights_env)
    if not location:
        return False, f"no local weights: pass weights= or set {entry.weights_env}", None
    path = Path(location).expanduser()
    if not path.exists():
        return False, f"weights path {str(path)!r} does not exist", None
    return True, "", path


def weights_fingerprint(path: Path) -> str:
    """SHA-256 over a weights folder's (or file's) file names and sizes, and its JSON files' bytes."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        rel = f.relative_to(path).as_posix() if path.is_dir() else f.name
        h.update(f"{rel}:{f.stat().st_size}".encode())
        if f.suffix == ".json" and f.stat().st_size < (1 << 20):
            h.update(f.read_bytes())
    return h.hexdigest()


def metric_version(name: str, weights: Path) -> tuple[str, dict]:
    """``(version id, description)`` of metric ``name`` run with ``weights``: package, its version,
    settings and the weights' fingerprint. Scores cached under one id are never mixed with another's."""
    entry = _entry(name)
    module = _first_importable(entry.packages())
    dist = (module or "").split(".")[0]
    try:
        pkg_version = importlib.metadata.version(dist) if dist else None
    except importlib.metadata.PackageNotFoundError:
        pkg_version = None
    desc = {"metric": name, "package": module, "package_version": pkg_version, "settings": entry.settings,
            "weights": Path(weights).name, "weights_fingerprint": weights_fingerprint(Path(weights))}
    vid = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
    return vid, desc


def compute_external(name: str, hypotheses: Sequence[str], references: Sequence[str], *,
                     weights: str | os.PathLike | None = None, store=None) -> MetricResult:
    """Run model-based metric ``name`` if its package and local weights are present.

    With ``store`` (a :class:`~shovir_core.metrics.store.ScoreStore`), per-sample scores are read
    from it where cached (by report-text hash and metric version) and only the missing pairs are
    computed and added; when the metric cannot run here, scores cached for every pair are still
    returned (``source="cache"``). Returns ``MetricResult(available=False, reason=...)`` otherwise;
    errors raised by an available metric propagate.
    """
    hyps, refs = [str(h) for h in hypotheses], [str(r) for r in references]
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    ok, reason, path = external_availability(name, weights=weights)
    if store is not None:
        from .store import scores_with_store

        return scores_with_store(name, hyps, refs, store=store, available=ok, reason=reason, weights=path,
                                 adapter=_entry(name).adapter)
    if not ok:
        return MetricResult(name=name, available=False, reason=reason)
    value, per_sample = _entry(name).adapter(hyps, refs, path)
    return MetricResult(name=name, available=True, value=float(value), per_sample=per_sample,
                        version=metric_version(name, path)[0], source="computed")
