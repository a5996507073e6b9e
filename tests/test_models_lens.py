"""Logit lens and attention knockout on tiny-gemma3, against manual forward passes; ``layer_logits_each``
(several knockouts on one encoding of the requests) and the knockout record's span reuse give exactly what one
``layer_logits`` / ``token_spans`` call each gives (issue 24, item 5: same results, less work)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ScoreRequest, get_model  # noqa: E402
from shovir_core.models.lens import Knockout, decoder_parts, layer_logits, layer_logits_each, token_spans  # noqa: E402
from shovir_core.models.residuals import answer_residuals, image_attention_mass  # noqa: E402
from shovir_core.protocols.modalens_layers import _spans  # noqa: E402

Q = "Does this chest X-ray show edema?"
REPORT = "FINDINGS: There is pulmonary edema. No pneumothorax.\nIMPRESSION: Pulmonary edema."


def _tiny_gemma3(*, batch_size: int):
    m = get_model("tiny-gemma3", seed=3)
    m.batch_size = batch_size
    return m


@pytest.fixture(scope="module")
def vlm():
    return _tiny_gemma3(batch_size=4)


@pytest.fixture(scope="module")
def requests_():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (64, 64), dtype=np.uint8), rng.integers(0, 256, (64, 64), dtype=np.uint8)
    return [ScoreRequest(a, Q, report=REPORT), ScoreRequest(b, Q, report=REPORT),
            ScoreRequest(a, "Does this chest X-ray show any acute cardiopulmonary finding?"),
            ScoreRequest(b, Q, report="No edema.", order="text_first"), ScoreRequest(None, Q, report=REPORT)]


def test_endpoint_equals_the_models_own_readout(vlm, requests_):
    lens = layer_logits(vlm, requests_)
    assert lens.shape == (len(requests_), len(decoder_parts(vlm.model)["layers"]) + 1, 2)
    own = vlm.score_yes_no(requests_)
    np.testing.assert_allclose(lens[:, -1, 0], [o["logit_yes"] for o in own], atol=1e-4)
    np.testing.assert_allclose(lens[:, -1, 1], [o["logit_no"] for o in own], atol=1e-4)
    readout = np.where(lens[:, -1, 0] > lens[:, -1, 1], "yes", "no")
    assert readout.tolist() == [o["readout"] for o in own]


def test_every_layer_matches_hidden_states_of_a_manual_forward(vlm, requests_):
    parts = decoder_parts(vlm.model)
    ids = [vlm.families.yes_id, vlm.families.no_id]
    lens = layer_logits(vlm, requests_[:1])
    batch = vlm._encode([vlm.render(requests_[0])], [requests_[0].image])
    with torch.no_grad():
        out = vlm.model(**batch, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states
    n = len(parts["layers"])
    assert len(hs) == n + 1
    for layer in range(n):  # transformers' last hidden state is already normed; the logits check the end
        h = hs[layer][0, -1]
        with torch.no_grad():
            manual = (parts["norm"](h) @ parts["weight"][ids].T).numpy()
        np.testing.assert_allclose(lens[0, layer], manual, atol=1e-5)
    np.testing.assert_allclose(lens[0, -1], out.logits[0, -1, ids].numpy(), atol=1e-5)


def test_restricted_rows_match_the_full_vocabulary(vlm, requests_):
    family = list(vlm.families.yes_family + vlm.families.no_family)
    lens = layer_logits(vlm, requests_[:2], token_ids=family)
    batch = vlm._encode([vlm.render(r) for r in requests_[:2]], [r.image for r in requests_[:2]])
    with torch.no_grad():
        logits = vlm.model(**batch, use_cache=False).logits[:, -1]
    np.testing.assert_allclose(lens[:, -1], logits[:, family].numpy(), atol=1e-5)


def test_spans_cover_the_report_and_question_text(vlm, requests_):
    for r in (requests_[0], requests_[3]):
        s = token_spans(vlm, r)
        ids = vlm._encode([vlm.render(r)], [r.image])["input_ids"][0].tolist()
        rep = vlm.tokenizer.decode([ids[i] for i in s["report"]])
        que = vlm.tokenizer.decode([ids[i] for i in s["question"]])
        assert r.report in rep and rep.strip().startswith("Report:"), rep
        assert r.question in que, que
        assert len(s["image"]) == 16 and not set(s["image"]) & set(s["report"])
        assert len(s["report_matched"]) == min(len(s["question"]), len(s["report"]))
        assert len(s["image_matched"]) == min(len(s["report"]), 16)
        assert s["answer"][0] == len(ids) - 1


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_blocking_nothing_is_the_baseline_exactly(vlm, requests_, impl):
    vlm.model.set_attn_implementation(impl)
    try:
        base = layer_logits(vlm, requests_)
        n = len(decoder_parts(vlm.model)["layers"])
        none = layer_logits(vlm, requests_, knockout=Knockout.cumulative("none", 0, n))
        np.testing.assert_array_equal(base, none)
        blocked = layer_logits(vlm, requests_[:2], knockout=Knockout.cumulative("report", 0, n))
        assert np.abs(blocked[:, -1] - base[:2, -1]).max() > 1e-4  # blocking the report changes the answer logits
        np.testing.assert_array_equal(blocked[:, :1], base[:2, :1])  # the embeddings are untouched
    finally:
        vlm.model.set_attn_implementation("sdpa")


def test_knockout_at_every_layer_equals_masking_the_report_out_of_the_input(vlm, requests_):
    """Scope non-image at all layers: no later position reads the report, exactly as if its attention-mask
    entries were 0 (image tokens precede the report, so they never read it)."""
    n = len(decoder_parts(vlm.model)["layers"])
    reqs = requests_[:2]
    blocked = layer_logits(vlm, reqs, knockout=Knockout.cumulative("report", 0, n, scope="non_image"))
    parts = decoder_parts(vlm.model)
    ids = [vlm.families.yes_id, vlm.families.no_id]
    for k, r in enumerate(reqs):
        batch = vlm._encode([vlm.render(r)], [r.image])
        mask = batch["attention_mask"].clone()
        mask[0, torch.as_tensor(token_spans(vlm, r)["report"])] = 0
        with torch.no_grad():
            logits = vlm.model(**{**batch, "attention_mask": mask}, use_cache=False).logits[0, -1, ids]
        np.testing.assert_allclose(blocked[k, -1], logits.numpy(), atol=1e-5)
        assert parts["norm"] is not None


def test_single_layer_knockout_leaves_earlier_layers_alone(vlm, requests_):
    base = layer_logits(vlm, requests_[:2])
    one = layer_logits(vlm, requests_[:2], knockout=Knockout.single("report", 1))
    np.testing.assert_array_equal(one[:, :2], base[:, :2])
    assert np.abs(one[:, 2:] - base[:, 2:]).max() > 0


def test_bad_knockouts_raise(vlm, requests_):
    with pytest.raises(ValueError, match="span"):
        Knockout("everything", (0,))
    with pytest.raises(ValueError, match="scope"):
        Knockout("report", (0,), scope="all")
    with pytest.raises(ValueError, match="outside"):
        layer_logits(vlm, requests_[:1], knockout=Knockout.single("report", 9))


def test_blocking_every_image_token_for_text_queries_makes_the_two_images_answer_alike(vlm, requests_):
    """ModaLens App. N.4's image-token knockout: with every non-image query blocked from every image key at
    every layer, the text positions cannot see the image, so two different images give identical logits;
    the random-token control blocks as many positions, the same ones on both images, never the answer."""
    n = len(decoder_parts(vlm.model)["layers"])
    pair = requests_[:2]  # same prompt, different images
    base = layer_logits(vlm, pair)
    assert np.abs(base[0, -1] - base[1, -1]).max() > 1e-4, "the images differ in the plain readout"
    blocked = layer_logits(vlm, pair, knockout=Knockout.cumulative("image", 0, n, scope="non_image"))
    np.testing.assert_allclose(blocked[0], blocked[1], atol=1e-6)
    spans = [token_spans(vlm, r) for r in pair]
    rnd = [s["random_matched"] for s in spans]
    np.testing.assert_array_equal(rnd[0], rnd[1])
    assert len(rnd[0]) == len(spans[0]["image"]) and spans[0]["answer"][0] not in rnd[0]
    assert len(set(rnd[0].tolist())) == len(rnd[0])


def test_spans_encode_the_prompt_and_its_cuts_in_one_call_per_kind(vlm, requests_, monkeypatch):
    """The full prompt and its cuts go through the processor together (one batch with the image, one
    without), and padding the batch changes no span: each equals its one-text-at-a-time encoding."""
    from shovir_core.models import lens

    calls = []
    encode = type(vlm)._encode

    def counting(self, texts, images):
        calls.append(len(texts))
        return encode(self, texts, images)

    for r in requests_:
        text = vlm.render(r)
        cuts = [text, text[:len(text) // 2], text[:5]]
        with_image = [True] + [lens._image_before(vlm, text, len(c)) for c in cuts[1:]]
        single = [encode(vlm, [t], [r.image if w else None])["input_ids"][0].tolist() for t, w in zip(cuts, with_image)]
        with monkeypatch.context() as m:
            m.setattr(type(vlm), "_encode", counting)
            batched = lens._encode_unpadded(vlm, cuts, with_image, r.image)
            calls.clear()
            spans = token_spans(vlm, r)
        assert batched == single
        assert len(calls) <= 2 and sum(calls) == 3 + 2 * (r.report is not None)  # the prompt + two cuts per span
        assert spans["length"][0] == len(single[0])


# -- several knockouts on one encoding ------------------------------------------------------------------

@pytest.fixture(scope="module")
def vlm3():
    return _tiny_gemma3(batch_size=3)  # several padded batches


@pytest.fixture(scope="module")
def ko_requests():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 256, (64, 64), dtype=np.uint8), rng.integers(0, 256, (64, 64), dtype=np.uint8)
    return [ScoreRequest(a, Q, report=REPORT), ScoreRequest(b, Q, report=REPORT),
            ScoreRequest(a, "Does this chest X-ray show any acute cardiopulmonary finding?", report="No edema."),
            ScoreRequest(b, "Does this chest X-ray show any acute cardiopulmonary finding?", report="No edema."),
            ScoreRequest(b, Q, report="No edema.", order="text_first"), ScoreRequest(None, Q, report=REPORT)]


def test_each_knockout_on_one_encoding_equals_one_call_per_knockout(vlm3, ko_requests, monkeypatch):
    kos = [None, Knockout.cumulative("report", 0, 2), Knockout.single("question", 1),
           Knockout.cumulative("image", 0, 2, scope="non_image")]
    alone = [layer_logits(vlm3, ko_requests, knockout=ko) for ko in kos]
    spans = [token_spans(vlm3, r) for r in ko_requests]
    calls = []
    encode = type(vlm3)._encode
    monkeypatch.setattr(type(vlm3), "_encode", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    together = layer_logits_each(vlm3, ko_requests, kos, spans=spans)
    assert len(calls) == 3, "each padded batch is encoded once (6 requests, with and without an image, by 3)"
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(together[0], together[1]), "a knockout that changes nothing would make this vacuous"


def test_the_two_sides_of_a_trial_share_their_spans(vlm3, ko_requests, monkeypatch):
    want = [token_spans(vlm3, r) for r in ko_requests]
    located = []
    monkeypatch.setattr("shovir_core.models.lens.token_spans",
                        lambda m, r: located.append(r) or token_spans(m, r))
    got = _spans(vlm3, ko_requests)
    assert len(located) == 4, "requests 0/1 and 2/3 differ only in the image's pixels: located once each"
    for a, b in zip(want, got):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_a_cases_questions_share_their_prefix_and_read_what_whole_prompts_read(family):
    """A case side's questions (one image, one report) prefill the image and report once; every layer's
    readout equals running each whole prompt (prefix reuse off) -- image first, with and without the
    report; text first the questions come before the image, so those run whole."""
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 256, (64, 64), dtype=np.uint8), rng.integers(0, 256, (64, 64), dtype=np.uint8)
    qs = [Q, "Does this chest X-ray show cardiomegaly?", "Does this chest X-ray show any acute cardiopulmonary finding?"]
    reqs = [ScoreRequest(img, q, report=rep, order=order) for img, rep in ((a, REPORT), (b, REPORT), (a, None))
            for order in ("image_first", "text_first") for q in qs] + [ScoreRequest(None, Q, report=REPORT)]
    shared = get_model(family, seed=3)
    shared.batch_size = 2  # a group's suffixes span several batches
    whole = get_model(family, seed=3)
    whole.prefix_reuse = False
    got, want = layer_logits(shared, reqs), layer_logits(whole, reqs)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # the image-first groups (two with the report, one without) ran their shared prefix once
    first = [r for r in reqs if r.order == "image_first" and r.image is not None]
    tokens = sum(len(whole._encode_group([r])[1][0]) for r in first)
    assert 0 < shared.stats["prefill_tokens"] < 0.8 * tokens
    # the probes' features are the same streams
    np.testing.assert_allclose(answer_residuals(shared, reqs).numpy(), answer_residuals(whole, reqs).numpy(), atol=2e-5)
    # and the probes' attention-mass baseline (eager attention over the prefix's cache), all layers or some
    before = shared.stats["prefill_tokens"]
    mass = image_attention_mass(shared, reqs)
    assert 0 < shared.stats["prefill_tokens"] - before < 0.8 * tokens, "the image-first groups' prefixes ran once"
    np.testing.assert_allclose(mass, image_attention_mass(whole, reqs), atol=1e-5)
    assert np.all(mass[[i for i, r in enumerate(reqs) if r.image is not None]] > 0) and mass[-1] == 0
    np.testing.assert_allclose(image_attention_mass(shared, reqs, layers=[0, 1]),
                               image_attention_mass(whole, reqs, layers=[0, 1]), atol=1e-5)


@pytest.mark.parametrize("family", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_groups_of_different_prefixes_run_packed_and_read_what_whole_prompts_read(family):
    """Several cases' groups (images and reports of different lengths) are prefilled in one left-padded pass
    where the model allows it (Gemma-3, LLaVA-NeXT; Qwen2-VL's multimodal RoPE prefills each group alone) and their
    questions' suffixes run packed across groups, each after its own prefix; the streams, readouts and
    attention masses equal whole prompts."""
    rng = np.random.default_rng(2)
    imgs = [rng.integers(0, 256, (64, 64), dtype=np.uint8) for _ in range(3)]
    qs = [Q, "Does this chest X-ray show cardiomegaly?", "Does this chest X-ray show any acute cardiopulmonary finding?"]
    reps = [REPORT, "IMPRESSION: No acute disease.", None]
    reqs = [ScoreRequest(img, q, report=rep) for img, rep in zip(imgs, reps) for q in qs]
    shared = get_model(family, seed=3)
    shared.batch_size = 4  # 9 suffixes: batches of 4, 4 and 1 mixing the groups
    whole = get_model(family, seed=3)
    whole.prefix_reuse = False
    got, want = layer_logits(shared, reqs), layer_logits(whole, reqs)
    np.testing.assert_allclose(got, want, atol=2e-5)
    prefills = 3 if family == "tiny-qwen2vl" else 1  # LLaVA-NeXT's images of one size batch as Gemma-3's
    assert shared.stats["forward_passes"] == prefills + 3, "3 packed suffix passes instead of one or more per group"
    np.testing.assert_allclose(answer_residuals(shared, reqs).numpy(), answer_residuals(whole, reqs).numpy(), atol=2e-5)
    np.testing.assert_allclose(image_attention_mass(shared, reqs), image_attention_mass(whole, reqs), atol=1e-5)


@pytest.mark.parametrize("family", ["tiny-gemma3", "tiny-qwen2vl", "tiny-llava-next"])
def test_knockouts_resumed_from_the_clean_pass_equal_whole_passes(family, ko_requests):
    """A knockout starting at layer s reuses the clean pass's layers before s and runs layers s... again from
    the recorded input of layer s: element for element the arrays of whole passes (``resume=False``), for
    cumulative and single-layer knockouts, each scope, and a start-0 knockout beside them (a whole pass)."""
    from shovir_core.models.tiny import build_tiny

    vlm = build_tiny(family, dims={"layers": 4}, batch_size=3)
    kos = [None, Knockout.cumulative("report", 1, 4), Knockout.single("question", 2),
           Knockout.cumulative("image", 3, 4, scope="non_image"), Knockout.cumulative("report", 0, 4)]
    spans = [token_spans(vlm, r) for r in ko_requests]
    calls = []
    layer = decoder_parts(vlm.model)["layers"][0]
    handle = layer.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        resumed = layer_logits_each(vlm, ko_requests, kos, spans=spans)
        n_resumed = len(calls)
        whole = layer_logits_each(vlm, ko_requests, kos, spans=spans, resume=False)
    finally:
        handle.remove()
    assert n_resumed < len(calls) - n_resumed, "resumed knockouts skip layer 0"
    for a, b in zip(resumed, whole):
        np.testing.assert_array_equal(a, b)
    assert all(not np.array_equal(whole[0], w) for w in whole[1:]), "every knockout changes something"
