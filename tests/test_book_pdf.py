"""The book as one PDF (``make pdf``): chapters are in it, and collapsed tables are printed.

Builds the single-page HTML of the root page and two executed chapters (one with collapsed tables)
and prints it with Debian's Chromium (:mod:`shovir_core.book.pdf`; the machinery is the same for
every chapter, and ``make pdf`` itself fails when a chapter of the whole book is missing from its
PDF); skips, saying why, where Chromium, pypdf or the executed book is missing.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from shovir_core import paths
from shovir_core.book import pdf as book_pdf

CHAPTERS = ["shovir_suppl_c", "audit_shovir"]
"""A short chapter and one whose checks are collapsed tables (``shovir-dropdown``)."""


def test_collapsed_tables_are_opened_for_print_and_code_stays_collapsed():
    html = ('<details class="sd-sphinx-override sd-dropdown sd-card shovir-dropdown"><summary>Checks</summary>'
            '<table></table></details><details class="hide above-input"><summary>Show code</summary></details>')
    out = book_pdf.open_collapsed(html)
    assert out.count("<details open") == 1 and '<details class="hide above-input">' in out


def test_subset_toc_keeps_the_root_and_the_chapters_asked(tmp_path):
    import yaml

    toc = yaml.safe_load(book_pdf.subset_toc(CHAPTERS, out=tmp_path / "_toc.yml").read_text())
    assert toc["root"] == "book/intro"
    assert [c["file"] for p in toc["parts"] for c in p["chapters"]] == [f"book/{c}" for c in CHAPTERS]
    with pytest.raises(ValueError, match="not chapters of the book"):
        book_pdf.subset_toc(["no_such_chapter"], out=tmp_path / "x.yml")


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    if not Path(book_pdf.CHROMIUM).is_file():
        pytest.skip(f"Chromium not found at {book_pdf.CHROMIUM} (apt-get install -y chromium); PDF test skipped")
    pytest.importorskip("pypdf", reason="pypdf is not installed (pip install pypdf)")
    if not all((paths.book_root() / f"{n}.ipynb").is_file() for n in CHAPTERS) \
            or not (paths.book_root() / "_build" / "html" / "index.html").is_file():
        pytest.skip("the book is not built (run `make book`); PDF test skipped")
    out = tmp_path_factory.mktemp("pdf")
    pdf = book_pdf.build_pdf(chapters=CHAPTERS, out_dir=out, pdf=out / "book.pdf")  # raises on a missing chapter
    html = book_pdf.singlehtml_page(out / "_build" / "singlehtml").read_text(encoding="utf-8")
    return pdf, html


def test_the_pdf_holds_every_chapter_of_its_page(printed):
    pdf, html = printed
    titles = book_pdf.chapter_titles(html)
    assert len(titles) == len(CHAPTERS) + 1, f"the single page has chapters {titles} for root + {CHAPTERS}"
    pages = book_pdf.pdf_pages(pdf)
    assert len(pages) >= len(titles), f"{len(pages)} pages for {len(titles)} chapters"
    found = book_pdf.chapters_in_pdf(pdf, titles)
    assert all(found.values()), f"chapters missing from the PDF: {[t for t, ok in found.items() if not ok]}"
    missing = "A chapter that is not printed"
    assert book_pdf.chapters_in_pdf(pdf, [missing]) == {missing: False}  # what makes `make pdf` fail


def test_collapsed_tables_are_printed(printed):
    """A cell of a table that is collapsed on the page (a closed dropdown) is in the PDF's text."""
    from bs4 import BeautifulSoup

    pdf, html = printed
    soup = BeautifulSoup(html, "html.parser")
    closed = [d for d in soup.select("details") if "shovir-dropdown" in d.get("class", []) and not d.has_attr("open")]
    assert closed, "the page has no collapsed table (pick another chapter in CHAPTERS)"
    cells = [td.get_text(" ", strip=True) for d in closed for td in d.select("td")]
    for d in closed:
        d.decompose()
    outside = _norm(soup.get_text(" "))
    only_inside = [c for c in cells if len(_norm(c)) >= 12 and _norm(c) not in outside]
    assert only_inside, "no table cell is only inside the collapsed tables"
    text = _norm("".join(book_pdf.pdf_pages(pdf)))
    assert _norm(only_inside[0]) in text, f"{only_inside[0]!r} (a collapsed table's cell) is not in the PDF"
