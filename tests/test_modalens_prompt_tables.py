"""Tables of the ModaLens appendices on the prompt and the report, on hand-built trial frames."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.metrics import arms as arms_m
from shovir_core.metrics import prompt_variants as pv
from shovir_core.tables import modalens_appd as appd
from shovir_core.tables import modalens_apph as apph
from shovir_core.tables import modalens_appl as appl
from shovir_core.tables import modalens_appm as appm
from shovir_core.tables import modalens_s41 as s41
from shovir_core.tables import modalens_text_controls as tct
from shovir_core.tables.audit import audit_rows
from shovir_core.tables.result import TableResult


def _arm(flips, *, answers_d=None, yes_c=None, target_c=1.0, target_d=None, finding="Edema", seed=0, **extra):
    """One trial per entry of ``flips`` (patients p0..p4 in turn); readout_c yes unless ``yes_c``."""
    n = len(flips)
    yes_c = np.ones(n, dtype=bool) if yes_c is None else np.asarray(yes_c, dtype=bool)
    yes_d = np.where(np.asarray(flips, dtype=bool), ~yes_c, yes_c)
    rng = np.random.default_rng(seed)
    m_c = np.where(yes_c, 1.0, -1.0) * (1 + rng.random(n))
    m_d = np.where(yes_d == yes_c, m_c, -m_c)  # a flip mirrors the margin, no flip keeps it
    ans = lambda y: np.where(y, "Yes", "No").astype(object)  # noqa: E731
    df = pd.DataFrame({
        "trial_id": [f"c{i}:q" for i in range(n)], "case_id": [f"c{i}" for i in range(n)],
        "patient_id": [f"p{i % 5}" for i in range(n)], "finding": finding, "question_id": finding.lower(),
        "readout_c": np.where(yes_c, "yes", "no"), "readout_d": np.where(yes_d, "yes", "no"),
        "family_readout_c": np.where(yes_c, "yes", "no"), "family_readout_d": np.where(yes_d, "yes", "no"),
        "answer_c": ans(yes_c), "answer_d": ans(yes_d) if answers_d is None else np.asarray(answers_d, dtype=object),
        "margin_c": m_c, "margin_d": m_d, "target_c": target_c,
        "target_d": (1 - np.asarray(flips, dtype=float)) if target_d is None else target_d,
        "compliant_c": True, "compliant_d": True, "pair_type": "same-patient", "substitute_seed": seed,
        "sub_image_id": [f"s{i}-{seed}" for i in range(n)],
    })
    df["label_changed"] = (df["target_c"] != df["target_d"]).astype(float)
    for k, v in extra.items():
        df[k] = v
    return df


FLIPS_P = [0, 0, 1, 0, 0, 0, 0, 0, 0, 1]
FLIPS_A = [1, 1, 1, 0, 1, 0, 1, 0, 1, 1]


# --------------------------------------------------------------------------- metrics
def test_prompt_variant_metrics():
    assert pv.still_apart([0.0, 0.0, 3.0], [0.1, 1.0, 2.9]).tolist() == [0, 1, 0]
    f, v = pv.uncertain_flips(["Yes", "Uncertain"], ["Uncertain", "Uncertain"])
    assert f.tolist() == [1, 0] and v.all()
    assert pv.abstained(["Yes", "Uncertain", None]).tolist() == [0, 1, 0]
    t = pd.DataFrame({"follow_up_c": [1, 3, 2], "follow_up_d": [2, 1, 2], "pair_type": ["same-patient"] * 2 + ["cross-patient"]})
    gap, unit = pv.signed_gap(t)
    assert unit == "follow-up visits" and gap.tolist()[:2] == [1.0, -2.0] and np.isnan(gap.iloc[2])
    assert pv.chronology(gap).tolist() == ["later", "earlier", "undated"]
    assert pv.gap_bins(gap, unit).tolist() == ["1 visit", "2-3 visits", "undated"]
    with pytest.raises(ValueError, match="unit"):
        pv.gap_bins(gap, "weeks")


# --------------------------------------------------------------------------- shared machinery
def test_flip_rate_rows_counts_contrasts_and_interactions():
    arms = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "P2": _arm([0] * 10), "A2": _arm(FLIPS_A)}
    r = arms_m.flip_rate_rows(arms, reference="P", n_draws=300, seed=0, key="k",
                              pairs={"A_minus_P": ("A", "P")}, interactions={"ix": ("P2", "A2", "P", "A")})
    assert isinstance(r, arms_m.FlipRates) and r.frame["arm"].tolist() == ["P", "A", "P2", "A2"]
    v = r.values
    assert v["k.P.flips"] == 2 and v["k.A.flips"] == 7 and v["k.n_trials"] == 10
    assert v["k.A.flip_rate"] == pytest.approx(0.7) and v["k.A_minus_P.diff_pp"] == pytest.approx(50.0)
    assert v["k.A.vs_P.diff_pp"] == pytest.approx(50.0)
    assert v["k.ix.interaction_pp"] == pytest.approx(((0 - 0.7) - (0.2 - 0.7)) * 100)
    assert v["k.ix.interaction_pp_lo"] <= v["k.ix.interaction_pp"] <= v["k.ix.interaction_pp_hi"]
    assert r.metrics["flip_rate"] == "flip_rate" and r.metrics["diff"] == "paired_diff"
    with pytest.raises(ValueError, match="reference"):
        arms_m.flip_rate_rows(arms, reference="X", n_draws=10, seed=0, key="k")


def test_flip_frame_drops_unscoreable_generated_trials():
    a = _arm(FLIPS_P, answers_d=["unscoreable"] + ["Yes"] * 9)
    f = arms_m.flip_frame({"a": a, "b": _arm(FLIPS_A)}, readout="generated")
    assert len(f) == 9 and f.attrs["n_excluded"] == 1


def test_paper_rows_and_audit_rows_fail_loudly():
    from shovir_core.tables import paper_vs_run as pvr

    with pytest.raises(KeyError, match="no published value"):
        pvr.beside({"x": 1.0}, {"x": "no.such.id"}, same_setting=False)
    with pytest.raises(KeyError, match="no values"):
        pvr.beside({}, {"x": "l.P"}, same_setting=False)
    rows = audit_rows(("l.",)).frame
    assert "l.interaction" in rows.index and set(rows["status"]) <= {"passed", "flagged"}
    with pytest.raises(ValueError, match="no ModaLens check"):
        audit_rows(("zz.",))


# --------------------------------------------------------------------------- App D
def test_chronology_accounting():
    t = _arm(FLIPS_P)
    t["code_c"] = 1.0
    t["code_d"] = [np.nan, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    t["follow_up_c"] = 1
    t["follow_up_d"] = [2, 0, 2, 3, 0, 5, 2, 0, 2, 0]
    t.loc[9, "pair_type"] = "cross-patient"
    r = appd.chronology_table(t, n_draws=200, seed=0)
    v = r.values
    assert v["chron.n_same_patient"] == 9 and v["chron.n_cross_patient"] == 1
    assert v["chron.n_no_value"] == 1 and v["chron.n_same_value"] == 3 and v["chron.n_differs"] == 5
    assert v["chron.differs.later"] == 3 and v["chron.differs.earlier"] == 2
    assert v["chron.later.n_pairs"] + v["chron.earlier.n_pairs"] == v["chron.all.n_pairs"] == 5


def test_framing_strata_unit_and_validation():
    t = _arm(FLIPS_A, follow_up_c=1, follow_up_d=[2, 0] * 5)
    r = appd.framing_strata(t, n_draws=200, seed=0)
    v = r.values
    assert v["strata.n_later"] == v["strata.n_earlier"] == 5 and v["strata.n_patients"] == 5
    assert v["strata.lowercase.later"] == pytest.approx(1.0) and v["strata.lowercase.earlier"] == pytest.approx(0.4)
    assert v["strata.lowercase.later_minus_earlier_pp"] == pytest.approx(60.0)
    plain, quarter = _arm(FLIPS_P), _arm(FLIPS_A)
    val = appd.framing_validation(plain=plain, historical=plain, warning=quarter, discounted=quarter, discount=0.5,
                                  n_draws=200, seed=0)
    assert val["warning_equals_discounted"] and val["historical_equals_plain"] and val["planted_inside_interval"]
    bad = appd.framing_validation(plain=plain, historical=quarter, warning=plain, discounted=quarter, discount=0.5,
                                  n_draws=200, seed=0)
    assert not bad["warning_equals_discounted"] and not bad["historical_equals_plain"]


def test_framing_tables():
    td = 1.0 - np.asarray(FLIPS_A, dtype=float)  # the substitutes' labels: the same in every arm
    arms = {"plain": _arm(FLIPS_P, target_d=td), "historical": _arm(FLIPS_P, target_d=td),
            "warning": _arm([0] * 10, target_d=td), "absent": _arm(FLIPS_A, target_d=td)}
    r = appd.framing_table(arms, uninstructed=_arm(FLIPS_P), n_draws=200, seed=0)
    v = r.values
    assert v["framing.lowercase.warning.vs_plain.diff_pp"] == pytest.approx(-20.0)
    assert v["framing.lowercase.absent_minus_historical.diff_pp"] == pytest.approx(50.0)
    assert v["framing.lowercase.historical_vs_uninstructed.diff_pp"] == 0.0
    s = appd.framing_sides(arms, n_draws=200, seed=0).values
    assert s["framing.absent.sub_shown_label_changed"] == 1.0 and s["framing.warning.sub_shown_label_changed"] == 0.0
    with pytest.raises(ValueError, match="missing"):
        appd.framing_table({"plain": arms["plain"]}, n_draws=10, seed=0)


# --------------------------------------------------------------------------- App L, M, H, §4.1
def test_template_interaction_and_accuracy():
    arms = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "P_alt": _arm(FLIPS_P), "A_alt": _arm([0] * 10)}
    v = appl.template_table(arms, n_draws=200, seed=0).values
    assert v["l.template_x_report.interaction_pp"] == pytest.approx((0.2 - 0.0 - (0.2 - 0.7)) * 100)
    a = appl.template_accuracy({k: t.assign(target_c=[1.0, 0.0] * 5) for k, t in arms.items()}, n_draws=200, seed=0)
    assert a.values["l.P.sensitivity"] == 1.0 and a.values["l.P.specificity"] == 0.0
    assert a.values["l.P.balanced_accuracy"] == pytest.approx(0.5)


def test_abstention_and_order_shifts():
    unc_d = ["Uncertain", "Yes", "No", "Yes", "Yes", "Yes", "Yes", "Yes", "Yes", "Yes"]
    arms = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "P_unc": _arm([0] * 10, answers_d=unc_d), "A_unc": _arm(FLIPS_A)}
    v = appm.abstention_table(arms, n_draws=200, seed=0).values
    assert v["m.unc.P_unc.abstain_c"] == 0.0 and v["m.unc.P_unc.abstain_d"] == pytest.approx(0.1)
    assert v["m.unc.P_unc.substitution_effect_pp"] == pytest.approx(10.0)
    assert v["m.unc.flip.P"] == pytest.approx(0.2) and v["m.unc.forced.A_minus_P_pp"] == pytest.approx(50.0)
    order = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "P_rev": _arm(FLIPS_P), "A_rev": _arm(FLIPS_A, yes_c=[0] + [1] * 9)}
    sh = appm.option_order_shifts(order).values
    assert sh["m.shift.present.lowercase.c.changed"] == 0.0
    assert sh["m.shift.absent.lowercase.c.changed"] == pytest.approx(0.1)
    assert sh["m.shift.absent.lowercase.c.yes_shift"] == pytest.approx(-0.1)
    ot = appm.option_order_table(order, n_draws=100, seed=0).values
    assert ot["m.order.lowercase.order_x_report.interaction_pp"] == 0.0


def test_order_counts_and_per_finding_effects():
    arms = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "P_tf": _arm(FLIPS_A), "A_tf": _arm(FLIPS_A)}
    v = apph.order_counts(arms, n_draws=100, seed=0, key="h").values
    assert v["h.P.flips"] == 2 and v["h.P.still_apart"] == 2, "only the flips move p(yes), each by more than 0.05"
    near = {k: t.assign(margin_d=t["margin_c"] + 0.1) for k, t in arms.items()}
    assert apph.order_counts(near, n_draws=50, seed=0, key="h").values["h.P.still_apart_not_flipped"] == 0
    assert v["h.P.tf_minus_if.diff_pp"] == pytest.approx(50.0)
    a = pd.concat([_arm(FLIPS_A), _arm(FLIPS_P, finding="Fracture").assign(trial_id=lambda d: d["trial_id"] + "f")])
    b = pd.concat([_arm(FLIPS_P), _arm(FLIPS_A, finding="Fracture").assign(trial_id=lambda d: d["trial_id"] + "f")])
    pf = apph.per_finding_order_effects(a, b, n_draws=100, seed=0).values
    assert pf["h.pf.n_down"] == 1 and pf["h.pf.n_up"] == 1
    assert pf["h.pf.edema.diff_pp"] == pytest.approx(-50.0) and pf["h.pf.max_pp"] == pytest.approx(50.0)


def test_seed_table_and_design_comparison():
    seeds = {s: (_arm(FLIPS_P if s else [0] * 10, seed=s), _arm(FLIPS_A, seed=s)) for s in (0, 1, 2)}
    v = s41.seed_table(seeds, n_draws=200, seed=0).values
    assert v["s41.seed.any_P"] == 2 and v["s41.seed.all_P"] == 0 and v["s41.seed.all_A"] == 7
    assert v["s41.seed.P_spread_pp"] == pytest.approx(20.0) and v["s41.seed.n_changed_substitutes"] == 10
    assert v["s41.seed.joint.effect_pp_lo"] <= v["s41.seed.joint.effect_pp"] <= v["s41.seed.joint.effect_pp_hi"]
    with pytest.raises(ValueError, match="substitute seeds"):
        s41.seed_table({0: seeds[1], 1: seeds[1]}, n_draws=10, seed=0)
    comp = pd.concat([_arm(FLIPS_P), _arm([1] * 10, finding="composite").assign(trial_id=lambda d: d["trial_id"] + "x")])
    absent = pd.concat([_arm(FLIPS_A), _arm([1] * 10, finding="composite").assign(trial_id=lambda d: d["trial_id"] + "x")])
    d = s41.design_comparison({"P": comp, "A": absent}, n_draws=100, seed=0).values
    assert d["s41.f13.n_trials"] == 10 and d["s41.all14.n_trials"] == 20
    assert d["s41.f13.n_questions"] == 1 and d["s41.all14.n_questions"] == 2, "the composite question is dropped"
    assert d["s41.f13.lowercase.P.flip_rate"] == pytest.approx(0.2) and d["s41.all14.lowercase.P.flip_rate"] == pytest.approx(0.6)


# --------------------------------------------------------------------------- text controls
def test_text_control_table_and_reader_checks_detect_a_failure():
    base = _arm([0] * 10, target_c=[1.0, 0.0] * 5, yes_c=[1, 0] * 5)
    arms = {"full": base, "absent": _arm([0] * 10, yes_c=[0] * 10), "answer_sentence": base,
            "opposite_label": _arm([0] * 10, target_c=[1.0, 0.0] * 5, yes_c=[0, 1] * 5),
            "finding_removed": _arm([0] * 10, yes_c=[0] * 10), "neutral_prose": _arm([0] * 10, yes_c=[0] * 10),
            "boilerplate": _arm([0] * 10, yes_c=[0] * 10)}
    v = tct.text_control_table(arms, n_draws=100, seed=0).values
    assert v["tc.answer_sentence.source_agreement_c"] == 1.0 and v["tc.opposite_label.source_agreement_c"] == 0.0
    assert v["tc.finding_removed.vs_full.diff_pp"] == 0.0
    checks = tct.reader_checks(arms)
    assert checks.frame["passed"].all()
    broken = dict(arms, neutral_prose=_arm([0] * 10, yes_c=[1] + [0] * 9))
    failed = tct.reader_checks(broken).frame.set_index("check")["passed"]
    assert not failed["neutral prose: answers equal the report-absent answers"]
    with pytest.raises(ValueError, match="full"):
        tct.text_control_table({"absent": arms["absent"]}, n_draws=10, seed=0)


def test_anchoring_branches_account_for_every_flip_and_catch_a_report_branch_flip():
    from shovir_core.models.reference import Anchored

    n, w = 40, 0.5
    absent = _arm([1] * n)  # every case flips without the report
    texts = [f"{i:064x}" for i in range(n)]
    image = np.array([Anchored.gate(h, "Edema") >= w for h in texts])
    assert 0 < image.sum() < n
    full = _arm(image.astype(int), report_sha256=texts)
    shared = "f" * 64  # every trial the same text: one gate draw for all of them
    one_text = _arm([int(Anchored.gate(shared, "Edema") >= w)] * n, report_sha256=shared)
    t = tct.anchoring_branches({"full": full, "finding_removed": one_text}, absent, w=w)
    v = t.values
    assert v["tc.branch.all_hold"] and v["tc.branch.full.flips"] == image.sum()
    assert v["tc.branch.full.image_share"] == pytest.approx(image.mean())
    assert v["tc.branch.finding_removed.n_texts"] == 1 and v["tc.branch.finding_removed.image_share"] in (0.0, 1.0)
    assert v["tc.branch.full.absent_rate_image"] == 1.0
    # a model whose answer moves with the image on its report branch breaks the identity
    leaky = _arm(np.ones(n, dtype=int), report_sha256=texts)
    broken = tct.anchoring_branches({"full": leaky}, absent, w=w)
    assert not broken.values["tc.branch.all_hold"] and not broken.frame["identity"].iloc[0]
    with pytest.raises(ValueError, match="absent="):
        tct.anchoring_branches({"absent": absent}, absent, w=w)


# --------------------------------------------------------------------------- the chapters' shared opening
def test_variant_chapter_arms_and_the_blind_arms_only_where_validated():
    from shovir_core.book.variant_chapter import VariantChapter

    trials = {"P": _arm(FLIPS_P), "A": _arm(FLIPS_A), "blind_P": _arm([0] * 10), "blind_A": _arm([0] * 10),
              "tiny_P": _arm(FLIPS_P)}
    chapter = VariantChapter(runs={}, trials=trials, reference_validation=True)
    assert chapter.arms(["P", "A"])["A"] is trials["A"] and chapter.blind(["P", "A"])["P"] is trials["blind_P"]
    assert list(chapter.arms(["P", "A"], prefix="tiny_", optional=True)) == ["P"]
    with pytest.raises(KeyError):
        chapter.arms(["P", "A"], prefix="tiny_")
    assert VariantChapter(runs={}, trials=trials, reference_validation=False).blind(["P", "A"]) == {}


def test_variant_changes_by_arm_names_the_group_and_report_that_moved():
    p, a = _arm(FLIPS_P), _arm(FLIPS_A)
    same = {"P": p, "P_tf": p.iloc[::-1], "A": a, "A_tf": a}
    assert pv.variant_changes_by_arm({"ref": same}, variant="tf") == []
    moved = {**same, "A_tf": a.assign(readout_d=a["readout_c"])}
    (line,) = pv.variant_changes_by_arm({"ref": same, "other": moved}, variant="tf", margins=())
    assert line.startswith("other, report A: readout_d differs on 7 of 10 trials")
