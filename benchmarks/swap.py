"""Benchmark: ModaLens substitute sampling, engine vs the straightforward per-source algorithm.

The baseline (:func:`baseline_sample_substitutes`) is the first implementation of
:func:`shovir_core.perturb.sample_substitutes`, kept here as the reference: for
every source it builds the three tier lists element by element with ``df.at``
look-ups, so the cross-patient tier makes it quadratic in cohort size. The
engine selects candidates with integer codes (patient, study, positive-set key)
and numpy masks over the patient's rows or the frontal images. Both derive each
case's stream from ``(seed, source image id)`` and draw one permutation per
non-empty tier, so their outputs must be identical; the benchmark checks that
before it reports times.

Two cohorts:

* ``demo-64px``: :func:`shovir_core.perturb.cohort_from_dataset` of the demo
  data set (SSIM on the 64 px images at ``--ssim-size``);
* ``synthetic``: ``--n-cases`` frontal cases (default 3,199, the MIMIC-CXR
  cohort size) of patients with 1-5 studies, 1-2 images per study, lateral
  views and random positive sets; SSIM on small random images so that the
  candidate selection, not SSIM, is what is timed.

Run: ``python benchmarks/swap.py [--n-cases 3199] [--repeats 1]``. Prints the
time of each and their ratio.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, Iterable

import numpy as np
import pandas as pd
from skimage.metrics import structural_similarity

from shovir_core.data import load_dataset
from shovir_core.labels import FINDINGS_13
from shovir_core.perturb import cohort_from_dataset, sample_substitutes
from shovir_core.perturb.rng import item_rng
from shovir_core.perturb.swap import COHORT_COLUMNS, FRONTAL_VIEWS, TIERS, _as_set, _default_loader, ssim_image


def baseline_sample_substitutes(cohort: pd.DataFrame, *, seed: int, sources: Iterable[str] | None = None,
                                ssim_size: int = 896, ssim_threshold: float = 0.9,
                                frontal_views: Iterable[str] = FRONTAL_VIEWS,
                                load_image: Callable[[str], np.ndarray] | None = None) -> pd.DataFrame:
    """The reference algorithm: per-source tier lists built with ``df.at`` (quadratic)."""
    missing = [c for c in COHORT_COLUMNS if c not in cohort.columns]
    if missing:
        raise ValueError(f"cohort lacks columns {missing}")
    frontal_views = {str(v).upper() for v in frontal_views}
    df = cohort.assign(
        image_id=cohort["image_id"].astype(str), study_id=cohort["study_id"].astype(str),
        patient_id=cohort["patient_id"].astype(str),
        _pos=[_as_set(v) for v in cohort["positive"]],
        _frontal=cohort["view"].astype(str).str.upper().isin(frontal_views),
    ).sort_values("image_id", kind="stable").set_index("image_id", drop=False)
    if sources is None:
        sources = df.index[df["_frontal"]].tolist()
    else:
        sources = sorted({str(s) for s in sources})
    loader = load_image or _default_loader(cohort)
    by_patient = {k: v.index.tolist() for k, v in df.groupby("patient_id", sort=True)}
    frontal_ids = df.index[df["_frontal"]].to_numpy()
    frontal_pos = df.loc[frontal_ids, "_pos"].tolist()
    rows = []
    for src in sources:
        s = df.loc[src]
        same = [i for i in by_patient[s.patient_id] if df.at[i, "study_id"] != s.study_id]
        tiers = (
            [i for i in same if df.at[i, "_frontal"] and df.at[i, "_pos"] != s._pos],
            same,
            [i for i, pos in zip(frontal_ids, frontal_pos)
             if pos != s._pos and df.at[i, "patient_id"] != s.patient_id],
        )
        (rng,) = item_rng(seed, src, "substitute", n=1)
        src_img = None
        chosen, tier, n_cand, score, rejected = None, 0, 0, float("nan"), set()
        for t, cands in enumerate(tiers, start=1):
            if not cands:
                continue
            n_cand = len(cands)
            for j in rng.permutation(len(cands)):
                cand = cands[j]
                if cand in rejected:
                    continue
                if src_img is None:
                    src_img = ssim_image(loader(src), size=ssim_size)
                value = float(structural_similarity(src_img, ssim_image(loader(cand), size=ssim_size),
                                                    data_range=1.0))
                if value > ssim_threshold:
                    rejected.add(cand)
                    continue
                chosen, tier, score = cand, t, value
                break
            if chosen is not None:
                break
        sub = df.loc[chosen] if chosen is not None else None
        rows.append({
            "image_id": src, "study_id": s.study_id, "patient_id": s.patient_id, "view": s.view,
            "positive": "|".join(sorted(s._pos)),
            "sub_image_id": chosen, "sub_study_id": None if sub is None else sub.study_id,
            "sub_patient_id": None if sub is None else sub.patient_id,
            "sub_view": None if sub is None else sub.view,
            "sub_positive": None if sub is None else "|".join(sorted(sub._pos)),
            "tier": tier, "tier_name": TIERS[tier - 1] if tier else "none",
            "pair_type": None if sub is None else ("same-patient" if sub.patient_id == s.patient_id
                                                   else "cross-patient"),
            "n_candidates": n_cand if chosen is not None else 0, "n_rejected_ssim": len(rejected),
            "ssim": score, "ssim_size": int(ssim_size), "ssim_threshold": float(ssim_threshold),
            "seed": int(seed),
        })
    return pd.DataFrame(rows)


def synthetic_cohort(n_cases: int, *, seed: int = 0) -> pd.DataFrame:
    """About ``n_cases`` frontal images (cut to exactly ``n_cases``) of patients with 1-5 studies.

    Each study has one frontal image (PA or AP), sometimes a second frontal image and sometimes
    a lateral one; positive sets are drawn from a few common findings (often empty), so every
    tier occurs, including identical positive sets within a patient.
    """
    rng = np.random.default_rng(seed)
    common = list(FINDINGS_13[:5])
    rows, n_frontal, patient = [], 0, 0
    while n_frontal < n_cases:
        patient += 1
        for s in range(int(rng.integers(1, 6))):
            k = int(rng.integers(0, 3))
            positive = "|".join(sorted(rng.choice(common, size=k, replace=False))) if k else ""
            views = [str(rng.choice(["PA", "AP"]))]
            if rng.random() < 0.1:
                views.append("AP")
            if rng.random() < 0.3:
                views.append("LL")
            for v, view in enumerate(views):
                if view != "LL":
                    if n_frontal == n_cases:
                        continue
                    n_frontal += 1
                rows.append((f"p{patient:05d}s{s}i{v}", f"p{patient:05d}s{s}", f"p{patient:05d}", view, positive))
    return pd.DataFrame(rows, columns=["image_id", "study_id", "patient_id", "view", "positive"])


def synthetic_loader(cohort: pd.DataFrame, *, size: int = 16) -> Callable[[str], np.ndarray]:
    """Small random 8-bit images, one per image id (so SSIM stays cheap and mostly low)."""
    rng = np.random.default_rng(1)
    images = {i: rng.integers(0, 256, (size, size), dtype=np.uint8) for i in cohort["image_id"]}
    return images.__getitem__


def _best(fn, repeats: int) -> tuple[float, pd.DataFrame]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-cases", type=int, default=3199, help="frontal cases of the synthetic cohort")
    parser.add_argument("--ssim-size", type=int, default=64, help="SSIM side for the demo-64px cohort")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    demo = cohort_from_dataset(load_dataset("demo-64px"))
    synth = synthetic_cohort(args.n_cases)
    cases = (
        ("demo-64px", demo, {"ssim_size": args.ssim_size}),
        ("synthetic", synth, {"ssim_size": 16, "load_image": synthetic_loader(synth)}),
    )
    for label, cohort, options in cases:
        t_engine, engine = _best(lambda: sample_substitutes(cohort, seed=args.seed, **options), args.repeats)
        t_base, base = _best(lambda: baseline_sample_substitutes(cohort, seed=args.seed, **options), args.repeats)
        pd.testing.assert_frame_equal(engine, base, check_exact=True)
        tiers = engine["tier"].value_counts().sort_index().to_dict()
        print(f"{label}: {len(cohort)} images, {len(engine)} sources, tiers {tiers}; outputs identical")
        print(f"  engine   {t_engine:8.3f} s")
        print(f"  baseline {t_base:8.3f} s")
        print(f"  speed-up {t_base / t_engine:8.1f}x")


if __name__ == "__main__":
    main()
