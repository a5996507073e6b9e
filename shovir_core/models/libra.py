"""Libra-v1 and LLaVA-Rad through the Libra code base (``X-iZhang/Libra``), run as the ShoViR authors do.

Both checkpoints (``X-iZhang/libra-v1.0-7b`` and the Libra-repo port ``X-iZhang/libra-llava-rad``)
are built by Libra's own ``libra.model.builder.load_pretrained_model(model_path, None, model_name)``
and prompted with Libra's conversation templates, ``process_images`` and ``tokenizer_image_token``
(:mod:`.upstream` finds the code). What each adapter does, from the authors' wrappers
(``arco-group/ShoViR-Bench`` ``src/benchmark/models/libra/__init__.py@073eb6c`` and
``models/llavarad/__init__.py@6fc3066``):

Libra-v1 (``libra-v1``)
    query ``"<image>\\n" + prompt + "\\n\\n" + "Analyze this CXR image."`` (``<im_start><image><im_end>``
    when the config sets ``mm_use_im_start_end``); prompt ``libra_default`` = "Provide a detailed
    description of the findings in the radiology image."; conversation template as Libra's own
    ``libra/eval/run_libra.py`` infers it from the checkpoint name (``libra_llama_3`` for
    ``libra-v1.0-3b``, the authors' wrapper's choice; ``libra_v1`` otherwise); images: with the
    temporal projector (``mm_projector_type == "TAC"``) two slots ``[current, prior]`` with the
    prior = the current image, shaped ``(2, 1, C, H, W)``, else ``(1, C, H, W)``; **sampling**
    (``do_sample=True``, no temperature given: the checkpoint's generation config decides; the
    methodology text says T = 0.2), ``max_new_tokens=300``, keyword stopping on the template's
    stop string, ``use_cache=True``. Sampling is made reproducible here: each call runs under
    ``torch.random.fork_rng`` seeded from the SHA-256 of its exact input (the global RNG state is
    restored afterwards).
LLaVA-Rad (``llava-rad``)
    query ``"<image>\\n" + prompt`` (the authors pass no user text); prompt ``llavarad_default`` =
    "Describe the findings in the radiology image."; template ``v1``; always two image slots
    ``[current, current]`` shaped ``(2, B, C, H, W)``; batches of four conversations (``--num-images
    4``) left-padded; greedy; ``max_new_tokens=300``; generation stops when every row has met its
    stop string.

Both: the pad token falls back to EOS, the attention mask is ``input_ids != pad``, pixel tensors
are cast to the run's dtype (bfloat16 on a GPU), the report is ``batch_decode(output[:,
prompt_len:], skip_special_tokens=True)`` stripped, with a trailing stop string removed (Libra's
own decoding).
"""
from __future__ import annotations

import hashlib
import json
from typing import Sequence

import numpy as np

from .protocol import Box, image_fingerprint
from .spec import ModelNotAvailableError, ModelSpec
from .remote import RemoteCodeVLM, _device_dtype, _pil
from .upstream import CodeSource, import_upstream, locate_code

__all__ = ["LibraCodeVLM", "LibraV1VLM", "LLaVARadVLM", "libra_conv_mode"]

_LOAD_ERRORS = (ImportError, OSError, ValueError, TypeError, AttributeError, KeyError, RuntimeError)


def libra_conv_mode(model_name: str) -> str:
    """The conversation template Libra's ``run_libra.py`` picks for a checkpoint name.

    >>> libra_conv_mode("libra-v1.0-3b"), libra_conv_mode("libra-v1.0-7b")
    ('libra_llama_3', 'libra_v1')
    """
    name = model_name.lower()
    if "libra-v1.0-3b" in name:
        return "libra_llama_3"
    if "cxrgen" in name:
        return "libra_v0"
    if "mistral" in name:
        return "mistral_instruct"
    return "libra_v1"


class LibraCodeVLM(RemoteCodeVLM):
    """Shared machinery of the two Libra-code adapters (see the module docstring)."""

    architecture_note = "run through the Libra code base's report prompt only"
    user_text: str = ""
    image_slots: str = "tac"  # "tac": two slots only with the TAC projector; "always": always two
    batch_size: int = 1

    def __init__(self, spec: ModelSpec, model, tokenizer, image_processor, *, source: dict, code: CodeSource,
                 conv_mode: str, pixel_dtype) -> None:
        super().__init__(spec, model, tokenizer, source=source)
        self.image_processor, self.code, self.conv_mode, self.pixel_dtype = image_processor, code, conv_mode, pixel_dtype
        self._api = {name: import_upstream(code, f"libra.{name}") for name in (
            "mm_utils.process_images", "mm_utils.tokenizer_image_token", "mm_utils.KeywordsStoppingCriteria",
            "conversation.conv_templates", "conversation.SeparatorStyle", "constants.IMAGE_TOKEN_INDEX",
            "constants.DEFAULT_IMAGE_TOKEN", "constants.DEFAULT_IM_START_TOKEN", "constants.DEFAULT_IM_END_TOKEN")}
        if conv_mode not in self._api["conversation.conv_templates"]:
            raise ModelNotAvailableError(f"model {spec.name!r}: Libra has no conversation template {conv_mode!r}")

    @classmethod
    def model_name(cls, spec: ModelSpec) -> str:
        return spec.hf_id.rsplit("/", 1)[-1]

    @classmethod
    def conv_mode_for(cls, spec: ModelSpec) -> str:
        raise NotImplementedError

    @classmethod
    def load(cls, spec, path, *, device=None, dtype=None):
        code = locate_code("libra", model=spec.name)
        load_pretrained_model = import_upstream(code, "libra.model.builder.load_pretrained_model")
        dev, torch_dtype = _device_dtype(spec, device, dtype)
        name = cls.model_name(spec)
        try:
            tokenizer, model, image_processor, _ = load_pretrained_model(str(path), None, name, device=str(dev))
        except _LOAD_ERRORS as exc:
            raise ModelNotAvailableError(
                f"model {spec.name!r}: libra.model.builder.load_pretrained_model({str(path)!r}, None, {name!r}) failed "
                f"({type(exc).__name__}: {exc}); Libra from {code.location} (commit {code.commit or 'unknown'})") from exc
        if getattr(tokenizer, "pad_token_id", None) is None:
            tokenizer.pad_token_id = tokenizer.eos_token_id
        model.to(dev).eval()
        source = {**cls._source(path), "trust_remote_code": False, "upstream": code.as_dict()}
        return cls(spec, model, tokenizer, image_processor, source=source, code=code,
                   conv_mode=cls.conv_mode_for(spec), pixel_dtype=torch_dtype)

    # prompt --------------------------------------------------------------------------------
    def query(self, prompt: str | None = None) -> str:
        """The user turn: image token line, the prompt, then the wrapper's user text."""
        text = self._report_prompt(prompt).strip()
        qs = self.user_text.strip()
        if text:
            qs = f"{text}\n\n{qs}" if qs else text
        api = self._api
        image = api["constants.DEFAULT_IMAGE_TOKEN"]
        if getattr(self.model.config, "mm_use_im_start_end", False):
            image = api["constants.DEFAULT_IM_START_TOKEN"] + image + api["constants.DEFAULT_IM_END_TOKEN"]
        return f"{image}\n{qs}"

    def render_report(self, prompt: str | None = None) -> tuple[str, str]:
        """``(prompt string, stop string)`` of the conversation template."""
        conv = self._api["conversation.conv_templates"][self.conv_mode].copy()
        conv.append_message(conv.roles[0], self.query(prompt))
        conv.append_message(conv.roles[1], None)
        style = self._api["conversation.SeparatorStyle"]
        stop = conv.sep2 if conv.sep_style in {style.TWO, style.LLAMA_3, style.MISTRAL} else conv.sep
        return conv.get_prompt(), stop

    def _ids(self, text: str):
        api = self._api
        return api["mm_utils.tokenizer_image_token"](text, self.processor, api["constants.IMAGE_TOKEN_INDEX"],
                                                      return_tensors="pt")

    # images --------------------------------------------------------------------------------
    def _process(self, images: list):
        return self._api["mm_utils.process_images"](images, self.image_processor, self.model.config)

    def pixel_tensor(self, images: Sequence[np.ndarray]):
        """The ``images=`` tensor of one call (see the module docstring for the slot layout)."""
        import torch

        pils = [_pil(im) for im in images]
        tac = getattr(self.model.config, "mm_projector_type", None) == "TAC"
        if self.image_slots == "always":
            cur = self._process(pils)
            out = torch.stack([cur, cur.clone()], dim=0)  # prior = current
        elif tac:
            if len(pils) != 1:
                raise ValueError(f"{self.name}: the TAC path takes one image per call, got {len(pils)}")
            cur = self._process(pils)[0]
            out = torch.stack([cur.unsqueeze(0), cur.clone().unsqueeze(0)], dim=0)
        else:
            out = self._process(pils)
            if out.ndim == 3:
                out = out.unsqueeze(0)
        out = out.to(self.device)
        return out.to(self.pixel_dtype) if torch.is_floating_point(out) else out

    # identity ------------------------------------------------------------------------------
    def identity(self) -> dict:
        out = super().identity()
        out["adapter"] = "upstream-code"
        out["upstream"] = {k: v for k, v in self.code.as_dict().items() if k != "location"}
        out["report_prompt"] = {"query": self.query(), "conv_mode": self.conv_mode,
                                "template_sha256": hashlib.sha256(self.render_report()[0].encode()).hexdigest()}
        out["decoding"] = {"do_sample": self.spec.do_sample, "max_new_tokens": self.spec.max_new_tokens,
                           "batch_size": self.batch_size, "stopping": "keywords", "image_slots": self.image_slots,
                           "pixel_dtype": str(self.pixel_dtype).removeprefix("torch."),
                           "sampling_seed": "sha256 of the input" if self.spec.do_sample else None}
        return out

    def input_key(self, request=None, *, image=None, prompt=None) -> str:
        if request is not None:
            return super().input_key(request)
        return json.dumps({"prompt": self.render_report(prompt)[0], "image": image_fingerprint(image)}, sort_keys=True)

    # generation ----------------------------------------------------------------------------
    def _stopping(self, stop: str, rows):
        """One keyword criterion per row; stop when all rows have stopped (the authors' batch rule)."""
        from transformers import StoppingCriteria

        crit = self._api["mm_utils.KeywordsStoppingCriteria"]
        per_row = [crit([stop], self.processor, rows[i:i + 1]) for i in range(rows.shape[0])]
        if len(per_row) == 1:
            return per_row[0]

        class _All(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return all(bool(c(input_ids[i:i + 1], scores, **kwargs)) for i, c in enumerate(per_row))

        return _All()

    def _generate_chunk(self, images: list[np.ndarray], prompt: str | None, n_new: int) -> list[str]:
        import torch

        text, stop = self.render_report(prompt)
        tok = self.processor
        ids = [self._ids(text) for _ in images]
        width = max(int(r.shape[0]) for r in ids)
        pad = int(tok.pad_token_id)
        rows = torch.stack([torch.nn.functional.pad(r, (width - r.shape[0], 0), value=pad) for r in ids]).to(self.device)
        if len(images) == 1:
            mask = rows.ne(pad)
        else:
            mask = torch.stack([torch.nn.functional.pad(torch.ones_like(r), (width - r.shape[0], 0), value=0)
                                for r in ids]).to(self.device).bool()
        pixels = self.pixel_tensor(images)
        kwargs = dict(input_ids=rows, images=pixels, attention_mask=mask, do_sample=bool(self.spec.do_sample),
                      max_new_tokens=n_new, stopping_criteria=[self._stopping(stop, rows)], use_cache=True,
                      pad_token_id=pad)
        with torch.inference_mode():
            if self.spec.do_sample:
                seed = int(hashlib.sha256(self.input_key(image=images[0], prompt=prompt).encode()).hexdigest()[:15], 16)
                devices = [self.device] if self.device.type == "cuda" else []
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(seed)
                    out = self.model.generate(**kwargs)
            else:
                out = self.model.generate(**kwargs)
        reports = []
        for i in range(out.shape[0]):
            report = tok.batch_decode(out[i:i + 1, width:], skip_special_tokens=True)[0].strip()
            if stop and report.endswith(stop):
                report = report[:-len(stop)].strip()
            reports.append(report)
        return reports

    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """One report per image, in chunks of :attr:`batch_size` conversations."""
        images = list(images)
        n_new = int(max_new_tokens or self.spec.max_new_tokens)
        step = 1 if self.spec.do_sample else self.batch_size  # sampling: one seeded call per image
        out: list[str] = []
        for start in range(0, len(images), step):
            out += self._generate_chunk(images[start:start + step], prompt, n_new)
        return out


class LibraV1VLM(LibraCodeVLM):
    """Libra-v1 (``X-iZhang/libra-v1.0-7b``); see the module docstring."""

    user_text = "Analyze this CXR image."
    image_slots = "tac"
    batch_size = 1

    @classmethod
    def conv_mode_for(cls, spec: ModelSpec) -> str:
        return libra_conv_mode(cls.model_name(spec))


class LLaVARadVLM(LibraCodeVLM):
    """LLaVA-Rad, the Libra-repo port ``X-iZhang/libra-llava-rad``; see the module docstring."""

    user_text = ""
    image_slots = "always"
    batch_size = 4

    @classmethod
    def conv_mode_for(cls, spec: ModelSpec) -> str:
        return "v1"
