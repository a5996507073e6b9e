"""Tiny random transformers: golden prompts, prefix-reuse equivalence, determinism, provenance."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.labels import FINDINGS_13  # noqa: E402
from shovir_core.models import SCORE_KEYS, ScoreRequest, get_model  # noqa: E402

Q = "Does this chest X-ray show Edema?"
REPORT = "There is edema."
TINY = ("tiny-gemma3", "tiny-llava", "tiny-qwen2vl")

GOLDEN = {
    "tiny-gemma3": {
        "present": "<bos><start_of_turn>user\n<start_of_image>Report: There is edema.\n\nQuestion: Does this chest "
                   "X-ray show Edema?<end_of_turn>\n<start_of_turn>model\n",
        "absent": "<bos><start_of_turn>user\n<start_of_image>Question: Does this chest X-ray show Edema?<end_of_turn>\n"
                  "<start_of_turn>model\n",
        "text_first": "<bos><start_of_turn>user\nReport: There is edema.\n\nQuestion: Does this chest X-ray show "
                      "Edema?<start_of_image><end_of_turn>\n<start_of_turn>model\n",
        "yes_no": "<bos><start_of_turn>user\n<start_of_image>Report: There is edema.\n\nQuestion: Does this chest "
                  "X-ray show Edema? Answer with exactly Yes or No.<end_of_turn>\n<start_of_turn>model\n",
        "no_image": "<bos><start_of_turn>user\nQuestion: Does this chest X-ray show Edema? Answer with exactly No or "
                    "Yes.<end_of_turn>\n<start_of_turn>model\n",
    },
    "tiny-llava": {
        "present": "<s>[INST] <image>\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema? [/INST]",
        "absent": "<s>[INST] <image>\nQuestion: Does this chest X-ray show Edema? [/INST]",
        "text_first": "<s>[INST] Report: There is edema.\n\nQuestion: Does this chest X-ray show Edema?<image>\n [/INST]",
        "yes_no": "<s>[INST] <image>\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema? Answer "
                  "with exactly Yes or No. [/INST]",
        "no_image": "<s>[INST] Question: Does this chest X-ray show Edema? Answer with exactly No or Yes. [/INST]",
    },
    "tiny-qwen2vl": {
        "present": "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Report: There is edema.\n\nQuestion: "
                   "Does this chest X-ray show Edema?<|im_end|>\n<|im_start|>assistant\n",
        "absent": "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Question: Does this chest X-ray show "
                  "Edema?<|im_end|>\n<|im_start|>assistant\n",
        "text_first": "<|im_start|>user\nReport: There is edema.\n\nQuestion: Does this chest X-ray show Edema?"
                      "<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n",
        "yes_no": "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Report: There is edema.\n\nQuestion: "
                  "Does this chest X-ray show Edema? Answer with exactly Yes or No.<|im_end|>\n<|im_start|>assistant\n",
        "no_image": "<|im_start|>user\nQuestion: Does this chest X-ray show Edema? Answer with exactly No or Yes."
                    "<|im_end|>\n<|im_start|>assistant\n",
    },
}


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (96, 96), dtype=np.uint8), rng.integers(0, 256, (80, 112), dtype=np.uint8)


@pytest.fixture(scope="module", params=TINY)
def tiny(request):
    return get_model(request.param)


def _variants(img):
    return {
        "present": ScoreRequest(img, Q, report=REPORT),
        "absent": ScoreRequest(img, Q),
        "text_first": ScoreRequest(img, Q, report=REPORT, order="text_first"),
        "yes_no": ScoreRequest(img, Q, report=REPORT, instruction="yes_no"),
        "no_image": ScoreRequest(None, Q, instruction="no_yes"),
    }


def test_golden_prompt_strings(tiny, images):
    for variant, request in _variants(images[0]).items():
        assert tiny.render(request) == GOLDEN[tiny.name][variant], (tiny.name, variant)


def test_rendered_prompts_come_back_the_same_from_the_memo(tiny, images):
    """render keeps its last RENDER_MEMO prompts, keyed by all the messages hold: a second render of each variant
    (another image, the same text) comes from the memo and is the golden string; a framing or another report
    is a new prompt."""
    from shovir_core.models.hf import RENDER_MEMO

    assert tiny._chat_prompt.cache_info().maxsize == RENDER_MEMO
    tiny._chat_prompt.cache_clear()
    for _ in range(2):
        for variant, request in _variants(images[1]).items():
            assert tiny.render(request) == GOLDEN[tiny.name][variant], (tiny.name, variant)
    info = tiny._chat_prompt.cache_info()
    assert (info.hits, info.misses) == (len(GOLDEN[tiny.name]), len(GOLDEN[tiny.name]))
    framed = ScoreRequest(images[0], Q, report=REPORT, framing="warning")
    assert tiny.render(framed) != tiny.render(ScoreRequest(images[0], Q, report=REPORT))
    assert "may not describe this image" in tiny.render(framed)
    assert tiny.render(ScoreRequest(images[0], Q, report="No edema.")) != GOLDEN[tiny.name]["present"]


def test_image_block_expands_to_image_tokens(tiny, images):
    batch = tiny._encode([tiny.render(ScoreRequest(images[0], Q))], [images[0]])
    image_id = tiny.model.config.image_token_id
    assert int((batch["input_ids"] == image_id).sum()) == 16
    batch = tiny._encode([tiny.render(ScoreRequest(None, Q))], [None])
    assert int((batch["input_ids"] == image_id).sum()) == 0


def test_prefix_reuse_equals_naive_path(tiny, images):
    questions = [f"Does this chest X-ray show {f}?" for f in FINDINGS_13[:3]]
    requests = [ScoreRequest(im, q, report=rep) for im in images for rep in (REPORT, None) for q in questions]
    requests += [ScoreRequest(None, q, report=REPORT) for q in questions[:3]]
    requests += [ScoreRequest(images[0], q, report=REPORT, order="text_first") for q in questions[:3]]
    tiny.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    fast = tiny.score_yes_no(requests)
    reuse_tokens = tiny.stats["prefill_tokens"]
    naive = [tiny._score_naive([r], 0)[0] for r in requests]
    naive_tokens = sum(r["n_input_tokens"] for r in naive)
    for a, b in zip(fast, naive):
        assert set(a) == set(SCORE_KEYS)
        for key in ("logit_yes", "logit_no", "family_logit_yes", "family_logit_no", "logp_yes", "logp_no"):
            assert a[key] == pytest.approx(b[key], abs=1e-4), key
        assert a["top1_id"] == b["top1_id"] and a["n_input_tokens"] == b["n_input_tokens"]
    assert reuse_tokens < naive_tokens


def test_left_padded_batches_equal_single_requests(tiny, images):
    requests = [ScoreRequest(images[0], Q, report=REPORT), ScoreRequest(images[1], "Is Pneumothorax present?")]
    batched = tiny._score_naive(requests, 0)
    single = [tiny._score_naive([r], 0)[0] for r in requests]
    for a, b in zip(batched, single):
        assert a["margin"] == pytest.approx(b["margin"], abs=1e-4)


def test_generation_with_prefix_reuse_equals_generate(tiny, images):
    questions = [f"Does this chest X-ray show {f}?" for f in FINDINGS_13[:3]]
    requests = [ScoreRequest(images[1], q, report=REPORT, instruction="yes_no") for q in questions]
    requests += [ScoreRequest(None, q, instruction="yes_no") for q in questions[:2]]
    fast = tiny.score_yes_no(requests, answer_tokens=4)
    naive = [tiny._score_naive([r], 4)[0] for r in requests]
    for a, b in zip(fast, naive):
        assert isinstance(a["generated"], str) and a["generated"] == b["generated"]
        assert a["answer"] == b["answer"] and a["compliant"] == b["compliant"]
        assert a["margin"] == pytest.approx(b["margin"], abs=1e-4)


def test_reports_are_strings(tiny, images):
    reports = tiny.generate_reports(list(images), max_new_tokens=4)
    assert len(reports) == 2 and all(isinstance(r, str) for r in reports)


def test_provenance_records_model_processor_and_tokens(tiny):
    prov = tiny.provenance()
    for key in ("name", "revision", "processor", "tokenizer", "answer_tokens", "chat_template_sha256", "source"):
        assert key in prov
    assert prov["source"]["kind"] == "tiny-random"
    assert prov["tokenizer"]["special_tokens"]["eos_token"]
    assert prov["processor"]["image_processor"]["class"].endswith("Pil")


def test_tiny_weights_are_seeded_not_global(images):
    import torch

    state = torch.random.get_rng_state()
    a = get_model("tiny-gemma3", seed=1).score_yes_no([ScoreRequest(images[0], Q)])[0]
    b = get_model("tiny-gemma3", seed=1).score_yes_no([ScoreRequest(images[0], Q)])[0]
    c = get_model("tiny-gemma3", seed=2).score_yes_no([ScoreRequest(images[0], Q)])[0]
    assert torch.equal(state, torch.random.get_rng_state())
    assert a["logit_yes"] == b["logit_yes"] and a["logit_yes"] != c["logit_yes"]


def test_input_key_changes_with_tokens_and_pixels(tiny, images):
    k = tiny.input_key(ScoreRequest(images[0], Q, report=REPORT))
    assert k == tiny.input_key(ScoreRequest(images[0].copy(), Q, report=REPORT))
    assert k != tiny.input_key(ScoreRequest(images[0], Q))
    changed = images[0].copy()
    changed[0, 0] ^= 1
    assert k != tiny.input_key(ScoreRequest(changed, Q, report=REPORT))
