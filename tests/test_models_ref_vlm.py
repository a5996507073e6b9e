"""ref-vlm: the training command runs, the split holds out the evaluation patients, the shipped weights
match their fingerprint."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ScoreRequest, get_model, model_fingerprint  # noqa: E402
from shovir_core.models import ref_vlm as rv  # noqa: E402
from shovir_core.training import ref_vlm as trv  # noqa: E402
from shovir_core.protocols.datasets import load_dataset  # noqa: E402


def test_split_holds_out_every_evaluation_patient():
    from shovir_core.protocols import modalens as ml

    ds = load_dataset("demo-64px")
    train, held = trv.split_patients(ds)
    assert train and held and not set(train) & set(held)
    assert set(train) | set(held) == set(ds.images["patient_id"].astype(str))
    cases, _ = ml.build_cases(ml.resolve_spec({**rv.EVAL_COHORT, "model": "ref-blind-prior"}))
    assert set(cases["patient_id"].astype(str)) <= set(held)
    assert set(cases["sub_patient_id"].astype(str)) <= set(held)


def test_a_few_training_steps_run_and_are_deterministic(tmp_path):
    assert trv.main(["--steps", "2", "--out", str(tmp_path)]) == 0
    meta = json.loads((tmp_path / rv.META_FILE).read_text())
    assert meta["metrics"]["steps"] == 2 and np.isfinite(meta["metrics"]["final_loss"])
    assert meta["fingerprint"] == rv.fingerprint(meta)
    assert meta["weights_sha256"] == hashlib.sha256((tmp_path / rv.WEIGHTS_FILE).read_bytes()).hexdigest()
    assert (tmp_path / rv.WEIGHTS_FILE).stat().st_size < 10e6
    again = tmp_path / "again"
    trv.main(["--steps", "2", "--out", str(again)])
    from safetensors import safe_open
    from safetensors.torch import load_file

    first, second = load_file(str(tmp_path / rv.WEIGHTS_FILE)), load_file(str(again / rv.WEIGHTS_FILE))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    with safe_open(str(tmp_path / rv.WEIGHTS_FILE), "pt") as f, safe_open(str(again / rv.WEIGHTS_FILE), "pt") as g:
        assert f.metadata() == g.metadata()  # (safetensors may order the header's keys differently)
    m = rv.build_ref_vlm(weights=tmp_path / rv.WEIGHTS_FILE)
    out = m.score_yes_no([ScoreRequest(np.zeros((64, 64), np.uint8), "Does this chest X-ray show edema?")])
    assert out[0]["readout"] in ("yes", "no")


def test_shipped_weights_match_their_fingerprint():
    res = rv.resources_dir()
    meta = json.loads((res / rv.META_FILE).read_text())
    weights = (res / rv.WEIGHTS_FILE).read_bytes()
    assert len(weights) < 10e6
    assert hashlib.sha256(weights).hexdigest() == meta["weights_sha256"]
    assert rv.fingerprint(meta) == meta["fingerprint"]
    assert meta["data"]["dataset_sha256"] == load_dataset("demo-64px").manifest_hash
    assert meta["config"] == json.loads(json.dumps(rv.TRAIN_CONFIG)), "shipped weights were trained with the config"
    train, _ = trv.split_patients(load_dataset("demo-64px"))
    assert meta["data"]["train_patients_sha256"] == hashlib.sha256("\n".join(train).encode()).hexdigest()
    from safetensors import safe_open

    with safe_open(str(res / rv.WEIGHTS_FILE), "pt") as f:
        stored = f.metadata()
    assert json.loads(stored["config"]) == meta["config"] and json.loads(stored["data"]) == meta["data"]


def test_registry_builds_the_shipped_model():
    m = get_model("ref-vlm")
    assert type(m.model).__name__ == "Gemma3ForConditionalGeneration"
    assert m.model.config.text_config.num_hidden_layers >= 6
    assert m.identity()["source"]["fingerprint"] == json.loads((rv.resources_dir() / rv.META_FILE).read_text())["fingerprint"]
    assert model_fingerprint("ref-vlm")["sha256"]
