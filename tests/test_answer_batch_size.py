"""The ModaLens answer batch size comes from the profile (execution-only) and never changes an answer."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core.models import ScoreRequest
from shovir_core.models.tiny import build_tiny
from shovir_core.protocols import modalens as ml

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"


def _requests():
    rng = np.random.default_rng(3)
    imgs = [rng.integers(0, 256, (48, 48), dtype=np.uint8) for _ in range(2)]
    qs = ["Does this chest X-ray show edema?", "Does this chest X-ray show cardiomegaly?"]
    return [ScoreRequest(im, q, report=rep) for im in imgs for q in qs for rep in (None, "FINDINGS: Edema.")]


@pytest.mark.parametrize("setting", [1, 3, "auto"])
def test_any_answer_batch_size_gives_the_same_answers(setting):
    model = build_tiny("tiny-gemma3")
    requests = _requests()
    base = model.score_yes_no(requests, answer_tokens=3)
    passes = model.stats["forward_passes"]
    model.answer_batch_size = setting
    model.stats["forward_passes"] = 0
    got = model.score_yes_no(requests, answer_tokens=3)
    for a, b in zip(base, got):
        assert a["generated"] == b["generated"] and a["logit_yes"] == pytest.approx(b["logit_yes"], abs=1e-4)
    if setting == 1:
        assert model.stats["forward_passes"] > passes, "one request per batch takes more passes"
    assert model.provenance()["decoding"]["answer_batch_size"] == setting


def test_bad_answer_batch_sizes_are_refused():
    model = build_tiny("tiny-gemma3")
    for bad in (0, -2, "big", True, 1.5):
        with pytest.raises(ValueError, match="answer_batch_size"):
            model.answer_batch_size = bad
    base = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32, "model": "tiny-gemma3"}
    with pytest.raises(Exception, match="answer_batch_size"):
        ml.resolve_spec({**base, "answer_batch_size": 0})


def test_answer_batch_size_is_execution_only():
    base = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32, "model": "tiny-gemma3"}
    assert ml.resolve_spec({**base, "answer_batch_size": "auto"}) == ml.resolve_spec(base)
    assert ml.SPEC.execution({**base, "answer_batch_size": 4})["answer_batch_size"] == 4


def test_a_replacement_report_prompt_goes_where_the_model_keeps_its_prompt():
    """§C.3: the shared prompt replaces the model's own prompt in its turn -- MedGemma keeps its prompt in
    the system turn (user: "Analyze this image."), the others in the user turn."""
    import dataclasses

    from shovir_core.models.hf import HFVLM
    from shovir_core.models.registry import REGISTRY
    from shovir_core.models.prompts import SHARED_MINIMAL_PROMPT

    tiny = build_tiny("tiny-gemma3")
    medgemma = REGISTRY["medgemma-1.5-4b"]
    assert medgemma.report_prompt_slot == "system"
    as_medgemma = HFVLM(dataclasses.replace(tiny.spec, report_system=medgemma.report_system,
                                            report_user=medgemma.report_user, report_prompt_slot="system",
                                            report_order=medgemma.report_order),
                        tiny.model, tiny.processor, source=tiny.source)
    shared = as_medgemma.render_report(SHARED_MINIMAL_PROMPT)
    assert SHARED_MINIMAL_PROMPT in shared and "Analyze this image." in shared
    assert medgemma.report_system not in shared and medgemma.report_system in as_medgemma.render_report()
    as_user = HFVLM(dataclasses.replace(tiny.spec, report_user="Describe it.", report_system="System text."),
                    tiny.model, tiny.processor, source=tiny.source)
    text = as_user.render_report(SHARED_MINIMAL_PROMPT)
    assert SHARED_MINIMAL_PROMPT in text and "System text." in text and "Describe it." not in text
    with pytest.raises(ValueError, match="report_prompt_slot"):
        dataclasses.replace(tiny.spec, report_prompt_slot="assistant")
