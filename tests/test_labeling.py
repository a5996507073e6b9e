"""Report labeller: hand-written sentences (negation, uncertainty, No Finding) and the plug-in registry."""
import numpy as np
import pandas as pd
import pytest

from shovir_core.labeling import (LABELLERS, LabellerUnavailable, aggregate_mentions, get_labeller,
                                  label_reports, labeller_availability, no_finding, register_labeller)
from shovir_core.labels import CHEXPERT_CLASSES


def one(text, cls, labeller="rules"):
    return label_reports([text], labeller=labeller).loc[0, cls]


def test_output_shape_and_codes():
    texts = pd.Series(["Mild cardiomegaly.", "Lungs are clear.", ""], index=["a", "b", "c"])
    df = label_reports(texts)
    assert list(df.columns) == list(CHEXPERT_CLASSES)
    assert list(df.index) == ["a", "b", "c"]
    vals = df.to_numpy().ravel()
    assert np.isin(vals[~np.isnan(vals)], [1.0, 0.0, -1.0]).all()
    assert label_reports([]).shape == (0, 14)
    with pytest.raises(TypeError, match="report 1 is float"):
        label_reports(["ok", np.nan])


@pytest.mark.parametrize("text,cls,code", [
    ("Small left pleural effusion.", "Pleural Effusion", 1.0),
    ("No pleural effusion.", "Pleural Effusion", 0.0),
    ("There is no evidence of pneumothorax.", "Pneumothorax", 0.0),
    ("Lungs are clear without focal consolidation.", "Consolidation", 0.0),
    ("No pneumothorax or pleural effusion.", "Pleural Effusion", 0.0),
    ("The heart is not enlarged.", "Cardiomegaly", 0.0),
    ("Heart size is mildly enlarged.", "Cardiomegaly", 1.0),
    ("The previously seen right effusion has resolved.", "Pleural Effusion", 0.0),
    ("Right PICC line has been removed.", "Support Devices", 0.0),
    ("Pneumothorax is not seen.", "Pneumothorax", 0.0),
])
def test_mentions_and_negation(text, cls, code):
    assert one(text, cls) == code


@pytest.mark.parametrize("text,cls", [
    ("Possible left lower lobe pneumonia.", "Pneumonia"),
    ("Pneumonia cannot be excluded.", "Pneumonia"),
    ("Opacity may represent atelectasis.", "Atelectasis"),
    ("Left basilar opacity, atelectasis versus pneumonia.", "Pneumonia"),
    ("Findings are suspicious for pulmonary edema.", "Edema"),
    ("Borderline cardiomegaly.", "Cardiomegaly"),
])
def test_uncertainty(text, cls):
    assert one(text, cls) == -1.0


def test_negation_scope_stops_at_termination():
    df = label_reports(["No pneumothorax, but there is a small left pleural effusion."])
    assert df.loc[0, "Pneumothorax"] == 0.0 and df.loc[0, "Pleural Effusion"] == 1.0
    # the keyword baseline negates the whole sentence: that is the difference the chapter measures
    kw = label_reports(["No pneumothorax, but there is a small left pleural effusion."], labeller="keyword")
    assert kw.loc[0, "Pleural Effusion"] == 0.0


def test_positive_wins_over_negative_mentions():
    assert one("No effusion on the right. Small left pleural effusion.", "Pleural Effusion") == 1.0


def test_exclusions_shadow_mentions():
    assert np.isnan(one("Small pericardial effusion.", "Pleural Effusion"))
    assert np.isnan(one("Calcified granuloma from prior granulomatous infection.", "Pneumonia"))


@pytest.mark.parametrize("text,expected", [
    ("The lungs are clear. Heart size is normal. No pleural effusion or pneumothorax.", 1.0),
    ("Right internal jugular central line tip in the SVC. Lungs are clear.", 1.0),  # devices do not count
    ("Mild cardiomegaly.", np.nan),
    ("Possible right lower lobe pneumonia.", np.nan),  # uncertain pathology also rules it out
])
def test_no_finding_rule(text, expected):
    got = one(text, "No Finding")
    assert (np.isnan(got) and np.isnan(expected)) or got == expected


def test_aggregation_and_no_finding_helpers():
    codes = aggregate_mentions([("Edema", "negative"), ("Edema", "uncertain"), ("Fracture", "negative")])
    assert codes["Edema"] == -1.0 and codes["Fracture"] == 0.0 and np.isnan(codes["Cardiomegaly"])
    assert np.isnan(codes["No Finding"])
    assert no_finding({"Support Devices": 1.0, "Edema": 0.0}) == 1.0
    with pytest.raises(ValueError, match="mention status"):
        aggregate_mentions([("Edema", "maybe")])
    with pytest.raises(ValueError, match="not one of the 13"):
        aggregate_mentions([("No Finding", "positive")])


def test_mentions_table_for_inspection():
    m = get_labeller().mentions("No pneumothorax. Possible small effusion.")
    assert m[["class", "status"]].values.tolist() == [["Pneumothorax", "negative"], ["Pleural Effusion", "uncertain"]]


def test_unknown_labeller_is_named():
    with pytest.raises(KeyError, match="unknown labeller 'nope'"):
        label_reports(["x"], labeller="nope")


def test_chexbert_unavailable_without_weights(monkeypatch):
    monkeypatch.delenv("SHOVIR_CHEXBERT_WEIGHTS", raising=False)
    ok, reason = labeller_availability("chexbert")
    assert not ok and "SHOVIR_CHEXBERT_WEIGHTS" in reason
    with pytest.raises(LabellerUnavailable, match="CheXbert unavailable"):
        label_reports(["No effusion."], labeller="chexbert")


def test_register_custom_labeller():
    class Constant:
        name = "constant"

        def __init__(self, code=1.0):
            self.code = code

        def label(self, texts):
            return [{c: self.code for c in CHEXPERT_CLASSES} for _ in texts]

    register_labeller("constant-test", Constant)
    try:
        assert (label_reports(["a", "b"], labeller="constant-test", code=0.0).to_numpy() == 0).all()
        with pytest.raises(ValueError, match="already registered"):
            register_labeller("constant-test", Constant)
    finally:
        LABELLERS.pop("constant-test")
