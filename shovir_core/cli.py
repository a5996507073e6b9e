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

__all__ = ["main", "build_parser", "run_guarded", "error_line", "USER_ERRORS"]

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
    if not args.run_id or args.run_id.count("/") != 2 or not all(args.run_id.split("/")):
        print("shovir: error: records show: give a run id <protocol>/<name>/<hash12> (see `shovir records list`)",
              file=sys.stderr)
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
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
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
    for p in sub.choices.values():  # `shovir run data --debug` as well as `shovir --debug run data`
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an error")
    return parser


USER_ERRORS = (ValueError, KeyError, TypeError, LookupError, OSError, PermissionError)
"""Errors that reach the user as one line (the project's errors are ValueError/RuntimeError/
PermissionError subclasses; validation raises ValueError, KeyError and TypeError)."""


def _project_errors() -> tuple[type[BaseException], ...]:
    from .book import BookError, CredentialedDataError, ParamsError
    from .data import DatasetError
    from .records import RecordError

    return (BookError, ParamsError, DatasetError, RecordError, CredentialedDataError)


def error_line(exc: BaseException) -> str:
    """One line for an error: its message (a KeyError's without the quotes), whitespace collapsed."""
    msg = exc.args[0] if isinstance(exc, KeyError) and len(exc.args) == 1 else str(exc)
    msg = " ".join(str(msg).split()) or type(exc).__name__
    return msg


def run_guarded(func, *args, prog: str = "shovir", debug: bool = False) -> int:
    """Call ``func(*args)``; a user error prints ``<prog>: error: <one line>`` and returns 2.

    With ``debug`` the exception propagates (full traceback). Any other exception is reported in one
    line as an internal error (exit 1) with a pointer to ``--debug``; Ctrl-C says how to resume.
    """
    if debug:
        return int(func(*args) or 0)
    try:
        return int(func(*args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; trials already written are kept: run the same command again to resume",
              file=sys.stderr)
        return 130
    except _project_errors() + USER_ERRORS as exc:
        print(f"{prog}: error: {error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line here, the traceback with --debug
        print(f"{prog}: internal error ({type(exc).__name__}): {error_line(exc)}; run again with --debug for the "
              "traceback and please report it", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """The ``shovir`` command. Every user error is one line ``shovir: error: ...`` and exit status 2
    (argparse's own usage errors too); ``--debug`` shows the traceback instead."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_guarded(args.func, args, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
