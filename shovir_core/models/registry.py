"""Registry: model name -> pinned checkpoint, prompts, decoding and the adapter that runs it.

``get_model(name)`` never downloads: real checkpoints are looked up, in order, at ``local_path=``,
``$SHOVIR_MODEL_DIR/<name>``, ``$SHOVIR_MODEL_DIR/<org>--<repo>`` and the Hugging Face cache
(``local_files_only``). A missing checkpoint raises :class:`ModelNotAvailableError` naming the model
and these places.

Sources: ShoViR models, prompts and decoding from the authors' code (arco-group/ShoViR-Bench
``src/benchmark/prompts.py``@7dd01b7 and the wrappers ``src/benchmark/models/<model>/__init__.py``,
``src/benchmark/models/base.py``@f68059b; ShoViR §3.3); ModaLens models, revisions and answer-token
ids from the paper (ModaLens §3; App. I). Decoder-layer counts (``text_layers``, the layer count a
rehearsal's tiny stand-in gets): MedGemma-27B's 62 from ModaLens §3; the others from the checkpoints'
model cards (Gemma 3 4B 34, Qwen3.5-9B 32, Qwen3.5-27B 64, Mistral-7B and Vicuna-7B 32, Qwen2.5-VL-3B 36).
"""
from __future__ import annotations

import json
import os

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .spec import MODEL_DIR_ENV, ModelNotAvailableError, ModelSpec, code_sha256, resolve_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .protocol import VLM
    from .remote import RemoteCodeVLM

__all__ = ["ModelSpec", "REGISTRY", "ALIASES", "ModelNotAvailableError", "get_model", "list_models", "tiny_dims",
           "DEEP_TWIN_WIDTH", "DEEP_TWIN_BATCH", "STAND_INS_ENV", "SURROGATE_STAND_INS", "stand_in_for",
           "resolve_weights", "MODEL_DIR_ENV", "model_fingerprint", "register_remote_adapter", "ADAPTERS", "LOADERS"]

_GEMMA_FAMILIES = {"yes_id": 4443, "no_id": 1904, "yes_family": (4443, 10784, 11262, 8438),
                   "no_family": (1904, 3771, 951, 2301)}
_QWEN35_FAMILIES = {"yes_family": (9405, 9175, 9542, 7179), "no_family": (2083, 2665, 874, 2233)}

ADAPTERS: dict[str, tuple[str, str]] = {
    "hf": ("shovir_core.models.hf", "build_hf"),
    "remote-code": ("shovir_core.models.remote", "build_remote"),
    "tiny": ("shovir_core.models.tiny", "build_tiny"),
    "reference": ("shovir_core.models.reference", "build_reference"),
    "ref-vlm": ("shovir_core.models.ref_vlm", "build_ref_vlm"),
    "reference-vqa": ("shovir_core.models.reference_vqa", "build_reference_vqa"),
    "ref-vlm-vqarad": ("shovir_core.models.ref_vlm_vqarad", "build_ref_vlm_vqarad"),
    "hf-auto": ("shovir_core.models.hf_auto", "build_hf_auto"),
    "imported": ("shovir_core.models.imported", "build_imported"),
}
"""Adapter kind -> (module, builder): imported by name on first use, so the registry imports no adapter
(and no adapter imports the registry)."""

_CATALOGUES: tuple[tuple[str, str], ...] = (
    ("shovir_core.models.tiny", "TINY_SPECS"),
    ("shovir_core.models.reference", "REFERENCE_SPECS"),
    ("shovir_core.models.ref_vlm", "REF_VLM_SPECS"),
    ("shovir_core.models.reference_vqa", "REFERENCE_VQA_SPECS"),
    ("shovir_core.models.ref_vlm_vqarad", "SPECS"),
)
"""Entries declared by the light adapter modules themselves (they carry their own stated behaviour)."""


LOADERS: list = []
"""Callables run before every lookup that may add entries to :data:`REGISTRY` (the model catalogue,
:mod:`shovir_core.protocols.catalog`, installs its ``$SHOVIR_MODELS`` reader here)."""


def _load_declared() -> None:
    for load in list(LOADERS):
        load()


def _builder(kind: str):
    module, attr = ADAPTERS[kind]
    return getattr(importlib.import_module(module), attr)


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
        ModelSpec("medgemma-1.5-4b", "hf", "google/medgemma-1.5-4b-it", paper="ShoViR", text_layers=34,
                  report_system="Describe this X-ray.", report_user="Analyze this image.", report_prompt_slot="system",
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
        ModelSpec("nv-reason-cxr", "hf", "nvidia/NV-Reason-CXR-3B", paper="ShoViR", text_layers=36,
                  report_user="Find abnormalities and support devices.", max_new_tokens=2048,
                  notes="Qwen2_5_VLForConditionalGeneration; one user message [image, text]; the report is "
                        "batch_decode(new tokens, skip_special_tokens=True): chat markers and EOS are dropped, the "
                        "reasoning text (<think>/<answer> tags included) is kept, as the authors' BaseHFLM does"),
    ]
    modalens = [
        ModelSpec("medgemma-27b", "hf", "google/medgemma-27b-it", revision="2d3e00e", paper="ModaLens", text_layers=62,
                  families=_GEMMA_FAMILIES, processor_kwargs={"do_pan_and_scan": False},
                  notes="896x896, 256 image tokens, pan-and-scan off, bf16"),
        ModelSpec("medgemma-4b", "hf", "google/medgemma-4b-it", revision="290cda5e", paper="ModaLens", text_layers=34,
                  families=_GEMMA_FAMILIES, processor_kwargs={"do_pan_and_scan": False}),
        ModelSpec("qwen3.5-9b", "hf", "Qwen/Qwen3.5-9B", revision="c2022362", paper="ModaLens", text_layers=32,
                  families=_QWEN35_FAMILIES, chat_template_kwargs={"enable_thinking": False},
                  processor_kwargs={"max_pixels": 802816}, notes="thinking disabled; images capped at 802,816 px"),
        ModelSpec("qwen3.5-27b", "hf", "Qwen/Qwen3.5-27B", paper="ModaLens", text_layers=64, families=_QWEN35_FAMILIES,
                  chat_template_kwargs={"enable_thinking": False}, processor_kwargs={"max_pixels": 802816},
                  notes="revision not stated in the paper"),
        ModelSpec("llava-next-mistral-7b", "hf", "llava-hf/llava-v1.6-mistral-7b-hf", revision="2424fdd4", text_layers=32,
                  paper="ModaLens", notes="LlavaNextForConditionalGeneration (anyres); token families from the "
                                          "Mistral tokenizer at load (the paper lists no ids)"),
        ModelSpec("llava-1.5-7b", "hf", "llava-hf/llava-1.5-7b-hf", paper="ModaLens", text_layers=32,
                  notes="cross-model probe only (App. N); LlavaForConditionalGeneration; revision not stated in "
                        "the paper (none pinned); families from the tokenizer at load"),
        ModelSpec("gemma-3-27b", "hf", "google/gemma-3-27b-it", paper="ModaLens", text_layers=62, families=_GEMMA_FAMILIES,
                  processor_kwargs={"do_pan_and_scan": False},
                  notes="the obsolete run; Gemma 3 tokenizer (MedGemma's ids); revision not stated in the paper"),
    ]
    declared = [spec for module, attr in _CATALOGUES for spec in getattr(importlib.import_module(module), attr)]
    return {s.name: s for s in shovir + modalens + declared}


REGISTRY: dict[str, ModelSpec] = _specs()
"""Every registered model by name."""

ALIASES = {"medgemma": "medgemma-1.5-4b", "medgemma-27b-it": "medgemma-27b", "medgemma-4b-it": "medgemma-4b"}


def list_models(*, paper: str | None = None) -> list[str]:
    """Registered names, optionally those of one paper (``"ShoViR"``, ``"ModaLens"``, ``"test"``,
    ``"reference"``, ``"declared"``: the models of ``$SHOVIR_MODELS`` catalogues)."""
    _load_declared()
    return [n for n, s in REGISTRY.items() if paper is None or s.paper.lower() == paper.lower()]


def _spec(name: str) -> ModelSpec:
    _load_declared()  # models declared in catalogue files (shovir_core.protocols.catalog)
    base = ALIASES.get(name, name).partition("@")[0]
    if base not in REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(REGISTRY)}")
    return REGISTRY[base]


def is_reference(name: str) -> bool:
    """Whether ``name`` is one of the reference models (plain numpy or a small CNN, milliseconds a request),
    not a transformer; unknown names are not.

    >>> is_reference("ref-anchored@0.5"), is_reference("ref-vlm")
    (True, False)
    """
    try:
        return _spec(stand_in_for(name) or name).adapter == "reference"
    except KeyError:
        return False


STAND_INS_ENV = "SHOVIR_STAND_INS"
"""A JSON mapping ``{real model: stand-in}`` set by ``shovir rehearse``: while it is set, :func:`get_model`
builds the stand-in in place of each named real model and :func:`model_fingerprint` records it (so a
rehearsal record is never mistaken for, or reused as, a real model's record)."""


SURROGATE_STAND_INS: dict[str, str] = {
    "tiny-xrv-densenet": "torchxrayvision",
}
"""Stand-ins of the models outside this registry, by name -> the model they stand in for: the image
classifier of ModaLens App. K (``torchxrayvision``, :mod:`shovir_core.protocols.modalens_surrogate`) becomes
``tiny-xrv-densenet``, a small DenseNet with TorchXRayVision's 18 output slots and seeded random weights
(:func:`shovir_core.models.xrv.tiny_xrv_densenet`) behind the paper's preprocessing and operating-point
normalisation."""


def stand_in_for(name: str) -> str | None:
    """The stand-in of ``name`` under ``$SHOVIR_STAND_INS`` (``None`` when there is none).

    >>> import os; os.environ.get(STAND_INS_ENV) is None and stand_in_for("medgemma-27b") is None
    True
    """
    raw = os.environ.get(STAND_INS_ENV)
    if not raw:
        return None
    try:
        table = json.loads(raw)
    except ValueError:
        raise UsageError(f"${STAND_INS_ENV} is not a JSON mapping of model names: {raw!r}") from None
    target = table.get(ALIASES.get(name, name))
    if target is None:
        return None
    if target in SURROGATE_STAND_INS:
        if SURROGATE_STAND_INS[target] != name:
            raise UsageError(f"${STAND_INS_ENV}: {target!r} stands in for {SURROGATE_STAND_INS[target]!r}, not {name!r}")
        return target
    base = ALIASES.get(target, target).partition("@")[0]
    if base not in REGISTRY or REGISTRY[base].adapter not in ("reference", "tiny", "ref-vlm"):
        raise UsageError(f"${STAND_INS_ENV}: stand-in {target!r} for {name!r} is not a reference or tiny model")
    return target


DEEP_TWIN_WIDTH: dict[str, dict[str, int]] = {
    "tiny-gemma3": {"hidden": 16, "heads": 1, "kv_heads": 1, "intermediate": 32},
}
"""The text width of a tiny model named with a layer count (``tiny-gemma3@62``, MedGemma-27B's stand-in in a
rehearsal), where it differs from the tiny default (hidden 64, 4 heads, 2 KV heads, intermediate 128).
At 62 layers the width is what a stand-in's forward pass costs, and the rehearsal scores every trial of
App. N's designs through all 62 layers: a quarter of the default width (one head of the same size, 16)
runs them faster -- on one CPU thread, 32 prompts of 171 tokens, the image-gradient baseline of App. N.3
(a forward and a backward pass per trial) took 0.93 s against 1.60 s at hidden 32 and the logit lens
0.40 s against 0.64 s (2026-12-06), and hidden 32 had run a 124-token prompt 2.5 times faster than the
default. The layer count is the design's (App. N names L16, L25, L46, L61); the width is no part of any
design."""


DEEP_TWIN_BATCH = 32
"""The scoring batch of a tiny model named with a layer count (the tiny default is 8). A deep twin's forward
pass through 62 narrow layers costs mostly the per-layer work of each call, not its rows: on one CPU thread a
62-layer pass of one 171-token prompt took 17.7 ms, of 8 prompts 49 ms (6.2 ms each) and of 32 prompts 160 ms
(5.0 ms each), and a case's 14 questions after their shared prefix go in one suffix batch instead of two. On
the 2 % rehearsal tree the records of App. N's three chapters took 47.7 s instead of 60.5 s (lens and
knockout), 60.4 s instead of 72.7 s (N.3) and 32.4 s instead of 38.6 s (interventions) (2026-12-07). A batch
changes which prompts are padded together, so scores move by float rounding only; it is no part of a design
or of the model's fingerprint."""


def tiny_dims(name: str) -> dict | None:
    """The text dimensions a tiny model's name asks for: ``tiny-gemma3@62`` has 62 decoder layers (a
    rehearsal's stand-in of a 62-layer model) at the width of :data:`DEEP_TWIN_WIDTH`; a bare name, the
    tiny default (``None``).

    >>> tiny_dims("tiny-gemma3@62"), tiny_dims("tiny-gemma3")
    ({'layers': 62, 'hidden': 16, 'heads': 1, 'kv_heads': 1, 'intermediate': 32}, None)
    >>> tiny_dims("tiny-llava-1.5@32")
    {'layers': 32}
    """
    base, _, arg = ALIASES.get(name, name).partition("@")
    if not arg:
        return None
    if not arg.isdigit() or int(arg) < 1:
        raise UsageError(f"{name!r}: the number after '@' of a tiny model is its decoder-layer count (a positive "
                         f"integer), e.g. {base}@62")
    return {"layers": int(arg), **DEEP_TWIN_WIDTH.get(base, {})}


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
    stand_in = stand_in_for(name)
    if stand_in is not None:
        return get_model(stand_in, device=device, dtype=dtype, seed=seed)
    spec = _spec(name)
    build = _builder(spec.adapter)
    if spec.adapter == "reference":
        model = build(ALIASES.get(name, name))
        # the CNN's models (and any reference model in a process that already has torch): one thread on the CPU
        # (threads.py; set here rather than in reference.py, whose bytes are part of the models' identity)
        from .reference import ImageClassifier

        if isinstance(model, ImageClassifier) or "torch" in sys.modules:
            from .threads import use_demo_threads

            use_demo_threads()
        return model
    if spec.adapter == "tiny":
        dims = tiny_dims(name)
        model = build(spec.name, seed=seed, device=device, dtype=dtype, dims=dims,
                      **({"batch_size": DEEP_TWIN_BATCH} if dims else {}))  # dims: only a name with a layer count
    else:
        model = build(spec, local_path=local_path, device=device, dtype=dtype)
    if spec.adapter in ("tiny", "ref-vlm"):  # the demo transformers: one torch thread on the CPU (threads.py)
        from .threads import use_demo_threads

        use_demo_threads(getattr(model, "device", None))
    return model


def model_fingerprint(name: str, *, seed: int = 0) -> dict:
    """What identifies a model's outputs, computed without loading it.

    Protocols put this into their resolved spec, so a run record's identity changes when a
    reference model is retrained or a tiny model's construction changes (a record made with the
    old model is then not reused). Real checkpoints are identified by their pinned id and revision.
    """
    spec = _spec(name)
    out = {"name": ALIASES.get(name, name), "adapter": spec.adapter, "hf_id": spec.hf_id, "revision": spec.revision}
    stand_in = stand_in_for(name)
    if stand_in is not None:
        out["stand_in"] = model_fingerprint(stand_in, seed=seed)
    sha = code_sha256(spec.adapter)
    if sha is not None:
        out["sha256"] = sha
        if spec.adapter == "tiny":
            out["seed"] = seed
            dims = tiny_dims(name)
            if dims:  # a tiny model named with a layer count: its dimensions (a bare name keeps its fingerprint)
                out["dims"] = dims
    declared = getattr(spec, "declared", None)
    if declared:  # a catalogue entry: the record says exactly which declared model made it
        out["declared"] = dict(declared)
        out["declared_sha256"] = spec.declared_sha256
        local = spec.local_checkpoint() if spec.adapter == "hf-auto" else None
        if local is not None:
            from .hf import checkpoint_fingerprint

            out["checkpoint_fingerprint"] = checkpoint_fingerprint(local)
        if spec.adapter == "imported":
            from .imported import answers_sha256

            out["answers_sha256"] = answers_sha256(spec.answers)
    return out


def register_remote_adapter(name: str, adapter: type[RemoteCodeVLM]) -> None:
    """Plug an adapter in for a registered remote-code model (the hook for the GitHub-code models).

    ``adapter`` subclasses :class:`~shovir_core.models.remote.RemoteCodeVLM` and implements
    ``load(spec, path, *, device, dtype)`` and ``generate_reports``; :func:`get_model` then uses it.
    """
    from .remote import REMOTE_ADAPTERS, RemoteCodeVLM

    if name not in REGISTRY or REGISTRY[name].adapter != "remote-code":
        raise KeyError(f"{name!r} is not a registered remote-code model "
                       f"({', '.join(n for n, s in REGISTRY.items() if s.adapter == 'remote-code')})")
    if not (isinstance(adapter, type) and issubclass(adapter, RemoteCodeVLM)):
        raise TypeError(f"register_remote_adapter({name!r}): adapter must be a RemoteCodeVLM subclass, got {adapter!r}")
    REMOTE_ADAPTERS[name] = adapter
