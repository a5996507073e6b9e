"""``shovir cache verify [--evict]`` and ``shovir cache clear [--model M]``: the inference cache's commands."""
from __future__ import annotations

import argparse

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``cache`` subcommand on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "cache", help="check or clear the inference cache",
        description="verify: check every entry of the inference cache ($SHOVIR_RUNS/.cache/inference) against its "
                    "seal, one line per damaged entry, exit status 1 when any is (--evict removes them); "
                    "clear: remove every entry, or those of one model (--model); a damaged cache file is removed.")
    p.add_argument("action", choices=["verify", "clear"])
    p.add_argument("--model", metavar="M", help="for clear: only this model's entries (its id, e.g. ref-vlm)")
    p.add_argument("--evict", action="store_true", help="for verify: remove the entries that fail")
    p.add_argument("--dir", metavar="DIR", help="the cache folder (default: $SHOVIR_RUNS/.cache/inference)")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .cache import CacheError, InferenceCache, default_cache_dir

    folder = Path(args.dir) if args.dir else default_cache_dir()
    path = folder / "inference.sqlite"
    if args.action == "clear":
        if args.model is None:
            existed = path.exists()
            for p in (path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal")):
                p.unlink(missing_ok=True)
            print(f"removed {path}" if existed else f"no inference cache at {path}")
            return 0
        if not path.exists():
            print(f"no inference cache at {path}")
            return 0
        n = InferenceCache(folder).clear(model=args.model)
        print(f"removed {n} entr{'y' if n == 1 else 'ies'} of model {args.model!r} from {path}")
        return 0
    if not path.exists():
        print(f"no inference cache at {path}")
        return 0
    try:
        cache = InferenceCache(folder)
        lines = cache.verify(evict=args.evict)
        n = len(cache)
    except CacheError as exc:
        print(f"BAD {exc}")
        return 1
    for line in lines:
        print(f"BAD {line}")
    what = "removed" if args.evict else "bad"
    print(f"verified {n + (len(lines) if args.evict else 0)} entr{'y' if n == 1 else 'ies'} of {path}: "
          f"{len(lines)} {what}")
    return 1 if lines and not args.evict else 0
