"""Labellers against the IU X-ray indexers' MeSH terms (embedded verbatim extract)."""
import numpy as np
import pandas as pd
import pytest

from shovir_core.labeling import label_reports
from shovir_core.data.iu import (load_iu_reports, mesh_reference, parse_report_xml, report_text,
                                     split_ids)
from shovir_core.tables.labeller_scores import micro_f1, score_labels

XML = """<?xml version="1.0" encoding="utf-8"?>
<eCitation><uId id="CXR9999"/><IUXRId id="9999"/>
<MedlineCitation><Article><Abstract>
<AbstractText Label="COMPARISON">None.</AbstractText>
<AbstractText Label="FINDINGS">Mild cardiomegaly. No pleural effusion.</AbstractText>
<AbstractText Label="IMPRESSION"></AbstractText>
</Abstract></Article></MedlineCitation>
<MeSH><major>Cardiomegaly/mild</major><automatic>cardiomegaly</automatic></MeSH>
<parentImage id="CXR9999_IM-1"/></eCitation>"""


def test_parse_report_xml_is_verbatim():
    r = parse_report_xml(XML)
    assert r["id"] == 9999 and r["uid"] == "CXR9999"
    assert r["findings"] == "Mild cardiomegaly. No pleural effusion."
    assert r["impression"] is None and r["indication"] is None
    assert r["mesh_major"] == ["Cardiomegaly/mild"] and r["mesh_automatic"] == ["cardiomegaly"]
    assert r["images"] == ["CXR9999_IM-1"]
    with pytest.raises(ValueError, match="not an IU X-ray report"):
        parse_report_xml("<eCitation/>")


def test_mesh_reference_rules():
    reports = pd.DataFrame({"mesh_major": [["Cardiomegaly/mild"], ["Cardiomegaly/borderline"],
                                           ["Cardiac Shadow/enlarged"], ["No Indexing"],
                                           ["normal"], ["Costophrenic Angle/left/blunted", "Pneumothorax"]]},
                           index=pd.Index([1, 2, 3, 4, 5, 6], name="id"))
    ref = mesh_reference(reports)
    assert 4 not in ref.index  # "No Indexing" reports are dropped
    assert ref.loc[1, "Cardiomegaly"] == 1 and np.isnan(ref.loc[2, "Cardiomegaly"])
    assert ref.loc[3, "Cardiomegaly"] == 1 and (ref.loc[5] == 0).all()
    assert np.isnan(ref.loc[6, "Pleural Effusion"]) and ref.loc[6, "Pneumothorax"] == 1


def test_split_is_deterministic_and_balanced():
    ids = list(range(1, 2001))
    a, b = split_ids(ids), split_ids(list(reversed(ids)))
    assert (a == b.loc[a.index]).all()
    assert 0.45 < (a == "test").mean() < 0.55


@pytest.fixture(scope="module")
def iu():
    rep = load_iu_reports()
    text = report_text(rep)
    rep = rep[text.str.len() > 0]
    ref = mesh_reference(rep)
    return text.loc[ref.index], ref, split_ids(ref.index)


def test_embedded_extract_matches_readme(iu):
    text, ref, split = iu
    rep = load_iu_reports()
    assert len(rep) == 1979 and rep.index.is_unique
    assert len(ref) > 1800 and set(split) == {"dev", "test"}
    assert ref.sum().min() >= 5  # every evaluated class has positives


def test_labeller_beats_keyword_baseline_on_held_out_reports(iu):
    text, ref, split = iu
    ids = split.index[split == "test"]
    scores = {}
    for lab in ("rules", "keyword"):
        pred = label_reports(text.loc[ids], labeller=lab)
        scores[lab] = micro_f1(score_labels(pred, ref.loc[ids]))
    assert scores["rules"] >= 0.88
    assert scores["rules"] > scores["keyword"] + 0.05
    assert 0.7 < scores["keyword"] < 0.9


def test_score_labels_counts():
    ref = pd.DataFrame({"Edema": [1, 0, np.nan, 1]}, index=[1, 2, 3, 4])
    pred = pd.DataFrame({"Edema": [1, 1, 1, -1]}, index=[1, 2, 3, 4])
    t = score_labels(pred, ref)
    assert (t.loc["Edema", ["tp", "fp", "fn", "n"]] == [1, 1, 1, 3]).all()
    t_pos = score_labels(pred, ref, uncertain="positive")
    assert t_pos.loc["Edema", "tp"] == 2
    with pytest.raises(ValueError, match="no labeller output"):
        score_labels(pred.drop(index=4), ref)
