"""Batched greedy generation equals one-at-a-time generation on the tiny models of every family."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.models import ScoreRequest
from shovir_core.models.tiny import build_tiny

TINY = ("tiny-gemma3", "tiny-llava", "tiny-qwen2vl")
REPORT = "There is a small left pleural effusion. No pneumothorax."


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(1)  # different sizes: llava and qwen2-vl prompts differ in length -> padding
    return [rng.integers(0, 256, (64 + 16 * i, 96 - 8 * i), dtype=np.uint8) for i in range(5)]


@pytest.fixture(scope="module", params=TINY)
def tiny(request):
    return build_tiny(request.param)


def test_batched_reports_equal_one_at_a_time(tiny, images):
    tiny.report_batch_size = None  # default: one batch per call
    tiny.stats.update(reports=0, forward_passes=0)
    batched = tiny.generate_reports(images, max_new_tokens=24)
    assert tiny.stats["reports"] == len(images) and tiny.stats["forward_passes"] == 1
    tiny.report_batch_size = 2  # 2 + 2 + 1
    pairs = tiny.generate_reports(images, max_new_tokens=24)
    tiny.report_batch_size = 1
    single = tiny.generate_reports(images, max_new_tokens=24)
    tiny.report_batch_size = None
    assert batched == pairs == single
    assert all(isinstance(r, str) for r in batched) and len(set(batched)) > 1  # reports differ per image


def test_batched_generated_answers_equal_one_at_a_time(tiny, images):
    requests = [ScoreRequest(images[0], "Does this chest X-ray show Edema?", report=REPORT, instruction="yes_no"),
                ScoreRequest(images[3], "Is Pneumothorax present on this chest X-ray?", instruction="yes_no"),
                ScoreRequest(images[1], "Does this chest X-ray show any acute cardiopulmonary finding?",
                             report=REPORT)]
    batched = tiny._score_naive(requests, 8)
    single = [tiny._score_naive([r], 8)[0] for r in requests]
    for a, b in zip(batched, single):
        assert a["generated"] == b["generated"] and a["answer"] == b["answer"]


def test_report_batch_size_is_validated_and_auto_on_cpu_uses_batch_size(tiny):
    with pytest.raises(ValueError, match="report_batch_size=0"):
        type(tiny)(tiny.spec, tiny.model, tiny.processor, source=tiny.source, report_batch_size=0)
    auto = type(tiny)(tiny.spec, tiny.model, tiny.processor, source=tiny.source, batch_size=3,
                      report_batch_size="auto")
    assert auto._report_batch(10, 0, 8) == 3
    assert tiny._report_batch(10, 0, 8) == 10
