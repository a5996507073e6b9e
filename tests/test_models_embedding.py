"""Vision embeddings of the adapters, their cache, and the planted-distance reference model."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.models import ScoreRequest, cached, get_model
from shovir_core.models.reference import PLANT_NOISE, planted_flip_probability


def _images(n, seed=0, size=32):
    rng = np.random.default_rng(seed)
    return [(rng.random((size, size)) * 255).astype(np.uint8) for _ in range(n)]


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-llava", "tiny-qwen2vl"])
def test_tiny_transformers_embed_with_their_vision_tower(name):
    model = get_model(name)
    a, b = _images(2, seed=1)
    ea, eb = model.vision_embedding([a, b])
    assert ea.ndim == 1 and ea.shape == eb.shape and np.isfinite(ea).all()
    assert not np.allclose(ea, eb), "different images, different embeddings"
    np.testing.assert_allclose(model.vision_embedding([b])[0], eb, rtol=0, atol=1e-6)  # independent of the call
    if name == "tiny-gemma3":  # SigLIP: the mean over patches of the tower's last hidden state
        import torch

        pv = model.processor.image_processor(images=[__import__("PIL.Image").Image.fromarray(a).convert("RGB")],
                                             return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            hidden = model.model.model.vision_tower(pixel_values=pv).last_hidden_state
        np.testing.assert_allclose(ea, hidden.float().mean(dim=(0, 1)).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="no image"):
        model.vision_embedding([None])


def test_reference_models_embed_with_the_cnn_penultimate_features():
    import torch

    from shovir_core.models.cnn import preprocess
    from shovir_core.models.protocol import to_gray_float
    from shovir_core.models.reference import _reference_cnn

    model = get_model("ref-anchored@0.5")
    img = _images(1, seed=2, size=64)[0]
    e = model.vision_embedding([img])[0]
    cfg = model.params["cnn"]
    x = (preprocess(to_gray_float(img)) - cfg["mean"]) / cfg["std"]
    net = _reference_cnn()
    with torch.no_grad():
        feats = net[:-1](torch.from_numpy(x[None, None].astype(np.float32))).double().numpy()[0]
        logits = net[-1](torch.from_numpy(feats[None].astype(np.float32))).double().numpy()[0]
    np.testing.assert_allclose(e, feats)
    assert e.shape == (64,)
    # the features are what the classifier's head reads: they reproduce its probabilities
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), model.probabilities([img])[0], atol=1e-5)


def test_embeddings_are_cached(tmp_path):
    model = cached(get_model("tiny-gemma3"), directory=tmp_path, progress=False)
    imgs = _images(3, seed=3)
    first = model.vision_embedding(imgs + [imgs[0]])
    assert model.computed == 3, "a repeated image is embedded once"
    again = cached(get_model("tiny-gemma3"), directory=tmp_path, progress=False)
    second = again.vision_embedding(imgs)
    assert again.computed == 0
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(NotImplementedError, match="no vision tower"):
        from shovir_core.models.protocol import VLM

        VLM().vision_embedding(imgs)


def test_planted_model_flips_with_the_code_angle():
    model = get_model("ref-distance-planted")
    imgs = _images(3000, seed=4, size=8)
    c, d = imgs[:1500], imgs[1500:]
    codes_c, codes_d = np.stack(model.vision_embedding(c)), np.stack(model.vision_embedding(d))
    assert codes_c.shape == (1500, 2)
    p = planted_flip_probability(codes_c, codes_d)
    q = "Does this chest X-ray show edema?"
    flips = []
    for finding in ("Edema", "Cardiomegaly", "composite"):
        rc = model.score_yes_no([ScoreRequest(x, q, finding=finding) for x in c])
        rd = model.score_yes_no([ScoreRequest(x, q, finding=finding) for x in d])
        flips.append([a["readout"] != b["readout"] for a, b in zip(rc, rd)])
    flips = np.asarray(flips, dtype=float).mean(axis=0)     # per pair, over three independent questions
    eps = 2 * PLANT_NOISE * (1 - PLANT_NOISE)
    assert p.min() >= eps - 1e-12 and p.max() <= 1 - eps + 1e-12
    order = np.argsort(p)
    for part in np.array_split(order, 5):                  # the flip rate follows the planted curve
        assert abs(flips[part].mean() - p[part].mean()) < 0.05
    assert abs(flips.mean() - p.mean()) < 0.02


def test_planted_model_ignores_the_report():
    model = get_model("ref-distance-planted")
    imgs = _images(20, seed=5, size=8)
    q = "Does this chest X-ray show edema?"
    a = model.score_yes_no([ScoreRequest(x, q, finding="Edema") for x in imgs])
    b = model.score_yes_no([ScoreRequest(x, q, report="Large edema. No effusion.", finding="Edema") for x in imgs])
    assert [r["margin"] for r in a] == [r["margin"] for r in b]
    assert len({r["readout"] for r in a}) == 2, "answers vary with the image"
