"""``shovir import``: answers made elsewhere (to an audit export) into records."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``import`` subcommand."""
    p = subparsers.add_parser(
        "import", help="read answers made elsewhere into records (see shovir audit --export)",
        description="Check FILE against the export it answers (every exported trial of its kind answered once, "
                    "no unknown id, same input -> same answer) and store it as the imported model NAME; then "
                    "make the audit's records from it. FILE: reports as JSONL {trial_id, report} or the "
                    "ShoViR-Bench output JSON [{image_path, prediction}]; yes/no answers as JSONL or CSV "
                    "{trial_id, answer, [logit_yes, logit_no], [generated]}. A bad file writes nothing. "
                    "Then `shovir audit NAME` writes the report card.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--name", required=True, help="the imported model's name")
    p.add_argument("--export", required=True, metavar="DIR", help="the folder `shovir audit --export` wrote")
    p.add_argument("--kind", choices=["report", "yes_no"], help="default: from the file's columns")
    p.add_argument("--no-records", action="store_true", help="only store the answers")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    from .imports import import_answers

    out = import_answers(args.file, name=args.name, export=args.export, kind=args.kind,
                         make=not args.no_records, progress=not args.quiet)
    print(f"imported {out['n_answers']} {out['kind']} answers as model {out['name']!r} ({out['folder']})")
    for key, run in out["runs"].items():
        print(f"{key}: {run.run_id} ({run.status})")
    return 0
