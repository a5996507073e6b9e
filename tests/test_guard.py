"""The credentialed-data guard's pieces: normalisation, the shingle rule in both directions, the fast
first line (``assert_aggregate``) on every route of issue 13, and the notebook scan on crafted outputs."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from shovir_core import book  # noqa: E402
from shovir_core.book import figures, guard, shingles  # noqa: E402
from shovir_core.book.guard import CredentialedDataError, assert_aggregate  # noqa: E402
from shovir_core.book.scan import INTEGER_RUN, scan_notebook  # noqa: E402
from shovir_core.book.shingles import ShingleIndex, words  # noqa: E402
from shovir_core.records import READ_LOG_ENV  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
REPORT = "FINAL REPORT FINDINGS: The heart is enlarged. Possible small left pleural effusion. No pneumothorax."
SHORT = "Lungs are clear."
REPORTS = [REPORT, "FINDINGS: Lungs are clear. IMPRESSION: No acute cardiopulmonary process.",
           "No focal consolidation, pleural effusion, or pneumothorax. 1. Cardiomegaly. 2. No pneumothorax."]


# --------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize("text", [
    "The heart is enlarged", "THE HEART IS ENLARGED", "The\u00a0heart\u2009is\u3000enlarged", "The\nheart\n\nis\tenlarged",
    "the,heart;is...enlarged", "The\u200bheart\u200bis\u200benlarged", "ｔｈｅ ｈｅａｒｔ ｉｓ ｅｎｌａｒｇｅｄ",
    "the he\u00adart is enlarged", "thé heart is enlarged", repr(["The heart\nis enlarged"]),
    repr("The\u00a0heart is enlarged".encode()), "The_heart_is_enlarged",
])
def test_words_normalise_case_space_unicode_and_punctuation(text):
    w = words(text)
    assert w[w.index("the"):w.index("the") + 4] == ["the", "heart", "is", "enlarged"]


# --------------------------------------------------------------------------- the rule, both directions
@pytest.fixture(scope="module")
def index():
    return ShingleIndex(REPORTS, label="the reports of 'fixture'")


@pytest.mark.parametrize("text", [REPORT, SHORT, "no acute cardiopulmonary", "Possible small left",
                                  "heart is enlarged", "small left pleural effusion 12"])
def test_report_windows_leak(index, text):
    assert index.leaks(text)


@pytest.mark.parametrize("text", [
    # class names side by side, as table headers put them (reports say "pneumothorax, pleural effusion")
    "Atelectasis  Pneumothorax  Pleural Effusion  Pleural Other  Support Devices  No Finding",
    "No pleural effusion", "pleural effusion 2", "Cardiomegaly 0.25 Pneumothorax 12",
    # ModaLens questions, instructions and table labels: the project's own vocabulary
    "Does this chest X-ray show pleural effusion? Answer with exactly Yes or No.",
    "flip rate present absent paired difference", "two words", "Lungs", "",
])
def test_aggregate_text_does_not_leak(index, text):
    assert not index.leaks(text)


def test_project_phrases_are_removed_from_the_index():
    question = "Does this chest X-ray show any acute cardiopulmonary finding?"
    idx = ShingleIndex([question + " The heart is enlarged."], label="x")
    assert not idx.leaks(question) and idx.leaks("the heart is")
    assert not ShingleIndex([question], label="x", allow=[]).leaks("the heart is")
    assert ShingleIndex([question], label="x", allow=[]).leaks(question), "without the allow-list it would trip"


def test_label_words_cover_class_and_metric_names():
    lw = shingles.label_words()
    assert {"pleural", "effusion", "no", "finding", "flip", "rate"} <= lw
    assert not {"heart", "enlarged", "small", "left", "acute", "clear", "the", "is"} & (lw - {"enlarged"})


# --------------------------------------------------------------------------- first line: assert_aggregate
@pytest.fixture(scope="module")
def credentialed_run(tmp_path_factory):
    import os

    from shovir_core.protocols import run

    root = tmp_path_factory.mktemp("runs")
    old = os.environ.get("SHOVIR_RUNS")
    os.environ["SHOVIR_RUNS"] = str(root)
    try:
        r = run("cohort", "guard-fixture", {"dataset": f"mimic-jpg:{FIXTURE}"}, progress=False)
    finally:
        if old is None:
            os.environ.pop("SHOVIR_RUNS", None)
        else:
            os.environ["SHOVIR_RUNS"] = old
    assert r.credentialed
    return r


@pytest.fixture(scope="module")
def pixels():
    from shovir_core.data import load_dataset

    ds = load_dataset(f"mimic-jpg:{FIXTURE}")
    return ds.load_image(ds.images["image_id"].iloc[0])


class _Public:
    credentialed = False
    run_id = "cohort/demo/abc"


def _routes(pixels):
    fig, ax = plt.subplots()
    ax.imshow(pixels[:7])
    styled = pd.DataFrame({"n": [1]}).style.set_caption(SHORT)
    return {
        "string": REPORT, "short string": SHORT, "nbsp": REPORT.replace(" ", "\u00a0"),
        "newline-separated": "\n".join(REPORT.split()), "list": [1, REPORT], "dict value": {"a": REPORT},
        "dict key": {REPORT: 1}, "tuple": (REPORT,), "set": {SHORT}, "bytes": REPORT.encode(),
        "bytearray": bytearray(SHORT.encode()), "nested": {"a": [{"b": (SHORT,)}]},
        "frame cell": pd.DataFrame({"text": [REPORT]}), "frame index": pd.DataFrame({"n": [1]}, index=[REPORT]),
        "frame column names": pd.DataFrame({REPORT: [1]}),
        "duplicate column names": pd.DataFrame([[SHORT, 1]], columns=["x", "x"]),
        "multiindex": pd.DataFrame({"n": [1]}, index=pd.MultiIndex.from_tuples([("a", SHORT)])),
        "series": pd.Series([SHORT]), "series name": pd.Series([1], name=SHORT), "index": pd.Index([SHORT]),
        "categorical": pd.Series([SHORT], dtype="category"), "styler": styled,
        "styler format": pd.DataFrame({"n": [1]}).style.format(lambda v: REPORT),
        "object array": np.array([SHORT], dtype=object),
        "PIL image": Image.fromarray(pixels), "pixels": pixels, "1-D array": pixels.ravel(),
        "7-row slice": pixels[:7], "one row": pixels[0], "list of pixels": pixels.ravel().tolist(),
        "frame of pixels": pd.DataFrame(pixels), "frame of a 7-row slice": pd.DataFrame(pixels[:7]),
        "series of pixels": pd.Series(pixels.ravel()), "float pixels": pixels / 255.0,
        "imshow figure": fig,
    }


def test_every_route_is_refused_by_the_first_line(credentialed_run, pixels):
    routes = _routes(pixels)
    for name, obj in routes.items():
        with pytest.raises(CredentialedDataError):
            assert_aggregate(obj, {"a": credentialed_run}, what=name)
    plt.close("all")


def test_torch_tensors_of_pixels_are_refused(credentialed_run, pixels):
    torch = pytest.importorskip("torch")
    with pytest.raises(CredentialedDataError, match="pixels"):
        assert_aggregate(torch.from_numpy(pixels.astype(np.float32)), credentialed_run)


def test_errors_name_where_but_never_quote_the_text(credentialed_run):
    with pytest.raises(CredentialedDataError) as info:
        assert_aggregate(pd.DataFrame({REPORT: [1]}), credentialed_run, what="table")
    assert "table column names" in str(info.value) and "heart" not in str(info.value).lower()
    with pytest.raises(CredentialedDataError, match=r"column 'report'"):
        assert_aggregate(pd.DataFrame({"report": [REPORT]}), credentialed_run, what="table")


def test_aggregates_pass(credentialed_run):
    table = pd.DataFrame({"finding": ["Pleural Effusion", "Pneumothorax", "No Finding"], "flip rate": [0.1, 0.2, 0.3],
                          "n": [3, 4, 5]}).set_index("finding")
    table.columns = ["flip rate", "flip rate"]  # duplicate names: checked by position, no crash
    fig, ax = plt.subplots()
    ax.bar(["a", "b"], [1, 2])
    ax.imshow(np.eye(14))  # a 14 x 14 class matrix is an aggregate
    for obj in (0.42, 7, "Pleural Effusion", "cardiomegaly,edema", table, table.style.format("{:.2f}"),
                np.eye(14), list(range(20)), {"f1": 0.5}, fig, None, b"ok"):
        assert_aggregate(obj, {"a": credentialed_run})
    plt.close(fig)


def test_runs_do_not_switch_the_first_line_off(credentialed_run, tmp_path, monkeypatch):
    """Inside a notebook that read a credentialed record, runs=[] or a public run change nothing."""
    log = tmp_path / "reads.jsonl"
    log.write_text(json.dumps({"run_id": credentialed_run.run_id, "path": str(credentialed_run.path),
                               "credentialed": True}) + "\n")
    assert_aggregate(REPORT, [])  # no log: nothing credentialed known
    monkeypatch.setenv(READ_LOG_ENV, str(log))
    assert guard.session_credentialed()
    for runs in ([], None, [_Public()], {"p": _Public()}):
        with pytest.raises(CredentialedDataError):
            assert_aggregate(REPORT, runs)
        with pytest.raises(CredentialedDataError):
            book.glue("leak.report", SHORT, runs=runs)


def test_without_an_index_the_first_line_falls_back_to_refusing_free_text():
    class _NoRecord:
        credentialed, run_id, path = True, "p/n/abc", None

    with pytest.raises(CredentialedDataError, match="index is unavailable"):
        assert_aggregate("No acute process.", [_NoRecord()])
    assert_aggregate("Pleural Effusion", [_NoRecord()])


def test_an_unloadable_dataset_refuses_rather_than_passes(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOVIR_NOT_SET", raising=False)
    with pytest.raises(CredentialedDataError, match="unset environment variable"):
        guard.dataset_texts("mimic-jpg:${SHOVIR_NOT_SET}")
    with pytest.raises(CredentialedDataError, match="cannot build the report index"):
        guard.dataset_texts(f"mimic-jpg:{tmp_path / 'nowhere'}")


# --------------------------------------------------------------------------- the scan, on crafted outputs
def _nb(*outputs, metadata=None):
    return {"cells": [{"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "",
                       "outputs": list(outputs)}], "metadata": metadata or {}}


def _png(arr=None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((4, 4), np.uint8) if arr is None else arr).save(buf, format="PNG")
    return buf.getvalue()


def _display(data, metadata=None):
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


def test_scan_tagged_figures_pass_and_everything_else_is_an_image_leak(index):
    key = "k" * 64
    png = _png()
    good = _display({"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"},
                    {"image/png": {figures.TAG: figures.figure_tag(png, key=key)}})
    assert scan_notebook(_nb(good), index=index, figure_key=key, notebook="n") == []
    stale = _display(good["data"], {"image/png": {figures.TAG: figures.figure_tag(png, key="other")}})
    other = _display({"image/png": base64.b64encode(_png(np.ones((4, 4), np.uint8))).decode()},
                     good["metadata"])
    svg = _display({"image/svg+xml": "<svg></svg>"})
    jpeg = _display({"image/jpeg": base64.b64encode(b"\xff\xd8").decode()})
    refused = _display({"image/png": ""}, {"image/png": {figures.TAG: {"refused": "AxesImage of shape (40, 32)"}}})
    for out in (stale, other, svg, jpeg, refused):
        leaks = scan_notebook(_nb(out), index=index, figure_key=key, notebook="n")
        assert leaks and leaks[0].kind in ("image", "refused figure"), out


def test_scan_text_everywhere(index):
    b64 = base64.b64encode(_png(np.arange(4096, dtype=np.uint16).reshape(64, 64).astype(np.uint8))).decode()
    cases = {
        "stream": {"output_type": "stream", "name": "stdout", "text": [REPORT[:40], REPORT[40:]]},
        "error": {"output_type": "error", "ename": "ValueError", "evalue": SHORT, "traceback": ["\x1b[31mx\x1b[0m"]},
        "html entities": _display({"text/html": "<td>" + REPORT.replace(" ", "&nbsp;") + "</td>"}),
        "html attribute": _display({"text/html": f'<span title="{SHORT}">n</span>'}),
        "glue payload": _display({"text/plain": repr(SHORT)}, {"scrapbook": {"name": "x.y", "mime_prefix": ""}}),
        "json": _display({"application/json": {"a": [SHORT]}}),
        "metadata": _display({"text/plain": "1"}, {"note": SHORT}),
        "data uri": _display({"text/html": f'<img src="data:image/png;base64,{b64}">'}),
        "base64 in a stream": {"output_type": "stream", "name": "stdout", "text": b64},
        "pixel dump": {"output_type": "stream", "name": "stdout", "text": " ".join(["17"] * INTEGER_RUN)},
    }
    for name, out in cases.items():
        assert scan_notebook(_nb(out), index=index, figure_key="", notebook="n"), name
    widget = {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"m": {"state": {"value": REPORT}}}}}}
    leaks = scan_notebook(_nb(metadata=widget), index=index, figure_key="", notebook="n")
    assert leaks and leaks[0].cell is None and "notebook metadata" in str(leaks[0])


def test_scan_passes_aggregate_outputs(index):
    table = pd.DataFrame({"flip rate": [0.1, 0.2], "n": [3, 4]},
                         index=pd.Index(["Pleural Effusion", "Pneumothorax"], name="finding"))
    outs = [_display({"text/html": table.to_html(), "text/plain": str(table)}),
            {"output_type": "stream", "name": "stdout", "text": str(list(range(INTEGER_RUN - 1)))},
            {"output_type": "stream", "name": "stdout", "text": " ".join(["0.5"] * 500)}]
    assert scan_notebook(_nb(*outs), index=index, figure_key="", notebook="n") == []


def test_figure_helper_refuses_image_like_artists():
    fig, ax = plt.subplots()
    ax.imshow(np.zeros((7, 40)))
    assert figures.image_like_artists(fig) == ["AxesImage of shape (7, 40)"]
    fig2, ax2 = plt.subplots()
    ax2.pcolormesh(np.zeros((30, 30)))
    assert figures.image_like_artists(fig2)
    fig3, ax3 = plt.subplots()
    ax3.imshow(np.zeros((14, 14)))
    ax3.plot(range(100))
    assert figures.image_like_artists(fig3) == []
    plt.close("all")


# --------------------------------------------------------------------------- text that ships in the repository
def _table8():
    from shovir_core.tables.modalens_design import question_rows, questions_table

    trials = pd.DataFrame([{"case_id": c, "question_id": qid, "target_c": float((c + k) % 2)}
                           for c in range(3) for k, (qid, _, _) in enumerate(question_rows())])
    return questions_table(trials)


def test_table8_passes_and_a_table_holding_a_report_sentence_is_still_refused(credentialed_run):
    """Table 8's questions are the paper's text: rendered (cells joined: "... show pleural effusion? | Is
    pleural effusion present ...") they pass reports that say "Pleural effusion is small"; a report
    sentence put in the same table is still refused, by the index and by the first line."""
    from shovir_core.book.render import table_markdown

    reports = REPORTS + ["Pleural effusion is small. Lung opacity is seen in the left base. Support devices is noted."]
    idx = ShingleIndex(reports, label="the reports of 'fixture'")
    t8 = _table8()
    rendered = table_markdown(t8, name=None, write_csv=False).markdown
    assert len(t8.frame) == 14 and not idx.hits(rendered) and not idx.hits(t8.frame.to_csv())
    assert ShingleIndex(reports, label="x", allow=[]).hits(rendered), "without the allow-list the join would trip"
    assert_aggregate(t8.frame, {"a": credentialed_run}, what="Table 8")
    leaked = t8.frame.assign(question_l=[REPORT] + list(t8.frame["question_l"][1:]))
    assert idx.leaks(table_markdown(t8.__class__(leaked, caption=t8.caption), name=None, write_csv=False).markdown)
    with pytest.raises(CredentialedDataError):
        assert_aggregate(leaked, {"a": credentialed_run}, what="Table 8 with a report sentence")
    for sentence in reports[-1].split(". "):  # the new allow-list admits the join, not the reports' sentences
        assert idx.leaks(sentence), sentence


def test_no_doco_note_puts_class_names_between_label_words():
    """Figure 3(b)'s caption note: "for Lung Opacity" would be a window of "Negative for lung opacity"."""
    from shovir_core.tables.shovir import no_doco_note

    idx = ShingleIndex(["Negative for lung opacity. Evaluate for pleural effusion is limited."], label="x")
    note = no_doco_note(["Lung Opacity", "Pleural Effusion"])
    assert note and not idx.hits(note) and no_doco_note([]) == ""
    assert idx.hits("No DOCO bar for Lung Opacity"), "the former wording trips on such reports"


def test_manifests_are_scanned_key_by_key_and_value_by_value(tmp_path):
    """A spec key next to its value ("six_findings": ["Enlarged Cardiomediastinum", ...]) is the record's
    structure: it passes reports that open "FINDINGS: Enlarged cardiomediastinum ..."; a report in a value,
    split over a list's items or not, and a pixel dump are still refused."""
    from shovir_core.book.scan import scan_manifests

    idx = ShingleIndex(REPORTS + ["FINDINGS: Enlarged cardiomediastinum is present."], label="the reports of 'fixture'")

    def leaks(manifest: dict) -> list:
        folder = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps(manifest))
        return scan_manifests([{"run_id": "modalens/x/abc", "path": str(folder)}], index=idx, notebook="nb")

    spec = {"spec": {"design": "six", "six_findings": ["Enlarged Cardiomediastinum", "Lung Lesion", "Consolidation"]}}
    assert leaks(spec) == []
    assert ShingleIndex(REPORTS + ["FINDINGS: Enlarged cardiomediastinum is present."], label="x").hits(
        json.dumps(spec)), "read as one text, the key and the value make a report window"
    assert [lk.kind for lk in leaks({"counts": {"note": REPORT}})] == ["report text"]
    assert [lk.kind for lk in leaks({"counts": {"notes": ["The heart is", "enlarged."]}})] == ["report text"]
    assert [lk.kind for lk in leaks({"counts": {"values": list(range(100, 200))}})] == ["pixel values"]
