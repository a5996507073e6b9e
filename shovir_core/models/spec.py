"""What a registry entry is, and where its weights are: no other module of the package is imported.

:class:`ModelSpec` (one registry entry), :class:`ModelNotAvailableError`, :func:`resolve_weights`
(the local checkpoint folder of an entry; never downloads) and :func:`code_sha256` (the hash of the
source and parameter files that decide a locally built model's outputs). The adapters
(:mod:`~shovir_core.models.hf`, :mod:`~shovir_core.models.remote`, :mod:`~shovir_core.models.tiny`,
:mod:`~shovir_core.models.reference`) import these from here, and the registry
(:mod:`~shovir_core.models.registry`) imports the adapters lazily by name, so no module imports
the registry back.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ShovirError

__all__ = ["ModelSpec", "DeclaredSpec", "DeclaredModelError", "ModelNotAvailableError", "resolve_weights", "MODEL_DIR_ENV", "FINGERPRINT_FILES",
           "code_sha256"]

MODEL_DIR_ENV = "SHOVIR_MODEL_DIR"


class DeclaredModelError(ShovirError, ValueError):
    """A declared model (a catalogue entry) is not valid: a key, a value, or its token ids."""


class ModelNotAvailableError(ShovirError, RuntimeError):
    """The model's weights (or its adapter's upstream code) are not available on this machine."""


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry.

    ``adapter``: ``"hf"`` (transformers ``AutoModelForImageTextToText``), ``"remote-code"`` (the
    checkpoint's own code via ``trust_remote_code``, or a separate upstream code base:
    :mod:`~shovir_core.models.remote`), ``"tiny"`` (random-weight model built from a config) or
    ``"reference"``. ``report_*`` give the report prompt (system text, user text, block order);
    ``report_prompt_slot`` says which of the two holds the model's own prompt -- the authors'
    ``prompt_text`` of ``arco-group/ShoViR-Bench`` ``src/benchmark/models/base.py``@f68059b -- and so
    which one a replacement prompt (§C.3's shared ``radiology_minimal``) replaces: ``"user"`` (the
    default) or ``"system"`` (MedGemma: system = prompt, user = "Analyze this image.").
    ``max_new_tokens`` is the report length; ``families`` the paper's answer-token ids, checked
    against the tokenizer at load time. ``text_layers`` is the number of decoder layers of the
    checkpoint's language model (``None``: not recorded); a rehearsal builds its tiny stand-in with
    as many layers, so that a design naming a layer of the real model names one of the stand-in's.
    """

    name: str
    adapter: str
    hf_id: str | None = None
    revision: str | None = None
    paper: str = ""
    report_user: str = "Describe this X-ray."
    report_system: str | None = None
    report_order: str = "image_first"
    report_prompt_slot: str = "user"
    max_new_tokens: int = 128
    do_sample: bool = False
    dtype: str = "bfloat16"
    families: dict | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    processor_kwargs: dict = field(default_factory=dict)
    notes: str = ""
    text_layers: int | None = None

    def __post_init__(self) -> None:
        if self.report_prompt_slot not in ("user", "system"):
            raise ValueError(f"{self.name}: report_prompt_slot {self.report_prompt_slot!r}; use 'user' or 'system'")
        if self.report_prompt_slot == "system" and not self.report_system:
            raise ValueError(f"{self.name}: report_prompt_slot 'system' needs a report_system prompt")


@dataclass(frozen=True)
class DeclaredSpec(ModelSpec):
    """A registry entry declared in a model catalogue (:mod:`shovir_core.protocols.catalog`): :class:`ModelSpec`
    plus the declared extras, the declared entry itself and its SHA-256."""

    checkpoint: str | None = None
    question_template: str = "{question}"
    answer_instruction: str | None = None
    prefix_reuse: str = "auto"
    chat_template: str | None = None
    answers: str | None = None
    declared: dict = field(default_factory=dict)
    declared_sha256: str = ""
    source_file: str = ""

    def local_checkpoint(self) -> Path | None:
        """The checkpoint as a local folder when it is one (``None`` for an id)."""
        if self.checkpoint and (Path(self.checkpoint).expanduser() / "config.json").is_file():
            return Path(self.checkpoint).expanduser()
        return None


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


FINGERPRINT_FILES: dict[str, tuple[str, ...]] = {
    "reference": ("models/reference.py", "models/report_text.py", "models/cnn.py", "models/readouts.py",
                  "resources/ref_reference_models.json", "resources/ref_image_classifier.safetensors"),
    "tiny": ("models/tiny.py", "models/hf.py", "models/attention_masks.py", "models/prompts.py",
             "models/readouts.py"),
    "xrv-stand-in": ("models/xrv.py", "metrics/surrogate.py"),
    "ref-vlm": ("models/ref_vlm.py", "models/tiny.py", "models/hf.py", "models/attention_masks.py", "models/prompts.py",
                "models/readouts.py", "resources/ref_vlm.json", "resources/ref_vlm.safetensors"),
    "reference-vqa": ("models/reference_vqa.py", "models/protocol.py"),
    "ref-vlm-vqarad": ("models/ref_vlm_vqarad.py", "models/ref_vlm.py", "models/tiny.py", "models/hf.py",
                       "models/attention_masks.py", "models/prompts.py", "models/readouts.py", "resources/ref_vlm_vqarad.json",
                       "resources/ref_vlm_vqarad.safetensors"),
}
"""Per adapter kind, the files (relative to the package) whose content decides what its models output."""


def code_sha256(adapter: str) -> str | None:
    """SHA-256 over :data:`FINGERPRINT_FILES` of an adapter kind (``None`` for checkpoint-backed kinds).

    A retrained reference model or a changed tiny-model construction changes this hash, so a
    protocol that pins it makes a new record instead of reusing one made with the old model.
    """
    files = FINGERPRINT_FILES.get(adapter)
    if not files:
        return None
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()
