"""What a reviewer checks on every page of the built book, as functions of a page's HTML.

The browser test (``tests/test_book_browser.py``) runs them on every page of ``book/_build/html``;
the unit tests run them on small HTML fixtures, so each check is shown to fail on the defect it
names (issue 30):

* :func:`provenance_problems` -- a paper value glued with run provenance (its glue key reads
  ``.paper.`` but the link names a run record, or it is not marked "paper"), or a value with no
  provenance at all;
* :func:`caption_problems` -- a table or figure whose caption does not say what it shows and what
  ran (the bracketed data/model note of :func:`shovir_core.book.captions.with_what_ran`), or says
  only "Part k of n";
* :func:`breakable_number_problems` -- a number with its unit or interval that can break across
  lines (an ordinary space inside ``+12.37 pp [+11.19, +13.57]`` outside a no-wrap numeric column);
* :func:`snake_case_problems` -- an identifier (``image_first``) in a table cell;
* :func:`command_problems` -- an en or em dash in a command (Sphinx smart quotes turn ``--`` into
  ``–``);
* :func:`layout_problems` -- printed stdout blocks and sections with a heading and nothing else.
"""
from __future__ import annotations

import re

from .captions import names_data_and_model
from .glue import RUN_DERIVED_PAPER_KEYS

__all__ = ["page_problems", "provenance_problems", "caption_problems", "breakable_number_problems",
           "snake_case_problems", "command_problems", "layout_problems"]

_SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/-])")
_PART_ONLY = re.compile(r"^\s*(?:Book table \d+\s*[—-]?\s*)?\(?part \d+ of \d+\)?\s*$", re.I)
_BREAKABLE = re.compile(r"\d (?:pp|%)|[\d%] \[[+\-−]?\d|\[[+\-−]?[\d.,]+, [+\-−]?\d")
_DASH_OPTION = re.compile(r"(?:^|\s)[–—][A-Za-z]")


def _soup(html):
    from bs4 import BeautifulSoup

    return html if hasattr(html, "select") else BeautifulSoup(html, "html.parser")


def _article(soup):
    return soup.select_one("article.bd-article") or soup.select_one("main") or soup


def _glue_key(title: str) -> str:
    return title.split(" ", 1)[0].split(":", 1)[0]


def _is_paper_key(key: str) -> bool:
    parts = key.split(".")
    if "paper" not in parts[:-1]:
        return False
    rest = parts[parts.index("paper") + 1:]
    return not (rest and (rest[0] in RUN_DERIVED_PAPER_KEYS or rest[-1].startswith("n_")))


def provenance_problems(html) -> list[str]:
    """Glued values whose provenance is wrong or missing."""
    out = []
    for el in _article(_soup(html)).select("a.shovir-glue, abbr.shovir-glue"):
        title, text = el.get("title", ""), el.get_text(" ", strip=True)
        paper = "shovir-paper" in (el.get("class") or [])
        key = "" if title.startswith("paper value") else _glue_key(title)
        if paper:
            if not title.startswith("paper value"):
                out.append(f"paper value {text!r} without a paper title ({title[:60]!r})")
        elif title.startswith("paper value"):
            out.append(f"paper value {text!r} not marked 'paper'")
        elif _is_paper_key(key):
            out.append(f"paper value {text!r} ({key}) glued with run provenance: {title[:80]!r}")
        elif el.name == "abbr" and "read from" not in title:
            out.append(f"glued value {text!r} has no provenance ({title[:80]!r})")
    for el in _article(_soup(html)).select(".pasted-text, .pasted-inline"):
        if not el.find_parent(["a", "abbr"], class_="shovir-glue"):
            out.append(f"glued value {el.get_text(strip=True)!r} does not link to its record or the paper")
    return out


def caption_problems(html) -> list[str]:
    """Tables and figures whose caption does not name what they show and what ran."""
    out = []
    article = _article(_soup(html))
    for i, table in enumerate(article.select("table")):
        cap = table.find("caption")
        text = cap.get_text(" ", strip=True) if cap else ""
        if not text or _PART_ONLY.match(text):
            out.append(f"table {i} has no caption of its own ({text!r})")
        elif not names_data_and_model(text):
            out.append(f"table {i} ({text[:60]!r}) does not name its data and model(s)")
    for i, fig in enumerate(article.select("figure")):
        cap = fig.find("figcaption")
        text = cap.get_text(" ", strip=True) if cap else ""
        if not text:
            out.append(f"figure {i} has no caption")
        elif not names_data_and_model(text):
            out.append(f"figure {i} ({text[:60]!r}) does not name its data and model(s)")
    return out


def breakable_number_problems(html) -> list[str]:
    """Table cells where a number and its unit or interval are joined by a breakable space."""
    out = []
    for td in _article(_soup(html)).select("table td"):
        if "shovir-num" in (td.get("class") or []):
            continue  # numeric columns do not wrap (CSS)
        text = td.get_text()
        m = _BREAKABLE.search(text)
        if m:
            out.append(f"cell {text.strip()[:50]!r} can break inside a number ({m.group(0)!r})")
    return out


def snake_case_problems(html) -> list[str]:
    """Table cells that show an identifier instead of words (code and record ids aside)."""
    out = []
    for td in _article(_soup(html)).select("table td"):
        for code in td.select("code, a.shovir-record, a.reference"):
            code.extract()
        m = _SNAKE.search(td.get_text(" "))
        if m:
            out.append(f"cell shows the identifier {m.group(0)!r}")
    return out


def command_problems(html) -> list[str]:
    """Code (commands) holding an en or em dash where an option's double dash should be."""
    out = []
    for el in _article(_soup(html)).select("code, pre"):
        text = el.get_text()
        if _DASH_OPTION.search(text):
            out.append(f"command {text.strip()[:60]!r} holds a dash that should be '--'")
    return out


def layout_problems(html) -> list[str]:
    """Printed output blocks and sections that hold a heading and nothing else."""
    out = []
    article = _article(_soup(html))
    for pre in article.select(".cell_output .output.stream"):
        out.append(f"printed output {pre.get_text(strip=True)[:50]!r}")
    for sec in article.select("section"):
        kids = [k for k in sec.children if getattr(k, "name", None) or str(k).strip()]
        if kids and all(getattr(k, "name", "") in ("h1", "h2", "h3", "h4", "span") for k in kids):
            head = sec.find(["h1", "h2", "h3", "h4"])
            out.append(f"empty section {head.get_text(' ', strip=True)[:40] if head else sec.get('id')!r}")
    return out


def page_problems(html) -> list[str]:
    """Every problem of one page (all checks above)."""
    soup = _soup(str(html) if not hasattr(html, "select") else str(html))
    out = []
    for check in (provenance_problems, caption_problems, breakable_number_problems, command_problems,
                  layout_problems):
        out += check(soup)
    out += snake_case_problems(_soup(str(soup)))  # it edits its copy
    return out
