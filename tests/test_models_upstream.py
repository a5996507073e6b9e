"""GitHub-code adapters (Libra-v1, LLaVA-Rad, RaDialog) against stand-in code bases with the public entry points
(tests/fixtures/upstream): what each adapter passes (prompt, image slots, decoding flags) and how it parses
the reply; and the error when the authors' code is missing."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ModelNotAvailableError, get_model  # noqa: E402
from shovir_core.models.libra import LibraV1VLM, LLaVARadVLM, libra_conv_mode  # noqa: E402
from shovir_core.models.radialog import MODEL_NAME, RaDialogVLM, classifier_pixels  # noqa: E402
from shovir_core.models.upstream import CODE_DIR_ENV, UPSTREAM, git_commit, locate_code  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"


@pytest.fixture
def code_dir(monkeypatch):
    monkeypatch.setenv(CODE_DIR_ENV, str(FIXTURES))
    return FIXTURES


def _checkpoint(tmp_path, name, **config):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _image(value: int, shape=(40, 48)) -> np.ndarray:
    img = np.full(shape, value, dtype=np.uint8)
    img[0, 0], img[0, 1] = 0, 255  # the full range, so min-max remapping keeps the level
    return img


def _text(ids, tokenizer) -> str:
    """Decode prompt ids with the image placeholder (-200) shown as <image>."""
    out, run = [], []
    for t in ids.tolist():
        if t == -200:
            out.append(tokenizer.decode(run) + "<image>")
            run = []
        else:
            run.append(t)
    return "".join(out) + tokenizer.decode(run)


def _calls(module: str):
    return importlib.import_module(module).CALLS


# -- Libra-v1 ---------------------------------------------------------------------------------
def test_libra_v1_prompt_slots_and_sampling(code_dir, tmp_path):
    model = get_model("libra-v1", local_path=_checkpoint(tmp_path, "libra", mm_projector_type="TAC"), device="cpu",
                      dtype="float32")
    assert isinstance(model, LibraV1VLM) and model.conv_mode == "libra_v1"
    calls = _calls("libra.model.builder")
    calls.clear()
    state = torch.get_rng_state()
    img = _image(200)
    first = model.generate_reports([img])
    assert torch.equal(state, torch.get_rng_state())  # sampling ran on a forked, seeded generator
    assert model.generate_reports([img]) == first  # same input, same sample
    call = calls[-1]
    prompt = _text(call["input_ids"][0], model.processor)
    assert prompt == ("You are a helpful language and vision assistant. USER: <image>\nProvide a detailed description "
                      "of the findings in the radiology image.\n\nAnalyze this CXR image. ASSISTANT:")
    assert call["images"].shape == (2, 1, 3, 8, 8) and torch.equal(call["images"][0], call["images"][1])
    assert call["do_sample"] is True and call["max_new_tokens"] == 300 and call["use_cache"] is True
    assert call["pad_token_id"] == model.processor.eos_token_id and bool(call["attention_mask"].all())
    # reply parsing: special tokens dropped, stop string stripped, pixel mean of the slot in words
    mean = int(round(float(call["images"][0].mean()) * 100))
    digits = " ".join(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"][int(d)]
                      for d in str(mean))
    assert first[0].startswith(f"pixel mean {digits}") and "</s>" not in first[0]
    assert model.identity()["upstream"]["code"] == "libra" and model.identity()["decoding"]["do_sample"] is True


def test_libra_v1_without_tac_and_with_start_end_tokens(code_dir, tmp_path):
    model = get_model("libra-v1", local_path=_checkpoint(tmp_path, "libra", mm_projector_type="mlp2x_gelu",
                                                          mm_use_im_start_end=True), device="cpu", dtype="float32")
    calls = _calls("libra.model.builder")
    model.generate_reports([_image(90)])
    call = calls[-1]
    assert call["images"].shape == (1, 3, 8, 8)
    assert "USER: <im_start><image><im_end>\nProvide a detailed" in _text(call["input_ids"][0], model.processor)


def test_libra_conv_mode_follows_the_checkpoint_name():
    assert libra_conv_mode("libra-v1.0-3b") == "libra_llama_3"  # the authors' wrapper's checkpoint
    assert libra_conv_mode("libra-v1.0-7b") == "libra_v1"


# -- LLaVA-Rad ---------------------------------------------------------------------------------
def test_llava_rad_batches_of_four_two_slots_greedy(code_dir, tmp_path):
    model = get_model("llava-rad", local_path=_checkpoint(tmp_path, "llavarad"), device="cpu", dtype="float32")
    assert isinstance(model, LLaVARadVLM) and model.conv_mode == "v1"
    calls = _calls("libra.model.builder")
    calls.clear()
    images = [_image(v) for v in (10, 60, 120, 180, 250)]
    reports = model.generate_reports(images)
    assert [c["images"].shape for c in calls] == [(2, 4, 3, 8, 8), (2, 1, 3, 8, 8)]
    assert all(c["do_sample"] is False and c["max_new_tokens"] == 300 for c in calls)
    assert torch.equal(calls[0]["images"][0], calls[0]["images"][1])  # prior slot = current
    assert _text(calls[0]["input_ids"][0], model.processor) == (
        "A chat between a curious user and an assistant. USER: <image>\nDescribe the findings in the radiology image. "
        "ASSISTANT:")
    means = [int(round(float(calls[k // 4]["images"][0, k % 4].mean()) * 100)) for k in range(5)]
    assert len(set(means)) == 5 and len(set(reports)) == 5  # one report per image, in order
    assert all(r.startswith("pixel mean") and r.endswith(".") for r in reports)
    # a prompt override replaces the benchmark prompt
    model.generate_reports([images[0]], prompt="Describe the radiographic findings in this chest X-ray.")
    assert "USER: <image>\nDescribe the radiographic findings" in _text(calls[-1]["input_ids"][0], model.processor)


# -- RaDialog ----------------------------------------------------------------------------------
@pytest.fixture
def radialog(code_dir, tmp_path, monkeypatch):
    base = _checkpoint(tmp_path, "liuhaotian--llava-v1.5-7b")
    monkeypatch.setenv("SHOVIR_MODEL_DIR", str(tmp_path))
    return get_model("radialog", local_path=_checkpoint(tmp_path, "radialog"), device="cpu", dtype="float32"), base


def test_radialog_findings_prompt_and_decoding(radialog):
    model, base = radialog
    assert isinstance(model, RaDialogVLM)
    loads = importlib.import_module("LLAVA_Biovil.llava.model.builder").LOADS
    assert loads[-1]["model_base"] == str(base) and loads[-1]["model_name"] == MODEL_NAME
    assert importlib.import_module("findings_classifier.chexpert_train").LOADS[-1]["strict"] is False
    calls = _calls("LLAVA_Biovil.llava.model.builder")
    bright, dark = model.generate_reports([_image(230), _image(20)])
    prompts = [_text(c["input_ids"][0], model.processor) for c in calls[-2:]]
    instruction = ("You are to act as a radiologist and write the finding section of a chest x-ray radiology report for "
                   "this X-ray image and the given predicted findings. Write in the style of a radiologist, write one "
                   "fluent text without enumeration, be concise and don't provide explanations or reasons.")
    system = "A chat between a curious user and an artificial intelligence assistant. "
    assert prompts[0] == f"{system}USER: <image>. Predicted Findings: cardiomegaly, support devices. {instruction} ASSISTANT:"
    assert prompts[1] == f"{system}USER: <image>. Predicted Findings: no finding, support devices. {instruction} ASSISTANT:"
    assert calls[-1]["images"].shape == (1, 3, 448, 448) and calls[-1]["do_sample"] is False
    assert calls[-1]["max_new_tokens"] == 300 and bool(calls[-1]["attention_mask"].all())
    assert bright.startswith("report pixel mean") and "</s>" not in bright and bright != dark


def test_radialog_ignores_a_prompt_without_a_findings_slot(radialog):
    model, _ = radialog
    calls = _calls("LLAVA_Biovil.llava.model.builder")
    img = _image(230)
    model.generate_reports([img], prompt="Describe the radiographic findings in this chest X-ray.")
    default = _text(calls[-1]["input_ids"][0], model.processor)
    model.generate_reports([img])
    assert _text(calls[-1]["input_ids"][0], model.processor) == default  # the authors' wrapper ignores it
    assert model.input_key(image=img, prompt="Describe it.") == model.input_key(image=img)
    model.generate_reports([img], prompt="Findings: {findings}. Be brief.")
    assert "USER: Findings: cardiomegaly, support devices. Be brief. ASSISTANT:" in _text(calls[-1]["input_ids"][0],
                                                                                          model.processor)


def test_classifier_pixels_resize_and_centre_crop():
    from PIL import Image

    gray = Image.fromarray(np.tile(np.arange(520, dtype=np.uint32) % 256, (600, 1)).astype(np.uint8), "L")
    out = classifier_pixels(gray)
    assert out.shape == (1, 488, 488)
    resized = np.asarray(gray.resize((512, 590), Image.BILINEAR))  # short side 512, long int(512 * 600 / 520)
    top, left = 51, 12  # round((590 - 488) / 2), round((512 - 488) / 2)
    np.testing.assert_array_equal((out[0].numpy() * 255).round().astype(np.uint8), resized[top:top + 488, left:left + 488])


# -- missing code ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,code", [("libra-v1", "libra"), ("llava-rad", "libra"), ("radialog", "radialog")])
def test_missing_code_names_repo_commit_and_weights(name, code, tmp_path, monkeypatch):
    monkeypatch.setenv(CODE_DIR_ENV, str(tmp_path / "code"))
    with pytest.raises(ModelNotAvailableError) as info:
        get_model(name, local_path=_checkpoint(tmp_path, "ckpt"), device="cpu")
    msg = str(info.value)
    up = UPSTREAM[code]
    assert up.repo in msg and up.commit in msg and "Weights needed" in msg and str(tmp_path / "code" / up.folder) in msg


def test_locate_code_reports_the_checkout_and_no_borrowed_commit(code_dir):
    source = locate_code("libra", model="libra-v1")
    assert source.kind == "checkout" and Path(source.location) == (FIXTURES / "Libra").resolve()
    assert git_commit(FIXTURES / "Libra") is None  # inside this repository, but not its own work tree
