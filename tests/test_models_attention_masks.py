"""Gemma-3's masks built once (shovir_core.models.attention_masks): the model's own masks and logits, exactly
(under sdpa on the CPU in the additive form the attention kernel would have made of them in every layer)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from shovir_core.models import ScoreRequest
from shovir_core.models.attention_masks import additive, forward_inputs
from shovir_core.models.hf import _pil
from shovir_core.models.lens import Knockout, _rows, knockout_hooks, token_spans
from shovir_core.models.tiny import build_tiny

REPORT = "The heart is normal in size. There is a small left pleural effusion."


def _batch(model, n_images: int = 2):
    rng = np.random.default_rng(7)
    imgs = [rng.integers(0, 256, (40, 48), dtype=np.uint8) for _ in range(n_images)]
    requests = [ScoreRequest(imgs[0], "Is there effusion?", report=REPORT),
                ScoreRequest(imgs[-1], "Is the heart enlarged?"),  # shorter: left padding
                ScoreRequest(imgs[0], "Is there edema?", report=REPORT, order="text_first")]
    return model._encode([model.render(r) for r in requests], [_pil(r.image) for r in requests])


def _own_masks(model, inputs):
    """The masks the model builds for ``inputs`` itself (captured at the first decoder layer of each type)."""
    seen = {}
    layers = model.model.model.language_model.layers
    types = model.model.config.get_text_config().layer_types

    def grab(kind):
        def hook(module, args, kwargs):
            seen.setdefault(kind, kwargs["attention_mask"])
        return hook

    handles = [layer.register_forward_pre_hook(grab(kind), with_kwargs=True) for layer, kind in zip(layers, types)]
    try:
        with torch.inference_mode():
            model.model(**inputs, use_cache=False, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_the_masks_and_logits_are_the_models_own(impl):
    model = build_tiny("tiny-gemma3")
    model.model.set_attn_implementation(impl)
    inputs = model._to_model(_batch(model))
    assert len(set(inputs["attention_mask"].sum(1).tolist())) > 1  # the batch is really padded
    fast = forward_inputs(model.model, inputs)
    assert isinstance(fast["attention_mask"], dict)
    own = _own_masks(model, inputs)
    assert set(own) == {"full_attention", "sliding_attention"}
    for kind, mask in own.items():
        if impl == "sdpa":  # boolean from the model; made additive once here, as the kernel would in every layer
            assert mask.dtype == torch.bool and fast["attention_mask"][kind].dtype == torch.float32
            mask = additive(mask, torch.float32)
        assert torch.equal(fast["attention_mask"][kind], mask), kind
    # the image block is really bidirectional (not a plain causal mask): the first image token sees the last
    image = (inputs["token_type_ids"][0] == 1).nonzero().flatten()
    full = fast["attention_mask"]["full_attention"][0, 0]
    assert float(full[image[0], image[-1]]) == 0.0 and float(full[image[0], image[-1] + 1]) < -1e30
    with torch.inference_mode():
        a = model.model(**inputs, use_cache=False).logits
        b = model.model(**fast, use_cache=False).logits
    assert torch.equal(a, b)


def test_it_leaves_to_the_model_what_it_cannot_build_the_same():
    model = build_tiny("tiny-gemma3")
    inputs = model._to_model(_batch(model))
    window = model.model.config.get_text_config().sliding_window
    long = {**inputs, "attention_mask": torch.ones((3, window + 1), dtype=torch.long),
            "token_type_ids": torch.zeros((3, window + 1), dtype=torch.long)}
    assert forward_inputs(model.model, long) is long  # the window would exclude keys
    with_cache = {**inputs, "cache": object()}
    assert forward_inputs(model.model, with_cache) is with_cache
    other = build_tiny("tiny-qwen2vl")
    batch = other._to_model(_batch(other))
    assert forward_inputs(other.model, batch) is batch


def test_a_prefix_group_scores_the_same_with_the_masks_built_once():
    """The shared-prefix path (prefill through :meth:`_forward_inputs`) against whole prompts through the
    model's own masks: the same answers, logits within float rounding of a different batch shape."""
    model = build_tiny("tiny-gemma3", batch_size=8)
    img = np.random.default_rng(2).integers(0, 256, (40, 48), dtype=np.uint8)
    requests = [ScoreRequest(img, q, report=REPORT) for q in ("Is there effusion?", "Is there edema?",
                                                             "Is the heart enlarged?")]
    pooled = model.score_yes_no(requests)
    for r, a in zip(requests, pooled):
        batch = model._to_model(model._encode([model.render(r)], [_pil(img)]))
        with torch.inference_mode():
            logits = model.model(**batch, use_cache=False, logits_to_keep=1).logits[0, -1]
        assert a["logit_yes"] == pytest.approx(float(logits[model.families.yes_id]), abs=1e-5)


def test_sdpa_makes_of_a_boolean_mask_what_additive_makes():
    """The additive mask equals torch's own conversion: attention outputs agree bit for bit, rows that may
    attend to nothing (a padded query) included."""
    rng = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 9, 8, generator=rng) for _ in range(3))
    mask = torch.rand(3, 1, 9, 9, generator=rng) > 0.4
    mask[1, 0, 2] = False  # a row with no key at all
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert torch.equal(sdpa(q, k, v, attn_mask=mask).nan_to_num(7.0),
                       sdpa(q, k, v, attn_mask=additive(mask, torch.float32)).nan_to_num(7.0))


def test_a_knockout_on_the_additive_mask_equals_one_on_the_models_boolean_mask():
    """App. N.2's knockout edits the mask at the attention module: blocked with -inf in the additive mask
    (forward_inputs), with False in the boolean mask the model builds itself -- the same logits."""
    model = build_tiny("tiny-gemma3")
    rng = np.random.default_rng(3)
    requests = [ScoreRequest(rng.integers(0, 256, (40, 48), dtype=np.uint8), "Is there effusion?", report=REPORT),
                ScoreRequest(rng.integers(0, 256, (40, 48), dtype=np.uint8), "Is the heart enlarged?",
                             report=REPORT + " No pneumothorax.")]
    inputs = model._to_model(model._encode([model.render(r) for r in requests], [_pil(r.image) for r in requests]))
    length = inputs["input_ids"].shape[1]
    pads = (length - inputs["attention_mask"].sum(dim=1)).tolist()
    assert max(pads) > 0  # padded: the knocked-out positions are shifted per row
    n_layers = model.model.config.get_text_config().num_hidden_layers
    knockout = Knockout.cumulative("report", 1, n_layers, scope="non_image")
    rows = _rows([token_spans(model, r) for r in requests], knockout, pads)
    out = {}
    for name, feed in (("model's boolean", inputs), ("additive", forward_inputs(model.model, inputs))):
        with torch.inference_mode(), knockout_hooks(model.model, knockout, rows, length=length):
            out[name] = model.model(**feed, use_cache=False).logits
    with torch.inference_mode():
        clean = model.model(**inputs, use_cache=False).logits
    assert not torch.equal(out["additive"], clean)  # the knockout really changed the answer position
    assert torch.equal(out["model's boolean"], out["additive"])
