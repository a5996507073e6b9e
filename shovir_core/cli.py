"""The ``shovir`` command line.

    shovir run [NOTEBOOK ...] [--profile demo]     make the run records notebooks need
    shovir book [--profile demo] [--only NB ...]   make records, execute notebooks, build the book
    shovir records list | show RUN_ID              inspect run records
    shovir perturb ...                             export perturbed image sets (see its --help)
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

__all__ = ["main", "build_parser"]

# Subcommands contributed by other modules: name -> module with add_parser(subparsers) and main(args).
EXTRA_COMMANDS = {
    "perturb": "shovir_core.perturb.cli",
}

EPILOG = """\
Profiles: 'demo' (default) runs on the embedded public NIH data and the reference/tiny models;
'mimic' and 'padchest' need your credentialed data and real weights (see README).
Records go to runs/ (or $SHOVIR_RUNS); an interrupted run resumes where it stopped.
"""


def _cmd_run(args) -> int:
    from .book import make_records, toc_notebooks

    names = args.notebooks or toc_notebooks()
    for name in names:
        ids = make_records(name, profile=args.profile, progress=not args.quiet)
        for key, rid in ids.items():
            print(f"{name}: {key} -> runs/{rid}")
    return 0


def _cmd_book(args) -> int:
    from .book import build_book, execute_book

    if not args.no_execute:
        for path in execute_book(profile=args.profile, only=args.only, progress=not args.quiet):
            print(f"executed {path}")
    if args.no_build:
        return 0
    index = build_book(strict=not args.no_strict)
    print(f"\nThe book is at {index}\nOpen it with: python -m webbrowser file://{index}")
    return 0


def _cmd_records(args) -> int:
    import pandas as pd

    from .records import load_run, runs_df

    if args.action == "list":
        df = runs_df(protocol=args.protocol)
        if df.empty:
            print("no run records yet; make them with `shovir run`")
            return 0
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 40):
            print(df[["run_id", "status", "n_trials", "dataset", "model", "git_commit", "ended"]].to_string(index=False))
        return 0
    if not args.run_id or args.run_id.count("/") != 2:
        print("shovir records show: give a run id <protocol>/<name>/<hash12> (see `shovir records list`)", file=sys.stderr)
        return 2
    protocol, name, h = args.run_id.split("/")
    run = load_run(protocol, name, h, require_complete=False)
    print(json.dumps(run.manifest, indent=2, default=str))
    print(f"\n{len(run.trials)} trial rows; columns: {', '.join(run.trials.columns)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shovir", description="ShoViR / ModaLens companion: run records, notebooks and the book.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="make the run records that notebooks need",
                       description="Make (or resume) the run records named in params/<notebook>/<profile>.yaml. "
                                   "Complete records are reused; interrupted ones resume.")
    p.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="notebooks whose records to make (default: all in _toc.yml)")
    p.add_argument("--profile", default="demo", help="params profile (default: demo)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("book", help="make records, execute notebooks, build the HTML book",
                       description="Make the records, execute every notebook of _toc.yml with papermill into book/, "
                                   "then build book/_build/html with Jupyter Book (warnings are errors).")
    p.add_argument("--profile", default="demo", help="params profile (default: demo)")
    p.add_argument("--only", nargs="+", metavar="NB", help="execute only these notebooks")
    p.add_argument("--no-build", action="store_true", help="execute notebooks but do not build the HTML")
    p.add_argument("--no-execute", action="store_true", help="build the HTML from the notebooks already in book/")
    p.add_argument("--no-strict", action="store_true", help="do not turn Sphinx warnings into errors")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_book)

    p = sub.add_parser("records", help="list or show run records",
                       description="List run records (one line each) or show one record's manifest.")
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("run_id", nargs="?", help="for show: <protocol>/<name>/<hash12>")
    p.add_argument("--protocol", help="for list: only this protocol")
    p.set_defaults(func=_cmd_records)

    for name, module in EXTRA_COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue  # that part of the package is not installed in this checkout
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    from .book import BookError, ParamsError
    from .data import DatasetError
    from .records import RecordError

    try:
        return int(args.func(args) or 0)
    except (BookError, ParamsError, DatasetError, RecordError) as exc:
        print(f"shovir {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
