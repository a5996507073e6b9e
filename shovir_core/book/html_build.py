"""Build the HTML book with Jupyter Book 1.x, its Sphinx reading and writing pages on several processes.

``jupyter-book build`` has no option for Sphinx's parallel build (``sphinx-build -j``), and reading and
writing the demo book's pages took 24 of its 30 s on one core. This runs the same build -- the
configuration ``jupyter-book build`` derives from ``_config.yml`` and ``_toc.yml`` (its own code, asked
for that configuration alone, as ``jupyter-book config sphinx`` asks), then
:func:`jupyter_book.sphinx.build_sphinx` -- with ``jobs`` processes. Every extension of the book declares
itself safe for parallel reading and writing (Sphinx would warn otherwise, and ``-W`` makes a warning fail
the build).

Run as ``python -m shovir_core.book.html_build SOURCE OUTPUT [--jobs N] [--strict]``; :func:`build_html`
runs it in its own process (Sphinx forks its workers from the process that builds).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["build_html", "main", "default_jobs"]


def default_jobs() -> int:
    """Processes the HTML build uses: the CPUs this process may use, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def build_html(source: Path, output: Path, *, strict: bool = True, jobs: int | None = None) -> int:
    """Build ``output/_build/html`` from the book at ``source`` in a child process; returns its exit status."""
    cmd = [sys.executable, "-m", "shovir_core.book.html_build", str(source), str(output),
           "--jobs", str(jobs or default_jobs())]
    if strict:
        cmd.append("--strict")
    return subprocess.run(cmd, cwd=source).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shovir_core.book.html_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="the book's folder (_config.yml, _toc.yml)")
    parser.add_argument("output", type=Path, help="the output folder; the HTML goes to OUTPUT/_build/html")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="Sphinx processes (default: %(default)s)")
    parser.add_argument("--strict", action="store_true", help="turn warnings into errors (reported at the end)")
    args = parser.parse_args(argv)

    import click
    from jupyter_book.cli.main import build
    from jupyter_book.sphinx import build_sphinx

    with click.Context(build) as ctx:  # jupyter-book's own derivation of the Sphinx configuration
        path_config, source, overrides = ctx.invoke(build, path_source=str(args.source.resolve()),
                                                    path_output=str(args.output.resolve()), get_config_only=True)
    html = args.output.resolve() / "_build" / "html"
    print(f"Building the HTML book with Sphinx on {args.jobs} process(es): {source} -> {html}", flush=True)
    result = build_sphinx(source, html, use_external_toc=True, noconfig=True, path_config=path_config,
                          confoverrides=overrides, builder="html", warningiserror=args.strict, keep_going=True,
                          jobs=max(1, args.jobs))
    if isinstance(result, Exception):
        print(f"the HTML build failed: {type(result).__name__}: {result}", file=sys.stderr)
        return 1
    return int(result or 0)  # `shovir book` says where the book is


if __name__ == "__main__":
    sys.exit(main())
