"""Tuned lens, answer residuals and image saliency on tiny-gemma3, against the logit lens and manual passes."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ScoreRequest, get_model  # noqa: E402
from shovir_core.models import tuned_lens as tl  # noqa: E402
from shovir_core.models.lens import _project, decoder_parts, layer_logits  # noqa: E402
from shovir_core.models.residuals import answer_residuals, image_attention_mass, image_input_gradient  # noqa: E402

Q = "Does this chest X-ray show edema?"
TEXTS = ["The heart is normal in size. There is no pleural effusion.", "Mild cardiomegaly. Small left effusion.",
         "No acute cardiopulmonary abnormality.", "Lungs are clear. No pneumothorax.",
         "Stable left lower lobe atelectasis.", "Low lung volumes with bibasilar opacities."] * 3


@pytest.fixture(scope="module")
def vlm():
    m = get_model("tiny-gemma3", seed=3)
    m.batch_size = 3
    return m


@pytest.fixture(scope="module")
def requests_():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (64, 64), dtype=np.uint8), rng.integers(0, 256, (64, 64), dtype=np.uint8)
    return [ScoreRequest(a, Q, report="Pulmonary edema."), ScoreRequest(b, Q), ScoreRequest(a, Q, order="text_first"),
            ScoreRequest(b, "Does this chest X-ray show any acute cardiopulmonary finding?")]


def test_answer_residuals_are_the_logit_lens(vlm, requests_):
    resid = answer_residuals(vlm, requests_)
    parts = decoder_parts(vlm.model)
    assert resid.shape == (len(requests_), len(parts["layers"]) + 1, parts["weight"].shape[1])
    ids = torch.tensor([vlm.families.yes_id, vlm.families.no_id])
    with torch.no_grad():
        proj = _project(resid, parts, ids).numpy()
    np.testing.assert_allclose(proj, layer_logits(vlm, requests_), atol=1e-5)


def test_identity_translators_equal_the_logit_lens_exactly(vlm, requests_):
    lens = tl.TunedLens.for_model(vlm.model)
    out = tl.answer_readouts(vlm, requests_, lens)
    np.testing.assert_array_equal(out["tuned"], out["logit"])
    np.testing.assert_array_equal(out["kl_tuned"], out["kl_logit"])
    np.testing.assert_allclose(out["logit"], layer_logits(vlm, requests_), atol=1e-5)
    assert np.all(out["kl_logit"][:, -1] == 0) and np.all(out["kl_logit"] >= -1e-6)
    kl = tl.corpus_kl(vlm.model, vlm.tokenizer, TEXTS[:6], lens)
    np.testing.assert_array_equal(kl["tuned"], kl["logit"])


def test_kl_is_the_manual_full_vocabulary_kl(vlm, requests_):
    lens = tl.TunedLens.for_model(vlm.model)
    out = tl.answer_readouts(vlm, requests_[:1], lens)
    resid = answer_residuals(vlm, requests_[:1])[0]
    parts = decoder_parts(vlm.model)
    with torch.no_grad():
        full = (parts["norm"](resid) @ parts["weight"].T).double()
    p = torch.softmax(full[-1], -1)
    manual = (p * (torch.log(p) - torch.log_softmax(full, -1))).sum(-1).numpy()
    np.testing.assert_allclose(out["kl_logit"][0], manual, atol=1e-5)


def test_training_lowers_the_kl_and_is_deterministic(vlm):
    before = tl.corpus_kl(vlm.model, vlm.tokenizer, TEXTS, tl.TunedLens.for_model(vlm.model))
    weights = [p.detach().clone() for p in vlm.model.parameters()]
    lens, info = tl.train_tuned_lens(vlm.model, vlm.tokenizer, TEXTS, steps=25, seed=0, batch_texts=4, lr=3e-3)
    after = tl.corpus_kl(vlm.model, vlm.tokenizer, TEXTS, lens)
    assert after["tuned"][:, :-1].mean() < 0.8 * before["logit"][:, :-1].mean()
    assert np.all(after["tuned"][:, :-1].mean(0) < after["logit"][:, :-1].mean(0))
    assert info["loss"][-1] < info["loss"][0]
    assert all(torch.equal(a, b) for a, b in zip(weights, vlm.model.parameters())), "the model is untouched"
    again, info2 = tl.train_tuned_lens(vlm.model, vlm.tokenizer, TEXTS, steps=25, seed=0, batch_texts=4, lr=3e-3)
    assert info2["sha256"] == info["sha256"] and info2["loss"] == info["loss"]
    other, info3 = tl.train_tuned_lens(vlm.model, vlm.tokenizer, TEXTS, steps=25, seed=1, batch_texts=4, lr=3e-3)
    assert info3["sha256"] != info["sha256"]


def test_restricted_kl_ids_and_bad_inputs(vlm):
    ids = [vlm.families.yes_id, vlm.families.no_id, 5, 7]
    lens, info = tl.train_tuned_lens(vlm.model, vlm.tokenizer, TEXTS[:6], steps=2, seed=0, kl_ids=ids)
    assert info["kl_vocab"] == 4
    with pytest.raises(ValueError, match="kl_ids"):
        tl.train_tuned_lens(vlm.model, vlm.tokenizer, TEXTS[:6], steps=1, seed=0, kl_ids=[10 ** 7, 1])
    with pytest.raises(ValueError, match="corpus"):
        tl.corpus_texts("wikitext")
    with pytest.raises(ValueError, match="layer"):
        lens.translate(torch.zeros(2, lens.d_model), lens.n_layers + 1)
    assert len(tl.corpus_texts()) > 1000


def test_saliency_scores(vlm, requests_):
    mass = image_attention_mass(vlm, requests_)
    assert mass.shape == (4,) and np.all((mass > 0) & (mass < 1))
    assert vlm.model.config._attn_implementation == "sdpa", "eager attention is switched back"
    with torch.no_grad():  # manual: eager forward with attention weights
        vlm.model.set_attn_implementation("eager")
        batch = vlm._encode([vlm.render(requests_[0])], [requests_[0].image])
        att = vlm.model(**batch, output_attentions=True, use_cache=False).attentions
        vlm.model.set_attn_implementation("sdpa")
    img = (batch["input_ids"][0] == vlm.model.config.image_token_id).numpy()
    manual = np.mean([a[0, :, -1].mean(0).numpy()[img].sum() for a in att])
    np.testing.assert_allclose(mass[0], manual, rtol=1e-5)
    grad = image_input_gradient(vlm, requests_[:2])
    assert grad.shape == (2,) and np.all(grad > 0)
    assert all(p.requires_grad for p in vlm.model.parameters()) or not any(p.requires_grad for p in vlm.model.parameters())
    with pytest.raises(ValueError, match="image"):
        image_input_gradient(vlm, [ScoreRequest(None, Q)])


def test_batched_input_gradient_equals_one_request_at_a_time(vlm, requests_):
    together = image_input_gradient(vlm, requests_)
    alone = np.concatenate([image_input_gradient(vlm, [r]) for r in requests_])
    np.testing.assert_allclose(together, alone, rtol=1e-4)
    # the streams read in the gradient's passes are the residuals', and the gradients are unchanged
    grad, streams = image_input_gradient(vlm, requests_, streams=True)
    np.testing.assert_array_equal(grad, together)
    np.testing.assert_allclose(streams.numpy(), answer_residuals(vlm, requests_).numpy(), atol=2e-5)


def test_bfloat16_models_work(requests_):
    """The GPU profiles run in bf16: the identity lens still equals the logit lens, training and saliency run."""
    m = get_model("tiny-gemma3", seed=3, dtype="bfloat16")
    assert m.model.dtype == torch.bfloat16
    lens = tl.TunedLens.for_model(m.model)
    out = tl.answer_readouts(m, requests_[:2], lens)
    np.testing.assert_array_equal(out["tuned"], out["logit"])
    np.testing.assert_allclose(out["logit"], layer_logits(m, requests_[:2]), atol=1e-2)
    _, info = tl.train_tuned_lens(m.model, m.tokenizer, TEXTS[:4], steps=3, seed=0, batch_texts=2)
    assert np.isfinite(info["loss"]).all()
    assert np.isfinite(image_input_gradient(m, requests_[:2])).all()
