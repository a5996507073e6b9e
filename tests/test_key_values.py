import pytest

from shovir_core.tables.key_values import labelled_values


def test_labelled_values_rows_and_errors():
    t = labelled_values({"n_above": 3, "holds": True, "raw": 1}, {"holds": "gate holds", "n_above": "pairs above"},
                        caption="c")
    assert list(t.frame["quantity"]) == ["gate holds", "pairs above"] and list(t.frame["value"]) == ["yes", 3]
    with pytest.raises(ValueError, match="missing_key"):
        labelled_values({}, {"missing_key": "x"}, caption="c")
