"""ModaLens image-swap pairing: tiers, determinism, SSIM rejection."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.data import load_dataset
from shovir_core.perturb import TIERS, cohort_from_dataset, pair_ssim, sample_substitutes


def _img(k: int) -> np.ndarray:
    rng = np.random.default_rng(k)
    return rng.integers(0, 255, (32, 32)).astype(np.uint8)


def make_cohort():
    rows = [
        # patient 1: two other frontal studies with a different positive set, one with the same set
        ("p1s1", "s1", "1", "PA", "Edema"), ("p1s2", "s2", "1", "PA", "Cardiomegaly"),
        ("p1s3", "s3", "1", "AP", ""), ("p1s4", "s4", "1", "PA", "Edema"),
        # patient 2: other studies share the positive set or are lateral -> tier 2
        ("p2s1", "t1", "2", "PA", "Edema"), ("p2s2", "t2", "2", "PA", "Edema"),
        ("p2lat", "t3", "2", "LL", "Atelectasis"),
        # patient 3: a single study -> tier 3
        ("p3s1", "u1", "3", "AP", "Edema"),
        # patient 4: two images of ONE study -> the other image is the same study: tier 3
        ("p4a", "v1", "4", "PA", "Cardiomegaly"), ("p4b", "v1", "4", "AP", "Cardiomegaly"),
    ]
    df = pd.DataFrame(rows, columns=["image_id", "study_id", "patient_id", "view", "positive"])
    return df


IMAGES = {name: _img(k) for k, name in enumerate(make_cohort()["image_id"])}


def loader(image_id):
    return IMAGES[image_id]


def pairs(cohort=None, seed=0, **kw):
    return sample_substitutes(make_cohort() if cohort is None else cohort, seed=seed, ssim_size=32,
                              load_image=loader, **kw).set_index("image_id")


def test_tiers_follow_the_rule():
    out = pairs()
    assert set(out.index) == set(make_cohort().query("view in ['PA', 'AP']")["image_id"])
    p1 = out.loc["p1s1"]
    assert p1.tier == 1 and p1.tier_name == TIERS[0] and p1.sub_image_id in {"p1s2", "p1s3"}
    assert p1.n_candidates == 2 and p1.pair_type == "same-patient"
    p2 = out.loc["p2s1"]
    assert p2.tier == 2 and p2.sub_image_id in {"p2s2", "p2lat"} and p2.n_candidates == 2
    p3 = out.loc["p3s1"]
    assert p3.tier == 3 and p3.pair_type == "cross-patient" and p3.sub_patient_id != "3"
    assert p3.sub_positive != p3.positive and p3.sub_view in ("PA", "AP")
    assert out.loc["p4a"].tier == 3, "an image of the same study is not another study"
    assert (out["ssim"] <= 0.9).all() and (out["ssim_size"] == 32).all()


def test_deterministic_and_independent_of_row_order():
    a = pairs(seed=0)
    shuffled = make_cohort().sample(frac=1.0, random_state=1)
    b = pairs(shuffled, seed=0)
    pd.testing.assert_frame_equal(a.sort_index(), b.sort_index())
    # a subset of sources draws the same substitutes
    c = pairs(seed=0, sources=["p3s1", "p1s1"])
    assert c.loc["p1s1", "sub_image_id"] == a.loc["p1s1", "sub_image_id"]
    assert c.loc["p3s1", "sub_image_id"] == a.loc["p3s1", "sub_image_id"]


def test_uniform_within_tier():
    picks = pd.Series([pairs(seed=s, sources=["p3s1"]).loc["p3s1", "sub_image_id"] for s in range(60)])
    # tier-3 candidates of p3s1: frontal images of other patients with a positive set other than {Edema}
    assert set(picks) == {"p1s2", "p1s3", "p4a", "p4b"}
    assert picks.value_counts().min() >= 5


def test_ssim_rejection_falls_through():
    cohort = make_cohort()
    global IMAGES
    saved = dict(IMAGES)
    try:
        IMAGES["p1s2"] = IMAGES["p1s1"].copy()  # identical image: SSIM 1 > 0.9, rejected
        IMAGES["p1s3"] = IMAGES["p1s1"].copy()
        out = pairs(cohort, sources=["p1s1"]).loc["p1s1"]
        assert out.tier == 2 and out.sub_image_id == "p1s4" and out.n_rejected_ssim == 2
    finally:
        IMAGES = saved


def test_no_candidate_at_all():
    cohort = pd.DataFrame([("a", "s", "1", "PA", "Edema")], columns=["image_id", "study_id", "patient_id", "view",
                                                                     "positive"])
    out = sample_substitutes(cohort, seed=0, ssim_size=32, load_image=loader).iloc[0]
    assert out.tier == 0 and out.tier_name == "none" and out.sub_image_id is None


def test_pair_ssim():
    a = _img(1)
    assert pair_ssim(a, a, size=64) == pytest.approx(1.0)
    assert pair_ssim(a, _img(2), size=64) < 0.5
    rgb = np.repeat(a[..., None], 3, axis=2)
    assert pair_ssim(a, rgb, size=64) == pytest.approx(1.0, abs=1e-3)


def test_cohort_validation():
    with pytest.raises(ValueError, match="lacks columns"):
        sample_substitutes(make_cohort().drop(columns="positive"), seed=0, load_image=loader)
    with pytest.raises(ValueError, match="not in the cohort"):
        sample_substitutes(make_cohort(), seed=0, sources=["nope"], load_image=loader)
    with pytest.raises(ValueError, match="'path' column"):
        sample_substitutes(make_cohort(), seed=0)


def test_cohort_from_dataset_and_demo_pairs():
    ds = load_dataset("demo-64px")
    cohort = cohort_from_dataset(ds)
    assert list(cohort.columns[:5]) == ["image_id", "study_id", "patient_id", "view", "path"]
    row = cohort.set_index("image_id").loc["00000001_002"]
    assert set(row.positive) == {"Cardiomegaly", "Pleural Effusion"}
    sources = sorted(cohort["image_id"])[:12]
    out = sample_substitutes(cohort, seed=0, sources=sources, ssim_size=64)
    assert len(out) == 12 and out["tier"].isin([1, 2, 3]).all()
    same = out[out["tier"] == 1]
    assert (same["sub_patient_id"] == same["patient_id"]).all()
    assert (same["sub_positive"] != same["positive"]).all()


def _random_cohort(n_patients: int, seed: int) -> tuple[pd.DataFrame, dict]:
    """Patients with 1-4 studies of 1-3 images (frontal and lateral), positive sets from three findings.

    Every third patient's images are one picture, so its same-patient candidates fail SSIM and
    the draw falls through the tiers.
    """
    rng = np.random.default_rng(seed)
    rows, images = [], {}
    for p in range(n_patients):
        shared = rng.integers(0, 255, (16, 16)).astype(np.uint8)
        for s in range(int(rng.integers(1, 5))):
            positive = "|".join(sorted(rng.choice(["Edema", "Cardiomegaly", "Atelectasis"],
                                                  size=int(rng.integers(0, 3)), replace=False)))
            for i in range(int(rng.integers(1, 4))):
                image_id = f"img{rng.integers(0, 10**6):06d}-{p}-{s}-{i}"  # ids not in patient order
                rows.append((image_id, f"st{p}-{s}", f"pt{p}", str(rng.choice(["PA", "AP", "LL", "ap"])), positive))
                images[image_id] = shared if p % 3 == 0 else rng.integers(0, 255, (16, 16)).astype(np.uint8)
    return pd.DataFrame(rows, columns=["image_id", "study_id", "patient_id", "view", "positive"]), images


def _brute_force(cohort: pd.DataFrame, images: dict, seed: int) -> dict:
    """The three-tier rule written out row by row (image-id order, one permutation per non-empty tier)."""
    from shovir_core.perturb.rng import item_rng

    rows = sorted(cohort.itertuples(index=False), key=lambda r: r.image_id)
    pos = {r.image_id: frozenset(filter(None, r.positive.split("|"))) for r in rows}
    frontal = {r.image_id: r.view.upper() in ("PA", "AP") for r in rows}
    out = {}
    for s in rows:
        if not frontal[s.image_id]:
            continue
        same = [r.image_id for r in rows if r.patient_id == s.patient_id and r.study_id != s.study_id]
        tiers = ([i for i in same if frontal[i] and pos[i] != pos[s.image_id]], same,
                 [r.image_id for r in rows if frontal[r.image_id] and pos[r.image_id] != pos[s.image_id]
                  and r.patient_id != s.patient_id])
        (rng,) = item_rng(seed, s.image_id, "substitute", n=1)
        rejected, result = set(), (None, 0, 0)
        for t, cands in enumerate(tiers, start=1):
            if not cands:
                continue
            for j in rng.permutation(len(cands)):
                if cands[j] in rejected:
                    continue
                if pair_ssim(images[s.image_id], images[cands[j]], size=16) > 0.9:
                    rejected.add(cands[j])
                    continue
                result = (cands[j], t, len(cands))
                break
            if result[0] is not None:
                break
        out[s.image_id] = (*result, len(rejected))
    return out


@pytest.mark.parametrize("seed", [0, 3])
def test_matches_the_rule_written_out(seed):
    cohort, images = _random_cohort(40, seed=seed)
    out = sample_substitutes(cohort, seed=seed, ssim_size=16, load_image=images.__getitem__)
    expected = _brute_force(cohort, images, seed)
    got = {r.image_id: (r.sub_image_id, r.tier, r.n_candidates, r.n_rejected_ssim) for r in out.itertuples()}
    assert got == expected
    assert set(out["tier"]) == {1, 2, 3} and (out["n_rejected_ssim"] > 0).any()
    assert out["image_id"].is_monotonic_increasing
    sub = cohort.set_index("image_id").loc[out["sub_image_id"]]
    assert out["sub_study_id"].tolist() == sub["study_id"].tolist()
    assert out["sub_view"].tolist() == sub["view"].tolist()
    assert (out["pair_type"] == np.where(out["sub_patient_id"] == out["patient_id"], "same-patient",
                                          "cross-patient")).all()


def test_threads_draw_the_same_pairs(monkeypatch):
    """Sources drawn on several threads (the paper-scale draw: SSIM at 896 px releases the GIL) give the frame
    of one thread, row for row; $SHOVIR_SSIM_THREADS sets the default and refuses a non-count."""
    import threading

    from shovir_core.perturb.swap import SSIM_THREADS_ENV, ssim_workers

    cohort, images = _random_cohort(60, seed=5)
    seen = set()

    def load(image_id):
        seen.add(threading.current_thread().name)
        return images[image_id]

    one = sample_substitutes(cohort, seed=5, ssim_size=16, load_image=load, threads=1)
    assert seen == {threading.current_thread().name}
    seen.clear()
    four = sample_substitutes(cohort, seed=5, ssim_size=16, load_image=load, threads=4)
    assert len(seen) > 1 and all(name.startswith("ssim") for name in seen)
    pd.testing.assert_frame_equal(one, four)
    assert set(one["tier"]) == {1, 2, 3}  # the draw falls through every tier: the comparison covers them
    monkeypatch.setenv(SSIM_THREADS_ENV, "3")
    assert ssim_workers() == 3
    monkeypatch.setenv(SSIM_THREADS_ENV, "0")
    with pytest.raises(ValueError, match=SSIM_THREADS_ENV):
        ssim_workers()
    monkeypatch.delenv(SSIM_THREADS_ENV)
    assert 1 <= ssim_workers() <= 8
