"""shovir_core.book.html_build: jupyter-book's own configuration, built by Sphinx on several processes;
``--strict`` still fails a build that warns."""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core.book.html_build import build_html

pytest.importorskip("jupyter_book")

CONFIG = """title: A small book
only_build_toc_files: true
latex:
  use_jupyterbook_latex: false
execute:
  execute_notebooks: "off"
sphinx:
  extra_extensions: [shovir_core.book.sphinx_parallel]
  config:
    html_show_copyright: false
"""
TOC = """format: jb-book
root: intro
chapters:
""" + "".join(f"- file: page{i}\n" for i in range(8))


def _book(root: Path, *, broken: bool = False) -> Path:
    root.mkdir()
    (root / "_config.yml").write_text(CONFIG)
    (root / "_toc.yml").write_text(TOC)
    (root / "intro.md").write_text("# Intro\n\nSee {ref}`page-3`.\n")
    for i in range(8):
        target = "no-such-label" if broken and i == 5 else f"page-{(i + 1) % 8}"
        (root / f"page{i}.md").write_text(f"(page-{i})=\n# Page {i}\n\nText of page {i}; next {{ref}}`{target}`.\n")
    return root


def test_a_book_builds_on_two_processes(tmp_path, capfd):
    book = _book(tmp_path / "book")
    assert build_html(book, book, strict=True, jobs=2) == 0
    html = book / "_build" / "html"
    assert "on 2 process(es)" in capfd.readouterr().out and (html / "index.html").is_file()
    for i in range(8):
        page = (html / f"page{i}.html").read_text()
        assert f"Text of page {i}" in page and f"page{(i + 1) % 8}.html" in page, i  # cross-page links resolved


def test_strict_fails_a_build_that_warns(tmp_path, capfd):
    book = _book(tmp_path / "book", broken=True)
    assert build_html(book, book, strict=True, jobs=2) != 0
    assert "no-such-label" in capfd.readouterr().err
    assert build_html(book, book, strict=False, jobs=2) == 0


def test_the_book_is_built_under_its_write_lock(tmp_path, monkeypatch):
    """Two builds of one book at once wrote the same files of book/_build (one failed renaming the other's
    search index): ``build_book`` builds while it holds ``book/.lock``, which a second build waits for."""
    import fcntl
    import os

    from shovir_core.book import html_build, runner

    monkeypatch.setenv("SHOVIR_ROOT", str(tmp_path))
    seen = {}

    def probe(source, output, **kwargs):
        fd = os.open(Path(output) / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen["held"] = False
        except BlockingIOError:
            seen["held"] = True
        finally:
            os.close(fd)
        return 0

    monkeypatch.setattr(html_build, "build_html", probe)
    assert runner.build_book() == tmp_path / "book" / "_build" / "html" / "index.html"
    assert seen == {"held": True}
