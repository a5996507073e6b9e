"""Reference models hold their stated behaviour on the demo NIH box images."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from shovir_core import paths
from shovir_core.data import load_dataset
from shovir_core.labels import FINDINGS_13, apply_policy
from shovir_core.models import ScoreRequest, get_model, read_report, template_report
from shovir_core.models.reference import (PARAMS_FILE, PRIOR_CALL, WEIGHTS_FILE, Anchored, context_texture,
                                         params_sha256)

QUESTIONS = [(f, f"Does this chest X-ray show {f}?") for f in FINDINGS_13] + [
    ("composite", "Is any acute cardiopulmonary finding present on this chest X-ray?")]


@pytest.fixture(scope="module")
def demo():
    ds = load_dataset("demo")
    ids = ds.images["image_id"].tolist()[:30]
    images = {i: ds.load_image(i) for i in ids}
    labels = apply_policy(ds.labels.loc[ids, list(FINDINGS_13)], "u-negative")
    reports = {i: template_report([f for f in FINDINGS_13 if labels.loc[i, f] == 1]) for i in ids}
    return ds, ids, images, reports


def _noise_in(image, boxes, rng):
    """Hard-edged matched noise (mean/std of the 1st-99th percentile pixels) inside boxes (p = 1)."""
    out = image.astype(np.float64).copy()
    lo, hi = np.percentile(image, [1, 99])
    core = image[(image >= lo) & (image <= hi)]
    for _, x1, y1, x2, y2 in boxes:
        sl = np.s_[int(y1):int(np.ceil(y2)), int(x1):int(np.ceil(x2))]
        out[sl] = rng.normal(core.mean(), core.std(), out[sl].shape)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def _swap_flips(model, demo, *, report: bool) -> float:
    ds, ids, images, reports = demo
    flips = []
    for k, src in enumerate(ids):
        sub = ids[(k + 1) % len(ids)]
        reqs = [ScoreRequest(images[side], q, report=reports[src] if report else None, finding=f)
                for side in (src, sub) for f, q in QUESTIONS]
        out = model.score_yes_no(reqs)
        n = len(QUESTIONS)
        flips += [out[i]["readout"] != out[i + n]["readout"] for i in range(n)]
    return float(np.mean(flips))


def _f1(reports, ids, labels):
    pred = np.array([[read_report(reports[i])[f] == 1 for f in FINDINGS_13] for i in ids])
    true = labels.loc[ids, list(FINDINGS_13)].to_numpy() == 1
    tp, fp, fn = (pred & true).sum(), (pred & ~true).sum(), (~pred & true).sum()
    return 2 * tp / max(2 * tp + fp + fn, 1)


def test_resources_match_their_recorded_hashes():
    params = json.loads((paths.resources_root() / PARAMS_FILE).read_text())
    weights = (paths.resources_root() / WEIGHTS_FILE).read_bytes()
    assert hashlib.sha256(weights).hexdigest() == params["cnn"]["weights_sha256"]
    assert params_sha256(params) == params["sha256"]
    assert len(weights) <= 2_000_000


def test_blind_prior_is_blind(demo):
    ds, ids, images, _ = demo
    model = get_model("ref-blind-prior")
    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 256, images[i].shape, dtype=np.uint8) for i in ids]
    base = dict(zip(ids, model.generate_reports([images[i] for i in ids])))
    full_noise = dict(zip(ids, model.generate_reports(noise)))
    labels = apply_policy(ds.labels, "u-negative")
    assert _f1(base, ids, labels) - _f1(full_noise, ids, labels) == 0.0  # Delta_FN = 0
    assert _swap_flips(model, demo, report=True) == 0.0
    assert _swap_flips(model, demo, report=False) == 0.0


def test_blind_prior_writes_findings_from_its_prior(demo):
    ds, ids, images, _ = demo
    model = get_model("ref-blind-prior")
    called = [f for f, p in model.params["priors"].items() if f in FINDINGS_13 and p >= PRIOR_CALL]
    assert called, "the blind prior must call some findings, or its Delta_FN = 0 says nothing"
    reports = model.generate_reports([images[i] for i in ids[:3]])
    assert len(set(reports)) == 1 and all(read_report(reports[0])[f] == 1 for f in called)
    answers = model.score_yes_no([ScoreRequest(None, q, finding=f) for f, q in QUESTIONS])
    assert {f for (f, _), r in zip(QUESTIONS, answers) if r["readout"] == "yes"} >= set(called) & {f for f, _ in QUESTIONS}


def test_anchored_follows_the_report_on_a_share_w_of_pairs(demo):
    """Planted: report-present answers follow the report where gate < w, else equal the report-absent answers."""
    ds, ids, images, reports = demo
    reqs = [(images[i], reports[i], f, q) for i in ids[:40] for f, q in QUESTIONS]
    for w in (0.25, 0.5, 0.75):
        model = get_model(f"ref-anchored@{w}")
        reader = get_model("ref-report-reader")
        present = model.score_yes_no([ScoreRequest(im, q, report=r, finding=f) for im, r, f, q in reqs])
        absent = model.score_yes_no([ScoreRequest(im, q, finding=f) for im, r, f, q in reqs])
        read = reader.score_yes_no([ScoreRequest(None, q, report=r, finding=f) for im, r, f, q in reqs])
        follows = np.array([Anchored.gate(hashlib.sha256(r.encode()).hexdigest(), f) < w for _, r, f, _ in reqs])
        assert 0 < follows.mean() < 1 and abs(follows.mean() - w) < 0.15
        for k, use_report in enumerate(follows):
            assert present[k]["margin"] == pytest.approx((read if use_report else absent)[k]["margin"])


def test_report_reader_ignores_the_image_and_reads_the_report(demo):
    model = get_model("ref-report-reader")
    assert _swap_flips(model, demo, report=True) == 0.0
    assert _swap_flips(model, demo, report=False) == 0.0
    yes = model.score_yes_no([ScoreRequest(None, "Is Edema present?", report="There is edema.")])[0]
    no = model.score_yes_no([ScoreRequest(None, "Is Edema present?", report="No edema.")])[0]
    assert yes["readout"] == "yes" and no["readout"] == "no"


def test_image_classifier_ignores_the_report_and_reads_the_image(demo):
    ds, ids, images, reports = demo
    model = get_model("ref-image-classifier")
    present = model.score_yes_no([ScoreRequest(images[i], q, report=reports[i], finding=f)
                                  for i in ids[:10] for f, q in QUESTIONS])
    absent = model.score_yes_no([ScoreRequest(images[i], q, finding=f) for i in ids[:10] for f, q in QUESTIONS])
    assert present == absent
    assert _swap_flips(model, demo, report=False) > 0.0


def test_image_classifier_evidence_lives_in_the_boxes(demo):
    ds, *_ = demo
    model = get_model("ref-image-classifier")
    rng = np.random.default_rng(2)
    removed = {"OCO": 0, "RO": 0}
    for image_id in ds.images["image_id"][:60]:
        image, boxes = ds.load_image(image_id), ds.boxes_of(image_id)
        c = boxes[0][0]
        own = [b for b in boxes if b[0] == c]
        w, h = int(own[0][3] - own[0][1]), int(own[0][4] - own[0][2])
        ro = [_free_box(image.shape, boxes, rng, size=max(8, min(w, h, 96)))]
        req = [ScoreRequest(img, f"Does this chest X-ray show {c}?") for img in
               (image, _noise_in(image, own, rng), _noise_in(image, ro, rng))]
        base, oco, rand = (r["readout"] == "yes" for r in model.score_yes_no(req))
        removed["OCO"] += base and not oco
        removed["RO"] += base and not rand
    assert removed["OCO"] > removed["RO"], removed


def test_anchored_extremes(demo):
    ds, ids, images, reports = demo
    w1 = get_model("ref-anchored@1")
    assert _swap_flips(w1, demo, report=True) == 0.0
    assert _swap_flips(w1, demo, report=False) > 0.0
    w0 = get_model("ref-anchored@0")
    present = w0.score_yes_no([ScoreRequest(images[i], q, report=reports[i], finding=f)
                               for i in ids[:10] for f, q in QUESTIONS])
    absent = w0.score_yes_no([ScoreRequest(images[i], q, finding=f) for i in ids[:10] for f, q in QUESTIONS])
    assert present == absent
    half = get_model("ref-anchored@0.5")
    assert half.w == 0.5 and half.name == "ref-anchored@0.5"
    with pytest.raises(ValueError, match="must lie in"):
        get_model("ref-anchored@1.5")


def _free_box(shape, boxes, rng, size=48):
    """A size x size box overlapping none of ``boxes`` (an RO-like control box)."""
    h, w = shape[:2]
    while size >= 4:
        for _ in range(200):
            x, y = int(rng.integers(0, w - size)), int(rng.integers(0, h - size))
            if all(x + size <= b[1] or b[3] <= x or y + size <= b[2] or b[4] <= y for b in boxes):
                return ("RO", x, y, x + size, y + size)
        size //= 2
    raise AssertionError("no free control box")


def test_context_shortcut_flips_under_doco_not_oco(demo):
    ds, *_ = demo
    model = get_model("ref-context-shortcut")
    rng = np.random.default_rng(1)
    calls = {k: [] for k in ("base", "RO", "OCO", "DOCO")}
    multi = ds.boxes.groupby("image_id")["finding"].nunique()
    for image_id in multi[multi >= 2].index:
        image, boxes = ds.load_image(image_id), ds.boxes_of(image_id)
        for c in sorted({b[0] for b in boxes}):
            occluders = {"base": [], "RO": [_free_box(image.shape, boxes, rng)],
                         "OCO": [b for b in boxes if b[0] == c], "DOCO": [b for b in boxes if b[0] != c]}
            out = model.score_yes_no([ScoreRequest(_noise_in(image, occ, rng), f"Does this chest X-ray show {c}?",
                                                   boxes=tuple(boxes)) for occ in occluders.values()])
            assert out[0]["margin"] == out[2]["margin"]  # its own boxes are invisible to it
            for key, res in zip(occluders, out):
                calls[key].append(res["readout"] == "yes")
    base, ro, oco, doco = (np.array(calls[k]) for k in ("base", "RO", "OCO", "DOCO"))
    assert base.any() and (base & ro).any()
    # flip rates against the baseline and, as the paper defines FR, against RO (calls 1 -> 0)
    for ref in (base, ro):
        fr_oco = (ref & ~oco).sum() / ref.sum()
        fr_doco = (ref & ~doco).sum() / ref.sum()
        assert fr_oco == 0.0 and fr_doco > fr_oco


def test_context_texture_ignores_only_the_finding_boxes():
    rng = np.random.default_rng(0)
    img = rng.random((20, 20)) * 0.02
    changed = img.copy()
    changed[2:6, 2:6] = 1.0
    box = [("Edema", 0, 0, 8, 8)]
    assert context_texture(changed, box, "Edema") == context_texture(img, box, "Edema")
    assert context_texture(changed, box, "Cardiomegaly") > context_texture(img, box, "Cardiomegaly")


def test_cnn_training_is_deterministic():
    from shovir_core.training.reference import train_cnn

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 1, 32, 32)).astype(np.float32)
    y = (rng.random((8, 3)) > 0.5).astype(float)
    a, _ = train_cnn(x, y, epochs=1, seed=5, batch_size=4)
    b, _ = train_cnn(x, y, epochs=1, seed=5, batch_size=4)
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)



def _count_cnn_images(model) -> list[int]:
    """Record the number of images of every CNN call of ``model``."""
    sizes, forward = [], model.probabilities

    def counted(images):
        sizes.append(len(images))
        return forward(images)

    model.probabilities = counted
    return sizes


@pytest.mark.parametrize("name", ["ref-image-classifier", "ref-anchored@0.5"])
def test_cnn_runs_once_per_distinct_image_and_answers_as_alone(demo, name):
    """A call runs the CNN once per distinct image (equal pixels in another array included), and
    every answer is exactly what the request gets alone: an input's output never depends on the
    other inputs of its call (which the inference cache's chunks rely on)."""
    ds, ids, images, reports = demo
    ids = ids[:12]
    reqs = [ScoreRequest(images[i], q, report=r, finding=f)
            for i in ids for f, q in QUESTIONS for r in (None, reports[i])]
    reqs += [ScoreRequest(images[i].copy(), q, finding=f) for i in ids[:3] for f, q in QUESTIONS[:2]]
    model = get_model(name)
    sizes = _count_cnn_images(model)
    together = model.score_yes_no(reqs, answer_tokens=1)
    assert sum(sizes) == len(ids)
    alone = [get_model(name).score_yes_no([r], answer_tokens=1)[0] for r in reqs[::7]]
    assert together[::7] == alone
    assert model.score_yes_no(reqs[::-1], answer_tokens=1) == together[::-1]
    assert sum(sizes) == len(ids), "images of an earlier call are not recomputed"
    probs = model.probabilities([images[i] for i in ids])
    assert np.array_equal(probs, np.concatenate([get_model(name).probabilities([images[i]]) for i in ids]))
    fresh = get_model(name)
    report_sizes = _count_cnn_images(fresh)
    many = fresh.generate_reports([images[i] for i in ids] + [images[ids[0]].copy()])
    assert sum(report_sizes) == len(ids)
    assert many == [r for i in ids + ids[:1] for r in get_model(name).generate_reports([images[i]])]
    with pytest.raises(ValueError, match="no image at position 1"):
        fresh.generate_reports([images[ids[0]], None])
