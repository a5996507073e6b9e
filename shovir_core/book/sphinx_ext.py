"""Sphinx extension of the book: every glued number links to its run record; MathJax served offline.

Registered in ``_config.yml`` (``sphinx.extra_extensions``). It

* wraps myst-nb's ``{glue}`` / ``{glue:text}`` roles so that each pasted value becomes a link whose
  hover title names the run id, spec hash and git commit of the records it was computed from
  (``book/_glue_index.json``, written by the runner, keyed by notebook and glue key); a value from one record links to that
  record's manifest, a value from several to the chapter's "Records read" section, and a value
  from no record (a published number, a setting) says so;
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

__all__ = ["setup", "glue_title", "record_title"]

logger = logging.getLogger(__name__)

GLUE_CLASS = "shovir-glue"
RECORDS_SECTION = "records-read"


# --------------------------------------------------------------------------- data the notebooks left
def _book_dir(app) -> Path:
    return Path(app.srcdir) / app.config.shovir_book_dir


@lru_cache(maxsize=4)
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


def glue_title(key: str, runs: list[dict], manifests: dict[str, dict]) -> str:
    """The hover title of a glued value computed from ``runs`` (entries of the glue index)."""
    if not runs:
        return f"{key}: not computed from a run record (a published value or a setting)"
    parts = [record_title(r["run_id"], manifests.get(r["run_id"], {}), r.get("spec_sha256")) for r in runs]
    return f"{key} — from " + "; ".join(parts)


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
                manifests = {r["run_id"]: _manifest(app, r["run_id"]) for r in runs}
                title = glue_title(key, runs, manifests)
                if len(runs) == 1:
                    uri = self._uri(f"_records/{runs[0]['run_id']}/manifest.json")
                elif runs:
                    doc = f"{app.config.shovir_book_dir}/{notebook}"
                    if doc == self.env.docname and RECORDS_SECTION not in self.document.ids:
                        logger.warning(f"glued value {key!r} comes from {len(runs)} records and links to this "
                                       f"chapter's '#{RECORDS_SECTION}' section, which the chapter lacks (end it "
                                       "with '## Records read' and book.runs_table(runs))", location=node,
                                       type="shovir", subtype="records_section")
                    uri = self._uri(app.builder.get_target_uri(doc)) + f"#{RECORDS_SECTION}"
                else:
                    node.replace_self(nodes.abbreviation("", "", *node.children, explanation=title,
                                                         classes=[GLUE_CLASS, "no-record"]))
                    continue
                ref = nodes.reference("", "", *node.children, refuri=uri, reftitle=title, internal=False,
                                      classes=[GLUE_CLASS])
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


def setup(app):
    app.setup_extension("myst_nb")
    app.add_config_value("shovir_book_dir", "book", "env")
    app.add_config_value("shovir_offline_mathjax", True, "env")
    _override_glue_roles(app)
    app.add_role("record", RecordRole())
    app.add_post_transform(LinkGluedValues)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _dedupe_scripts)
    app.connect("build-finished", _copy_records)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
