"""Remote-code adapters: tiny checkpoints whose config ``auto_map`` points at modelling code written
by the test are loaded offline with ``trust_remote_code`` and generate reports through the adapter;
the GitHub-code models fail with an error naming the missing code and the adapter hook."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import (ModelNotAvailableError, ScoreRequest, get_model, model_fingerprint,  # noqa: E402
                                register_remote_adapter)
from shovir_core.models import remote  # noqa: E402
from shovir_core.models.protocol import SCORE_KEYS  # noqa: E402
from shovir_core.models.registry import REGISTRY  # noqa: E402
from shovir_core.models.remote import (REMOTE_ADAPTERS, UPSTREAM_CODE, CheXagent2VLM, CXRMateVLM,  # noqa: E402
                                       Maira2VLM, RemoteCodeVLM)
from tiny_checkpoints import build_chexagent2, build_cxrmate, build_maira2  # noqa: E402

@pytest.fixture(scope="module")
def maira_dir(tmp_path_factory):
    """A tiny MAIRA-2-shaped checkpoint (tests/tiny_checkpoints.py)."""
    return build_maira2(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(0).integers(0, 256, (40, 56), dtype=np.uint8)


def test_maira2_loads_remote_code_and_generates(maira_dir, image):
    model = get_model("maira-2", local_path=maira_dir, device="cpu", dtype="float32")
    assert isinstance(model, Maira2VLM)
    assert type(model.model).__name__ == "TinyMaira2ForConditionalGeneration"
    assert type(model.processor).__name__ == "TinyMaira2Processor"
    reports = model.generate_reports([image, image[::-1]], max_new_tokens=6)
    assert len(reports) == 2 and all(r.startswith("converted: ") for r in reports)
    calls = __import__(type(model.processor).__module__, fromlist=["CALLS"]).CALLS
    assert calls[-1] == dict(size=(56, 40), lateral=None, prior=None, indication="", technique="", comparison="",
                             prior_report=None, grounding=False)
    # Greedy: the same image gives the same report; a different indication reaches the processor.
    assert model.generate_reports([image], max_new_tokens=6) == reports[:1]
    model.generate_reports([image], prompt="Cough.", max_new_tokens=2)
    assert calls[-1]["indication"] == "Cough."


def test_maira2_report_is_the_models_greedy_continuation(maira_dir, image):
    import torch
    from PIL import Image

    model = get_model("maira-2", local_path=maira_dir, device="cpu", dtype="float32")
    text = "[INST] <image>\nINDICATION: None [/INST]"
    batch = model.processor(text=text, images=[Image.fromarray(np.repeat(image[:, :, None], 3, axis=2))],
                            return_tensors="pt")
    ids = batch["input_ids"]
    with torch.no_grad():
        for _ in range(5):
            logits = model.model(input_ids=ids, pixel_values=batch["pixel_values"]).logits[0, -1]
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    new = ids[0, batch["input_ids"].shape[1]:].tolist()
    eos = model.processor.tokenizer.eos_token_id
    new = new[:new.index(eos)] if eos in new else new
    expected = "converted: " + model.processor.decode(new, skip_special_tokens=True).lstrip()
    assert model.generate_reports([image], max_new_tokens=5) == [expected.strip()]


def test_identity_and_provenance(maira_dir):
    model = get_model("maira-2", local_path=maira_dir, device="cpu", dtype="float32")
    ident = model.identity()
    assert ident["model_id"] == "microsoft/maira-2" and ident["adapter"] == "remote-code"
    assert ident["decoding"]["max_new_tokens"] == REGISTRY["maira-2"].max_new_tokens == 450
    assert "local_path" not in ident["source"] and len(ident["source"]["code_sha256"]) == 64
    assert model.provenance()["local_path"] == str(maira_dir)
    assert model.input_key(image=np.zeros((4, 4), np.uint8)) == model.input_key(image=np.zeros((4, 4), np.uint8),
                                                                                 prompt="")
    with pytest.raises(NotImplementedError, match="maira-2: yes/no scoring is not offered"):
        model.score_yes_no([ScoreRequest(None, "Does this chest X-ray show Edema?")])
    # model_fingerprint stays the registry's pinned identity (computed without loading).
    assert model_fingerprint("maira-2") == {"name": "maira-2", "adapter": "remote-code",
                                            "hf_id": "microsoft/maira-2", "revision": None}


def test_wrong_processor_code_is_named(maira_dir, tmp_path):
    import shutil

    bad = tmp_path / "plain"
    shutil.copytree(maira_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    del config["auto_map"]["AutoProcessor"]
    (bad / "config.json").write_text(json.dumps(config))
    for f in bad.glob("*_config.json"):
        data = json.loads(f.read_text())
        data.pop("auto_map", None)
        data.pop("processor_class", None)
        f.write_text(json.dumps(data))
    with pytest.raises(ModelNotAvailableError, match="format_and_preprocess_reporting_input"):
        get_model("maira-2", local_path=bad, device="cpu", dtype="float32")


def test_failing_checkpoint_code_is_reported(maira_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(maira_dir, broken)
    (broken / "modeling_tiny_maira2.py").write_text("from transformers import NoSuchModelClass\n")
    with pytest.raises(ModelNotAvailableError, match=r"AutoModelForCausalLM.from_pretrained\(.*failed under "
                                                     r"transformers .*ImportError"):
        get_model("maira-2", local_path=broken, device="cpu", dtype="float32")


def test_unfilled_parameters_are_refused(maira_dir, tmp_path):
    import shutil

    legacy = tmp_path / "legacy"
    shutil.copytree(maira_dir, legacy)
    (legacy / "model.safetensors").unlink()
    (legacy / "legacy.safetensors.bak").rename(legacy / "model.safetensors")
    with pytest.raises(ModelNotAvailableError, match=r"does not fill \d+ parameters of TinyMaira2ForConditional"):
        get_model("maira-2", local_path=legacy, device="cpu", dtype="float32")


@pytest.mark.parametrize("name", sorted(UPSTREAM_CODE))
def test_github_code_models_name_what_is_missing(name, tmp_path, monkeypatch):
    from shovir_core.models.upstream import UPSTREAM

    monkeypatch.delenv("SHOVIR_MODEL_DIR", raising=False)
    monkeypatch.setenv("SHOVIR_CODE_DIR", str(tmp_path / "code"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotAvailableError) as info:
        get_model(name, local_path=tmp_path)
    msg = str(info.value)
    code = UPSTREAM[UPSTREAM_CODE[name]["code"]]
    assert "its modelling code is not in a transformers checkpoint" in msg
    assert code.repo in msg and code.commit in msg and "Weights needed" in msg
    assert f"`{UPSTREAM_CODE[name]['module']}`" in msg
    with pytest.raises(ModelNotAvailableError, match="weights not found locally"):
        get_model(name, local_path=tmp_path / "nowhere")


def test_every_remote_code_model_is_covered():
    remote = {n for n, s in REGISTRY.items() if s.adapter == "remote-code"}
    assert remote == set(REMOTE_ADAPTERS) | set(UPSTREAM_CODE)
    assert not set(REMOTE_ADAPTERS) & set(UPSTREAM_CODE)
    assert {"chexagent-2", "maira-2", "cxrmate"} <= set(REMOTE_ADAPTERS)


def test_register_remote_adapter_validates_and_plugs_in(tmp_path, monkeypatch):
    with pytest.raises(KeyError, match="not a registered remote-code model"):
        register_remote_adapter("medgemma-4b", RemoteCodeVLM)
    with pytest.raises(TypeError, match="RemoteCodeVLM subclass"):
        register_remote_adapter("llava-rad", object)  # type: ignore[arg-type]

    class Loaded(RemoteCodeVLM):
        @classmethod
        def load(cls, spec, path, *, device=None, dtype=None):
            return path

    monkeypatch.setattr(remote, "REMOTE_ADAPTERS", dict(REMOTE_ADAPTERS))  # undone after the test
    register_remote_adapter("llava-rad", Loaded)
    (tmp_path / "config.json").write_text("{}")
    assert get_model("llava-rad", local_path=tmp_path) == tmp_path


@pytest.fixture(scope="module")
def chexagent_dir(tmp_path_factory):
    """A tiny CheXagent-2-shaped checkpoint (tests/tiny_checkpoints.py)."""
    return build_chexagent2(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def chexagent(chexagent_dir):
    return get_model("chexagent-2", local_path=chexagent_dir, device="cpu", dtype="float32")


def _greedy(model, ids, n):
    import torch

    with torch.no_grad():
        for _ in range(n):
            nxt = model(input_ids=ids).logits[0, -1].argmax().view(1, 1)
            ids = torch.cat([ids, nxt], dim=1)
    return ids


def test_chexagent2_loads_remote_code_and_generates(chexagent, image):
    import torch

    assert isinstance(chexagent, CheXagent2VLM)
    assert type(chexagent.tokenizer).__name__ == "TinyCheXagentTokenizer"
    assert type(chexagent.model).__name__ == "TinyCheXagentForCausalLM"
    calls = __import__(type(chexagent.tokenizer).__module__, fromlist=["CALLS"]).CALLS
    reports = chexagent.generate_reports([image, image.T], max_new_tokens=8)
    assert len(reports) == 2 and all(isinstance(r, str) for r in reports)
    assert [c["format"] for c in calls[-2:]] == ["JPEG", "JPEG"]
    assert [c["size"] for c in calls[-2:]] == [(56, 40), (40, 56)]
    # The report is the greedy continuation of the paper's conversation, cut at end of turn.
    tok = chexagent.tokenizer
    query = "<img>" + calls[-2]["path"] + "</img>\nStructured Radiology Report Generation for Findings Section"
    text = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>human\n" + query
            + "<|im_end|>\n<|im_start|>gpt\n")
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    new = _greedy(chexagent.model, ids, 8)[0, ids.shape[1]:].tolist()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    new = new[:new.index(eos)] if eos in new else new
    assert reports[0] == tok.decode(new, skip_special_tokens=True).strip()


def test_chexagent2_scores_yes_no(chexagent, image):
    import torch

    req = ScoreRequest(image, "Does this chest X-ray show Edema?", report="There is edema.", instruction="yes_no")
    res = chexagent.score_yes_no([req, ScoreRequest(None, req.question)], answer_tokens=3)
    assert [set(r) for r in res] == [set(SCORE_KEYS)] * 2
    tok = chexagent.tokenizer
    text = tok.from_list_format([{"text": "Question: Does this chest X-ray show Edema?"}])
    ids = torch.tensor([tok(f"<|im_start|>human\n{text}<|im_end|>\n<|im_start|>gpt\n",
                            add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = chexagent.model(input_ids=ids).logits[0, -1]
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    assert res[1]["n_input_tokens"] == ids.shape[1]
    assert res[1]["logit_yes"] == pytest.approx(float(logits[yes]), abs=1e-5)
    assert res[1]["logit_no"] == pytest.approx(float(logits[no]), abs=1e-5)
    assert res[0]["n_input_tokens"] > res[1]["n_input_tokens"]
    assert all(isinstance(r["generated"], str) for r in res)
    no_gen = chexagent.score_yes_no([req])[0]
    assert no_gen["generated"] is None and no_gen["logit_yes"] == pytest.approx(res[0]["logit_yes"], abs=1e-5)


# CXRMate-RRG24's API: an encoder-decoder fed (B, N_images, C, H, W) pixels, config.encoder carrying
# image_size/image_mean/image_std, and split_and_decode_sections -> (findings, impressions).
@pytest.fixture(scope="module")
def cxrmate_dir(tmp_path_factory):
    """A tiny CXRMate-shaped checkpoint (tests/tiny_checkpoints.py)."""
    return build_cxrmate(tmp_path_factory.mktemp("ckpt"))



def test_cxrmate_loads_remote_code_and_generates(cxrmate_dir):
    import torch

    model = get_model("cxrmate", local_path=cxrmate_dir, device="cpu", dtype="float32")
    assert isinstance(model, CXRMateVLM) and type(model.model).__name__ == "TinyCXRMate"
    calls = __import__(type(model.model).__module__, fromlist=["CALLS"]).CALLS
    flat = np.full((48, 80), 128, dtype=np.uint8)
    reports = model.generate_reports([flat], max_new_tokens=12)
    assert len(reports) == 1 and reports[0].startswith("Findings: ") and "\nImpression: " in reports[0]
    call = calls[-1]
    tok = model.processor
    assert call["bad_words_ids"] == [[tok.convert_tokens_to_ids("[NF]")], [tok.convert_tokens_to_ids("[NI]")]]
    assert call["max_length"] == 12 and call["num_beams"] == 1 and call["do_sample"] is False
    # Pixels: (1, 1, 3, 32, 32), the flat gray value scaled and normalised per channel.
    pixels = call["pixel_values"]
    assert tuple(pixels.shape) == (1, 1, 3, 32, 32)
    expected = (128 / 255 - torch.tensor([0.5, 0.4, 0.3])) / torch.tensor([0.2, 0.25, 0.3])
    assert torch.allclose(pixels[0, 0].mean(dim=(1, 2)), expected, atol=1e-6)
    assert float(pixels[0, 0].std(dim=(1, 2)).max()) < 1e-6
    with pytest.raises(ValueError, match="takes no text prompt"):
        model.generate_reports([flat], prompt="Describe.")


def test_cxrmate_resize_and_crop_match_torch(cxrmate_dir):
    import torch
    import torch.nn.functional as F

    model = get_model("cxrmate", local_path=cxrmate_dir, device="cpu", dtype="float32")
    img = np.random.default_rng(1).integers(0, 256, (40, 64), dtype=np.uint8)
    pixels = model.pixel_values(img)[0, 0, 0]
    # Short side 40 -> 32, long side 64 -> 51, centre crop 32 x 32 columns [10, 42).
    ref = F.interpolate(torch.from_numpy(img).float()[None, None], size=(32, 51), mode="bilinear",
                        align_corners=False, antialias=True)[0, 0].round().clamp(0, 255)[:, 10:42]
    assert torch.allclose(pixels, (ref / 255 - 0.5) / 0.2, atol=1e-5)
