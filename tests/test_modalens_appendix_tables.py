"""App. G, the modality ablation and App. B on records of the synthetic MIMIC-CXR-JPG fixture and on
synthetic frames with known answers; the modalens-distance protocol; the chapters' params files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.metrics import arms as ma
from shovir_core.protocols import resolve, run
from shovir_core.tables import modalens as mt
from shovir_core.tables import modalens_ablation as ab
from shovir_core.tables import modalens_appb as mb
from shovir_core.tables import modalens_appg as g
from shovir_core.tables.result import TableResult

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
BASE = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32}
CELL_SPECS = {"full": {}, "report+q": {"image": False}, "image+q": {"report": "absent"},
              "q": {"report": "absent", "image": False}}


def _cells(model: str) -> dict[str, pd.DataFrame]:
    return {c: run("modalens", f"t.{model.replace('@', '-')}.{c.replace('+', '')}", {**BASE, "model": model, **s}, progress=False).trials
            for c, s in CELL_SPECS.items()}


@pytest.fixture
def anchored(runs_root):
    return _cells("ref-anchored@0.5")


# --------------------------------------------------------------------------- App. G
def test_policy_rows_reproduce_the_counts_identity(anchored):
    P, A = anchored["full"], anchored["image+q"]
    t = g.policy_table(P, A, n_draws=50, seed=0)
    assert isinstance(t, TableResult) and set(t.metrics) <= set(t.frame.columns)
    f = t.frame
    assert (f["n_changed"] + f["n_unchanged"] == f["n_retained"]).all()
    assert (f["n_retained"] + f["n_excluded"] == len(P)).all()
    for policy in ("u-negative", "u-positive", "u-excluded", "u-negative_b-excluded"):
        lc = P[f"label_changed__{policy}"]
        key = policy.replace("-", "_")
        assert t.values[f"policy.{key}.present.n_changed"] == int((lc == 1).sum())
        assert t.values[f"policy.{key}.present.n_retained"] == int(lc.notna().sum())
    assert t.values["policy.u_negative.present.n_excluded"] == 0
    # the fixture has uncertain labels, so excluding them drops trials
    assert t.values["policy.u_excluded.present.n_retained"] < len(P)
    assert t.display().columns.is_unique, "labelled metric columns stay distinguishable"


def test_transitions_and_composite(anchored):
    P, A = anchored["full"], anchored["image+q"]
    t = g.transitions_table(P, A, n_draws=50, seed=0).values
    for arm in ("present", "absent"):
        assert t[f"t16.{arm}.unchanged_identity"] and t[f"t16.{arm}.changed_identity"]
        assert t[f"t16.{arm}.flip_cells_sum"] == t[f"t16.{arm}.flips"]
        assert t[f"t16.{arm}.n_changed"] + t[f"t16.{arm}.n_unchanged"] == len(P)
    c = g.composite_excluded(P, A, n_draws=50, seed=0).values
    assert c["t15.f13.n_trials"] == 13 * 6 and c["t15.composite.n_trials"] == 6
    assert c["t15.f13.n_label_changed"] + c["t15.composite.n_label_changed"] == c["t15.all14.n_label_changed"]
    ref = ma.compare_arms(A, P, n_draws=50, seed=0)
    assert c["t15.all14.diff_pp"] == pytest.approx(100 * ref["diff"])


def test_weightings_by_hand(anchored):
    P, A = anchored["full"], anchored["image+q"]
    w = g.weighting_table(P, A, n_draws=50, seed=0).values
    p, a = ma.pair_arms(P, A)
    fp = (p["readout_c"] != p["readout_d"]).astype(float)
    fa = (a["readout_c"] != a["readout_d"]).astype(float)
    per_patient = (fa - fp).groupby(p["patient_id"]).mean()
    assert w["weight.patients.diff_pp"] == pytest.approx(100 * per_patient.mean())
    assert w["weight.studies.diff_pp"] == pytest.approx(w["weight.trials.diff_pp"]), "14 trials per study"
    assert w["weight.no_cross_patient.n_trials"] == int((p["pair_type"] == "same-patient").sum())
    view = (p["view_c"] == p["view_d"]).to_numpy()
    assert w["weight.view_matched.n_trials"] == int(view.sum())


def test_margins_and_part_e(anchored):
    P, A = anchored["full"], anchored["image+q"]
    gate = g.anchoring_gate_check(P, A, w=0.5)
    assert gate["holds"] and gate["n_report_branch"] > 0 and gate["n_image_branch"] > 0, gate
    assert not g.anchoring_gate_check(P, A, w=0.9)["holds"], "the check can fail"
    values = {}
    for fn in (g.policy_table, g.composite_excluded, g.transitions_table, g.aligned_by_finding):
        values.update(fn(P, A, n_draws=50, seed=0).values)
    checks = g.part_e(values)
    assert checks.values["part_e.run_holds"] and checks.values["part_e.n"] == len(checks.frame)
    assert (checks.frame["paper status"] == "passed").all()
    broken = dict(values, **{"policy.u_negative.present.n_unchanged": values["policy.u_negative.present.n_unchanged"] + 1})
    assert not g.part_e(broken).values["part_e.run_holds"]


# --------------------------------------------------------------------------- ablation
def test_ablation_of_an_image_blind_model_is_exactly_zero(runs_root):
    cells = _cells("ref-report-reader")
    v = ab.validation_row(cells, n_draws=50, seed=0)
    for k in ("pooled.image_without", "pooled.image_with", "pooled.interaction", "macro.interaction"):
        assert v[k] == 0.0
    assert v["max_flip_rate"] == 0.0 and v["chance_equals_floor"] and v["kappa_one_where_varying"]
    with pytest.raises(ValueError, match="image-absent"):
        ab.modality_ablation({**cells, "report+q": cells["full"]}, n_draws=10, seed=0)
    with pytest.raises(ValueError, match="report absent"):
        ab.modality_ablation({**cells, "image+q": cells["full"]}, n_draws=10, seed=0)


def test_ablation_values_by_hand(anchored):
    from shovir_core.metrics import balanced_accuracy, interaction_from_cells

    t = ab.modality_ablation(anchored, n_draws=100, seed=0)
    assert t.values["t20.point_matches_metrics"]
    ba = {}
    for c, tr in anchored.items():
        yc = (tr.sort_values("trial_id")["readout_c"] == "yes").astype(float)
        ba[c] = balanced_accuracy(yc, tr.sort_values("trial_id")["target_c"])
    assert t.values["t20.pooled.full"] == pytest.approx(ba["full"])
    assert t.values["t20.pooled.interaction"] == pytest.approx(interaction_from_cells(ba)["interaction"])
    o = ab.one_question_ablation(anchored, n_draws=100, seed=0).values
    one = mt.design_subset(anchored["full"], "one_q")
    assert o["t23.full"] == pytest.approx(((one["readout_c"] == "yes") == (one["target_c"] == 1)).mean())
    assert o["t23.image_adds"] == pytest.approx(o["t23.full"] - o["t23.report_q"])
    pf = ab.per_finding_table(anchored).frame
    assert np.allclose(pf["agreement_P"] + pf["fr_P"], 1.0)
    assert pf.loc[pf["chance_P"] >= 1 - 1e-12, "kappa_P"].isna().all()
    assert ab.same_answers(anchored["report+q"], anchored["report+q"])


def _synthetic_cells(n_patients: int = 30) -> dict[str, pd.DataFrame]:
    """Four cells of an always-no responder: Cardiomegaly has both target classes, Fracture no positive."""
    rows = []
    for p in range(n_patients):
        for f, t in (("Cardiomegaly", p % 2), ("Fracture", 0)):
            rows.append({"trial_id": f"{p}-{f}", "patient_id": f"p{p}", "case_id": f"c{p}", "finding": f,
                         "target_c": float(t), "target_d": float(t), "readout_c": "no", "readout_d": "no"})
    base = pd.DataFrame(rows)
    return {"full": base.assign(report_condition="present", image_included=True),
            "report+q": base.assign(report_condition="present", image_included=False),
            "image+q": base.assign(report_condition="absent", image_included=True),
            "q": base.assign(report_condition="absent", image_included=False)}


def test_macro_ba_leaves_out_findings_without_positives(monkeypatch):
    """An always-no responder has balanced accuracy 0.5 wherever it is defined; a finding with no
    positives has none (NaN), so the macro average is 0.5, not (0.5 + 1) / 2, in the point estimate
    and in every bootstrap draw (the interval is then [0.5, 0.5])."""
    from shovir_core.metrics import balanced_accuracy, modality_interaction

    assert np.isnan(balanced_accuracy([0, 0, 0], [0, 0, 0], both_classes=True))
    assert balanced_accuracy([0, 0, 0], [0, 0, 0]) == 1.0, "the scikit-learn convention stays the default"
    cells = _synthetic_cells()
    monkeypatch.setattr(ab, "design_subset", lambda t, design: t)
    t = ab.modality_ablation(cells, n_draws=50, seed=0, design="all14")
    v = t.values
    for c in ("full", "report_q", "image_q", "q"):
        assert v[f"t20.macro.{c}"] == pytest.approx(0.5)
        assert v[f"t20.macro.{c}_lo"] == pytest.approx(0.5) and v[f"t20.macro.{c}_hi"] == pytest.approx(0.5)
    assert v["t20.n_macro_findings"] == 1 and v["t20.ba_undefined"] == "Fracture"
    long = pd.concat([pd.DataFrame({"cell": c, "finding": x["finding"], "target": x["target_c"],
                                    "pred": (x["readout_c"] == "yes").astype(float)}) for c, x in cells.items()])
    assert modality_interaction(long, average="macro")["ba_q"] == pytest.approx(0.5)
    pf = ab.per_finding_table(cells).frame.set_index("finding")
    assert pf.loc["Fracture", ["ba_full", "ba_report_q", "ba_image_q", "ba_q"]].isna().all()
    assert pf.loc["Cardiomegaly", "ba_q"] == pytest.approx(0.5)


# --------------------------------------------------------------------------- modalens-distance and App. B
def test_distance_record_joins_the_modalens_cohort(anchored, runs_root):
    d = run("modalens-distance", "t.dist", {**BASE, "model": "ref-anchored@0.5", "batch_cases": 4}, progress=False)
    t = d.trials
    assert set(t["case_id"]) == set(anchored["full"]["case_id"]) and len(t) == 6
    assert t["embedding_dim"].eq(64).all() and all(len(v) == 64 for v in t["embedding_c"])
    same = t["pair_type"] == "same-patient"
    assert t.loc[same, "gap"].notna().all() and t.loc[~same, "gap"].isna().all()
    assert (t["gap_unit"] == "days").all()
    again = run("modalens-distance", "t.dist", {**BASE, "model": "ref-anchored@0.5"}, progress=False)
    assert again.path == d.path, "batch size is execution-only"
    dist = mb.pair_distances(t)
    assert dist["distance"].between(0, 2).all() and dist.attrs["n_images"] <= 12
    s = mb.ssim_summary(anchored["full"], threshold=0.9).values
    assert s["ssim.n_pairs"] == 6 and s["ssim.n_above"] == 0
    one = {"present": mt.design_subset(anchored["full"], "one_q"), "absent": mt.design_subset(anchored["image+q"], "one_q")}
    rows = mb.regression_rows(one, dist)
    assert len(rows) == 12 and np.isclose(rows.drop_duplicates("case_id")["z_distance"].std(ddof=0), 1.0)
    byq = mb.fr_by_quartile(rows, n_draws=50, seed=0).values
    assert sum(byq[f"byq.absent.flips_q{k}"] for k in (1, 2, 3, 4)) == rows.loc[rows.report_present == 0, "flip"].sum()
    with pytest.raises(ValueError, match="lack a distance"):
        mb.regression_rows(one, dist.iloc[:3])


def _planted_rows(n=1200, k=240, seed=0, shuffle=False):
    from shovir_core.models.reference import planted_flip_probability

    rng = np.random.default_rng(seed)
    codes_c, codes_d = rng.standard_normal((n, 2)), rng.standard_normal((n, 2))
    p = planted_flip_probability(codes_c, codes_d)
    flip = (rng.random(n) < p).astype(float)
    if shuffle:
        flip = rng.permutation(flip)
    cases = [f"c{i}" for i in range(n)]
    dist_trials = pd.DataFrame({"case_id": cases, "patient_id": rng.integers(0, k, n).astype(str),
                                "image_id": [f"i{i}" for i in range(n)], "sub_image_id": [f"j{i}" for i in range(n)],
                                "embedding_c": list(codes_c), "embedding_d": list(codes_d)})
    arms = {}
    for arm in ("present", "absent"):
        lab = (np.arange(n) % 3 == 0).astype(float)
        arms[arm] = pd.DataFrame({"trial_id": cases, "case_id": cases, "patient_id": dist_trials["patient_id"],
                                  "finding": "Edema", "readout_c": "yes",
                                  "readout_d": np.where(flip == 1, "no", "yes"), "label_changed": lab})
    return mb.regression_rows(arms, mb.pair_distances(dist_trials)), dist_trials


def test_regression_recovers_the_planted_odds_ratio_and_can_fail():
    rows, dist_trials = _planted_rows()
    reg = mb.flip_regression(rows, n_draws=200, seed=0)
    assert reg.values["reg.coef_agrees"] and reg.values["reg.n_rows"] == 2400
    chk = mb.planted_check(rows, dist_trials, reg).values
    assert chk["planted.z_distance.within_ci"] and chk["planted.z_distance.odds_ratio"] > 1.5
    assert abs(np.log(reg.values["reg.report_present.odds_ratio"])) < 1e-6
    rows_s, dist_s = _planted_rows(shuffle=True)   # flips no longer follow the codes
    reg_s = mb.flip_regression(rows_s, n_draws=50, seed=0)
    assert not mb.planted_check(rows_s, dist_s, reg_s).values["planted.z_distance.within_ci"]


def test_a_separated_regression_is_shown_as_not_estimable():
    """One flip in 64 rows (the 1 % rehearsal's stand-in): the full-data fit separates; the table says so
    with NaN estimates instead of failing after the records are made."""
    rows, _ = _planted_rows(n=200, k=40)
    rows = rows.head(64).copy()
    rows["flip"] = 0
    rows.loc[rows.index[(rows["label_changed"] == 1).to_numpy()][0], "flip"] = 1
    reg = mb.flip_regression(rows, n_draws=20, seed=0)
    assert reg.values["reg.converged"] is False and reg.values["reg.n_flips"] == 1
    assert np.isnan(reg.values["reg.z_distance.odds_ratio"]) and "not estimable" in reg.caption
    assert reg.display().columns.is_unique
    rows["flip"] = 0
    with pytest.raises(ValueError, match="same flip value"):
        mb.flip_regression(rows, n_draws=20, seed=0)


# --------------------------------------------------------------------------- params
@pytest.mark.parametrize("notebook", ["modalens_appg", "modalens_ablation", "modalens_appb"])
@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_chapter_params_resolve(notebook, profile, monkeypatch):
    """Every record these chapters name resolves (mimic: on the fixture via $SHOVIR_MIMIC_JPG)."""
    from shovir_core.params import load_params

    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    params = load_params(notebook, profile)
    for key, r in params["runs"].items():
        spec = resolve(r["protocol"], r["spec"])
        assert spec["dataset"] == r["spec"]["dataset"], "the unexpanded dataset string is hashed"
        if profile == "mimic":
            assert spec["ssim_size"] == 896
    assert {"n_draws", "bootstrap_seed", "reproduces_paper"} <= set(params["parameters"])


def test_every_table_displays_distinct_headers(anchored):
    P, A = anchored["full"], anchored["image+q"]
    tables = [fn(P, A, n_draws=20, seed=0) for fn in (g.weighting_table, g.policy_table, g.composite_excluded,
                                                      g.transitions_table, g.aligned_by_finding)]
    tables.append(g.second_model_t15(P, A, model="second", n_draws=20, seed=0))
    assert set(tables[-1].frame["model"]) == {"second"} and "t15.second.diff_pp" in tables[-1].values
    tables += [ab.modality_ablation(anchored, n_draws=20, seed=0), ab.one_question_ablation(anchored, n_draws=20, seed=0),
               ab.per_finding_table(anchored)]
    rows, dist_trials = _planted_rows(n=200, k=40)
    reg = mb.flip_regression(rows, n_draws=20, seed=0)
    tables += [mb.fr_by_quartile(rows, n_draws=20, seed=0), reg, mb.planted_check(rows, dist_trials, reg),
               mb.ssim_summary(P, threshold=0.9), mb.distance_summary(mb.pair_distances(dist_trials))]
    for t in tables:
        assert isinstance(t, TableResult)
        shown = t.display()
        assert shown.columns.is_unique, (t.caption, list(shown.columns))
        assert set(t.metrics) <= set(t.frame.columns), t.caption


def test_labels_name_metric_columns():
    t = TableResult(pd.DataFrame({"arm": ["x"], "fr_p": [0.047], "fr_a": [0.1707]}),
                    metrics={"fr_p": "flip_rate", "fr_a": "flip_rate"}, labels={"fr_p": "FR, P", "arm": "arm"})
    shown = t.display()
    assert list(shown.columns) == ["arm", "FR, P", "Flip rate"] and shown.iloc[0].tolist() == ["x", "4.70%", "17.07%"]


def test_docstring_examples():
    import doctest

    import shovir_core.metrics.agreement as agreement
    import shovir_core.metrics.distance as distance
    import shovir_core.models.reference as reference
    import shovir_core.stats.logistic as logistic

    for module in (agreement, distance, logistic, reference):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_gate_range_counts_pairs_not_trials():
    """The anchored gate is one draw per (report, question) pair: trials sharing a pair move together,
    so the range over gate draws is wider than a trial-level binomial range and contains (1 − w) × FR_A."""
    n = 400
    present = pd.DataFrame({"report_sha256": [f"r{i % 4}" for i in range(n)], "finding": "Edema"})
    flips = np.zeros(n, dtype=bool)
    flips[:100] = True                       # 25 flips in each of the 4 pairs
    lo, hi = mt._gate_range(present, flips, w=0.5, n_draws=2000, seed=0)
    assert lo <= 0.5 * flips.mean() <= hi
    assert lo == 0.0 and hi == pytest.approx(0.25), "4 pairs of 25 flips: 25 × Binomial(4, 0.5) flips"
    lo1, hi1 = mt._gate_range(present.assign(report_sha256=[f"r{i}" for i in range(n)]), flips, w=0.5,
                              n_draws=2000, seed=0)
    assert hi1 - lo1 < hi - lo, "one pair per trial: a narrower (binomial) range"


def _absent_trials(n: int = 80, seed: int = 0) -> pd.DataFrame:
    """Report-absent label-changed trials of two findings: Edema's margin always moves towards the
    substitute's label, Atelectasis's moves either way at random (an image reader at chance)."""
    rng = np.random.default_rng(seed)
    rows = []
    for finding in ("Edema", "Atelectasis", "composite"):
        for i in range(n):
            t_c, t_d = float(i % 2), float(1 - i % 2)
            y = 1.0 if t_d == 1 else -1.0
            step = y if finding == "Edema" else rng.choice([-1.0, 1.0])
            rows.append({"trial_id": f"{finding}:{i}", "patient_id": f"p{i % 20}", "finding": finding,
                         "target_c": t_c, "target_d": t_d, "label_changed": 1.0, "margin_c": 0.0,
                         "margin_d": step, "pair_type": "same-patient" if i % 4 else "cross-patient"})
    return pd.DataFrame(rows)


def test_image_branch_by_finding_tells_an_image_reader_from_chance():
    v = g.image_branch_by_finding(_absent_trials(), n_draws=400, seed=0).values
    assert v["t17.absent_evidence.n_findings"] == 2, "the composite is left out of the counts"
    assert v["t17.absent_evidence.edema.share"] == 1.0 and v["t17.absent_evidence.edema.auroc"] > 0.8
    assert v["t17.absent_evidence.edema.share_lo"] > 0.5, "a reader that follows the image is beyond chance"
    at = v["t17.absent_evidence.atelectasis.share"]
    assert v["t17.absent_evidence.atelectasis.share_lo"] <= 0.5 <= v["t17.absent_evidence.atelectasis.share_hi"], at
    assert v["t17.absent_evidence.n_at_chance"] == 1
    assert v["t17.absent_evidence.share_same_patient"] == pytest.approx(0.75)
    # a finding whose margin moves away from the substitute's label beyond chance is not counted at chance
    away = _absent_trials()
    away.loc[away["finding"] == "Edema", "margin_d"] *= -1
    w = g.image_branch_by_finding(away, n_draws=400, seed=0).values
    assert "Edema" in w["t17.absent_evidence.not_aligned"]
    assert w["t17.absent_evidence.n_not_aligned_at_chance"] < w["t17.absent_evidence.n_not_aligned"]
