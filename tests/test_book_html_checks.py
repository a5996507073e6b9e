"""The checks the browser test runs on every page, each failing on a small page with its defect (issue 30)."""
from __future__ import annotations

from shovir_core.book import html_checks as hc

NB = "\u00a0"


def _page(body: str) -> str:
    return f'<html><body><main><article class="bd-article">{body}</article></main></body></html>'


def _glued(cls: str, title: str, text: str = "4.26%", tag: str = "a") -> str:
    return (f'<{tag} class="{cls}" title="{title}" href="x"><span class="pasted-text">{text}</span></{tag}>')


def test_a_paper_value_with_run_provenance_fails():
    good = _page(_glued("shovir-glue shovir-paper", "paper value, not from a run — ModaLens (arXiv 2609.15635), "
                        "Table 3: t3.gen.P printed 4.26 %")
                 + _glued("shovir-glue", "ml.t2.all14.present.flip_rate — from 1 record: run modalens/x/abc")
                 + _glued("shovir-glue", "ml.paper.verdict.t2 — from 1 record: run modalens/x/abc", "inside"))
    assert hc.provenance_problems(good) == []
    bad = _page(_glued("shovir-glue", "ml.paper.t2.all14.present.flip_rate — from 1 record: run modalens/x/abc"))
    (problem,) = hc.provenance_problems(bad)
    assert "glued with run provenance" in problem
    unmarked = _page(_glued("shovir-glue", "paper value, not from a run — ModaLens, Table 3: t3.gen.P"))
    assert "not marked 'paper'" in hc.provenance_problems(unmarked)[0]
    bare = _page('<span class="pasted-text">0.165</span>')
    assert "does not link" in hc.provenance_problems(bare)[0]
    nothing = _page(_glued("shovir-glue no-record", "ml.x: not computed from a run record", tag="abbr"))
    assert "no provenance" in hc.provenance_problems(nothing)[0]


def test_a_table_or_figure_without_a_caption_naming_data_and_model_fails():
    ok = _page('<table class="shovir-table"><caption>Book table 3 — Flip rates [demo: NIH 64 px, ref-anchored]'
               '</caption><tr><td>1</td></tr></table><figure><img alt="a"><figcaption>Fig. 2 Margins '
               '[demo: NIH 64 px, ref-anchored]</figcaption></figure>')
    assert hc.caption_problems(ok) == []
    bare = _page('<table><caption>Book table 4 — Flip rates by arm.</caption><tr><td>1</td></tr></table>')
    assert "does not name its data and model" in hc.caption_problems(bare)[0]
    part = _page('<table><caption>Book table 5 — Part 2 of 3</caption><tr><td>1</td></tr></table>')
    assert "no caption of its own" in hc.caption_problems(part)[0]
    fig = _page('<figure><img alt="a"><figcaption>Fig. 1 Margins.</figcaption></figure>')
    assert "figure 0" in hc.caption_problems(fig)[0]


def test_a_number_broken_across_lines_fails():
    ok = _page(f'<table><tr><td>+12.37{NB}pp{NB}[+11.19,{NB}+13.57]</td>'
               '<td class="shovir-num">+12.37 pp [+11.19, +13.57]</td><td>Report present, image first</td>'
               '<td>896x896, 256 image tokens</td></tr></table>')
    assert hc.breakable_number_problems(ok) == []
    bad = _page('<table><tr><td>+12.37 pp [+11.19, +13.57]</td></tr></table>')
    assert hc.breakable_number_problems(bad)


def test_a_snake_case_cell_fails():
    ok = _page('<table><tr><td>image first</td><td><code>shovir_table1</code></td>'
               '<td>Qwen2_5_VLForConditionalGeneration</td></tr></table>')
    assert hc.snake_case_problems(ok) == []
    bad = _page('<table><tr><td>image_first</td></tr></table>')
    assert hc.snake_case_problems(bad) == ["cell shows the identifier 'image_first'"]


def test_an_en_dash_in_a_command_fails():
    ok = _page("<pre>shovir run modalens_tables --profile mimic --shards 16</pre><code>a – b</code>")
    assert hc.command_problems(ok) == []
    bad = _page("<code>shovir run modalens_tables –profile mimic</code>")
    assert "should be '--'" in hc.command_problems(bad)[0]


def test_printed_output_and_empty_sections_fail():
    ok = _page('<section id="a"><h2>Checks</h2><p>Every check held.</p></section>')
    assert hc.layout_problems(ok) == []
    bad = _page('<section id="glued-values"><h2>Glued values</h2></section>'
                '<div class="cell_output"><div class="output stream"><pre>hello</pre></div></div>')
    problems = hc.layout_problems(bad)
    assert any("empty section" in p for p in problems) and any("printed output" in p for p in problems)
    assert len(hc.page_problems(bad)) == len(problems)
