"""Residual patching and steering on tiny-gemma3, against plain and manual forward passes."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ScoreRequest, get_model  # noqa: E402
from shovir_core.models import interventions as iv  # noqa: E402
from shovir_core.models.lens import _project, decoder_parts, layer_logits  # noqa: E402

Q = "Does this chest X-ray show edema?"
REPORT = "FINDINGS: There is pulmonary edema. No pneumothorax.\nIMPRESSION: Pulmonary edema."


@pytest.fixture(scope="module")
def vlm():
    m = get_model("tiny-gemma3", seed=3)
    m.batch_size = 2  # several chunks, so padding and chunking are exercised
    return m


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (64, 64), dtype=np.uint8) for _ in range(3)]


@pytest.fixture(scope="module")
def present(images):
    return [ScoreRequest(images[0], Q, report=REPORT), ScoreRequest(images[1], Q, report="No edema."),
            ScoreRequest(images[2], "Does this chest X-ray show any acute cardiopulmonary finding?", report=REPORT)]


@pytest.fixture(scope="module")
def absent(present):
    return [ScoreRequest(r.image, r.question) for r in present]


def _n_layers(vlm):
    return len(decoder_parts(vlm.model)["layers"])


def test_plain_readout_is_the_models_own(vlm, present):
    own = vlm.score_yes_no(present)
    plain = iv.readout_logits(vlm, present)
    np.testing.assert_allclose(plain[:, 0], [o["logit_yes"] for o in own], atol=1e-4)
    np.testing.assert_allclose(plain[:, 1], [o["logit_no"] for o in own], atol=1e-4)


def test_residuals_are_the_lens_streams(vlm, present):
    n = _n_layers(vlm)
    res = iv.residuals(vlm, present, layers=range(n), last=3)
    assert res.shape[:3] == (len(present), n, 3)
    parts = decoder_parts(vlm.model)
    ids = torch.tensor([vlm.families.yes_id, vlm.families.no_id])
    with torch.inference_mode():
        proj = _project(res[:, :, -1], parts, ids).numpy()
    np.testing.assert_allclose(proj, layer_logits(vlm, present)[:, 1:], atol=1e-5)


def test_answer_residuals_at_share_each_images_prefix_and_equal_whole_prompts(vlm, images):
    """Several questions on one image and report (the steering fit's requests): one prefill per group."""
    qs = [Q, "Does this chest X-ray show any acute cardiopulmonary finding?", "Is there a pneumothorax?"]
    reqs = [ScoreRequest(images[i], q, report=rep) for i, rep in ((0, REPORT), (1, "No edema.")) for q in qs]
    layers = [0, _n_layers(vlm) - 1]
    before = vlm.stats["prefill_tokens"]
    resid, logits = iv.answer_residuals_at(vlm, reqs, layers=layers)
    ran = vlm.stats["prefill_tokens"] - before
    assert resid.shape == (len(reqs), len(layers), decoder_parts(vlm.model)["weight"].shape[1])
    np.testing.assert_allclose(resid.numpy(), iv.residuals(vlm, reqs, layers=layers, last=1)[:, :, -1].numpy(), atol=2e-5)
    np.testing.assert_allclose(logits, iv.readout_logits(vlm, reqs), atol=1e-4)
    # each image and report ran once for its three questions: well under the whole prompts' tokens
    whole = sum(len(iv.token_ids(vlm, r)) for r in reqs)
    assert 0 < ran < 0.6 * whole
    with pytest.raises(ValueError, match="outside"):
        iv.answer_residuals_at(vlm, reqs, layers=[_n_layers(vlm)])


@pytest.mark.parametrize("scope", ["answer", "suffix"])
def test_patching_with_the_runs_own_residual_is_the_identity(vlm, present, absent, scope):
    plain = iv.readout_logits(vlm, present)
    n_pos = [1] * len(present) if scope == "answer" else [iv.common_suffix(vlm, p, a) for p, a in zip(present, absent)]
    own = iv.residuals(vlm, present, layers=range(_n_layers(vlm)), last=max(n_pos))
    for layer in range(_n_layers(vlm)):
        out = iv.patched_logits(vlm, present, layer=layer, donor=own[:, layer], n_positions=n_pos)
        np.testing.assert_allclose(out, plain, atol=1e-5)


def test_patching_every_position_at_layer_0_gives_the_donors_output(vlm, images):
    # same text, other image: the image tokens are the same ids, so the common suffix is the whole prompt
    rec = [ScoreRequest(images[0], Q, report=REPORT), ScoreRequest(images[1], Q)]
    don = [ScoreRequest(images[2], Q, report=REPORT), ScoreRequest(images[0], Q)]
    n_pos = [iv.common_suffix(vlm, r, d) for r, d in zip(rec, don)]
    assert n_pos == [len(iv.token_ids(vlm, r)) for r in rec]
    donor = iv.residuals(vlm, don, layers=[0], last=max(n_pos))[:, 0]
    out = iv.patched_logits(vlm, rec, layer=0, donor=donor, n_positions=n_pos)
    np.testing.assert_allclose(out, iv.readout_logits(vlm, don), atol=1e-5)
    assert not np.allclose(iv.readout_logits(vlm, rec), iv.readout_logits(vlm, don), atol=1e-5)


def test_patching_the_answer_position_after_the_last_layer_gives_the_donors_readout(vlm, present, absent):
    last = _n_layers(vlm) - 1
    donor = iv.residuals(vlm, absent, layers=[last])[:, 0]
    out = iv.patched_logits(vlm, present, layer=last, donor=donor, n_positions=[1] * len(present))
    np.testing.assert_allclose(out, iv.readout_logits(vlm, absent), atol=1e-5)


def test_suffix_patching_replaces_exactly_the_common_suffix(vlm, present, absent):
    """A manual forward: the patched run's layer-0 output equals the donor's on the suffix and the
    recipient's before it, and the readout is what the later layers make of that stream."""
    parts = decoder_parts(vlm.model)
    n_pos = [iv.common_suffix(vlm, p, a) for p, a in zip(present, absent)]
    assert all(1 < k < len(iv.token_ids(vlm, a)) for k, a in zip(n_pos, absent))
    donor = iv.residuals(vlm, absent, layers=[0], last=max(n_pos))[:, 0]
    r, k = present[0], n_pos[0]
    seen = {}

    def grab(module, args, kwargs):
        seen["in1"] = kwargs.get("hidden_states", args[0] if args else None).clone()

    h = parts["layers"][1].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        patched = iv.patched_logits(vlm, [r], layer=0, donor=donor[:1], n_positions=[k])
    finally:
        h.remove()
    mine = iv.residuals(vlm, [r], layers=[0], last=len(iv.token_ids(vlm, r)))[0, 0]
    expect = mine.clone()
    expect[-k:] = donor[0, -k:]
    torch.testing.assert_close(seen["in1"][0], expect, atol=1e-6, rtol=0)
    assert not np.allclose(patched, iv.readout_logits(vlm, [r]), atol=1e-6)


def test_zero_steer_is_the_plain_readout(vlm, present):
    d = int(decoder_parts(vlm.model)["weight"].shape[1])
    plain = iv.readout_logits(vlm, present)
    for layers in ([0], range(_n_layers(vlm))):
        np.testing.assert_allclose(iv.steered_logits(vlm, present, vectors=np.zeros(d, dtype=np.float32), layers=layers),
                                   plain, atol=1e-6)


def test_a_steer_at_the_last_layer_equals_the_projection_by_hand(vlm, present):
    parts = decoder_parts(vlm.model)
    last = _n_layers(vlm) - 1
    rng = np.random.default_rng(1)
    vec = torch.tensor(rng.normal(size=(len(present), parts["weight"].shape[1])) * 3, dtype=torch.float32)
    res = iv.residuals(vlm, present, layers=[last])[:, 0, -1]
    ids = torch.tensor([vlm.families.yes_id, vlm.families.no_id])
    with torch.inference_mode():
        manual = _project(res + vec, parts, ids).numpy()
    np.testing.assert_allclose(iv.steered_logits(vlm, present, vectors=vec, layers=[last]), manual, atol=1e-4)


def test_a_steer_at_an_inner_layer_equals_patching_the_shifted_residual(vlm, present):
    """Steering layer L by v = patching the answer position after L with (own residual + v), and
    steering every layer = the composition of per-layer patches computed layer by layer."""
    n = _n_layers(vlm)
    rng = np.random.default_rng(2)
    d = int(decoder_parts(vlm.model)["weight"].shape[1])
    v = torch.tensor(rng.normal(size=d) * 2, dtype=torch.float32)
    own = iv.residuals(vlm, present, layers=[0])[:, 0]
    shifted = own.clone()
    shifted[:, -1] += v
    steer = iv.steered_logits(vlm, present, vectors=v, layers=[0])
    patch = iv.patched_logits(vlm, present, layer=0, donor=shifted, n_positions=[1] * len(present))
    np.testing.assert_allclose(steer, patch, atol=1e-5)
    assert not np.allclose(steer, iv.readout_logits(vlm, present), atol=1e-4)
    # every layer, by hand: run the steer at layers 0..j, read the residual after j, add v, patch j+1 ...
    # equivalently, the every-layer steer equals steering 0..n-2 and adding v to the final residual by hand
    parts = decoder_parts(vlm.model)
    seen = {}
    h = parts["layers"][n - 1].register_forward_hook(
        lambda m, a, o: seen.__setitem__("out", (o[0] if isinstance(o, tuple) else o)[:, -1].clone()))
    try:
        iv.steered_logits(vlm, present[:1], vectors=v, layers=range(n - 1))
    finally:
        h.remove()
    ids = torch.tensor([vlm.families.yes_id, vlm.families.no_id])
    with torch.inference_mode():
        manual = _project(seen["out"] + v, parts, ids).numpy()
    np.testing.assert_allclose(iv.steered_logits(vlm, present[:1], vectors=v, layers=range(n)), manual, atol=1e-4)


def test_directions_and_errors(vlm, present):
    x = np.array([[1.0, 2.0], [3.0, 2.0], [0.0, 0.0], [2.0, 0.0]])
    np.testing.assert_allclose(iv.mean_difference(x, [True, True, False, False]), [1.0, 2.0])
    r = iv.random_direction(np.array([1.0, 2.0]), rng=np.random.default_rng(0))
    assert np.isclose(np.linalg.norm(r), np.sqrt(5.0))
    with pytest.raises(ValueError, match="both classes"):
        iv.mean_difference(x, [True] * 4)
    with pytest.raises(ValueError, match="outside"):
        iv.steered_logits(vlm, present, vectors=np.zeros(4), layers=[99])
    with pytest.raises(ValueError, match="need"):
        iv.steered_logits(vlm, present, vectors=np.zeros(3), layers=[0])
    donor = iv.residuals(vlm, present, layers=[0], last=1)[:, 0]
    with pytest.raises(ValueError, match="n_positions"):
        iv.patched_logits(vlm, present, layer=0, donor=donor, n_positions=[2] * len(present))


def test_bfloat16_patching_and_steering_keep_their_identities(present, absent):
    """In bf16 (the GPU precision) the own-residual patch and the zero steer are still the plain readout,
    and the last-layer answer patch is the donor's readout."""
    m = get_model("tiny-gemma3", seed=3, device="cpu", dtype="bfloat16")
    m.batch_size = 2
    n = len(decoder_parts(m.model)["layers"])
    plain = iv.readout_logits(m, present)
    own = iv.residuals(m, present, layers=[0, n - 1])
    assert own.dtype == torch.bfloat16
    np.testing.assert_array_equal(iv.patched_logits(m, present, layer=0, donor=own[:, 0], n_positions=[1] * 3), plain)
    d = int(decoder_parts(m.model)["weight"].shape[1])
    np.testing.assert_array_equal(iv.steered_logits(m, present, vectors=np.zeros(d, np.float32), layers=range(n)), plain)
    donor = iv.residuals(m, absent, layers=[n - 1])[:, 0]
    np.testing.assert_allclose(iv.patched_logits(m, present, layer=n - 1, donor=donor, n_positions=[1] * 3),
                               iv.readout_logits(m, absent), atol=1e-2)


@pytest.mark.parametrize("scope", ["answer", "suffix"])
def test_patches_resumed_from_one_clean_pass_equal_one_whole_patched_pass_per_layer(vlm, present, absent, scope):
    """patched_logits_each runs each batch clean once and each patch only from the layer after it: the
    readouts of every layer (the last one included) are one patched_logits call per layer's."""
    n = _n_layers(vlm)
    n_pos = [1] * len(present) if scope == "answer" else [iv.common_suffix(vlm, p, a) for p, a in zip(present, absent)]
    donor = iv.residuals(vlm, absent, layers=range(n), last=max(n_pos))
    each = iv.patched_logits_each(vlm, present, layers=range(n), donor=donor, n_positions=n_pos)
    want = np.stack([iv.patched_logits(vlm, present, layer=layer, donor=donor[:, layer], n_positions=n_pos)
                     for layer in range(n)], axis=1)
    np.testing.assert_allclose(each, want, atol=1e-5)
    plain = iv.readout_logits(vlm, present)
    assert not np.allclose(want, plain[:, None], atol=1e-3), "patches that change nothing would make this vacuous"
    with pytest.raises(ValueError, match="donor"):
        iv.patched_logits_each(vlm, present, layers=[0], donor=donor, n_positions=n_pos)


def test_steering_jobs_on_one_encoding_equal_one_steered_pass_each(vlm, present):
    """steered_logits_each resumes a one-layer steer from the clean pass and runs the others whole: every job's
    readouts are one steered_logits call's."""
    n = _n_layers(vlm)
    d = int(decoder_parts(vlm.model)["weight"].shape[1])
    rng = np.random.default_rng(0)
    per_request = (rng.normal(size=(len(present), d)) * 3).astype(np.float32)
    shared = (rng.normal(size=d) * 3).astype(np.float32)
    jobs = [(per_request, [0]), (shared, [n - 1]), (shared, list(range(n))), (per_request, [n - 2])]
    got, clean = iv.steered_logits_each(vlm, present, jobs)
    plain = iv.readout_logits(vlm, present)
    np.testing.assert_allclose(clean, plain, atol=1e-5)
    for (vec, layers), out in zip(jobs, got):
        want = iv.steered_logits(vlm, present, vectors=vec, layers=layers)
        np.testing.assert_allclose(out, want, atol=1e-5)
        assert not np.allclose(out, plain, atol=1e-3), "a steer that changes nothing would make this vacuous"
