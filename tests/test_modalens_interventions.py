"""The modalens-interventions protocol (residual patching, steering) on tiny-gemma3, and its tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.protocols import modalens_interventions as mi
from shovir_core.protocols import run
from shovir_core.tables import modalens_appn_interventions as ivt

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
BASE = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32, "model": "tiny-gemma3", "threads": 1}


# --------------------------------------------------------------------------- spec
def test_spec_keys_and_identity():
    a = mi.resolve_spec({**BASE})
    assert a["analysis"] == "patching" and "steer_scales" not in a and a["donors"] == ["correct", "wrong"]
    assert mi.resolve_spec({**BASE, "steer_scales": [3.0]}) == a, "steering keys never split a patching record"
    assert "threads" not in a, "an execution-only key stays out of the identity"
    s = mi.resolve_spec({**BASE, "analysis": "steering", "steer_scales": [2, 0]})
    assert s["steer_scales"] == [0.0, 2.0] and "donors" not in s
    assert mi.resolve_spec(a) == a and mi.resolve_spec(s) == s, "a resolved spec resolves to itself"
    with pytest.raises(ValueError, match="report-present"):
        mi.resolve_spec({**BASE, "report": "absent"})
    with pytest.raises(ValueError, match="framing"):
        mi.resolve_spec({**BASE, "framing": "warning"})
    with pytest.raises(Exception, match="patch_scopes"):
        mi.resolve_spec({**BASE, "patch_scopes": ["everywhere"]})
    with pytest.raises(Exception, match="unknown"):
        mi.resolve_spec({**BASE, "layer": 3})
    assert "knockout_n_cases" not in a, "without a case sample the identity is unchanged"
    k = mi.resolve_spec({**BASE, "knockout_n_patients": 2, "knockout_n_cases": 3})
    assert (k["knockout_n_patients"], k["knockout_n_cases"], k["knockout_case_seed"]) == (2, 3, 0) and k != a
    with pytest.raises(ValueError, match="applies to patching"):
        mi.resolve_spec({**BASE, "analysis": "steering", "knockout_n_cases": 3})
    with pytest.raises(ValueError, match="exceeds"):
        mi.resolve_spec({**BASE, "knockout_n_cases": 3, "knockout_n_decisive": 4})


def test_wrong_donors_are_other_patients_and_stable():
    rng = np.random.default_rng(0)
    n = 40
    cases = pd.DataFrame({"case_id": [f"c{i:02d}" for i in range(n)], "patient_id": [f"p{i // 3}" for i in range(n)],
                          "image_id": [f"i{i}" for i in range(n)]})
    cases["sub_patient_id"] = [f"p{int(x)}" for x in rng.integers(0, n // 3, n)]
    cases["sub_image_id"] = [f"s{i}" for i in range(n)]
    d = mi.wrong_donors(cases, seed=3)
    donor_patient = cases.set_index("case_id")["patient_id"].reindex(d["donor_case_id"]).to_numpy()
    own = cases.set_index("case_id").loc[d.index]
    assert (donor_patient != own["patient_id"].to_numpy()).all() and (donor_patient != own["sub_patient_id"].to_numpy()).all()
    pd.testing.assert_frame_equal(d, mi.wrong_donors(cases.sample(frac=1, random_state=1), seed=3))
    assert not d.equals(mi.wrong_donors(cases, seed=4))


def test_fit_test_split_is_by_patient():
    t = pd.DataFrame({"patient_id": [f"p{i % 7}" for i in range(50)]})
    fit = mi.split_fit_test(t, seed=0, share=0.5)
    assert not set(t["patient_id"][fit]) & set(t["patient_id"][~fit])
    assert t["patient_id"][fit].nunique() == 4
    np.testing.assert_array_equal(fit, mi.split_fit_test(t, seed=0, share=0.5))
    with pytest.raises(ValueError, match="two patients"):
        mi.split_fit_test(t.head(1), seed=0, share=0.5)


# --------------------------------------------------------------------------- records
@pytest.fixture(scope="module")
def records(tmp_path_factory):
    plain = {k: v for k, v in BASE.items() if k != "threads"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOVIR_RUNS", str(tmp_path_factory.mktemp("runs")))
        patch = run("modalens-interventions", "t.patch", {**BASE, "max_patients": 1}, progress=False)
        steer = run("modalens-interventions", "t.steer", {**BASE, "analysis": "steering", "steer_classes": "key",
                                                          "steer_scales": [0, 2]}, progress=False)
        plain_p = run("modalens", "t.P", plain, progress=False)
        plain_a = run("modalens", "t.A", {**plain, "report": "absent"}, progress=False)
        yield {"patch": patch, "steer": steer, "P": plain_p.trials.set_index("trial_id"),
               "A": plain_a.trials.set_index("trial_id")}


def test_patching_record_names_every_cell_and_matches_the_plain_runs(records):
    t = records["patch"].trials
    n_base = t["base_trial_id"].nunique()
    assert t["patient_id"].nunique() == 1, "max_patients runs one patient's trials"
    assert len(t) == n_base * 2 * 2 * 2 and t["trial_id"].is_unique  # donors x scopes x 2 layers of tiny-gemma3
    assert set(t["arm"]) == {"patching"} and set(t["donor"]) == {"correct", "wrong"}
    assert set(t["scope"]) == {"answer", "suffix"} and set(t["layer"]) == {0, 1}
    p, a = records["P"].loc[t["base_trial_id"]], records["A"].loc[t["base_trial_id"]]
    for side in ("c", "d"):
        np.testing.assert_allclose(t[f"base_margin_{side}"], p[f"margin_{side}"], atol=1e-4)
        np.testing.assert_allclose(t[f"absent_margin_{side}"], a[f"margin_{side}"], atol=1e-4)
    last = t[(t["donor"] == "correct") & (t["scope"] == "answer") & (t["layer"] == 1)]
    np.testing.assert_allclose(last["margin_c"], last["absent_margin_c"], atol=1e-4)
    wrong = t[(t["donor"] == "wrong") & (t["scope"] == "answer") & (t["layer"] == 1)]
    np.testing.assert_allclose(wrong["margin_d"], wrong["donor_margin_d"], atol=1e-4)
    assert not np.allclose(wrong["margin_d"], wrong["absent_margin_d"], atol=1e-4)
    assert (wrong["donor_case_id"] != wrong["case_id"]).all()
    suffix = t[t["scope"] == "suffix"]
    assert (suffix["n_patched_c"] > 1).all() and (t.loc[t["scope"] == "answer", "n_patched_c"] == 1).all()
    table = ivt.patching_table(t, n_draws=50, seed=0)
    assert len(table.frame) == 8 and table.values["correct.answer.last.absent_agreement"] == 1.0


def test_patching_on_the_knockouts_case_sample_runs_exactly_those_cases(tmp_path, monkeypatch):
    """App. N.2 patches on the knockout's case sample: the record holds the cases the knockout's rule draws
    (modalens_layers.knockout_cases over the same trials) and counts them in its manifest."""
    from shovir_core.protocols import modalens as ml
    from shovir_core.protocols.modalens_layers import knockout_cases

    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path))
    spec = {**BASE, "design": "one_q", "patch_layers": [1], "patch_scopes": ["answer"], "donors": ["correct"],
            "knockout_n_patients": 2, "knockout_n_cases": 3, "knockout_case_seed": 1}
    rec = run("modalens-interventions", "t.patch.sample", spec, progress=False)
    resolved = mi.resolve_spec(spec)
    cases, _ = ml.build_cases(resolved)
    trials = ml._trial_frame(resolved, cases, ml._reports(resolved, cases))
    want = knockout_cases(trials, n_patients=2, n_cases=3, seed=1)
    assert sorted(rec.trials["case_id"].unique()) == sorted(want["case_id"].unique())
    assert len(want["case_id"].unique()) == 3 < trials["case_id"].nunique()
    counts = rec.manifest["counts"]
    assert (counts["n_cases_run"], counts["n_patients_run"]) == (3, 2)


def test_steering_record_is_a_test_split_with_an_identity_at_scale_0(records):
    r = records["steer"]
    t = r.trials
    counts = r.manifest["counts"]
    assert counts["n_fit_patients"] + counts["n_patients_run"] == counts["n_patients"]
    assert set(t["variant"]) == {"dom", "random", "every_layer"} and set(t["scale"]) == {0.0, 2.0}
    assert t["trial_id"].is_unique
    zero = t[t["scale"] == 0.0]
    for side in ("c", "d"):
        np.testing.assert_array_equal(zero[f"margin_{side}"], zero[f"base_margin_{side}"])
    moved = t[(t["scale"] == 2.0) & (t["variant"] == "dom")]
    assert not np.allclose(moved["margin_c"], moved["base_margin_c"])
    spread = t.groupby("layer")["direction_norm"].agg(lambda x: x.max() - x.min())
    assert (spread < 1e-9).all() and (t["direction_norm"] > 0).all(), "the random direction has the norm of the direction"


# --------------------------------------------------------------------------- tables on known frames
def _patch_frame():
    rows = []
    # three trials of three patients; trial 0 and 1 flip without the report, none with it
    absent = {0: (1.0, -1.0), 1: (1.0, -1.0), 2: (1.0, 1.0)}
    patched = {("correct", 0): {0: (1, -1), 1: (1, -1), 2: (1, 1)}, ("wrong", 0): {0: (1, 1), 1: (-1, -1), 2: (1, -1)}}
    for (donor, layer), m in patched.items():
        for i in range(3):
            rows.append({"base_trial_id": f"t{i}", "patient_id": f"p{i}", "arm": "patching", "donor": donor,
                         "scope": "answer", "layer": layer, "margin_c": m[i][0], "margin_d": m[i][1],
                         "base_margin_c": 1.0, "base_margin_d": 1.0, "absent_margin_c": absent[i][0],
                         "absent_margin_d": absent[i][1], "n_patched_c": 1, "n_patched_d": 1})
    return pd.DataFrame(rows)


def test_patching_table_counts():
    v = ivt.patching_table(_patch_frame(), n_draws=20, seed=0).values
    assert v["n_restorable"] == 2 and v["absent.flip_rate"] == pytest.approx(2 / 3) and v["present.flip_rate"] == 0
    assert v["correct.answer.L0.restored"] == 1.0 and v["correct.answer.L0.absent_agreement"] == 1.0
    assert v["wrong.answer.L0.restored"] == 0.0 and v["wrong.answer.L0.flip_rate"] == pytest.approx(1 / 3)
    assert v["wrong.answer.L0.absent_agreement"] == pytest.approx((0.5 + 0.5 + 0.5) / 3)
    assert v["wrong.max_flip_rate"] == pytest.approx(1 / 3)


def test_steering_table_counts():
    rows = []
    # 4 same-answer trials; keys d: 1, 0, 1, 0; keys c: 1, 1, 0, 0; unsteered answers all yes
    keys_c, keys_d = [1, 1, 0, 0], [1, 0, 1, 0]
    steered = {"dom": [1, -1, 1, -1], "random": [1, 1, 1, 1]}
    for variant, m_d in steered.items():
        for scale in (0.0, 4.0):
            for i in range(4):
                md = 1.0 if scale == 0 else m_d[i]
                mc = 1.0 if scale == 0 else (-1.0 if variant == "random" and i == 0 else 1.0)
                rows.append({"base_trial_id": f"t{i}", "patient_id": f"p{i}", "arm": "steering", "variant": variant,
                             "layer": 3, "scale": scale, "same_answer": True, "target_c": float(keys_c[i]),
                             "target_d": float(keys_d[i]), "margin_c": mc, "margin_d": md, "base_margin_c": 1.0,
                             "base_margin_d": 1.0, "direction_norm": 2.0})
    rows.append({**rows[0], "base_trial_id": "t9", "same_answer": False})  # not in the paper's trial set
    res = ivt.steering_table(pd.DataFrame(rows), n_draws=20, seed=0)
    v = res.values
    assert v["t25.n_trials"] == 4 and v["t25.unsteered.n_tracks"] == 2 and v["t25.n_correct"] == 2
    assert v["t25.dom.tracks_rate"] == 1.0 and v["t25.dom.change"] == 2 and v["t25.dom.degradation"] == 0.0
    assert v["t25.random.tracks_rate"] == 0.5 and v["t25.random.n_down"] == 0 and v["t25.random.degradation"] == 0.5
    assert (res.frame.loc[res.frame["scale"] == 0, "change"] == 0).all()
    from shovir_core.papers import load_values

    assert set(ivt.PAPER_KEYS.values()) <= set(load_values("modalens"))


# --------------------------------------------------------------------------- params
@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_chapter_params_resolve(profile, monkeypatch):
    from shovir_core.params import load_params, toc_notebooks

    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    params = load_params("modalens_appn_interventions", profile)
    assert set(params["runs"]) == {"patch", "steer"}
    for r in params["runs"].values():
        assert r["protocol"] == "modalens-interventions"
        spec = mi.resolve_spec(dict(r["spec"]))
        assert spec["model"] == ("medgemma-27b" if profile == "mimic" else "ref-vlm")
        if profile == "demo":
            from shovir_core.models.ref_vlm import EVAL_COHORT

            assert {k: spec[k] for k in EVAL_COHORT} == EVAL_COHORT, "the demo cohort is ref-vlm's held-out one"
        else:
            assert params["parameters"]["reproduces_paper"] is True and spec["ssim_size"] == 896
    names = toc_notebooks()
    assert names.index("modalens_appn_interventions") == names.index("modalens_appn") + 1


def test_an_interrupted_patching_record_resumes_to_the_same_rows(runs_root, monkeypatch):
    spec = {**BASE, "max_patients": 2, "patch_layers": [1], "patch_scopes": ["answer"], "donors": ["wrong"],
            "batch_cases": 1}
    whole = run("modalens-interventions", "t.whole", spec, progress=False).trials
    calls = {"n": 0}
    original = mi._patch_rows

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("interrupted")
        return original(*args, **kwargs)

    monkeypatch.setattr(mi, "_patch_rows", flaky)
    with pytest.raises(RuntimeError, match="interrupted"):
        run("modalens-interventions", "t.resume", spec, progress=False)
    monkeypatch.setattr(mi, "_patch_rows", original)
    again = run("modalens-interventions", "t.resume", spec, progress=False).trials
    assert calls["n"] == 2 and whole["case_id"].nunique() > 1, "the first case chunk was kept, the rest resumed"
    cols = ["trial_id", "margin_c", "margin_d", "base_margin_c", "absent_margin_d", "donor_margin_c", "donor_case_id"]
    a = whole[cols].sort_values("trial_id").reset_index(drop=True)
    b = again[cols].sort_values("trial_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, atol=1e-5)
