"""The modalens protocol end to end on the synthetic MIMIC-CXR-JPG fixture, and its building blocks."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.labels import CHEXPERT_CLASSES, FINDINGS_13
from shovir_core.protocols import modalens as ml
from shovir_core.protocols import run

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
DATASET = f"mimic-jpg:{FIXTURE}"
BASE = {"dataset": DATASET, "ssim_size": 32}


def _codes(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(CHEXPERT_CLASSES)).astype(float)


# --------------------------------------------------------------------------- building blocks
def test_questions_and_ids():
    assert ml.question_text("Support Devices") == "Does this chest X-ray show support devices?"
    assert ml.question_text("Edema", template="alt") == "Is edema present on this chest X-ray?"
    assert "any acute cardiopulmonary finding" in ml.question_text(ml.COMPOSITE)
    assert ml.question_id("Lung Opacity") == "lung_opacity"
    with pytest.raises(ValueError, match="No Finding"):
        ml.question_id("No Finding")
    with pytest.raises(ValueError, match="template"):
        ml.question_text("Edema", template="other")


def test_policy_targets_composite_is_any_of_13_and_ignores_no_finding():
    codes = _codes([{"Edema": 1.0}, {"Edema": -1.0}, {"No Finding": 1.0}, {"Edema": 0.0}])
    neg = ml.policy_targets(codes, "u-negative")
    assert neg[ml.COMPOSITE].tolist() == [1.0, 0.0, 0.0, 0.0]
    pos = ml.policy_targets(codes, "u-positive")
    assert pos[ml.COMPOSITE].tolist() == [1.0, 1.0, 0.0, 0.0]
    excl = ml.policy_targets(codes, "u-excluded")
    assert excl.loc[0, "Edema"] == 1.0 and excl.loc[3, "Edema"] == 0.0 and excl.loc[2, "Edema"] == 0.0
    assert np.isnan(excl.loc[1, "Edema"]) and np.isnan(excl.loc[1, ml.COMPOSITE])
    assert excl.loc[0, ml.COMPOSITE] == 1.0, "a positive finding decides the composite despite exclusions"
    assert "No Finding" not in neg.columns


def test_primary_finding_six_and_designs():
    targets = ml.policy_targets(_codes([{"Pneumothorax": 1.0, "Cardiomegaly": 1.0}, {}, {"Edema": 1.0}]),
                                "u-negative").set_axis(["a", "b", "c"])
    assert ml.primary_finding(targets).tolist() == ["Cardiomegaly", ml.COMPOSITE, "Edema"]
    assert ml.prespecified_findings(targets, lo=0.2, hi=0.8) == ["Cardiomegaly", "Edema", "Pneumothorax"]
    assert len(ml.select_questions(targets, design="all14")) == 3 * 14
    assert len(ml.select_questions(targets, design="f13")) == 3 * 13
    assert ml.select_questions(targets, design="one_q") == [("a", "Cardiomegaly"), ("b", ml.COMPOSITE),
                                                            ("c", "Edema")]
    assert ml.select_questions(targets, design="six", six=["Edema"]) == [(c, "Edema") for c in "abc"]
    with pytest.raises(ValueError, match="design"):
        ml.select_questions(targets, design="seven")
    with pytest.raises(ValueError, match="six_range"):
        ml.prespecified_findings(targets, lo=0.9, hi=0.1)


def test_resolve_spec_fills_defaults_and_validates():
    spec = ml.resolve_spec(dict(BASE))
    # replicate 0 (the arm itself) is left out, so the key changed no existing record's identity
    assert set(ml.DEFAULTS) - {"replicate"} <= set(spec) and "replicate" not in spec
    assert spec["reports"] == "dataset" and len(spec["dataset_sha256"]) == 64
    assert ml.resolve_spec(dict(BASE)) == spec, "resolution is deterministic"
    assert ml.resolve_spec(dict(spec)) == spec, "a resolved spec resolves to itself"
    assert spec["model_fingerprint"]["name"] == "ref-anchored@0.5" and spec["model_fingerprint"]["sha256"]
    assert ml.resolve_spec({**BASE, "model": "ref-anchored@1"})["model_fingerprint"] != spec["model_fingerprint"]
    templated = ml.resolve_spec({**BASE, "reports": "template"})
    assert templated["template_id"] and ml.resolve_spec(dict(templated)) == templated
    six = ml.resolve_spec({**BASE, "design": "six"})
    assert six["six_findings"] == ["Cardiomegaly", "Lung Opacity"]  # 2 of 6 source studies each
    for bad, match in (({"colour": 1}, "unknown key"), ({"design": "x"}, "design"),
                       ({"report": "maybe"}, "report"), ({"instruction": "shout"}, "instruction"),
                       ({"image": "yes"}, "image"), ({"n_patients": 0}, "n_patients"),
                       ({"dataset_sha256": "0" * 64}, "pins")):
        with pytest.raises(ValueError, match=match):
            ml.resolve_spec({**BASE, **bad})


def test_cases_cover_all_three_tiers():
    cases, counts = ml.build_cases(ml.resolve_spec(dict(BASE)))
    assert counts["n_cases"] == 6 and counts["n_patients"] == 3
    tiers = cases.set_index("case_id")["tier"]
    assert tiers["0a1b2c3d-00000007"] == 3, "the single-study patient gets a cross-patient substitute"
    assert tiers["0a1b2c3d-00000005"] == 2, "same positive set on the patient's other study"
    assert tiers["0a1b2c3d-00000001"] == 1
    assert (cases["sub_study_id"] != cases["study_id"]).all()
    assert counts["n_tier1"] + counts["n_tier2"] + counts["n_tier3"] == counts["n_cases"]
    assert counts["n_ssim_rejected"] == 0 and cases["ssim"].max() <= 0.9


def test_ssim_rejection_moves_a_case_to_the_next_tier():
    # at 16 x 16 the two studies of patient 90000764 are near-identical gradients (SSIM > 0.9)
    cases, counts = ml.build_cases(ml.resolve_spec({**BASE, "ssim_size": 16}))
    row = cases.set_index("case_id").loc["0a1b2c3d-00000005"]
    assert row["tier"] == 3 and row["n_rejected_ssim"] >= 1 and row["ssim"] <= 0.9
    assert counts["n_ssim_rejected"] == int(cases["n_rejected_ssim"].sum()) > 0


# --------------------------------------------------------------------------- end to end
@pytest.fixture
def arms(runs_root):
    """Report present/absent records of the anchored reference model at w = 0 and w = 1."""
    out = {}
    for w in ("0", "1"):
        for report in ("present", "absent"):
            r = run("modalens", f"t.w{w}.{report}", {**BASE, "model": f"ref-anchored@{w}", "report": report,
                                                      "batch_cases": 2}, progress=False)
            out[(w, report)] = r
    return out


def test_records_hold_paired_trials_with_raw_outputs(arms):
    r = arms[("1", "present")]
    t = r.trials
    assert r.credentialed and r.manifest["counts"]["n_trials"] == 6 * 14 == len(t)
    assert t["trial_id"].is_unique
    assert (t["trial_id"] == t["case_id"] + ":" + t["question_id"]).all()
    for col in ("logit_yes", "logit_no", "margin", "readout", "family_readout", "logp_yes", "token_logits",
                "generated", "answer", "compliant", "input_hash"):
        assert f"{col}_c" in t.columns and f"{col}_d" in t.columns, col
    assert np.allclose(t["margin_c"], t["logit_yes_c"] - t["logit_no_c"])
    assert (t["input_hash_c"] != t["input_hash_d"]).all(), "the two sides differ only by the image"
    assert "report" not in t.columns and t["report_sha256"].str.len().eq(64).all()
    comp = t[t["is_composite"]].set_index("case_id")
    for case_id, row in comp.iterrows():
        labels = json.loads(row["labels_c"])
        assert row["target_c"] == float(any(labels[f] == 1.0 for f in FINDINGS_13))
    assert ((t["target_c"] != t["target_d"]) == (t["label_changed"] == 1)).all()


def test_reference_anchoring_is_measured(arms):
    def fr(r):
        t = r.trials
        return float((t["readout_c"] != t["readout_d"]).mean())

    assert fr(arms[("1", "present")]) == 0.0, "w = 1 answers from the report only"
    p0, a0 = arms[("0", "present")].trials, arms[("0", "absent")].trials
    cols = ["trial_id", "readout_c", "readout_d", "margin_c", "margin_d"]
    pd.testing.assert_frame_equal(p0[cols].sort_values("trial_id").reset_index(drop=True),
                                  a0[cols].sort_values("trial_id").reset_index(drop=True))
    assert fr(arms[("0", "absent")]) == fr(arms[("1", "absent")]), "without the report w is irrelevant"


def test_resume_after_interruption(runs_root):
    spec = {**BASE, "model": "ref-blind-prior", "batch_cases": 2}
    first = run("modalens", "t.resume", spec, progress=False)
    parts = sorted((first.path / "parts").glob("part-*.parquet"))
    assert len(parts) == 3
    parts[-1].unlink()
    manifest = json.loads((first.path / "manifest.json").read_text())
    manifest["status"] = "started"
    (first.path / "manifest.json").write_text(json.dumps(manifest))
    again = run("modalens", "t.resume", spec, progress=False)
    assert again.path == first.path and again.status == "complete"
    assert len(again.trials) == 84 and again.trials["trial_id"].is_unique
    assert (again.trials["readout_c"] == again.trials["readout_d"]).all(), "the blind prior never flips"


def test_image_absent_and_template_reports(runs_root):
    r = run("modalens", "t.noimage", {**BASE, "model": "ref-report-reader", "image": False,
                                      "reports": "template", "design": "one_q"}, progress=False)
    t = r.trials
    assert len(t) == 6 and (t["report_source"] == "template").all()
    assert (t["input_hash_c"] == t["input_hash_d"]).all() and (t["margin_c"] == t["margin_d"]).all()
    # template reports state the source labels, which the report reader answers from
    pos = t[t["target_c"] == 1]
    assert len(pos) and (pos["readout_c"] == "yes").all()


def test_one_question_design_equals_the_all14_subset(runs_root):
    from shovir_core.tables import modalens as mt

    spec = {**BASE, "model": "ref-anchored@0.5"}
    all14 = run("modalens", "t.all14", spec, progress=False).trials
    one = run("modalens", "t.oneq", {**spec, "design": "one_q"}, progress=False).trials
    sub = mt.design_subset(all14, "one_q")
    assert sorted(sub["trial_id"]) == sorted(one["trial_id"])
    cols = ["trial_id", "margin_c", "margin_d", "target_c", "target_d"]
    pd.testing.assert_frame_equal(sub[cols].sort_values("trial_id").reset_index(drop=True),
                                  one[cols].sort_values("trial_id").reset_index(drop=True))


def test_tiny_transformer_arm(runs_root):
    r = run("modalens", "t.tiny", {**BASE, "model": "tiny-gemma3", "n_patients": 1, "order": "text_first",
                                   "instruction": "yes_no", "answer_tokens": 2}, progress=False)
    t = r.trials
    assert len(t) == t["case_id"].nunique() * 14 and t["patient_id"].nunique() == 1
    assert t["n_input_tokens_c"].gt(0).all() and t["family_readout_c"].isin(["yes", "no"]).all()
    assert t["answer_c"].isin(["Yes", "No", "unscoreable"]).all()
    fam = json.loads(t["token_logits_c"].iloc[0])
    assert len(fam) >= 2


@pytest.mark.parametrize("notebook", ["modalens_tables", "modalens_figures"])
@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_params_files_resolve(notebook, profile, monkeypatch):
    """Every record a ModaLens params file names resolves (mimic: on the fixture via $SHOVIR_MIMIC_JPG)."""
    from shovir_core.params import load_params

    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    params = load_params(notebook, profile)
    keys = set(params["runs"])
    assert {"P", "A"} <= keys
    for key, r in params["runs"].items():
        assert r["protocol"] == "modalens"
        spec = ml.resolve_spec(dict(r["spec"]))
        assert spec["dataset"] == r["spec"]["dataset"], "the unexpanded dataset string is hashed"
        if profile == "mimic":
            assert spec["reports"] == "dataset" and spec["ssim_size"] == 896
        else:
            assert spec["reports"] == "template"


def test_six_range_is_defined_once():
    from shovir_core.protocols import modalens as ml

    assert ml.six_range("mimic-jpg:/somewhere") == ml.SIX_RANGE == (0.2, 0.8)
    assert ml.six_range("demo-64px") == ml.SIX_RANGE_BY_DATASET["demo-64px"]
    assert ml.SPEC.defaults["six_range"] == list(ml.SIX_RANGE), "the spec's default is the same window"


def test_substitute_pairs_are_drawn_once_per_runs_root(runs_root, monkeypatch):
    """Shards and chapters share one draw of the substitute pairs (SSIM at 896 px at full scale): a second
    process finds them on disk; another seed or another copy of the drawing code draws again."""
    from shovir_core.protocols import modalens as ml
    import shovir_core.perturb as perturb

    spec = ml.resolve_spec({"dataset": "demo-64px", "model": "ref-anchored@0.5", "ssim_size": 64, "n_patients": 8})
    args = (spec["dataset"], spec["dataset_sha256"], 0, 64, float(spec["ssim_threshold"]))
    ml._PAIRS.clear()  # an earlier test in this process may hold these pairs in memory: draw them here
    first = ml._pairs(*args)
    ml._PAIRS.clear()  # as a new process
    with monkeypatch.context() as m:
        m.setattr(perturb, "sample_substitutes", lambda *a, **k: pytest.fail("drawn again"))
        pd.testing.assert_frame_equal(ml._pairs(*args), first)
    assert len(list((runs_root / ".cache" / "substitute-pairs").glob("*.parquet"))) == 1
    ml._PAIRS.clear()
    ml._pairs(spec["dataset"], spec["dataset_sha256"], 1, 64, float(spec["ssim_threshold"]))
    assert len(list((runs_root / ".cache" / "substitute-pairs").glob("*.parquet"))) == 2


def test_substitute_pairs_that_do_not_match_their_seal_are_drawn_again(runs_root):
    """An edited (or unsealed) pairs file is never read as it is: it is set aside with a warning and redrawn."""
    from shovir_core.protocols import modalens as ml

    spec = ml.resolve_spec({"dataset": "demo-64px", "model": "ref-anchored@0.5", "ssim_size": 64, "n_patients": 8})
    args = (spec["dataset"], spec["dataset_sha256"], 0, 64, float(spec["ssim_threshold"]))
    ml._PAIRS.clear()  # drawn here, not taken from this process's memory of an earlier test
    first = ml._pairs(*args)
    (path,) = (runs_root / ".cache" / "substitute-pairs").glob("*.parquet")
    tampered = first.copy()
    tampered["sub_image_id"] = tampered["image_id"]  # every case its own substitute
    tampered.to_parquet(path, index=False)
    ml._PAIRS.clear()
    with pytest.warns(RuntimeWarning, match="do not match their seal"):
        again = ml._pairs(*args)
    pd.testing.assert_frame_equal(again, first)
    assert path.with_suffix(".bad").is_file()
    ml._PAIRS.clear()
    path.with_suffix(".sha256").unlink()  # a process killed between the file and its seal
    with pytest.warns(RuntimeWarning, match="missing"):
        pd.testing.assert_frame_equal(ml._pairs(*args), first)
