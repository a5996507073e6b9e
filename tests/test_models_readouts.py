"""Readout arithmetic, answer parsing, prompt text and request validation (no torch needed)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shovir_core.models import (
    FRAMINGS, INSTRUCTIONS, SCORE_KEYS, ScoreRequest, TokenFamilies, logsumexp, parse_answer, score_messages,
    text_block, yes_no_readout,
)
from shovir_core.models.readouts import family_variants

FAM = TokenFamilies(yes_id=0, no_id=1, yes_family=(0, 2, 4), no_family=(1, 3), names={0: "yes", 1: "no", 2: "Yes",
                                                                                     3: "No", 4: " yes"})


def test_logsumexp_matches_direct_formula_and_is_stable():
    v = np.array([0.5, -1.0, 2.0])
    assert logsumexp(v) == pytest.approx(np.log(np.exp(v).sum()))
    assert logsumexp(np.array([1000.0, 1000.0])) == pytest.approx(1000.0 + np.log(2.0))
    with pytest.raises(ValueError):
        logsumexp(np.array([]))


def test_readout_arithmetic_by_hand():
    logits = np.array([1.0, 2.0, 3.0, 0.0, 1.5, -4.0])
    r = yes_no_readout(logits, FAM)
    norm = np.log(np.exp(logits).sum())
    assert r["logit_yes"] == 1.0 and r["logit_no"] == 2.0
    assert r["margin"] == pytest.approx(-1.0) and r["readout"] == "no"
    fy, fn = np.log(np.exp(1.0) + np.exp(3.0) + np.exp(1.5)), np.log(np.exp(2.0) + np.exp(0.0))
    assert r["family_logit_yes"] == pytest.approx(fy) and r["family_logit_no"] == pytest.approx(fn)
    assert r["family_margin"] == pytest.approx(fy - fn) and r["family_readout"] == "yes"
    assert r["logp_yes"] == pytest.approx(1.0 - norm) and r["logp_no"] == pytest.approx(2.0 - norm)
    assert r["family_logp_yes"] == pytest.approx(fy - norm)
    assert r["top1_id"] == 2 and r["top1_prob"] == pytest.approx(np.exp(3.0 - norm))
    assert r["token_logits"] == {"yes": 1.0, "Yes": 3.0, " yes": 1.5, "no": 2.0, "No": 0.0}
    # the margin is invariant to a constant shift of all logits; log-probs are too
    s = yes_no_readout(logits + 7.0, FAM)
    assert s["margin"] == pytest.approx(r["margin"]) and s["logp_yes"] == pytest.approx(r["logp_yes"])


def test_readout_ties_read_no_and_rejects_2d():
    r = yes_no_readout(np.zeros(6), FAM)
    assert r["readout"] == "no" and r["margin"] == 0.0
    with pytest.raises(ValueError, match="1-D"):
        yes_no_readout(np.zeros((2, 6)), FAM)


def test_token_families_from_tokenizer_and_paper_check():
    vocab = {"yes": 10, "Yes": 11, " yes": 12, " Yes": 13, "no": 20, "No": 21, " no": 22, " No": 23}
    fam = TokenFamilies.from_tokenizer(lambda s: [vocab[s]], lambda i: {v: k for k, v in vocab.items()}[i])
    assert (fam.yes_id, fam.no_id) == (10, 20)
    assert fam.yes_family == (10, 11, 12, 13) and fam.no_family == (20, 21, 22, 23)
    fam.check({"yes_id": 10, "no_family": (23, 22, 21, 20)}, model="m")
    with pytest.raises(ValueError, match="paper states"):
        fam.check({"yes_id": 4443}, model="m")
    with pytest.raises(ValueError, match="not one token"):
        TokenFamilies.from_tokenizer(lambda s: [1, 2], lambda i: "x", model="m")
    assert family_variants("Yes") == ("yes", "Yes", " yes", " Yes")


@pytest.mark.parametrize("text, options, expected", [
    ("Yes", ("Yes", "No"), ("Yes", True)),
    ("  **No**.", ("Yes", "No"), ("No", False)),
    ("No.", ("Yes", "No"), ("No", True)),
    ("Yes, there is an effusion", ("Yes", "No"), ("Yes", True)),
    ("yes, there is", ("Yes", "No"), ("Yes", False)),
    ("Nodule present", ("Yes", "No"), ("unscoreable", False)),
    ("Based on the provided report", ("Yes", "No"), ("unscoreable", False)),
    ("Uncertain", ("Yes", "No"), ("unscoreable", False)),
    ("Uncertain.", ("Yes", "No", "Uncertain"), ("Uncertain", True)),
    ("", ("Yes", "No"), ("unscoreable", False)),
    ("1. Yes", ("Yes", "No"), ("unscoreable", False)),
    (None, ("Yes", "No"), (None, None)),
])
def test_parse_answer(text, options, expected):
    assert parse_answer(text, options=options) == expected


def test_text_block_variants():
    q = "Does this chest X-ray show Edema?"
    assert text_block(ScoreRequest(None, q, report="Mild edema.")) == f"Report: Mild edema.\n\nQuestion: {q}"
    assert text_block(ScoreRequest(None, q)) == f"Question: {q}"
    assert text_block(ScoreRequest(None, q, instruction="no_yes")) == f"Question: {q} Answer with exactly No or Yes."
    assert text_block(ScoreRequest(None, q, instruction="yes_no_uncertain")).endswith(INSTRUCTIONS["yes_no_uncertain"])
    framed = text_block(ScoreRequest(None, q, report="R.", framing="warning", instruction="yes_no"))
    assert framed == f"{FRAMINGS['warning']}\nReport: R.\n\nQuestion: {q} {INSTRUCTIONS['yes_no']}"


def test_messages_blocks_and_order():
    img = np.zeros((8, 8), np.uint8)
    q = "Does this chest X-ray show Edema?"
    assert [b["type"] for b in score_messages(ScoreRequest(img, q))[0]["content"]] == ["image", "text"]
    assert [b["type"] for b in score_messages(ScoreRequest(img, q, order="text_first"))[0]["content"]] == ["text", "image"]
    assert [b["type"] for b in score_messages(ScoreRequest(None, q))[0]["content"]] == ["text"]


@pytest.mark.parametrize("kwargs, match", [
    ({"question": ""}, "non-empty"),
    ({"order": "sideways"}, "order"),
    ({"instruction": "shout"}, "instruction"),
    ({"framing": "historical"}, "needs a report"),
    ({"framing": "poetic", "report": "r"}, "framing"),
    ({"image": np.zeros((2, 2, 2, 2))}, "shape"),
])
def test_request_validation_names_the_problem(kwargs, match):
    base = {"image": None, "question": "Does this chest X-ray show Edema?"}
    with pytest.raises(ValueError, match=match):
        ScoreRequest(**{**base, **kwargs})


def test_reference_results_carry_every_score_key():
    from shovir_core.models import get_model

    out = get_model("ref-blind-prior").score_yes_no([ScoreRequest(None, "Is Edema present on this chest X-ray?")],
                                                    answer_tokens=8)
    assert set(out[0]) == set(SCORE_KEYS)
    assert out[0]["answer"] in ("Yes", "No") and out[0]["compliant"] is True


def test_importing_models_does_not_import_torch():
    code = ("import sys, shovir_core.models as m; m.get_model('ref-report-reader'); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
