"""The ``shovir`` command line.

    shovir run [NOTEBOOK ...] [--profile demo]     make the run records notebooks need
    shovir book [--profile demo] [--only NB ...]   make records, execute notebooks, build the book
    shovir records list | show RUN_ID | verify [RUN_ID ...] | complete RUN_ID
                                                   inspect, verify and complete run records
    shovir run NB --shards N [--shard I | --executor local|slurm]   sharded records (see run --help)
    shovir jobs status [NOTEBOOK ...]              per-shard progress read from the records
    shovir perturb ...                             export perturbed image sets (see its --help)
    shovir cache verify [--evict] | clear [--model M]   check or clear the inference cache
    shovir audit MODEL [--profile P] [--only shovir|modalens]   one model's records and report card
    shovir audit --export DIR / shovir import FILE --name NAME --export DIR   a model run elsewhere
    shovir --models FILE ...                       declare models in a YAML catalogue (also $SHOVIR_MODELS)
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from .errors import UsageError, run_guarded

__all__ = ["main", "build_parser"]

# Subcommands contributed by other modules: name -> module with add_parser(subparsers) and main(args).
EXTRA_COMMANDS = {
    "perturb": "shovir_core.perturb.cli",
    "rehearse": "shovir_core.rehearsal.cli",
    "cache": "shovir_core.models.cache_cli",
    "audit": "shovir_core.audit.cli",
    "import": "shovir_core.audit.import_cli",
}

EPILOG = """\
Profiles: 'demo' (default) runs on the embedded public NIH data and the reference/tiny models;
'mimic' and 'padchest' need your credentialed data and real weights (see README).
Records go to runs/ (or $SHOVIR_RUNS); an interrupted run resumes where it stopped.
"""


def _cluster_options(args):
    from .jobs import load_cluster_options

    sbatch = {}
    for item in args.sbatch or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--sbatch {item!r}: write NAME=VALUE (e.g. mail-type=END)")
        sbatch[key.strip().lstrip("-")] = value
    return load_cluster_options(args.cluster, partition=args.partition, time=args.time,
                                gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task,
                                mem=args.mem, sbatch=sbatch or None)


def _print_outcomes(outcomes) -> int:
    """Print each shard task's outcome; returns the number of tasks that failed. A record part that another
    live process was writing (the same shard started twice) is no failure: the shard left it to that process."""
    from .jobs.task import BUSY

    bad, busy = 0, 0
    for o in outcomes:
        if o.ok:
            done = ", ".join(f"{rid} {st}" for rid, st in (o.result or {}).items())
            busy += sum(str(st).startswith(BUSY) for st in (o.result or {}).values())
            print(f"shard {o.index}: {done or 'nothing to do (each record that cannot be sharded is made whole by one shard)'}")
        else:
            bad += 1
            print(f"shard {o.index} FAILED (job {o.job_id}): {o.error}\n  log: {o.stderr}", file=sys.stderr)
    if busy:
        print(f"{busy} record part(s) were being written by another live run of the same shard (named above) and "
              "were left to it: nothing is lost. Follow it with `shovir jobs`; run again once it has ended if it "
              "did not finish.")
    return bad


def _cmd_run_sharded(args, names) -> int:
    from .jobs import ShardTask, targets_of
    from .jobs.submit import run_local, submit, wait

    if args.shards is None:
        print("shovir: error: run: --shard and --executor need --shards N", file=sys.stderr)
        return 2
    task = ShardTask(targets_of(names, profile=args.profile), count=args.shards, progress=not args.quiet)
    if args.shard is not None:
        if not 0 <= args.shard < args.shards:
            print(f"shovir: error: run: --shard {args.shard} must lie in 0..{args.shards - 1}", file=sys.stderr)
            return 2
        for rid, status in task(args.shard).items():
            print(f"shard {args.shard}/{args.shards}: runs/{rid} {status}")
        return 0
    try:
        options = _cluster_options(args)
    except ValueError as exc:
        print(f"shovir: error: run: {exc}", file=sys.stderr)
        return 2
    indices = list(range(args.shards))
    if (args.executor or "local") == "local":
        if args.gpus_per_task is None:
            options = options.with_overrides(gpus_per_task=1)
        outcomes = run_local(task, indices, options=options, parallel=args.parallel)
        bad = _print_outcomes(outcomes)
        incomplete = _print_job_status(names, args.profile, only_open=True)
        return 1 if bad or incomplete else 0
    try:
        jobs = submit(task, indices, options=options, job_name=f"shovir-{'-'.join(names)[:40]}")
    except RuntimeError as exc:  # e.g. no srun/sbatch here: not a SLURM login node
        print(f"shovir: error: run --executor slurm: {exc}", file=sys.stderr)
        return 1
    print(f"submitted {len(jobs)} shard task(s) as SLURM job {str(jobs[0].job_id).split('_')[0]}; "
          f"logs: {jobs[0].paths.folder}")
    print(f"progress: shovir jobs status {' '.join(names)} --profile {args.profile}")
    if args.wait:
        bad = _print_outcomes(wait(jobs, indices))
        return 1 if bad or _print_job_status(names, args.profile, only_open=True) else 0
    return 0


def _print_job_status(names, profile, *, only_open: bool = False) -> int:
    """Print per-shard progress; returns the number of records not complete."""
    import pandas as pd

    from .jobs import status, targets_of

    df = status(targets_of(names, profile=profile))
    open_ = sorted(set(df.loc[df["record"] != "complete", "run_id"]))
    if only_open:
        df = df[df["run_id"].isin(open_)]
    if not df.empty:
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60):
            staged = ["staged"] if df["staged"].notna().any() else []  # only a probe record's test split stages
            view = df[["run_id", "record", "shard", "status", "planned", *staged, "written", "host",
                       "updated"]].astype(object)
            print(view.where(view.notna(), "").to_string(index=False))
        for row in df[df["record"] == "unreadable"].itertuples():
            print(f"UNREADABLE {row.run_id}: {row.error}")
        for row in df[df["status"] == "failed"].itertuples():
            print(f"{row.run_id} shard {row.shard} failed: {row.error}\n  log: {row.log or '(not a job)'}")
    return len(open_)


def _cmd_jobs(args) -> int:
    from .params import toc_notebooks

    _print_job_status(args.notebooks or toc_notebooks(), args.profile)
    return 0


def _cmd_run(args) -> int:
    from .book import make_records
    from .params import toc_notebooks

    names = args.notebooks or toc_notebooks()
    if args.shards is not None and args.shards < 1:
        print(f"shovir: error: run: --shards {args.shards}: give a number of shards of at least 1", file=sys.stderr)
        return 2
    if args.shard is not None and args.shards is not None and not 0 <= args.shard < args.shards:
        print(f"shovir: error: run: --shard {args.shard} must lie in 0..{args.shards - 1} (--shards {args.shards})",
              file=sys.stderr)
        return 2
    if args.shard is not None or args.executor is not None or (args.shards or 1) > 1:
        return _cmd_run_sharded(args, names)
    for name in names:
        ids = make_records(name, profile=args.profile, progress=not args.quiet)
        for key, rid in ids.items():
            print(f"{name}: {key} -> runs/{rid}")
    return 0


def _cmd_book(args) -> int:
    from .book import build_book, execute_book

    if not args.no_execute:
        jobs = args.jobs if args.jobs is not None else (min(4, os.cpu_count() or 1) if args.profile == "demo" else 1)
        for path in execute_book(profile=args.profile, only=args.only, progress=not args.quiet, jobs=jobs):
            print(f"executed {path}")
    if args.no_build:
        return 0
    index = build_book(strict=not args.no_strict)
    print(f"\nThe book is at {index}\nOpen it with: python -m webbrowser file://{index}")
    return 0


def _record_path(run_id: str):
    from . import paths

    parts = run_id.strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"{run_id!r} is not a run id <protocol>/<name>/<hash12> (see `shovir records list`)")
    return paths.runs_root().joinpath(*parts)


def _cmd_records(args) -> int:
    import time

    import pandas as pd

    from . import paths
    from .records import Run, record_paths, runs_df

    if args.action == "list":
        df = runs_df(protocol=args.protocol, on_error="report")
        if df.empty:
            print("no run records yet; make them with `shovir run`")
            return 0
        df = df.assign(status=df["status"].where(df["problem"].isna(), "BAD"))
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 40):
            print(df[["run_id", "status", "n_trials", "dataset", "model", "git_commit", "ended"]].to_string(index=False))
        bad = df[df["problem"].notna()]
        for row in bad.itertuples():
            print(f"BAD {row.run_id}: {row.problem}")
        if len(bad):
            print(f"{len(bad)} bad record(s); `shovir records verify` checks them (exit status 1 when any is bad)")
        return 0
    if args.action == "verify":
        root = paths.runs_root()
        try:
            targets = [(rid, _record_path(rid)) for rid in args.run_ids] if args.run_ids else \
                [("/".join(p.relative_to(root).parts), p) for p in record_paths(root, protocol=args.protocol)]
        except ValueError as exc:
            print(f"shovir: error: records verify: {exc}", file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        bad, statuses = 0, {}
        for rid, path in targets:
            if not path.is_dir():
                problem = f"no record {rid} under {root}"
            else:
                run = Run(path)
                try:
                    problem = run.problem or _cache_problem(run)
                except OSError as exc:
                    problem = f"{path}: {exc}"
                if problem is None:
                    statuses[run.status] = statuses.get(run.status, 0) + 1
            if problem:
                bad += 1
                print(f"BAD {rid}: {problem}")
        seconds = time.perf_counter() - t0
        summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none good"
        print(f"verified {len(targets)} record(s) in {seconds:.2f} s: {bad} bad; good: {summary}")
        return 1 if bad else 0
    if args.action == "complete":
        return _cmd_records_complete(args)
    if len(args.run_ids) != 1:
        print("shovir: error: records show: give one run id <protocol>/<name>/<hash12> (see `shovir records list`)",
              file=sys.stderr)
        return 2
    try:
        path = _record_path(args.run_ids[0])
    except ValueError as exc:
        print(f"shovir: error: records show: {exc}", file=sys.stderr)
        return 2
    run = Run(path)
    print(json.dumps(run.manifest, indent=2, default=str))
    problem = run.problem
    if problem:
        print(f"\nBAD: {problem}")
        return 1
    print(f"\n{len(run.trials)} trial rows; columns: {', '.join(run.trials.columns)}")
    return 0


def _cache_problem(run) -> str | None:
    """Whether the inference-cache entries a (good) record was made from changed since."""
    from .models.cache import CacheError, record_cache_problem

    try:
        return record_cache_problem(run.path, run.manifest)
    except CacheError as exc:
        return f"{run.path}: its inference cache cannot be read ({exc})"


def _shard_summary(path) -> str:
    """``2 of 3 shard markers; done: 0/3; stopped (process gone): 1/3; never started: 2/3`` (as jobs status says)."""
    from .records import Shard, shard_progress
    from .records.shards import read_markers

    markers = read_markers(path)
    if not markers:
        return "no shard markers"
    n = max(Shard.from_token(t).count for t in markers)
    mine = {t: mk for t, mk in markers.items() if Shard.from_token(t).count == n}
    states: dict[str, list[str]] = {}
    for row in shard_progress(path):
        if row["shard"].endswith(f"/{n}") and row["status"] is not None:
            label = "stopped (process gone)" if row["status"] == "stopped" else row["status"]
            states.setdefault(label, []).append(row["shard"])
    missing = [f"{i}/{n}" for i in range(n) if Shard(i, n).token not in mine]
    if missing:
        states["never started"] = missing
    parts = [f"{len(mine)} of {n} shard markers"] + [f"{k}: {', '.join(v)}" for k, v in states.items()]
    return "; ".join(parts)


def _cmd_records_complete(args) -> int:
    from .protocols import resolve, run
    from .records import Run, spec_hash
    from .records.shards import finished_set, read_markers

    if len(args.run_ids) != 1:
        print("shovir: error: records complete: give one run id <protocol>/<name>/<hash12>", file=sys.stderr)
        return 2
    path = _record_path(args.run_ids[0])
    record = Run(path)
    m = record.info
    if m.status == "complete":
        record.verify()
        print(f"{m.run_id} is already complete ({m.n_trials} trials)")
        return 0
    markers = read_markers(path)
    if finished_set(markers) is None and not args.force:
        print(f"shovir: error: records complete: {m.run_id}: not every shard has finished ({_shard_summary(path)}); "
              "resubmit the missing shards, or pass --force to compute the missing trials in this process",
              file=sys.stderr)
        return 1
    spec = m.spec_passed if m.spec_passed is not None else m.spec
    if spec_hash(resolve(m.protocol, spec)) != m.spec_sha256:
        print(f"shovir: error: records complete: {m.run_id}: its spec no longer resolves to this record "
              "(the dataset or model changed)", file=sys.stderr)
        return 1
    done = run(m.protocol, m.name, spec, progress=not args.quiet)
    print(f"{done.run_id}: {done.status} ({done.info.n_trials} trials)")
    return 0 if done.status == "complete" else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shovir", description="ShoViR / ModaLens companion: run records, notebooks and the book.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    parser.add_argument("--models", metavar="FILE", help="a model catalogue (YAML) declaring models by name; "
                        "also $SHOVIR_MODELS (example: params/models.example.yaml)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="make the run records that notebooks need",
                       description="Make (or resume) the run records named in params/<notebook>/<profile>.yaml. "
                                   "Complete records are reused; interrupted ones resume.")
    p.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="notebooks whose records to make (default: all in _toc.yml)")
    p.add_argument("--profile", default="demo", help="params profile (default: demo)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    g = p.add_argument_group("shards and executors", "split each record's trial grid into N deterministic shards "
                             "(all questions of a case / all conditions of an image stay together); the last shard "
                             "to finish completes the record (or `shovir records complete RUN_ID`)")
    g.add_argument("--shards", type=int, metavar="N", help="number of shards")
    g.add_argument("--shard", type=int, metavar="I", help="run only shard I (0-based) in this process")
    g.add_argument("--executor", choices=["local", "slurm"],
                   help="run all N shards: local processes (one per GPU) or one SLURM job array (default: local)")
    g.add_argument("--cluster", metavar="YAML", help="cluster options file (example: params/cluster.example.yaml)")
    g.add_argument("--partition", help="SLURM partition")
    g.add_argument("--time", help="time limit per task: minutes or [D-]HH:MM:SS (timed-out tasks requeue and resume)")
    g.add_argument("--gpus-per-task", type=int, metavar="G", help="GPUs per shard task (0: CPU)")
    g.add_argument("--cpus-per-task", type=int, metavar="C")
    g.add_argument("--mem", help="memory per task, e.g. 64G")
    g.add_argument("--sbatch", action="append", metavar="NAME=VALUE", help="extra #SBATCH option (repeatable)")
    g.add_argument("--parallel", type=int, metavar="K", help="local executor on the CPU: shards at once (default: all)")
    g.add_argument("--wait", action="store_true", help="slurm: wait for the array and report")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("jobs", help="per-shard progress of the records notebooks need",
                       description="Show, per record and shard, the planned and written trials, the status, "
                                   "the host and the log path of failed tasks (read from the records).")
    p.add_argument("action", choices=["status"])
    p.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="default: all in _toc.yml")
    p.add_argument("--profile", default="demo", help="params profile (default: demo)")
    p.set_defaults(func=_cmd_jobs)

    p = sub.add_parser("book", help="make records, execute notebooks, build the HTML book",
                       description="Make the records, execute every notebook of _toc.yml with papermill into book/, "
                                   "then build book/_build/html with Jupyter Book (warnings are errors).")
    p.add_argument("--profile", default="demo", help="params profile (default: demo)")
    p.add_argument("--only", nargs="+", metavar="NB", help="execute only these notebooks")
    p.add_argument("-j", "--jobs", type=int, metavar="K",
                   help="tasks run at once, each in its own process (default: the CPU count up to 4 on "
                        "the demo profile, whose models run on one CPU thread each; 1 on other profiles, whose "
                        "models share the GPU). The chapters' records are made once each (a record several "
                        "chapters read, once), spread over the K processes; a notebook starts as soon as its "
                        "own records exist.")
    p.add_argument("--no-build", action="store_true", help="execute notebooks but do not build the HTML")
    p.add_argument("--no-execute", action="store_true", help="build the HTML from the notebooks already in book/")
    p.add_argument("--no-strict", action="store_true", help="do not turn Sphinx warnings into errors")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_book)

    p = sub.add_parser("records", help="list, show, verify or complete run records",
                       description="list: one line per record (bad ones flagged); show RUN_ID: a manifest; "
                                   "verify [RUN_ID ...]: check every (or the given) record's integrity, one line "
                                   "per bad record, exit status 1 when any is bad; complete RUN_ID: complete a "
                                   "sharded record whose shards have all finished.")
    p.add_argument("action", choices=["list", "show", "verify", "complete"])
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="<protocol>/<name>/<hash12>")
    p.add_argument("--protocol", help="for list and verify: only this protocol")
    p.add_argument("--force", action="store_true",
                   help="for complete: compute trials of unfinished shards in this process")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
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


def main(argv: list[str] | None = None) -> int:
    """The ``shovir`` command. Every user error (a :class:`~shovir_core.errors.ShovirError`) is one line
    ``shovir: error: ...`` and exit status 2 (argparse's own usage errors too); anything else is a bug:
    its traceback and exit status 1 (:func:`~shovir_core.errors.run_guarded`). ``--debug`` lets every
    exception propagate."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.models:
        from .audit.cli import use_catalogue

        return run_guarded(lambda a: use_catalogue(a.models) or a.func(a), args, debug=args.debug)
    return run_guarded(args.func, args, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
