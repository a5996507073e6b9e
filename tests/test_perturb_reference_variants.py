"""Issue 29: the reference-code preset computes its p grid once per item and stays byte-identical to the
authors' algorithm called per p; its variants (any option overridden) keep the authors' blending weight."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.perturb import occlude_grid, resolve_preset
from shovir_core.perturb import reference as ref
from shovir_core.perturb.conditions import _layout, _scaled
from shovir_core.perturb.rng import item_rng

PS = (0.0, 0.2, 0.6, 1.0)


def _item(seed: int, h: int = 120, w: int = 150):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.clip(110 + 90 * np.exp(-((xx - 0.5) ** 2 + (yy - 0.5) ** 2) / 0.1) + rng.normal(0, 12, (h, w)), 0, 255)
    boxes = [("Atelectasis", 3.4, 2.2, 60.7, 50.1), ("Edema", 90.0, 70.5, 149.0, 119.0),
             ("Atelectasis", 100.2, 5.0, 130.9, 30.0)]
    return img.astype(np.uint8), boxes


@pytest.mark.parametrize("condition", ["OCO", "DOCO", "RO"])
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_grid_equals_the_authors_algorithm_per_p(condition, seed):
    """Each p of the preset's grid equals the reference function called alone with that p's fresh stream."""
    img, boxes = _item(seed)
    target = "Atelectasis"
    grid = occlude_grid(img, boxes, condition=condition, target=target, ps=PS, seed=seed, item_id=f"i{seed}",
                        preset="reference-code")
    work = _layout(_scaled(img, resolve_preset("reference-code")), resolve_preset("reference-code"))
    for (out, info), p in zip(grid, PS):
        (stream,) = item_rng(seed, f"i{seed}", target, condition, n=1)
        if condition == "RO":
            want, _ = ref.random_occlusion(work, [(b[1], b[2], b[3], b[4]) for b in boxes], p, stream)
        else:
            used = [(b[1], b[2], b[3], b[4]) for b in boxes if (b[0] == target) == (condition == "OCO")]
            want, _, _ = ref.object_class_occlusion(work, used, p, stream)
        assert np.array_equal(out, want), (condition, p)


def test_fast_statistics_equal_the_reference_statistics():
    rng = np.random.default_rng(7)
    for n in (1500, 40_000, 123_457):
        for px in (np.repeat(rng.normal(128, 40, (n, 1)).clip(0, 255).astype(np.uint8), 3, axis=1),
                   rng.integers(0, 256, (n, 3)).astype(np.uint8)):
            c1, s1, e1 = ref.robust_center_scale(px)
            c2, s2, e2 = ref.robust_center_scale_u8(px)
            assert np.array_equal(c1, c2) and np.array_equal(s1, s2) and e1 == e2


@pytest.mark.parametrize("p", [0.2, 0.6, 1.0])
def test_variants_keep_the_authors_blending_weight(p):
    """A variant of reference-code runs on the vectorised engine with the authors' weight: with a black fill the
    output is floor(x (1 - a)), equal to the authors' blend of the same black fill (a within 1/255: here exact);
    the Gaussian feather of the paper preset reaches further and differs."""
    img = np.full((120, 150), 200, dtype=np.uint8)
    img[0, 0] = 0  # min-max scaling maps 200 to 255
    boxes = [("Atelectasis", 40.0, 30.0, 90.0, 80.0)]
    variant = resolve_preset({"base": "reference-code", "fill": "black"})
    assert variant.engine == "vectorised" and variant.feather_kernel == "pillow"
    out, _ = occlude_grid(img, boxes, condition="OCO", target="Atelectasis", ps=(p,), seed=0, item_id="v",
                          preset=variant)[0]
    work = _layout(_scaled(img, variant), variant)
    union = np.zeros(work.shape[:2], dtype=bool)
    union[30:80, 40:90] = True
    authors = ref.blend_region(work, np.zeros_like(work), union, p, feather_radius=6)
    assert np.array_equal(out, authors)
    a_variant = 1 - out[..., 0].astype(float) / 255
    a_authors = ref.feather_alpha(union, p, 6.0)
    assert np.abs(a_variant - a_authors)[1:, 1:].max() <= 1 / 255 + 1e-9
    gaussian = resolve_preset({"base": "reference-code", "fill": "black", "feather_kernel": "gaussian"})
    far, _ = occlude_grid(img, boxes, condition="OCO", target="Atelectasis", ps=(p,), seed=0, item_id="v",
                          preset=gaussian)[0]
    assert not np.array_equal(far, authors)
