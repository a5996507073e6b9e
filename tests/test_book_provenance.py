"""A glued number says whose it is: the paper's values are glued as the paper's, a run's with its records.

Issue 30: paper values used to be glued with the demo run's records (their hover titles named a
demo run). :func:`shovir_core.book.glue_paper` reads the stored published value itself; ``glue``
refuses a published value with run records, and any value with no record at all.
"""
from __future__ import annotations

import json
import math

import pytest

from shovir_core import book
from shovir_core.book import sphinx_ext
from shovir_core.book.glue import ProvenanceError
from shovir_core.papers import PaperNumber, equals_published, load_values
from shovir_core.tables import paper_vs_run as pvr


class _Run:
    credentialed = False
    run_id = "cohort/demo/abc123456789"
    path = None
    manifest = {"spec_sha256": "ab" * 32}


@pytest.fixture
def glue_log(tmp_path, monkeypatch):
    log = tmp_path / "glue.jsonl"
    log.touch()
    monkeypatch.setenv(book.GLUE_LOG_ENV, str(log))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def test_glue_paper_reads_the_stored_value_and_logs_its_source(glue_log):
    book.glue_paper("ml.paper.gen_P", "t3.gen.P", scale=0.01)
    book.glue_paper("ml.paper.gen_diff_lo", "t3.gen.diff", part="lo")
    (a, b) = glue_log()
    assert a["key"] == "ml.paper.gen_P" and a["runs"] == []
    assert a["paper"]["id"] == "t3.gen.P" and a["paper"]["text"] == "4.26" and "Table 3" in a["paper"]["location"]
    assert b["paper"]["part"] == "lo" and b["paper"]["text"] == "15.6"
    with pytest.raises(ValueError, match="prints no interval"):
        book.glue_paper("ml.paper.x", "t3.gen.P", part="hi")


def test_a_value_derived_from_the_papers_numbers_is_glued_as_the_papers(glue_log):
    """Issue 30 (App. D): the patients with two or more studies, 293 − 19, were glued with a file as
    their source; they are the paper's, derived from two printed values, and the book says so."""
    book.glue_paper("ml.d.paper.multi_study_patients", "design.patients - design.single_study_patients")
    (entry,) = glue_log()
    src = entry["paper"]
    assert entry["runs"] == [] and "source" not in entry
    assert src["derived"] == ["design.patients", "design.single_study_patients"] and src["anchor"] == "design.patients"
    assert src["text"] == "293 − 19 = 274" and "number" not in src
    title = sphinx_ext.glue_title("ml.d.paper.multi_study_patients", [], {}, src)
    assert title.startswith("paper value, not from a run") and "derived from design.patients" in title
    with pytest.raises(Exception, match="unknown|not"):
        book.glue_paper("ml.d.paper.x", "design.no_such_id - design.patients")
    with pytest.raises(ValueError, match="derived value has no interval"):
        book.glue_paper("ml.d.paper.x", "design.patients - design.single_study_patients", part="lo")


def test_a_published_value_with_run_records_is_refused(glue_log):
    tagged = PaperNumber(2.59, paper="modalens", id="f.llava.P")
    with pytest.raises(ProvenanceError, match="paper's value modalens:f.llava.P"):
        book.glue("mlf.paper.llava_P", tagged, runs=[_Run()])
    with pytest.raises(ProvenanceError, match="equals the published value"):  # the number itself, untagged
        book.glue("mlf.paper.llava_P", 2.59, runs=[_Run()])
    with pytest.raises(ProvenanceError, match="equals the published value"):  # a % stored as a fraction
        book.glue("mlf.paper.llava_A", 0.1535, runs=[_Run()])
    book.glue("mlf.paper.verdict.llava_P", "different model/data: shown for scale", runs=[_Run()])  # the run's
    book.glue("mlf.paper.n_compared", 13, runs=[_Run()])
    assert [e["key"] for e in glue_log()] == ["mlf.paper.verdict.llava_P", "mlf.paper.n_compared"]


def test_a_value_with_no_record_is_refused_unless_it_is_the_papers(glue_log):
    with pytest.raises(ProvenanceError, match="no run record"):
        book.glue("ml.alpha", 0.05, runs=[])
    book.glue("ml.paper.cases", PaperNumber(3199, paper="modalens", id="design.cases"), runs=[])
    (entry,) = glue_log()
    assert entry["paper"]["id"] == "design.cases" and entry["runs"] == []


def test_paper_vs_run_values_are_glued_as_the_papers(glue_log):
    side = pvr.paper_vs_run({"t2.all14.diff_pp": 5.0}, paper="modalens", rows=pvr.MODALENS_ROWS[2:3],
                            same_setting=False, setting="x")
    value = side.values["t2.all14.diff_pp"]
    assert isinstance(value, PaperNumber) and value.id == "t2.all14.diff" and math.isclose(value, 12.37)
    assert isinstance(side.values["t2.all14.diff_pp_lo"], PaperNumber)
    book.glue_values("ml.paper", side.values, runs=[_Run()])
    entries = {e["key"]: e for e in glue_log()}
    assert entries["ml.paper.t2.all14.diff_pp"]["paper"]["id"] == "t2.all14.diff"
    assert entries["ml.paper.t2.all14.diff_pp"]["runs"] == []
    assert entries["ml.paper.t2.all14.diff_pp_hi"]["paper"]["text"] == "13.57"
    assert entries["ml.paper.verdict.t2.all14.diff_pp"]["runs"][0]["run_id"] == _Run.run_id
    assert "paper" not in entries["ml.paper.verdict.t2.all14.diff_pp"]
    assert float(value) * 2 == pytest.approx(24.74) and not isinstance(value * 2, PaperNumber)


def test_equals_published_finds_scaled_values():
    assert "modalens:t3.gen.P" in equals_published(0.0426)
    assert equals_published("4.26") == [] and equals_published(float("nan")) == []


def test_titles_and_pages_say_where_a_value_comes_from(tmp_path):
    from shovir_core.papers import paper_source

    title = sphinx_ext.glue_title("ml.x", [], {}, paper_source("modalens", "t3.gen.diff"))
    assert title.startswith("paper value, not from a run") and "arXiv 2609.15635" in title
    assert "Table 3" in title and "16.7" in title and "run " not in title.replace("from a run", "")
    runs = [{"run_id": f"p/n/{i:012d}"} for i in range(12)]
    long = sphinx_ext.glue_title("ml.y", runs, {})
    assert long.count("run p/n/") == sphinx_ext.TITLE_RUNS and "and 9 more records" in long
    index = {"modalens_tables": {"glue": {"ml.y": runs, "ml.z": runs[:1], "ml.paper.w": []},
                                  "sources": {"ml.paper.w": {"paper": {"id": "t3.gen.P"}}}}}
    (page,) = sphinx_ext.write_provenance_pages(index, tmp_path)
    html = page.read_text()
    assert 'id="ml.y"' in html and 'id="ml.z"' not in html and html.count("manifest.json") == 12
    pages = sphinx_ext.write_paper_pages(tmp_path)
    modalens = next(p for p in pages if p.name == "modalens.html").read_text()
    assert 'id="t3.gen.P"' in modalens and len(load_values("modalens")) == modalens.count("<tr id=")


def test_the_executed_notebooks_keep_each_values_source(tmp_path):
    meta = {"shovir": {"glue": {"ml.paper.x": [], "ml.y": [{"run_id": "a/b/c"}]},
                       "glue_sources": {"ml.paper.x": {"paper": {"paper": "modalens", "id": "t3.gen.P"}}}}}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [], "metadata": meta}))
    (tmp_path / "old.ipynb").write_text(json.dumps({"cells": [], "metadata": {"shovir": {"glue": {}}}}))
    sources = sphinx_ext.glue_sources(tmp_path)
    assert sources["nb"]["ml.paper.x"]["paper"]["id"] == "t3.gen.P" and sources["old"] == {}


def test_a_value_read_from_a_shipped_file_names_it(glue_log):
    book.glue("repro.n_items", 42, runs=[], source="shovir_core/resources/reproduction.yaml")
    (entry,) = glue_log()
    assert entry["source"] == "shovir_core/resources/reproduction.yaml" and entry["runs"] == []
    title = sphinx_ext.glue_title("repro.n_items", [], {}, None, entry["source"])
    assert "read from shovir_core/resources/reproduction.yaml" in title
