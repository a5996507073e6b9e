"""``hf-auto``: one transformers adapter for any image-text-to-text checkpoint with a chat template.

A model declared in a catalogue (:mod:`~shovir_core.protocols.catalog`) with ``adapter: hf-auto`` is
loaded with ``AutoModelForImageTextToText`` and ``AutoProcessor`` from its local folder (never
downloaded) and run by :class:`~shovir_core.models.hf.HFVLM`: left-padded batched report generation
(greedy), yes/no readouts from the logits at the first generated position, and the prefix trie that
prefills a shared image prefix once. No code per family: what differs between families is read from
the checkpoint (its chat template, processor and tokenizer) and from the declared entry (prompts,
question template, answer instruction, token families, processor options).

Two things a family can need and this adapter does without code:

* a processor whose video half needs torchvision (Qwen2-VL, Qwen2.5-VL, Qwen3-VL/3.5): where
  ``AutoProcessor`` cannot be built, the processor class of the checkpoint's model type is built from
  its image processor (the PIL backend) and tokenizer alone, with no video processor;
* prefix reuse: on by default (``prefix_reuse: auto``) except where the family keeps a recurrent state
  (linear-attention layers, e.g. Qwen3.5), whose cache cannot be shared and then extended; there every
  request is scored in full and the provenance says so (``prefix_reuse_reason``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .hf import HFVLM, _has_recurrent_layers, checkpoint_fingerprint, pick_device_dtype
from .prompts import INSTRUCTIONS
from .protocol import ScoreRequest
from .spec import MODEL_DIR_ENV, DeclaredModelError, ModelNotAvailableError, resolve_weights

__all__ = ["AutoVLM", "build_hf_auto", "load_processor", "declared_question"]


def declared_question(request: ScoreRequest, *, template: str, answer_instruction: str | None) -> ScoreRequest:
    """The request as the declared model is asked it: the question through ``template``
    (``{question}``, ``{finding}``) and the protocol's ``yes_no`` instruction replaced by
    ``answer_instruction`` when one is declared. The returned request renders to the same text block
    layout as :func:`~shovir_core.models.prompts.text_block`.

    >>> r = ScoreRequest(None, "Does this chest X-ray show edema?", instruction="yes_no", finding="Edema")
    >>> declared_question(r, template="Q: {question}", answer_instruction="Reply yes or no.").question
    'Q: Does this chest X-ray show edema? Reply yes or no.'
    """
    from .report_text import finding_of_question

    finding = request.finding or finding_of_question(request.question) or ""
    question = template.format(question=request.question, finding=str(finding).lower())
    instruction = INSTRUCTIONS[request.instruction]
    if request.instruction == "yes_no" and answer_instruction:
        instruction = answer_instruction
    text = f"{question} {instruction}" if instruction else question
    return dataclasses.replace(request, question=text, instruction="none")


def load_processor(path: str | Path, *, options: dict | None = None, chat_template: str | None = None):
    """``(processor, how)``: ``AutoProcessor`` of ``path``, or -- where it cannot be built here (a video
    processor that needs torchvision, a processor class saved under a local subclass name) -- the
    processor class of the checkpoint's model type built from its PIL image processor and tokenizer
    with no video processor. ``how`` says which (``"AutoProcessor"`` or ``"image-only <class>"``)."""
    import transformers
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    options = dict(options or {})
    how = "AutoProcessor"
    try:
        processor = AutoProcessor.from_pretrained(path, local_files_only=True, **options)
        if not hasattr(processor, "image_processor"):
            raise TypeError(f"AutoProcessor gave a {type(processor).__name__} without an image processor")
    except (AttributeError, TypeError, ValueError, ImportError, OSError) as first:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        name = PROCESSOR_MAPPING_NAMES.get(config.model_type)
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if cls is None:
            raise ModelNotAvailableError(
                f"{path}: AutoProcessor failed ({type(first).__name__}: {first}) and model type "
                f"{config.model_type!r} names no processor class to build instead") from None

        class ImageOnly(cls):  # the video processor needs torchvision, absent here
            def check_argument_for_proper_class(self, argument_name, argument):
                if argument is None:
                    return None
                return super().check_argument_for_proper_class(argument_name, argument)

        ImageOnly.__name__ = ImageOnly.__qualname__ = f"ImageOnly{cls.__name__}"
        image_keys = {k: v for k, v in options.items() if k not in ("chat_template",)}
        image_processor = AutoImageProcessor.from_pretrained(path, local_files_only=True, backend="pil", **image_keys)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        kwargs = {"image_processor": image_processor, "tokenizer": tokenizer,
                  "chat_template": chat_template or tokenizer.chat_template}
        if "video_processor" in cls.get_attributes():
            kwargs["video_processor"] = None
        processor = ImageOnly(**kwargs)
        how = f"image-only {cls.__name__}"
    if chat_template:
        processor.chat_template = chat_template
    if not (getattr(processor, "chat_template", None) or getattr(processor.tokenizer, "chat_template", None)):
        raise ModelNotAvailableError(f"{path}: the checkpoint has no chat template; declare one ('chat_template' "
                                     "in the model catalogue)")
    return processor, how


class AutoVLM(HFVLM):
    """:class:`~shovir_core.models.hf.HFVLM` driven by a declared catalogue entry."""

    def __init__(self, spec, model, processor, *, source: dict, **kwargs) -> None:
        reason = "on"
        want = getattr(spec, "prefix_reuse", "auto")
        recurrent = _has_recurrent_layers(model)
        if want == "off":
            reason = "off: declared prefix_reuse: off"
        elif recurrent:
            reason = ("off: the family keeps a recurrent (linear-attention) state, which a shared prefix cache "
                      "cannot carry; every request is scored in full")
        super().__init__(spec, model, processor, source=source, prefix_reuse=want != "off", **kwargs)
        self.prefix_reuse_reason = reason
        self.families_source = "declared" if spec.families else "tokenizer"
        if self.prefix_reuse and want == "auto":
            self._probe_prefix_reuse()  # before any provenance is read: records say what was used

    @classmethod
    def from_pretrained(cls, spec, path, *, device: str | None = None, dtype: str | None = None,
                        **kwargs) -> "AutoVLM":
        """Load the declared checkpoint folder with the Auto classes (never downloads)."""
        import re

        from transformers import AutoModelForImageTextToText

        path = Path(path)
        resolved = path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None
        if spec.revision and resolved and not resolved.startswith(spec.revision):
            raise ModelNotAvailableError(
                f"model {spec.name!r}: the checkpoint {path} is revision {resolved[:12]}, the catalogue pins "
                f"{spec.revision}")
        dev, torch_dtype = pick_device_dtype(spec.dtype, device=device, dtype=dtype)
        processor, how = load_processor(path, options=spec.processor_kwargs, chat_template=spec.chat_template)
        model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True, dtype=torch_dtype)
        model.to(dev).eval()
        source = {"kind": "checkpoint", "local_path": str(path), "resolved_revision": resolved,
                  "revision_verified": bool(resolved and spec.revision),
                  "checkpoint_fingerprint": checkpoint_fingerprint(path), "processor_loaded_as": how}
        return cls(spec, model, processor, source=source, **kwargs)

    def _token_families(self, spec):
        """Declared families as given (ids checked against the vocabulary); else from the tokenizer."""
        from .readouts import TokenFamilies

        if not spec.families:
            return super()._token_families(spec)
        ids = tuple(spec.families["yes_family"]) + tuple(spec.families["no_family"])
        vocab = len(self.tokenizer)
        bad = [i for i in ids if not 0 <= int(i) < vocab]
        if bad:
            raise DeclaredModelError(f"{spec.name}: declared token ids {bad} are outside the vocabulary (size {vocab})")
        names = {int(i): self.tokenizer.convert_ids_to_tokens(int(i)) for i in ids}
        return TokenFamilies(int(spec.families["yes_family"][0]), int(spec.families["no_family"][0]),
                             tuple(int(i) for i in spec.families["yes_family"]),
                             tuple(int(i) for i in spec.families["no_family"]), names)

    def _probe_prefix_reuse(self) -> None:
        """Check once that scoring after a shared prefix cache gives the full prompt's logits.

        Two questions on one grey test image are scored both ways. A family whose prompt prefix
        attends bidirectionally (PaliGemma's prefix-LM attention) or otherwise cannot continue a cached
        prefix gives different logits: prefix reuse is then turned off, and the provenance says why.
        Tolerance: 1e-4 in float32, 5e-2 in 16-bit precision (logits of the yes/no tokens).
        """
        import numpy as np
        import torch

        image = np.tile(np.linspace(0, 255, 32, dtype=np.uint8), (32, 1))
        probe = [ScoreRequest(image, "Does this chest X-ray show edema?", report="No acute finding."),
                 ScoreRequest(image, "Does this chest X-ray show cardiomegaly?", report="No acute finding.")]
        stats = dict(self.stats)
        try:
            with torch.no_grad():
                shared = self._score_prefix_group(probe, 0)
                if shared is None:
                    return
                full = self._score_naive(probe, 0)
        finally:
            self.stats = stats
        tol = 1e-4 if self.dtype == torch.float32 else 5e-2
        worst = max(abs(a[k] - b[k]) for a, b in zip(shared, full) for k in ("logit_yes", "logit_no"))
        if worst > tol:
            self.prefix_reuse = False
            self.prefix_reuse_reason = (f"off: scoring after a shared prefix cache changes this family's logits (by "
                                        f"{worst:.3g} > {tol:g} on a probe; e.g. a bidirectional prefix); every "
                                        "request is scored in full")

    def _encode(self, texts, images):
        batch = super()._encode(texts, images)
        batch.pop("labels", None)  # training labels some processors add (PaliGemma's): never a model input here
        return batch

    def render(self, request: ScoreRequest) -> str:
        return super().render(declared_question(request, template=self.spec.question_template,
                                                answer_instruction=self.spec.answer_instruction))

    def identity(self) -> dict:
        return {**super().identity(), "declared_sha256": self.spec.declared_sha256}

    def provenance(self) -> dict:
        out = super().provenance()
        out.update(adapter="hf-auto", declared=dict(self.spec.declared), declared_sha256=self.spec.declared_sha256,
                   catalogue=self.spec.source_file, prefix_reuse_reason=self.prefix_reuse_reason,
                   families_source=self.families_source)
        return out

    def describe(self) -> dict:
        """What ``shovir audit --show`` prints: the prompts, the token families (and where they came
        from), the processor and the prefix-reuse decision."""
        tok = self.tokenizer
        return {
            "name": self.name, "architecture": type(self.model).__name__,
            "processor": self.source.get("processor_loaded_as"),
            "report_prompt": {"system": self.spec.report_system, "user": self.spec.report_user,
                              "order": self.spec.report_order},
            "question_template": self.spec.question_template, "answer_instruction": self.spec.answer_instruction,
            "yes_family": {int(i): tok.convert_ids_to_tokens(int(i)) for i in self.families.yes_family},
            "no_family": {int(i): tok.convert_ids_to_tokens(int(i)) for i in self.families.no_family},
            "families_source": self.families_source, "prefix_reuse": self.prefix_reuse_reason,
        }


def build_hf_auto(spec, *, local_path: str | Path | None = None, device: str | None = None,
                  dtype: str | None = None) -> AutoVLM:
    """The adapter of a declared ``hf-auto`` entry, from its checkpoint folder (``checkpoint`` when it
    is a folder, else ``$SHOVIR_MODEL_DIR/<name>`` or ``$SHOVIR_MODEL_DIR/<org>--<repo>``)."""
    path = local_path or spec.local_checkpoint()
    if path is None:
        try:
            path = resolve_weights(spec)
        except ModelNotAvailableError as exc:
            raise ModelNotAvailableError(f"{exc} (declared in {spec.source_file}: checkpoint {spec.checkpoint!r}; "
                                         f"a local folder or an id under ${MODEL_DIR_ENV})") from None
    return AutoVLM.from_pretrained(spec, path, device=device, dtype=dtype)
