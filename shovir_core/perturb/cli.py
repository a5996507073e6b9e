"""``shovir perturb``: export a dataset's perturbed images (PNG + CSV manifest).

    shovir perturb --dataset demo [--out DIR] [--force] [--preset paper] [--seed 0]
                   [--conditions FullNoise RO OCO DOCO] [--ps 0 0.2 0.4 0.6 0.8 1]
                   [--classes Atelectasis ...] [--iou-threshold 0.15] [--limit N]

``--out`` defaults to ``$SHOVIR_RUNS/exports/perturb/<dataset>`` (git-ignored ``runs/`` without
``SHOVIR_RUNS``); a folder of the repository that git does not ignore is refused unless ``--force``
(:mod:`shovir_core.output_dirs`).
"""
from __future__ import annotations

import argparse
import sys

from .conditions import CONDITIONS, DEFAULT_PS
from .presets import PRESETS

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``perturb`` subcommand on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "perturb", help="export perturbed images of a dataset (PNG + manifest.csv)",
        description="Write the ShoViR perturbations of a dataset (Full Noise Image; RO, OCO and DOCO at each "
                    "strength p for every class with a box) as PNG files, with manifest.csv describing each "
                    "output (condition, class, p, seed, preset, boxes, noise statistics, SHA-256). Outputs are "
                    "deterministic in (seed, image id, class, condition).")
    p.add_argument("--dataset", default="demo", help="dataset: demo name, adapter:path or NIH-format folder")
    p.add_argument("--out", help="output folder (default: $SHOVIR_RUNS/exports/perturb/<dataset>, git-ignored)")
    p.add_argument("--force", action="store_true",
                   help="allow an output folder inside the repository's tracked tree")
    p.add_argument("--preset", default="paper", choices=sorted(PRESETS), help="noise preset (default: paper)")
    p.add_argument("--seed", type=int, default=0, help="perturbation seed (default: 0)")
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    p.add_argument("--ps", nargs="+", type=float, default=list(DEFAULT_PS), metavar="P",
                   help="blending strengths in [0, 1] (default: 0 .2 .4 .6 .8 1)")
    p.add_argument("--classes", nargs="+", metavar="CLASS", help="target classes (default: every class with a box)")
    p.add_argument("--iou-threshold", type=float, default=0.15, help="DOCO IoU threshold (default: 0.15)")
    p.add_argument("--limit", type=int, help="only the first N images (sorted by id)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run the export; returns the exit status (errors reach ``shovir``'s one-line error report)."""
    from ..data import load_dataset
    from ..output_dirs import check_output_dir, default_output_dir
    from .export import export_perturbed

    if args.out is not None:
        check_output_dir(args.out, force=args.force, what="shovir perturb --out")
    ds = load_dataset(args.dataset)
    out = args.out if args.out is not None else default_output_dir("perturb", ds.name)
    if ds.credentialed:
        print(f"note: {ds.name} is credentialed; the perturbed images in {out} are credentialed data too",
              file=sys.stderr)
    manifest = export_perturbed(ds, out, conditions=args.conditions, ps=args.ps, seed=args.seed,
                                preset=args.preset, classes=args.classes, iou_threshold=args.iou_threshold,
                                limit=args.limit, progress=not args.quiet, force=args.force)
    ok = manifest[manifest["status"] == "ok"]
    print(f"wrote {len(ok)} images ({int((manifest['status'] == 'dropped').sum())} DOCO items dropped) "
          f"and {out}/manifest.csv")
    return 0
