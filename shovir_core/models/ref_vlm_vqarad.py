"""``ref-vlm-vqarad``: the ``ref-vlm`` architecture trained here on VQA-RAD's official training questions.

The same transformers class and toy width as ``ref-vlm`` (:mod:`shovir_core.models.ref_vlm`:
``Gemma3ForConditionalGeneration``, 6 decoder layers of width 64, 16 image tokens, 64 x 64 inputs,
the Gemma turn template, ModaLens' prompt without a report: one user turn ``[image, "Question: ..."]``,
the answer at the first generated position). It learns something real and nothing planted: the
**closed yes/no questions of VQA-RAD's official training split** (``freeform`` + ``para`` rows of
``trainset.json``; 942 questions on the shipped release) with a next-token loss on the lowercase
answer ``yes`` / ``no`` followed by ``<eos>``, batches drawn uniformly with a fixed seed, AdamW,
float32 on one CPU thread (:func:`shovir_core.training.ref_vlm_vqarad.train`;
``python -m shovir_core.training.ref_vlm_vqarad`` writes the weights). Images are resized to 64 x 64
RGB (:func:`shovir_core.protocols.noreport.prepare_image`, the protocol's own resizing, so training
and evaluation see the same pixels).

It is evaluated on the official **test** questions (the chapter "Datasets without a report" shows
its accuracy beside the majority-answer baseline, whatever they are); ``resources/ref_vlm_vqarad.json``
carries the training config, the data hash and the training metrics, including that test accuracy.
"""
from __future__ import annotations

import json
from pathlib import Path

from .spec import ModelSpec

__all__ = ["SPECS", "TRAIN_CONFIG", "WEIGHTS_FILE", "META_FILE", "build_ref_vlm_vqarad", "architecture"]

SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("ref-vlm-vqarad", "ref-vlm-vqarad", paper="reference", dtype="float32", max_new_tokens=8,
              notes="Gemma3ForConditionalGeneration at ref-vlm's size, trained on VQA-RAD's official training "
                    "closed yes/no questions (seeded, CPU); evaluated on the official test questions"),
)
"""The registry entry (:data:`shovir_core.models.REGISTRY` includes it)."""

TRAIN_CONFIG: dict = {
    "seed": 0,
    "steps": 300,
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "warmup": 20,
    "image_size": 64,
    "dataset": "vqa-rad:data/vqa-rad",
}
"""Training settings (hashed into the shipped weights' metadata); the architecture is ``ref-vlm``'s."""

WEIGHTS_FILE = "ref_vlm_vqarad.safetensors"
META_FILE = "ref_vlm_vqarad.json"


def architecture(seed: int):
    """The untrained model: ``ref-vlm``'s architecture (its training config's dims), seeded."""
    from .ref_vlm import TRAIN_CONFIG as ARCH
    from .ref_vlm import architecture as arch

    return arch(ARCH, seed=seed)


def build_ref_vlm_vqarad(spec: ModelSpec | None = None, *, local_path=None, device: str | None = None,
                         dtype: str | None = None, weights: str | Path | None = None):
    """The trained model as an :class:`~shovir_core.models.hf.HFVLM` (weights from ``resources/``)."""
    import torch
    from safetensors.torch import load_file

    from .ref_vlm import resources_dir
    from .spec import ModelNotAvailableError

    path = Path(weights) if weights is not None else resources_dir() / WEIGHTS_FILE
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise ModelNotAvailableError(f"ref-vlm-vqarad: weights {path} or metadata {meta_path} missing; train them with "
                                     "`python -m shovir_core.training.ref_vlm_vqarad`")
    meta = json.loads(meta_path.read_text())
    model, processor, digest = architecture(int(meta["config"]["seed"]))
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if real_missing or unexpected:
        raise RuntimeError(f"ref-vlm-vqarad: weights do not fit the architecture ({real_missing[:3]}, {unexpected[:3]})")
    model.tie_weights()
    model.to(device=torch.device(device or "cpu"), dtype=getattr(torch, dtype) if dtype else torch.float32).eval()
    from .hf import HFVLM

    return HFVLM(SPECS[0], model, processor, batch_size=16,
                 source={"kind": "ref-vlm-vqarad", "config_sha256": digest, "weights_sha256": meta["weights_sha256"]})


