"""Fit the reference models' parameters on the demo NIH box images.

``python -m shovir_core.training.reference`` (the demo training command) writes, under the tracked
``shovir_core/resources/``:

``ref_image_classifier.safetensors``  the CNN weights of ``ref-image-classifier`` (~250 kB), trained
                                       with occlusion augmentation (:func:`make_augment`) so that its
                                       evidence for a finding lives in that finding's boxes
``ref_reference_models.json``          label priors, CNN metadata (classes, standardisation, training
                                       settings, training accuracy, weight hash) and the context
                                       thresholds of ``ref-context-shortcut``

Any other ``--dataset`` (a user's NIH folder, a credentialed ``mimic:``/``padchest:`` copy) writes to
``$SHOVIR_RUNS/exports/reference-models/<dataset>`` by default, and an ``--out`` inside the repository's
tracked tree is refused unless ``--force``: weights fitted on credentialed data are derived from it
and must never be committed (:mod:`shovir_core.output_dirs`). The tracked ``resources/`` is written only
by the demo training command.

Deterministic: weights start from a seeded ``torch.Generator`` and batches are shuffled by a
``numpy.random.Generator`` from the same seed; full-batch statistics use no randomness. Runs in well
under two minutes on two CPU cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from .. import paths
from ..labels import FINDINGS_13, apply_policy
from ..models.protocol import to_gray_float

__all__ = ["label_priors", "context_calibration", "train_cnn", "main"]


def label_priors(labels) -> dict[str, float]:
    """Laplace-smoothed prevalence (uncertain/blank -> negative) of the 13 findings and the composite."""
    y = apply_policy(labels.reindex(columns=list(FINDINGS_13)), "u-negative").to_numpy(dtype=float)
    n = len(y)
    priors = {f: float((y[:, i].sum() + 1) / (n + 2)) for i, f in enumerate(FINDINGS_13)}
    priors["composite"] = float(((y.max(axis=1) > 0).sum() + 1) / (n + 2))
    return priors


def context_calibration(grays: list[np.ndarray], boxes: list[list], priors: dict[str, float]) -> dict:
    """Per-finding thresholds (quantile at the prior: that share reads positive) and the texture spread."""
    from ..models.reference import context_textures

    per_image = [context_textures(g, b, FINDINGS_13) for g, b in zip(grays, boxes)]
    values = {f: np.array([t[f] for t in per_image]) for f in FINDINGS_13}
    allv = np.concatenate(list(values.values()))
    q75, q25 = np.percentile(allv, [75, 25])
    return {
        "statistic": "mean of min(|dx| + |dy|, 0.05) over [0,1] pixels of the other findings' boxes (outside its own)",
        "thresholds": {f: float(np.quantile(values[f], priors[f])) for f in FINDINGS_13},
        "scale": float(max(q75 - q25, 1e-6)),
    }


def train_cnn(x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int, batch_size: int = 32,
              lr: float = 3e-3, augment=None):
    """Train the CNN with Adam on binary cross-entropy; returns (state_dict, training accuracy).

    Parameters
    ----------
    x
        Standardised inputs, shape (n, 1, H, W), float32 (the accuracy is measured on them).
    y
        Binary targets, shape (n, k).
    augment
        Optional ``augment(rng) -> (x, y)`` drawing each epoch's training set with the run's
        ``numpy.random.Generator``.
    """
    import torch

    from ..models.cnn import build_cnn

    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_cnn(n_classes=y.shape[1], generator=gen)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    pos = y.mean(axis=0)
    pos_weight = torch.tensor(np.clip((1 - pos) / np.maximum(pos, 1e-3), 1.0, 10.0), dtype=torch.float32)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))
    for _ in range(epochs):
        net.train()
        ex, ey = (xt, yt) if augment is None else (torch.from_numpy(a) for a in augment(rng))
        ey = ey.float()
        order = rng.permutation(len(ex))
        for start in range(0, len(ex), batch_size):
            idx = torch.from_numpy(order[start:start + batch_size])
            opt.zero_grad()
            loss = loss_fn(net(ex[idx]), ey[idx])
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        pred = (net(xt) > 0).numpy()
    return {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}, float((pred == (y > 0)).mean())


def matched_noise_blend(gray: np.ndarray, boxes, p: float, rng: np.random.Generator) -> np.ndarray:
    """Blend matched Gaussian noise (mean/SD of the 1st-99th percentile pixels) into boxes at strength p."""
    lo, hi = np.percentile(gray, [1, 99])
    core = gray[(gray >= lo) & (gray <= hi)]
    out = gray.copy()
    h, w = gray.shape
    for _, x1, y1, x2, y2 in boxes:
        sl = np.s_[max(int(y1), 0):min(int(np.ceil(y2)), h), max(int(x1), 0):min(int(np.ceil(x2)), w)]
        noise = rng.normal(core.mean(), core.std(), out[sl].shape)
        out[sl] = np.clip((1 - p) * out[sl] + p * noise, 0.0, 1.0)
    return out


def _free_boxes(shape, boxes, sizes: np.ndarray, rng: np.random.Generator, k: int) -> list:
    """Up to k boxes with sizes drawn from ``sizes`` that overlap none of ``boxes``."""
    h, w = shape
    out: list = []
    for _ in range(40 * k):
        if len(out) == k:
            break
        bw, bh = sizes[rng.integers(len(sizes))]
        bw, bh = int(min(bw, w - 1)), int(min(bh, h - 1))
        x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        cand = ("RO", x, y, x + bw, y + bh)
        if all(cand[3] <= b[1] or b[3] <= cand[1] or cand[4] <= b[2] or b[4] <= cand[2] for b in list(boxes) + out):
            out.append(cand)
    return out


def make_augment(grays, boxes, y: np.ndarray, classes, *, mean: float, std: float):
    """Epoch sampler teaching the CNN where findings live.

    Per image and epoch, one of: the clean image; matched noise in 1-3 random boxes that avoid every
    annotated box (labels kept: context does not carry a finding); or matched noise over all boxes of
    one positive boxed finding at strength p ~ U(0.5, 1) (that finding's label set to 0: its own
    region carries it).
    """
    from ..models.cnn import preprocess

    sizes = np.array([(b[3] - b[1], b[4] - b[2]) for bs in boxes for b in bs], dtype=float)
    index = {c: j for j, c in enumerate(classes)}

    def augment(rng: np.random.Generator):
        xs, ys = [], y.copy()
        for i, (g, bs) in enumerate(zip(grays, boxes)):
            own = sorted({b[0] for b in bs if b[0] in index and y[i, index[b[0]]] > 0})
            mode = rng.integers(3)
            if mode == 1:
                g = matched_noise_blend(g, _free_boxes(g.shape, bs, sizes, rng, int(rng.integers(1, 4))), 1.0, rng)
            elif mode == 2 and own:
                c = own[int(rng.integers(len(own)))]
                g = matched_noise_blend(g, [b for b in bs if b[0] == c], float(rng.uniform(0.5, 1.0)), rng)
                ys[i, index[c]] = 0.0
            xs.append((preprocess(g) - mean) / std)
        return np.stack(xs)[:, None].astype(np.float32), ys.astype(np.float32)

    return augment


def main(argv: list[str] | None = None) -> dict:
    """Fit everything and write the two resource files; returns the parameter record."""
    import torch
    from safetensors.torch import save_file

    from ..data import load_dataset
    from ..models.cnn import CLASSES, preprocess
    from ..models.reference import PARAMS_FILE, WEIGHTS_FILE, params_sha256

    from ..data import DEMO_DATASETS
    from ..output_dirs import check_output_dir, default_output_dir

    ap = argparse.ArgumentParser(prog="python -m shovir_core.training.reference",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: shovir_core/resources/ for the demo, else "
                         "$SHOVIR_RUNS/exports/reference-models/<dataset>)")
    ap.add_argument("--force", action="store_true", help="allow --out inside the repository's tracked tree")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    if args.epochs < 1:
        ap.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.seed < 0:
        ap.error(f"--seed must be non-negative, got {args.seed}")

    demo = isinstance(args.dataset, str) and args.dataset in DEMO_DATASETS
    if args.out is None:
        args.out = paths.resources_root() if demo else None
    elif not (demo and Path(args.out).resolve() == paths.resources_root().resolve()):
        args.out = check_output_dir(args.out, force=args.force, what="train_reference --out")

    torch.set_num_threads(1)  # one thread: bit-identical reductions on any machine
    ds = load_dataset(args.dataset)
    if args.out is None:
        args.out = default_output_dir("reference-models", ds.name)
    ids = ds.images["image_id"].tolist()
    grays = [to_gray_float(ds.load_image(i)) for i in ids]
    boxes = [ds.boxes_of(i) for i in ids]
    labels = ds.labels.loc[ids]
    priors = label_priors(labels)

    x = np.stack([preprocess(g) for g in grays])
    mean, std = float(x.mean()), float(x.std())
    x = ((x - mean) / std)[:, None].astype(np.float32)
    y = apply_policy(labels.reindex(columns=list(CLASSES)), "u-negative").to_numpy(dtype=float)
    augment = make_augment(grays, boxes, y, CLASSES, mean=mean, std=std)
    state, acc = train_cnn(x, y, epochs=args.epochs, seed=args.seed, augment=augment)

    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_FILE
    save_file(state, str(weights))
    record = {
        "dataset": {"name": ds.name, "sha256": ds.manifest_hash, "n_images": len(ids)},
        "priors": priors,
        "cnn": {"classes": list(CLASSES), "mean": mean, "std": std, "epochs": args.epochs, "seed": args.seed,
                "augmentation": "per epoch: clean | noise in 1-3 random non-box boxes (labels kept) | noise over "
                                "one positive finding's boxes at p~U(0.5,1) (its label -> 0)",
                "train_accuracy": acc, "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest()},
        "context": context_calibration(grays, boxes, priors),
    }
    record["sha256"] = params_sha256(record)
    (args.out / PARAMS_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {weights} ({weights.stat().st_size / 1e3:.0f} kB) and {args.out / PARAMS_FILE}; "
          f"CNN training accuracy {acc:.3f}")
    return record


if __name__ == "__main__":
    import sys

    from ..errors import run_guarded

    sys.exit(run_guarded(lambda argv: main(argv) and 0, sys.argv[1:], prog="train_reference",
                         debug="--debug" in sys.argv))
