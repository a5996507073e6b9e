"""ModaLens image-swap pairing: one substitute image per source case.

The paper's rule (ModaLens §3, "Substitute sampling"), applied once per case
with a seeded stream derived from (seed, source image id):

1. ``"differs-positive-set"``: uniformly among the same patient's *other*
   frontal studies whose CheXpert positive set differs from the source's;
2. ``"any-other"``: otherwise, uniformly among any other study of the patient;
3. ``"cross-patient"``: otherwise (single-study patients), uniformly among
   frontal images of other patients whose positive set differs.

View and time are not matched. The structural similarity (SSIM,
:func:`skimage.metrics.structural_similarity`) between source and substitute is
computed on greyscale images resized to ``ssim_size`` x ``ssim_size`` (the paper:
896 x 896) and a substitute with SSIM above ``ssim_threshold`` (0.9) is
rejected and the next candidate of the tier (then the next tier) is tried.

The cohort is a DataFrame with one row per image and the columns

``image_id``   the image (the case id of a source);
``study_id``   its study (tiers 1-2 need a *different* study);
``patient_id`` its patient;
``view``       view position (``PA``/``AP`` are frontal, see ``frontal_views``);
``positive``   the study's positive label set (iterable of class names, or a
               ``|``-joined string; empty for no positive finding);
``path``       the image file, used for SSIM unless ``load_image`` is given.

:func:`cohort_from_dataset` builds it from a :class:`shovir_core.data.Dataset`.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np
import pandas as pd
from PIL import Image
from skimage.metrics import structural_similarity

from ..labels import FINDINGS_13
from ..vocab import TIERS
from .rng import item_rng

__all__ = [
    "TIERS", "FRONTAL_VIEWS", "COHORT_COLUMNS", "cohort_from_dataset", "sample_substitutes", "pair_ssim",
    "ssim_image", "ssim_workers", "SSIM_THREADS_ENV",
]

FRONTAL_VIEWS = ("PA", "AP")
COHORT_COLUMNS = ("image_id", "study_id", "patient_id", "view", "positive")


def cohort_from_dataset(dataset) -> pd.DataFrame:
    """The pairing cohort of a :class:`~shovir_core.data.Dataset`.

    ``positive`` is the tuple of the 13 findings whose label code is 1 (blank,
    negative and uncertain are not positive).
    """
    labels = dataset.labels.reindex(dataset.images["image_id"])
    pos = labels[list(FINDINGS_13)].to_numpy(dtype=float) == 1.0
    cohort = dataset.images[["image_id", "study_id", "patient_id", "view", "path"]].copy()
    cohort["positive"] = [tuple(c for c, flag in zip(FINDINGS_13, row) if flag) for row in pos]
    return cohort.reset_index(drop=True)


def _as_set(value) -> frozenset:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return frozenset()
    if isinstance(value, str):
        return frozenset(s.strip() for s in value.split("|") if s.strip())
    if isinstance(value, Iterable):
        return frozenset(str(v) for v in value)
    raise ValueError(f"positive label set must be an iterable of class names or a '|'-joined string, got {value!r}")


def ssim_image(image: np.ndarray, *, size: int) -> np.ndarray:
    """Greyscale float image in [0, 1], resized (bilinear) to ``size`` x ``size``."""
    arr = np.asarray(image)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"SSIM needs an integer image, got dtype {arr.dtype}")
    scale = float(np.iinfo(arr.dtype).max)
    grey = arr.astype(np.float32) / scale
    if grey.ndim == 3:  # ITU-R 601-2 luma, as PIL's convert("L")
        grey = grey[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    resized = Image.fromarray(grey, mode="F").resize((size, size), Image.Resampling.BILINEAR)
    return np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)


def pair_ssim(a: np.ndarray, b: np.ndarray, *, size: int = 896) -> float:
    """SSIM of two images at ``size`` x ``size`` greyscale (data range 1, 7x7 window)."""
    return float(structural_similarity(ssim_image(a, size=size), ssim_image(b, size=size), data_range=1.0))


def _default_loader(cohort: pd.DataFrame) -> Callable[[str], np.ndarray]:
    if "path" not in cohort.columns:
        raise ValueError("sample_substitutes: the cohort needs a 'path' column for SSIM, or pass load_image")
    paths = dict(zip(cohort["image_id"], cohort["path"]))

    def load(image_id: str) -> np.ndarray:
        with Image.open(paths[image_id]) as im:
            return np.asarray(im)

    return load


SSIM_THREADS_ENV = "SHOVIR_SSIM_THREADS"
"""Environment variable: threads that draw substitutes side by side (default: the cores this process may use,
at most 8)."""


def ssim_workers() -> int:
    """Threads for :func:`sample_substitutes`: ``$SHOVIR_SSIM_THREADS``, else the cores this process may use
    (its CPU affinity: a SLURM task's CPUs), at most 8.

    At the paper's scale a draw compares 3,199 sources with their candidates at 896 x 896 px, about 50 ms
    each on one core (171 s for the rehearsal's MIMIC-shaped tree); scikit-image's SSIM (scipy.ndimage's
    filters, numpy) and PIL's decoding and resizing release the GIL, so threads share the cores. The draw
    is the same with any number of threads (each source's substitute depends on the seed, the source and
    the cohort only; tests/test_perturb_swap.py)."""
    raw = os.environ.get(SSIM_THREADS_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"${SSIM_THREADS_ENV} must be a positive integer, got {raw!r}")
        return int(raw)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 8))


def sample_substitutes(cohort: pd.DataFrame, *, seed: int, sources: Iterable[str] | None = None,
                       ssim_size: int = 896, ssim_threshold: float = 0.9,
                       frontal_views: Iterable[str] = FRONTAL_VIEWS,
                       load_image: Callable[[str], np.ndarray] | None = None,
                       threads: int | None = None) -> pd.DataFrame:
    """Draw one substitute image per source case (the ModaLens three-tier rule).

    Parameters
    ----------
    cohort : DataFrame
        One row per image with the columns described in the module docstring.
    seed : int
        The substitute seed (the paper: 0, with redraws 1 and 2). Each case's
        draw depends on (seed, source image id) only, never on row order.
    sources : iterable of str, optional
        Source image ids (cases); default every frontal image of the cohort.
    ssim_size : int
        Side of the square greyscale images SSIM is computed on.
    ssim_threshold : float
        Substitutes with SSIM above it are rejected.
    frontal_views : iterable of str
        Views counted as frontal (tiers 1 and 3 and default sources).
    load_image : callable, optional
        ``image_id -> ndarray``; default reads the cohort's ``path``. Called from several threads at once
        when ``threads`` > 1.
    threads : int, optional
        Sources drawn side by side (default :func:`ssim_workers`); the result does not depend on it.

    Returns
    -------
    DataFrame
        One row per source, sorted by source image id: ``image_id, study_id,
        patient_id, view, positive`` of the source, ``sub_image_id,
        sub_study_id, sub_patient_id, sub_view, sub_positive``, ``tier`` (1-3,
        0 when no candidate remains), ``tier_name``, ``pair_type`` (same / cross
        patient), ``n_candidates`` (in the chosen tier), ``n_rejected_ssim``,
        ``ssim``, ``ssim_size``, ``ssim_threshold``, ``seed``.
    """
    missing = [c for c in COHORT_COLUMNS if c not in cohort.columns]
    if missing:
        raise ValueError(f"sample_substitutes: cohort lacks columns {missing} (need {list(COHORT_COLUMNS)})")
    if cohort["image_id"].duplicated().any():
        raise ValueError(f"sample_substitutes: duplicate image_id {cohort['image_id'][cohort['image_id'].duplicated()].iloc[0]!r}")
    from .validation import PerturbInputError, check_int, check_real

    if isinstance(ssim_size, bool) or not (isinstance(ssim_size, (int, np.integer)) and ssim_size >= 7):
        raise ValueError(f"ssim_size must be an integer >= 7 (the SSIM window), got {ssim_size!r}")
    check_int(seed, "seed", lo=0)
    check_real(ssim_threshold, "ssim_threshold", lo=-1.0, hi=1.0)
    if not isinstance(frontal_views, (str, bytes)):
        frontal_views = list(frontal_views)
    if isinstance(frontal_views, (str, bytes)) or not all(isinstance(v, str) for v in frontal_views):
        raise PerturbInputError(f"frontal_views must be a list of view names ('' for a blank view), "
                                f"got {frontal_views!r}")
    frontal_views = {v.upper() for v in frontal_views}
    if sources is not None and isinstance(sources, (str, bytes)):
        raise ValueError(f"sample_substitutes: sources must be a list of image ids, got {sources!r}")
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
        unknown = [s for s in sources if s not in df.index]
        if unknown:
            raise ValueError(f"sample_substitutes: source image {unknown[0]!r} is not in the cohort")
    loader = load_image or _default_loader(cohort)
    # Rows are in image-id order, so every candidate list below (np.flatnonzero / masks over
    # increasing row numbers) is in image-id order, the order the permutations index into.
    ids = df.index.to_numpy(dtype=object)
    patient = pd.factorize(df["patient_id"])[0]
    study = pd.factorize(df["study_id"])[0]
    pos_keys: dict[frozenset, int] = {}
    pos = np.array([pos_keys.setdefault(p, len(pos_keys)) for p in df["_pos"]], dtype=np.int64)
    pos_text = ["|".join(sorted(p)) for p in pos_keys]
    frontal = df["_frontal"].to_numpy(dtype=bool)
    frontal_rows = np.flatnonzero(frontal)
    by_row = np.argsort(patient, kind="stable")  # rows grouped by patient, increasing within a patient
    bounds = np.searchsorted(patient[by_row], np.arange(patient.max(initial=-1) + 2))
    study_col, patient_col, view_col = (df[c].to_numpy() for c in ("study_id", "patient_id", "view"))

    def candidates(k: int):
        """The tiers of row ``k``, lazily: tier 3 is only built when tiers 1-2 give no substitute."""
        rows = by_row[bounds[patient[k]]:bounds[patient[k] + 1]]
        same = rows[study[rows] != study[k]]
        yield same[frontal[same] & (pos[same] != pos[k])]
        yield same
        others = frontal_rows[(pos[frontal_rows] != pos[k]) & (patient[frontal_rows] != patient[k])]
        yield others

    def draw(src: str, k: int) -> dict:
        """The substitute of source ``src`` (cohort row ``k``): a function of the seed, the source and the
        cohort only, so sources can be drawn in any order, on several threads."""
        (rng,) = item_rng(seed, src, "substitute", n=1)
        src_img = None
        chosen, tier, n_cand, score, rejected = None, 0, 0, float("nan"), set()
        for t, cands in enumerate(candidates(k), start=1):
            if not len(cands):
                continue
            n_cand = len(cands)
            for j in rng.permutation(len(cands)):
                cand = int(cands[j])
                if cand in rejected:  # already rejected in an earlier tier
                    continue
                if src_img is None:
                    src_img = ssim_image(loader(src), size=ssim_size)
                value = float(structural_similarity(src_img, ssim_image(loader(ids[cand]), size=ssim_size),
                                                    data_range=1.0))
                if value > ssim_threshold:
                    rejected.add(cand)
                    continue
                chosen, tier, score = cand, t, value
                break
            if chosen is not None:
                break
        found = chosen is not None
        return {
            "image_id": src, "study_id": study_col[k], "patient_id": patient_col[k], "view": view_col[k],
            "positive": pos_text[pos[k]],
            "sub_image_id": ids[chosen] if found else None, "sub_study_id": study_col[chosen] if found else None,
            "sub_patient_id": patient_col[chosen] if found else None,
            "sub_view": view_col[chosen] if found else None,
            "sub_positive": pos_text[pos[chosen]] if found else None,
            "tier": tier, "tier_name": TIERS[tier - 1] if tier else "none",
            "pair_type": None if not found else ("same-patient" if patient[chosen] == patient[k]
                                                 else "cross-patient"),
            "n_candidates": n_cand if found else 0, "n_rejected_ssim": len(rejected),
            "ssim": score, "ssim_size": int(ssim_size), "ssim_threshold": float(ssim_threshold),
            "seed": int(seed),
        }

    rows = df.index.get_indexer(sources)
    workers = min(ssim_workers() if threads is None else int(threads), max(1, len(sources)))
    if workers > 1:  # SSIM and image decoding run outside the GIL (scipy.ndimage, PIL): threads share the cores
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ssim") as pool:
            out_rows = list(pool.map(draw, sources, rows))
    else:
        out_rows = [draw(src, k) for src, k in zip(sources, rows)]
    return pd.DataFrame(out_rows)
