"""Registry: model name -> pinned checkpoint, prompts, decoding and the adapter that runs it.

``get_model(name)`` never downloads: real checkpoints are looked up, in order, at ``local_path=``,
``$SHOVIR_MODEL_DIR/<name>``, ``$SHOVIR_MODEL_DIR/<org>--<repo>`` and the Hugging Face cache
(``local_files_only``). A missing checkpoint raises :class:`ModelNotAvailableError` naming the model
and these places.

Sources: ShoViR models, prompts and decoding from the authors' code (reference notes §6);
ModaLens models, revisions and answer-token ids from the paper (set-up, Appendix I).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .protocol import VLM

__all__ = ["ModelSpec", "REGISTRY", "ALIASES", "ModelNotAvailableError", "get_model", "list_models",
           "resolve_weights", "MODEL_DIR_ENV", "model_fingerprint"]

MODEL_DIR_ENV = "SHOVIR_MODEL_DIR"

_GEMMA_FAMILIES = {"yes_id": 4443, "no_id": 1904, "yes_family": (4443, 10784, 11262, 8438),
                   "no_family": (1904, 3771, 951, 2301)}
_QWEN35_FAMILIES = {"yes_family": (9405, 9175, 9542, 7179), "no_family": (2083, 2665, 874, 2233)}


class ModelNotAvailableError(RuntimeError):
    """The model's weights (or its adapter's upstream code) are not available on this machine."""


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry.

    ``adapter``: ``"hf"`` (transformers ``AutoModelForImageTextToText``), ``"remote-code"`` (the
    checkpoint's own code via ``trust_remote_code``, or a separate upstream code base:
    :mod:`~shovir_core.models.remote`), ``"tiny"`` (random-weight model built from a config) or
    ``"reference"``. ``report_*`` give the report prompt (system text, user text, block order),
    ``max_new_tokens`` the report length; ``families`` the paper's answer-token ids, checked
    against the tokenizer at load time.
    """

    name: str
    adapter: str
    hf_id: str | None = None
    revision: str | None = None
    paper: str = ""
    report_user: str = "Describe this X-ray."
    report_system: str | None = None
    report_order: str = "image_first"
    max_new_tokens: int = 128
    do_sample: bool = False
    dtype: str = "bfloat16"
    families: dict | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    processor_kwargs: dict = field(default_factory=dict)
    notes: str = ""


def _specs() -> dict[str, ModelSpec]:
    shovir = [
        ModelSpec("chexagent-2", "remote-code", "StanfordAIMI/CheXagent-2-3b-srrg-findings", paper="ShoViR",
                  report_user="Structured Radiology Report Generation for Findings Section",
                  report_system="You are a helpful assistant.", report_order="text_first", max_new_tokens=512,
                  notes="tokenizer.from_list_format([{image}, {text}]); AutoModelForCausalLM (trust_remote_code)"),
        ModelSpec("cxrmate", "remote-code", "aehrc/cxrmate-rrg24", paper="ShoViR", report_user="",
                  max_new_tokens=128,
                  notes="encoder-decoder; bad_words_ids [[NF],[NI]]; output 'Findings: ...\\nImpression: ...'"),
        ModelSpec("libra-v1", "remote-code", "X-iZhang/libra-v1.0-7b", paper="ShoViR",
                  report_user="Provide a detailed description of the findings in the radiology image.",
                  max_new_tokens=300, do_sample=True,
                  notes="Libra builder, conv 'libra_llama_3', two image slots (prior = current); the authors' "
                        "code samples (do_sample=True), the methodology says T=0.2"),
        ModelSpec("llava-rad", "remote-code", "X-iZhang/libra-llava-rad", paper="ShoViR",
                  report_user="Describe the findings in the radiology image.", max_new_tokens=300,
                  notes="Libra-repo port, conv 'v1', two image slots [current, current]"),
        ModelSpec("maira-2", "remote-code", "microsoft/maira-2", paper="ShoViR", report_user="", max_new_tokens=450,
                  notes="processor.format_and_preprocess_reporting_input(current_frontal=img, indication='', ...)"),
        ModelSpec("medgemma-1.5-4b", "hf", "google/medgemma-1.5-4b-it", paper="ShoViR",
                  report_system="Describe this X-ray.", report_user="Analyze this image.",
                  report_order="text_first", max_new_tokens=128, families=_GEMMA_FAMILIES,
                  processor_kwargs={"do_pan_and_scan": False},
                  notes="BaseHFLM chat: system = prompt, user = ['Analyze this image.', image]"),
        ModelSpec("radialog", "remote-code", "ChantalPellegrini/RaDialog-interactive-radiology-report-generation",
                  paper="ShoViR", max_new_tokens=300,
                  report_user="<image>. Predicted Findings: {findings}. You are to act as a radiologist and write "
                              "the finding section of a chest x-ray radiology report for this X-ray image and the "
                              "given predicted findings. Write in the style of a radiologist, write one fluent text "
                              "without enumeration, be concise and don't provide explanations or reasons.",
                  notes="LoRA on llava-v1.5-7b; findings from a CheXpert classifier checkpoint; BioViL transform; "
                        "the authors' wrapper names the repository Chantal/RaDialog-...; its Hugging Face id is "
                        "ChantalPellegrini/RaDialog-interactive-radiology-report-generation"),
        ModelSpec("nv-reason-cxr", "hf", "nvidia/NV-Reason-CXR-3B", paper="ShoViR",
                  report_user="Find abnormalities and support devices.", max_new_tokens=2048,
                  notes="Qwen2_5_VLForConditionalGeneration; one user message [image, text]; the report is "
                        "batch_decode(new tokens, skip_special_tokens=True): chat markers and EOS are dropped, the "
                        "reasoning text (<think>/<answer> tags included) is kept, as the authors' BaseHFLM does"),
    ]
    modalens = [
        ModelSpec("medgemma-27b", "hf", "google/medgemma-27b-it", revision="2d3e00e", paper="ModaLens",
                  families=_GEMMA_FAMILIES, processor_kwargs={"do_pan_and_scan": False},
                  notes="896x896, 256 image tokens, pan-and-scan off, bf16"),
        ModelSpec("medgemma-4b", "hf", "google/medgemma-4b-it", revision="290cda5e", paper="ModaLens",
                  families=_GEMMA_FAMILIES, processor_kwargs={"do_pan_and_scan": False}),
        ModelSpec("qwen3.5-9b", "hf", "Qwen/Qwen3.5-9B", revision="c2022362", paper="ModaLens",
                  families=_QWEN35_FAMILIES, chat_template_kwargs={"enable_thinking": False},
                  processor_kwargs={"max_pixels": 802816}, notes="thinking disabled; images capped at 802,816 px"),
        ModelSpec("qwen3.5-27b", "hf", "Qwen/Qwen3.5-27B", paper="ModaLens", families=_QWEN35_FAMILIES,
                  chat_template_kwargs={"enable_thinking": False}, processor_kwargs={"max_pixels": 802816},
                  notes="revision not stated in the paper"),
        ModelSpec("llava-next-mistral-7b", "hf", "llava-hf/llava-v1.6-mistral-7b-hf", revision="2424fdd4",
                  paper="ModaLens"),
    ]
    tiny = [
        ModelSpec("tiny-gemma3", "tiny", paper="test", dtype="float32", max_new_tokens=16,
                  notes="random Gemma3ForConditionalGeneration, local BPE tokenizer and Gemma-style template"),
        ModelSpec("tiny-llava", "tiny", paper="test", dtype="float32", max_new_tokens=16,
                  notes="random LlavaForConditionalGeneration (CLIP + Mistral), Mistral [INST] template"),
        ModelSpec("tiny-nvreason", "tiny", paper="test", dtype="float32", max_new_tokens=16,
                  report_user="Find abnormalities and support devices.",
                  notes="random Qwen2_5_VLForConditionalGeneration (NV-Reason-CXR-3B's class), one user turn "
                        "[image, text], Qwen2.5-VL default system turn; the report is the decoded continuation with "
                        "special tokens dropped and the reasoning text kept (as the authors' wrapper)"),
        ModelSpec("tiny-qwen2vl", "tiny", paper="test", dtype="float32", max_new_tokens=16,
                  notes="random Qwen2VLForConditionalGeneration, ChatML template"),
    ]
    from .reference import REFERENCE_MODELS

    ref = [ModelSpec(n, "reference", paper="reference", dtype="float32", notes=REFERENCE_MODELS[n].stated_behaviour)
           for n in REFERENCE_MODELS]
    return {s.name: s for s in shovir + modalens + tiny + ref}


REGISTRY: dict[str, ModelSpec] = _specs()
"""Every registered model by name."""

ALIASES = {"medgemma": "medgemma-1.5-4b", "medgemma-27b-it": "medgemma-27b", "medgemma-4b-it": "medgemma-4b"}


def list_models(*, paper: str | None = None) -> list[str]:
    """Registered names, optionally those of one paper (``"ShoViR"``, ``"ModaLens"``, ``"test"``,
    ``"reference"``)."""
    return [n for n, s in REGISTRY.items() if paper is None or s.paper.lower() == paper.lower()]


def _spec(name: str) -> ModelSpec:
    base = ALIASES.get(name, name).partition("@")[0]
    if base not in REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(REGISTRY)}")
    return REGISTRY[base]


def resolve_weights(spec: ModelSpec, *, local_path: str | Path | None = None) -> Path:
    """The local directory holding ``spec``'s checkpoint; never downloads.

    Raises
    ------
    ModelNotAvailableError
        Naming the model, its pinned id and revision, and every place searched.
    """
    tried: list[str] = []
    candidates: list[Path] = []
    if local_path is not None:
        candidates.append(Path(local_path).expanduser())
    root = os.environ.get(MODEL_DIR_ENV)
    if root:
        candidates += [Path(root) / spec.name, Path(root) / spec.hf_id.replace("/", "--"), Path(root) / spec.hf_id]
    for cand in candidates:
        tried.append(str(cand))
        if (cand / "config.json").is_file():
            return cand
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec.hf_id, revision=None, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any cache miss means "not available here"
        tried.append(f"Hugging Face cache ({type(exc).__name__})")
    rev = f" @ {spec.revision}" if spec.revision else ""
    raise ModelNotAvailableError(
        f"model {spec.name!r} ({spec.hf_id}{rev}): weights not found locally, and this project never downloads "
        f"(HF_HUB_OFFLINE=1). Searched: {'; '.join(tried)}. Put the checkpoint (a folder with config.json) at "
        f"${MODEL_DIR_ENV}/{spec.name} or ${MODEL_DIR_ENV}/{spec.hf_id.replace('/', '--')}, or call "
        f"get_model({spec.name!r}, local_path='/path/to/checkpoint')."
    )


def get_model(name: str, *, local_path: str | Path | None = None, device: str | None = None,
              dtype: str | None = None, seed: int = 0) -> VLM:
    """Build the adapter registered as ``name``.

    Parameters
    ----------
    name
        A registry name (:func:`list_models`), an alias, or ``ref-anchored@<w>``.
    local_path
        Checkpoint folder of a real model (overrides ``$SHOVIR_MODEL_DIR`` and the HF cache).
    device, dtype
        Where and in which precision a transformer runs (default: CUDA with the spec's dtype when
        available, else CPU float32).
    seed
        Weight seed of the tiny random models.

    Examples
    --------
    >>> get_model("ref-blind-prior").name
    'ref-blind-prior'
    """
    spec = _spec(name)
    if spec.adapter == "reference":
        from .reference import build_reference

        return build_reference(ALIASES.get(name, name))
    if spec.adapter == "tiny":
        from .tiny import build_tiny

        return build_tiny(spec.name, seed=seed, device=device, dtype=dtype)
    if spec.adapter == "remote-code":
        from .remote import build_remote

        return build_remote(spec, local_path=local_path, device=device, dtype=dtype)
    path = resolve_weights(spec, local_path=local_path)
    from .hf import HFVLM

    return HFVLM.from_pretrained(spec, path, device=device, dtype=dtype)


# Source and parameter files whose content decides what a locally built model outputs.
_FINGERPRINT_FILES = {
    "reference": ("models/reference.py", "models/report_text.py", "models/cnn.py", "models/readouts.py",
                  "resources/ref_reference_models.json", "resources/ref_image_classifier.safetensors"),
    "tiny": ("models/tiny.py", "models/hf.py", "models/prompts.py", "models/readouts.py"),
}


def model_fingerprint(name: str, *, seed: int = 0) -> dict:
    """What identifies a model's outputs, computed without loading it.

    Protocols put this into their resolved spec, so a run record's identity changes when a
    reference model is retrained or a tiny model's construction changes (a record made with the
    old model is then not reused). Real checkpoints are identified by their pinned id and revision.
    """
    import hashlib

    spec = _spec(name)
    out = {"name": ALIASES.get(name, name), "adapter": spec.adapter, "hf_id": spec.hf_id, "revision": spec.revision}
    files = _FINGERPRINT_FILES.get(spec.adapter)
    if files:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for rel in files:
            h.update(rel.encode())
            h.update((root / rel).read_bytes())
        out["sha256"] = h.hexdigest()
        if spec.adapter == "tiny":
            out["seed"] = seed
    return out
