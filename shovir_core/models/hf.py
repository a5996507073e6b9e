"""The transformers backend: any ``AutoModelForImageTextToText`` checkpoint behind the protocol.

Prompts go through the processor's own chat template (:mod:`~shovir_core.models.prompts`).
Batches are left-padded and decoded greedily. Yes/no readouts come from the logits at the first
generated position; questions that share a prompt prefix (the all-14 design: 14 questions after the
same image and report) reuse that prefix's key/value cache (:meth:`HFVLM.score_yes_no`).
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import defaultdict
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .attention_masks import forward_inputs
from .image_inputs import kept_outputs, processor_digest
from .packed_cache import compact, cut_rows, packable, stacked_cache
from .prompts import ANSWER_OPTIONS, chat_messages, report_messages, score_layout, text_block
from .protocol import VLM, Box, ScoreRequest, image_fingerprint, to_rgb_uint8
from .readouts import TokenFamilies, parse_answer, yes_no_readout
from .spec import MODEL_DIR_ENV, ModelNotAvailableError, ModelSpec, resolve_weights

__all__ = ["HFVLM", "build_hf", "pick_device_dtype", "checkpoint_fingerprint", "auto_batch_size", "kv_bytes_per_token"]

_IMAGE_PROCESSOR_KEYS = ("size", "crop_size", "do_pan_and_scan", "min_pixels", "max_pixels", "patch_size",
                         "merge_size", "temporal_patch_size", "image_mean", "image_std", "resample", "do_resize",
                         "do_center_crop", "do_convert_rgb", "image_grid_pinpoints")


_TOKEN_ALIGNED = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")


def pick_device_dtype(spec_dtype: str, *, device: str | None = None, dtype: str | None = None):
    """CUDA with the spec's dtype when available, else CPU float32 (explicit values win)."""
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = dtype or (spec_dtype if dev.type == "cuda" else "float32")
    return dev, getattr(torch, name)


def checkpoint_fingerprint(path: str | Path) -> str:
    """SHA-256 over the checkpoint's JSON configs (bytes) and its weight files' names and sizes.

    Cheap (weights are not read) and distinguishes two checkpoints in plain folders that carry no
    revision hash, so their results never share inference-cache entries.
    """
    path = Path(path)
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.suffix == ".json" and f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".pt") and f.is_file():
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()


RENDER_MEMO = 16_384
"""Prompts :meth:`HFVLM.render` keeps, least recently used out first (a score call's requests are rendered for
their cache keys, then again in chunks of 128 when scored); with MIMIC reports of about 2 kB, at most about
35 MB."""

TEXT_NODES_OFF = 2 ** 62
"""``trie_min_saved_tokens`` that no stretch reaches: past each image's shared prefix, no text node."""

TRIE_MIN_SAVED_TOKENS = 16
"""Default ``HFVLM.trie_min_saved_tokens``, on every device. The trie's nodes and suffixes run packed
(:meth:`HFVLM._score_packed`: the nodes of one depth in one pass, the suffixes of all nodes in batches
of the answer batch size), so a node costs its tokens and a row of a shared pass, not a pass and a
decoding loop of its own. Measured on the 2-core CPU (2026-12-06): on ref-vlm's four main-chapter arms
the trie prefills 3.5x fewer tokens than the image prefix alone and runs 1.39x faster at 16 requests per
pass, 1.83x at ref-vlm's 64 (``benchmarks/trie.py``; one node at a time it ran 0.84x); on ``tiny-gemma3`` with 256 image tokens
the appendix arms together run 1.19x faster than one arm at a time at 3.03x fewer tokens
(``benchmarks/appendix_arms.py``; without text nodes 0.85x). Every setting gives the same answers, the
logits within ~3e-6."""


def _key_of(ids: list[int], pixels: str) -> str:
    """An :class:`HFVLM` input key: the SHA-256 of the rendered prompt's token ids, their count, the pixels'
    fingerprint."""
    digest = hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()
    return json.dumps({"tokens": digest, "n_tokens": len(ids), "pixels": pixels})


class _OnceImageProcessor:
    """Stands in for a processor's image processor while one image is encoded with many prompts.

    The first call is computed; later calls with the same image objects and options return a shallow
    copy of it. A batch whose samples are all one object (``[[image]] * k``: many prompts about one
    image in one processor call) is computed for one sample and tiled along the first axis of each
    output (the axis the processors stack samples or their patches on; a test holds this to the
    processor's own output for every tiny family). Every other attribute is the wrapped processor's.

    Given the group's ``image`` and its pixel fingerprint ``content``, what a call on that image alone
    computes (for a tiled batch, its one sample) is also kept across groups, arms and records of the
    process (:func:`~shovir_core.models.image_inputs.kept_outputs`, keyed by the processor's settings,
    the pixels, the nesting and the options): another arm asking about the same pixels, in a batch of
    any size, is not preprocessed again.
    """

    def __init__(self, inner, *, image=None, content: str | None = None, source=None) -> None:
        self._inner = inner
        self._memo: dict = {}
        self._image, self._content = image, content
        self._source = source  # the array ``image`` was made from (HFVLM._one_image)
        self._digest: str | None = None

    def __call__(self, images=None, *args, **kwargs):
        flat: list = []
        _nesting(images, flat)
        key = (tuple(id(x) for x in flat), repr(args), repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key not in self._memo:
            self._memo[key] = self._tiled(images, args, kwargs)
        return copy.copy(self._memo[key])

    def _computed(self, images, args, kwargs):
        """The wrapped processor's output for ``images``, kept by content when they are the group's image."""
        flat: list = []
        shape = _nesting(images, flat)
        if self._content is None or not flat or any(x is not self._image for x in flat):
            return self._inner(images, *args, **kwargs)
        if self._digest is None:  # the processor's settings, once per group
            self._digest = processor_digest(self._inner)
        key = (self._digest, self._content, shape, repr(args), repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
        return kept_outputs(key, lambda: self._inner(images, *args, **kwargs))

    def _tiled(self, images, args, kwargs):
        k = len(images) if isinstance(images, list) else 0
        if k < 2 or any(_sample(e) != _sample(images[0]) for e in images[1:]):  # the processor may copy the lists
            return self._computed(images, args, kwargs)
        one = self._computed([images[0]], args, kwargs)
        out = copy.copy(one)
        for name, value in one.items():
            if torch.is_tensor(value):
                out[name] = torch.cat([value] * k)
            elif isinstance(value, np.ndarray):
                out[name] = np.concatenate([value] * k)
            elif isinstance(value, list):
                out[name] = value * k
            else:  # an output this tiling does not know: compute the batch as it is
                return self._computed(images, args, kwargs)
        return out

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _sample(images) -> tuple:
    """A batch sample's nesting and the identities of its images (equal for ``[x]`` and a copy ``[x]``)."""
    flat: list = []
    return _nesting(images, flat), tuple(id(x) for x in flat)


def _nesting(images, flat: list) -> str:
    """How ``images`` nests lists and tuples, each image a ``*`` (``[[*],[*]]``); appends the images to ``flat``."""
    if isinstance(images, (list, tuple)):
        inner = ",".join(_nesting(x, flat) for x in images)
        return f"[{inner}]" if isinstance(images, list) else f"({inner})"
    flat.append(images)
    return "*"


def kv_bytes_per_token(config, *, dtype_bytes: int) -> int:
    """Key/value-cache bytes one token occupies across the text model's layers."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(text.num_hidden_layers)
    heads = int(getattr(text, "num_attention_heads"))
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return 2 * layers * kv_heads * head_dim * int(dtype_bytes)


def auto_batch_size(config, *, prompt_tokens: int, new_tokens: int, free_bytes: int, dtype_bytes: int,
                    fraction: float = 0.5, limit: int = 64) -> int:
    """Reports per batch that fit in ``fraction`` of ``free_bytes`` of accelerator memory.

    Each row holds its key/value cache for ``prompt_tokens + new_tokens`` tokens
    (:func:`kv_bytes_per_token`) and one float32 row of logits over the vocabulary per step; the rest
    of ``free_bytes`` is left for activations (the vision tower runs once per image). At least 1,
    at most ``limit``.

    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    ...          hidden_size=2560, vocab_size=262208)
    >>> auto_batch_size(cfg, prompt_tokens=300, new_tokens=300, free_bytes=80 * 2**30, dtype_bytes=2)
    64
    >>> auto_batch_size(cfg, prompt_tokens=300, new_tokens=300, free_bytes=2 * 2**30, dtype_bytes=2)
    12
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    per_row = kv_bytes_per_token(config, dtype_bytes=dtype_bytes) * (prompt_tokens + new_tokens)
    per_row += 4 * int(getattr(text, "vocab_size", 0) or 0)
    return int(max(1, min(limit, (fraction * free_bytes) // max(1, per_row))))


def _batch_setting(model: str, name: str, value):
    """A batch-size setting: ``None``, ``"auto"`` or an integer >= 1 (else ``ValueError`` naming it)."""
    if not (value in (None, "auto") or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
        raise ValueError(f"{model}: {name}={value!r}; use None, 'auto' or an integer >= 1")
    return value


def _has_recurrent_layers(model) -> bool:
    """True when the text model has linear-attention (recurrent-state) layers, e.g. Qwen3.5's."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    return "linear_attention" in (getattr(text, "layer_types", None) or ())


def _pil(image: np.ndarray):
    from PIL import Image

    return Image.fromarray(to_rgb_uint8(image))


class HFVLM(VLM):
    """A transformers vision-language model behind :class:`~shovir_core.models.protocol.VLM`.

    Parameters
    ----------
    spec
        The registry entry (prompts, decoding, answer-token ids).
    model, processor
        A loaded ``*ForConditionalGeneration`` and its processor.
    source
        Where the weights came from (local path and resolved revision, or the tiny-model seed);
        recorded in :meth:`provenance`.
    batch_size
        Requests per forward pass (left-padded).
    prefix_reuse
        Reuse the key/value cache of a prompt prefix shared by several requests.
    report_batch_size
        Reports generated per ``generate`` call: ``None`` (default) generates the images of one
        :meth:`generate_reports` call together (the caller's chunk: the ShoViR spec's ``batch_size``,
        i.e. the profile's), capped on a GPU by :func:`auto_batch_size` of the free memory; ``"auto"``
        always chooses from free memory (CPU: ``batch_size``); an integer fixes it (``1``: one at a time).
    answer_batch_size
        Requests per scoring batch of :meth:`score_yes_no` (suffix rows after a shared prefix, or
        left-padded full prompts): ``None`` (default) uses ``batch_size``; ``"auto"`` chooses from
        free accelerator memory (:func:`auto_batch_size` over the batch's prompt and answer tokens;
        CPU: ``batch_size``); an integer fixes it. The ModaLens spec's execution-only
        ``answer_batch_size`` sets it from a profile.
    """

    def __init__(self, spec: ModelSpec, model, processor, *, source: dict, batch_size: int = 8,
                 prefix_reuse: bool = True, report_batch_size: int | str | None = None,
                 answer_batch_size: int | str | None = None) -> None:
        self.spec, self.model, self.processor, self.source = spec, model, processor, source
        self.name = spec.name
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = int(batch_size)
        # a recurrent (linear-attention) state cannot be shared and then extended by right-padded
        # suffixes, so hybrid models (Qwen3.5's gated delta-net layers) score every request in full
        self.prefix_reuse = bool(prefix_reuse) and not _has_recurrent_layers(model)
        self.report_batch_size = _batch_setting(spec.name, "report_batch_size", report_batch_size)
        self.answer_batch_size = answer_batch_size
        self.device = next(model.parameters()).device
        self.trie_min_saved_tokens = TRIE_MIN_SAVED_TOKENS
        """A shared stretch becomes its own prefix-trie node only if it saves at least this many
        prefill tokens (:meth:`_score_trie`); 1 makes every shared stretch a node,
        :data:`TEXT_NODES_OFF` none (each image's prefix is still prefilled once)."""
        self.dtype = next(model.parameters()).dtype
        self.families = self._token_families(spec)
        self.stats = {"prefill_tokens": 0, "forward_passes": 0, "requests": 0, "reports": 0, "generated_tokens": 0}
        """Counters: prompt tokens run through the model, forward passes, requests scored, reports
        generated and their tokens (up to the end-of-sequence token)."""
        self._chat_prompt = lru_cache(maxsize=RENDER_MEMO)(self._apply_chat_template)
        """:meth:`_apply_chat_template` keeping its last :data:`RENDER_MEMO` prompts (see :meth:`render`)."""

    def _token_families(self, spec: ModelSpec) -> TokenFamilies:
        """The yes/no token families from the tokenizer, checked against the spec's ids where it gives them."""
        families = TokenFamilies.from_tokenizer(
            lambda s: self.tokenizer.encode(s, add_special_tokens=False),
            lambda i: self.tokenizer.convert_ids_to_tokens(int(i)), model=spec.name)
        if spec.families:
            families.check(spec.families, model=spec.name)
        return families

    @property
    def answer_batch_size(self) -> int | str | None:
        return self._answer_batch_size

    @answer_batch_size.setter
    def answer_batch_size(self, value) -> None:
        self._answer_batch_size = _batch_setting(self.spec.name, "answer_batch_size", value)

    def _memory_fit(self, prompt_tokens: int, new_tokens: int) -> int:
        """Rows per batch that fit in the accelerator's free memory (:func:`auto_batch_size`); call on CUDA only."""
        free, _ = torch.cuda.mem_get_info(self.device)
        return auto_batch_size(self.model.config, prompt_tokens=prompt_tokens, new_tokens=max(1, new_tokens),
                               free_bytes=int(free), dtype_bytes=torch.finfo(self.dtype).bits // 8)

    def _answer_batch(self, prompt_tokens: int, new_tokens: int) -> int:
        """Requests per scoring batch (see ``answer_batch_size``)."""
        setting = self.answer_batch_size
        if isinstance(setting, int):
            return setting
        if setting == "auto" and self.device.type == "cuda":
            return self._memory_fit(prompt_tokens, new_tokens)
        return self.batch_size

    # construction --------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, spec: ModelSpec, path: str | Path, *, device: str | None = None,
                        dtype: str | None = None, **kwargs) -> "HFVLM":
        """Load a local checkpoint folder (never downloads) and check its pinned revision."""
        from transformers import AutoModelForImageTextToText, AutoProcessor

        path = Path(path)
        resolved = path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None
        if spec.revision and resolved and not resolved.startswith(spec.revision):
            raise ModelNotAvailableError(
                f"model {spec.name!r}: the cached checkpoint {path} is revision {resolved[:12]}, the registry pins "
                f"{spec.revision}; point local_path= or ${MODEL_DIR_ENV} at the pinned revision")
        dev, torch_dtype = pick_device_dtype(spec.dtype, device=device, dtype=dtype)
        processor = AutoProcessor.from_pretrained(path, local_files_only=True, **spec.processor_kwargs)
        model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True, dtype=torch_dtype)
        model.to(dev).eval()
        source = {"kind": "checkpoint", "local_path": str(path), "resolved_revision": resolved,
                  "revision_verified": bool(resolved and spec.revision),
                  "checkpoint_fingerprint": checkpoint_fingerprint(path)}
        return cls(spec, model, processor, source=source, **kwargs)

    # identity ------------------------------------------------------------------------------
    def _processor_settings(self) -> dict:
        ip = getattr(self.processor, "image_processor", None)
        settings = {"class": type(self.processor).__name__,
                    "image_seq_length": getattr(self.processor, "image_seq_length", None)}
        if ip is not None:
            d = ip.to_dict()
            settings["image_processor"] = {"class": type(ip).__name__,
                                           **{k: d[k] for k in _IMAGE_PROCESSOR_KEYS if k in d}}
        return json.loads(json.dumps(settings, default=str))

    def _chat_template(self) -> str:
        return self.processor.chat_template or self.tokenizer.chat_template or ""

    def identity(self) -> dict:
        return {
            "name": self.name, "model_id": self.spec.hf_id, "revision": self.spec.revision,
            "source": {k: v for k, v in self.source.items() if k != "local_path"},
            "dtype": str(self.dtype).removeprefix("torch."), "device_type": self.device.type,
            "processor": self._processor_settings(),
            "chat_template_sha256": hashlib.sha256(self._chat_template().encode()).hexdigest(),
            "chat_template_kwargs": self.spec.chat_template_kwargs,
        }

    def provenance(self) -> dict:
        import transformers

        tok = self.tokenizer
        return {
            **self.identity(), "adapter": "hf", "architecture": type(self.model).__name__,
            "device": str(self.device), "local_path": self.source.get("local_path"),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizer": {"class": type(tok).__name__, "vocab_size": len(tok), "padding_side": tok.padding_side,
                          "special_tokens": {k: v for k, v in tok.special_tokens_map.items()},
                          "special_token_ids": {t: int(i) for t, i in zip(tok.all_special_tokens, tok.all_special_ids)}},
            "answer_tokens": {"yes_id": self.families.yes_id, "no_id": self.families.no_id,
                              "yes_family": list(self.families.yes_family), "no_family": list(self.families.no_family),
                              "names": {str(k): v for k, v in self.families.names.items()}},
            "decoding": {"greedy": not self.spec.do_sample, "report_max_new_tokens": self.spec.max_new_tokens,
                         "padding": "left", "batch_size": self.batch_size, "prefix_reuse": self.prefix_reuse,
                         "trie_min_saved_tokens": self.trie_min_saved_tokens,
                         "report_batch_size": self.report_batch_size,
                         "answer_batch_size": self.answer_batch_size},
            "report_prompt": {"system": self.spec.report_system, "user": self.spec.report_user,
                              "order": self.spec.report_order},
        }

    # prompts -------------------------------------------------------------------------------
    def render(self, request: ScoreRequest) -> str:
        """The exact prompt string of a score request (the model's chat template).

        A request is rendered once for its cache key and again when it is scored, and a case's arms repeat
        its report: the chat template (a Jinja render, ~0.1 ms) runs once per distinct prompt among the last
        :data:`RENDER_MEMO`, keyed by all the messages hold (:func:`~shovir_core.models.prompts.score_messages`:
        the image block's place and the text block)."""
        return self._chat_prompt(score_layout(request), text_block(request))

    def _apply_chat_template(self, layout: str, text: str) -> str:
        return self.processor.apply_chat_template(chat_messages(layout, text), tokenize=False,
                                                  add_generation_prompt=True, **self.spec.chat_template_kwargs)

    def render_report(self, prompt: str | None = None) -> str:
        """The exact prompt string of a report request (placeholder for the image included).

        ``prompt`` replaces the model's own prompt in the turn that holds it
        (``ModelSpec.report_prompt_slot``): the user text, or, for MedGemma, the system text (its
        user text stays "Analyze this image.", as in the authors' runner)."""
        user, system = self.spec.report_user, self.spec.report_system
        if prompt is not None:
            if self.spec.report_prompt_slot == "system":
                system = prompt
            else:
                user = prompt
        messages = report_messages(user_text=user, system_text=system, order=self.spec.report_order)
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **self.spec.chat_template_kwargs)

    def input_key(self, request=None, *, image=None, prompt=None) -> str:
        text = self.render(request) if request is not None else self.render_report(prompt)
        pixels = request.image if request is not None else image
        return _key_of(self.tokenizer(text, add_special_tokens=False)["input_ids"], image_fingerprint(pixels))

    def input_keys(self, requests) -> list[str]:
        """:meth:`input_key` of each request, the prompts tokenized in one batch call and each distinct image
        object fingerprinted once (a case's questions share one array): the same strings, a test compares.
        An adapter that overrides :meth:`input_key` keeps its own, one request at a time."""
        requests = list(requests)
        if type(self).input_key is not HFVLM.input_key or not requests:
            return super().input_keys(requests)
        ids = self.tokenizer([self.render(r) for r in requests], add_special_tokens=False)["input_ids"]
        prints: dict[int, str] = {}
        for r in requests:
            if id(r.image) not in prints:
                prints[id(r.image)] = image_fingerprint(r.image)
        return [_key_of(row, prints[id(r.image)]) for r, row in zip(requests, ids)]

    def _encode(self, texts: list[str], images: list[np.ndarray | None]):
        """Processor inputs of a batch that either all carry an image or none do (left-padded).

        A batch whose images are all one array (one request's prompts, a group's) preprocesses it once
        (:meth:`_one_image`). The processor returns NumPy arrays, made tensors here: the same tensors as its
        ``return_tensors="pt"`` (a test compares), but its check of the image-token count then compares NumPy
        integers, not 0-d tensors one by one (on ref-vlm a third of the call)."""
        from transformers import BatchFeature

        kwargs = dict(text=texts, return_tensors="np", padding=True, add_special_tokens=False)
        if images[0] is not None and isinstance(images[0], np.ndarray) and all(im is images[0] for im in images):
            with self._one_image(images[0]) as pil:
                batch = self.processor(**kwargs, images=[[pil]] * len(images))
        else:
            if images[0] is not None:
                kwargs["images"] = [[im if not isinstance(im, np.ndarray) else _pil(im)] for im in images]
            batch = self.processor(**kwargs)
        batch = BatchFeature(dict(batch), tensor_type="pt")
        return {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items()}

    @contextmanager
    def _one_image(self, image: np.ndarray):
        """While prompts that all show ``image`` are encoded: yields its PIL image, which the processor
        preprocesses once (:class:`_OnceImageProcessor`; kept per process by its pixels). Inside another
        such block, the outer one's image is yielded if it is the same array's."""
        inner = getattr(self.processor, "image_processor", None)
        if inner is None or isinstance(inner, _OnceImageProcessor):
            yield inner._image if inner is not None and inner._source is image else _pil(image)
            return
        pil = _pil(image)
        self.processor.image_processor = _OnceImageProcessor(inner, image=pil, content=image_fingerprint(image),
                                                             source=image)
        try:
            yield pil
        finally:
            self.processor.image_processor = inner

    def _token_ids(self, texts: list[str], image, *, chunk: int = 256) -> list[list[int]]:
        """Each prompt's token ids with ``image`` (or none), from one processor call per ``chunk`` prompts.

        The same ids as encoding each prompt alone (the processor's text path costs about a
        millisecond a call, more than a small model's forward share of a prompt; a test compares). The
        processor returns Python lists here, not tensors: its check of the image-token count then counts
        list items (on tensors it compares every token as a 0-d tensor: 40 % of this call on ref-vlm)."""
        out: list[list[int]] = []
        for start in range(0, len(texts), chunk):
            part = texts[start:start + chunk]
            kwargs = dict(text=part, padding=True, add_special_tokens=False)
            if image is not None:
                kwargs["images"] = [[image]] * len(part)
            batch = self.processor(**kwargs)
            out += [[t for t, keep in zip(row, mask) if keep]
                    for row, mask in zip(batch["input_ids"], batch["attention_mask"])]
        return out

    def _to_model(self, batch: dict) -> dict:
        out = dict(batch)
        if "pixel_values" in out and torch.is_floating_point(out["pixel_values"]):
            out["pixel_values"] = out["pixel_values"].to(self.dtype)
        return out

    def _forward_inputs(self, batch: dict) -> dict:
        """:meth:`_to_model` for one forward pass over whole prompts (not ``generate``): Gemma-3's two
        layer types' attention masks built once where they coincide
        (:func:`~shovir_core.models.attention_masks.forward_inputs`)."""
        return forward_inputs(self.model, self._to_model(batch))

    def _eos_ids(self) -> list[int]:
        """End-of-sequence ids: the tokenizer's and the checkpoint's generation config's (e.g. end of turn)."""
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        return sorted(int(i) for i in ids if i is not None)

    def _decode(self, rows: list[list[int]]) -> list[str]:
        """Generated ids -> text, cut at the first end-of-sequence id, special tokens dropped."""
        eos = set(self._eos_ids())
        cut = []
        for row in rows:
            stop = next((k for k, t in enumerate(row) if t in eos), len(row))
            cut.append(row[:stop])
        return [t.strip() for t in self.tokenizer.batch_decode(cut, skip_special_tokens=True)]

    # readouts ------------------------------------------------------------------------------
    def _readout(self, row: torch.Tensor) -> dict:
        logits = row.detach().float().cpu().numpy()
        res = yes_no_readout(logits, self.families)
        res["top1_token"] = self.tokenizer.convert_ids_to_tokens(res["top1_id"])
        return res

    def _finish(self, res: dict, request: ScoreRequest, n_tokens: int, generated: str | None) -> dict:
        res["generated"] = generated
        res["answer"], res["compliant"] = parse_answer(generated, options=ANSWER_OPTIONS[request.instruction])
        res["n_input_tokens"] = int(n_tokens)
        return res

    @torch.no_grad()
    def _score_naive(self, requests: list[ScoreRequest], answer_tokens: int) -> list[dict]:
        """One left-padded batch: forward (or greedy generate) over the full prompts."""
        texts = [self.render(r) for r in requests]
        batch = self._encode(texts, [r.image for r in requests])
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        self.stats["prefill_tokens"] += int(sum(lengths))
        self.stats["forward_passes"] += 1
        generated: list[str | None] = [None] * len(requests)
        if answer_tokens > 0:
            from transformers import GenerationConfig

            gen = GenerationConfig(max_new_tokens=answer_tokens, do_sample=False, output_logits=True,
                                   return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id,
                                   eos_token_id=self._eos_ids())
            out = self.model.generate(**self._to_model(batch), generation_config=gen)
            first = out.logits[0]
            generated = self._decode(out.sequences[:, batch["input_ids"].shape[1]:].tolist())
        else:
            first = self.model(**self._forward_inputs(batch), use_cache=False, logits_to_keep=1).logits[:, -1, :]
        return [self._finish(self._readout(first[i]), r, lengths[i], generated[i]) for i, r in enumerate(requests)]

    def _shared_prefix(self, ids: list[list[int]]) -> int:
        """Length of the common token prefix of a group, ending after its last image token."""
        n = min(len(x) for x in ids) - 1
        ref = np.asarray(ids[0][:n])
        for other in ids[1:]:
            diff = np.nonzero(ref != np.asarray(other[:n]))[0]
            if diff.size:
                n = int(diff[0])
                ref = ref[:n]
        image_ids = set(getattr(self.processor, "image_token_ids", None) or [])
        image_ids |= {i for i in (getattr(self.processor, "image_token_id", None),
                                  getattr(self.model.config, "image_token_id", None)) if i is not None}
        image_pos = [j for j, t in enumerate(ids[0]) if t in image_ids]
        if image_pos and image_pos[-1] >= n:
            return 0  # the image is not inside the shared prefix (text first): no reuse
        return n

    @torch.no_grad()
    def _score_prefix_group(self, requests: list[ScoreRequest], answer_tokens: int = 0) -> list[dict] | None:
        """Score requests sharing an image: prefill the shared prefix once, then walk a token trie of the rest.

        The root is the token prefix common to every request of the group (it holds the whole
        image; a group whose image lies outside it -- text first -- returns ``None``). Below it the
        requests form a token trie: every stretch of text shared by two or more requests (the report
        and framing that several arms repeat, then the question they also share before their
        instructions differ) is prefilled once after its parent's cache, and each request runs only
        what is its own. The suffixes are right-padded after their node; with ``answer_tokens`` the
        batch then decodes greedily, each row at its own RoPE positions with its padding masked out.
        The nodes and suffixes run packed across nodes (:meth:`_score_packed`); where a prompt and its
        answer could reach past a sliding attention window, or the cache is of a kind that cannot be
        packed, the trie is walked one node at a time (:meth:`_score_trie`; past a window, rows of equal
        length only: :meth:`_score_suffixes`).
        """
        first, ids, n = self._encode_group(requests)
        if n == 0:
            return None
        cache, deltas = self._prefill(first, n)
        packed = self._score_packed(cache, n, ids, requests, answer_tokens, deltas) if packable(cache) else None
        if packed is not None:
            return packed
        results: list[dict | None] = [None] * len(requests)
        self._score_trie(cache, n, ids, requests, list(range(len(requests))), answer_tokens, deltas, results,
                         owned=True)
        return results  # type: ignore[return-value]

    def _plan_trie(self, ids: list[list[int]], idx: list[int], n: int, parent: int, nodes: list, leaves: dict) -> None:
        """The token trie that :meth:`_score_trie` walks, as data: appends to ``nodes`` a ``(parent, start,
        stop, row)`` for each stretch worth a prefill of its own (the tokens ``ids[row][start:stop]`` after
        node ``parent``'s cache; -1 is the group's prefix) -- parents before their children -- and sets
        ``leaves[i] = (node, start)``: request ``i`` runs its tokens from ``start`` on that node's cache.
        The same nodes and leaves as :meth:`_score_trie` (``trie_min_saved_tokens``, :meth:`_trie_extends`)."""
        m = self._common_length([ids[i] for i in idx], start=n) if len(idx) > 1 else n
        if m > n and (len(idx) - 1) * (m - n) >= self.trie_min_saved_tokens:
            nodes.append((parent, n, m, idx[0]))
            parent, n = len(nodes) - 1, m
        branches, rest = self._branches(ids, idx, m)  # split where the requests part, prefilled or not
        for b in branches:
            if 1 < len(b) < len(idx) and self._trie_extends(ids, b, n):
                self._plan_trie(ids, b, n, parent, nodes, leaves)
            else:
                rest += b
        for i in rest:
            leaves[i] = (parent, n)

    def _packed_pass(self, template, prefixes: list, rows: list[list[int]], starts: list[int], deltas, **kwargs):
        """One forward pass of ``rows`` (token lists), each after its own compact prefix (``prefixes``, whose
        lengths are ``starts``), packed (:mod:`~shovir_core.models.packed_cache`). Returns the model output,
        the batch cache and attention mask, and the slot count before the new tokens."""
        past, mask = stacked_cache(template, prefixes)
        tokens, new = self._right_padded(rows)
        slots, width = mask.shape[1], tokens.shape[1]
        mask = torch.cat([mask, new], dim=1)
        text = torch.tensor(starts, device=self.device).view(-1, 1) + torch.arange(width, device=self.device)
        out = self.model(input_ids=tokens, attention_mask=mask, cache=past, use_cache=True,
                         cache_position=torch.arange(slots, slots + width, device=self.device),
                         **self._positions(text, deltas), **kwargs)
        self.stats["prefill_tokens"] += int(sum(len(r) for r in rows))
        self.stats["forward_passes"] += 1
        return out, past, mask, slots

    def _score_packed(self, cache, n: int, ids: list[list[int]], requests: list[ScoreRequest], answer_tokens: int,
                      deltas) -> list[dict] | None:
        """Score a group whose shared prefix of ``n`` tokens is in ``cache`` down its token trie, packed.

        The trie is :meth:`_score_trie`'s (:meth:`_plan_trie`); but where that walk runs each node's
        prefill and each node's suffixes as batches of their own, here the nodes of one depth run as one
        batch (each row after its parent's cache) and the suffixes of all nodes as batches of the answer
        batch size, in request order, each row after its own node's cache
        (:mod:`~shovir_core.models.packed_cache`: prefixes left-padded, the padding masked). The tokens
        prefilled are the trie's; the forward passes are about those of the two-level scheme (one per
        image prefix and per suffix batch). Returns ``None`` (nothing run) where a packed batch could
        reach past a sliding attention window: a window counts cache slots, padding included, so a
        padded row would see a shifted window.
        """
        nodes: list[tuple[int, int, int, int]] = []
        leaves: dict[int, tuple[int, int]] = {}
        self._plan_trie(ids, list(range(len(ids))), n, -1, nodes, leaves)
        window = getattr(self.model.config.get_text_config(), "sliding_window", None)
        spans = [(start, stop) for _, start, stop, _ in nodes] + [(start, len(ids[i])) for i, (_, start) in leaves.items()]
        most = max(a for a, _ in spans) + max(b - a for a, b in spans)  # the most prompt slots a batch can hold
        if window and most + answer_tokens > window:
            return None
        step = self._answer_batch(most, answer_tokens)
        prefix = {-1: compact(cache)}
        depth = {-1: 0}
        levels: dict[int, list[int]] = defaultdict(list)  # parents come before their children in ``nodes``
        for j, (parent, *_rest) in enumerate(nodes):
            depth[j] = depth[parent] + 1
            levels[depth[j]].append(j)
        for todo in levels.values():
            for k in range(0, len(todo), step):
                chunk = todo[k:k + step]
                starts = [nodes[j][1] for j in chunk]
                rows = [ids[nodes[j][3]][nodes[j][1]:nodes[j][2]] for j in chunk]
                _, past, _, slots = self._packed_pass(cache, [prefix[nodes[j][0]] for j in chunk], rows, starts,
                                                      deltas, logits_to_keep=1)
                cut = cut_rows(past, [slots - a for a in starts], [slots + len(r) for r in rows])
                prefix.update(zip(chunk, cut))
        results: list[dict | None] = [None] * len(requests)
        order = sorted(leaves)  # request order: measured faster on ref-vlm than by length or by node
        for k in range(0, len(order), step):
            chunk = order[k:k + step]
            starts = [leaves[i][1] for i in chunk]
            rows = [ids[i][leaves[i][1]:] for i in chunk]
            out, past, mask, slots = self._packed_pass(cache, [prefix[leaves[i][0]] for i in chunk], rows, starts,
                                                       deltas)
            lengths = torch.tensor([len(r) for r in rows], device=self.device)
            first = out.logits[torch.arange(len(chunk), device=self.device), lengths - 1]
            generated = [None] * len(chunk)
            if answer_tokens > 0:
                width = max(len(r) for r in rows)
                generated = self._continue(first, past, mask, torch.tensor(starts, device=self.device) + lengths,
                                           slots + width, answer_tokens, deltas)
            for row, i in enumerate(chunk):
                results[i] = self._finish(self._readout(first[row]), requests[i], len(ids[i]), generated[row])
        return results  # type: ignore[return-value]

    def _encode_group(self, requests: list[ScoreRequest]) -> tuple[dict, list[list[int]], int]:
        """A group sharing one image: the first prompt's processor inputs, every prompt's token ids (the
        image preprocessed once) and the length of their shared prefix (0 where it would not hold the
        whole image: :meth:`_shared_prefix`)."""
        texts = [self.render(r) for r in requests]
        if requests[0].image is None:
            first, ids = self._encode(texts[:1], [None]), self._token_ids(texts, None)
        else:  # the group shares one image: preprocess it once, not once per question
            with self._one_image(requests[0].image) as pil:
                first = self._encode(texts[:1], [pil])
                ids = self._token_ids(texts, pil)
        return first, ids, self._shared_prefix(ids)

    def _prefill(self, first: dict, n: int):
        """Run the first ``n`` tokens of ``first`` (processor inputs, image included) into a new cache;
        returns the cache and the multimodal RoPE offsets the suffixes continue from (or ``None``)."""
        prefix = {key: (value[:, :n] if key in _TOKEN_ALIGNED else value) for key, value in first.items()}
        core = getattr(self.model, "model", None)
        if getattr(core, "rope_deltas", None) is not None:
            core.rope_deltas = None  # multimodal RoPE state of an earlier batch must not leak into this one
        out = self.model(**self._forward_inputs(prefix), use_cache=True, logits_to_keep=1)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        self.stats["prefill_tokens"] += n
        self.stats["forward_passes"] += 1
        return cache, getattr(core, "rope_deltas", None)

    def _prefill_rows(self, firsts: list[dict], ns: list[int]):
        """Prefill several groups' prefixes (the first ``ns[g]`` tokens of ``firsts[g]``, each one prompt's
        processor inputs, image included) in one left-padded pass, each row at its own positions ``0 ...``.

        Returns ``(cache, prefixes)`` -- the batch cache (a template for
        :func:`~shovir_core.models.packed_cache.stacked_cache`) and each group's compact prefix -- or ``None``
        where the rows cannot be batched so (multimodal RoPE offsets, image inputs of different shapes, a
        cache that cannot be cut into rows); the caller then prefills each group alone (:meth:`_prefill`).
        The rows' caches equal the groups' own up to float rounding (tested)."""
        from .packed_cache import cut_rows, packable

        core = getattr(self.model, "model", None)
        if hasattr(core, "rope_deltas") or len(firsts) < 2:
            return None
        width = max(ns)
        batch = {}
        for key, value in firsts[0].items():
            values = [f[key] for f in firsts]
            if key in _TOKEN_ALIGNED:
                rows = value.new_zeros((len(firsts), width))
                for g, (v, n) in enumerate(zip(values, ns)):
                    rows[g, width - n:] = v[0, :n]
                batch[key] = rows
            elif torch.is_tensor(value) and all(torch.is_tensor(v) and v.shape == value.shape for v in values):
                batch[key] = torch.cat(values, dim=0)
            else:
                return None
        mask = batch["attention_mask"]
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(**self._forward_inputs(batch), position_ids=positions, use_cache=True, logits_to_keep=1)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        if not packable(cache):
            return None
        self.stats["prefill_tokens"] += int(sum(ns))
        self.stats["forward_passes"] += 1
        return cache, cut_rows(cache, [width - n for n in ns], [width] * len(ns))

    def _right_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token lists as one right-padded ``(rows, width)`` id tensor and its mask (1 on each row's own tokens)."""
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for row, r in enumerate(rows):
            mask[row, :len(r)] = 1
        return ids, mask

    def _suffix_inputs(self, cache, n: int, suffixes: list[list[int]], deltas) -> dict:
        """Model inputs that run right-padded ``suffixes`` after a copy of ``cache`` (the first ``n``
        tokens) repeated once per row: ids, attention mask, cache, cache and RoPE positions."""
        suffix_ids, new = self._right_padded(suffixes)
        width = suffix_ids.shape[1]
        mask = torch.cat([torch.ones((len(suffixes), n), dtype=torch.long, device=self.device), new], dim=1)
        past = copy.deepcopy(cache)
        past.batch_repeat_interleave(len(suffixes))
        positions = torch.arange(n, n + width, device=self.device)
        return dict(input_ids=suffix_ids, attention_mask=mask, cache=past, use_cache=True, cache_position=positions,
                    **self._positions(positions.view(1, -1).expand(len(suffixes), -1), deltas))

    def _score_trie(self, cache, n: int, ids: list[list[int]], requests: list[ScoreRequest], idx: list[int],
                    answer_tokens: int, deltas, results: list, *, owned: bool = False) -> None:
        """Score ``idx``, whose first ``n`` tokens are in ``cache``, by descending their token trie.

        The requests' common text beyond ``n`` is prefilled once (on a copy: the parent's cache still
        serves its other branches); they then split by their next token. A branch of two or more
        requests recurses if some stretch below it is worth a prefill of its own
        (:meth:`_trie_extends`); requests alone on their branch, with one token left, or on a branch
        with no such stretch run their suffixes as one batch from this node (splitting them further
        would only cost more forward passes and decoding loops for the same tokens). Each token of the group is thus prefilled once per
        distinct prefix it ends -- the trie's size -- rather than once per request. A stretch that
        would save fewer than ``trie_min_saved_tokens`` tokens ((requests - 1) x its length) is not
        a node of its own: its branches prefill it with their own text, which costs a few tokens but
        saves a forward pass and a cache copy (on a small model the pass costs more than the tokens).
        ``owned``: no one else reads ``cache`` afterwards, so it is extended in place (the last
        branch of a node takes its parent's cache; the others work on copies).
        """
        m = self._common_length([ids[i] for i in idx], start=n) if len(idx) > 1 else n
        extend = m > n and (len(idx) - 1) * (m - n) >= self.trie_min_saved_tokens
        base = m if extend else n
        if extend:
            cache = cache if owned else copy.deepcopy(cache)
            owned = True
            positions = torch.arange(n, m, device=self.device)
            ext = torch.tensor([ids[idx[0]][n:m]], device=self.device)
            self.model(input_ids=ext, attention_mask=torch.ones((1, m), dtype=torch.long, device=self.device),
                       cache=cache, use_cache=True, cache_position=positions, logits_to_keep=1,
                       **self._positions(positions.view(1, -1), deltas))
            self.stats["prefill_tokens"] += m - n
            self.stats["forward_passes"] += 1
        branches, leaves = self._branches(ids, idx, m)
        nodes = []
        for b in branches:  # a branch that prefills nothing of its own anywhere below runs here
            if 1 < len(b) < len(idx) and self._trie_extends(ids, b, base):
                nodes.append(b)
            else:
                leaves += b
        for i, res in zip(leaves, self._score_suffixes(cache, base, [ids[i] for i in leaves],
                                                       [requests[i] for i in leaves], answer_tokens, deltas)):
            results[i] = res
        for k, branch in enumerate(nodes):
            self._score_trie(cache, base, ids, requests, branch, answer_tokens, deltas, results,
                             owned=owned and k == len(nodes) - 1)

    def _trie_extends(self, ids: list[list[int]], idx: list[int], n: int) -> bool:
        """Whether the trie below a node at ``n`` holding ``idx`` has a stretch worth its own prefill.

        A branch with none would only split its requests into more, smaller suffix batches (one forward
        pass each, plus each batch's greedy decoding steps) for the same tokens, so they run with the
        leaves of the node above instead.
        """
        if len(idx) < 2:
            return False
        m = self._common_length([ids[i] for i in idx], start=n)
        if m > n and (len(idx) - 1) * (m - n) >= self.trie_min_saved_tokens:
            return True
        return any(1 < len(b) < len(idx) and self._trie_extends(ids, b, n) for b in self._branches(ids, idx, m)[0])

    @staticmethod
    def _branches(ids: list[list[int]], idx: list[int], m: int) -> tuple[list[list[int]], list[int]]:
        """``idx`` split by each request's token at ``m`` (the trie's branches below a node ending at ``m``), and
        apart the requests with at most one token left there (they end at this node)."""
        branches: dict[int, list[int]] = defaultdict(list)
        ending: list[int] = []
        for i in idx:
            if len(ids[i]) - m > 1:
                branches[ids[i][m]].append(i)
            else:
                ending.append(i)
        return list(branches.values()), ending

    @staticmethod
    def _common_length(ids: list[list[int]], *, start: int) -> int:
        """Length of the common token prefix of ``ids`` (at least ``start``), leaving each row one token."""
        n = min(len(x) for x in ids) - 1
        ref = ids[0]
        for other in ids[1:]:
            k = start
            while k < n and other[k] == ref[k]:
                k += 1
            n = k
        return max(n, start)

    def _score_suffixes(self, cache, n: int, ids: list[list[int]], requests: list[ScoreRequest], answer_tokens: int,
                        deltas) -> list[dict]:
        """Readouts of requests whose first ``n`` tokens are in ``cache``: suffix batches of the answer batch size.

        Where generated tokens could reach past a sliding attention window, rows are batched only
        with rows of the same suffix length: right padding leaves empty cache slots, and a window
        counts slots, so a padded row would see a shifted window (its answer could then differ from
        the one-at-a-time path). Otherwise rows of any length share a batch.
        """
        results: list[dict | None] = [None] * len(requests)
        order = list(range(len(requests)))
        window = getattr(self.model.config.get_text_config(), "sliding_window", None)
        longest = max((len(x) for x in ids), default=0)
        step = self._answer_batch(longest, answer_tokens)  # each row copies the prefix cache: full length
        chunks: list[list[int]] = []
        if answer_tokens > 0 and window and longest + answer_tokens > window:
            same: dict[int, list[int]] = defaultdict(list)
            for i in order:
                same[len(ids[i])].append(i)
            for rows in same.values():
                chunks += [rows[k:k + step] for k in range(0, len(rows), step)]
        else:
            chunks = [order[k:k + step] for k in range(0, len(order), step)]
        for chunk in chunks:
            suffixes = [ids[i][n:] for i in chunk]
            width = max(len(s) for s in suffixes)
            inputs = self._suffix_inputs(cache, n, suffixes, deltas)
            past, mask = inputs["cache"], inputs["attention_mask"]
            logits = self.model(**inputs).logits
            self.stats["prefill_tokens"] += int(sum(len(s) for s in suffixes))
            self.stats["forward_passes"] += 1
            lengths = torch.tensor([len(s) for s in suffixes], device=self.device)
            first = logits[torch.arange(len(chunk), device=self.device), lengths - 1]
            generated = [None] * len(chunk)
            if answer_tokens > 0:
                generated = self._continue(first, past, mask, n + lengths, n + width, answer_tokens, deltas)
            for row, i in enumerate(chunk):
                results[i] = self._finish(self._readout(first[row]), requests[i], len(ids[i]), generated[row])
        return results  # type: ignore[return-value]

    def _positions(self, text_positions: torch.Tensor, deltas) -> dict:
        """``position_ids`` for a (batch, length) grid of text positions (3-D for multimodal RoPE)."""
        if deltas is None:
            return {"position_ids": text_positions}
        shifted = text_positions + deltas.to(self.device).view(-1, 1)
        return {"position_ids": shifted.unsqueeze(0).expand(3, -1, -1)}

    def _continue(self, first: torch.Tensor, past, mask: torch.Tensor, next_pos: torch.Tensor, next_slot: int,
                  answer_tokens: int, deltas) -> list[str]:
        """Greedy decoding after right-padded suffixes; returns the decoded texts."""
        eos = torch.tensor(self._eos_ids(), device=self.device)
        pad = self.tokenizer.pad_token_id
        token = first.argmax(dim=-1)
        done = torch.isin(token, eos)
        rows = [token]
        for step in range(1, answer_tokens):
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            slot = torch.tensor([next_slot + step - 1], device=self.device)
            out = self.model(input_ids=token.view(-1, 1), attention_mask=mask, cache=past, use_cache=True,
                             cache_position=slot, **self._positions((next_pos + step - 1).view(-1, 1), deltas))
            token = torch.where(done, torch.full_like(token, pad), out.logits[:, -1].argmax(dim=-1))
            done |= torch.isin(token, eos)
            rows.append(token)
        return self._decode(torch.stack(rows, dim=1).tolist())

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        """Readouts per request; see :data:`~shovir_core.models.protocol.SCORE_KEYS`.

        Requests with the same image (or no image) that share a prompt prefix holding the whole
        image are scored with one prefix prefill and a batch of suffixes when ``prefix_reuse`` is on,
        every further stretch of text that two or more of them share (a report, a framing, a question)
        prefilled once more down a token trie (generated answers continue from the same caches,
        :meth:`_score_prefix_group`); everything else runs in left-padded
        batches through ``generate``. Both give the same logits and answers (within floating-point
        tolerance; a test holds the logits to 1e-4 in float32).
        """
        requests = list(requests)
        if answer_tokens < 0:
            raise ValueError(f"{self.name}: answer_tokens must be >= 0, got {answer_tokens}")
        self.stats["requests"] += len(requests)
        results: list[dict | None] = [None] * len(requests)
        rest: list[int] = []
        if self.prefix_reuse:
            groups: dict[tuple, list[int]] = defaultdict(list)
            for i, r in enumerate(requests):
                groups[(image_fingerprint(r.image), r.order)].append(i)  # the rest: the trie
            for idx in groups.values():
                scored = self._score_prefix_group([requests[i] for i in idx], answer_tokens) if len(idx) > 1 else None
                if scored is None:
                    rest += idx
                else:
                    for i, res in zip(idx, scored):
                        results[i] = res
        else:
            rest = list(range(len(requests)))
        by_kind: dict[bool, list[int]] = defaultdict(list)
        for i in rest:
            by_kind[requests[i].image is None].append(i)
        for idx in by_kind.values():
            longest = 0
            if self.answer_batch_size == "auto" and self.device.type == "cuda":  # the longest prompt sets the memory
                longest = max(len(self.tokenizer(self.render(requests[i]))["input_ids"]) for i in idx)
                longest += int(getattr(self.processor, "image_seq_length", 0) or 0)
            step = self._answer_batch(longest, answer_tokens)
            for start in range(0, len(idx), step):
                chunk = idx[start:start + step]
                for i, res in zip(chunk, self._score_naive([requests[i] for i in chunk], answer_tokens)):
                    results[i] = res
        return results  # type: ignore[return-value]

    def _report_batch(self, n_images: int, prompt_tokens: int, new_tokens: int) -> int:
        """Reports per ``generate`` call (see ``report_batch_size``)."""
        setting = self.report_batch_size
        if isinstance(setting, int):
            return setting
        if self.device.type == "cuda":
            fit = self._memory_fit(prompt_tokens, new_tokens)
            return fit if setting == "auto" else max(1, min(n_images, fit))
        return self.batch_size if setting == "auto" else max(1, n_images)

    @torch.no_grad()
    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """Greedy reports, generated in left-padded batches with per-row stopping.

        Every row of a batch decodes greedily until it emits an end-of-sequence token (the rows that
        finished are padded while the others go on, and the batch ends when all have finished or
        ``max_new_tokens`` is reached); each report is cut at its first end-of-sequence token. The
        batch size is :attr:`report_batch_size`. Batched reports equal one-at-a-time reports on the
        tiny models of every family (test); the spec's sampling flag is recorded, decoding is greedy.
        """
        from transformers import GenerationConfig

        images = list(images)
        if not images:
            return []
        n_new = int(max_new_tokens or self.spec.max_new_tokens)
        text = self.render_report(prompt)
        gen = GenerationConfig(max_new_tokens=n_new, do_sample=False, pad_token_id=self.tokenizer.pad_token_id,
                               eos_token_id=self._eos_ids())
        eos = set(self._eos_ids())
        reports: list[str] = []
        size = None
        start = 0
        while start < len(images):
            if size is None:  # sized once per call (on a GPU from the first image's prompt length)
                prompt_tokens = 0
                if self.device.type == "cuda" and not isinstance(self.report_batch_size, int):
                    prompt_tokens = int(self._encode([text], images[:1])["input_ids"].shape[1])
                size = self._report_batch(len(images), prompt_tokens, n_new)
            chunk = images[start:start + size]
            batch = self._encode([text] * len(chunk), chunk)
            self.stats["prefill_tokens"] += int(batch["attention_mask"].sum())
            self.stats["forward_passes"] += 1
            out = self.model.generate(**self._to_model(batch), generation_config=gen)
            rows = out[:, batch["input_ids"].shape[1]:].tolist()
            self.stats["reports"] += len(rows)
            self.stats["generated_tokens"] += sum(next((k for k, t in enumerate(r) if t in eos), len(r)) for r in rows)
            reports += self._decode(rows)
            start += len(chunk)
        return reports

    @torch.no_grad()
    def vision_embedding(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Mean-pooled vision-tower outputs, one vector per image (ModaLens App. B).

        Each image goes through the processor's image processor (the settings the model reads
        images with) and the vision tower alone: ``vision_tower`` (SigLIP in Gemma 3 / MedGemma,
        CLIP in LLaVA; its last hidden state, before the multimodal projector) or ``visual``
        (Qwen2-VL; its patch embeddings after the tower's own merger). The output is averaged over
        patches (and crops). One image per forward pass, so an image's vector never depends on the
        other images of a call (the inference cache keys it by its pixels alone).
        """
        core = getattr(self.model, "model", self.model)
        tower, visual = getattr(core, "vision_tower", None), getattr(core, "visual", None)
        if tower is None and visual is None:
            raise NotImplementedError(f"{self.name}: {type(self.model).__name__} exposes neither `vision_tower` "
                                      "nor `visual`; no vision embedding")
        out = []
        for i, image in enumerate(images):
            if image is None:
                raise ValueError(f"{self.name}: vision_embedding got no image at position {i}")
            batch = self.processor.image_processor(images=[_pil(image)], return_tensors="pt")
            pixels = batch["pixel_values"].to(self.device, self.dtype)
            if tower is not None:
                hidden = tower(pixel_values=pixels).last_hidden_state          # (crops, patches, dim)
                vec = hidden.float().mean(dim=tuple(range(hidden.ndim - 1)))
            else:
                res = visual(pixels, grid_thw=batch["image_grid_thw"].to(self.device))
                hidden = res if torch.is_tensor(res) else getattr(res, "pooler_output", None)
                if hidden is None:
                    hidden = res.last_hidden_state
                vec = hidden.float().reshape(-1, hidden.shape[-1]).mean(dim=0)
            out.append(vec.cpu().numpy().astype(np.float64))
        return out

def build_hf(spec: ModelSpec, *, local_path: str | Path | None = None, device: str | None = None,
             dtype: str | None = None) -> HFVLM:
    """The adapter of an ``hf`` registry entry, loaded from its local checkpoint (never downloads).

    Raises
    ------
    ModelNotAvailableError
        When the weights are not found locally (:func:`~shovir_core.models.spec.resolve_weights`).
    """
    path = resolve_weights(spec, local_path=local_path)
    return HFVLM.from_pretrained(spec, path, device=device, dtype=dtype)
