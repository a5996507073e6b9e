"""Fit the reference models' parameters on the demo NIH box images.

``python -m shovir_core.models.train_reference`` writes, under ``shovir_core/resources/``:

``ref_image_classifier.safetensors``  the CNN weights of ``ref-image-classifier`` (~250 kB)
``ref_reference_models.json``          label priors, CNN metadata (classes, standardisation, training
                                       settings, training accuracy, weight hash) and the context
                                       thresholds of ``ref-context-shortcut``

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
from .protocol import to_gray_float

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
    from .reference import context_texture

    values = {f: np.array([context_texture(g, b, f) for g, b in zip(grays, boxes)]) for f in FINDINGS_13}
    allv = np.concatenate(list(values.values()))
    q75, q25 = np.percentile(allv, [75, 25])
    return {
        "statistic": "mean of min(|dx| + |dy|, 0.05) over [0,1] pixels outside the finding's boxes",
        "thresholds": {f: float(np.quantile(values[f], priors[f])) for f in FINDINGS_13},
        "scale": float(max(q75 - q25, 1e-6)),
    }


def train_cnn(x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int, batch_size: int = 32,
              lr: float = 3e-3):
    """Train the CNN with Adam on binary cross-entropy; returns (state_dict, training accuracy).

    Parameters
    ----------
    x
        Standardised inputs, shape (n, 1, H, W), float32.
    y
        Binary targets, shape (n, k).
    """
    import torch

    from .cnn import build_cnn

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
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch_size):
            idx = torch.from_numpy(order[start:start + batch_size])
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        pred = (net(xt) > 0).numpy()
    return {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}, float((pred == (y > 0)).mean())


def main(argv: list[str] | None = None) -> dict:
    """Fit everything and write the two resource files; returns the parameter record."""
    import torch
    from safetensors.torch import save_file

    from ..data import load_dataset
    from .cnn import CLASSES, preprocess
    from .reference import PARAMS_FILE, WEIGHTS_FILE, params_sha256

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=paths.resources_root())
    args = ap.parse_args(argv)

    torch.set_num_threads(1)  # one thread: bit-identical reductions on any machine
    ds = load_dataset(args.dataset)
    ids = ds.images["image_id"].tolist()
    grays = [to_gray_float(ds.load_image(i)) for i in ids]
    boxes = [ds.boxes_of(i) for i in ids]
    labels = ds.labels.loc[ids]
    priors = label_priors(labels)

    x = np.stack([preprocess(g) for g in grays])
    mean, std = float(x.mean()), float(x.std())
    x = ((x - mean) / std)[:, None].astype(np.float32)
    y = apply_policy(labels.reindex(columns=list(CLASSES)), "u-negative").to_numpy(dtype=float)
    state, acc = train_cnn(x, y, epochs=args.epochs, seed=args.seed)

    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_FILE
    save_file(state, str(weights))
    record = {
        "dataset": {"name": ds.name, "sha256": ds.manifest_hash, "n_images": len(ids)},
        "priors": priors,
        "cnn": {"classes": list(CLASSES), "mean": mean, "std": std, "epochs": args.epochs, "seed": args.seed,
                "train_accuracy": acc, "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest()},
        "context": context_calibration(grays, boxes, priors),
    }
    record["sha256"] = params_sha256(record)
    (args.out / PARAMS_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {weights} ({weights.stat().st_size / 1e3:.0f} kB) and {args.out / PARAMS_FILE}; "
          f"CNN training accuracy {acc:.3f}")
    return record


if __name__ == "__main__":
    main()
