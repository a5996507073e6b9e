"""Paper vs this run: one unit per row, and a verdict that says what the comparison means."""
import numpy as np
import pytest

from shovir_core.papers import published_value
from shovir_core.tables import paper_vs_run as pvr


def _rows(*keys):
    return tuple(r for r in pvr.MODALENS_ROWS if r.key in keys)


def test_units_meet_the_papers_percent_and_points():
    # Table 4 changed − unchanged: the paper prints −0.50 pp; the run stores a fraction
    rows = _rows("t4.fr_changed_minus_unchanged", "t2.all14.diff_pp", "t2.all14.present.flip_rate")
    t = pvr.paper_vs_run({"t4.fr_changed_minus_unchanged": -0.004, "t2.all14.diff_pp": 12.0,
                          "t2.all14.present.flip_rate": 0.047}, paper="modalens", rows=rows,
                         same_setting=True, setting="MedGemma-27B on MIMIC-CXR")
    f = t.frame.reset_index().set_index("quantity")
    diff = f.loc["Flip rate difference, changed − unchanged"]
    assert diff["paper"] == pytest.approx(-0.0050) and diff["run"] == pytest.approx(-0.004)
    assert diff["paper_lo"] == pytest.approx(-0.0103) and diff["verdict"] == pvr.INSIDE
    pp = f.loc["Paired difference absent − present (all-14, image first)"]
    assert pp["run"] == pytest.approx(0.12) and pp["verdict"] == pvr.INSIDE
    assert f.loc["Flip rate, report present (all-14, image first)", "verdict"] == pvr.MATCHES
    # glue values come back in the run's storage unit (points for _pp keys)
    assert t.values["t2.all14.diff_pp"] == pytest.approx(published_value("modalens", id="t2.all14.diff"))
    assert t.values["t4.fr_changed_minus_unchanged"] == pytest.approx(-0.0050)
    assert t.values["n_inside"] == 2


def test_outside_and_differs_are_reported_in_the_papers_setting():
    rows = _rows("t2.all14.diff_pp", "t2.all14.present.flip_rate")
    t = pvr.paper_vs_run({"t2.all14.diff_pp": 2.0, "t2.all14.present.flip_rate": 0.06}, paper="modalens",
                         rows=rows, same_setting=True, setting="s")
    assert sorted(t.frame["verdict"]) == sorted([pvr.OUTSIDE, pvr.DIFFERS])


def test_a_rehearsal_judges_nothing_even_in_the_papers_setting(monkeypatch):
    rows = _rows("t2.all14.diff_pp", "t2.all14.present.flip_rate")
    values = {"t2.all14.diff_pp": 2.0, "t2.all14.present.flip_rate": 0.06}
    judged = pvr.paper_vs_run(values, paper="modalens", rows=rows, same_setting=True, setting="s")
    assert pvr.not_held(judged, ["t2.all14.diff_pp"]) == ["t2.all14.diff_pp"]
    monkeypatch.setenv(pvr.REHEARSAL_ENV, "abc")
    t = pvr.paper_vs_run(values, paper="modalens", rows=rows, same_setting=True, setting="s")
    assert set(t.frame["verdict"]) == {pvr.REHEARSAL} and "rehearsal" in t.caption
    assert pvr.not_held(t, ["t2.all14.diff_pp"]) == []
    # a value the stand-ins leave undefined reads "not run" and holds in a rehearsal, not in the paper's setting
    undefined = {"t2.all14.diff_pp": float("nan"), "t2.all14.present.flip_rate": 0.06}
    t = pvr.paper_vs_run(undefined, paper="modalens", rows=rows, same_setting=True, setting="s")
    assert t.values["verdict.t2.all14.diff_pp"] == pvr.NOT_RUN and pvr.not_held(t, ["t2.all14.diff_pp"]) == []
    monkeypatch.delenv(pvr.REHEARSAL_ENV)
    t = pvr.paper_vs_run(undefined, paper="modalens", rows=rows, same_setting=True, setting="s")
    assert pvr.not_held(t, ["t2.all14.diff_pp"]) == ["t2.all14.diff_pp"]


def test_other_models_and_data_are_shown_for_scale_only():
    t = pvr.paper_vs_run({r.key: 0.1 for r in pvr.MODALENS_ROWS}, paper="modalens", rows=pvr.MODALENS_ROWS,
                         same_setting=False, setting="MedGemma-27B on MIMIC-CXR")
    assert set(t.frame["verdict"]) == {pvr.DIFFERENT_SETTING}
    assert "shown for scale" in t.caption
    assert t.frame.index.get_level_values("section")[0] == "Table 2"
    assert list(dict.fromkeys(t.frame.index.get_level_values("section")))[-1] == "§4.1"
    missing = pvr.paper_vs_run({}, paper="modalens", rows=_rows("t2.all14.ratio"), same_setting=True, setting="s")
    assert missing.frame["verdict"].tolist() == [pvr.NOT_RUN] and np.isnan(missing.frame["run"].iloc[0])


def test_labels_are_readable_and_every_row_resolves():
    t = pvr.paper_vs_run({}, paper="modalens", rows=pvr.MODALENS_ROWS, same_setting=False, setting="s")
    assert len(t.frame) == len(pvr.MODALENS_ROWS)
    for label in t.frame.index.get_level_values("quantity"):
        assert "." not in label.replace("0.5", "") and "_" not in label, label
    with pytest.raises(ValueError, match="run_unit"):
        pvr.Comparison("k", "t2.all14.P", "x", "flip_rate", "percent")
    with pytest.raises(KeyError, match="no published value"):
        pvr.paper_vs_run({}, paper="modalens", rows=(pvr.Comparison("k", "nope", "x", "flip_rate"),),
                         same_setting=False, setting="s")


def test_shovir_rows_follow_the_published_table1_and_figures():
    rows = pvr.shovir_table1_rows("MIMIC", {"maira-2": "MAIRA-2"})
    assert rows and all(r.key.startswith("t1.maira_2.") for r in rows)
    assert {r.metric for r in rows} >= {"f1_14_micro", "delta_fn"}
    t = pvr.paper_vs_run({rows[0].key: 0.3}, paper="shovir", rows=rows, same_setting=True, setting="MIMIC")
    assert t.frame["verdict"].iloc[0] in (pvr.MATCHES, pvr.DIFFERS)
    figs = pvr.shovir_figure_rows("MIMIC", {"maira-2": "MAIRA-2"})
    assert any(r.metric == "flip_rate_c" for r in figs) and any(r.metric == "mu_f1" for r in figs)


def test_shovir_figure3b_rows_meet_the_per_class_means():
    """Figure 3(b)'s published per-class means (MIMIC: Atelectasis OCO 0.304 ...) become rows keyed as
    ``per_class_across_models`` glues them; a run value at the printed value matches, one 0.01 off differs."""
    rows = [r for r in pvr.shovir_figure_rows("MIMIC", {}) if r.key.startswith("fig3b.")]
    assert {r.key for r in rows} >= {"fig3b.Atelectasis.OCO", "fig3b.Atelectasis.RO", "fig3b.Cardiomegaly.DOCO"}
    assert all(r.metric == "f1_class" and r.run_unit == "value" for r in rows)
    run = {r.key: published_value("shovir", id=r.paper_id) for r in rows}
    run["fig3b.Atelectasis.OCO"] += 0.01
    t = pvr.paper_vs_run(run, paper="shovir", rows=rows, same_setting=True, setting="MIMIC")
    assert pvr.not_held(t, list(run)) == ["fig3b.Atelectasis.OCO"]
    assert not [r for r in pvr.shovir_figure_rows("MIMIC", {}, fig3b_key=None) if r.key.startswith("fig3b.")]
    assert all(r.key.startswith("fig3b.") for r in pvr.shovir_figure_rows("PadChest", {}))


def test_chapter_keys_become_rows_in_the_runs_storage_units():
    """``beside`` takes a chapter's run key -> published id map: points for ``_pp`` keys, fractions
    for rates, the metric's own unit for counts; a profile in the paper's setting is judged."""
    keys = {"framing.lowercase.warning.vs_plain.diff_pp": "d.warn.diff", "framing.lowercase.warning.flip_rate":
            "d.warn.fr", "chron.n_differs": "d.changed_pairs", "pf.edema.fr": "t2.all14.P"}
    rows = {r.key: r for r in pvr.rows_from_keys({k: v for k, v in keys.items() if k != "pf.edema.fr"})}
    assert rows["framing.lowercase.warning.vs_plain.diff_pp"].run_unit == "pp"
    assert rows["framing.lowercase.warning.vs_plain.diff_pp"].metric == "paired_diff"
    assert rows["framing.lowercase.warning.flip_rate"].metric == "flip_rate"
    assert rows["chron.n_differs"].run_unit == "value" and rows["chron.n_differs"].metric == "count"
    pub = {k: published_value("modalens", id=v) for k, v in keys.items()}
    run = {"framing.lowercase.warning.vs_plain.diff_pp": pub["framing.lowercase.warning.vs_plain.diff_pp"],
           "framing.lowercase.warning.flip_rate": pub["framing.lowercase.warning.flip_rate"] / 100 + 0.5,
           "chron.n_differs": pub["chron.n_differs"]}
    t = pvr.beside(run, keys, same_setting=True, optional=("pf.",))
    assert t.values["n_missing"] == 1 and t.values["n_compared"] == 3
    assert pvr.not_held(t, list(run)) == ["framing.lowercase.warning.flip_rate"]
    assert t.values["framing.lowercase.warning.vs_plain.diff_pp"] == pytest.approx(pub["framing.lowercase.warning.vs_plain.diff_pp"])
    shown = pvr.beside(run, keys, same_setting=True, optional=("pf.",), show_missing=True)
    assert shown.values["verdict.pf.edema.fr"] == pvr.NOT_RUN and shown.values["n_compared"] == 4
    with pytest.raises(KeyError, match="no values"):
        pvr.beside(run, keys, same_setting=True)


def test_layer_values_compare():
    rows = pvr.rows_from_keys({"settle.paired_mean_diff": "n1.settle_diff", "lens.depth": "n1.depth"})
    t = pvr.paper_vs_run({"settle.paired_mean_diff": 1.5, "lens.depth": 46}, paper="modalens", rows=rows,
                         same_setting=True, setting="s")
    assert t.values["verdict.settle.paired_mean_diff"] == pvr.INSIDE and len(t.frame) == 2
