"""``shovir rehearse``: the command line of :func:`shovir_core.rehearsal.run.rehearse`."""
from __future__ import annotations

import argparse
import json
from ..errors import UsageError

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``rehearse`` subcommand on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "rehearse", help="run a credentialed profile at the papers' scale on synthetic data and CPU stand-ins",
        description="Rehearse the 'mimic' or 'padchest' profile before spending GPU-days: write (once, cached) a "
                    "synthetic tree in the credentialed datasets' exact layouts with the papers' cohort sizes "
                    "planted (invented ids), replace every real model by a CPU stand-in of the same interface "
                    "(reference models; tiny transformers where a chapter reads layers; a tiny random CheXbert), "
                    "and run every chapter of the profile end to end -- records, notebook, credentialed guard -- "
                    "each in its own process. Writes report-<profile>.json (status, trials per record beside the "
                    "papers' stated counts, wall time, peak memory, the real run's commands) under "
                    "$SHOVIR_RUNS/rehearsal. Nothing made here is a result: records name their stand-ins and every "
                    "executed page carries a rehearsal banner.")
    p.add_argument("--profile", required=True, choices=["mimic", "padchest"], help="the credentialed profile")
    p.add_argument("--only", nargs="+", metavar="CHAPTER",
                   help="rehearse only these chapters (default: every chapter of the profile)")
    p.add_argument("--stand-in", metavar="MODEL",
                   help="one reference or tiny model in place of every real model (default: each real model's own "
                        "stand-in, shovir_core.rehearsal.run.stand_ins)")
    p.add_argument("--scale", type=float, default=1.0, help="share of the papers' sizes (default: 1, full scale)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic tree (default: 0)")
    p.add_argument("--pixels", choices=["small", "full"], default="small",
                   help="image size of the synthetic tree: small (64 px, fast; the default) or full (2048 px, "
                        "for timing)")
    p.add_argument("--shards", type=int, metavar="N",
                   help="make sharded records with N local shard processes (default: unsharded)")
    p.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="execute each chapter's notebook before the next chapter's records start (default: the "
                        "notebook, one core, runs beside the next chapter's records; the rehearsal takes less "
                        "time, each chapter's time is measured while sharing the machine)")
    p.add_argument("--root", help="rehearsal folder (default: $SHOVIR_RUNS/rehearsal)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from collections import Counter

    from .run import rehearse

    if not 0 < args.scale <= 1:
        raise UsageError(f"--scale must be in (0, 1], got {args.scale}")
    report = rehearse(args.profile, only=args.only, stand_in=args.stand_in, scale=args.scale, seed=args.seed,
                      pixels=args.pixels, shards=args.shards, root=args.root, progress=not args.quiet,
                      overlap=args.overlap)
    failed = [c for c in report["chapters"] if c["status"] != "ok"]
    for c in report["chapters"]:
        verdicts = Counter(r["verdict"] for r in c.get("records", []))
        paper = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) or "no records"
        phases = f"(records {c['records_seconds']:.0f} s, notebook {c['notebook_seconds']:.0f} s)" \
            if "notebook_seconds" in c else ""
        print(f"{c['status']:6s} {c['chapter']:32s} {c['seconds']:8.1f} s {phases:34s} "
              f"{c.get('peak_mb', float('nan')):8.0f} MB  {paper}" + (f"\n       {c['error'][0]}" if c.get("error") else ""))
    print(json.dumps({"report": report["report"], "seconds": report["seconds"],
                      "peak_mb_together": report["peak_mb_together"], "failed": [c["chapter"] for c in failed]}))
    return 1 if failed else 0
