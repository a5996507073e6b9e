import numpy as np
import pandas as pd
import pytest

from shovir_core import labels


def test_chexbert_order_and_subsets():
    assert len(labels.CHEXPERT_CLASSES) == 14
    assert labels.CHEXPERT_CLASSES[0] == "Enlarged Cardiomediastinum"
    assert labels.CHEXPERT_CLASSES[-1] == "No Finding"
    assert labels.CHEXPERT_CLASSES.index("Pleural Effusion") == 9
    assert set(labels.CHEXPERT_5) <= set(labels.CHEXPERT_CLASSES)
    assert len(labels.FINDINGS_13) == 13 and "No Finding" not in labels.FINDINGS_13


@pytest.mark.parametrize("policy, expected", [
    ("u-negative", [1, 0, 0, 0]),
    ("u-positive", [1, 0, 1, 0]),
    ("u-excluded", [1, 0, np.nan, 0]),
    ("u-negative_b-excluded", [1, 0, 0, np.nan]),
    ("u-excluded_b-excluded", [1, 0, np.nan, np.nan]),
])
def test_policies(policy, expected):
    out = labels.apply_policy(np.array([1, 0, -1, np.nan]), policy)
    np.testing.assert_array_equal(out, np.array(expected, dtype=float))


def test_policy_keeps_pandas_shape():
    df = pd.DataFrame({"Edema": [1, -1, np.nan]}, index=["a", "b", "c"])
    out = labels.apply_policy(df, labels.LabelPolicy(uncertain="positive", blank="excluded"))
    assert list(out.index) == ["a", "b", "c"]
    assert out["Edema"].tolist()[:2] == [1.0, 1.0] and np.isnan(out["Edema"].iloc[2])


def test_bad_codes_and_policy_names():
    with pytest.raises(ValueError, match="label codes"):
        labels.apply_policy(np.array([2.0]))
    with pytest.raises(ValueError, match="unknown label policy"):
        labels.apply_policy(np.array([1.0]), "nope")


def test_nih_mapping():
    assert labels.nih_to_chexpert("Effusion") == "Pleural Effusion"
    assert labels.nih_to_chexpert("Nodule") == "Lung Lesion"
    assert labels.nih_to_chexpert("Hernia") is None
    with pytest.raises(ValueError, match="unknown NIH finding"):
        labels.nih_to_chexpert("Foo")
    with pytest.raises(ValueError, match="not a CheXpert class"):
        labels.validate_class("Effusion")
