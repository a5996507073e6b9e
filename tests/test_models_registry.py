"""Registry: pinned names, the missing-weights error, local checkpoints, no downloads."""
from __future__ import annotations

import pytest

from shovir_core.models import MODEL_DIR_ENV, REGISTRY, ModelNotAvailableError, get_model, list_models

SHOVIR = ("chexagent-2", "cxrmate", "libra-v1", "llava-rad", "maira-2", "medgemma-1.5-4b", "radialog", "nv-reason-cxr")
MODALENS = ("medgemma-27b", "medgemma-4b", "qwen3.5-9b", "qwen3.5-27b", "llava-next-mistral-7b",
            "llava-1.5-7b", "gemma-3-27b")


def test_both_papers_models_are_registered_with_pinned_ids():
    assert set(SHOVIR) == set(list_models(paper="ShoViR"))
    assert set(MODALENS) == set(list_models(paper="ModaLens"))
    assert REGISTRY["medgemma-27b"].hf_id == "google/medgemma-27b-it" and REGISTRY["medgemma-27b"].revision == "2d3e00e"
    assert REGISTRY["medgemma-4b"].families["yes_family"] == (4443, 10784, 11262, 8438)
    assert REGISTRY["medgemma-1.5-4b"].report_system == "Describe this X-ray."
    assert REGISTRY["nv-reason-cxr"].max_new_tokens == 2048


@pytest.mark.parametrize("name", ["medgemma-27b", "maira-2", "qwen3.5-9b", "medgemma-4b", "qwen3.5-27b",
                                  "llava-next-mistral-7b", "llava-1.5-7b", "gemma-3-27b"])
def test_missing_weights_error_names_model_and_remedy(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "models"))
    with pytest.raises(ModelNotAvailableError) as err:
        get_model(name)
    msg = str(err.value)
    assert repr(name) in msg and REGISTRY[name].hf_id in msg
    assert MODEL_DIR_ENV in msg and "local_path=" in msg and "never downloads" in msg


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match="unknown model"):
        get_model("gpt-17")
    with pytest.raises(ValueError, match="only ref-anchored"):
        get_model("ref-blind-prior@2")


def test_local_checkpoint_loads_offline_through_auto_classes(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import numpy as np

    from shovir_core.models import ScoreRequest
    from shovir_core.models.registry import ModelSpec

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tiny = get_model("tiny-llava")
    tiny.model.save_pretrained(tmp_path)
    tiny.processor.save_pretrained(tmp_path)
    spec = ModelSpec("llava-next-mistral-7b", "hf", "llava-hf/llava-v1.6-mistral-7b-hf", revision="2424fdd4",
                     paper="ModaLens")
    monkeypatch.setitem(REGISTRY, spec.name, spec)
    loaded = get_model(spec.name, local_path=tmp_path)
    req = ScoreRequest(np.zeros((40, 40), np.uint8), "Does this chest X-ray show Edema?", report="There is edema.")
    assert loaded.render(req) == tiny.render(req)
    assert loaded.score_yes_no([req])[0]["margin"] == pytest.approx(tiny.score_yes_no([req])[0]["margin"], abs=1e-5)
    prov = loaded.provenance()
    assert prov["source"]["kind"] == "checkpoint" and prov["local_path"] == str(tmp_path)
    assert prov["source"]["revision_verified"] is False  # a plain folder cannot prove its revision
    assert len(prov["source"]["checkpoint_fingerprint"]) == 64  # but its configs and weight files identify it
    # a Hugging Face snapshot folder is named by its commit: a different commit than the pin is refused
    import shutil

    snapshot = tmp_path.parent / ("f" * 40)
    shutil.copytree(tmp_path, snapshot)
    with pytest.raises(ModelNotAvailableError, match="pins 2424fdd4"):
        get_model(spec.name, local_path=snapshot)
