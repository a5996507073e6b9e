"""Architecture-faithful tiny stand-ins of ModaLens App. F's other VLMs (LLaVA-NeXT, Qwen3.5) and of
App. N's LLaVA-1.5: golden prompts, image tokens, prefix reuse = naive, batching, generation."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.labels import FINDINGS_13  # noqa: E402
from shovir_core.models import REGISTRY, SCORE_KEYS, ScoreRequest, get_model  # noqa: E402

Q = "Does this chest X-ray show Edema?"
REPORT = "There is edema."
CLASSES = {"tiny-llava-next": "LlavaNextForConditionalGeneration", "tiny-qwen3.5": "Qwen3_5ForConditionalGeneration",
           "tiny-llava-1.5": "LlavaForConditionalGeneration"}
GOLDEN = {
    "tiny-llava-next": "<s>[INST] <image>\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema? [/INST]",
    "tiny-qwen3.5": "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Report: There is edema.\n\nQuestion: "
                    "Does this chest X-ray show Edema?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "tiny-llava-1.5": "<s>USER: <image>\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema? ASSISTANT:",
}
GOLDEN_TEXT_FIRST = {
    "tiny-llava-next": "<s>[INST] Report: There is edema.\n\nQuestion: Does this chest X-ray show Edema?<image>\n [/INST]",
    "tiny-qwen3.5": "<|im_start|>user\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema?"
                    "<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "tiny-llava-1.5": "<s>USER: Report: There is edema.\n\nQuestion: Does this chest X-ray show Edema?<image>\n ASSISTANT:",
}


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (96, 96), dtype=np.uint8), rng.integers(0, 256, (80, 112), dtype=np.uint8)


@pytest.fixture(scope="module", params=sorted(CLASSES))
def tiny(request):
    return get_model(request.param)


def test_class_and_prompts(tiny):
    assert type(tiny.model).__name__ == CLASSES[tiny.name]
    img = np.zeros((64, 64), np.uint8)
    assert tiny.render(ScoreRequest(img, Q, report=REPORT)) == GOLDEN[tiny.name]
    assert tiny.render(ScoreRequest(img, Q, report=REPORT, order="text_first")) == GOLDEN_TEXT_FIRST[tiny.name]


def test_token_families_are_the_case_and_space_variants(tiny):
    fam = tiny.families
    assert len(fam.yes_family) == len(fam.no_family) == 4
    names = {fam.names[i].replace("Ġ", " ") for i in fam.yes_family}
    assert names == {"yes", "Yes", " yes", " Yes"}
    assert fam.names[fam.yes_id] == "yes" and fam.names[fam.no_id] == "no"


def test_image_tokens_follow_the_architecture(tiny, images):
    image_id = tiny.model.config.image_token_id
    counts = []
    for img in images:
        batch = tiny._encode([tiny.render(ScoreRequest(img, Q))], [img])
        counts.append(int((batch["input_ids"] == image_id).sum()))
    if tiny.name == "tiny-llava-next":
        # anyres: a 4 x 4 base view plus the tiles of the best grid pinpoint, unpadded per aspect ratio
        assert counts[0] > 16 and counts[1] > 16 and counts[0] != counts[1]
    elif tiny.name == "tiny-qwen3.5":
        # aspect-preserving resize under the pixel cap (64 x 64 px = 16 merged tokens)
        assert counts[0] == 16 and counts[1] <= 16
        cap = REGISTRY["tiny-qwen3.5"].processor_kwargs["max_pixels"]
        assert tiny.processor.image_processor.size["longest_edge"] == cap, "max_pixels is the longest_edge pixel budget"
    else:
        assert counts == [16, 16]


def test_prefix_reuse_equals_naive_path(tiny, images):
    questions = [f"Does this chest X-ray show {f}?" for f in FINDINGS_13[:3]]
    requests = [ScoreRequest(im, q, report=rep) for im in images for rep in (REPORT, None) for q in questions]
    requests += [ScoreRequest(images[0], q, report=REPORT, order="text_first") for q in questions[:2]]
    tiny.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    fast = tiny.score_yes_no(requests)
    reuse_tokens = tiny.stats["prefill_tokens"]
    naive = [tiny._score_naive([r], 0)[0] for r in requests]
    for a, b in zip(fast, naive):
        assert set(a) == set(SCORE_KEYS)
        for key in ("logit_yes", "logit_no", "family_logit_yes", "family_logit_no", "logp_yes", "logp_no"):
            assert a[key] == pytest.approx(b[key], abs=1e-4), key
    if tiny.name == "tiny-qwen3.5":
        assert tiny.prefix_reuse is False, "recurrent linear-attention state: no shared-prefix cache"
    else:
        assert tiny.prefix_reuse and reuse_tokens < sum(r["n_input_tokens"] for r in naive)


def test_generation_and_batches_equal_single_requests(tiny, images):
    questions = [f"Does this chest X-ray show {f}?" for f in FINDINGS_13[:2]]
    requests = [ScoreRequest(images[1], q, report=REPORT, instruction="yes_no") for q in questions]
    requests += [ScoreRequest(None, questions[0], instruction="yes_no")]
    fast = tiny.score_yes_no(requests, answer_tokens=4)
    naive = [tiny._score_naive([r], 4)[0] for r in requests]
    for a, b in zip(fast, naive):
        assert a["generated"] == b["generated"] and a["margin"] == pytest.approx(b["margin"], abs=1e-4)
    pair = [ScoreRequest(images[0], Q, report=REPORT), ScoreRequest(images[1], "Is Pneumothorax present?")]
    batched = tiny._score_naive(pair, 0)
    single = [tiny._score_naive([r], 0)[0] for r in pair]
    for a, b in zip(batched, single):
        assert a["margin"] == pytest.approx(b["margin"], abs=1e-4)
