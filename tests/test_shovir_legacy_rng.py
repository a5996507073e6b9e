"""rng: legacy-stream / legacy-per-sample in the shovir protocol equal a plain replay of the authors' runners:
one RandomState per experiment (condition, p) walked in their dataset order, or one per sample index."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core import protocols
from shovir_core.perturb import box_sets, full_noise, occlude
from shovir_core.perturb.conditions import _reference_boxes
from shovir_core.perturb.boxes import class_subsets, keyed_boxes
from shovir_core.perturb.legacy import LegacyStreams, authors_class_order
from shovir_core.perturb.reference import advance
from shovir_core.protocols import shovir

FIXTURES = Path(__file__).parent / "fixtures"
PS = [0.0, 0.5, 1.0]


def _spec(dataset: str, rng: str, **extra) -> dict:
    return {"dataset": dataset, "model": "ref-blind-prior", "min_count": 1, "ps": PS, "preset": "reference-code",
            "rng": rng, **extra}


def _replay(ds, spec, rng_mode):
    """The authors' runner written out: experiments in turn, items in their order, one stream each."""
    full, _ = class_subsets(ds, classes=None, min_count=1)
    order = ds.images["image_id"].tolist()
    filt = not ds.name.startswith("padchest")
    disease = [(i, c) for c in authors_class_order(full) for i in order if i in set(full[c])]
    out = {}

    def streams(items):
        if rng_mode == "legacy-stream":
            rs = np.random.RandomState(3)
            return [(it, rs) for it in items]
        return [(it, np.random.RandomState(3 + k)) for k, it in enumerate(items)]

    for i, rs in streams([(i, None) for i in order]):
        out[("FullNoise", i[0], None, 1.0)] = full_noise(ds.load_image(i[0]), seed=3, item_id=i[0],
                                                         preset="reference-code", rng=rs)[1]["sha256"]
    for cond in ("RO", "OCO", "DOCO"):
        for p in PS:
            items = disease
            if cond == "DOCO":
                items = [(i, c) for i, c in disease if box_sets(keyed_boxes(ds, i), c, inclusive=True,
                                                                iou_filter=filt).others]
            for (i, c), rs in streams(items):
                _, info = occlude(ds.load_image(i), keyed_boxes(ds, i), condition=cond, target=c, p=p,
                                  seed=3, item_id=i, preset="reference-code", rng=rs, iou_filter=filt)
                out[(cond, i, c, p)] = info["sha256"]
    return out


@pytest.mark.parametrize("dataset", ["mimic_imagenome", "padchest_gr"])
@pytest.mark.parametrize("mode", ["legacy-stream", "legacy-per-sample"])
def test_protocol_equals_the_replay(dataset, mode, runs_root):
    adapter = "mimic" if dataset.startswith("mimic") else "padchest"
    spec = _spec(f"{adapter}:{FIXTURES / dataset}", mode)
    run = protocols.run("shovir", f"legacy-{mode}", spec, progress=False)
    ds = shovir.open_dataset(spec)
    expected = _replay(ds, spec, mode)
    t = run.trials[run.trials["condition"] != "Baseline"]
    got = {(r.condition, r.image_id, None if r.target is None or r.target != r.target else r.target, float(r.p)):
           r.input_sha256 for r in t.itertuples()}
    assert got == expected


def test_subsetting_skips_items_without_changing_the_others(runs_root):
    """With one item per class, the stream still advances over the items the record leaves out."""
    ds_name = f"mimic:{FIXTURES / 'mimic_imagenome'}"
    whole = protocols.run("shovir", "legacy-all", _spec(ds_name, "legacy-stream"), progress=False).trials
    part = protocols.run("shovir", "legacy-one", _spec(ds_name, "legacy-stream", max_per_class=1),
                         progress=False).trials
    merged = part.merge(whole, on="trial_id", suffixes=("", "_all"))
    assert len(merged) == len(part) and (merged["input_sha256"] == merged["input_sha256_all"]).all()
    assert len(part) < len(whole)


def test_advance_consumes_like_the_functions():
    rng_img = np.random.default_rng(0)
    image = rng_img.integers(0, 255, (48, 56), dtype=np.uint8)
    boxes = [("A", 5, 5, 20, 30, "a"), ("B", 30, 10, 50, 40, "b")]
    for cond in ("RO", "OCO", "DOCO"):
        sets = box_sets(boxes, "A", inclusive=True)
        for p in (0.0, 0.4, 1.0):
            a, b = np.random.RandomState(5), np.random.RandomState(5)
            occlude(image, boxes, condition=cond, target="A", p=p, seed=0, item_id="x", preset="reference-code", rng=a)
            advance(b, cond, image.shape, _reference_boxes(sets, cond, image.shape), p)
            assert a.randint(0, 2**31) == b.randint(0, 2**31), (cond, p)
    a, b = np.random.RandomState(5), np.random.RandomState(5)
    full_noise(image, seed=0, item_id="x", preset="reference-code", rng=a)
    advance(b, "FullNoise", image.shape, [], 1.0)
    assert a.randint(0, 2**31) == b.randint(0, 2**31)


def test_legacy_streams_restart_when_asked_out_of_order():
    calls = []
    streams = LegacyStreams("legacy-stream", 3, {"OCO": ["a", "b", "c"]},
                            lambda cond, p, key, rng: calls.append(key) or rng.standard_normal(2))
    streams.rng_for("OCO", 1.0, "c").standard_normal(2)
    assert calls == ["a", "b"]
    first = streams.rng_for("OCO", 1.0, "a").standard_normal(2)  # back to the start
    np.testing.assert_array_equal(first, np.random.RandomState(3).standard_normal(2))
    per = LegacyStreams("legacy-per-sample", 3, {"OCO": ["a", "b"]}, lambda *a: None)
    np.testing.assert_array_equal(per.rng_for("OCO", 0.2, "b").standard_normal(3),
                                  np.random.RandomState(4).standard_normal(3))


def test_legacy_rng_needs_the_reference_engine():
    with pytest.raises(ValueError, match="needs a preset with engine 'reference-code'"):
        shovir.resolve_spec({**_spec(f"mimic:{FIXTURES / 'mimic_imagenome'}", "legacy-stream"), "preset": "paper"})
    with pytest.raises(ValueError, match="'rng' = 'global' is not allowed"):
        shovir.resolve_spec(_spec(f"mimic:{FIXTURES / 'mimic_imagenome'}", "global"))
