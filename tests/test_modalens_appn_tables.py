"""Appendix N tables on synthetic modalens-layers trials."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shovir_core.tables import modalens_appn as an
from shovir_core.tables.result import TableResult


def _trials(n: int, *, seed: int, flip_share: float, n_layers: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m_c = rng.normal(size=(n, n_layers + 1))
    m_d = m_c.copy()
    flip = rng.random(n) < flip_share
    m_d[flip, -1] = -m_c[flip, -1]
    lens = lambda m: [json.dumps([[float(x), 0.0] for x in row]) for row in m]  # noqa: E731
    return pd.DataFrame({
        "trial_id": [f"t{i}" for i in range(n)], "patient_id": [f"p{i // 3}" for i in range(n)],
        "finding": np.where(np.arange(n) % 2, "Edema", "composite"),
        "target_c": (m_c[:, -1] > 0).astype(float),
        "readout_c": np.where(m_c[:, -1] > 0, "yes", "no"), "readout_d": np.where(m_d[:, -1] > 0, "yes", "no"),
        "lens_c": lens(m_c), "lens_d": lens(m_d),
        "ko_c": lens(m_c[:, -2:]), "ko_d": lens(m_d[:, -2:]), "ko_layers": json.dumps([0, 2]),
    })


def test_planted_facts_and_lens_endpoint():
    p, a = _trials(90, seed=0, flip_share=0.05), _trials(90, seed=1, flip_share=0.4)
    facts = an.planted_facts(p, a, n_draws=100, seed=0)
    assert isinstance(facts, TableResult)
    v = facts.values
    assert v["present.flip_rate"] == (p["readout_c"] != p["readout_d"]).mean()
    assert v["present.label_agreement"] == 1.0 and v["present.balanced_accuracy"] == 1.0
    assert v["ratio"] > 1 and v["present.flip_lo"] <= v["present.flip_rate"] <= v["present.flip_hi"]
    lens = an.lens_table({"present": p, "absent": a}, n_draws=50, seed=0)
    for arm, t in (("present", p), ("absent", a)):
        assert lens.values[f"{arm}.endpoint_disagreement"] == lens.values[f"{arm}.flip_rate"]
    assert len(lens.frame) == 2 * 4 and not lens.display().empty


def test_knockout_table_reads_every_start_layer():
    t = _trials(60, seed=2, flip_share=0.3)
    ko = an.knockout_table({"report_all": t}, n_draws=100, seed=0)
    assert ko.frame["start_layer"].tolist() == [0, 2]
    assert ko.values["report_all.L2.flip_rate"] == (t["readout_c"] != t["readout_d"]).mean()
    assert 0 <= ko.values["report_all.L0.report_label_agreement"] <= 1


def test_balanced_accuracy_is_nan_for_one_class():
    assert np.isnan(an._balanced_accuracy(np.array([1, 0]), np.array([1.0, 1.0])))
    assert an._balanced_accuracy(np.array([1, 0, 0, 0]), np.array([1.0, 0.0, 1.0, np.nan])) == 0.75


def test_knockout_overlap_counts_shared_flips_and_tests_phi():
    t = _trials(60, seed=2, flip_share=0.3)
    same = an.knockout_overlap({"a": t, "b": t}, [("a", "b")], n_perm=200, seed=0)
    row = same.frame.set_index("start_layer").loc[2]
    flips = int((t["readout_c"] != t["readout_d"]).sum())
    assert row["flips_a"] == row["flips_b"] == row["both"] == flips and row["jaccard"] == 1.0 and row["phi"] == 1.0
    assert same.values["a.b.L2.phi_p"] < 0.05, "identical flip sets are far from a shuffled pairing"
    other = _trials(60, seed=9, flip_share=0.3)
    indep = an.knockout_overlap({"a": t, "b": other}, [("a", "b")], n_perm=200, seed=0).values
    assert indep["a.b.L2.phi"] < same.values["a.b.L2.phi"] and indep["a.b.L2.phi_p"] > 0.05
    with pytest.raises(ValueError, match="share no trials"):
        an.knockout_overlap({"a": t, "b": other.assign(trial_id="x" + other["trial_id"])}, [("a", "b")],
                            n_perm=10, seed=0)


def test_settling_table_pairs_trials_and_reads_the_nulls():
    p, a = _trials(90, seed=0, flip_share=0.05), _trials(90, seed=0, flip_share=0.05)
    same = an.settling_table(p, a, n_perm=200, seed=0).values
    assert same["paired_mean_diff"] == 0.0 and same["median_abs_diff"] == 0.0
    assert same["median_abs_diff_p"] < 0.05, "identical settling layers: pairing matters"
    # the absent arm settles only at the output layer: its answers change sign just before it
    late = a.copy()
    late["lens_c"] = [json.dumps([[1.0, 0.0]] * 3 + [[-1.0, 0.0]]) for _ in range(len(a))]
    v = an.settling_table(p, late, n_perm=200, seed=0).values
    from shovir_core.metrics import layers as ly
    from shovir_core.protocols.modalens_layers import lens_array

    expect = ly.settling_layer(ly.margins(lens_array(p["lens_c"]))).mean() - 3
    assert v["absent.median"] == 3 and v["paired_mean_diff"] == pytest.approx(expect)
    assert v["paired_mean_diff_p"] < 0.05 and v["n_trials"] == 90
    assert v["paired_mean_diff_lo"] <= v["paired_mean_diff"] <= v["paired_mean_diff_hi"] < 0, "an interval, not only p"


def test_layer_intervals_give_the_paired_difference_and_the_balanced_agreement():
    p, a = _trials(90, seed=0, flip_share=0.3), _trials(90, seed=0, flip_share=0.3)
    v = an.layer_intervals(p, a, disagreement_layer=3, agreement_layer=3, n_draws=200, seed=0).values
    flips = (p["readout_c"] != p["readout_d"]).mean()
    assert v["present.disagreement"] == pytest.approx(flips) and v["disagreement_diff_pp"] == 0.0
    assert v["present.balanced_agreement"] == 1.0, "the output layer agrees with itself"
    assert v["present.disagreement_lo"] <= flips <= v["present.disagreement_hi"]
    calm = _trials(90, seed=0, flip_share=0.0)
    d = an.layer_intervals(p, calm, disagreement_layer=3, agreement_layer=0, n_draws=200, seed=0).values
    assert d["disagreement_diff_pp"] == pytest.approx(100 * flips) and d["disagreement_diff_pp_lo"] > 0
    assert d["present.balanced_agreement_lo"] <= d["present.balanced_agreement"] <= d["present.balanced_agreement_hi"]
    with pytest.raises(ValueError, match="outside"):
        an.layer_intervals(p, a, disagreement_layer=4, agreement_layer=0, n_draws=10, seed=0)


def test_still_apart_counts_and_knockout_difference():
    t, calm = _trials(60, seed=2, flip_share=0.3), _trials(60, seed=2, flip_share=0.0)
    t27 = an.still_apart_table({"image_first": t, "text_first": calm}).values
    assert t27["image_first.n_flips"] == int((t["readout_c"] != t["readout_d"]).sum()) > 0
    assert t27["text_first.n_flips"] == 0 == t27["text_first.n_still_apart"], "identical images are never apart"
    assert 0 < t27["image_first.n_still_apart"] <= 60
    diff = an.knockout_difference(t, {"image_matched": calm}, n_draws=200, seed=0)
    v = diff.values
    assert v["image_matched.L2_pp"] == pytest.approx(100 * t27["image_first.n_flips"] / 60)
    assert v["image_matched.L2_pp_lo"] > 0 and diff.frame["clears_zero"].any()
    half = an.knockout_difference(t, {"image_matched": calm}, n_draws=50, seed=0, subset=t["trial_id"][:30])
    assert (half.frame["n_trials"] == 30).all()


def test_absent_by_finding_counts_blind_questions_and_can_fail():
    """Edema answered from the image, Atelectasis at random, Fracture constant "no" without a positive image."""
    rng = np.random.default_rng(0)
    n, rows = 120, []
    for finding in ("Edema", "Atelectasis", "Fracture", "composite"):
        label = (np.arange(n) % 2).astype(float) if finding != "Fracture" else np.zeros(n)
        yes = {"Edema": label == 1, "Atelectasis": rng.random(n) < 0.5, "Fracture": np.zeros(n, bool),
               "composite": label == 1}[finding]
        for i in range(n):
            rows.append({"trial_id": f"{finding}:{i}", "patient_id": f"p{i % 30}", "finding": finding,
                         "target_c": label[i], "readout_c": "yes" if yes[i] else "no",
                         "readout_d": "no" if (yes[i] and i % 3 == 0) else ("yes" if yes[i] else "no")})
    frame = pd.DataFrame(rows)
    v = an.absent_by_finding(frame, n_draws=300, seed=0).values
    assert v["absent_pf.n_findings"] == 3 and v["absent_pf.n_both_classes"] == 2
    assert v["absent_pf.edema.ba"] == 1.0 and v["absent_pf.edema.ba_lo"] > 0.5
    assert v["absent_pf.atelectasis.ba_lo"] <= 0.5 <= v["absent_pf.atelectasis.ba_hi"]
    assert v["absent_pf.n_constant"] == 1 and v["absent_pf.n_constant_no_positive"] == 1
    assert v["absent_pf.constant"] == "Fracture" and v["absent_pf.fracture.flip_rate"] == 0.0
    # an answer that reads the image against its label is below chance beyond its interval
    against = frame.copy()
    edema = against["finding"] == "Edema"
    against.loc[edema, "readout_c"] = np.where(against.loc[edema, "target_c"] == 1, "no", "yes")
    w = an.absent_by_finding(against, n_draws=300, seed=0).values
    assert "Edema" in w["absent_pf.below_chance"]
    assert w["absent_pf.n_below_at_chance"] < w["absent_pf.n_below_chance"]
