"""Appendix F tables (Tables 13, 14, Table 4's second-model row) on hand-built trial frames; params."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core import metrics
from shovir_core.tables import modalens_appf as tf
from shovir_core.tables.result import TableResult

FINDINGS = ["Edema", "Cardiomegaly"]


def _arm(n_patients: int, *, flip_every: int, seed: int, instructed: bool = True, comply: bool = True,
         design: str = "all14"):
    """Trials: 2 cases per patient, 2 finding questions; the substitute answer flips every k-th trial."""
    rng = np.random.default_rng(seed)
    rows, k = [], 0
    for p in range(n_patients):
        for c in range(2):
            for f in FINDINGS:
                tc, td = float(rng.random() < 0.4), float(rng.random() < 0.4)
                yc = "yes" if tc else "no"
                flip = k % flip_every == 0
                yd = ("no" if yc == "yes" else "yes") if flip else yc
                k += 1
                cap = {"yes": "Yes", "no": "No"}
                rows.append({"trial_id": f"p{p}c{c}:{f}", "case_id": f"p{p}c{c}", "patient_id": f"p{p}", "finding": f,
                             "design": design, "instruction": "yes_no" if instructed else "none",
                             "readout_c": yc, "readout_d": yd, "family_readout_c": yc, "family_readout_d": yd,
                             "answer_c": cap[yc] if comply else "unscoreable", "answer_d": cap[yd] if comply else "unscoreable",
                             "compliant_c": comply, "compliant_d": comply,
                             "target_c": tc, "target_d": td, "label_changed": float(tc != td)})
    return pd.DataFrame(rows)


def test_lineage_table_counts_and_readouts():
    p, a = _arm(20, flip_every=10, seed=0), _arm(20, flip_every=3, seed=0)
    res = tf.lineage_table({"m": {"P": p, "A": a}}, n_draws=200, seed=0, design="all14")
    assert isinstance(res, TableResult)
    v = res.values
    fp = (p["readout_c"] != p["readout_d"]).mean()
    fa = (a["readout_c"] != a["readout_d"]).mean()
    assert v["t14.m.family.P.flip_rate"] == pytest.approx(fp) and v["t14.m.family.A.flip_rate"] == pytest.approx(fa)
    assert v["t14.m.family.diff_pp"] == pytest.approx(100 * (fa - fp))
    assert v["t14.m.generated.diff_pp"] == pytest.approx(v["t14.m.family.diff_pp"])
    assert v["t14.m.compliance.P"] == 1.0 and v["t14.m.agree_generated_family.A"] == 1.0
    yd = (a["family_readout_d"] == "yes").astype(float)
    assert v["t14.m.ba_sub_A"] == pytest.approx(metrics.balanced_accuracy(yd, a["target_d"]))
    assert v["t14.m.ba_own_P"] == pytest.approx(1.0), "P answers the source label on the source image"
    assert v["t14.n_cells"] == 4 and v["t14.n_generations"] == 4 * len(p)
    with pytest.raises(ValueError, match="not instructed"):
        tf.lineage_table({"m": {"P": _arm(4, flip_every=2, seed=0, instructed=False), "A": a}}, n_draws=10, seed=0,
                         design="all14")
    with pytest.raises(ValueError, match="needs arms"):
        tf.lineage_table({"m": {"P": p}}, n_draws=10, seed=0)


def test_non_compliant_generations_leave_the_generated_readout_undefined():
    p, a = _arm(6, flip_every=2, seed=1, comply=False), _arm(6, flip_every=2, seed=1, comply=False)
    v = tf.lineage_table({"m": {"P": p, "A": a}}, n_draws=50, seed=0, design="all14").values
    assert v["t14.m.compliance.A"] == 0.0 and np.isnan(v["t14.m.generated.diff_pp"])
    assert not np.isnan(v["t14.m.family.diff_pp"])


def test_records_of_another_design_are_not_recut():
    one = _arm(4, flip_every=2, seed=2, design="one_q")
    assert tf._cut(one, "one_q") is one
    with pytest.raises(ValueError, match="cannot cut"):
        tf._cut(one, "six", ["Edema"])


def test_six_questions_table_selects_by_source_rate_and_scores_the_absent_arm():
    p, a = _arm(30, flip_every=10, seed=3), _arm(30, flip_every=3, seed=3)
    res = tf.six_questions_table({"m": {"P": p, "A": a}}, six=["Edema"], n_draws=200, seed=0)
    v = res.values
    sel = a[a["finding"] == "Edema"]
    assert v["t13.m.n_trials"] == len(sel) and v["t13.n_questions"] == 1
    yc = (sel["answer_c"] == "Yes").astype(float)
    assert v["t13.m.ba_orig"] == pytest.approx(metrics.balanced_accuracy(yc, sel["target_c"]))
    assert v["t13.m.sensitivity"] == pytest.approx(metrics.sensitivity(yc, sel["target_c"]))
    assert v["t13.m.diff_pp"] > 0
    with pytest.raises(ValueError, match="no finding"):
        tf.six_questions_table({"m": {"P": p, "A": a}}, lo=0.95, hi=1.0, n_draws=10, seed=0)


def test_model_row_is_paired_on_the_primary_trials():
    second, primary = _arm(20, flip_every=4, seed=4), _arm(20, flip_every=8, seed=4)
    v = tf.model_row(second, primary, model="m4", n_draws=200, seed=0).values
    f2 = (second["readout_c"] != second["readout_d"]).mean()
    f1 = (primary["readout_c"] != primary["readout_d"]).mean()
    assert v["t4.m4.flip_rate"] == pytest.approx(f2) and v["t4.m4.more_pp"] == pytest.approx(100 * (f2 - f1))
    assert v["t4.m4.more_lo_pp"] <= v["t4.m4.more_pp"] <= v["t4.m4.more_hi_pp"]


def _beside(values):
    from shovir_core.tables import paper_vs_run as pvr

    return pvr.beside(values, tf.PAPER_KEYS, same_setting=True, optional=("",))


def test_paper_comparison_only_for_the_papers_models():
    assert _beside({"t14.tiny.family.diff_pp": 1.0}).frame.empty
    got = _beside({"t14.qwen3.5-27b.family.P.flip_rate": 0.01, "t4.medgemma-4b.more_pp": 2.5})
    assert got.values["n_compared"] == 2 and got.values["n_missing"] == len(tf.PAPER_KEYS) - 2
    assert got.values["t14.qwen3.5-27b.family.P.flip_rate"] == pytest.approx(0.0088)
    assert got.values["verdict.t14.qwen3.5-27b.family.P.flip_rate"] == "differs from the printed value"


def test_params_name_consistent_arms_and_mimic_resolves_on_the_fixture(monkeypatch):
    from shovir_core import protocols
    from shovir_core.params import load_params

    for profile in ("demo", "mimic"):
        prm = load_params("modalens_appf", profile)
        runs, par = prm["runs"], prm["parameters"]
        um, up, ua = par["uninstructed"]
        assert runs[up]["spec"]["model"] == um == runs[ua]["spec"]["model"] and runs[ua]["spec"]["report"] == "absent"
        assert "instruction" not in runs[up]["spec"] and "instruction" not in runs[ua]["spec"]
        for table in ("lineage", "six_models"):
            for model, (kp, ka) in par[table].items():
                assert runs[kp]["spec"]["model"] == model == runs[ka]["spec"]["model"]
                assert runs[kp]["spec"].get("report", "present") == "present" and runs[ka]["spec"]["report"] == "absent"
                assert runs[kp]["spec"]["instruction"] == runs[ka]["spec"]["instruction"] == "yes_no"
        assert runs["second_P"]["spec"]["model"] == par["second_model"]
    mimic = load_params("modalens_appf", "mimic")
    assert {m for m in mimic["parameters"]["lineage"]} == {"medgemma-27b", "qwen3.5-9b", "qwen3.5-27b",
                                                           "llava-next-mistral-7b"}
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(Path(__file__).parent / "fixtures" / "mimic_jpg"))
    for key in ("second_P", "qwen9_P", "llava_six_A"):
        r = mimic["runs"][key]
        assert protocols.resolve(r["protocol"], r["spec"])["model"] == r["spec"]["model"]


def test_second_model_table_on_both_designs():
    p, a = _arm(20, flip_every=9, seed=5), _arm(20, flip_every=2, seed=5)
    v = tf.second_model_table(p, a, model="medgemma-4b", n_draws=200, seed=0).values
    fa, fp = (a["readout_c"] != a["readout_d"]).mean(), (p["readout_c"] != p["readout_d"]).mean()
    assert v["f.medgemma-4b.all14.diff_pp"] == pytest.approx(100 * (fa - fp))
    one = tf.design_subset(a, "one_q")
    assert v["f.medgemma-4b.one_q.n_trials"] == len(one) == one["case_id"].nunique()
    assert v["f.medgemma-4b.one_q.yes_A"] == int((one["readout_c"] == "yes").sum())
    got = _beside(v).values
    assert got["f.medgemma-4b.one_q.P.flip_rate"] == pytest.approx(0.0316)
    assert got["f.medgemma-4b.one_q.yes_A"] == 2422


def test_uninstructed_table_counts_yes_and_bare_first_tokens():
    p, a = _arm(5, flip_every=3, seed=6, instructed=False), _arm(5, flip_every=3, seed=6, instructed=False)
    tokens = ["yes", "ĠNo", "The", "Yes"] * (len(a) // 4) + ["no"] * (len(a) % 4)
    a = a.assign(top1_token_c=tokens, top1_token_d="Based")
    p = p.assign(top1_token_c="no", top1_token_d="yes")
    v = tf.uninstructed_table(p, a, model="q", design="all14").values
    assert v["f.q.plain.A.yes"] == int((a["family_readout_c"] == "yes").sum())
    assert v["f.q.plain.A.bare_first_token"] == pytest.approx(sum(t != "The" for t in tokens) / (2 * len(a)))
    assert v["f.q.plain.P.bare_first_token"] == 1.0
    with pytest.raises(ValueError, match="is instructed"):
        tf.uninstructed_table(_arm(3, flip_every=2, seed=0), a, model="q", design="all14")
