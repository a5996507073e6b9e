"""The whole book as one PDF: Jupyter Book's single-page HTML printed by a headless Chromium.

``make pdf`` builds ``book/_build/singlehtml`` (``jupyter-book build --builder singlehtml``) from the
executed notebooks and prints it with Debian's ``/usr/bin/chromium --headless --print-to-pdf``
(no browser download, no network). Before printing, a copy of the page has every collapsed table
(the audits' dropdowns) opened, so what a reader would have to click open is on paper; the code
cells stay collapsed. :func:`chapters_in_pdf` reads the PDF back (pypdf) to check that every chapter
is in it (``make pdf`` fails otherwise); ``build_pdf(chapters=[...])`` prints a few chapters only (the test).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["CHROMIUM", "singlehtml_dir", "singlehtml_page", "open_collapsed", "print_pdf", "subset_toc", "build_pdf",
           "chapter_titles", "chapters_in_pdf", "pdf_pages"]

CHROMIUM = os.environ.get("SHOVIR_CHROMIUM", "/usr/bin/chromium")
"""The browser that prints the book (Debian's ``chromium`` package)."""

_DROPDOWN = re.compile(r'<details(?![^>]*\bopen\b)([^>]*\bclass="[^"]*(?:sd-dropdown|shovir-dropdown)[^"]*")')


def singlehtml_dir() -> Path:
    from .. import paths

    return paths.book_root() / "_build" / "singlehtml"


def singlehtml_page(folder: Path | None = None) -> Path:
    """The single page of the book: the root document that ``index.html`` redirects to (Jupyter Book
    writes ``index.html`` as a redirect to ``book/intro.html``)."""
    folder = Path(folder or singlehtml_dir())
    index = folder / "index.html"
    m = re.search(r'url=([^"\s>]+)', index.read_text(encoding="utf-8")) if index.is_file() else None
    return folder / m.group(1) if m and (folder / m.group(1)).is_file() else index


def open_collapsed(html: str) -> str:
    """``html`` with every collapsed table dropdown opened (code cells stay collapsed).

    >>> open_collapsed('<details class="sd-sphinx-override sd-dropdown"><summary>x</summary></details>')
    '<details open class="sd-sphinx-override sd-dropdown"><summary>x</summary></details>'
    >>> open_collapsed('<details class="hide above-input"><summary>code</summary></details>')
    '<details class="hide above-input"><summary>code</summary></details>'
    """
    return _DROPDOWN.sub(r"<details open\1", html)


def print_pdf(html: Path, pdf: Path, *, chromium: str = CHROMIUM, timeout: int = 600) -> Path:
    """Print ``html`` (a file) to ``pdf`` with a headless Chromium, collapsed tables opened."""
    if not Path(chromium).is_file():
        raise FileNotFoundError(f"Chromium not found at {chromium} (apt-get install -y chromium)")
    html = Path(html)
    opened = html.with_name(html.stem + ".print.html")
    opened.write_text(open_collapsed(html.read_text(encoding="utf-8")), encoding="utf-8")
    pdf = Path(pdf)
    pdf.parent.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="shovir-pdf-")
    try:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--no-pdf-header-footer", "--virtual-time-budget=20000",
               "--run-all-compositor-stages-before-draw", f"--print-to-pdf={pdf}", opened.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        opened.unlink(missing_ok=True)
    if proc.returncode != 0 or not pdf.is_file():
        raise RuntimeError(f"chromium could not print {html} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return pdf


def subset_toc(chapters: list[str], *, out: Path, toc: Path | None = None) -> Path:
    """A copy of the book's table of contents (``_toc.yml``) that keeps the root page and only
    ``chapters`` (notebook names, in the book's order), written to ``out``."""
    import yaml
    from .. import yaml_text

    from .. import paths

    data = yaml_text.safe_load(Path(toc or paths.repo_root() / "_toc.yml").read_text(encoding="utf-8"))
    wanted = {f"book/{c}" for c in chapters}
    parts = [{**p, "chapters": [c for c in p.get("chapters", []) if c.get("file") in wanted]}
             for p in data.get("parts", [])]
    data["parts"] = [p for p in parts if p["chapters"]]
    missing = wanted - {c["file"] for p in data["parts"] for c in p["chapters"]}
    if missing:
        raise ValueError(f"not chapters of the book: {sorted(missing)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return out


def build_pdf(*, pdf: Path | None = None, build: bool = True, chapters: list[str] | None = None,
              out_dir: Path | None = None, check: bool = True) -> Path:
    """Build the single-page HTML of the executed book and print it to ``book/_build/pdf/book.pdf``.

    ``chapters`` (notebook names) prints the root page and those chapters only, built under
    ``out_dir`` (default: a temporary folder) instead of ``book/_build``; ``check`` reads the PDF
    back and raises when a chapter of the single page is missing from it (:func:`chapters_in_pdf`)."""
    from .. import paths

    folder = None
    if chapters is not None:
        out_dir = Path(out_dir or tempfile.mkdtemp(prefix="shovir-pdf-book-"))
        toc = subset_toc(chapters, out=out_dir / "_toc.yml")
        folder = out_dir / "_build" / "singlehtml"
    if build:
        exe = (shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
               or "jupyter-book")  # the environment's own first (make runs .venv/bin/python, not an activated venv)
        cmd = [exe, "build", str(paths.repo_root()), "--builder", "singlehtml", "--keep-going"]
        cmd += (["--path-output", str(paths.book_root())] if chapters is None
                else ["--path-output", str(out_dir), "--toc", str(toc)])
        subprocess.run(cmd, cwd=paths.repo_root(), check=True)
    pdf = Path(pdf or (out_dir / "book.pdf" if chapters is not None else paths.book_root() / "_build" / "pdf" / "book.pdf"))
    page = singlehtml_page(folder)
    print_pdf(page, pdf)
    if check:
        found = chapters_in_pdf(pdf, chapter_titles(page.read_text(encoding="utf-8")))
        if not found or not all(found.values()):
            raise RuntimeError(f"{pdf}: chapters missing from the PDF: {[t for t, ok in found.items() if not ok]}")
    return pdf


def chapter_titles(html: str) -> list[str]:
    """The chapter titles of the single-page HTML: the root document's first heading, then the
    heading after each ``<span id="document-<chapter>">`` that Sphinx's single-page builder writes."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    article = soup.select_one("article.bd-article") or soup
    heads = [article.find(["h1", "h2"])] + [s.find_next(["h1", "h2", "h3"])
                                           for s in article.select('span[id^="document-"]')]
    return [" ".join(h.get_text(" ", strip=True).replace("#", "").split()) for h in heads if h is not None]


def pdf_pages(pdf: Path) -> list[str]:
    """The text of every page of ``pdf``."""
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(str(pdf)).pages]


def chapters_in_pdf(pdf: Path, titles: list[str]) -> dict[str, bool]:
    """Whether each chapter title appears in the PDF's text (whitespace-insensitive; ligatures such
    as "ﬁ" read as their letters)."""
    import unicodedata

    def norm(s: str) -> str:
        return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s))

    text = norm("".join(pdf_pages(pdf)))
    return {t: norm(t) in text for t in titles}


if __name__ == "__main__":  # `python -m shovir_core.book.pdf` (make pdf)
    print(build_pdf())
