"""MathJax for the offline book: installed from the npm registry at a pinned version at build time.

A hospital workstation may have no network, and a book whose formulas load MathJax from a CDN
shows raw LaTeX there. The book's extension (:mod:`shovir_core.book.sphinx_ext`) calls
:func:`install_mathjax` when the HTML build starts: ``npm install mathjax@<MATHJAX_VERSION>`` into a
cache folder beside the build (nothing is committed), the entry script is checked against
:data:`MATHJAX_SHA256`, and the parts the CommonHTML output needs are staged as ``mathjax/`` in a
folder that joins ``html_static_path``, so the book loads ``_static/mathjax/tex-mml-chtml.js``.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from ..errors import ShovirError

__all__ = ["MATHJAX_VERSION", "MATHJAX_SHA256", "MATHJAX_ENTRY", "MathJaxError", "install_mathjax"]

MATHJAX_VERSION = "3.2.2"
"""The npm package ``mathjax`` version (MathJax 3, the major version Sphinx's ``sphinx.ext.mathjax`` targets)."""

MATHJAX_SHA256 = "300480069078b5892d2363a2b65e2dfbbf30fe5c80f83edbfecf4610fd093862"
"""SHA-256 of ``es5/tex-mml-chtml.js`` in ``mathjax@3.2.2``: a different file fails the build."""

MATHJAX_ENTRY = "mathjax/tex-mml-chtml.js"
"""``mathjax_path`` relative to ``_static``."""

_PARTS = ("tex-mml-chtml.js", "input", "output/chtml", "output/chtml.js", "ui", "a11y", "adaptors")
"""What the combined TeX + MathML -> CommonHTML component loads on demand (fonts, TeX extensions, menu)."""


class MathJaxError(ShovirError, RuntimeError):
    """MathJax could not be installed (npm missing or failing, or a file that is not the pinned one)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_mathjax(cache: Path, *, npm: str | None = None) -> Path:
    """Install the pinned MathJax under ``cache`` (once) and return the static folder holding ``mathjax/``.

    Raises
    ------
    MathJaxError
        When npm is not on PATH or fails, or the installed entry script's hash is not
        :data:`MATHJAX_SHA256`.
    """
    cache = Path(cache)
    static = cache / f"static-{MATHJAX_VERSION}"
    target = static / "mathjax"
    entry = target / "tex-mml-chtml.js"
    if entry.is_file() and _sha256(entry) == MATHJAX_SHA256:
        return static
    npm = npm or shutil.which("npm")
    if npm is None:
        raise MathJaxError("npm is not installed: the offline book installs MathJax with "
                           f"`npm install mathjax@{MATHJAX_VERSION}` (apt-get install npm), or set "
                           "shovir_offline_mathjax: false in _config.yml to load MathJax from its CDN")
    prefix = cache / "npm"
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--prefix", str(prefix),
           f"mathjax@{MATHJAX_VERSION}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise MathJaxError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    es5 = prefix / "node_modules" / "mathjax" / "es5"
    got = _sha256(es5 / "tex-mml-chtml.js")
    if got != MATHJAX_SHA256:
        raise MathJaxError(f"mathjax@{MATHJAX_VERSION}: es5/tex-mml-chtml.js has SHA-256 {got}, "
                           f"expected {MATHJAX_SHA256}")
    if target.exists():
        shutil.rmtree(target)
    for part in _PARTS:
        src, dst = es5 / part, target / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
    return static
