"""Every record a credentialed chapter makes has the paper's denominator or a stated reason why there is
none (shovir_core/resources/denominators.yaml), the denominators are derived from the stored published
values, and a record's trials are set beside them honestly (equal, a named difference, or unexplained)."""
import pytest

from shovir_core.papers import load_values
from shovir_core.params import load_params, profiles_of, toc_notebooks
from shovir_core.rehearsal.denominators import (DIFFERS, EQUAL, NO_COUNT, UNEXPLAINED, compare, load_rules,
                                                record_denominator)
from shovir_core.rehearsal.synthetic import planted


def _records(profile):
    for chapter in toc_notebooks():
        if profile in profiles_of(chapter):
            for key, run in load_params(chapter, profile)["runs"].items():
                yield chapter, key, run["protocol"], run["spec"]


@pytest.mark.parametrize("profile", ["mimic", "padchest"])
def test_every_credentialed_record_has_a_denominator_or_a_reason(profile):
    records = list(_records(profile))
    assert len(records) > 50  # the profile's chapters were found
    missing = []
    for chapter, key, protocol, spec in records:
        d = record_denominator(chapter=chapter, key=key, protocol=protocol, spec=spec, profile=profile)
        if d["reason"] is None or d["reason"].startswith("no rule") or (d["paper_trials"] is None and d["paper_item"] != NO_COUNT):
            missing.append(f"{chapter}/{key} ({protocol})")
        elif d["paper_trials"] is not None:
            assert d["paper_trials"] > 0 and d["paper_trials_scaled"] == d["paper_trials"], (chapter, key, d)
    assert not missing, f"records with neither a paper denominator nor a stated reason: {missing}"


def _d(chapter, key, profile="mimic", scale=1.0):
    run = load_params(chapter, profile)["runs"][key]
    return record_denominator(chapter=chapter, key=key, protocol=run["protocol"], spec=run["spec"], profile=profile,
                              scale=scale)


def test_denominators_are_the_papers_stated_counts():
    """Derived, not typed: the expressions reproduce the counts the papers state (ModaLens §3, App. F, N.3;
    ShoViR §3.1)."""
    ml, sv = load_values("modalens"), load_values("shovir")
    assert _d("modalens_tables", "P")["paper_trials"] == ml["design.all14_trials"].value  # 44,786
    assert _d("modalens_s41", "P_seed1")["paper_trials"] == ml["design.cases"].value  # one-question
    assert _d("modalens_appf", "qwen9_six_P")["paper_trials"] == ml["f.six.trials"].value  # 19,194
    assert _d("modalens_appn_interventions", "steer")["paper_trials"] == \
        ml["n3.findings"].value * ml["n3.cases_per_finding"].value
    assert _d("modalens_appn", "ko_report")["paper_trials"] == ml["n2.cases"].value
    t1 = _d("shovir_table1", "maira-2", profile="padchest")
    assert t1["paper_trials"] == 2 * sv["a1.padchest.final_images"].value and t1["compare"] == "cells Baseline, FullNoise"
    assert _d("shovir_table1", "maira-2")["paper_trials"] == 2 * sv["a1.mimic.final_images"].value
    assert "ModaLens" in _d("modalens_tables", "P")["paper_item"] and "§3" in _d("modalens_tables", "P")["paper_item"]
    assert _d("modalens_ablation", "blind_full")["paper_item"] == NO_COUNT


def test_a_reduced_rehearsal_evaluates_the_denominator_at_its_planted_sizes(monkeypatch):
    from shovir_core.rehearsal.scaling import REHEARSAL_SCALE_ENV

    # the reduced rehearsal's own specs (sizes scaled: §4.2's 40 patients become the tree's) match the same rules
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "0.01")
    assert load_params("modalens_ablation", "mimic")["runs"]["blind_full"]["spec"]["n_patients"] != 40
    assert _d("modalens_ablation", "blind_full", scale=0.01)["paper_item"] == NO_COUNT
    assert _d("modalens_appn", "ko_report", scale=0.01)["paper_trials_scaled"] == \
        load_params("modalens_appn", "mimic")["runs"]["ko_report"]["spec"]["knockout_n_cases"]
    # a scaled fixed sample size is drawn from what the reduced tree holds: the 1 % tree had 15 steering cases per
    # finding where 20 were asked for, a reduced-scale difference, not a design's
    steer = _d("modalens_appn_interventions", "steer", scale=0.01)
    assert not steer["exact_scaling"]
    short = compare(steer, trials=1000, counts={"n_trials_run": steer["paper_trials_scaled"] - 60})
    assert short["verdict"] == DIFFERS and short["reason"].startswith("reduced scale")
    assert _d("modalens_appn_interventions", "steer")["exact_scaling"]  # at full scale the paper's 150 per finding
    p = planted(0.01)
    assert _d("modalens_tables", "P", scale=0.01)["paper_trials_scaled"] == p["ml_cases"] * 14
    assert _d("modalens_s41", "P_seed0", scale=0.01)["paper_trials_scaled"] == p["ml_cases"]
    pc = _d("shovir_table1", "cxrmate", profile="padchest", scale=0.02)
    assert pc["paper_trials_scaled"] == 2 * planted(0.02)["sv_padchest_images"] and pc["exact_scaling"]
    # App. K's shown images are not planted: only the paper's count times the scale, and said to be
    k = _d("modalens_appk", "scores", scale=0.01)
    assert not k["exact_scaling"] and k["paper_trials_scaled"] == round(k["paper_trials"] * 0.01)


def test_compare_names_every_difference():
    d = _d("modalens_tables", "P", scale=0.01)
    n = d["paper_trials_scaled"]
    assert compare(d, trials=n)["verdict"] == EQUAL
    off = compare(d, trials=n + 3)
    assert off["verdict"] == UNEXPLAINED and off["difference"] == 3 and "expects the paper's count" in off["reason"]
    text = _d("modalens_text_controls", "findings_only")
    assert compare(text, trials=text["paper_trials"] - 7)["verdict"] == DIFFERS
    assert compare(_d("modalens_ablation", "blind_full"), trials=10)["verdict"] == NO_COUNT
    k = _d("modalens_appk", "scores", scale=0.01)
    shown = compare(k, trials=k["paper_trials_scaled"] + 1)
    assert shown["verdict"] == DIFFERS and shown["reason"].startswith(("reduced scale", "one row"))
    t1 = _d("shovir_table1", "cxrmate", profile="padchest", scale=0.02)
    images = t1["paper_trials_scaled"] // 2
    cells = {"Baseline|-": images, "FullNoise|-": images, "RO|Atelectasis": 240, "OCO|Atelectasis": 240}
    out = compare(t1, trials=sum(cells.values()), counts={"cells": cells})
    assert out["verdict"] == EQUAL and out["compared_trials"] == 2 * images
    assert compare(t1, trials=sum(cells.values()),
                   counts={"cells": {**cells, "Baseline|-": images - 1}})["verdict"] == UNEXPLAINED
    # a count the record states: the steering's test trials, not its rows (one per trial and cell)
    steer = _d("modalens_appn_interventions", "steer")
    assert steer["compare"] == "count n_trials_run"
    rows = 4 * steer["paper_trials"]
    assert compare(steer, trials=rows, counts={"n_trials_run": steer["paper_trials"]})["verdict"] == EQUAL
    assert compare(steer, trials=rows, counts={})["verdict"] == UNEXPLAINED  # the count is missing: said so


def test_every_rule_is_reachable_and_reasoned():
    """A rule no credentialed record matches is dead weight (or a typo in its match)."""
    import shovir_core.rehearsal.denominators as dn

    used = set()
    for profile in ("mimic", "padchest"):
        for chapter, key, protocol, spec in _records(profile):
            full = {**dn.protocol_defaults(protocol), **spec}
            rule = dn._rule_for(chapter=chapter, key=key, protocol=protocol, profile=profile, spec=full)
            used.add(id(rule))
    rules = load_rules()["rules"]
    assert all(r["reason"] for r in rules)
    unused = [r["match"] for r in rules if id(r) not in used]
    assert not unused, f"rules that match no record of the credentialed profiles: {unused}"
