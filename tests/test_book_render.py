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
    assert text["value"].tolist() == ["10.45%", "−0.50 pp"]


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
    assert text["paper [95% CI]"].tolist() == ["+12.37 pp [+11.19, +13.57]", "4.70%"]
    assert render.format_frame(frame).columns.tolist() == ["paper [95% CI]"]  # found by the _lo/_hi names
    assert render.format_frame(frame, intervals={}).shape[1] == 3
    assert render.auto_intervals(["quantity", "estimate", "lo", "hi"]) == {"estimate": ("lo", "hi")}
    with pytest.raises(ValueError, match="intervals"):
        render.format_frame(frame, intervals={"paper": ("lo", "hi")})


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
    from shovir_core.book.runner import _publish_outputs

    staging = tmp_path / "staging"
    (staging / "_tables").mkdir(parents=True)
    (staging / "_tables" / "t.csv").write_text("a\n1\n")
    (staging / "_figures").mkdir()
    (staging / "_figures" / "f.png").write_bytes(b"png")
    book_dir = tmp_path / "book"
    _publish_outputs(staging, book_dir)
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
