"""Inference cache: identical inputs computed once, resumable after an interruption."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.models import ScoreRequest, cached, get_model
from shovir_core.models.cache import InferenceCache, cache_inputs, cache_inputs_many


class Counting:
    """Wraps a model; counts requests it computes and can fail after a number of calls."""

    def __init__(self, model, *, fail_after: int | None = None):
        self.model, self.fail_after = model, fail_after
        self.name, self.uses_boxes = model.name, model.uses_boxes
        self.calls, self.scored, self.reported = 0, 0, 0

    def identity(self):
        return self.model.identity()

    def provenance(self):
        return self.model.provenance()

    def input_key(self, request=None, *, image=None, prompt=None):
        return self.model.input_key(request, image=image, prompt=prompt)

    def _tick(self):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1

    def score_yes_no(self, requests, *, answer_tokens=0):
        self._tick()
        self.scored += len(requests)
        return self.model.score_yes_no(requests, answer_tokens=answer_tokens)

    def generate_reports(self, images, **kwargs):
        self._tick()
        self.reported += len(images)
        return self.model.generate_reports(images, **kwargs)


def _requests(n_images=4):
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (64, 64), dtype=np.uint8) for _ in range(n_images)]
    qs = ["Does this chest X-ray show Edema?", "Does this chest X-ray show Cardiomegaly?"]
    return images, [ScoreRequest(im, q, report="There is edema.") for im in images for q in qs]


def test_identical_inputs_are_computed_once_and_hits_skip_the_model(tmp_path):
    images, requests = _requests()
    inner = Counting(get_model("ref-image-classifier"))
    model = cached(inner, directory=tmp_path, chunk_size=3, progress=False)
    doubled = requests + [ScoreRequest(r.image.copy(), r.question, report=r.report) for r in requests]
    first = model.score_yes_no(doubled)
    assert inner.scored == len(requests)  # the copies hit the same keys
    assert first[: len(requests)] == first[len(requests):]
    again = model.score_yes_no(requests)
    assert inner.scored == len(requests) and again == first[: len(requests)]
    direct = get_model("ref-image-classifier").score_yes_no(requests)
    assert [{k: v for k, v in r.items() if k != "input_hash"} for r in again] == direct
    assert len({r["input_hash"] for r in again}) == len(requests)


def test_a_changed_pixel_or_setting_misses(tmp_path):
    images, requests = _requests(1)
    inner = Counting(get_model("ref-image-classifier"))
    model = cached(inner, directory=tmp_path, progress=False)
    model.score_yes_no(requests)
    img = requests[0].image.copy()
    img[5, 5] ^= 1
    model.score_yes_no([ScoreRequest(img, requests[0].question, report=requests[0].report)])
    model.score_yes_no(requests, answer_tokens=8)
    assert inner.scored == len(requests) + 1 + len(requests)


def test_interrupted_run_resumes_where_it_stopped(tmp_path):
    images, requests = _requests(5)
    broken = Counting(get_model("ref-blind-prior"), fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        cached(broken, directory=tmp_path, chunk_size=3, progress=False).score_yes_no(requests)
    assert len(InferenceCache(tmp_path)) == 6  # two chunks committed before the interruption
    resumed = Counting(get_model("ref-blind-prior"))
    out = cached(resumed, directory=tmp_path, chunk_size=3, progress=False).score_yes_no(requests)
    assert resumed.scored == len(requests) - 6 and len(out) == len(requests)


def test_reports_are_cached_per_image_and_boxes(tmp_path):
    images, _ = _requests(3)
    inner = Counting(get_model("ref-context-shortcut"))
    model = cached(inner, directory=tmp_path, progress=False)
    boxes = [[("Edema", 0, 0, 10, 10)]] * 3
    a = model.generate_reports(images, boxes=boxes)
    b = model.generate_reports(images, boxes=boxes)
    assert a == b and inner.reported == 3
    model.generate_reports(images, boxes=[[("Edema", 0, 0, 20, 20)]] * 3)
    assert inner.reported == 6


def test_the_batched_cache_inputs_are_the_same_strings():
    """Cache keys must not move: the payloads equal json.dumps of the whole identity dict (the format every
    stored entry was keyed by), for real model identities (nested, unicode, numbers, a non-JSON value through
    ``default=str``) and awkward inputs, one at a time and batched."""
    import json
    from pathlib import Path

    identities = [get_model(name).identity() for name in ("ref-anchored@0.5", "tiny-gemma3")]
    identities.append({"zé": [1, 2.5, None, True], "a": {"c": Path("/x"), "b": "\u2028\n"}})
    inputs = ["", "plain", '{"tokens": "ab", "n_tokens": 3}', "é\u0000\\\"", "\ud83d"]
    for identity in identities:
        for settings in ({}, {"answer_tokens": 4, "greedy": True}):
            whole = [json.dumps({"model": identity, "task": "score_yes_no", "input": k, "settings": settings},
                                sort_keys=True, default=str) for k in inputs]
            assert cache_inputs_many(identity, "score_yes_no", inputs, settings) == whole
            assert [cache_inputs(identity, "score_yes_no", k, settings) for k in inputs] == whole
