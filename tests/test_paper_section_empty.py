"""An empty paper-vs-run comparison is a sentence, never a header without rows."""
from __future__ import annotations

from shovir_core.book import paper_section as ps


class _Public:
    credentialed = False
    run_id = "cohort/demo/abc"
    manifest: dict = {}


def test_empty_comparison_is_a_sentence(monkeypatch):
    shown, said = [], []
    monkeypatch.setattr(ps, "show", lambda *a, **k: shown.append(a))
    from IPython.display import Markdown

    monkeypatch.setattr("IPython.display.display",
                        lambda obj, **kw: said.append(obj.data) if isinstance(obj, Markdown) else None)
    side, audit = ps.paper_section("x.y", {}, {}, reproduces_paper=False, runs=[_Public()], name="x-y")
    assert side.frame.empty and audit is None
    assert not shown, "no table is rendered"
    assert said == [ps.empty_comparison_sentence({})]
