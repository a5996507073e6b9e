"""The reference-code engine (preset "reference-code"): hand-computed cases of each step and the way it consumes
a legacy numpy.random.RandomState stream."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageFilter

from shovir_core.perturb import EmptyBoxSetError, box_sets, full_noise, occlude, occlude_grid
from shovir_core.perturb import reference as R
from shovir_core.perturb.boxes import footprint, union_mask
from shovir_core.perturb.conditions import prepare_image, uniform_noise


def _image(h=64, w=80, seed=0):
    return np.random.default_rng(seed).integers(20, 230, (h, w), dtype=np.uint8)


def _same_state(a: np.random.RandomState, b: np.random.RandomState) -> bool:
    sa, sb = a.get_state(), b.get_state()
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(sa, sb))


def test_box_edges_are_truncated():
    box = ("A", 1.5, 2.5, 4.9, 6.99)
    assert footprint(box, (10, 10)) == (2, 7, 1, 5)  # cover: floor / ceil
    assert footprint(box, (10, 10), mode="truncate") == (2, 6, 1, 4)  # int() of each edge
    assert R.clip_box((1.5, 2.5, 4.9, 6.99), 10, 10) == (1, 2, 4, 6)
    assert R.clip_box((3.2, 1.0, 3.9, 5.0), 10, 10) is None  # int(3.2) == int(3.9): empty, dropped
    assert R.clip_box((-2.0, 0.0, 12.0, 3.0), 10, 10) == (0, 0, 10, 3)
    assert union_mask([box], (10, 10), mode="truncate").sum() == 4 * 3


def test_robust_center_scale_by_hand():
    v = np.arange(100, dtype=np.uint8)
    center, scale, info = R.robust_center_scale(np.stack([v, v, v], axis=1))
    # P1 = 0.99, P99 = 98.01: values 1..98 stay; median 49.5; std of 1..98 = sqrt((98**2 - 1) / 12)
    assert info["n_trimmed"] == 98
    np.testing.assert_allclose(center, 49.5)
    np.testing.assert_allclose(scale, np.sqrt((98 ** 2 - 1) / 12), rtol=1e-6)
    flat = np.zeros((50, 3), dtype=np.uint8)
    assert R.robust_center_scale(flat)[1].tolist() == [1.0, 1.0, 1.0]  # the std floor


def test_blend_arithmetic_by_hand():
    img = np.full((64, 64, 3), 100, np.uint8)
    fill = np.full((64, 64, 3), 200, np.uint8)
    mask = np.zeros((64, 64), bool)
    mask[8:56, 8:56] = True
    out = R.blend_region(img, fill, mask, 0.4)
    # alpha = uint8(0.4 * 255) = 102 -> 102 / 255 = 0.4 deep inside the box: 100 * 0.6 + 200 * 0.4 = 140
    assert out[32, 32].tolist() == [140, 140, 140]
    assert out[0, 0].tolist() == [100, 100, 100]
    np.testing.assert_array_equal(R.blend_region(img, fill, mask, 0.0), img)


def test_feathering_is_pillows_and_reaches_13_to_15_pixels():
    img = np.zeros((120, 120, 3), np.uint8)
    fill = np.full((120, 120, 3), 255, np.uint8)
    mask = np.zeros((120, 120), bool)
    mask[40:80, 40:80] = True
    out = R.blend_region(img, fill, mask, 1.0)[..., 0]
    alpha = np.array(Image.fromarray((mask * 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(6)))
    np.testing.assert_array_equal(out, alpha)  # 0 * (1 - a) + 255 * a, a = the blurred 8-bit mask
    reach = max(40 - np.flatnonzero(out[60] > 0)[0], np.flatnonzero(out[60] > 0)[-1] - 79)
    assert 13 <= reach <= 15


def test_oco_consumes_one_full_frame_normal_draw():
    image = _image()
    stream = np.random.RandomState(3)
    out, info = occlude(image, [("A", 10, 10, 30, 40)], condition="OCO", target="A", p=0.6, seed=3,
                        item_id="x", preset="reference-code", rng=stream)
    twin = np.random.RandomState(3)
    twin.standard_normal((64, 80, 3))
    assert _same_state(stream, twin)
    # the same stream position gives the same output; the fill is Pillow-blurred clipped noise
    again, _ = occlude(image, [("A", 10, 10, 30, 40)], condition="OCO", target="A", p=0.6, seed=3,
                       item_id="x", preset="reference-code", rng=np.random.RandomState(3))
    np.testing.assert_array_equal(out, again)
    assert info["engine"] == "reference-code" and info["stream"] == "caller"
    # p = 0 and a dropped DOCO item draw nothing
    untouched = np.random.RandomState(3)
    base, _ = occlude(image, [("A", 10, 10, 30, 40)], condition="OCO", target="A", p=0.0, seed=3, item_id="x",
                      preset="reference-code", rng=untouched)
    np.testing.assert_array_equal(base, prepare_image(image, "reference-code"))
    with pytest.raises(EmptyBoxSetError):
        occlude(image, [("A", 10, 10, 30, 40), ("B", 12, 12, 30, 40)], condition="DOCO", target="A", p=1.0, seed=3,
                item_id="x", preset="reference-code", rng=untouched)
    assert _same_state(untouched, np.random.RandomState(3))


def test_full_noise_is_the_blurred_fill_and_grids_consume_per_p():
    image = _image()
    work = prepare_image(image, "reference-code")
    out, info = full_noise(image, seed=3, item_id="x", preset="reference-code", rng=np.random.RandomState(3))
    fill, _ = R.matched_fill(work, np.zeros(work.shape[:2], bool), np.random.RandomState(3))
    np.testing.assert_array_equal(out, fill)  # p = 1 without feathering is the fill itself
    # a grid with a passed stream = successive calls in the order of ps (p = 0 draws nothing)
    boxes = [("A", 10, 10, 30, 40)]
    grid = occlude_grid(image, boxes, condition="OCO", target="A", ps=[0.0, 0.4, 1.0], seed=3, item_id="x",
                        preset="reference-code", rng=np.random.RandomState(7))
    rs = np.random.RandomState(7)
    singles = [occlude(image, boxes, condition="OCO", target="A", p=p, seed=3, item_id="x", preset="reference-code",
                       rng=rs)[0] for p in (0.0, 0.4, 1.0)]
    for (g, _), s in zip(grid, singles):
        np.testing.assert_array_equal(g, s)
    # the per-item streams (no rng passed) give every p the same noise, as the vectorised engine
    own = occlude_grid(image, boxes, condition="OCO", target="A", ps=[0.4, 1.0], seed=3, item_id="x",
                       preset="reference-code")
    assert own[0][1]["noise"] == own[1][1]["noise"]


def test_ro_draw_sequence_by_hand():
    image = _image(100, 120)
    boxes = [("A", 0, 0, 50, 100)]
    stream = np.random.RandomState(11)
    out, info = occlude(image, boxes, condition="RO", target="A", p=1.0, seed=0, item_id="r", preset="reference-code",
                        rng=stream)
    # by hand: k ~ randint(1, 1 + 1); per box: two clipped normals, int() sizes, two randints, retry on overlap
    rs = np.random.RandomState(11)
    k = rs.randint(1, 2)
    placed = []
    for _ in range(k):
        for _ in range(100):
            wf = float(np.clip(rs.normal(0.226, 0.137), 0.026, 0.984))
            hf = float(np.clip(rs.normal(0.250, 0.169), 0.026, 0.984))
            bw, bh = min(max(1, int(120 * wf)), 120), min(max(1, int(100 * hf)), 100)
            x1, y1 = int(rs.randint(0, 120 - bw + 1)), int(rs.randint(0, 100 - bh + 1))
            if not (x1 < 50 and x1 + bw > 0 and y1 < 100 and y1 + bh > 0):
                placed.append((x1, y1, x1 + bw, y1 + bh))
                break
    assert [(b["x1"], b["y1"], b["x2"], b["y2"]) for b in info["boxes"]] == placed
    for x1, y1, x2, y2 in placed:
        rs.standard_normal((y2 - y1, x2 - x1, 3))
    assert _same_state(stream, rs)
    assert info["k_requested"] == k


def test_ro_avoids_only_the_sets_and_may_cover_iou_dropped_boxes():
    image = _image(100, 100)
    boxes = [("A", 0, 0, 60, 100, "a"), ("B", 40, 0, 100, 100, "b")]  # IoU 0.2 > 0.15: B is dropped from B_c̄
    assert len(box_sets(boxes, "A", inclusive=True).dropped) == 1
    hits = 0
    for seed in range(40):
        _, info = occlude(image, boxes, condition="RO", target="A", p=1.0, seed=seed, item_id="r",
                          preset="reference-code")
        hits += any(b["x2"] > 60 for b in info["boxes"])
        assert all(b["x1"] >= 60 for b in info["boxes"])  # never on the target
    assert hits > 0
    # the paper preset avoids every annotated box: here the whole image is taken
    _, info = occlude(image, boxes, condition="RO", target="A", p=1.0, seed=0, item_id="r", preset="paper",
                      size_pool=np.array([[0.1, 0.1]]))
    assert info["n_placed"] == 0


def test_doco_without_the_iou_filter_and_region_keys():
    image = _image(100, 100)
    boxes = [("A", 0, 0, 60, 100, "r1"), ("B", 40, 0, 100, 100, "r2"), ("C", 0, 0, 60, 100, "r1")]
    with pytest.raises(EmptyBoxSetError):  # B is dropped by IoU; C is the target's own region
        occlude(image, boxes, condition="DOCO", target="A", p=1.0, seed=0, item_id="d", preset="reference-code")
    out, info = occlude(image, boxes, condition="DOCO", target="A", p=1.0, seed=0, item_id="d",
                        preset="reference-code", iou_filter=False)
    assert [b["finding"] for b in info["boxes"]] == ["B"] and not info["iou_filter"]


def test_uniform_noise_is_all_noise():
    out, info = uniform_noise(_image(), seed=0, item_id="u", rng=np.random.RandomState(3))
    np.testing.assert_array_equal(out, np.random.RandomState(3).randint(0, 256, size=(64, 80, 3), dtype=np.uint8))
    assert out.shape == (64, 80, 3)


def test_vectorised_engine_refuses_a_legacy_stream():
    with pytest.raises(TypeError, match="use preset 'reference-code'"):
        full_noise(_image(), seed=0, item_id="v", rng=np.random.RandomState(3))


def test_crosscheck_plumbing_with_a_stand_in_preprocess(tmp_path):
    from pathlib import Path

    from shovir_core.perturb.crosscheck import crosscheck, load_preprocess
    from shovir_core.protocols.shovir import open_dataset

    fixtures = Path(__file__).parent / "fixtures"
    pre = load_preprocess(fixtures / "upstream" / "ShoViR-Bench")
    state = np.random.get_state()
    for name in ("mimic:" + str(fixtures / "mimic_imagenome"), "padchest:" + str(fixtures / "padchest_gr")):
        rows = crosscheck(pre, open_dataset({"dataset": name}), max_items=4)
        assert rows and all(r["equal"] for r in rows), [r for r in rows if not r["equal"]]
        assert {"ro_p100", "oco_p40", "all_noise_mean"} <= {r["experiment"] for r in rows}
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(state, np.random.get_state()))  # the global generator is restored
