"""ModaLens prompt variants end to end on the MIMIC-CXR-JPG fixture: framing, text controls,
second template, option order and the Uncertain option (Appendices D, L, M; Table 18)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.data.text_controls import TEXT_CONTROLS, parse_sections
from shovir_core.models.reference import FRAMING_DISCOUNT
from shovir_core.protocols import modalens as ml
from shovir_core.protocols import run

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
BASE = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32, "design": "one_q"}
COLS = ["trial_id", "readout_c", "readout_d", "margin_c", "margin_d", "answer_c", "answer_d"]


def _sorted(t: pd.DataFrame, cols=COLS) -> pd.DataFrame:
    return t[cols].sort_values("trial_id").reset_index(drop=True)


def test_new_spec_fields_resolve_and_validate():
    spec = ml.resolve_spec(dict(BASE))
    assert spec["framing"] == "none" and spec["text_control"] == "none" and spec["text_control_seed"] == 0
    warned = ml.resolve_spec({**BASE, "framing": "warning"})
    assert ml.arm_label(warned).endswith("+framing=warning")
    assert ml.arm_label(ml.resolve_spec({**BASE, "template": "alt", "text_control": "answer_sentence"})) == \
        "P/image_first/none/image+template=alt+text_control=answer_sentence"
    for bad, match in (({"framing": "sarcastic"}, "framing"), ({"text_control": "shuffle"}, "text_control"),
                       ({"framing": "warning", "report": "absent"}, "needs report: present"),
                       ({"text_control": "neutral_prose", "report": "absent"}, "needs report: present"),
                       ({"text_control_seed": -1}, "text_control_seed")):
        with pytest.raises(ValueError, match=match):
            ml.resolve_spec({**BASE, **bad})


def test_framing_reaches_the_model_and_the_planted_discount(runs_root):
    plain = run("modalens", "t.plain", {**BASE, "model": "ref-anchored@0.5", "instruction": "yes_no"},
                progress=False).trials
    warn = run("modalens", "t.warn", {**BASE, "model": "ref-anchored@0.5", "instruction": "yes_no",
                                      "framing": "warning"}, progress=False).trials
    hist = run("modalens", "t.hist", {**BASE, "model": "ref-anchored@0.5", "instruction": "yes_no",
                                      "framing": "historical"}, progress=False).trials
    quarter = run("modalens", "t.quarter", {**BASE, "model": "ref-anchored@0.25", "instruction": "yes_no"},
                  progress=False).trials
    assert (warn["framing"] == "warning").all() and (plain["framing"] == "none").all()
    assert (warn["input_hash_c"] != plain["input_hash_c"]).all(), "the framing sentence is part of the input"
    assert FRAMING_DISCOUNT["warning"] * 0.5 == 0.25 and FRAMING_DISCOUNT["historical"] == 1.0
    pd.testing.assert_frame_equal(_sorted(warn), _sorted(quarter))
    pd.testing.assert_frame_equal(_sorted(hist), _sorted(plain))
    # the discount is visible exactly on the pairs whose gate lies in [w/2, w): they follow the report
    # without the warning and the image with it (the fixture's trials may or may not hold one)
    from shovir_core.models.reference import Anchored

    p = _sorted(plain, cols=[*COLS, "report_sha256", "finding"])
    between = np.array([0.25 <= Anchored.gate(h, f) < 0.5 for h, f in zip(p["report_sha256"], p["finding"])])
    differs = ~np.isclose(_sorted(warn)["margin_c"].to_numpy(), p["margin_c"].to_numpy())
    assert (differs <= between).all(), "the warning changes only the pairs whose gate lies in [w/2, w)"


@pytest.fixture
def reader_arms(runs_root):
    out = {}
    for control in TEXT_CONTROLS:
        out[control] = run("modalens", f"t.reader.{control}",
                           {**BASE, "model": "ref-report-reader", "text_control": control}, progress=False)
    out["absent"] = run("modalens", "t.reader.absent", {**BASE, "model": "ref-report-reader", "report": "absent"},
                        progress=False)
    return out


def test_text_controls_records(reader_arms):
    full = reader_arms["none"].trials
    assert len(full) == 6
    for control in TEXT_CONTROLS:
        r = reader_arms[control]
        t = r.trials
        assert (t["text_control"] == control).all()
        if control in ("findings_only", "impression_only"):
            # fixture reports: 5 of the 6 source studies have both FINDINGS and IMPRESSION
            both = sum(parse_sections(p.read_text()).has_both
                       for p in (FIXTURE / "mimic-cxr-reports").rglob("*.txt")
                       if p.stem[1:] in set(full["study_id"]))
            assert len(t) == both < len(full)
            assert r.manifest["counts"]["n_text_control_excluded"] == len(full) - both
        else:
            assert set(t["trial_id"]) == set(full["trial_id"])
            assert r.manifest["counts"]["n_text_control_excluded"] == 0
        if control != "none":
            same = t.set_index("trial_id")["report_sha256"] == full.set_index("trial_id")["report_sha256"].reindex(
                t["trial_id"])
            assert not same.all(), f"{control} leaves every report unchanged"


def test_reader_follows_the_rewritten_report(reader_arms):
    t = {k: r.trials.set_index("trial_id") for k, r in reader_arms.items()}
    findings = t["none"]["finding"] != ml.COMPOSITE
    yes = lambda s: (s == "yes").astype(float)  # noqa: E731
    # the answer sentence states the source label; the opposite sentence its negation
    ans = t["answer_sentence"]
    assert (yes(ans["readout_c"]) == ans["target_c"]).all() and (yes(ans["readout_d"]) == ans["target_c"]).all()
    opp = t["opposite_label"]
    assert (yes(opp.loc[findings, "readout_c"]) != opp.loc[findings, "target_c"]).all()
    # without any finding sentence the reader answers as without a report
    for control in ("finding_removed", "neutral_prose", "boilerplate"):
        pd.testing.assert_series_equal(t[control]["readout_c"], t["absent"]["readout_c"], check_names=False)
    for control, r in t.items():
        assert (r["readout_c"] == r["readout_d"]).all(), f"the reader ignores the image ({control})"


def test_template_order_and_instructions_leave_reference_answers_unchanged(runs_root):
    base = {**BASE, "model": "ref-anchored@0.5", "instruction": "yes_no"}
    ref = run("modalens", "t.ref", base, progress=False).trials
    for name, extra in (("alt", {"template": "alt"}), ("rev", {"instruction": "no_yes"}),
                        ("tf", {"order": "text_first"})):
        t = run("modalens", f"t.{name}", {**base, **extra}, progress=False).trials
        pd.testing.assert_frame_equal(_sorted(t), _sorted(ref))
    alt = run("modalens", "t.alt", {**base, "template": "alt"}, progress=False).trials
    assert alt["question"].str.startswith("Is ").all() and (alt["template_id"] == "alt").all()


def test_uncertain_option_is_parsed_and_counted(runs_root):
    t = run("modalens", "t.unc", {**BASE, "model": "ref-anchored@0.5", "instruction": "yes_no_uncertain"},
            progress=False).trials
    for side in "cd":
        p = 1 / (1 + np.exp(-t[f"margin_{side}"].to_numpy()))
        expect = np.where((p > 0.4) & (p < 0.6), "Uncertain", np.where(p > 0.5, "Yes", "No"))
        assert (t[f"answer_{side}"].to_numpy() == expect).all()
        assert t[f"compliant_{side}"].all()
    assert set(t["answer_c"]) <= {"Yes", "No", "Uncertain"}


def test_prefill_arms_scores_arms_together_and_execute_finds_every_output(runs_root):
    from shovir_core.models.cache import InferenceCache, default_cache_dir

    arms = [(f"t.pool.{k}", {**BASE, "model": "tiny-gemma3", "n_patients": 1, **extra})
            for k, extra in (("P", {}), ("instr", {"instruction": "yes_no"}), ("alt", {"template": "alt"}),
                             ("warn", {"instruction": "yes_no", "framing": "warning"}), ("A", {"report": "absent"}))]
    counts = ml.prefill_arms(arms, progress=False)
    assert counts["groups"] == 1 and counts["arms"] == 5 and counts["requests"] > 0
    cache = InferenceCache(default_cache_dir())
    n = len(cache)
    assert n == counts["requests"], "every request of every arm is in the inference cache"
    records = [run("modalens", name, spec, progress=False) for name, spec in arms]
    assert len(InferenceCache(default_cache_dir())) == n, "the records computed nothing new"
    assert all(len(r.trials) == len(records[0].trials) for r in records)
    assert ml.prefill_arms(arms, progress=False)["groups"] == 0, "complete records are skipped"


def test_a_shard_prefills_its_own_cases_and_its_records_compute_nothing_new(runs_root):
    """Cluster shards pool their arms too: ``prefill(..., shard=s)`` scores exactly the cases that
    shard ``s`` of every arm holds -- also for a section arm that drops cases -- so making the
    shard's records runs no model call."""
    from shovir_core.models.cache import InferenceCache, default_cache_dir
    from shovir_core.protocols import prefill, shards
    from shovir_core.records import Shard

    arms = [(f"t.shard.{k}", {**BASE, "model": "tiny-gemma3", **extra})
            for k, extra in (("P", {}), ("instr", {"instruction": "yes_no"}), ("A", {"report": "absent"}),
                             ("fo", {"text_control": "findings_only"}))]
    shard = Shard(0, 2)
    prefill([("modalens", name, spec) for name, spec in arms], progress=False, shard=shard)
    n = len(InferenceCache(default_cache_dir()))
    cases = ml.build_cases(ml.resolve_spec(arms[0][1]))[0]["case_id"]
    own = set(shards.mine(cases, shard))
    assert 0 < len(own) < cases.nunique(), "the fixture splits into two non-empty shards"
    for name, spec in arms:
        record = run("modalens", name, spec, progress=False, shard=shard)
        trials = record.trials
        assert set(trials["case_id"]) <= own
    assert len(InferenceCache(default_cache_dir())) == n, "the shard's records computed nothing new"
    assert set(trials["case_id"]) < own, "the section arm drops a case of this shard (the fixture has one)"
    prefill([("modalens", name, spec) for name, spec in arms], progress=False, shard=Shard(1, 2))
    assert len(InferenceCache(default_cache_dir())) > n, "shard 0 left the other shard's cases alone"


def test_variant_changes_names_what_a_variant_moved():
    import pandas as pd

    from shovir_core.metrics.prompt_variants import variant_changes

    d = pd.DataFrame({"trial_id": list("abc"), "readout_c": [1, 0, 1], "readout_d": [0, 0, 1],
                      "margin_c": [0.3, -0.1, 0.2], "margin_d": [-0.4, -0.2, 0.1], "answer_c": ["yes", "no", "yes"]})
    assert variant_changes(d, d.sample(frac=1, random_state=0)) == []
    assert variant_changes(d, d.assign(readout_c=[1, 1, 1])) == ["readout_c differs on 1 of 3 trials"]
    assert variant_changes(d, d.assign(margin_d=[-0.4, -0.2, 0.1 + 1e-9])) == ["margin_d moves by up to 1e-09"]
    assert variant_changes(d, d.assign(answer_c=["yes", "yes", "yes"]), columns=("answer_c",), margins=()) \
        == ["answer_c differs on 1 of 3 trials"]
    assert variant_changes(d, d.iloc[:2]) == ["the variant lacks 1 and adds 0 of the default's 3 trials"]
    more = pd.concat([d, d.iloc[:1].assign(trial_id="z")])
    assert variant_changes(d, more) == [] and len(variant_changes(d, more, same_trials=True)) == 1
