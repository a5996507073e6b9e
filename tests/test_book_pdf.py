"""The whole book as one PDF (``make pdf``): every chapter is in it, and collapsed tables are printed.

Builds the single-page HTML of the executed book and prints it with Debian's Chromium
(:mod:`shovir_core.book.pdf`); skips, saying why, where Chromium, pypdf or the executed book is missing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core import paths
from shovir_core.book import pdf as book_pdf
from shovir_core.params import toc_notebooks


def test_collapsed_tables_are_opened_for_print_and_code_stays_collapsed():
    html = ('<details class="sd-sphinx-override sd-dropdown sd-card shovir-dropdown"><summary>Checks</summary>'
            '<table></table></details><details class="hide above-input"><summary>Show code</summary></details>')
    out = book_pdf.open_collapsed(html)
    assert out.count("<details open") == 1 and '<details class="hide above-input">' in out


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    if not Path(book_pdf.CHROMIUM).is_file():
        pytest.skip(f"Chromium not found at {book_pdf.CHROMIUM} (apt-get install -y chromium); PDF test skipped")
    pytest.importorskip("pypdf", reason="pypdf is not installed (pip install pypdf)")
    executed = [n for n in toc_notebooks() if (paths.book_root() / f"{n}.ipynb").is_file()]
    if not executed or not (paths.book_root() / "_build" / "html" / "index.html").is_file():
        pytest.skip("the book is not built (run `make book`); PDF test skipped")
    pdf = book_pdf.build_pdf(pdf=tmp_path_factory.mktemp("pdf") / "book.pdf")
    html = book_pdf.singlehtml_page().read_text(encoding="utf-8")
    return pdf, html, executed


def test_the_pdf_holds_every_chapter(printed):
    pdf, html, executed = printed
    titles = book_pdf.chapter_titles(html)
    assert len(titles) >= len(executed) + 1, f"the single page has {len(titles)} chapters for {len(executed)} notebooks"
    pages = book_pdf.pdf_pages(pdf)
    assert len(pages) >= len(titles), f"{len(pages)} pages for {len(titles)} chapters"
    found = book_pdf.chapters_in_pdf(pdf, titles)
    assert all(found.values()), f"chapters missing from the PDF: {[t for t, ok in found.items() if not ok]}"
