"""Deny by default: scan everything an executed notebook emitted before it enters the book.

The book runner calls :func:`scan_notebook` on every notebook that read a credentialed record or
dataset, on the executed copy in a temporary folder; only a notebook with no finding is written to
``book/``. What is scanned, for every output of every code cell:

* streams (``print``, logging, warnings), error names, values and tracebacks;
* every MIME type of display data and execute results (``text/plain``, ``text/html``,
  ``text/markdown``, ``text/latex``, JSON payloads, glue payloads of myst-nb, widget views), the
  output metadata, and the notebook metadata (widget state);
* every image output (``image/*``, ``application/pdf``) and every image embedded in text (``data:``
  URIs, ``<img>``, ``<svg>``, base64-encoded PNG/JPEG/GIF/WebP).

A text fails when it holds three consecutive words of a credentialed report or finding sentence
(:class:`~shovir_core.book.shingles.ShingleIndex`; HTML is checked as written and with its tags
removed, after unescaping entities) or a run of :data:`INTEGER_RUN` integers with nothing else between
them (a pixel dump). An image fails unless it is a PNG rendered by the aggregate-figure helper
during this execution (:func:`shovir_core.book.figures.aggregate_png`; its tag is an HMAC under a key
the runner draws for each execution).

What was emitted is what is scanned: the ``runs=`` argument of ``book.glue``/``book.show`` plays no
part here.
"""
from __future__ import annotations

import base64
import binascii
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .figures import TAG, tag_is_valid
from .guard import REFUSED, CredentialedDataError
from .shingles import ShingleIndex

__all__ = ["Leak", "LeakError", "scan_notebook", "scan_staged", "scan_manifests", "format_leaks", "INTEGER_RUN"]

INTEGER_RUN = 64
"""This many integers in a row, with only spaces, commas and brackets between them, look like pixels."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAGS = re.compile(r"<[^>]*>")
_EMBEDDED = [
    (re.compile(r"data:\s*image/", re.I), "a data: URI image"),
    (re.compile(r"<\s*img\b", re.I), "an <img> element"),
    (re.compile(r"<\s*svg\b", re.I), "an inline <svg> image"),
    (re.compile(r"<\s*canvas\b", re.I), "a <canvas> element"),
    (re.compile(r"(?:iVBORw0KGgo|/9j/|R0lGODlh|R0lGODdh|UklGR|SUkqAA|TU0AKg)[A-Za-z0-9+/=]{40}"),
     "base64-encoded image bytes"),
]
_NUMBERISH = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[^\W\d_]+")
_HTML_MIMES = ("text/html", "text/markdown", "text/latex", "application/xhtml+xml", "image/svg+xml")


@dataclass(frozen=True)
class Leak:
    """One thing a notebook emitted that may not enter the book."""

    notebook: str
    cell: int | None          # 1-based position of the code cell in the notebook, None for notebook metadata
    execution_count: int | None
    output: int | None        # 1-based position of the output in the cell
    where: str                # "stream stdout", "text/html", "output metadata", ...
    kind: str                 # "report text", "image", "embedded image", "pixel values", "refused figure"
    detail: str

    def __str__(self) -> str:
        at = "notebook" if self.cell is None else (
            f"code cell {self.cell}" + (f" [In {self.execution_count}]" if self.execution_count is not None else "")
            + (f", output {self.output}" if self.output is not None else ""))
        return f"{at} ({self.where}): {self.kind}: {self.detail}"


class LeakError(CredentialedDataError):
    """An executed notebook emitted credentialed text or images; ``leaks`` lists them."""

    def __init__(self, notebook: str, leaks: list[Leak]):
        super().__init__(format_leaks(notebook, leaks))
        self.notebook = notebook
        self.leaks = list(leaks)


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def _strings(node, path: str = ""):
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            if k in (TAG, REFUSED):
                continue
            yield path, str(k)
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")


def _integer_run(text: str) -> int:
    best = run = 0
    for m in _NUMBERISH.finditer(text):
        tok = m.group(0)
        if tok.isdigit() and int(tok) <= 65535:
            run += 1
            best = max(best, run)
        else:
            run = 0
    return best


class _Scanner:
    def __init__(self, notebook: str, index: ShingleIndex, figure_key: str):
        self.notebook, self.index, self.key = notebook, index, figure_key
        self.leaks: list[Leak] = []
        self.at: tuple = (None, None, None)

    def add(self, where: str, kind: str, detail: str) -> None:
        cell, count, output = self.at
        self.leaks.append(Leak(self.notebook, cell, count, output, where, kind, detail))

    def text(self, text: str, where: str, *, markup: bool = False) -> None:
        if not text or not text.strip():
            return
        for pattern, what in _EMBEDDED:
            if pattern.search(text):
                self.add(where, "embedded image", f"{what} (images must be figures of the aggregate-figure helper)")
                break
        variants = [text]
        if markup or "&" in text or "<" in text:
            unescaped = html.unescape(text)
            variants = [unescaped, _TAGS.sub(" ", unescaped)]
        for variant in variants:
            hits = self.index.hits(variant)
            if hits:
                self.add(where, "report text",
                         f"{len(hits)} run(s) of 3 or more consecutive words of {self.index.label}")
                break
        longest = max(_integer_run(v) for v in variants)
        if longest >= INTEGER_RUN:
            self.add(where, "pixel values", f"a run of {longest} integers (looks like pixel values)")

    def image(self, mime: str, payload, metadata: dict) -> None:
        tag = (metadata.get(mime) or {}).get(TAG) if isinstance(metadata.get(mime), dict) else None
        tag = tag if tag is not None else metadata.get(TAG)
        if isinstance(tag, dict) and tag.get("refused"):
            self.add(mime, "refused figure", f"the aggregate-figure helper refused it: {tag['refused']}")
            return
        if mime != "image/png" or tag is None:
            self.add(mime, "image", "not a figure of the aggregate-figure helper (no tag)")
            return
        try:
            data = base64.b64decode(_text(payload))
        except (binascii.Error, ValueError):
            self.add(mime, "image", "undecodable image payload")
            return
        if not tag_is_valid(data, tag, key=self.key):
            self.add(mime, "image", "the figure tag does not match this execution's key (stale or copied tag)")

    def json(self, node, where: str) -> None:
        for path, s in _strings(node):
            self.text(s, f"{where} {path}".strip())

    def output(self, out: dict) -> None:
        kind = out.get("output_type")
        if kind == "stream":
            self.text(_text(out.get("text", "")), f"stream {out.get('name', '')}".strip())
        elif kind == "error":
            self.text(f"{out.get('ename', '')}: {out.get('evalue', '')}", "error")
            self.text(_ANSI.sub("", "\n".join(out.get("traceback") or [])), "error traceback")
        elif kind in ("display_data", "execute_result", "update_display_data"):
            metadata = out.get("metadata") or {}
            if metadata.get(REFUSED):
                why = " ".join(str(metadata[REFUSED]).split())
                self.add("display", "refused display", f"the display guard refused it ({why[:300]})")
            for mime, payload in (out.get("data") or {}).items():
                if mime.startswith("image/") or mime == "application/pdf":
                    self.image(mime, payload, metadata)
                    if mime == "image/svg+xml":
                        self.text(_text(payload), mime, markup=True)
                elif isinstance(payload, (str, list)) and all(isinstance(p, str) for p in (
                        payload if isinstance(payload, list) else [payload])):
                    self.text(_text(payload), mime, markup=mime in _HTML_MIMES)
                else:
                    self.json(payload, mime)
            self.json(metadata, "output metadata")
        else:
            self.json(out, f"output of type {kind!r}")


def scan_notebook(nb: dict, *, index: ShingleIndex, figure_key: str, notebook: str) -> list[Leak]:
    """Every :class:`Leak` in an executed notebook (a dict in nbformat 4)."""
    scanner = _Scanner(notebook, index, figure_key)
    code_cell = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        code_cell += 1
        for k, out in enumerate(cell.get("outputs") or [], start=1):
            scanner.at = (code_cell, cell.get("execution_count"), k)
            scanner.output(out)
        scanner.at = (code_cell, cell.get("execution_count"), None)
        scanner.json({k: v for k, v in (cell.get("metadata") or {}).items() if k not in ("tags", "papermill",
                                                                                       "execution")},
                     "cell metadata")
    scanner.at = (None, None, None)
    scanner.json(nb.get("metadata") or {}, "notebook metadata")
    return scanner.leaks


_IMAGE_REFS = [
    re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)"),                     # markdown image
    re.compile(r"(?::::|```)\s*\{(?:figure|image)\}\s*(\S+)"),          # MyST figure / image directive
    re.compile(r"^\.\.\s+(?:figure|image)::\s*(\S+)", re.M),              # reST directive
]


def _output_texts(nb: dict):
    for cell in nb.get("cells", []):
        for out in cell.get("outputs") or []:
            for payload in (out.get("data") or {}).values():
                if isinstance(payload, (str, list)):
                    yield _text(payload)
            if out.get("output_type") == "stream":
                yield _text(out.get("text", ""))


def scan_staged(staging: Path, *, nb: dict, index: ShingleIndex, figure_key: str, notebook: str) -> list[Leak]:
    """Leaks among the files ``book.show`` staged for the book (``_tables/*.csv``, ``_figures/*.png``) and
    the images the notebook's outputs point at.

    Table files are scanned as text like any output; a PNG passes only with a valid tag of this
    execution in ``_figures/tags.jsonl`` (written by :func:`shovir_core.book.figures.show_figure`);
    any other file is refused. An image reference in an output (markdown image, MyST or reST
    figure/image directive) must name a staged, tagged PNG: a reference to any other file would make
    the book build copy that file into the HTML.
    """
    from .figures import FIGURE_TAGS_FILE, FIGURES_LINK_DIR

    scanner = _Scanner(notebook, index, figure_key)
    staging = Path(staging)
    tags: dict[str, dict] = {}
    tag_file = staging / FIGURES_LINK_DIR / FIGURE_TAGS_FILE
    if tag_file.is_file():
        for line in tag_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                tags[entry["file"]] = entry["tag"]
    tagged = set()
    for path in sorted(p for p in staging.rglob("*") if p.is_file()) if staging.is_dir() else []:
        rel = path.relative_to(staging).as_posix()
        if path == tag_file:
            continue
        if path.suffix.lower() in (".csv", ".json", ".txt", ".md"):
            scanner.text(path.read_text(encoding="utf-8", errors="replace"), f"file {rel}")
        elif path.suffix.lower() == ".png" and rel.startswith(f"{FIGURES_LINK_DIR}/"):
            if tag_is_valid(path.read_bytes(), tags.get(path.name), key=figure_key):
                tagged.add(rel)
            else:
                scanner.add(f"file {rel}", "image", "a PNG not written by the aggregate-figure helper (no valid tag)")
        else:
            scanner.add(f"file {rel}", "file", "only table files and tagged figures may enter the book")
    for text in _output_texts(nb):
        for pattern in _IMAGE_REFS:
            for m in pattern.finditer(text):
                ref = m.group(1).strip().strip("'\"")
                if ref not in tagged:
                    scanner.add("image reference", "image",
                                f"an output points at {ref!r}, which is not a tagged figure of this execution")
    return scanner.leaks


def scan_manifests(entries: list[dict], *, index: ShingleIndex, notebook: str) -> list[Leak]:
    """Leaks in the manifests of the records a notebook read (the book copies them into the HTML)."""
    scanner = _Scanner(notebook, index, "")
    for entry in entries:
        path = Path(entry.get("path", "")) / "manifest.json"
        if "run_id" not in entry or not path.is_file():
            continue
        text, where = path.read_text(encoding="utf-8"), f"manifest of {entry['run_id']}"
        try:
            data = json.loads(text)
        except ValueError:  # not JSON: scanned as text
            scanner.text(text, where)
            continue
        # report text: every key and string value on its own -- a window across a key and its value
        # ('"six_findings": ["Enlarged Cardiomediastinum"' -> "findings enlarged cardiomediastinum") is the
        # record's structure, not a report -- and pixel dumps over the whole file
        for string in _json_strings(data):
            scanner.text(string, where)
        longest = _integer_run(text)
        if longest >= INTEGER_RUN:
            scanner.add(where, "pixel values", f"a run of {longest} integers (looks like pixel values)")
    return scanner.leaks


def _json_strings(node):
    """Every key and string value of a parsed JSON document; a list of strings as one text (its items
    read in order, so a report split over the items is still one text)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from _json_strings(v)
    elif isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):
            yield " ".join(node)
            return
        for v in node:
            yield from _json_strings(v)


def format_leaks(notebook: str, leaks: list[Leak], *, limit: int = 12) -> str:
    """One line naming the notebook, and for each leak the cell, where and what kind."""
    shown = "; ".join(str(leak) for leak in leaks[:limit])
    more = f"; and {len(leaks) - limit} more" if len(leaks) > limit else ""
    return (f"notebook {notebook!r} read credentialed data and emitted {len(leaks)} thing(s) the book may not "
            f"show, so nothing was written to book/: {shown}{more}")
