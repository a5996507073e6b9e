"""shovir_core.models.image_inputs: a group's preprocessed image is kept per process by its pixels, so
another arm (another group, another record) asking about the same pixels is not preprocessed again --
with the same scores, and again after a pixel or a processor setting changes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from shovir_core.models import ScoreRequest
from shovir_core.bounded_store import BoundedStore
from shovir_core.models import image_inputs
from shovir_core.models.tiny import build_tiny

REPORT = "FINDINGS: There is pulmonary edema. No pneumothorax.\nIMPRESSION: Pulmonary edema."


class _Counting:
    """An image processor that counts its calls (every other attribute is the wrapped one's)."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def empty_store(monkeypatch):
    monkeypatch.setattr(image_inputs, "STORE", BoundedStore(max_bytes=image_inputs.STORE.max_bytes))


def _requests(img, report):
    questions = ["Does this chest X-ray show edema?", "Does this chest X-ray show pneumothorax?"]
    return [ScoreRequest(img, q, report=report) for q in questions]


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_an_arm_on_the_same_pixels_is_not_preprocessed_again(name, empty_store):
    model = build_tiny(name)
    counting = _Counting(model.processor.image_processor)
    model.processor.image_processor = counting
    img = np.random.default_rng(5).integers(0, 256, (40, 56), dtype=np.uint8)
    present = model.score_yes_no(_requests(img, REPORT), answer_tokens=2)
    first = counting.calls
    assert first >= 1
    absent = model.score_yes_no(_requests(img.copy(), None), answer_tokens=2)  # another arm, another array object
    assert counting.calls == first, "the same pixels were preprocessed again"
    changed = img.copy()
    changed[0, 0] ^= 1
    model.score_yes_no(_requests(changed, REPORT), answer_tokens=2)
    assert counting.calls > first, "a changed pixel must be preprocessed"
    # the kept outputs give the scores the processor's own outputs give
    image_inputs.STORE.clear()
    for kept, fresh in ((present, model.score_yes_no(_requests(img, REPORT), answer_tokens=2)),
                        (absent, model.score_yes_no(_requests(img, None), answer_tokens=2))):
        for a, b in zip(kept, fresh):
            assert (a["logit_yes"], a["logit_no"], a["generated"]) == (b["logit_yes"], b["logit_no"], b["generated"])


def test_a_changed_processor_setting_is_another_key(empty_store):
    model = build_tiny("tiny-gemma3")
    inner = model.processor.image_processor
    before = image_inputs.processor_digest(inner)
    assert image_inputs.processor_digest(inner) == before
    other = type(inner).from_dict({**inner.to_dict(), "image_mean": [0.25, 0.25, 0.25]})
    assert image_inputs.processor_digest(other) != before
    mean = inner.image_mean
    try:
        inner.image_mean = [0.25, 0.25, 0.25]  # the same object, a setting changed: another key
        assert image_inputs.processor_digest(inner) != before
    finally:
        inner.image_mean = mean
    assert image_inputs.processor_digest(inner) == before


def test_the_kept_outputs_stay_within_their_bound(empty_store, monkeypatch):
    monkeypatch.setattr(image_inputs.STORE, "max_bytes", 4 * 400)  # room for four outputs of 400 bytes
    made = []
    for i in range(6):
        out = image_inputs.kept_outputs(("p", i), lambda: {"pixel_values": torch.zeros(100)})
        made.append(out)
        assert out["pixel_values"].shape == (100,)
    assert image_inputs.STORE.nbytes == 4 * 400
    assert [k[1] for k in image_inputs.STORE.keys()] == [2, 3, 4, 5], "the least recently used went"
    again = image_inputs.kept_outputs(("p", 5), lambda: pytest.fail("kept output computed again"))
    assert again is not made[5] and again["pixel_values"] is made[5]["pixel_values"]  # a copy of the mapping
    odd = image_inputs.kept_outputs(("q", 0), lambda: {"pixel_values": torch.zeros(1), "note": object()})
    assert "note" in odd and ("q", 0) not in image_inputs.STORE.keys(), "an output it cannot size is not kept"


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_a_batch_showing_one_array_equals_the_batch_of_copies(name, empty_store):
    """``_encode`` of prompts that all show one array (a request's token spans, a group's first prompt)
    preprocesses it once and tiles it: the same inputs as each prompt with its own copy of the image; a
    second such batch of any size computes nothing."""
    model = build_tiny(name)
    img = np.random.default_rng(9).integers(0, 256, (44, 52), dtype=np.uint8)
    texts = [model.render(r) for r in _requests(img, REPORT) + _requests(img, None)]
    counting = _Counting(model.processor.image_processor)
    model.processor.image_processor = counting
    one = model._encode(texts, [img] * len(texts))
    assert counting.calls == 1
    assert model.processor.image_processor is counting, "the wrapper is taken off again"
    again = model._encode(texts[:3], [img] * 3)
    assert counting.calls == 1, "a batch of another size on the same pixels was preprocessed again"
    copies = model._encode(texts, [img.copy() for _ in texts])  # distinct arrays: the processor's own batch
    assert counting.calls == 2
    assert one.keys() == copies.keys()
    for key in copies:
        a, b = one[key], copies[key]
        assert torch.equal(a, b) if torch.is_tensor(b) else np.array_equal(np.asarray(a), np.asarray(b)), (name, key)
    assert torch.equal(again["input_ids"], copies["input_ids"][:3][:, -again["input_ids"].shape[1]:])
