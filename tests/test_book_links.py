"""Every link inside the built book resolves: the file exists and, for ``page.html#anchor``, the anchor does.

A glued number drawn from several records links to its chapter's "Records read" section; a chapter
without that section left such links dead (found by reading the book). Reads the HTML that
``make book`` built; skips, saying so, when the book is not built.
"""
from __future__ import annotations

from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from shovir_core import paths

HTML = paths.book_root() / "_build" / "html"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


@lru_cache(maxsize=None)
def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _dead_links(page: Path) -> list[str]:
    dead = []
    for href in _parse(page).hrefs:
        url = urlparse(href)
        if url.scheme or url.netloc or href.startswith(("mailto:", "javascript:")):
            continue
        target = (page.parent / unquote(url.path)).resolve() if url.path else page
        if not target.exists():
            dead.append(f"{href} (no file)")
        elif url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _parse(target).ids:
            dead.append(f"{href} (no #{url.fragment})")
    return dead


def _pages() -> list[Path]:
    return sorted(HTML.glob("**/*.html")) if (HTML / "index.html").is_file() else []


def test_dead_link_detection_works(tmp_path):
    (tmp_path / "a.html").write_text('<h2 id="records-read">x</h2><a href="#records-read">ok</a>'
                                     '<a href="b.html#records-read">dead anchor</a><a href="c.html">dead file</a>'
                                     '<a href="https://example.org/x">external</a>', encoding="utf-8")
    (tmp_path / "b.html").write_text('<section id="other"></section>', encoding="utf-8")
    assert _dead_links(tmp_path / "a.html") == ["b.html#records-read (no #records-read)", "c.html (no file)"]


@pytest.mark.parametrize("page", _pages() or [None], ids=lambda p: p.relative_to(HTML).as_posix() if p else "unbuilt")
def test_every_link_in_the_book_resolves(page):
    if page is None:
        pytest.skip(f"the book is not built ({HTML}/index.html missing): run `make book`")
    dead = _dead_links(page)
    assert not dead, f"{len(dead)} dead links, first: {dead[:5]}"
