"""Captions say what ran; tables read as words and numbers (issue 30)."""
from __future__ import annotations

import pandas as pd
import pytest

from shovir_core.book import captions, render
from shovir_core.tables.result import TableResult


class _Run:
    credentialed = False
    path = None

    def __init__(self, dataset, model, protocol="modalens"):
        self.run_id = f"{protocol}/x/{model}"
        self.manifest = {"protocol": protocol, "dataset": {"name": dataset}, "model": {"id": model}}


@pytest.fixture
def outdir(tmp_path, monkeypatch):
    monkeypatch.setenv(render.OUTPUT_DIR_ENV, str(tmp_path))
    return tmp_path


def test_what_ran_names_data_and_models_from_the_manifests():
    assert captions.what_ran([_Run("demo-64px", "ref-anchored")]) == "demo: NIH 64 px, ref-anchored"
    many = captions.what_ran([_Run("demo-64px", f"m{i}") for i in range(6)])
    assert many == "demo: NIH 64 px; models: m0, m1, m2, m3, 2 more"
    assert captions.what_ran([_Run(None, None, protocol="audit")]) == captions.PAPER_ONLY
    assert captions.what_ran([]) == ""
    cap = captions.with_what_ran("Table 2: flip rates.", [_Run("demo-64px", "ref-anchored")])
    assert cap == "Table 2: flip rates. [demo: NIH 64 px, ref-anchored]" and captions.names_data_and_model(cap)
    assert captions.with_what_ran(cap, [_Run("demo-64px", "ref-anchored")]) == cap  # said once
    assert not captions.names_data_and_model("Part 2 of 3")


def test_public_data_labellers_and_fixtures_are_named_so_the_caption_check_passes():
    """Issue 30: the labeller validation (IU X-ray, two labellers) and the datasets without a report
    (VQA-RAD; SLAKE as a fixture with invented images) named no data in a form the check reads."""
    iu = _Run("iu-xray-dev", None, protocol="labeller-validation")
    iu.manifest["model"] = {"labellers": ["rules", "keyword"]}
    assert captions.what_ran([iu]) == "demo: IU X-ray reports (embedded extract), labellers: rules, keyword"
    vqa = _Run("VQA-RAD", "ref-vlm-vqarad", protocol="modalens-noreport")
    slake = _Run("SLAKE", "ref-image-reader", protocol="modalens-noreport")
    slake.manifest["spec"] = {"dataset": "slake:data/fixtures/slake"}
    ran = captions.what_ran([vqa, slake])
    assert ran == "data: VQA-RAD, SLAKE fixture (invented images); models: ref-vlm-vqarad, ref-image-reader"
    for runs in ([iu], [vqa, slake], [vqa, _Run("demo", "x")]):
        assert captions.names_data_and_model(captions.with_what_ran("Table 6.", runs))
    assert not captions.names_data_and_model("Table 6. [VQA-RAD, ref-vlm-vqarad]")  # the check can fail


def test_show_appends_what_ran_and_names_the_csv_after_the_caption(outdir, monkeypatch):
    from shovir_core import book

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    frame = pd.DataFrame({"arm": ["image_first", "text_first"], "flip_rate": [0.047, 0.05]})
    book.show(TableResult(frame, caption="Table 2: flip rates by prompt order."),
              runs={"a": _Run("demo-64px", "ref-anchored")})
    (table,) = shown
    assert "[demo: NIH 64 px, ref-anchored]" in table.plain and "\\[demo: NIH 64 px" in table.markdown
    assert table.csv_path.name.startswith("table-2-flip-rates-by-prompt-order-")
    assert "image first" in table.markdown and "image_first" not in table.markdown  # no snake_case cell


def test_a_constant_verdict_becomes_a_note():
    frame = pd.DataFrame({"quantity": ["a", "b"], "paper": [0.1, 0.2], "verdict": ["shown for scale"] * 2})
    md = render.table_markdown(TableResult(frame, caption="Paper vs run [demo: NIH boxes, x]"), name=None).markdown
    assert "Verdict on every row: shown for scale." in md and md.count("shown for scale") == 1
    frame.loc[1, "verdict"] = "inside"
    md = render.table_markdown(TableResult(frame, caption="c"), name=None).markdown
    assert "Verdict on every row" not in md


def test_a_shown_table_keeps_its_caption_and_its_csv_holds_numbers(outdir, monkeypatch):
    from shovir_core import book

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    t = TableResult(pd.DataFrame({"arm": ["a", "b"], "flip_rate": [0.0572, 0.1], "key": ["x", "y"]}),
                    metrics={"flip_rate": "flip_rate"}, index=("arm",), caption="Flip rates by arm.")
    book.show(t.drop(["key"]), runs=[_Run("demo", "m")])
    (table,) = shown
    assert table.plain.startswith("Flip rates by arm. [demo: NIH boxes, m]")
    assert "5.72%" in table.markdown and "key" not in table.plain
    csv = pd.read_csv(table.csv_path)
    assert csv["flip_rate"].tolist() == [0.0572, 0.1], "the CSV holds numbers, not '5.72%'"


def test_show_refuses_the_formatted_text_of_display(outdir, monkeypatch):
    """CONTRIBUTING.md: book.show gets the TableResult, never .display() (nor a frame derived from it)."""
    from shovir_core import book

    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: None)
    t = TableResult(pd.DataFrame({"arm": ["a", "b"], "flip_rate": [0.0572, 0.1]}), metrics={"flip_rate": "flip_rate"},
                    caption="Flip rates by arm.")
    for formatted in (t.display(), t.display().set_index("arm"), pd.concat([t.display(), t.display()])):
        with pytest.raises(TypeError, match="pass the TableResult itself"):
            book.show(formatted, runs=[_Run("demo", "m")])
    book.show(t.frame, runs=[_Run("demo", "m")], caption="A plain frame of numbers is still shown.")
