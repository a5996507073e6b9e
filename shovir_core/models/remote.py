"""Adapters for the ShoViR models whose modelling code ships with their checkpoint (``trust_remote_code``).

Three checkpoints carry their own Python modelling code on the Hugging Face hub; this module loads
them from a **local** folder (found by :func:`~shovir_core.models.spec.resolve_weights`; never a
download) with ``trust_remote_code=True`` and runs them the way the ShoViR authors' wrappers do
(arco-group/ShoViR-Bench ``src/benchmark/models/chexagent/__init__.py``@7d9ea5c,
``src/benchmark/models/maira_2/__init__.py``@0c3a007, ``src/benchmark/models/cxrmateed/__init__.py``@6fc3066):

``chexagent-2``  ``AutoModelForCausalLM`` + the checkpoint's tokenizer; the image is written to a
                 temporary JPEG and referenced through ``tokenizer.from_list_format([{image}, {text}])``;
                 conversation ``[{"from": "system", "value": "You are a helpful assistant."},
                 {"from": "human", "value": query}]``; greedy, one beam, 512 new tokens.
``maira-2``      ``AutoModelForCausalLM`` (sdpa) + ``AutoProcessor``;
                 ``processor.format_and_preprocess_reporting_input(current_frontal=image,
                 current_lateral=None, prior_frontal=None, indication=prompt, technique="",
                 comparison="", prior_report=None, get_grounding=False)``; greedy, 450 new tokens.
``cxrmate``      ``AutoModel`` (encoder-decoder) + ``PreTrainedTokenizerFast``; grayscale -> 3
                 channels, resize the short side to the encoder's ``image_size``, centre crop, scale
                 to [0, 1], normalise with the encoder's mean/std, pixels shaped (B, 1, C, H, W);
                 ``generate(max_length=128, num_beams=1, bad_words_ids=[[NF], [NI]])``; output
                 ``"Findings: ...\\nImpression: ..."``.

Three more ShoViR models (LLaVA-Rad, Libra-v1, RaDialog) are run by separate code bases that are not
part of their checkpoints: their adapters (:mod:`.libra`, :mod:`.radialog`) import the authors' code
(:mod:`.upstream`) and are listed in :data:`UPSTREAM_CODE`; :func:`shovir_core.models.register_remote_adapter`
replaces any adapter.

Yes/no scoring (ModaLens readouts) is offered where the model takes a free-text instruction:
CheXagent-2. MAIRA-2's processor only builds its reporting and grounding prompts and CXRMate takes
no text at all, so they generate reports only.

Verified offline only against tiny stand-in checkpoints that expose the same APIs (the tests); the
real checkpoints' code was written for transformers 4.x, so a load failure under the installed
version is reported as :class:`~shovir_core.models.spec.ModelNotAvailableError` naming it, and
a checkpoint whose weights do not fill the model is refused. CXRMate's torchvision pipeline is
re-implemented with torch operations (torchvision is not a dependency); its grayscale step rounds,
where torchvision's uint8 path may differ by one gray level.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Sequence

import numpy as np

from .prompts import ANSWER_OPTIONS, text_block
from .protocol import VLM, Box, ScoreRequest, image_fingerprint, to_rgb_uint8
from .readouts import TokenFamilies, parse_answer, yes_no_readout
from .spec import ModelNotAvailableError, ModelSpec, resolve_weights

__all__ = ["RemoteCodeVLM", "CheXagent2VLM", "Maira2VLM", "CXRMateVLM", "REMOTE_ADAPTERS", "UPSTREAM_CODE",
           "build_remote"]


class RemoteCodeVLM(VLM):
    """Base of the adapters that run a checkpoint's own modelling code.

    Subclasses implement :meth:`load` (build model and tokenizer/processor from a local folder) and
    :meth:`generate_reports`; :meth:`identity` and :meth:`provenance` are shared.

    Parameters
    ----------
    spec
        The registry entry (prompt, decoding).
    model
        The loaded model (already on its device, in eval mode).
    processor
        The checkpoint's processor or tokenizer.
    source
        Where the weights came from (local path, checkpoint fingerprint).
    """

    architecture_note: str = ""

    def __init__(self, spec: ModelSpec, model, processor, *, source: dict) -> None:
        self.spec, self.model, self.processor, self.source = spec, model, processor, source
        self.name = spec.name
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype

    @classmethod
    def load(cls, spec: ModelSpec, path: Path, *, device: str | None = None,
             dtype: str | None = None) -> "RemoteCodeVLM":
        """Load the checkpoint folder ``path`` with its own code (``trust_remote_code=True``)."""
        raise NotImplementedError(f"{cls.__name__} does not implement load()")

    @staticmethod
    def _source(path: Path) -> dict:
        from .hf import checkpoint_fingerprint

        return {"kind": "checkpoint", "local_path": str(path), "trust_remote_code": True,
                "code_sha256": _code_fingerprint(path), "checkpoint_fingerprint": checkpoint_fingerprint(path)}

    def _report_prompt(self, prompt: str | None) -> str:
        return self.spec.report_user if prompt is None else prompt

    def identity(self) -> dict:
        return {
            "name": self.name, "model_id": self.spec.hf_id, "revision": self.spec.revision, "adapter": "remote-code",
            "source": {k: v for k, v in self.source.items() if k != "local_path"},
            "dtype": str(self.dtype).removeprefix("torch."), "device_type": self.device.type,
            "report_prompt": {"system": self.spec.report_system, "user": self.spec.report_user},
            "decoding": {"greedy": True, "num_beams": 1, "max_new_tokens": self.spec.max_new_tokens},
        }

    def provenance(self) -> dict:
        import torch
        import transformers

        return {**self.identity(), "architecture": type(self.model).__name__, "device": str(self.device),
                "local_path": self.source.get("local_path"), "transformers": transformers.__version__,
                "torch": torch.__version__, "notes": self.spec.notes}

    def input_key(self, request: ScoreRequest | None = None, *, image: np.ndarray | None = None,
                  prompt: str | None = None) -> str:
        if request is not None:
            return super().input_key(request)
        return json.dumps({"prompt": self._report_prompt(prompt), "image": image_fingerprint(image)}, sort_keys=True)

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        raise NotImplementedError(
            f"{self.name}: yes/no scoring is not offered; {self.architecture_note or 'the model takes no free text'}")


def _code_fingerprint(path: Path) -> str:
    """SHA-256 over the checkpoint's own ``*.py`` files (the code ``trust_remote_code`` runs)."""
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _device_dtype(spec: ModelSpec, device: str | None, dtype: str | None):
    from .hf import pick_device_dtype

    return pick_device_dtype(spec.dtype, device=device, dtype=dtype)


_LOAD_ERRORS = (ImportError, OSError, ValueError, TypeError, AttributeError, KeyError)
"""What a checkpoint's code raises when it does not fit the installed transformers or packages."""


def _require(obj, attr: str, spec: ModelSpec, path: Path, expected: str) -> None:
    """Raise ModelNotAvailableError unless ``obj`` (loaded from ``path``) has ``attr``."""
    if not hasattr(obj, attr):
        raise ModelNotAvailableError(
            f"model {spec.name!r}: the {type(obj).__name__} loaded from {path} has no {attr}; "
            f"this is not {expected}")


def _from_pretrained(auto_cls, spec: ModelSpec, path: Path, *, weights: bool = True, **kwargs):
    """``auto_cls.from_pretrained`` of the local folder, running its own code; never downloads.

    Code that fails under the installed transformers (a common fate of remote code) raises
    :class:`ModelNotAvailableError` naming the class, folder and version. With ``weights``, every
    parameter must be filled: a checkpoint whose parameter names the installed transformers does not
    map onto its code (e.g. an older layout) would otherwise run with freshly initialised layers.
    """
    import transformers

    if weights:
        kwargs["output_loading_info"] = True
    try:
        loaded = auto_cls.from_pretrained(path, trust_remote_code=True, local_files_only=True, **kwargs)
    except _LOAD_ERRORS as exc:
        raise ModelNotAvailableError(
            f"model {spec.name!r}: {auto_cls.__name__}.from_pretrained({str(path)!r}, trust_remote_code=True) failed "
            f"under transformers {transformers.__version__}: {type(exc).__name__}: {exc}") from exc
    if not weights:
        return loaded
    model, info = loaded
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        unexpected = sorted(info.get("unexpected_keys") or [])
        raise ModelNotAvailableError(
            f"model {spec.name!r}: the checkpoint at {path} does not fill {len(missing)} parameters of "
            f"{type(model).__name__} (e.g. {missing[:3]}; unused checkpoint keys e.g. {unexpected[:3]}); its code "
            "and weights do not match under this transformers version")
    return model


def _pil(image: np.ndarray):
    from PIL import Image

    return Image.fromarray(to_rgb_uint8(image))


def _input_ids(encoded):
    """``input_ids`` of whatever ``apply_chat_template``/a processor returned (tensor or mapping)."""
    return encoded["input_ids"] if isinstance(encoded, Mapping) else encoded


def _eos_ids(model, tokenizer) -> set[int]:
    ids = {getattr(tokenizer, "eos_token_id", None)}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
    return {int(i) for i in ids if i is not None}


def _cut_at_eos(row: list[int], eos: set[int]) -> list[int]:
    return row[:next((k for k, t in enumerate(row) if t in eos), len(row))]


class CheXagent2VLM(RemoteCodeVLM):
    """CheXagent-2 (``StanfordAIMI/CheXagent-2-3b-srrg-findings``): its tokenizer reads image paths.

    The checkpoint's tokenizer turns ``[{"image": path}, {"text": prompt}]`` into a query string
    (``from_list_format``) and its model loads the image from that path, so each image is written to
    a JPEG in a temporary folder first (as the ShoViR wrapper does), named by the pixels' hash. The
    report is the greedy continuation, cut at the first end-of-sequence token.
    """

    architecture_note = "instruction-following causal LM"

    def __init__(self, spec: ModelSpec, model, processor, *, source: dict) -> None:
        super().__init__(spec, model, processor, source=source)
        self._images = Path(tempfile.mkdtemp(prefix="shovir-chexagent-"))
        """Where images are written for the tokenizer; removed with the adapter. Files are named by
        the pixels' hash, so one image always gets the same path (and the same prompt tokens)."""
        weakref.finalize(self, shutil.rmtree, self._images, ignore_errors=True)

    def _image_path(self, image: np.ndarray) -> str:
        path = self._images / f"{image_fingerprint(image)[:32]}.jpg"
        if not path.is_file():
            _pil(image).save(path, format="JPEG")
        return str(path)

    @classmethod
    def load(cls, spec, path, *, device=None, dtype=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev, torch_dtype = _device_dtype(spec, device, dtype)
        tokenizer = _from_pretrained(AutoTokenizer, spec, path, weights=False)
        _require(tokenizer, "from_list_format", spec, path, "the CheXagent-2 checkpoint's own tokenizer code")
        model = _from_pretrained(AutoModelForCausalLM, spec, path, dtype=torch_dtype)
        model.to(dev).eval()
        return cls(spec, model, tokenizer, source=cls._source(path))

    @property
    def tokenizer(self):
        return self.processor

    def _query(self, image_path: str | None, text: str, *, order: str = "image_first") -> str:
        items = [{"text": text}]
        if image_path is not None:
            items = [{"image": image_path}] + items if order == "image_first" else items + [{"image": image_path}]
        return self.tokenizer.from_list_format(items)

    def _ids(self, conversation: list[dict]):
        encoded = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, return_tensors="pt")
        return _input_ids(encoded).to(self.device)

    def _report_conversation(self, image_path: str, prompt: str) -> list[dict]:
        conv = [{"from": "system", "value": self.spec.report_system}] if self.spec.report_system else []
        return conv + [{"from": "human", "value": self._query(image_path, prompt)}]

    def _decode(self, ids: list[int]) -> str:
        row = _cut_at_eos(ids, _eos_ids(self.model, self.tokenizer))
        return self.tokenizer.decode(row, skip_special_tokens=True).strip()

    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """One greedy report per image (``num_beams=1``)."""
        import torch

        n_new = int(max_new_tokens or self.spec.max_new_tokens)
        text = self._report_prompt(prompt)
        reports = []
        with torch.no_grad():
            for image in images:
                ids = self._ids(self._report_conversation(self._image_path(image), text))
                out = self.model.generate(ids, do_sample=False, num_beams=1, use_cache=True, max_new_tokens=n_new)
                reports.append(self._decode(out[0, ids.shape[1]:].tolist()))
        return reports

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        """ModaLens readouts: one human turn (no system turn) holding the image and the text block."""
        import torch

        if answer_tokens < 0:
            raise ValueError(f"{self.name}: answer_tokens must be >= 0, got {answer_tokens}")
        tok = self.tokenizer
        families = TokenFamilies.from_tokenizer(lambda s: tok.encode(s, add_special_tokens=False),
                                                lambda i: tok.convert_ids_to_tokens(int(i)), model=self.name)
        results = []
        with torch.no_grad():
            for req in requests:
                path = None if req.image is None else self._image_path(req.image)
                ids = self._ids([{"from": "human", "value": self._query(path, text_block(req), order=req.order)}])
                generated = None
                if answer_tokens > 0:
                    out = self.model.generate(ids, do_sample=False, num_beams=1, max_new_tokens=answer_tokens,
                                              output_logits=True, return_dict_in_generate=True)
                    first = out.logits[0][0]
                    generated = self._decode(out.sequences[0, ids.shape[1]:].tolist())
                else:
                    first = self.model(input_ids=ids, use_cache=False).logits[0, -1]
                res = yes_no_readout(first.float().cpu().numpy(), families)
                res["top1_token"] = tok.convert_ids_to_tokens(res["top1_id"])
                res["generated"] = generated
                res["answer"], res["compliant"] = parse_answer(generated, options=ANSWER_OPTIONS[req.instruction])
                res["n_input_tokens"] = int(ids.shape[1])
                results.append(res)
        return results


class Maira2VLM(RemoteCodeVLM):
    """MAIRA-2 (``microsoft/maira-2``): the processor's own reporting-input API.

    ``prompt`` (default ``""``, the ShoViR key ``maira2_default``) is the study's *indication*; the
    report is decoded from the new tokens and, when the processor offers it, passed through
    ``convert_output_to_plaintext_or_grounded_sequence`` (plain text without grounding).
    """

    architecture_note = "MAIRA-2's processor builds only reporting and phrase-grounding prompts"

    @classmethod
    def load(cls, spec, path, *, device=None, dtype=None):
        from transformers import AutoModelForCausalLM, AutoProcessor

        dev, torch_dtype = _device_dtype(spec, device, dtype)
        processor = _from_pretrained(AutoProcessor, spec, path, weights=False)
        _require(processor, "format_and_preprocess_reporting_input", spec, path, "the MAIRA-2 checkpoint's processor code")
        model = _from_pretrained(AutoModelForCausalLM, spec, path, dtype=torch_dtype, attn_implementation="sdpa")
        model.to(dev).eval()
        return cls(spec, model, processor, source=cls._source(path))

    def _inputs(self, image: np.ndarray, indication: str) -> dict:
        import torch

        batch = self.processor.format_and_preprocess_reporting_input(
            current_frontal=_pil(image), current_lateral=None, prior_frontal=None, indication=indication,
            technique="", comparison="", prior_report=None, return_tensors="pt", get_grounding=False)
        out = {}
        for key, value in batch.items():
            if torch.is_tensor(value):
                value = value.to(self.device)
                if torch.is_floating_point(value):
                    value = value.to(self.dtype)
            out[key] = value
        return out

    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """One greedy report per image (frontal view only, no prior, no grounding)."""
        import torch

        n_new = int(max_new_tokens or self.spec.max_new_tokens)
        indication = self._report_prompt(prompt)
        tok = getattr(self.processor, "tokenizer", self.processor)
        eos = _eos_ids(self.model, tok)
        reports = []
        with torch.no_grad():
            for image in images:
                batch = self._inputs(image, indication)
                out = self.model.generate(**batch, do_sample=False, num_beams=1, use_cache=True, max_new_tokens=n_new)
                row = _cut_at_eos(out[0, batch["input_ids"].shape[-1]:].tolist(), eos)
                text = self.processor.decode(row, skip_special_tokens=True).lstrip()
                convert = getattr(self.processor, "convert_output_to_plaintext_or_grounded_sequence", None)
                reports.append((convert(text) if convert is not None else text).strip())
        return reports


class CXRMateVLM(RemoteCodeVLM):
    """CXRMate (``aehrc/cxrmate-rrg24``): an image-only encoder-decoder; takes no prompt.

    Pre-processing mirrors the ShoViR wrapper's torchvision pipeline with torch operations
    (grayscale to 3 channels, antialiased bilinear resize of the short side, centre crop, scale,
    normalise); decoding is greedy with ``max_length`` = the spec's token budget and the ``[NF]`` /
    ``[NI]`` tokens banned. The output joins the decoded sections as ``"Findings: ...\\nImpression: ..."``.
    """

    architecture_note = "CXRMate is an image-only report generator (no text input)"

    @classmethod
    def load(cls, spec, path, *, device=None, dtype=None):
        from transformers import AutoModel, PreTrainedTokenizerFast

        dev, torch_dtype = _device_dtype(spec, device, dtype)
        tokenizer = _from_pretrained(PreTrainedTokenizerFast, spec, path, weights=False)
        model = _from_pretrained(AutoModel, spec, path, dtype=torch_dtype)
        encoder = getattr(model.config, "encoder", None)
        missing = [k for k in ("image_size", "image_mean", "image_std") if getattr(encoder, k, None) is None]
        if missing:
            raise ModelNotAvailableError(
                f"model {spec.name!r}: config.encoder at {path} lacks {missing}; not a CXRMate checkpoint")
        model.to(dev).eval()
        return cls(spec, model, tokenizer, source=cls._source(path))

    def pixel_values(self, image: np.ndarray):
        """(1, 1, 3, S, S) float pixels of one image (``S`` = the encoder's ``image_size``)."""
        import torch
        import torch.nn.functional as F

        enc = self.model.config.encoder
        size = int(enc.image_size if np.isscalar(enc.image_size) else enc.image_size[0])
        rgb = torch.from_numpy(to_rgb_uint8(image)).permute(2, 0, 1).float()
        gray = (0.2989 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]).round().clamp(0, 255)
        h, w = gray.shape
        short = min(h, w)
        new_h, new_w = (size, max(1, int(size * w / h))) if h == short else (max(1, int(size * h / w)), size)
        resized = F.interpolate(gray[None, None], size=(new_h, new_w), mode="bilinear", align_corners=False,
                                antialias=True)[0, 0].round().clamp(0, 255)
        top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
        crop = resized[top:top + size, left:left + size] / 255.0
        mean = torch.tensor(enc.image_mean, dtype=torch.float32).view(-1, 1, 1)
        std = torch.tensor(enc.image_std, dtype=torch.float32).view(-1, 1, 1)
        pixels = (crop.expand(3, -1, -1) - mean) / std
        return pixels[None, None].to(self.device, self.dtype)

    def _sections(self, output_ids) -> str:
        tok = self.processor
        split = getattr(self.model, "split_and_decode_sections", None)
        if split is None:
            return tok.decode(output_ids[0], skip_special_tokens=True).strip()
        n_args = len(inspect.signature(split).parameters)
        args = (output_ids, tok) if n_args == 2 else (output_ids, [tok.sep_token_id, tok.eos_token_id], tok)
        findings, impression = split(*args)
        return f"Findings: {findings[0].strip()}\nImpression: {impression[0].strip()}"

    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """One greedy report per image; ``prompt`` must be empty (the model reads no text)."""
        import torch

        if self._report_prompt(prompt):
            raise ValueError(f"{self.name}: the model takes no text prompt, got {prompt!r}")
        tok = self.processor
        banned = [[tok.convert_tokens_to_ids(t)] for t in ("[NF]", "[NI]") if t in tok.get_vocab()]
        n_max = int(max_new_tokens or self.spec.max_new_tokens)
        reports = []
        with torch.no_grad():
            for image in images:
                kwargs = {"bad_words_ids": banned} if banned else {}
                out = self.model.generate(pixel_values=self.pixel_values(image), max_length=n_max, num_beams=1,
                                          do_sample=False, use_cache=True, **kwargs)
                reports.append(self._sections(out))
        return reports


REMOTE_ADAPTERS: dict[str, type[RemoteCodeVLM]] = {
    "chexagent-2": CheXagent2VLM,
    "maira-2": Maira2VLM,
    "cxrmate": CXRMateVLM,
}
"""Registry name -> adapter class of the remote-code models this companion can run."""

UPSTREAM_CODE: dict[str, dict] = {
    "llava-rad": {"code": "libra", "adapter": "shovir_core.models.libra:LLaVARadVLM", "module": "libra"},
    "libra-v1": {"code": "libra", "adapter": "shovir_core.models.libra:LibraV1VLM", "module": "libra"},
    "radialog": {"code": "radialog", "adapter": "shovir_core.models.radialog:RaDialogVLM", "module": "LLAVA_Biovil"},
}
"""The GitHub-code ShoViR models: the external code base each needs (:data:`.upstream.UPSTREAM`) and the
adapter that runs it (imported when the model is built, so importing this module stays light)."""


def _upstream_adapter(name: str) -> type[RemoteCodeVLM]:
    module, _, cls = UPSTREAM_CODE[name]["adapter"].partition(":")
    return getattr(importlib.import_module(module), cls)


def build_remote(spec: ModelSpec, *, local_path=None, device: str | None = None,
                 dtype: str | None = None) -> RemoteCodeVLM:
    """The adapter of a ``remote-code`` registry entry, loaded from its local checkpoint.

    Raises
    ------
    ModelNotAvailableError
        When the weights are not found locally, or (GitHub-code models) when the authors' code base
        is neither installed nor checked out under ``$SHOVIR_CODE_DIR`` (the message names the
        repository, commit and weights).
    """
    adapter = REMOTE_ADAPTERS.get(spec.name)
    if adapter is None and spec.name in UPSTREAM_CODE:
        adapter = _upstream_adapter(spec.name)
    if adapter is None:
        raise ModelNotAvailableError(f"model {spec.name!r}: no remote-code adapter is registered for it")
    path = resolve_weights(spec, local_path=local_path)
    return adapter.load(spec, path, device=device, dtype=dtype)
