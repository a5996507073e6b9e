"""Prefix reuse across the arms of the ModaLens appendices: one image prefix, then one report prefix per
(report, framing), then the question suffixes -- equal to the naive path, with fewer prefill tokens."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.models import ScoreRequest, get_model

REPORT = "FINDINGS: There is pulmonary edema. No pneumothorax.\nIMPRESSION: Pulmonary edema."
OTHER = "The morning train left the station a few minutes after seven."


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (48, 48), dtype=np.uint8) for _ in range(2)]


def _arms(img):
    q, alt = "Does this chest X-ray show edema?", "Is edema present on this chest X-ray?"
    return [ScoreRequest(img, q, report=REPORT), ScoreRequest(img, q, report=REPORT, instruction="yes_no"),
            ScoreRequest(img, q, report=REPORT, instruction="no_yes"), ScoreRequest(img, alt, report=REPORT),
            ScoreRequest(img, q, report=REPORT, instruction="yes_no_uncertain"),
            ScoreRequest(img, q, report=REPORT, framing="warning", instruction="yes_no"),
            ScoreRequest(img, q, report=REPORT, framing="historical", instruction="yes_no"),
            ScoreRequest(img, q), ScoreRequest(img, q, instruction="yes_no"), ScoreRequest(img, q, report=OTHER),
            ScoreRequest(img, q, report=REPORT, order="text_first")]


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen2vl"])
def test_arms_pooled_equal_the_naive_path_with_fewer_prefill_tokens(name, images):
    model = get_model(name)
    requests = [r for img in images for r in _arms(img)]
    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    pooled = model.score_yes_no(requests, answer_tokens=3)
    pooled_tokens = model.stats["prefill_tokens"]
    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    one_by_one = [model.score_yes_no([r], answer_tokens=3)[0] for r in requests]
    assert model.stats["prefill_tokens"] == sum(r["n_input_tokens"] for r in one_by_one)
    assert pooled_tokens < 0.6 * model.stats["prefill_tokens"]
    for a, b in zip(pooled, one_by_one):
        for key in ("logit_yes", "logit_no", "family_logit_yes", "family_logit_no"):
            assert a[key] == pytest.approx(b[key], abs=1e-4), key
        assert a["generated"] == b["generated"] and a["n_input_tokens"] == b["n_input_tokens"]


def test_common_length_leaves_a_suffix():
    from shovir_core.models.hf import HFVLM

    assert HFVLM._common_length([[1, 2, 3, 4], [1, 2, 3, 5]], start=1) == 3
    assert HFVLM._common_length([[1, 2, 3], [1, 2, 3]], start=1) == 2, "every row keeps at least one suffix token"
    assert HFVLM._common_length([[1, 9], [1, 8]], start=1) == 1
