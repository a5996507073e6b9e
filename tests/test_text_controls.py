"""Report text-content controls (ModaLens Table 18): section parser, sentences, transforms."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core.data import text_controls as tc
from shovir_core.data.template_reports import POSITIVE_FORMS, template_report
from shovir_core.labels import FINDINGS_13
from shovir_core.models.report_text import read_report

REPORTS = Path(__file__).parent / "fixtures" / "mimic_jpg" / "mimic-cxr-reports" / "files"


# --------------------------------------------------------------------------- sections
@pytest.mark.parametrize("text, findings, impression", [
    ("FINAL REPORT\n EXAMINATION: CHEST (PA AND LAT)\n\n FINDINGS: The heart is enlarged. No pneumothorax.\n\n"
     " IMPRESSION: Cardiomegaly.\n", "The heart is enlarged. No pneumothorax.", "Cardiomegaly."),
    ("FINDINGS: Lungs are clear. IMPRESSION: No acute process.", "Lungs are clear.", "No acute process."),
    ("Findings: Small effusion.\nImpression: Effusion.", "Small effusion.", "Effusion."),
    ("FINDINGS:\nMild edema.\n\nIMPRESSIONS:\n1. Edema.", "Mild edema.", "1. Edema."),
    ("FINDINGS: Opacity at the right base.\nCONCLUSION: Pneumonia.", "Opacity at the right base.", "Pneumonia."),
    ("INDICATION: Cough.\nFINDINGS: Clear lungs.\nRECOMMENDATION(S): None.\nIMPRESSION: Normal.",
     "Clear lungs.", "Normal."),
    ("COMPARISON: None. FINDINGS: Lungs are clear.", "Lungs are clear.", None),
    ("IMPRESSION: Cardiomegaly.", None, "Cardiomegaly."),
    ("FINDINGS: Lungs are clear.\nIMPRESSION:\n", "Lungs are clear.", None),
    ("No header at all, just text.", None, None),
])
def test_parse_sections_variants(text, findings, impression):
    s = tc.parse_sections(text)
    assert (s.findings, s.impression) == (findings, impression)
    assert s.has_both == (findings is not None and impression is not None)


def test_combined_section_is_not_two_sections():
    for text in ("FINDINGS AND IMPRESSION: No acute process.", "FINDINGS/IMPRESSION: Clear lungs."):
        s = tc.parse_sections(text)
        assert s.combined and not s.has_both and s.findings is None and s.impression is None
        assert tc.apply_text_control("findings_only", text, finding="Edema") is None


def test_section_controls_keep_the_header_and_exclude_single_section_reports():
    text = (REPORTS / "p90" / "p90000032" / "s90414267.txt").read_text()
    assert tc.apply_text_control("findings_only", text, finding="Cardiomegaly") == (
        "FINDINGS: The heart is enlarged. Possible small left pleural effusion. No pneumothorax.")
    assert tc.apply_text_control("impression_only", text, finding="Cardiomegaly") == "IMPRESSION: Cardiomegaly."
    only_findings = (REPORTS / "p90" / "p90000898" / "s90771383.txt").read_text()
    assert tc.apply_text_control("impression_only", only_findings, finding="composite") is None


# --------------------------------------------------------------------------- sentences and mentions
def test_split_sentences_keeps_decimals_and_drops_headers():
    text = "FINDINGS: A 1.5 cm nodule. No effusion\nIMPRESSION: Nodule."
    assert tc.split_sentences(text) == ["A 1.5 cm nodule.", "No effusion", "Nodule."]


def test_mentions_use_the_labeller_lexicon_patterns_and_negations():
    assert tc.mentions("The heart is enlarged.") == frozenset({"Cardiomegaly"})
    assert tc.mentions("No pleural effusion or pneumothorax.") == frozenset({"Pleural Effusion", "Pneumothorax"})
    assert tc.mentions("The weather is fine.") == frozenset()
    assert tc.names_finding("No acute cardiopulmonary process.", "composite")
    assert not tc.names_finding("No acute cardiopulmonary process.", "Edema")
    with pytest.raises(ValueError, match="unknown finding"):
        tc.names_finding("x", "Emphysema")


def test_remove_finding_drops_every_sentence_naming_it_and_empty_headers():
    text = "FINDINGS: The heart is enlarged. No pneumothorax.\nIMPRESSION: Cardiomegaly."
    out = tc.remove_finding(text, "Cardiomegaly")
    assert out == "FINDINGS: No pneumothorax."
    assert read_report(out)["Cardiomegaly"] == 0.0
    assert tc.remove_finding(text, "composite") == ""
    assert tc.remove_finding(text, "Edema") == text  # nothing names edema: unchanged


@pytest.mark.parametrize("finding", FINDINGS_13)
@pytest.mark.parametrize("label", [0, 1])
def test_answer_and_opposite_sentences_state_the_label(finding, label):
    sentence = tc.answer_sentence(finding, label)
    assert tc.names_finding(sentence, finding)
    assert read_report(sentence)[finding] == (1.0 if label else -1.0)
    codes = {finding: 1.0} if label else {finding: 0.0}
    report = template_report(codes, negatives="all")
    flipped = tc.replace_with_opposite(report, finding, label)
    assert read_report(flipped)[finding] == (-1.0 if label else 1.0), flipped
    assert sum(tc.names_finding(s, finding) for s in tc.split_sentences(flipped)) == 1


def test_composite_sentences():
    no = tc.answer_sentence("composite", 0)
    assert all(v == -1.0 for v in read_report(no).values()), "the negative composite sentence negates all 13"
    yes = tc.answer_sentence("composite", 1)
    assert tc.names_finding(yes, "composite") and all(v == 0.0 for v in read_report(yes).values())
    report = template_report({"Pneumothorax": 0.0, "Edema": 0.0})
    assert tc.replace_with_opposite(report, "composite", 0) == f"FINDINGS: {yes}"
    with pytest.raises(ValueError, match="label"):
        tc.answer_sentence("composite", 0.5)


def test_opposite_is_inserted_at_the_findings_start_when_nothing_names_the_finding():
    out = tc.replace_with_opposite("EXAMINATION: Chest.\nFINDINGS: Lungs are clear.\nIMPRESSION: Normal.",
                                   "Edema", 0)
    assert out == "EXAMINATION: Chest.\nFINDINGS: There is pulmonary edema. Lungs are clear.\nIMPRESSION: Normal."
    assert tc.replace_with_opposite("Lungs are clear.", "Edema", 1) == "No pulmonary edema. Lungs are clear."


# --------------------------------------------------------------------------- random controls
@pytest.mark.parametrize("pool", [tc.NEUTRAL_SENTENCES, tc.BOILERPLATE_SENTENCES])
def test_pools_carry_no_finding(pool):
    for sentence in pool:
        assert tc.mentions(sentence) == frozenset(), sentence
        assert not tc.names_finding(sentence, "composite"), sentence
        assert all(v == 0.0 for v in read_report(sentence).values()), sentence
        parsed = tc.parse_sections(sentence)
        assert parsed.findings is None and parsed.impression is None


@pytest.mark.parametrize("control", tc.RANDOM_CONTROLS)
def test_random_controls_are_length_matched_and_seeded_per_case(control):
    text = template_report({"Cardiomegaly": 1.0, "Edema": 0.0, "Pneumothorax": 0.0, "Pleural Effusion": -1.0})
    longest = max(len(w) for p in (tc.NEUTRAL_SENTENCES, tc.BOILERPLATE_SENTENCES) for s in p for w in s.split())
    outs = {}
    for case in ("a", "b", "c"):
        out = tc.apply_text_control(control, text, finding="Edema", seed=0, case_id=case)
        assert out == tc.apply_text_control(control, text, finding="Cardiomegaly", seed=0, case_id=case), \
            "the draw depends on the case, not on the question"
        assert len(text) - longest - 2 <= len(out) <= len(text) and out.endswith(".")
        outs[case] = out
    assert len(set(outs.values())) == 3
    assert tc.apply_text_control(control, text, finding="Edema", seed=1, case_id="a") != outs["a"]
    assert len(tc.apply_text_control(control, "x" * 2000, finding="Edema", case_id="a")) > 1900


def test_length_matched_short_targets_and_errors():
    rng = np.random.default_rng(0)
    assert len(tc.length_matched(3, tc.NEUTRAL_SENTENCES, rng)) >= 2
    with pytest.raises(ValueError, match="n_chars"):
        tc.length_matched(0, tc.NEUTRAL_SENTENCES, rng)


def test_apply_text_control_identity_exclusions_and_errors():
    text = "FINDINGS: There is edema.\nIMPRESSION: Edema."
    assert tc.apply_text_control("none", text, finding="Edema") == text
    assert tc.apply_text_control("answer_sentence", text, finding="Edema", label=float("nan")) is None
    assert tc.apply_text_control("opposite_label", text, finding="Edema", label=None) is None
    shown = tc.apply_text_control("answer_sentence", text, finding="Edema", label=1.0, case_id="c1")
    assert shown in {f.format(phrase="pulmonary edema", Phrase="Pulmonary edema") for f in POSITIVE_FORMS}
    assert shown == tc.apply_text_control("answer_sentence", text, finding="Edema", label=1.0, case_id="c1")
    with pytest.raises(ValueError, match="unknown text control"):
        tc.apply_text_control("shuffled", text, finding="Edema")


@pytest.mark.parametrize("finding", [*FINDINGS_13, "composite"])
def test_answer_sentence_phrasing_is_drawn_per_case_and_states_the_label(finding):
    """Cases asking the same finding see different answer sentences, each stating the source label."""
    from shovir_core.labeling import label_reports

    labels = (0, 1) if finding != "composite" else (0,)
    for label in labels:
        shown = {tc.apply_text_control("answer_sentence", "FINDINGS: x.", finding=finding, label=float(label),
                                       case_id=f"case{k}") for k in range(40)}
        assert len(shown) >= (4 if finding != "composite" else 30), (finding, label, shown)
        for sentence in shown:
            assert tc.names_finding(sentence, finding)
            read = read_report(sentence)
            codes = label_reports([sentence], labeller="rules").iloc[0]
            targets = [finding] if finding != "composite" else list(FINDINGS_13)
            for f in targets:
                assert read[f] == (1.0 if label else -1.0), (sentence, f)
                assert codes[f] == float(label), (sentence, f)
