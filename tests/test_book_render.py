"""Readers' tables and figures: formatting, reshaping, CSV, captions; the book extension's titles."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from shovir_core.book import figures, render  # noqa: E402
from shovir_core.book.sphinx_ext import _glue_key, glue_title, record_title  # noqa: E402
from shovir_core.tables.result import TableResult  # noqa: E402


@pytest.fixture
def outdir(tmp_path, monkeypatch):
    monkeypatch.setenv(render.OUTPUT_DIR_ENV, str(tmp_path))
    return tmp_path


def test_cells_are_formatted_once_per_quantity():
    frame = pd.DataFrame({"model": ["a", "b"], "flip_rate": [0.0470, np.nan], "n_trials": [44786, 12],
                          "ssim": [0.912345, 0.7929], "ok": [True, False], "note": [None, "x"]})
    text = render.format_frame(frame, metrics={"flip_rate": "flip_rate"}, labels={"n_trials": "trials"},
                               missing={"flip_rate": "not run"})
    assert list(text.columns) == ["model", "Flip rate", "trials", "ssim", "ok", "note"]
    assert text["Flip rate"].tolist() == ["4.70%", "not run"]
    assert text["trials"].tolist() == ["44,786", "12"]
    assert text["ssim"].tolist() == ["0.912", "0.793"]
    assert text["ok"].tolist() == ["yes", "no"]
    assert text["note"].tolist() == ["n/a", "x"]
    for v in text.to_numpy().ravel():
        assert v not in ("nan", "NaN", "None", "True", "False")


def test_per_row_metric_column_formats_each_row_and_is_hidden():
    frame = pd.DataFrame({"quantity": ["rate", "diff"], "metric": ["flip_rate", "paired_diff"],
                          "value": [0.1045, -0.005]})
    text = render.format_frame(frame)
    assert "metric" not in text.columns
    assert text["value"].tolist() == ["10.45%", "−0.50\u00a0pp"]  # a number and its unit: one word


def test_two_level_columns_are_stacked_into_row_groups(outdir):
    cols = pd.MultiIndex.from_product([["Baseline", "FullNoise"], ["f1_14_micro", "bleu1"]], names=["arm", None])
    frame = pd.DataFrame([[0.5, 0.1, 0.2, 0.05], [0.6, 0.2, 0.3, 0.1]], index=pd.Index(["m1", "m2"], name="model"),
                         columns=cols)
    t = TableResult(frame, metrics={c: c[1] for c in cols}, caption="Table one.")
    out = render.table_markdown(t, name="sv-t1")
    md = out.markdown
    assert md.count("{list-table}") == 1 and ":name: tbl-sv-t1" in md
    assert "F1-14 (micro)" in md and "BLEU-1" in md and "0.500" in md
    body = md.split("\n")
    # model label printed once per block, the arm on every row
    assert sum(1 for line in body if line.strip() == "* - m1") == 1
    assert (outdir / "_tables" / "sv-t1.csv").is_file()
    csv = pd.read_csv(outdir / "_tables" / "sv-t1.csv")
    assert csv.shape == (2, 5) and "Baseline / f1_14_micro" in csv.columns
    assert "{download}`Download this table (CSV) <_tables/sv-t1.csv>`" in md


def test_wide_tables_are_split_and_long_ones_grouped(outdir):
    frame = pd.DataFrame({f"a_long_column_{i}": np.linspace(0, 1, 3) for i in range(20)},
                         index=pd.Index(["x", "y", "z"], name="row"))
    md = render.table_markdown(TableResult(frame, caption="Wide. More."), name="wide").markdown
    n = md.count("{list-table}")
    assert n >= 2 and f"(part {n} of {n})" in md
    assert md.count(":name:") == 1
    long = pd.DataFrame({"kind": ["a"] * 3 + ["b"] * 2, "value": range(5)})
    md = render.table_markdown(TableResult(long, caption="Long."), name="long", groups="kind").markdown
    assert md.count("{list-table}") == 2 and "Long — a" in md and "Long — b" in md
    with pytest.raises(ValueError, match="groups='nope'"):
        render.table_markdown(TableResult(long, caption="x"), name="long", groups="nope")


def test_markdown_special_characters_are_escaped_and_names_checked(outdir):
    frame = pd.DataFrame({"label": ["*bold* <b> $x$ | a", "- item", "1. first"]})
    md = render.table_markdown(TableResult(frame, caption="Escapes"), name="esc").markdown
    assert r"\*bold\* \<b\> \$x\$ \| a" in md and r"* - \- item" in md and r"\1. first" in md
    with pytest.raises(ValueError, match="lower-case"):
        render.table_markdown(TableResult(frame, caption="x"), name="Bad_Name")


def test_record_column_links_to_manifest(outdir):
    frame = pd.DataFrame({"run_id": ["cohort/demo/abc123"], "status": ["complete"]})
    md = render.table_markdown(TableResult(frame, caption="Records"), name="recs").markdown
    assert "{record}`cohort/demo/abc123`" in md


def test_default_names_depend_only_on_what_is_shown(monkeypatch):
    a = render.default_name("Records read", "a,b\n1,2\n")
    assert a == render.default_name("Records read", "a,b\n1,2\n") and a.startswith("table-")
    assert a != render.default_name("Records read", "a,b\n1,3\n")
    render.check_name(a)
    md = render.table_markdown(TableResult(pd.DataFrame({"a": [1]}), caption="x"), name=a, label=False,
                               write_csv=False).markdown
    assert ":name:" not in md


def test_show_figure_writes_png_with_font_record_and_refuses_small_text(outdir):
    from PIL import Image

    fig, ax = plt.subplots(figsize=figures.column_figsize(3))
    ax.plot([0, 1], [0, 1], label="line")
    ax.set_xlabel("p (0–1)")
    ax.legend()
    figures.show_figure(fig, runs=[], name="demo-fig", caption="A line.", alt="A rising line from 0 to 1.")
    png = outdir / "_figures" / "demo-fig.png"
    with Image.open(png) as im:
        meta = dict(im.text)
    assert float(meta["shovir:min_font_pt"]) >= figures.MIN_FONT_PT
    assert 0 < int(meta["shovir:css_width_px"]) <= figures.COLUMN_WIDTH_IN * figures.CSS_PX_PER_IN
    wide, ax = plt.subplots(figsize=(16, 3))
    ax.set_title("small", fontsize=10)
    with pytest.raises(ValueError, match="renders at 5.0 pt"):
        figures.show_figure(wide, runs=[], name="wide-fig", caption="c", alt="a")
    with pytest.raises(ValueError, match="alt="):
        figures.show_figure(wide, runs=[], name="wide-fig", caption="c", alt="")
    plt.close("all")


def test_glue_titles_name_run_spec_and_commit():
    manifest = {"spec_sha256": "ab" * 32, "provenance": {"git": {"commit": "0123456789abcdef", "dirty": True}}}
    assert record_title("p/n/abc", manifest) == "run p/n/abc · spec sha256 abababababab · commit 0123456789 (dirty)"
    title = glue_title("ml.x", [{"run_id": "p/n/abc", "spec_sha256": "cd" * 32}], {"p/n/abc": manifest})
    assert "run p/n/abc" in title and "spec sha256 cdcdcdcdcdcd" in title and "commit 0123456789" in title
    assert "not computed from a run record" in glue_title("ml.paper.x", [], {})
    assert _glue_key("data.ipynb::data.n:d", with_format=True) == ("data.n", "data.ipynb")
    assert _glue_key("sv.t1.max:.3f", with_format=True) == ("sv.t1.max", None)
    assert _glue_key("ml.six_findings", with_format=True) == ("ml.six_findings", None)


def test_intervals_print_inside_their_estimate():
    frame = pd.DataFrame({"metric": ["paired_diff", "flip_rate"], "paper": [0.1237, 0.047],
                          "paper_lo": [0.1119, np.nan], "paper_hi": [0.1357, np.nan]})
    text = render.format_frame(frame, intervals={"paper": ("paper_lo", "paper_hi")})
    assert list(text.columns) == ["paper [95% CI]"]
    nb = render.NBSP  # an estimate with its interval is one word: it never breaks across lines
    assert text["paper [95% CI]"].tolist() == [f"+12.37{nb}pp{nb}[+11.19,{nb}+13.57]", "4.70%"]
    assert render.format_frame(frame).columns.tolist() == ["paper [95% CI]"]  # found by the _lo/_hi names
    assert render.format_frame(frame, intervals={}).shape[1] == 3
    assert render.auto_intervals(["quantity", "estimate", "lo", "hi"]) == {"estimate": ("lo", "hi")}
    with pytest.raises(ValueError, match="intervals"):
        render.format_frame(frame, intervals={"paper": ("lo", "hi")})


def test_no_number_can_break_inside_its_unit_or_interval():
    """Issue 30: "+12.37 pp [+11.19, / +13.57]" wrapped inside a cell. Every path that formats a cell
    (a metric without interval, text formatted upstream, a number among words) joins a number, its
    unit and its interval with non-breaking spaces, and the reviewer's check finds no breakable one."""
    from shovir_core.book.html_checks import breakable_number_problems

    frame = pd.DataFrame({"what": ["A − P", "text: +4.28 pp [3.10, 5.20] of 12 %"], "diff": [0.0428, -0.0059],
                          "upstream": ["+4.28 pp [3.10, 5.20]", "17.07 % [16.1, 18.0]"]})
    text = render.format_frame(frame, metrics={"diff": "paired_diff"})
    nb = render.NBSP
    assert text.iloc[:, 1].tolist() == [f"+4.28{nb}pp", f"−0.59{nb}pp"]
    assert text.iloc[:, 2].tolist() == [f"+4.28{nb}pp{nb}[3.10,{nb}5.20]", f"17.07{nb}%{nb}[16.1,{nb}18.0]"]
    assert text.iloc[1, 0] == f"text: +4.28{nb}pp{nb}[3.10,{nb}5.20] of 12{nb}%"
    html = "<article class='bd-article'><table>" + "".join(
        f"<tr><td>{v}</td></tr>" for v in text.to_numpy().ravel()) + "</table></article>"
    assert breakable_number_problems(html) == []
    raw = "<article class='bd-article'><table><tr><td>+4.28 pp [3.10, 5.20]</td></tr></table></article>"
    assert breakable_number_problems(raw)  # the check can fail


def test_an_interval_with_no_bounds_at_all_is_dropped_with_its_columns(outdir):
    frame = pd.DataFrame({"quantity": ["a", "b"], "paper": [0.1, 0.2], "paper_lo": [np.nan, np.nan],
                          "paper_hi": [np.nan, np.nan], "run": [0.3, 0.4]})
    md = render.table_markdown(TableResult(frame, metrics={"paper": "share", "run": "share"}, caption="Side."),
                               name="no-bounds", intervals={"paper": ("paper_lo", "paper_hi")}).markdown
    assert "10.0%" in md and "[95% CI]" not in md and "Not shown, no value in this run" in md


def test_collapsed_sections_are_dropdowns(outdir):
    long = pd.DataFrame({"kind": ["a"] * 3 + ["b"] * 2, "value": range(5)})
    md = render.table_markdown(TableResult(long, caption="Every check."), name="every", groups="kind",
                               collapsed=True).markdown
    assert md.count("`````{dropdown} a (3 rows)") == 1 and "`````{dropdown} b (2 rows)" in md


def test_runner_publishes_show_outputs_only_after_success(tmp_path):
    from shovir_core.book.publish import book_lock, publish
    from shovir_core.book.runner import _staged_files

    staging = tmp_path / "staging"
    (staging / "_tables").mkdir(parents=True)
    (staging / "_tables" / "t.csv").write_text("a\n1\n")
    (staging / "_figures").mkdir()
    (staging / "_figures" / "f.png").write_bytes(b"png")
    book_dir = tmp_path / "book"
    with book_lock(book_dir):
        publish(book_dir, "nb", notebook_text="{}", files=_staged_files(staging))
    assert (book_dir / "_tables" / "t.csv").read_text() == "a\n1\n" and (book_dir / "_figures" / "f.png").is_file()


def test_index_columns_group_labels_and_na_rep_of_a_table_result(outdir):
    from types import SimpleNamespace

    cols = pd.MultiIndex.from_tuples([("model", ""), ("FullNoise", "f1_14_micro"), ("Baseline", "f1_14_micro")])
    frame = pd.DataFrame([["m1", 0.1, np.nan]], columns=cols)
    t = SimpleNamespace(frame=frame, values={}, metrics={("FullNoise", "f1_14_micro"): "f1_14_micro",
                                                         ("Baseline", "f1_14_micro"): "f1_14_micro"},
                        labels={"FullNoise": "Full Noise"}, run_ids=(), caption="c", index=(("model", ""),),
                        na_rep="not run")
    md = render.table_markdown(t, name="idx", write_csv=False).markdown
    assert "  - Full Noise" in md and "  - not run" in md and "* - model" in md and "F1-14 (micro)" in md


def test_empty_columns_are_named_not_shown_and_missing_words_stay_numeric(outdir):
    frame = pd.DataFrame({"model": ["a", "b"], "f1": [0.5, np.nan], "green": [np.nan, np.nan]})
    t = TableResult(frame, metrics={"f1": "f1_class", "green": "green"}, caption="c")
    md = render.table_markdown(t, name="empty", missing="unavailable", write_csv=False).markdown
    assert "GREEN" not in md.split("````")[1] and "Not shown, no value in this run: GREEN." in md
    assert "num-2" in md  # F1 (0.500, unavailable) is still a numeric column


def _parts(md: str) -> list[list[str]]:
    """The header row of every list-table in ``md``."""
    out = []
    for block in md.split("````{list-table}")[1:]:
        lines = block.split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith("* - "))
        head = [lines[start][4:]]
        for line in lines[start + 1:]:
            if not line.startswith("  - "):
                break
            head.append(line[4:])
        out.append(head)
    return out


def test_a_split_repeats_the_row_key_and_never_strands_one_column(outdir):
    # a flat table (no index) whose first column is an item name: every part starts with it
    frame = pd.DataFrame({"item": ["ShoViR Table 1", "ModaLens Appendix N"],
                          **{f"long quantity name {i}": [0.123456, 0.5] for i in range(9)}})
    md = render.table_markdown(TableResult(frame, caption="Wide flat."), name="flat", budget_px=450).markdown
    parts = _parts(md)
    assert len(parts) >= 2
    assert all(p[0] == "item" for p in parts), parts
    assert all(len(p) - 1 >= 2 for p in parts), parts
    widths = [len(p) for p in parts]
    assert max(widths) - min(widths) <= 1, f"parts are not balanced: {parts}"


def test_an_estimate_and_its_bounds_stay_in_one_part(outdir):
    frame = pd.DataFrame({"pairs": ["all label-differing pairs", "substitute later"], "n": [303, 159],
                          "agree_P": [0.231, 0.2013], "agree_P_lo": [0.1557, 0.1337], "agree_P_hi": [0.3014, 0.2938],
                          "flip_P": [0.0693, 0.0629], "agree_A": [0.1023, 0.0881], "agree_A_lo": [0.05, 0.031],
                          "agree_A_hi": [0.166, 0.187], "flip_A": [0.1188, 0.1006]})
    labels = {"agree_P": "Agreement, report present", "agree_P_lo": "95% low", "agree_P_hi": "95% high",
              "flip_P": "FR, report present", "agree_A": "Agreement, report absent", "agree_A_lo": "A: 95% low",
              "agree_A_hi": "A: 95% high", "flip_A": "FR, report absent"}
    t = TableResult(frame, labels=labels, index=("pairs",), caption="Chronology.")
    md = render.table_markdown(t, name="chron", intervals={}, budget_px=600).markdown
    parts = _parts(md)
    assert len(parts) >= 2, parts
    for low, high, est in (("95% low", "95% high", "Agreement, report present"),
                           ("A: 95% low", "A: 95% high", "Agreement, report absent")):
        holder = [p for p in parts if low in p]
        assert len(holder) == 1 and high in holder[0] and est in holder[0], parts
        assert holder[0].index(high) == holder[0].index(low) + 1 == holder[0].index(est) + 2
    assert all(len(p) - 1 >= 2 for p in parts), parts


def test_a_slightly_too_wide_table_is_not_split(outdir):
    # the old greedy split cut this into 5 columns + 1 stranded column
    widths = [100.0] + [140.0] * 6
    units = [[j] for j in range(1, 7)]
    assert render.split_plan(widths, [0], units, budget=930) is None
    # clearly too wide: balanced parts of at least two columns each
    plan = render.split_plan([100.0] + [140.0] * 9, [0], [[j] for j in range(1, 10)], budget=930)
    assert plan is not None and [len(p) for p in plan] in ([5, 4], [4, 5])
    # no split with every part of two or more columns fits: keep it whole (it scrolls)
    assert render.split_plan([100.0, 900.0, 900.0, 900.0], [0], [[1], [2], [3]], budget=930) is None


def test_split_widths_are_measured_in_the_table_font():
    text = pd.DataFrame({"model": ["ref-context-shortcut"], "Δ_X [95% CI]": ["−0.085 [−0.130, −0.048]"]})
    w = render._est_width(text)
    # DejaVu Sans at 14 px: about 150 px and 160 px of text (the old 8.6 px per character said 198 and 224)
    assert 150 < w[0] < 185 and 160 < w[1] < 200, w


def test_counts_print_as_integers_and_tiny_or_large_floats_stay_readable():
    frame = pd.DataFrame({"model": ["blind", "tiny"], "calls": [2588.0, 256.0],
                          "s_per_report": [0.000176, 0.00505], "reports_per_hour": [20482230.921, 713307.09],
                          "mixed": [1014.0, 0.35], "plain": [0.9123, 0.5]})
    text = render.format_frame(frame)
    assert text["calls"].tolist() == ["2,588", "256"]
    assert text["s per report"].tolist() == ["0.00018", "0.00505"]
    assert text["reports per hour"].tolist() == ["20,482,231", "713,307"]
    assert text["mixed"].tolist() == ["1,014", "0.350"]
    assert text["plain"].tolist() == ["0.912", "0.500"]


def test_metric_formats_never_print_a_tiny_value_as_zero_and_group_thousands():
    from shovir_core.metrics.schema import metric_spec, never_zero

    assert metric_spec("proportion").format_value(0.00004) == "0.000040"
    assert metric_spec("proportion").format_value(0.0) == "0.000"
    assert metric_spec("proportion").format_value(1e-17) == "0.000"  # rounding noise stays zero
    assert metric_spec("flip_rate").format_value(0.5) == "50.00%"
    assert metric_spec("value").format_value(20482230.9) == "20,482,231"
    assert metric_spec("value").format_value(-0.008534) == "-0.00853"
    assert never_zero(0.00003, "+0.00 pp") == "+0.000030 pp"


def test_significant_digit_intervals_print_bounds_at_the_estimates_decimals():
    frame = pd.DataFrame({"quantity": ["unchanged-answer rate"], "metric": ["value"], "d": [-0.0581],
                          "d_lo": [-0.1326], "d_hi": [0.02202]})
    assert render.format_frame(frame)["d [95% CI]"].tolist() == ["−0.0581 [−0.1326, 0.0220]".replace(" ", render.NBSP)]


def test_glued_whole_number_floats_print_as_integers():
    from shovir_core.book.glue import _plain

    assert _plain(9.0) == 9 and isinstance(_plain(9.0), int)
    assert _plain(np.float64(5.0)) == 5 and isinstance(_plain(np.float64(5.0)), int)
    assert _plain(0.25) == 0.25 and _plain(float("nan")) != _plain(float("nan"))


def test_a_flat_tables_key_is_the_leading_text_columns_that_tell_rows_apart(outdir):
    # 'paper' alone repeats; 'paper' + 'item' identifies each row, so every part carries both
    frame = pd.DataFrame({"paper": ["shovir", "shovir", "modalens"], "item": ["§3.1", "Table 1", "Table 1"],
                          **{f"a long descriptive header {i}": [0.5, 0.25, 0.125] for i in range(10)}})
    md = render.table_markdown(TableResult(frame), name=None, budget_px=500, write_csv=False).markdown
    parts = _parts(md)
    assert len(parts) >= 2 and all(p[:2] == ["paper", "item"] for p in parts), parts
    assert "Part 1 of" in md and f"Part {len(parts)} of {len(parts)}" in md  # uncaptioned parts are still labelled


def test_an_iso_date_never_breaks_at_its_hyphens(outdir):
    frame = pd.DataFrame({"run_id": ["a/b/c"], "ended": ["2026-12-01"]})
    md = render.table_markdown(TableResult(frame, caption="Dates."), name=None, write_csv=False).markdown
    assert "2026\u201112\u201101" in md and "2026-12-01" not in md
