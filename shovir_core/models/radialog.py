"""RaDialog (LLaVA version) through the code in its Hugging Face repository, run as the ShoViR authors do.

The checkpoint ``ChantalPellegrini/RaDialog-interactive-radiology-report-generation`` is a LoRA on
``liuhaotian/llava-v1.5-7b`` with a BioViL-T vision tower, loaded by the repository's own
``LLAVA_Biovil.llava.model.builder.load_pretrained_model`` (:mod:`.upstream` finds the code: a
checkout under ``$SHOVIR_CODE_DIR`` or the checkpoint folder itself). The steps, from the authors'
wrapper (``arco-group/ShoViR-Bench`` ``src/benchmark/models/radialog/__init__.py@5420a55``):

1. load with ``model_base = liuhaotian/llava-v1.5-7b`` (local: ``$SHOVIR_MODEL_DIR/liuhaotian--llava-v1.5-7b``
   or the Hugging Face cache) and ``model_name =
   "llava-v1.5-7b-task-lora_radialog_instruct_llava_biovil_unfrozen_2e-5_5epochs_v5_checkpoint-21000"``;
   ``config.tokenizer_padding_side = "left"``;
2. the image: ``remap_to_uint8(np.array(image))`` then grayscale (``"L"``);
3. findings: the repository's CheXpert classifier (``findings_classifier.chexpert_train.LitIGClassifier``
   from ``findings_classifier/checkpoints/chexpert_train/ChexpertClassifier.ckpt``, 14 classes,
   ``strict=False``, half precision on a GPU) on ``Resize(512) -> CenterCrop(488) -> ToTensor ->
   ExpandChannels``; a class is predicted when its sigmoid exceeds 0.5; the names of the predicted
   classes, joined by ``", "`` and lower-cased, fill the prompt;
4. prompt ``"<image>. Predicted Findings: {findings}. You are to act as a radiologist and write the
   finding section of a chest x-ray radiology report for this X-ray image and the given predicted
   findings. Write in the style of a radiologist, write one fluent text without enumeration, be
   concise and don't provide explanations or reasons."`` in ``conv_vicuna_v1`` (USER / ASSISTANT);
   the wrapper builds this prompt in code and ignores the benchmark prompt key, so a prompt override
   (the Supplementary's shared minimal prompt) is ignored here too unless it contains ``{findings}``;
5. pixels: ``create_chest_xray_transform_for_inference(512, center_crop_size=448)`` in bfloat16;
6. greedy, ``use_cache=True``, ``max_new_tokens=300``, keyword stopping on ``"</s>"``, attention mask
   ``input_ids != pad``; the report is ``tokenizer.decode(new tokens).strip().replace("</s>", "")``
   (special tokens other than ``</s>`` are kept, as in the wrapper).

The classifier's torchvision pipeline (step 3) is done with Pillow, which is what torchvision's
``Resize`` / ``CenterCrop`` call on PIL images (bilinear resize of the short side to ``int(512 *
long / short)``, crop offsets ``round((size - 488) / 2)``), so torchvision is not needed here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from .protocol import Box, image_fingerprint
from .spec import ModelNotAvailableError, ModelSpec, resolve_weights
from .remote import RemoteCodeVLM, _device_dtype, _pil
from .upstream import UPSTREAM, CodeSource, import_upstream, locate_code

__all__ = ["RaDialogVLM", "CHEXPERT_COLUMNS", "classifier_pixels"]

CHEXPERT_COLUMNS = ("No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion",
                    "Edema", "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion",
                    "Pleural Other", "Fracture", "Support Devices")
"""The findings classifier's output order (the wrapper's ``chexpert_cols``)."""

MODEL_NAME = "llava-v1.5-7b-task-lora_radialog_instruct_llava_biovil_unfrozen_2e-5_5epochs_v5_checkpoint-21000"
BASE_MODEL = "liuhaotian/llava-v1.5-7b"
CLASSIFIER = Path("findings_classifier/checkpoints/chexpert_train/ChexpertClassifier.ckpt")
_LOAD_ERRORS = (ImportError, OSError, ValueError, TypeError, AttributeError, KeyError, RuntimeError)


def classifier_pixels(gray, *, resize: int = 512, crop: int = 488):
    """``Resize(resize) -> CenterCrop(crop) -> ToTensor`` of a PIL ``"L"`` image, as a (1, crop, crop) tensor."""
    import torch
    from PIL import Image

    w, h = gray.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = resize, int(resize * long / short)
    size = (new_short, new_long) if w <= h else (new_long, new_short)
    img = gray.resize(size, Image.BILINEAR)
    w, h = img.size
    top, left = int(round((h - crop) / 2.0)), int(round((w - crop) / 2.0))
    img = img.crop((left, top, left + crop, top + crop))
    arr = np.asarray(img, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).to(torch.float32).div(255.0)[None]


def _base_model_path() -> str:
    spec = ModelSpec("radialog-base", "hf", BASE_MODEL)
    try:
        return str(resolve_weights(spec))
    except ModelNotAvailableError as exc:
        raise ModelNotAvailableError(
            f"model 'radialog': its LoRA base {BASE_MODEL} is not available locally ({exc})") from exc


class RaDialogVLM(RemoteCodeVLM):
    """RaDialog-LLaVA; see the module docstring."""

    architecture_note = "RaDialog runs through its repository's report prompt only"

    def __init__(self, spec: ModelSpec, model, tokenizer, *, source: dict, code: CodeSource, classifier,
                 vis_transform, pixel_dtype) -> None:
        super().__init__(spec, model, tokenizer, source=source)
        self.code, self.classifier, self.vis_transform, self.pixel_dtype = code, classifier, vis_transform, pixel_dtype
        self._api = {name: import_upstream(code, f"LLAVA_Biovil.llava.{name}") for name in (
            "mm_utils.remap_to_uint8", "mm_utils.tokenizer_image_token", "mm_utils.KeywordsStoppingCriteria",
            "conversation.conv_vicuna_v1", "conversation.SeparatorStyle", "constants.IMAGE_TOKEN_INDEX")}
        self._api["ExpandChannels"] = import_upstream(code, "findings_classifier.chexpert_train.ExpandChannels")
        self.class_names = np.asarray(getattr(classifier, "class_names", CHEXPERT_COLUMNS))

    @classmethod
    def load(cls, spec, path, *, device=None, dtype=None):
        code = locate_code("radialog", model=spec.name, extra_dirs=(Path(path),))
        builder = import_upstream(code, "LLAVA_Biovil.llava.model.builder.load_pretrained_model")
        transform = import_upstream(code, "utils.create_chest_xray_transform_for_inference")
        classifier_cls = import_upstream(code, "findings_classifier.chexpert_train.LitIGClassifier")
        ckpt = Path(code.location) / CLASSIFIER
        if not ckpt.is_file():
            raise ModelNotAvailableError(
                f"model {spec.name!r}: the findings classifier {ckpt} is missing; weights needed: "
                f"{UPSTREAM['radialog'].weights}")
        dev, torch_dtype = _device_dtype(spec, device, dtype)
        base = _base_model_path()
        try:
            tokenizer, model, _image_processor, _ = builder(str(path), model_base=base, model_name=MODEL_NAME,
                                                            load_8bit=False, load_4bit=False, device=str(dev))
            classifier = classifier_cls.load_from_checkpoint(str(ckpt), num_classes=14,
                                                             class_names=list(CHEXPERT_COLUMNS), strict=False)
        except _LOAD_ERRORS as exc:
            raise ModelNotAvailableError(
                f"model {spec.name!r}: loading RaDialog from {path} (base {base}) with the code at {code.location} "
                f"(commit {code.commit or 'unknown'}) failed: {type(exc).__name__}: {exc}") from exc
        model.to(dev).eval()
        model.config.tokenizer_padding_side = "left"
        classifier.eval()
        classifier.to(dev)
        if dev.type == "cuda":
            classifier.half()
        source = {**cls._source(path), "trust_remote_code": False, "upstream": code.as_dict(), "base_model": BASE_MODEL,
                  "classifier": str(CLASSIFIER)}
        return cls(spec, model, tokenizer, source=source, code=code, classifier=classifier,
                   vis_transform=transform(512, center_crop_size=448), pixel_dtype=torch_dtype)

    # steps ---------------------------------------------------------------------------------
    def grayscale(self, image: np.ndarray):
        """Step 2: ``remap_to_uint8`` of the RGB array, then PIL ``"L"``."""
        from PIL import Image

        arr = self._api["mm_utils.remap_to_uint8"](np.asarray(_pil(image)))
        return Image.fromarray(arr).convert("L")

    def predicted_findings(self, gray) -> str:
        """Step 3: the classifier's positive class names, ``", "``-joined and lower-cased."""
        import torch

        x = self._api["ExpandChannels"]()(classifier_pixels(gray))[None]
        param = next(self.classifier.parameters())
        with torch.no_grad():
            logits = self.classifier(x.to(param.device, param.dtype))
        pred = (torch.sigmoid(logits) > 0.5)[0].cpu().numpy()
        return ", ".join(self.class_names[pred].tolist()).lower().strip()

    def user_message(self, findings: str, prompt: str | None = None) -> str:
        """Step 4's user turn (a prompt override counts only when it has a ``{findings}`` slot)."""
        template = prompt if (prompt is not None and "{findings}" in prompt) else self.spec.report_user
        return template.format(findings=findings)

    def render(self, findings: str, prompt: str | None = None) -> tuple[str, str]:
        """``(conversation prompt, stop string)``."""
        conv = self._api["conversation.conv_vicuna_v1"].copy()
        conv.append_message("USER", self.user_message(findings, prompt))
        conv.append_message("ASSISTANT", None)
        style = self._api["conversation.SeparatorStyle"]
        return conv.get_prompt(), (conv.sep if conv.sep_style != style.TWO else conv.sep2)

    def identity(self) -> dict:
        out = super().identity()
        out["adapter"] = "upstream-code"
        out["upstream"] = {k: v for k, v in self.code.as_dict().items() if k != "location"}
        out["report_prompt"] = {"user": self.spec.report_user, "conversation": "conv_vicuna_v1",
                                "prompt_override": "used only with a {findings} slot"}
        out["decoding"] = {"greedy": True, "max_new_tokens": self.spec.max_new_tokens, "stopping": "keywords",
                           "pixel_dtype": str(self.pixel_dtype).removeprefix("torch."),
                           "classifier": {"threshold": 0.5, "resize": 512, "crop": 488}}
        return out

    def input_key(self, request=None, *, image=None, prompt=None) -> str:
        if request is not None:
            return super().input_key(request)
        effective = prompt if (prompt is not None and "{findings}" in prompt) else None
        return json.dumps({"prompt": effective, "image": image_fingerprint(image)}, sort_keys=True)

    def generate_reports(self, images: Sequence[np.ndarray], *, prompt: str | None = None,
                         max_new_tokens: int | None = None, boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        """One greedy report per image (steps 2-6)."""
        import torch

        n_new = int(max_new_tokens or self.spec.max_new_tokens)
        tok = self.processor
        api = self._api
        reports = []
        for image in images:
            gray = self.grayscale(image)
            text, stop = self.render(self.predicted_findings(gray), prompt)
            ids = api["mm_utils.tokenizer_image_token"](text, tok, api["constants.IMAGE_TOKEN_INDEX"],
                                                        return_tensors="pt")[None].to(self.device)
            pixels = self.vis_transform(gray)[None].to(self.device, dtype=self.pixel_dtype)
            crit = api["mm_utils.KeywordsStoppingCriteria"]([stop], tok, ids)
            with torch.inference_mode():
                out = self.model.generate(ids, images=pixels, attention_mask=(ids != tok.pad_token_id).long(),
                                          do_sample=False, use_cache=True, max_new_tokens=n_new,
                                          stopping_criteria=[crit], pad_token_id=tok.pad_token_id)
            reports.append(tok.decode(out[0, ids.shape[1]:]).strip().replace("</s>", ""))
        return reports
