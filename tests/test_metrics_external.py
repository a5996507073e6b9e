"""RadGraph F1 and GREEN adapters (against stand-ins with the packages' call signatures), the per-record score
cache keyed by report-text hash and metric version, and the text-metric conventions (hand-computed)."""
from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np
import pytest

from shovir_core.metrics import compute_external, external_availability
from shovir_core.metrics.external import metric_version, radgraph_cache_dir
from shovir_core.metrics.store import ScoreStore, text_sha256
from shovir_core.metrics.text import bleu, nlg_metrics, rouge_l


def _module(monkeypatch, name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


@pytest.fixture
def fake_radgraph(monkeypatch, tmp_path):
    """A `radgraph` module whose F1RadGraph scores a pair by word overlap (Jaccard), recording its calls."""
    calls = []

    class F1RadGraph:
        def __init__(self, reward_level, model_type=None, **kwargs):
            calls.append({"init": dict(reward_level=reward_level, model_type=model_type, **kwargs)})

        def __call__(self, refs, hyps):
            calls.append({"hyps": list(hyps), "refs": list(refs)})
            per = [len(set(h.split()) & set(r.split())) / max(len(set(h.split()) | set(r.split())), 1)
                   for h, r in zip(hyps, refs)]
            return float(np.mean(per)), per, [], []

    _module(monkeypatch, "radgraph", F1RadGraph=F1RadGraph, __version__="0.1.18")
    weights = tmp_path / "radgraph-cache"
    (weights / "radgraph").mkdir(parents=True)
    (weights / "radgraph" / "config.json").write_text('{"model": "stand-in"}')
    (weights / "radgraph" / "weights.th").write_bytes(b"0" * 10)
    monkeypatch.setenv("SHOVIR_RADGRAPH_WEIGHTS", str(weights))
    return calls, weights


HYPS = ["small left effusion", "no effusion", "heart is enlarged"]
REFS = ["left effusion", "no effusion seen", "normal heart"]


def test_radgraph_adapter_calls_the_package(fake_radgraph):
    calls, weights = fake_radgraph
    res = compute_external("f1_radgraph", HYPS, REFS)
    assert res.available and res.source == "computed" and len(res.version) == 16
    assert calls[0]["init"] == {"reward_level": "partial", "model_type": "radgraph", "model_cache_dir": str(weights)}
    np.testing.assert_allclose(res.per_sample, [2 / 3, 2 / 3, 1 / 4])
    assert res.value == pytest.approx(np.mean([2 / 3, 2 / 3, 1 / 4]))
    assert radgraph_cache_dir(weights / "radgraph") == weights
    with pytest.raises(FileNotFoundError, match="not a RadGraph model folder"):
        radgraph_cache_dir(weights.parent)


def test_score_cache_in_the_record_is_read_back(fake_radgraph, tmp_path, monkeypatch):
    calls, weights = fake_radgraph
    store = ScoreStore(tmp_path / "record")
    first = compute_external("f1_radgraph", HYPS, REFS, store=store)
    n = len(calls)
    again = compute_external("f1_radgraph", HYPS, REFS, store=store)
    assert again.source == "cache" and len(calls) == n  # nothing recomputed
    np.testing.assert_array_equal(first.per_sample, again.per_sample)
    # one new pair: only it is computed
    more = compute_external("f1_radgraph", HYPS + ["clear lungs"], REFS + ["lungs clear"], store=store)
    assert more.source == "cache+computed" and calls[-1]["hyps"] == ["clear lungs"]
    assert store.lookup("f1_radgraph", more.version)[(text_sha256("clear lungs"), text_sha256("lungs clear"))] == 1.0
    # the metric cannot run here any more, but the record's scores are complete: read from the cache
    monkeypatch.delenv("SHOVIR_RADGRAPH_WEIGHTS")
    cached = compute_external("f1_radgraph", HYPS, REFS, store=store)
    assert cached.available and cached.source == "cache" and "SHOVIR_RADGRAPH_WEIGHTS" in cached.reason
    missing = compute_external("f1_radgraph", HYPS + ["new"], REFS + ["pair"], store=store)
    assert not missing.available and "3 of 4 pairs are cached" in missing.reason and missing.value is None


def test_a_new_metric_version_is_not_mixed_with_cached_scores(fake_radgraph, tmp_path):
    calls, weights = fake_radgraph
    store = ScoreStore(tmp_path / "record")
    v1 = compute_external("f1_radgraph", HYPS, REFS, store=store).version
    (weights / "radgraph" / "weights.th").write_bytes(b"0" * 11)  # other weights
    n = len(calls)
    res = compute_external("f1_radgraph", HYPS, REFS, store=store)
    assert res.version != v1 and res.source == "computed" and len(calls) > n
    assert set(store.versions("f1_radgraph")) == {v1, res.version}
    assert store.describe("f1_radgraph", res.version)["settings"] == {"reward_level": "partial", "model_type": "radgraph"}
    assert metric_version("f1_radgraph", weights)[0] == res.version


def test_green_adapter_via_either_package(monkeypatch, tmp_path):
    seen = []

    class GREEN:
        def __init__(self, model_name=None, output_dir="."):
            seen.append(model_name)

        def __call__(self, refs, hyps):
            scores = [1.0 if h == r else 0.25 for h, r in zip(hyps, refs)]
            return float(np.mean(scores)), float(np.std(scores)), scores, None

    weights = tmp_path / "GREEN-radllama2-7b"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    monkeypatch.setenv("SHOVIR_GREEN_WEIGHTS", str(weights))
    monkeypatch.setitem(sys.modules, "green_score", None)  # the GREEN repository's package is absent
    _module(monkeypatch, "radeval")
    _module(monkeypatch, "radeval.metrics")
    _module(monkeypatch, "radeval.metrics.green_score", GREEN=GREEN)
    res = compute_external("green", ["a", "b"], ["a", "c"])
    assert res.available and seen == [str(weights)]
    np.testing.assert_allclose(res.per_sample, [1.0, 0.25])


def test_table1_caches_radgraph_in_the_record(fake_radgraph, runs_root, monkeypatch):
    from shovir_core import protocols
    from shovir_core.tables import shovir as sv

    calls, _ = fake_radgraph
    monkeypatch.delenv("SHOVIR_GREEN_WEIGHTS", raising=False)
    spec = {"dataset": "demo", "min_count": 20, "max_per_class": 1, "ps": [0.0, 1.0], "conditions": ["Baseline", "FullNoise"],
            "reference_labels": "dataset", "reference_text": "template", "model": "ref-blind-prior"}
    runs = {"blind": protocols.run("shovir", "t-cache", spec, progress=False)}
    table = sv.table1(sv.trials_of(runs)).frame
    n = len(calls)
    assert n > 0 and np.isfinite(table[("Baseline", "f1_radgraph")]).all()
    assert set(sv.external_metric_status(table)) == {"green"}
    assert (runs["blind"].path / "scores" / "f1_radgraph").is_dir()
    again = sv.table1(sv.trials_of(runs)).frame
    assert len(calls) == n  # re-rendering reads the record's scores
    assert again[("FullNoise", "f1_radgraph")].equals(table[("FullNoise", "f1_radgraph")])
    assert sv.image_level(sv.trials_of(runs)).frame.attrs["text_convention"] == "project"


def test_unavailable_says_why(monkeypatch):
    monkeypatch.delenv("SHOVIR_GREEN_WEIGHTS", raising=False)
    res = compute_external("green", ["a"], ["a"])
    assert not res.available and res.value is None and res.reason


# -- text-metric conventions ------------------------------------------------------------------------
def test_text_conventions_by_hand():
    # unigram precision with lower-casing 3/4, case-sensitive 2/4 ("The" != "the"); equal lengths, BP = 1
    assert bleu(["The heart is big"], ["the heart is normal"], max_order=1) == pytest.approx(0.75)
    assert bleu(["The heart is big"], ["the heart is normal"], max_order=1, lowercase=False) == pytest.approx(0.5)
    # no matching 4-gram: unsmoothed BLEU-4 is 0 (HF evaluate), sacrebleu's exp smoothing is not
    ref = nlg_metrics(["The heart is big"], ["the heart is normal"], convention="reference-code")
    proj = nlg_metrics(["The heart is big"], ["the heart is normal"], convention="project")
    assert ref["bleu4"] == 0.0 and proj["bleu4"] > 0.0
    # ROUGE-L: stemming matches "effusions" to "effusion" (LCS 2 of 2), without it LCS 1: P = R = 1/2
    assert rouge_l(["effusions noted"], ["effusion noted"], use_stemmer=True) == pytest.approx(1.0)
    assert rouge_l(["effusions noted"], ["effusion noted"], use_stemmer=False) == pytest.approx(0.5)
    assert ref["rouge_l"] == pytest.approx(rouge_l(["The heart is big"], ["the heart is normal"], use_stemmer=False))
    with pytest.raises(ValueError, match="convention 'x'"):
        nlg_metrics(["a"], ["a"], convention="x")
