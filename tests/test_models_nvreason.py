"""tiny-nvreason: NV-Reason-CXR's class (Qwen2.5-VL) with its prompt structure; the report is decoded as the
authors' wrapper decodes it (new tokens, special tokens skipped, reasoning text kept)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import get_model  # noqa: E402
from shovir_core.models.registry import REGISTRY  # noqa: E402


@pytest.fixture(scope="module")
def nvr():
    return get_model("tiny-nvreason")


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(1).integers(0, 256, (64, 80), dtype=np.uint8)


def test_class_and_prompt_follow_nv_reason(nvr):
    from transformers import Qwen2_5_VLForConditionalGeneration

    assert isinstance(nvr.model, Qwen2_5_VLForConditionalGeneration)
    assert nvr.model.config.vision_config.fullatt_block_indexes == [1]  # windowed + full attention blocks
    assert nvr.spec.report_user == REGISTRY["nv-reason-cxr"].report_user == "Find abnormalities and support devices."
    assert nvr.spec.report_order == REGISTRY["nv-reason-cxr"].report_order == "image_first"
    assert nvr.render_report() == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|>Find abnormalities and support devices.<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_report_is_the_authors_decode(nvr, image):
    report = nvr.generate_reports([image])[0]
    batch = nvr._encode([nvr.render_report()], [image])
    with torch.no_grad():
        out = nvr.model.generate(**nvr._to_model(batch), max_new_tokens=nvr.spec.max_new_tokens, do_sample=False,
                                 pad_token_id=nvr.tokenizer.pad_token_id, eos_token_id=nvr._eos_ids())
    new = out[:, batch["input_ids"].shape[1]:]
    assert report == nvr.processor.batch_decode(new, skip_special_tokens=True)[0].strip()


def test_reasoning_text_is_kept_special_tokens_dropped(nvr, image, monkeypatch):
    tok = nvr.tokenizer
    reply = "<think> Step by step. </think> <answer> There is cardiomegaly. </answer>"
    ids = tok(reply, add_special_tokens=False, return_tensors="pt").input_ids
    tail = torch.tensor([[tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id]])

    def fake_generate(**kwargs):
        return torch.cat([kwargs["input_ids"], ids, tail], dim=1)

    monkeypatch.setattr(nvr.model, "generate", fake_generate)
    assert nvr.generate_reports([image]) == [reply]
