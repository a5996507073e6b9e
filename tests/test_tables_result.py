"""The table contract: display metadata, run ids, reshaping."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.tables import TableResult, frame_of, run_ids_of


class _Run:
    def __init__(self, run_id):
        self.run_id = run_id


def _table(**kw):
    frame = pd.DataFrame({"model": ["a", "a", "b"], "p": [0.0, 1.0, 1.0], "fr": [0.047, np.nan, 0.5],
                          "n_trials": [1234, 5, 6]})
    return TableResult(frame, {"x": 1}, metrics={"fr": "flip_rate", "n_trials": "count"},
                       labels={"n_trials": "trials", "model": "model name"}, **kw)


def test_display_formats_metrics_and_applies_labels():
    shown = _table(index=("model", "p")).display()
    assert list(shown.columns) == ["Flip rate", "trials"]
    assert shown.index.names == ["model name", "p"]
    assert shown["Flip rate"].tolist() == ["4.70%", "–", "50.00%"]
    assert shown["trials"].tolist() == ["1,234", "5", "6"]
    assert _table(na_rep="n/a").display()["Flip rate"].iloc[1] == "n/a"
    assert list(_table().frame.columns) == ["model", "p", "fr", "n_trials"], "the frame stays unformatted"


def test_multiindex_columns_show_the_metric_level_by_name():
    cols = pd.MultiIndex.from_tuples([("Baseline", "f1_14_micro"), ("FullNoise", "f1_14_micro")])
    t = TableResult(pd.DataFrame([[0.5, np.nan]], columns=cols, index=pd.Index(["m"], name="model")),
                    metrics={c: c[1] for c in cols}, labels={"FullNoise": "Full Noise Image"}, na_rep="unavailable")
    shown = t.display()
    assert list(shown.columns) == [("Baseline", "F1-14 (micro)"), ("Full Noise Image", "F1-14 (micro)")]
    assert shown.iloc[0].tolist() == ["0.500", "unavailable"]


def test_run_ids_pivot_and_select():
    t = _table().with_runs({"k": _Run("shovir/x/1"), "j": _Run("cohort/y/2")}).with_runs(_Run("shovir/x/1"))
    assert t.run_ids == ("cohort/y/2", "shovir/x/1")
    assert run_ids_of(t) == t.run_ids and run_ids_of(None) == () and run_ids_of("a/b/c") == ("a/b/c",)
    wide = t.pivot(index="model", columns="p", values="fr")
    assert wide.run_ids == t.run_ids and wide.values == t.values
    assert wide.frame.set_index("model").loc["a", 0.0] == 0.047
    assert wide.display().loc["a", 0.0] == "4.70%"
    sel = _table(index=("model",)).select(["n_trials"])
    assert list(sel.frame.columns) == ["model", "n_trials"] and sel.metrics == {"n_trials": "count"}
    assert frame_of(t) is t.frame and frame_of(t.frame) is t.frame
    with pytest.raises(TypeError):
        frame_of([1])
    with pytest.raises(ValueError, match="no columns"):
        t.select(["nope"])


def test_bad_metadata_is_refused():
    frame = pd.DataFrame({"fr": [0.1]})
    with pytest.raises(ValueError, match="does not define"):
        TableResult(frame, metrics={"fr": "flip_rat"})
    with pytest.raises(ValueError, match="lacks"):
        TableResult(frame, metrics={"gone": "flip_rate"})
    with pytest.raises(ValueError, match="index"):
        TableResult(frame, index=("model",))
    with pytest.raises(TypeError):
        TableResult(frame.to_dict())
    with pytest.raises(TypeError, match="not a run record"):
        run_ids_of([object()])


def test_drop_hides_a_column_but_never_the_row_labels():
    t = _table(index=("model",))
    dropped = t.drop(["fr"])
    assert list(dropped.frame.columns) == ["model", "p", "n_trials"] and dropped.metrics == {"n_trials": "count"}
    assert dropped.values == t.values and dropped.index == ("model",) and "fr" in t.frame.columns
    with pytest.raises(ValueError, match="no columns"):
        t.drop(["nope"])
    with pytest.raises(ValueError, match="index"):
        t.drop(["model"])
