"""Prefix reuse across the arms of the ModaLens appendices: one image prefix, then a token trie of the
text every arm adds (reports, framings, questions, instructions) -- equal to the naive path, each shared
stretch prefilled once."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from shovir_core.models import ScoreRequest, get_model
from shovir_core.models.hf import _pil
from shovir_core.models.tiny import TINY_NAMES, build_tiny

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
    model.trie_min_saved_tokens = 16  # the GPU default: text nodes (the CPU's has none)
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


def _trie_size(model, requests) -> int:
    """Distinct token prefixes per (image, block order) group -- what a full trie prefills -- counted
    independently of the scorer; text-first requests share nothing and count in full."""
    prefixes, total = set(), 0
    for k, r in enumerate(requests):
        ids = model._encode([model.render(r)], [_pil(r.image)])["input_ids"][0].tolist()
        if r.order == "text_first":
            total += len(ids)
            continue
        key = (id(r.image),)
        prefixes.update(key + tuple(ids[:j]) for j in range(1, len(ids) + 1))
    return total + len(prefixes)


def test_each_shared_stretch_is_prefilled_once(images):
    """The pooled prefill equals the trie's size: the question shared by the report-present arms before
    their instructions differ is prefilled once, not once per instruction."""
    model = get_model("tiny-gemma3")
    requests = [r for img in images for r in _arms(img)]
    model.trie_min_saved_tokens = 1  # every shared stretch is a node: exactly the trie
    model.stats.update(prefill_tokens=0, forward_passes=0)
    model.score_yes_no(requests, answer_tokens=0)
    size, passes = _trie_size(model, requests), model.stats["forward_passes"]
    assert model.stats["prefill_tokens"] == size
    model.trie_min_saved_tokens = 16  # small stretches fold into their branches: more tokens, fewer passes
    model.stats.update(prefill_tokens=0, forward_passes=0)
    model.score_yes_no(requests, answer_tokens=0)
    assert size < model.stats["prefill_tokens"] < 1.1 * size and model.stats["forward_passes"] < passes


def test_generation_past_the_sliding_window_matches_the_naive_path():
    """Prompts longer than a sliding window: padded suffix rows would see a shifted window while
    decoding, so such rows are batched by suffix length and the answers equal one-at-a-time."""
    model = build_tiny("tiny-gemma3", dims={"sliding_window": 24}, batch_size=16)
    img = np.random.default_rng(1).integers(0, 256, (48, 48), dtype=np.uint8)
    requests = _arms(img)
    assert max(len(model._encode([model.render(r)], [_pil(img)])["input_ids"][0]) for r in requests) > 24
    pooled = model.score_yes_no(requests, answer_tokens=6)
    for r, a in zip(requests, pooled):
        b = model.score_yes_no([r], answer_tokens=6)[0]
        assert a["generated"] == b["generated"]
        assert a["logit_yes"] == pytest.approx(b["logit_yes"], abs=1e-4)


@pytest.mark.parametrize("name", TINY_NAMES)
def test_one_processor_call_per_group_gives_each_prompts_own_tokens(name):
    """The shared-prefix path encodes a group's prompts in one processor call, with the group's image
    preprocessed once and tiled: the token ids are those of each prompt encoded alone, and the tiled
    image outputs equal the processor's own for the same batch."""
    from shovir_core.models.hf import _OnceImageProcessor, _pil

    model = build_tiny(name)
    img = _pil(np.random.default_rng(3).integers(0, 256, (40, 56), dtype=np.uint8))
    texts = [model.render(r) for r in _arms(np.asarray(img))]
    alone = [model._encode([t], [img])["input_ids"][0].tolist() for t in texts]
    assert model._token_ids(texts, img, chunk=5) == alone
    assert len({len(x) for x in alone}) > 1  # padding was really stripped
    inner = model.processor.image_processor
    tiled = _OnceImageProcessor(inner)([[img]] * 3, return_tensors="pt")
    direct = inner([[img]] * 3, return_tensors="pt")
    assert tiled.keys() == direct.keys()
    for key in direct:
        a, b = tiled[key], direct[key]
        if torch.is_tensor(b):
            assert torch.equal(a, b), (name, key)
        else:
            assert np.array_equal(np.asarray(a), np.asarray(b)), (name, key)


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-llava-next", "tiny-qwen2vl"])
def test_input_keys_of_a_batch_are_each_requests_own_key(name):
    """The batched cache keys (one tokenizer call, one fingerprint per image object) are the strings
    :meth:`input_key` gives each request alone: with and without an image, two images (one a copy with a
    changed pixel: a fingerprint is of the pixels, not the object), a question with no report."""
    model = build_tiny(name)
    img = np.random.default_rng(5).integers(0, 256, (40, 56), dtype=np.uint8)
    other = img.copy()
    other[0, 0] ^= 1
    requests = _arms(img) + [ScoreRequest(other, "Is there edema?", report=REPORT), ScoreRequest(None, "Is there edema?")]
    keys = model.input_keys(requests)
    assert keys == [model.input_key(r) for r in requests]
    assert len(set(keys)) == len(requests)


@pytest.mark.parametrize("name", ["ref-anchored@0.5", "ref-blind-prior"])
def test_input_keys_of_a_reference_model_are_each_requests_own_key(name):
    """The default adapter's batched keys (each image object fingerprinted once) are :meth:`input_key`'s
    strings, request by request; two arrays of equal pixels get one key, a changed pixel another."""
    from shovir_core.models import get_model

    model = get_model(name)
    img = np.random.default_rng(5).integers(0, 256, (40, 56), dtype=np.uint8)
    other, same = img.copy(), img.copy()
    other[0, 0] ^= 1
    requests = _arms(img) + [ScoreRequest(other, "Is there edema?", report=REPORT),
                             ScoreRequest(same, "Is there edema?", report=REPORT), ScoreRequest(None, "Is there edema?")]
    keys = model.input_keys(requests)
    assert keys == [model.input_key(r) for r in requests]
    assert keys[-2] == model.input_key(ScoreRequest(img, "Is there edema?", report=REPORT)) != keys[-3]


def test_the_default_trie_runs_packed_in_few_passes_with_the_answers_of_the_image_prefix_alone(images):
    """Every device's default makes text nodes (TRIE_MIN_SAVED_TOKENS) and runs them packed: each image's
    prefix, then one pass per trie depth and one per suffix batch of all nodes together -- far fewer
    tokens than the image prefix alone and no more passes per image than that has plus its depths, with the
    same answers; the provenance says which setting ran."""
    from shovir_core.models.hf import TEXT_NODES_OFF, TRIE_MIN_SAVED_TOKENS

    model = build_tiny("tiny-gemma3", batch_size=64)
    assert model.trie_min_saved_tokens == TRIE_MIN_SAVED_TOKENS == 16
    assert model.provenance()["decoding"]["trie_min_saved_tokens"] == 16
    requests = [r for img in images for r in _arms(img) if r.order != "text_first"]
    model.stats.update(prefill_tokens=0, forward_passes=0)
    packed = model.score_yes_no(requests, answer_tokens=0)
    tokens, passes = model.stats["prefill_tokens"], model.stats["forward_passes"]
    model.trie_min_saved_tokens = TEXT_NODES_OFF
    model.stats.update(prefill_tokens=0, forward_passes=0)
    flat = model.score_yes_no(requests, answer_tokens=0)
    assert model.stats["forward_passes"] == 2 * len(images)  # each image: its prefix, then one suffix batch
    assert tokens < 0.7 * model.stats["prefill_tokens"]
    assert passes <= 2 * len(images) + 2 * len(images)  # + one pass per trie depth (the report, then the question)
    for a, b in zip(packed, flat):
        assert a["logit_yes"] == pytest.approx(b["logit_yes"], abs=1e-4) and a["answer"] == b["answer"]


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_packed_trie_equals_one_node_at_a_time(name, images, monkeypatch):
    """The packed path (prefixes of different nodes left-padded into one batch, each row at its own RoPE
    positions -- multimodal ones on Qwen2-VL) gives the node-at-a-time walk's logits and generated answers,
    with the same prefill tokens and fewer forward passes, in batches small enough to split both the nodes
    and the suffixes."""
    from shovir_core.models import hf

    model = build_tiny(name, batch_size=3)
    model.trie_min_saved_tokens = 1
    requests = [r for img in images for r in _arms(img)]
    model.stats.update(prefill_tokens=0, forward_passes=0)
    packed = model.score_yes_no(requests, answer_tokens=4)
    packed_stats = dict(model.stats)
    monkeypatch.setattr(hf, "packable", lambda cache: False)
    model.stats.update(prefill_tokens=0, forward_passes=0)
    walked = model.score_yes_no(requests, answer_tokens=4)
    assert packed_stats["prefill_tokens"] == model.stats["prefill_tokens"]
    assert packed_stats["forward_passes"] < model.stats["forward_passes"]
    for a, b in zip(packed, walked):
        for key in ("logit_yes", "logit_no", "family_logit_yes", "family_logit_no"):
            assert a[key] == pytest.approx(b[key], abs=1e-4), key
        assert a["generated"] == b["generated"] and a["n_input_tokens"] == b["n_input_tokens"]


def test_stacked_cache_left_pads_each_prefix_and_cut_rows_takes_it_back():
    """Two prefixes of different lengths stack into one batch cache, each right-aligned (zeros and a 0 mask on
    the left padding); cutting each row's real slots gives back the prefix unchanged."""
    from shovir_core.models.packed_cache import compact, cut_rows, packable, stacked_cache

    model = build_tiny("tiny-gemma3")
    caches = []
    for length in (5, 9):
        with torch.no_grad():
            out = model.model(input_ids=torch.arange(3, 3 + length).view(1, -1), use_cache=True)
        caches.append(out.past_key_values)
    assert all(packable(c) for c in caches) and not packable(None)
    prefixes = [compact(c) for c in caches]
    batch, mask = stacked_cache(caches[1], prefixes)
    assert mask.tolist() == [[0] * 4 + [1] * 5, [1] * 9]
    assert all(layer.keys.shape[0] == 2 and layer.keys.shape[2] == 9 for layer in batch.layers)
    assert float(batch.layers[0].keys[0, :, :4].abs().sum()) == 0.0
    for (k, v), layer in zip(prefixes[0], caches[0].layers):
        assert k is layer.keys and v is layer.values  # compact: the cache's own tensors
    back = cut_rows(batch, [4, 0], [9, 9])
    for row, prefix in enumerate(prefixes):
        for (k, v), (k2, v2) in zip(prefix, back[row]):
            assert torch.equal(k, k2) and torch.equal(v, v2)
    assert caches[1].layers[0].keys.shape[0] == 1, "the template's own tensors are left as they were"


@pytest.mark.parametrize("name", TINY_NAMES)
def test_encode_gives_the_processors_own_tensors(name):
    """``_encode`` asks the processor for NumPy arrays and makes them tensors (its image-token check is then
    fast): the keys, dtypes and values of the processor's ``return_tensors="pt"``, for a batch without images,
    a batch of one image's prompts (preprocessed once) and a batch of different images."""
    model = build_tiny(name)
    rng = np.random.default_rng(4)
    one = rng.integers(0, 256, (40, 56), dtype=np.uint8)
    other = rng.integers(0, 256, (48, 40), dtype=np.uint8)
    reqs = _arms(one)[:3]
    cases = [([model.render(ScoreRequest(None, r.question)) for r in reqs], [None] * 3),
             ([model.render(r) for r in reqs], [one] * 3),
             ([model.render(r) for r in reqs[:2]], [one, other])]
    for texts, imgs in cases:
        got = model._encode(texts, imgs)
        kwargs = dict(text=texts, return_tensors="pt", padding=True, add_special_tokens=False)
        if imgs[0] is not None:
            kwargs["images"] = [[_pil(im)] for im in imgs]
        want = model.processor(**kwargs)
        assert set(got) == set(want)
        for key, value in want.items():
            assert torch.is_tensor(got[key]) and got[key].dtype == value.dtype, key
            assert torch.equal(got[key], value), key
