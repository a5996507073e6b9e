"""Check the ``reference-code`` preset byte for byte against the authors' own ``preprocess.py``.

The authors' functions take a *sample* dict (``data_dir``, ``img_path``, ``disease_regions``,
``co_occurrence_regions``) and draw from numpy's global legacy generator. For each item of a dataset
this builds that sample from the dataset's boxes (target boxes as ``disease_regions``, the co-finding
boxes the protocol uses as ``co_occurrence_regions``: IoU-filtered, or not on PadChest-GR), seeds the
global generator, calls the authors' function, calls this package's with a
``numpy.random.RandomState`` of the same seed, and compares the two images. The global generator's
state is restored afterwards.

Run on your own copy of the authors' repository and of real chest X-rays (nothing here ships them)::

    python -m shovir_core.perturb.crosscheck --code /path/to/ShoViR-Bench --dataset mimic:$SHOVIR_MIMIC \\
        --max-items 20

and it prints one line per (item, experiment) and a summary; the exit status is 1 when any output differs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np

from .boxes import applies_iou_filter, box_sets, class_subsets, keyed_boxes
from .conditions import full_noise, occlude, prepare_image, uniform_noise
from .presets import resolve_preset

__all__ = ["load_preprocess", "crosscheck", "EXPERIMENTS", "main"]

EXPERIMENTS = ("baseline", "all_noise", "all_noise_mean", "oco_p40", "oco_p100", "doco_p60", "doco_p100",
               "ro_p40", "ro_p100")


def load_preprocess(code: str | Path):
    """The authors' ``src/benchmark/preprocess.py`` (a checkout or the file itself) as a module."""
    path = Path(code)
    if path.is_dir():
        path = path / "src" / "benchmark" / "preprocess.py"
    if not path.is_file():
        raise FileNotFoundError(f"no preprocess.py at {path} (pass the ShoViR-Bench checkout or the file)")
    spec = importlib.util.spec_from_file_location("shovir_bench_preprocess", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _global_seed(seed: int):
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _regions(boxes) -> list[dict]:
    return [{"bbox": [float(b.x1), float(b.y1), float(b.x2), float(b.y2)]} for b in boxes]


def crosscheck(preprocess, dataset, *, seed: int = 3, experiments=EXPERIMENTS, max_items: int | None = 20,
               classes=None, iou_threshold: float = 0.15) -> list[dict]:
    """One row per (item, experiment): ``equal`` and the largest absolute pixel difference."""
    preset = resolve_preset("reference-code")
    iou_filter = applies_iou_filter(dataset, preset)
    subsets, _ = class_subsets(dataset, classes=classes, min_count=1)
    items = [(i, c) for c, ids in sorted(subsets.items()) for i in ids][:max_items]
    paths = dict(zip(dataset.images["image_id"], dataset.images["path"]))
    rows = []
    for image_id, target in items:
        image = dataset.load_image(image_id)
        boxes = keyed_boxes(dataset, image_id)
        sets = box_sets(boxes, target, iou_threshold=iou_threshold, inclusive=True, iou_filter=iou_filter)
        path = Path(paths[image_id])
        sample = {"data_dir": str(path.parent), "img_path": path.name, "disease_regions": _regions(sets.target),
                  "co_occurrence_regions": _regions(sets.others), "target_category": target}
        for exp in experiments:
            if exp.startswith("doco") and not sets.others:
                continue
            with _global_seed(seed):
                theirs = np.asarray(preprocess._resolve_preprocess(exp)(dict(sample)), dtype=np.uint8)
            rng = np.random.RandomState(seed)
            if exp == "baseline":
                ours = prepare_image(image, preset)
            elif exp == "all_noise":
                ours = uniform_noise(image, seed=seed, item_id=image_id, rng=rng)[0]
            elif exp == "all_noise_mean":
                ours = full_noise(image, seed=seed, item_id=image_id, preset=preset, rng=rng)[0]
            else:
                cond, p = re.fullmatch(r"(ro|oco|doco)_p(\d+)", exp).groups()
                ours = occlude(image, boxes, condition=cond.upper(), target=target, p=int(p) / 100, seed=seed,
                               item_id=image_id, preset=preset, rng=rng, iou_threshold=iou_threshold,
                               iou_filter=iou_filter)[0]
            same = theirs.shape == ours.shape and np.array_equal(theirs, ours)
            diff = int(np.abs(theirs.astype(int) - ours.astype(int)).max()) if theirs.shape == ours.shape else -1
            rows.append({"image_id": image_id, "target": target, "experiment": exp, "equal": bool(same),
                         "max_abs_diff": diff})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="ShoViR-Bench checkout (or its preprocess.py)")
    parser.add_argument("--dataset", required=True, help="adapter:path, e.g. mimic:/data/mimic or padchest:/data/pgr")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--max-items", type=int, default=20)
    args = parser.parse_args(argv)
    from ..data import load_dataset

    rows = crosscheck(load_preprocess(args.code), load_dataset(args.dataset), seed=args.seed,
                      max_items=args.max_items)
    for r in rows:
        print(f"{r['image_id']} {r['target']:<28} {r['experiment']:<15} "
              f"{'identical' if r['equal'] else 'DIFFERS (max |diff| ' + str(r['max_abs_diff']) + ')'}")
    bad = sum(not r["equal"] for r in rows)
    print(f"{len(rows) - bad} of {len(rows)} outputs byte-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
