"""The model catalogue (YAML) and the generic ``hf-auto`` adapter on tiny checkpoints saved to disk."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.models import ScoreRequest, get_model, list_models, model_fingerprint, registry
from shovir_core.protocols.catalog import CatalogueError, MODELS_ENV, load_catalogue, register_catalogue
from shovir_core.models.tiny import TINY_NAMES

from tiny_families import PALIGEMMA_TEMPLATE, UNNAMED_FAMILIES, catalogue_yaml, save_registry_family


def _unregister(names):
    from shovir_core.protocols import catalog

    for n in names:
        registry.REGISTRY.pop(n, None)
    for key in [k for k, v in catalog._LOADED.items() if set(v.split(",")) & set(names)]:
        del catalog._LOADED[key]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every registry family and two it does not name, saved with save_pretrained, declared in one file."""
    root = tmp_path_factory.mktemp("ckpt")
    entries = {}
    for name in TINY_NAMES:
        entries[f"decl-{name}"] = {"adapter": "hf-auto", "checkpoint": str(save_registry_family(name, root)),
                                   "max_new_tokens": 4, "dtype": "float32"}
    for name, build in UNNAMED_FAMILIES.items():
        entries[f"decl-{name}"] = {"adapter": "hf-auto", "checkpoint": str(build(root)), "max_new_tokens": 4}
    entries["decl-tiny-paligemma"]["chat_template"] = PALIGEMMA_TEMPLATE
    path = root / "models.yaml"
    path.write_text(catalogue_yaml(entries))
    names = register_catalogue(path)
    yield path, names
    _unregister(names)


def _image(seed: int, shape=(40, 48)) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) * 255).astype(np.uint8)


def test_every_family_runs_through_hf_auto(checkpoints):
    """No code per family: registry families and Idefics3/PaliGemma load, generate (batched = one at a
    time) and score (shared-prefix path = full prompts, or reuse turned off with a reason)."""
    _, names = checkpoints
    assert {"decl-tiny-idefics3", "decl-tiny-paligemma"} <= set(names)
    assert set(names) <= set(list_models(paper="declared"))
    images = [_image(0), _image(1, (56, 40))]
    requests = [ScoreRequest(images[0], "Does this chest X-ray show edema?", report=r, instruction=i, finding="Edema")
                for r in (None, "No acute finding.") for i in ("none", "yes_no")]
    for name in names:
        model = get_model(name)
        batched = model.generate_reports(images)
        alone = [model.generate_reports([im])[0] for im in images]
        assert batched == alone, name
        described = model.describe()
        assert described["families_source"] == "tokenizer" and len(described["yes_family"]) >= 1, name
        first = model.score_yes_no(requests, answer_tokens=2)
        reuse = model.prefix_reuse
        model.prefix_reuse = False
        full = model.score_yes_no(requests, answer_tokens=2)
        for a, b in zip(first, full):
            assert abs(a["logit_yes"] - b["logit_yes"]) < 1e-4 and abs(a["logit_no"] - b["logit_no"]) < 1e-4, name
            assert a["readout"] in ("yes", "no")
        prov = model.provenance()
        assert prov["adapter"] == "hf-auto" and prov["declared_sha256"] and prov["prefix_reuse_reason"], name
        if name in ("decl-tiny-qwen3.5", "decl-tiny-paligemma"):  # recurrent state; bidirectional prefix
            assert not reuse and prov["prefix_reuse_reason"].startswith("off"), name
        else:
            assert reuse and prov["prefix_reuse_reason"] == "on", name


def test_declared_prompts_reach_the_model(checkpoints):
    """The question template and answer instruction of the entry are what the model reads."""
    path, _ = checkpoints
    ckpt = load_catalogue(path, registry={})["decl-tiny-qwen2vl"].checkpoint
    file = path.parent / "prompts.yaml"
    file.write_text(catalogue_yaml({"decl-prompted": {
        "checkpoint": ckpt, "question_template": "About {finding}: {question}",
        "answer_instruction": "Reply yes or no.", "report_prompt": "Write the findings."}}))
    names = register_catalogue(file)
    try:
        model = get_model("decl-prompted")
        text = model.render(ScoreRequest(None, "Does this chest X-ray show edema?", instruction="yes_no",
                                         finding="Edema"))
        assert "About edema: Does this chest X-ray show edema? Reply yes or no." in text
        assert "Answer with exactly" not in text
        assert "Write the findings." in model.render_report()
    finally:
        _unregister(names)


@pytest.mark.parametrize("entry, message", [
    ({"checkpoint": "/x", "temperature": 0.2}, "unknown key(s) ['temperature']"),
    ({"checkpoint": "/x", "max_new_tokens": "many"}, "'max_new_tokens' = 'many' must be an integer"),
    ({"checkpoint": "/x", "dtype": "int8"}, "'dtype' = 'int8' is not allowed"),
    ({"checkpoint": "/x", "question_template": "Is it {organ}?"}, "'question_template'"),
    ({"adapter": "hf-auto"}, "'checkpoint' is required"),
    ({"checkpoint": "/x", "adapter": "ref-blind-prior"}, "'adapter' = 'ref-blind-prior' is not allowed"),
    ({"checkpoint": "/x", "yes_family": [1, 2]}, "give both 'yes_family' and 'no_family'"),
])
def test_bad_entry_is_one_line_and_registers_nothing(tmp_path, entry, message):
    path = tmp_path / "bad.yaml"
    path.write_text(catalogue_yaml({"good-one": {"checkpoint": "/y"}, "bad-one": entry}))
    with pytest.raises(CatalogueError) as err:
        register_catalogue(path)
    text = str(err.value)
    assert message in text and "\n" not in text and str(path) in text
    assert "good-one" not in registry.REGISTRY and "bad-one" not in registry.REGISTRY


def test_name_clash_and_malformed_file(tmp_path):
    path = tmp_path / "clash.yaml"
    path.write_text(catalogue_yaml({"tiny-gemma3": {"checkpoint": "/x"}}))
    with pytest.raises(CatalogueError, match="'tiny-gemma3' is already registered"):
        register_catalogue(path)
    path.write_text("models: [a, b]\n")
    with pytest.raises(CatalogueError, match="must be a mapping with one key"):
        register_catalogue(path)


def test_env_catalogue_and_fingerprint(checkpoints, monkeypatch, tmp_path):
    """$SHOVIR_MODELS declares models for get_model; the fingerprint (pinned in every record's spec)
    carries the declared entry, its hash and the checkpoint's fingerprint."""
    path, _ = checkpoints
    ckpt = load_catalogue(path, registry={})["decl-tiny-idefics3"].checkpoint
    file = tmp_path / "env.yaml"
    file.write_text(catalogue_yaml({"env-declared": {"checkpoint": ckpt, "notes": "via env"}}))
    monkeypatch.setenv(MODELS_ENV, str(file))
    try:
        assert "env-declared" in list_models()
        fp = model_fingerprint("env-declared")
        assert fp["declared"]["checkpoint"] == ckpt and fp["declared"]["question_template"] == "{question}"
        assert len(fp["declared_sha256"]) == 64 and len(fp["checkpoint_fingerprint"]) == 64
        file.write_text(catalogue_yaml({"env-declared": {"checkpoint": ckpt, "notes": "changed"}}))
        assert load_catalogue(file, registry={})["env-declared"].declared_sha256 != fp["declared_sha256"]
    finally:
        _unregister(["env-declared"])


def test_example_catalogue_is_valid():
    """params/models.example.yaml (README) validates; a registry family is inherited (prompts, token ids)."""
    from shovir_core.paths import params_root

    specs = load_catalogue(params_root() / "models.example.yaml")
    assert set(specs) == {"my-smolvlm", "my-medgemma-finetune"}
    fine = specs["my-medgemma-finetune"]
    base = registry.REGISTRY["medgemma-4b"]
    assert fine.families == base.families and fine.processor_kwargs == base.processor_kwargs
    assert specs["my-smolvlm"].families is None and specs["my-smolvlm"].report_user.startswith("Describe the findings")
