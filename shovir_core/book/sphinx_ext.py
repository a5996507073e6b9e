"""Sphinx extension of the book: every glued number links to its run record; MathJax served offline.

Registered in ``_config.yml`` (``sphinx.extra_extensions``). It

* wraps myst-nb's ``{glue}`` / ``{glue:text}`` roles so that each pasted value becomes a link whose
  hover title names the run id, spec hash and git commit of the records it was computed from
  (``book/_glue_index.json``, written by the runner, keyed by notebook and glue key); a value from one record links to that
  record's manifest, a value from several to its own provenance entry
  (``_provenance/<chapter>.html#<key>``: every record, each linked to its manifest; the title lists
  the first few), and a published value (``book.glue_paper``) to the stored value on
  ``_papers/<paper>.html#<id>``, marked "paper" and titled with the paper, the section that prints
  it and the printed text; a value with no record and no paper source, or a published value
  glued with records, is a build warning (an error under ``-W``);
* adds the ``{record}`run_id``` role (a link to ``_records/<run_id>/manifest.json`` titled with its
  spec hash and commit), used by the "Records read" tables, and copies the manifests the notebooks
  read (``book/_records``) into the HTML so the links work offline;
* right-aligns the numeric columns of the book's tables (``num-<k>`` classes set by
  :mod:`shovir_core.book.render`);
* serves MathJax from the book's own ``_static`` (installed by :mod:`shovir_core.book.mathjax`
  from the npm registry at a pinned version), so formulas render with no network;
* declares the Thebe configuration script once (sphinx-thebe adds it on every
  ``env-before-read-docs``, which a build with cached doctrees can emit more than once).
"""
from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole
from sphinx.util.osutil import relative_uri

__all__ = ["setup", "glue_title", "paper_title", "record_title", "write_provenance_pages", "write_paper_pages"]

logger = logging.getLogger(__name__)

GLUE_CLASS = "shovir-glue"
PAPER_CLASS = "shovir-paper"
RECORDS_SECTION = "records-read"
PROVENANCE_DIR = "_provenance"
PAPERS_DIR = "_papers"
TITLE_RUNS = 3
"""A hover title lists at most this many records; the provenance entry lists them all."""


# --------------------------------------------------------------------------- data the notebooks left
def _book_dir(app) -> Path:
    return Path(app.srcdir) / app.config.shovir_book_dir


@lru_cache(maxsize=1024)  # every record's manifest (a few kB each; the demo book links about 170), read once per build
def _read_json(path: str, mtime: float) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _json(path: Path) -> dict:
    return _read_json(str(path), path.stat().st_mtime) if path.is_file() else {}


@lru_cache(maxsize=2)
def _glue_index_at(book_dir: str, signature: tuple) -> dict:
    from .publish import glue_index

    return glue_index(Path(book_dir))


def _glue_index(app) -> dict:
    """``{notebook: {key: runs}}``, re-read when a notebook or the index changes."""
    from ..file_cache import stat_signature
    from .publish import GLUE_INDEX

    book = _book_dir(app)
    return _glue_index_at(str(book), stat_signature(sorted(book.glob("*.ipynb")) + [book / GLUE_INDEX]))


@lru_cache(maxsize=2)
def _glue_sources_at(book_dir: str, signature: tuple) -> dict:
    return glue_sources(Path(book_dir))


def glue_sources(book_dir: Path) -> dict:
    """``{notebook: {key: {"paper": ...} | {"source": ...}}}``: where the values glued without a
    record came from (a published value, a shipped file), from the executed notebooks' metadata
    (``metadata.shovir.glue_sources``, written by the runner)."""
    out = {}
    for path in sorted(Path(book_dir).glob("*.ipynb")):
        try:
            meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        except ValueError:
            continue
        out[path.stem] = dict((meta.get("shovir") or {}).get("glue_sources") or {})
    return out


def _glue_sources(app) -> dict:
    from ..file_cache import stat_signature

    book = _book_dir(app)
    return _glue_sources_at(str(book), stat_signature(sorted(book.glob("*.ipynb"))))


def _manifest(app, run_id: str) -> dict:
    return _json(_book_dir(app) / "_records" / run_id / "manifest.json")


def _commit(manifest: dict) -> str:
    git = (manifest.get("provenance") or {}).get("git") or {}
    commit = (git.get("commit") or "")[:10]
    return (commit + (" (dirty)" if git.get("dirty") else "")) if commit else "unknown"


def record_title(run_id: str, manifest: dict, spec_sha256: str | None = None) -> str:
    """``run <id> · spec sha256 <12 hex> · commit <10 hex>`` for a hover title."""
    spec = (spec_sha256 or manifest.get("spec_sha256") or "")[:12] or "unknown"
    return f"run {run_id} · spec sha256 {spec} · commit {_commit(manifest)}"


def glue_title(key: str, runs: list[dict], manifests: dict[str, dict], paper: dict | None = None,
               source: str | None = None) -> str:
    """The hover title of a glued value computed from ``runs`` (entries of the glue index), or of a
    published value read from ``paper`` (its glue index source)."""
    if paper:
        return paper_title(key, paper)
    if not runs and source:
        return f"{key}: read from {source} (shipped with the package), not from a run record"
    if not runs:
        return f"{key}: not computed from a run record and not a published value"
    parts = [record_title(r["run_id"], manifests.get(r["run_id"], {}), r.get("spec_sha256")) for r in runs[:TITLE_RUNS]]
    more = len(runs) - TITLE_RUNS
    tail = f"; and {more} more record{'s' if more > 1 else ''} (click for the list)" if more > 0 else ""
    return f"{key} — from {len(runs)} record{'s' if len(runs) > 1 else ''}: " + "; ".join(parts) + tail


def paper_title(key: str, paper: dict) -> str:
    """``paper value — ModaLens (arXiv …), Table 3 / §4.1: t3.gen.P printed 4.26 %`` for a hover title."""
    from ..papers.values import PAPERS

    name = PAPERS.get(paper.get("paper"), paper.get("paper", "?"))
    short = name.partition(": ")[0]
    arxiv = name[name.rfind("(") + 1:-1] if name.endswith(")") else name
    part = {"lo": "lower bound of the interval of ", "hi": "upper bound of the interval of "}.get(paper.get("part"), "")
    unit = paper.get("unit", "")
    unit = "" if unit in ("count", "label", "set", "score", "proportion", "ratio") else f" {unit}"
    if paper.get("derived"):  # derived from printed values (book.glue_paper with an expression)
        return (f"paper value, not from a run — {short} ({arxiv}), {paper.get('location')}: derived from "
                f"{', '.join(paper['derived'])}: {paper.get('text')}{unit} ({key})")
    return (f"paper value, not from a run — {short} ({arxiv}), {paper.get('location')}: {part}{paper.get('id')} "
            f"printed {paper.get('text')}{unit} ({key})")


# --------------------------------------------------------------------------- roles
def _glue_key(text: str, *, with_format: bool) -> tuple[str, str | None]:
    """``(key, doc)`` of a glue role's text ``[doc::]key[:format]``."""
    if with_format:
        parts = text.rsplit(":", 1)
        text = parts[0] if len(parts) == 2 and not parts[0].endswith(":") else text
    doc, _, key = text.rpartition("::")
    return key, (doc or None)


def _wrapping(role_cls, *, with_format: bool):
    class GlueLinkRole(role_cls):
        """myst-nb's glue role, its output wrapped so the post-transform can link it to its records."""

        def run(self):
            result, messages = super().run()
            if not result:
                return result, messages
            key, doc = _glue_key(self.text, with_format=with_format)
            wrapper = nodes.inline("", "", *result, classes=["shovir-glued"])
            wrapper["shovir_glue_key"] = key
            if doc:  # another notebook's key (``doc::key``); else the page's own notebook
                wrapper["shovir_glue_doc"] = Path(doc).stem
            return [wrapper], messages

    GlueLinkRole.__name__ = f"Linked{role_cls.__name__}"
    return GlueLinkRole


class RecordRole(SphinxRole):
    """``{record}`<protocol>/<name>/<hash12>``` -> a link to that record's manifest in the book."""

    def run(self):
        run_id = self.text.strip()
        node = nodes.inline(run_id, run_id, classes=["shovir-record"])
        node["shovir_record"] = run_id
        return [node], []


# --------------------------------------------------------------------------- post-transform
class LinkGluedValues(SphinxPostTransform):
    """Glued values and record ids become links to the manifests; numeric table columns align right."""

    default_priority = 900
    formats = ("html",)

    def _uri(self, target: str) -> str:
        base = self.app.builder.get_target_uri(self.env.docname)
        return relative_uri(base, target)

    def run(self, **kwargs) -> None:
        app = self.app
        index = _glue_index(app)
        sources = _glue_sources(app)
        for node in list(self.document.findall(nodes.inline)):
            if "shovir_glue_key" in node:
                key = node["shovir_glue_key"]
                notebook = node.get("shovir_glue_doc") or self.env.docname.rsplit("/", 1)[-1]
                runs = (index.get(notebook) or {}).get(key)
                if runs is None:
                    logger.warning(f"glued value {key!r} of {notebook!r} is not in {app.config.shovir_book_dir}/"
                                   "_glue_index.json (was its notebook executed by `shovir book`?)", location=node,
                                   type="shovir", subtype="glue_index")
                    continue
                runs = runs or []
                entry = {"notebook": notebook, "runs": runs, **((sources.get(notebook) or {}).get(key) or {})}
                paper = entry.get("paper")
                manifests = {r["run_id"]: _manifest(app, r["run_id"]) for r in runs}
                title = glue_title(key, runs, manifests, paper, entry.get("source"))
                classes = [GLUE_CLASS]
                if paper:
                    if runs:
                        logger.warning(f"glued value {key!r} is the paper's ({paper.get('id')}) but the glue index "
                                       f"gives it {len(runs)} run record(s)", location=node,
                                       type="shovir", subtype="provenance")
                    uri = self._uri(f"{PAPERS_DIR}/{paper['paper']}.html") + f"#{paper.get('anchor', paper['id'])}"
                    classes.append(PAPER_CLASS)
                elif len(runs) == 1:
                    uri = self._uri(f"_records/{runs[0]['run_id']}/manifest.json")
                elif runs:
                    uri = self._uri(f"{PROVENANCE_DIR}/{entry['notebook']}.html") + f"#{key}"
                else:
                    if not entry.get("source"):
                        logger.warning(f"glued value {key!r} comes from no run record and is not a published value "
                                       "(glue published values with book.glue_paper)", location=node,
                                       type="shovir", subtype="provenance")
                    node.replace_self(nodes.abbreviation("", "", *node.children, explanation=title,
                                                         classes=[GLUE_CLASS, "no-record"]))
                    continue
                ref = nodes.reference("", "", *node.children, refuri=uri, reftitle=title, internal=False,
                                      classes=classes)
                node.replace_self(ref)
            elif "shovir_record" in node:
                run_id = node["shovir_record"]
                manifest = _manifest(app, run_id)
                if not manifest:
                    logger.warning(f"record {run_id!r}: no manifest copy under {app.config.shovir_book_dir}/_records "
                                   "(execute the notebook with `shovir book`)", location=node,
                                   type="shovir", subtype="record")
                    continue
                ref = nodes.reference("", "", nodes.literal(run_id, run_id),
                                      refuri=self._uri(f"_records/{run_id}/manifest.json"),
                                      reftitle=record_title(run_id, manifest), internal=False,
                                      classes=["shovir-record"])
                node.replace_self(ref)
        for table in self.document.findall(nodes.table):
            cols = {int(c[4:]) - 1 for c in table.get("classes", []) if c.startswith("num-") and c[4:].isdigit()}
            if not cols:
                continue
            for row in table.findall(nodes.row):
                for j, entry in enumerate(e for e in row.children if isinstance(e, nodes.entry)):
                    if j in cols:
                        entry["classes"].append("shovir-num")


# --------------------------------------------------------------------------- events
def _override_glue_roles(app) -> None:
    from myst_nb.ext.glue.roles import PasteRoleAny, PasteTextRole

    app.add_role_to_domain("glue", "text", _wrapping(PasteTextRole, with_format=True)(), override=True)
    for name in ("", "any"):
        app.add_role_to_domain("glue", name, _wrapping(PasteRoleAny, with_format=False)(), override=True)


def _builder_inited(app) -> None:
    if app.builder.format != "html":
        return
    if app.config.shovir_offline_mathjax:
        from .mathjax import MATHJAX_ENTRY, install_mathjax

        static = install_mathjax(Path(app.outdir).parent / ".mathjax")
        app.config.html_static_path.append(str(static))
        app.config.mathjax_path = MATHJAX_ENTRY


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Keep one copy of each inline script (sphinx-thebe may have added its config twice)."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, out = set(), []
    for js in scripts:
        body = getattr(js, "attributes", {}).get("body")
        key = ("body", body) if body else ("file", str(js))
        if key in seen:
            continue
        seen.add(key)
        out.append(js)
    scripts[:] = out


def _copy_records(app, exception) -> None:
    """Copy the manifests into the HTML, and the book's own ``_static`` files over stale copies.

    (Sphinx 7.4 does not overwrite a static file that an earlier build left in the output, so an
    edited ``shovir.css`` would otherwise not reach an incremental build.)
    """
    if exception is not None or app.builder.format != "html":
        return
    src = _book_dir(app) / "_records"
    if src.is_dir():
        shutil.copytree(src, Path(app.outdir) / "_records", dirs_exist_ok=True)
    static = _book_dir(app) / "_static"
    if static.is_dir():
        shutil.copytree(static, Path(app.outdir) / "_static", dirs_exist_ok=True)
    sources = _glue_sources(app)  # read from the executed notebooks once, not once per notebook
    index = {nb: {"glue": glue, "sources": sources.get(nb, {})} for nb, glue in _glue_index(app).items()}
    write_provenance_pages(index, Path(app.outdir), manifest=lambda rid: _manifest(app, rid))
    write_paper_pages(Path(app.outdir))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<link rel="stylesheet" href="../_static/shovir.css"></head>
<body class="shovir-provenance"><main><h1>{title}</h1>
{intro}
{body}
</main></body></html>
"""


def write_provenance_pages(index: dict, outdir: Path, *, manifest=lambda run_id: {}) -> list[Path]:
    """``_provenance/<chapter>.html``: one entry (``id`` = the glue key) per value glued from several
    records, listing every record linked to its manifest; ``index`` is ``{notebook: {"glue": {key:
    runs}, "sources": {key: ...}}}``. Returns the pages written."""
    from html import escape

    by_nb: dict[str, list] = {}
    for nb, entry in sorted(index.items()):
        for key, runs in sorted((entry.get("glue") or {}).items()):
            if len(runs or []) > 1 and key not in (entry.get("sources") or {}):
                by_nb.setdefault(nb, []).append((key, runs))
    out = []
    shutil.rmtree(Path(outdir) / PROVENANCE_DIR, ignore_errors=True)  # no page of a chapter no longer built
    for nb, items in by_nb.items():
        body = []
        for key, runs in items:
            lis = "".join(
                f'<li><a href="../_records/{escape(r["run_id"])}/manifest.json"><code>{escape(r["run_id"])}</code></a>'
                f' · {escape(record_title(r["run_id"], manifest(r["run_id"]), r.get("spec_sha256")))}</li>'
                for r in runs)
            body.append(f'<section id="{escape(key)}"><h2><code>{escape(key)}</code></h2>'
                        f'<p>computed from {len(runs)} records:</p><ul>{lis}</ul></section>')
        page = Path(outdir) / PROVENANCE_DIR / f"{nb}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(_PAGE.format(title=escape(f"Provenance of the values of {nb}"),
                                     intro=f'<p>Back to <a href="../book/{escape(nb)}.html">the chapter</a>.</p>',
                                     body="\n".join(body)), encoding="utf-8")
        out.append(page)
    return out


def write_paper_pages(outdir: Path) -> list[Path]:
    """``_papers/<paper>.html``: every stored published value (``id`` = its value id) with the
    section that prints it, the printed text, unit, interval and description."""
    from html import escape

    from ..papers.values import PAPERS, load_values

    out = []
    for paper, title in PAPERS.items():
        rows = []
        for vid, item in load_values(paper).items():
            ci = f" [{escape(item.ci[0])}, {escape(item.ci[1])}]" if item.ci else ""
            rows.append(f'<tr id="{escape(vid)}"><td><code>{escape(vid)}</code></td><td>{escape(item.location)}</td>'
                        f'<td class="shovir-num">{escape(item.text)}{ci}</td><td>{escape(item.unit)}</td>'
                        f'<td>{escape(item.desc)}</td></tr>')
        page = Path(outdir) / PAPERS_DIR / f"{paper}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        body = ('<table class="shovir-table"><thead><tr><th>value id</th><th>where the paper prints it</th>'
                '<th>printed</th><th>unit</th><th>what it is</th></tr></thead><tbody>' + "".join(rows)
                + "</tbody></table>")
        page.write_text(_PAGE.format(title=escape(f"Published values of {title}"),
                                     intro="<p>As stored in <code>shovir_core/papers/data</code>, copied from the paper; "
                                           "every value the book marks \u201cpaper\u201d links here.</p>",
                                     body=body), encoding="utf-8")
        out.append(page)
    return out


def setup(app):
    app.setup_extension("myst_nb")
    app.setup_extension("shovir_core.book.sphinx_parallel")
    app.add_config_value("shovir_book_dir", "book", "env")
    app.add_config_value("shovir_offline_mathjax", True, "env")
    _override_glue_roles(app)
    app.add_role("record", RecordRole())
    app.add_post_transform(LinkGluedValues)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _dedupe_scripts)
    app.connect("build-finished", _copy_records)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
