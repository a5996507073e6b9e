"""ModaLens table functions on hand-built trial frames with known answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core import metrics
from shovir_core.metrics import arms as ma
from shovir_core.tables import modalens as mt


def _arm(flips_by_patient: dict[str, list[int]], *, seed: int = 0, generated: list[str] | None = None):
    """Trials with given flip patterns: one row per trial, readout_c = yes, readout_d flips."""
    rng = np.random.default_rng(seed)
    rows = []
    for p, flips in flips_by_patient.items():
        for i, f in enumerate(flips):
            m_c = float(rng.normal(1.0, 0.3))
            rows.append({"trial_id": f"{p}_{i}:edema", "case_id": f"{p}_{i}", "patient_id": p, "finding": "Edema",
                         "readout_c": "yes", "readout_d": "no" if f else "yes",
                         "family_readout_c": "yes", "family_readout_d": "no" if f else "yes",
                         "answer_c": "Yes", "answer_d": "No" if f else "Yes",
                         "margin_c": m_c, "margin_d": -abs(m_c) if f else m_c + 0.1,
                         "target_c": 1.0, "target_d": 0.0 if i % 2 else 1.0, "label_changed": float(i % 2)})
    df = pd.DataFrame(rows)
    if generated is not None:
        df["answer_d"] = generated
    return df


PRESENT = {"p1": [0, 0, 1, 0], "p2": [0, 0, 0, 0], "p3": [1, 0, 0, 0], "p4": [0, 0]}
ABSENT = {"p1": [1, 1, 1, 0], "p2": [0, 1, 0, 0], "p3": [1, 0, 1, 1], "p4": [1, 0]}


def test_compare_arms_matches_counts_and_brackets_estimates():
    a, p = _arm(ABSENT), _arm(PRESENT)
    r = ma.compare_arms(a, p, n_draws=500, seed=1)
    assert r["n_trials"] == 14 and r["n_patients"] == 4
    assert r["flips_1"] == 8 and r["flips_2"] == 2
    assert r["fr_1"] == pytest.approx(8 / 14) and r["fr_2"] == pytest.approx(2 / 14)
    assert r["diff"] == pytest.approx(6 / 14) and r["ratio"] == pytest.approx(4.0)
    for stat in ("fr_1", "fr_2", "diff"):
        assert r[f"{stat}_lo"] <= r[stat] <= r[f"{stat}_hi"]
    again = ma.compare_arms(a, p, n_draws=500, seed=1)
    assert again == r, "the same seed gives the same intervals"


def test_compare_arms_pairs_on_common_trials_and_generated_validity():
    a, p = _arm(ABSENT), _arm(PRESENT)
    r = ma.compare_arms(a.iloc[:10], p, n_draws=200, seed=0)
    assert r["n_trials"] == 10
    gen = ["No"] * 4 + ["unscoreable"] * 4 + ["Yes"] * 6
    r = ma.compare_arms(_arm(ABSENT, generated=gen), p, readout="generated", n_draws=200, seed=0)
    assert r["n_trials"] == 10 and r["n_excluded"] == 4
    none = ma.compare_arms(_arm(ABSENT, generated=["unscoreable"] * 14), p, readout="generated",
                           n_draws=200, seed=0)
    assert none["n_trials"] == 0 and np.isnan(none["fr_1"])
    with pytest.raises(ValueError, match="share no trial"):
        ma.pair_arms(a.assign(trial_id=a["trial_id"] + "x"), p)
    with pytest.raises(ValueError, match="readout"):
        ma.answers(a, "logits")


def test_accuracy_table_agrees_with_the_metrics():
    t = _arm(PRESENT)
    res = mt.accuracy_table(t, n_draws=300, seed=0)
    v = res.values
    yc, yd = (t["readout_c"] == "yes").astype(float), (t["readout_d"] == "yes").astype(float)
    assert v["t4.acc_original"] == pytest.approx(metrics.accuracy(yc, t["target_c"]))
    assert v["t4.acc_substitute"] == pytest.approx(metrics.accuracy(yd, t["target_d"]))
    assert v["t4.ba_substitute"] == pytest.approx(metrics.balanced_accuracy(yd, t["target_d"]))
    ch = t["label_changed"] == 1
    assert v["t4.fr_changed"] == pytest.approx((yc[ch] != yd[ch]).mean())
    assert v["t4.fr_unchanged"] == pytest.approx((yc[~ch] != yd[~ch]).mean())
    assert v["t4.n_flips_changed"] == int((yc[ch] != yd[ch]).sum())
    assert v["t4.n_flips_unchanged"] == int((yc[~ch] != yd[~ch]).sum()) and v["t4.n_label_unchanged"] == int((~ch).sum())
    metric = res.frame.set_index("quantity")["metric"]
    assert metric["flip rate, label-changed trials"] == "flip_rate" and metric["difference, changed − unchanged"] == "paired_diff"
    assert metric["accuracy, original image (own label)"] == "accuracy", "each row carries its own unit"
    shares = [v[k] for k in v if k.startswith("t4.transition.")]
    assert len(shares) == 4 and sum(shares) == pytest.approx(1.0)
    assert v["t4.n_label_changed"] == int(ch.sum())


def test_margin_changes_and_sweep():
    p, a = _arm(PRESENT), _arm(ABSENT)
    res = mt.margin_changes(p, a, n_draws=200, seed=0)
    dp = np.abs(p["margin_d"] - p["margin_c"])
    da = np.abs(a["margin_d"] - a["margin_c"])
    assert res.values["fig2.present.mean_abs_dm"] == pytest.approx(dp.mean())
    assert res.values["fig2.share_absent_larger"] == pytest.approx((da > dp).mean())
    assert len(res.frame) == 2 * len(p)
    sweep = mt.anchoring_sweep({0.0: (a, a.copy()), 1.0: (p, a)})
    assert bool(sweep.frame.loc[0.0, "present_equals_absent"]) and not bool(sweep.frame.loc[1.0, "present_equals_absent"])
    assert sweep.frame.loc[1.0, "fr_present"] == pytest.approx(2 / 14)
    assert sweep.values["validation.w1.fr_present"] == pytest.approx(2 / 14)
    named = mt.anchoring_sweep({0.0: (a, a.copy())}, names={0.0: "blind"})
    assert set(named.values) == {"validation.blind.fr_present", "validation.blind.fr_absent"}
    summary = mt.margin_summary(res)
    assert summary.frame["mean_abs_dm"].tolist() == [res.values["fig2.present.mean_abs_dm"],
                                                     res.values["fig2.absent.mean_abs_dm"]]
    by_finding = mt.margin_by_finding(p, a)
    assert by_finding.values["fig2.n_questions"] == 1 == len(by_finding.frame)


def test_design_subsets():
    rows = []
    for case, positives in (("c1", {"Edema"}), ("c2", set())):
        for f in ["Cardiomegaly", "Edema", "composite"]:
            tgt = float(f in positives) if f != "composite" else float(bool(positives))
            rows.append({"trial_id": f"{case}:{f}", "case_id": case, "patient_id": "p", "finding": f,
                         "target_c": tgt})
    t = pd.DataFrame(rows)
    assert sorted(mt.design_subset(t, "one_q")["trial_id"]) == ["c1:Edema", "c2:composite"]
    assert len(mt.design_subset(t, "f13")) == 4
    assert list(mt.design_subset(t, "six", six=["Edema"])["trial_id"]) == ["c1:Edema", "c2:Edema"]
    assert mt.six_findings(t) == ["Edema"]  # yes-rate 0.5; Cardiomegaly 0
    with pytest.raises(ValueError, match="design"):
        mt.design_subset(t, "nine")


def test_tables_from_fixture_records(runs_root, check_table):
    """Tables 1-5 and Figure 2 on real records of the synthetic MIMIC-CXR-JPG fixture."""
    from pathlib import Path

    from shovir_core.protocols import run

    base = {"dataset": f"mimic-jpg:{Path(__file__).parent / 'fixtures' / 'mimic_jpg'}", "ssim_size": 32,
            "model": "ref-anchored@0.5"}
    arms = {"P": {}, "A": {"report": "absent"}, "P_tf": {"order": "text_first"},
            "A_tf": {"report": "absent", "order": "text_first"}, "P_instr": {"instruction": "yes_no"},
            "A_instr": {"report": "absent", "instruction": "yes_no"}}
    recs = {k: run("modalens", f"t.{k}", {**base, **v}, progress=False) for k, v in arms.items()}
    trials = {k: r.trials for k, r in recs.items()}
    t1 = mt.cohort_table(trials["P"], recs["P"].manifest["counts"], six=mt.six_findings(trials["P"]))
    assert t1.values["t1.cases"] == 6 and t1.values["t1.trials.all14"] == 84
    assert isinstance(t1.values["t1.cases"], int) and isinstance(t1.values["t1.ssim.max"], float)
    assert t1.values["t1.tier1"] + t1.values["t1.tier2"] + t1.values["t1.tier3"] == 6
    t2 = mt.primary_comparison(trials, n_draws_primary=200, n_draws=100, seed=0)
    assert t2.values["t2.all14.n_trials"] == 84 and t2.values["t2.one_q.n_trials"] == 6
    # the reference models ignore block order: text first equals image first
    assert t2.values["t2.text_first.present.diff_pp"] == 0.0
    t3 = mt.instruction_table(trials, n_draws_primary=200, n_draws=100, seed=0)
    assert t3.values["t3.plain.lowercase.present.flip_rate"] == t2.values["t2.all14.present.flip_rate"]
    assert t3.values["t3.instructed.generated.present.compliance"] == 1.0
    t5 = mt.readout_validation(trials, n_draws=100, seed=0)
    assert t5.values["t5.plain.lowercase.n_trials"] == 6
    t4 = mt.accuracy_table(trials["P"], n_draws=200, seed=0)
    assert t4.values["t4.n_trials"] == 84
    fig = mt.margin_changes(trials["P"], trials["A"], n_draws=100, seed=0)
    assert fig.values["fig2.n_trials"] == 84
    for table in (t1, t2, t3, t4, t5, fig, mt.margin_summary(fig)):
        shown = check_table(table)  # every metric column formatted, every header readable
        assert not any(str(c).startswith(("fr_", "n_")) for c in shown.columns)
    assert t2.display().loc[("all-14, image first", "report effect: A vs P"), "diff"].endswith(" pp")
