"""Matched-noise statistics, presets and random streams."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shovir_core.perturb import PRESETS, Preset, full_noise, matched_stats, resolve_preset
from shovir_core.perturb.noise import draw_noise
from shovir_core.perturb.rng import item_rng, seed_sequence
from shovir_core.perturb.stats import hist_percentile

PAPER = PRESETS["paper"]


def trimmed_reference(values: np.ndarray, lo_q=1.0, hi_q=99.0, min_pixels=32):
    """Trimmed statistics the plain way (np.percentile + boolean selection)."""
    v = values.ravel().astype(np.float64)
    lo, hi = np.percentile(v, lo_q), np.percentile(v, hi_q)
    kept = v[(v >= lo) & (v <= hi)]
    if len(kept) < min_pixels:
        kept = v
    return kept.mean(), kept.std(), np.median(kept), lo, hi


@settings(max_examples=60, deadline=None)
@given(values=arrays(np.uint16, st.integers(1, 400), elements=st.integers(0, 1200)),
       q=st.floats(0, 100, allow_nan=False))
def test_hist_percentile_equals_numpy(values, q):
    assert hist_percentile(np.bincount(values), q) == pytest.approx(float(np.percentile(values, q)), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(image=arrays(np.uint8, st.tuples(st.integers(8, 40), st.integers(8, 40))),
       center=st.sampled_from(["mean", "median"]))
def test_histogram_stats_match_direct_computation(image, center):
    preset = PAPER.replace(center=center)
    s = matched_stats(image, preset=preset)
    mean, std, median, lo, hi = trimmed_reference(image)
    assert s.mean[0] == pytest.approx(mean, abs=1e-9)
    assert s.std[0] == pytest.approx(std, abs=1e-9)
    assert s.median[0] == median
    assert (s.p_low[0], s.p_high[0]) == pytest.approx((lo, hi))
    assert s.center[0] == pytest.approx(mean if center == "mean" else median)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_stats_outside_union_match_direct_computation(dtype):
    rng = np.random.default_rng(1)
    image = rng.integers(0, np.iinfo(dtype).max, (60, 70), endpoint=True).astype(dtype)
    image[10:30, 20:50] = np.iinfo(dtype).max // 3  # the occluded region is distinctive
    mask = np.zeros(image.shape, bool)
    mask[10:30, 20:50] = True
    s = matched_stats(image, preset=PRESETS["reference-code"], exclude=mask, n_channels=3)
    mean, std, median, lo, hi = trimmed_reference(image[~mask])
    assert s.region == "outside"
    assert s.n_pixels == int((~mask).sum())
    assert s.center == pytest.approx((median,) * 3)
    assert s.std == pytest.approx((std,) * 3)
    # the paper preset ignores the union and uses the whole image
    assert matched_stats(image, preset=PAPER, exclude=mask).n_pixels == image.size


def test_distinct_rgb_channels_use_joint_trimming():
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (40, 50, 3)).astype(np.uint8)
    s = matched_stats(image, preset=PAPER, n_channels=3)
    px = image.reshape(-1, 3).astype(float)
    lo, hi = np.percentile(px, 1, axis=0), np.percentile(px, 99, axis=0)
    kept = px[((px >= lo) & (px <= hi)).all(axis=1)]
    assert s.mean == pytest.approx(tuple(kept.mean(axis=0)))
    assert s.std == pytest.approx(tuple(kept.std(axis=0)))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_noise_matches_source_statistics(dtype):
    top = np.iinfo(dtype).max
    rng = np.random.default_rng(3)
    image = np.clip(rng.normal(0.45 * top, 0.08 * top, (300, 300)), 0, top).astype(dtype)
    out, info = full_noise(image, seed=5, item_id="stats")
    assert out.dtype == dtype and out.shape == image.shape
    mean, std, *_ = trimmed_reference(image)
    assert info["noise"]["mean"][0] == pytest.approx(mean)
    assert info["noise"]["std"][0] == pytest.approx(std)
    # the noise itself: its (plain and trimmed) mean and std match the source statistics
    assert out.mean() == pytest.approx(mean, rel=0.01)
    assert out.std() == pytest.approx(std, rel=0.02)
    assert trimmed_reference(out)[0] == pytest.approx(trimmed_reference(image)[0], rel=0.01)


def test_reference_preset_noise_is_smoothed_rgb():
    rng = np.random.default_rng(4)
    image = rng.integers(50, 200, (128, 128)).astype(np.uint8)
    out, info = full_noise(image, seed=0, item_id="rgb", preset="reference-code")
    assert out.shape == (128, 128, 3) and out.dtype == np.uint8
    assert not np.array_equal(out[..., 0], out[..., 1]), "channels draw independent noise"
    # smoothing correlates neighbours; i.i.d. noise does not
    a = out[..., 0].astype(float)
    corr = np.corrcoef(a[:, :-1].ravel(), a[:, 1:].ravel())[0, 1]
    paper, _ = full_noise(image, seed=0, item_id="rgb")
    b = paper.astype(float)
    assert corr > 0.5 > abs(np.corrcoef(b[:, :-1].ravel(), b[:, 1:].ravel())[0, 1])
    assert info["preset"] == "reference-code" and info["options"]["smooth_radius"] == 2.0


def test_min_std_floor_scales_with_dtype():
    flat = np.full((40, 40), 1000, dtype=np.uint16)
    s = matched_stats(flat, preset=PRESETS["reference-code"])
    assert s.std[0] == 0 and s.scale[0] == pytest.approx(65535 / 255)


def test_draw_noise_shape_and_range():
    s = matched_stats(np.arange(100, dtype=np.uint8).reshape(10, 10), preset=PAPER, n_channels=3)
    z = draw_noise((7, 9), s, PAPER, np.random.default_rng(0))
    assert z.shape == (7, 9, 3) and z.dtype == np.float32 and z.min() >= 0 and z.max() <= 255


def test_presets():
    assert resolve_preset("paper") is PRESETS["paper"]
    custom = resolve_preset({"base": "paper", "center": "median", "trim": [2, 98]})
    assert custom.name == "paper+center=median,trim=(2, 98)" and custom.trim == (2.0, 98.0)
    assert PRESETS["reference-code"].for_random_occlusion().trim is None
    assert PAPER.for_random_occlusion() is PAPER
    with pytest.raises(ValueError, match="unknown noise preset"):
        resolve_preset("papers")
    with pytest.raises(ValueError, match="center"):
        Preset(center="mode")
    with pytest.raises(ValueError, match="trim"):
        Preset(trim=(99, 1))
    with pytest.raises(ValueError, match="unknown preset options"):
        PAPER.replace(colour="blue")


def test_streams_depend_on_ids_not_order():
    a = seed_sequence(0, "img", "Atelectasis", "OCO").generate_state(4)
    assert (a == seed_sequence(0, "img", "Atelectasis", "OCO").generate_state(4)).all()
    for other in [(1, "img", "Atelectasis", "OCO"), (0, "img2", "Atelectasis", "OCO"),
                  (0, "img", "Edema", "OCO"), (0, "img", "Atelectasis", "DOCO")]:
        assert not (a == seed_sequence(*other).generate_state(4)).all()
    first = item_rng(0, "x", n=1)[0].random()
    assert item_rng(0, "x", n=3)[0].random() == first, "adding streams does not change earlier ones"
    with pytest.raises(ValueError, match="seed"):
        seed_sequence(-1, "x")
