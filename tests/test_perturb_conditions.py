"""Property tests of the ShoViR conditions (hypothesis) and their descriptions."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from shovir_core.perturb import (
    DEFAULT_PS, PRESETS, BoxError, EmptyBoxSetError, box_sets, full_noise, iou, occlude, occlude_grid,
)
from shovir_core.perturb.boxes import footprint, random_boxes, union_mask
from shovir_core.perturb.conditions import prepare_image
from shovir_core.perturb.noise import kernel_margin

FINDINGS = ["Atelectasis", "Cardiomegaly", "Edema"]
POOL = np.array([[0.2, 0.25], [0.1, 0.1], [0.3, 0.15]])
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def images(draw, *, min_side=24, max_side=64, spread=True):
    dtype = draw(st.sampled_from([np.uint8, np.uint16]))
    h, w = draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side))
    top = np.iinfo(dtype).max
    lo = draw(st.integers(0, top // 2))
    width = draw(st.integers(top // 6 if spread else 0, top // 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return rng.integers(lo, lo + width, (h, w), endpoint=True).astype(dtype)


@st.composite
def box_lists(draw, shape, *, n_min=1, n_max=4, findings=FINDINGS):
    h, w = shape[:2]
    out = []
    for _ in range(draw(st.integers(n_min, n_max))):
        x1 = draw(st.floats(0, w - 2, allow_nan=False))
        y1 = draw(st.floats(0, h - 2, allow_nan=False))
        x2 = draw(st.floats(x1 + 1, min(w, x1 + w / 2), allow_nan=False))
        y2 = draw(st.floats(y1 + 1, min(h, y1 + h / 2), allow_nan=False))
        out.append((draw(st.sampled_from(findings)), x1, y1, x2, y2))
    return out


@st.composite
def cases(draw, *, spread=True):
    image = draw(images(spread=spread))
    boxes = draw(box_lists(image.shape))
    target = boxes[0][0]
    condition = draw(st.sampled_from(["RO", "OCO", "DOCO"]))
    preset = draw(st.sampled_from(["paper", "reference-code"]))
    if condition == "DOCO":
        assume(not box_sets(boxes, target, inclusive=PRESETS[preset].iou_inclusive).doco_empty)
    return image, boxes, target, condition, preset


def as_layout(image, preset):
    """The preset's baseline written out as the reference code does it (float32 min-max, PIL RGB)."""
    if preset == "paper":
        return image
    x = image.astype(np.float32)
    lo, hi = float(x.min()), float(x.max())
    x = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
    return np.asarray(Image.fromarray((x * 255).astype(np.uint8)).convert("RGB"))


def run(case, ps, seed=0, item_id="item"):
    image, boxes, target, condition, preset = case
    return occlude_grid(image, boxes, condition=condition, target=target, ps=ps, seed=seed, item_id=item_id,
                        preset=preset, size_pool=POOL)


@SETTINGS
@given(case=cases(spread=False))
def test_p_zero_is_identity(case):
    (out, info), = run(case, [0.0])
    expected = as_layout(case[0], case[4])
    assert out.dtype == (case[0].dtype if case[4] == "paper" else np.uint8)
    assert np.array_equal(out, expected)
    assert info["sha256"]


@SETTINGS
@given(case=cases(), p=st.floats(0.05, 1.0))
def test_pixels_outside_the_union_are_unchanged(case, p):
    image, _, _, _, preset = case
    (out, info), = run(case, [p])
    mask = union_mask([(b["finding"], b["x1"], b["y1"], b["x2"], b["y2"]) for b in info["boxes"]], out.shape)
    margin = kernel_margin(info["options"]["feather_radius"])
    if margin:  # dilate the union by the feather margin (square, a superset of the kernel's support)
        from scipy.ndimage import maximum_filter
        mask = maximum_filter(mask, size=2 * margin + 1)
    expected = prepare_image(image, preset)
    assert np.array_equal(out[~mask], expected[~mask])
    assert out.dtype == expected.dtype


@SETTINGS
@given(case=cases())
def test_pixels_inside_the_union_change_at_p_one(case):
    image, _, _, _, preset = case
    (out, info), = run(case, [1.0])
    assume(info["boxes"])  # RO may fail to place a box in a crowded image
    core = np.zeros(image.shape, bool)
    margin = kernel_margin(info["options"]["feather_radius"])
    for b in info["boxes"]:
        r0, r1, c0, c1 = footprint((b["x1"], b["y1"], b["x2"], b["y2"]), image.shape)
        core[r0 + margin:max(r0 + margin, r1 - margin), c0 + margin:max(c0 + margin, c1 - margin)] = True
    assume(core.sum() >= 20)
    expected = prepare_image(image, preset)
    changed = (out != expected).any(axis=-1) if out.ndim == 3 else out != expected
    assert changed[core].mean() > 0.5


@SETTINGS
@given(case=cases())
def test_grid_and_single_p_share_one_noise_field(case):
    grid = run(case, DEFAULT_PS)
    image, boxes, target, condition, preset = case
    for p, (out, info) in zip(DEFAULT_PS, grid):
        single, sinfo = occlude(image, boxes, condition=condition, target=target, p=p, seed=0, item_id="item",
                                preset=preset, size_pool=POOL)
        assert np.array_equal(single, out)
        assert sinfo["sha256"] == info["sha256"] and sinfo["boxes"] == info["boxes"]
    # x' = (1 - p) x + p n on the union: every p interpolates towards the p = 1 output (the reference
    # code's RO fills its random boxes one after another, so overlapping boxes are blended twice)
    if preset == "reference-code" and condition == "RO":
        return
    base = prepare_image(image, preset).astype(float)
    noise = grid[-1][0].astype(float)
    tolerance = 1.0 if PRESETS[preset].feather_radius == 0 else None
    for p, (out, _) in zip(DEFAULT_PS, grid):
        expected = (1 - p) * base + p * noise
        if tolerance is not None:  # hard edges: exact up to the rounding of the noise and of the blend
            assert np.abs(out.astype(float) - expected).max() <= tolerance
        else:  # feathered: each pixel lies between the input and its p = 1 value
            lo, hi = np.minimum(base, noise) - 1, np.maximum(base, noise) + 1
            assert ((out >= lo) & (out <= hi)).all()


@SETTINGS
@given(image=images(), data=st.data())
def test_random_boxes_never_overlap_annotated_boxes(image, data):
    boxes = data.draw(box_lists(image.shape, n_max=3))
    sizes = data.draw(st.sampled_from(["dataset", "reference"]))
    placed = random_boxes(image.shape, boxes, k=data.draw(st.integers(1, 5)),
                          rng=np.random.default_rng(data.draw(st.integers(0, 999))), size_pool=POOL, sizes=sizes)
    annotated = union_mask(boxes, image.shape)
    for b in placed:
        r0, r1, c0, c1 = footprint(b, image.shape)
        assert r1 > r0 and c1 > c0
        assert not annotated[r0:r1, c0:c1].any()


@SETTINGS
@given(image=images(), data=st.data())
def test_ro_reports_the_boxes_it_placed(image, data):
    boxes = data.draw(box_lists(image.shape, n_max=3))
    out, info = occlude(image, boxes, condition="RO", target=boxes[0][0], p=1.0, seed=1, item_id="ro",
                        size_pool=POOL)
    sets = box_sets(boxes, boxes[0][0])
    assert 1 <= info["k_requested"] <= max(len(sets.annotated), 1)
    assert info["n_placed"] == len(info["boxes"]) <= info["k_requested"]
    assert all(b["set"] == "random" for b in info["boxes"])
    changed = out != image
    allowed = union_mask([(b["finding"], b["x1"], b["y1"], b["x2"], b["y2"]) for b in info["boxes"]], image.shape)
    assert not changed[~allowed].any()
    assert not (changed & union_mask(boxes, image.shape)).any()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), threshold=st.sampled_from([0.0, 0.15, 0.5]), inclusive=st.booleans())
def test_doco_boxes_obey_the_iou_rule(data, threshold, inclusive):
    boxes = data.draw(box_lists((50, 50), n_min=1, n_max=6))
    target = boxes[0][0]
    s = box_sets(boxes, target, iou_threshold=threshold, inclusive=inclusive)
    assert all(b.finding == target for b in s.target)
    assert len(s.target) + len(s.others) + len(s.dropped) == len(boxes)
    for b in s.others:
        assert b.finding != target
        worst = max(iou(b, t) for t in s.target)
        assert worst <= threshold if inclusive else worst < threshold
    for b, worst in s.dropped:
        assert worst == max(iou(b, t) for t in s.target)
        assert worst > threshold if inclusive else worst >= threshold


def test_iou_rule_boundary_paper_vs_reference():
    # IoU exactly 0.2: kept by "<= 0.2", dropped by "< 0.2"
    boxes = [("A", 0, 0, 10, 10), ("B", 0, 0, 10, 2)]
    assert iou(boxes[0], boxes[1]) == pytest.approx(0.2)
    assert len(box_sets(boxes, "A", iou_threshold=0.2).others) == 0
    assert len(box_sets(boxes, "A", iou_threshold=0.2, inclusive=True).others) == 1


def test_doco_without_co_boxes_raises_and_names_the_item():
    image = np.zeros((20, 20), np.uint8)
    with pytest.raises(EmptyBoxSetError, match="'img-7'.*DOCO"):
        occlude(image, [("A", 1, 1, 9, 9), ("B", 1, 1, 9, 9)], condition="DOCO", target="A", p=1, seed=0,
                item_id="img-7")
    from shovir_core.perturb import UnknownTargetError

    with pytest.raises(UnknownTargetError, match="'img-8'.*OCO target 'A' is not a class"):
        occlude(image, [("B", 1, 1, 9, 9)], condition="OCO", target="A", p=1, seed=0, item_id="img-8")


def test_doco_occludes_co_boxes_and_keeps_target():
    rng = np.random.default_rng(0)
    image = rng.integers(40, 200, (40, 40)).astype(np.uint8)
    boxes = [("A", 2, 2, 12, 12), ("B", 25, 25, 35, 35), ("C", 3, 3, 12, 12)]
    out, info = occlude(image, boxes, condition="DOCO", target="A", p=1.0, seed=0, item_id="d")
    assert [b["finding"] for b in info["boxes"]] == ["B"]
    assert [b["finding"] for b in info["dropped_by_iou"]] == ["C"]
    assert np.array_equal(out[:20, :20], image[:20, :20])
    assert (out[25:35, 25:35] != image[25:35, 25:35]).mean() > 0.5


@pytest.mark.parametrize("bad, match", [
    ([("A", 1, 1, 5)], "box 0: expected"),
    ([("A", 1, 1, 5, 5), (3, 1, 1, 5, 5)], "box 1: finding"),
    ([("A", 5, 1, 1, 5)], "box 0: need x1 < x2"),
    ([("A", 1, 1, 1, 5)], "box 0: need x1 < x2"),
    ([("A", 1, 1, float("nan"), 5)], "box 0: non-finite"),
    ([("A", 1, 1, 50, 5)], "box 0: .* lies outside the 20x20 image"),
    ([("A", "x", 1, 5, 5)], "box 0: coordinates must be numbers"),
    ("A,1,1,5,5", "boxes must be a sequence"),
])
def test_malformed_boxes_name_the_item(bad, match):
    image = np.zeros((20, 20), np.uint8)
    with pytest.raises(BoxError, match=f"item 'case-42'.*{match}" if "sequence" not in match else match):
        occlude(image, bad, condition="OCO", target="A", p=0.5, seed=0, item_id="case-42")


@pytest.mark.parametrize("kwargs, match", [
    ({"p": 1.5}, "p must lie in"),
    ({"p": float("nan")}, "p must lie in"),
    ({"condition": "XO"}, "condition must be one of"),
    ({"image": np.zeros((20, 20), np.float32)}, "dtype float32 not supported"),
    ({"image": np.zeros((20, 20, 2), np.uint8)}, "neither"),
    ({"condition": "RO", "size_pool": None}, "needs size_pool"),
])
def test_invalid_arguments_name_the_item(kwargs, match):
    args = {"image": np.zeros((20, 20), np.uint8), "condition": "OCO", "p": 0.5, "size_pool": POOL, **kwargs}
    image = args.pop("image")
    with pytest.raises((ValueError, TypeError), match=f"'case-9'.*{match}"):
        occlude(image, [("A", 1, 1, 5, 5)], target="A", seed=0, item_id="case-9", **args)


def test_ro_reference_sizes_need_no_pool():
    image = np.random.default_rng(0).integers(0, 255, (64, 64)).astype(np.uint8)
    out, info = occlude(image, [("A", 1, 1, 9, 9)], condition="RO", target="A", p=1, seed=0, item_id="r",
                        preset="reference-code")
    assert info["size_source"] == "reference"
    assert info["options"]["trim"] is None and info["options"]["feather_radius"] == 0  # the fast path


def test_info_describes_the_output():
    image = np.random.default_rng(0).integers(0, 255, (32, 32)).astype(np.uint8)
    out, info = occlude(image, [("A", 4, 4, 12, 12), ("B", 20, 20, 30, 30)], condition="OCO", target="A",
                        p=0.6, seed=11, item_id="desc")
    for key in ("condition", "target", "p", "seed", "preset", "options", "boxes", "noise", "sha256", "stream",
                "iou_threshold"):
        assert key in info
    assert (info["condition"], info["target"], info["p"], info["seed"], info["preset"]) == ("OCO", "A", 0.6, 11,
                                                                                            "paper")
    assert json.loads(json.dumps(info)) == info, "descriptions are JSON-ready"
    import hashlib
    assert info["sha256"] == hashlib.sha256(out.tobytes()).hexdigest()
    assert set(info["noise"]) >= {"center", "scale", "p_low", "p_high", "n_pixels"}


def test_streams_differ_by_class_and_condition_and_seed():
    image = np.random.default_rng(0).integers(0, 255, (32, 32)).astype(np.uint8)
    boxes = [("A", 4, 4, 20, 20), ("B", 4, 4, 20, 20)]
    a = occlude(image, boxes, condition="OCO", target="A", p=1, seed=0, item_id="s")[0]
    b = occlude(image, boxes, condition="OCO", target="B", p=1, seed=0, item_id="s")[0]
    c = occlude(image, boxes, condition="OCO", target="A", p=1, seed=1, item_id="s")[0]
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


ITEMS = [(f"img{k}", 30 + 7 * k) for k in range(4)]


def _item(name, side):
    rng = np.random.default_rng(side)
    img = rng.integers(0, 4000, (side, side)).astype(np.uint16)
    return img, [("A", 2, 2, side / 2, side / 2), ("B", side / 2 + 1, 3, side - 1, side / 3)]


def _hashes(order):
    out = {}
    for name, side in order:
        img, boxes = _item(name, side)
        for cond in ("RO", "OCO", "DOCO"):
            for preset in ("paper", "reference-code"):
                for o, info in occlude_grid(img, boxes, condition=cond, target="A", seed=3, item_id=name,
                                            preset=preset, size_pool=POOL):
                    out[(name, cond, preset, info["p"])] = info["sha256"]
        out[(name, "FullNoise")] = full_noise(img, seed=3, item_id=name)[1]["sha256"]
    return out


def test_order_of_items_does_not_matter():
    forward = _hashes(ITEMS)
    backward = _hashes(list(reversed(ITEMS)))
    assert forward == backward
    assert len(set(forward.values())) > len(ITEMS) * 6


def test_identical_bytes_in_two_processes():
    # each child loads this file and computes the hashes of every output from scratch
    code = (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('t', {__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(json.dumps({'|'.join(map(str, k)): v for k, v in m._hashes(m.ITEMS).items()}))\n"
    )
    children = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                for _ in range(2)]
    first, second = (json.loads(c.stdout) for c in children)
    here = {"|".join(map(str, k)): v for k, v in _hashes(ITEMS).items()}
    assert first == second == here


def test_uint16_and_rgb_inputs_keep_their_dtype():
    rng = np.random.default_rng(5)
    for image in (rng.integers(0, 65535, (30, 30)).astype(np.uint16), rng.integers(0, 255, (30, 30, 3)).astype(np.uint8)):
        for preset in ("paper", "reference-code"):
            out, info = occlude(image, [("A", 3, 3, 20, 20)], condition="OCO", target="A", p=0.7, seed=0,
                                item_id="dt", preset=preset)
            expected = image.dtype if preset == "paper" else np.uint8  # reference: 8-bit RGB
            assert out.dtype == expected and info["dtype"] == str(np.dtype(expected))
            assert out.shape[:2] == image.shape[:2]
            assert math.isfinite(info["noise"]["center"][0])
