"""The image-classifier surrogate of ModaLens Appendix K (TorchXRayVision), offline.

The paper's surrogate is TorchXRayVision 1.5.4 ``densenet121-res224-chex`` on CPU. The package is
imported lazily and only to build its DenseNet: its own weight download is bypassed (the model is
built with ``weights=None`` and the state dict is read from a local file), and a missing package or
file fails with :class:`~shovir_core.models.spec.ModelNotAvailableError` naming what it wants.
TorchXRayVision depends on torchvision, which this project does not install (the CPU torch 2.13
build has no matching torchvision), so it is not a dependency: install it next to a matching
torchvision to run the ``mimic`` profile.

Preprocessing, operating-point normalisation and the calls are this package's own
(:mod:`shovir_core.metrics.surrogate`), written to the package's definitions, so the adapter runs
the same arithmetic on any network with the 18 TorchXRayVision output slots:
:func:`tiny_xrv_densenet` builds a small DenseNet-shaped stand-in with the package's head names and
random weights for the tests, and :class:`ReferenceSurrogate` wraps the project's reference CNN
(``ref-image-classifier``) with its own operating points for the demo profile.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..metrics.surrogate import (HEAD_TO_FINDING, XRV_OP_THRESHS, XRV_PATHOLOGIES, finding_scores, op_norm,
                                 xrv_preprocess)
from .spec import MODEL_DIR_ENV, ModelNotAvailableError

__all__ = ["XRV_VERSION", "XRV_WEIGHTS", "XRV_WEIGHTS_FILE", "XRV_WEIGHTS_ENV", "XRVSurrogate", "load_xrv",
           "xrv_weights_path", "tiny_xrv_densenet", "ReferenceSurrogate", "score_images", "image_scores"]

XRV_VERSION = "1.5.4"
"""The TorchXRayVision release the paper used (App. K)."""
XRV_WEIGHTS = "densenet121-res224-chex"
XRV_WEIGHTS_FILE = "chex-densenet121-d121-tw-lr001-rot45-tr15-sc15-seed0-best.pt"
"""The file the package downloads for ``densenet121-res224-chex`` (its ``models.model_urls`` entry)."""
XRV_WEIGHTS_ENV = "SHOVIR_XRV_WEIGHTS"


def xrv_weights_path(path: str | Path | None = None) -> Path:
    """The local weight file: ``path``, ``$SHOVIR_XRV_WEIGHTS`` or ``$SHOVIR_MODEL_DIR/torchxrayvision/<file>``.

    Raises :class:`ModelNotAvailableError` naming the file and every place searched; never downloads.
    """
    tried = []
    candidates = [Path(path)] if path is not None else []
    if os.environ.get(XRV_WEIGHTS_ENV):
        candidates.append(Path(os.environ[XRV_WEIGHTS_ENV]))
    if os.environ.get(MODEL_DIR_ENV):
        candidates.append(Path(os.environ[MODEL_DIR_ENV]) / "torchxrayvision" / XRV_WEIGHTS_FILE)
    for c in candidates:
        tried.append(str(c))
        if c.is_file():
            return c
    raise ModelNotAvailableError(
        f"TorchXRayVision {XRV_WEIGHTS} ({XRV_VERSION}): weight file {XRV_WEIGHTS_FILE} not found locally, and "
        f"this project never downloads. Searched: {'; '.join(tried) or 'nothing (no path given)'}. Put the file at "
        f"${MODEL_DIR_ENV}/torchxrayvision/{XRV_WEIGHTS_FILE}, set ${XRV_WEIGHTS_ENV}, or pass weights_path=.")


def _import_xrv():
    try:
        import torchxrayvision as xrv
    except ImportError as exc:
        raise ModelNotAvailableError(
            f"the classifier surrogate needs the 'torchxrayvision' package ({XRV_VERSION}, with a torchvision build "
            f"matching your torch); it is not installed ({exc}). pip install torchxrayvision=={XRV_VERSION} "
            f"torchvision") from exc
    version = getattr(xrv, "__version__", "unknown")
    if version != XRV_VERSION:
        raise ModelNotAvailableError(f"torchxrayvision {version} is installed; the paper's surrogate is {XRV_VERSION}")
    return xrv


class XRVSurrogate:
    """A network with the 18 TorchXRayVision output slots, behind the paper's preprocessing and op-norm.

    Parameters
    ----------
    net
        A torch module mapping (n, 1, 224, 224) inputs to (n, 18) logits.
    op_threshs
        18 operating points (NaN for the blank slots).
    pathologies
        The output slot names (default :data:`~shovir_core.metrics.surrogate.XRV_PATHOLOGIES`).
    """

    def __init__(self, net, op_threshs, *, pathologies: Sequence[str] = XRV_PATHOLOGIES, name: str = XRV_WEIGHTS):
        self.net, self.pathologies, self.name = net, tuple(pathologies), name
        self.op_threshs = np.asarray(op_threshs, dtype=float)
        if self.op_threshs.shape != (len(self.pathologies),):
            raise ValueError(f"op_threshs must have {len(self.pathologies)} entries, got {self.op_threshs.shape}")
        heads = [p for p in self.pathologies if p]
        if sorted(heads) != sorted(HEAD_TO_FINDING):
            raise ValueError(f"{name}: heads {heads} are not the 11 heads ModaLens App. K uses ({sorted(HEAD_TO_FINDING)})")

    def probabilities(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Sigmoid outputs (n, 18) of 8-bit images, one forward pass per image."""
        import torch

        out = np.zeros((len(images), len(self.pathologies)))
        with torch.inference_mode():
            for k, image in enumerate(images):
                x = torch.from_numpy(xrv_preprocess(np.asarray(image))[None])
                out[k] = torch.sigmoid(self.net(x)).double().numpy()[0]
        return out

    def scores(self, images: Sequence[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """``{"raw": {question: (n,)}, "normalised": {question: (n,)}}`` for the 12 surrogate questions."""
        raw = self.probabilities(images)
        return {"raw": finding_scores(raw, self.pathologies),
                "normalised": finding_scores(op_norm(raw, self.op_threshs), self.pathologies)}


def load_xrv(*, weights_path: str | Path | None = None) -> XRVSurrogate:
    """The paper's surrogate from TorchXRayVision and a local weight file (never its download)."""
    import torch

    xrv = _import_xrv()
    file = xrv_weights_path(weights_path)
    info = xrv.models.model_urls[XRV_WEIGHTS]
    ops = np.asarray(info["op_threshs"], dtype=float)
    if not np.allclose(ops, XRV_OP_THRESHS, equal_nan=True) or tuple(info["labels"]) != XRV_PATHOLOGIES:
        raise ModelNotAvailableError(f"torchxrayvision's {XRV_WEIGHTS} entry differs from the paper's {XRV_VERSION}")
    # weights=None: the package's download (get_weights) never runs; the file is read here
    net = xrv.models.DenseNet(weights=None, num_classes=len(XRV_PATHOLOGIES), apply_sigmoid=False)
    state = torch.load(file, map_location="cpu", weights_only=False)
    state = state.state_dict() if hasattr(state, "state_dict") else state
    net.load_state_dict(state)
    net.eval()
    return XRVSurrogate(_LogitsOnly(net), ops, name=XRV_WEIGHTS)


class _LogitsOnly:
    """Calls a TorchXRayVision DenseNet without its own op-norm (features -> pooled -> classifier)."""

    def __init__(self, net) -> None:
        self.net = net

    def __call__(self, x):
        import torch.nn.functional as F

        if hasattr(self.net, "features2"):  # the package's own feature path
            return self.net.classifier(self.net.features2(x))
        feats = F.relu(self.net.features(x), inplace=False)
        return self.net.classifier(F.adaptive_avg_pool2d(feats, (1, 1)).flatten(1))


def tiny_xrv_densenet(*, seed: int = 0, growth: int = 4, blocks: tuple[int, ...] = (2, 2), head_scale: float = 0.1):
    """A small DenseNet-shaped network (dense blocks of BN-ReLU-conv layers with concatenation,
    transitions, global pooling, an 18-way linear head) with seeded random weights, plus
    random operating points for the 11 heads (NaN for the blank slots). ``head_scale`` multiplies the
    head's random weights: the default keeps the logits near 0; a rehearsal's stand-in
    (:mod:`shovir_core.protocols.modalens_surrogate`) takes a larger one so that its probabilities spread
    across the operating points and its calls differ between images, as a trained classifier's do."""
    import torch
    from torch import nn

    class _Dense(nn.Module):
        def __init__(self, cin: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, growth, 3, padding=1, bias=False))

        def forward(self, x):
            return torch.cat([x, self.body(x)], dim=1)

    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # the default initialisation must not touch the global RNG
        features, classifier, ch = _tiny_layers(nn, _Dense, growth, blocks)
    net = nn.Module()
    net.features, net.classifier = features, classifier
    with torch.no_grad():
        for pname, p in list(features.named_parameters()) + list(classifier.named_parameters()):
            if p.ndim > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / np.prod(p.shape[1:])) ** 0.5)
            elif pname.endswith("bias"):
                p.zero_()
        features[0].weight.mul_(1.0 / 1024.0)  # inputs span [-1024, 1024]: keep the random logits unsaturated
        classifier.weight.mul_(head_scale)
    net.eval()
    rng = np.random.default_rng(seed)
    ops = np.array([rng.uniform(0.05, 0.35) if h else np.nan for h in XRV_PATHOLOGIES])
    return _LogitsOnly(net), ops


def _tiny_layers(nn, dense, growth: int, blocks: tuple[int, ...]):
    layers, ch = [nn.Conv2d(1, 8, 7, stride=4, padding=3, bias=False)], 8
    for i, n in enumerate(blocks):
        for _ in range(n):
            layers.append(dense(ch))
            ch += growth
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.Conv2d(ch, ch // 2, 1, bias=False), nn.AvgPool2d(2)]
            ch //= 2
    return nn.Sequential(*layers), nn.Linear(ch, len(XRV_PATHOLOGIES)), ch


class ReferenceSurrogate:
    """The demo's surrogate: the reference CNN (``ref-image-classifier``) with its own operating points.

    The CNN has no head for enlarged cardiomediastinum or fracture (no positive demo image), so the
    demo surrogate answers 9 findings + the composite (max of the 9). Its operating point for a
    class is the class prior of its training data (``priors`` of the reference parameters): a
    calibrated classifier's probability crosses the prior where the evidence favours the class.
    """

    def __init__(self) -> None:
        from .cnn import CLASSES
        from .reference import build_reference

        self.model = build_reference("ref-image-classifier")
        priors = self.model.params["priors"]
        self.classes = tuple(c for c in CLASSES if c in HEAD_TO_FINDING.values())
        self._idx = [CLASSES.index(c) for c in self.classes]
        self.op_threshs = np.array([priors[c] for c in self.classes], dtype=float)
        self.name = "ref-image-classifier (demo surrogate)"

    def scores(self, images: Sequence[np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        raw = self.model.probabilities(list(images))[:, self._idx]
        mapping = {c: c for c in self.classes}
        return {"raw": finding_scores(raw, self.classes, mapping=mapping),
                "normalised": finding_scores(op_norm(raw, self.op_threshs), self.classes, mapping=mapping)}


def image_scores(surrogate, load_image, image_ids: Sequence[str]) -> dict[str, dict]:
    """``{kind: {image_id: {question: score}}}`` for both kinds (``"normalised"``, ``"raw"``) from one
    scoring pass over the distinct images (the surrogate computes both kinds from the same outputs)."""
    ids = list(dict.fromkeys(image_ids))
    images = []
    for i in ids:
        img = np.asarray(load_image(i))
        if img.dtype != np.uint8:  # the paper's input is 8-bit greyscale
            img = np.clip(np.round(img * 255.0 if img.max() <= 1.0 else img), 0, 255).astype(np.uint8)
        images.append(img)
    both = surrogate.scores(images)
    return {kind: {i: {q: float(v[k]) for q, v in both[kind].items()} for k, i in enumerate(ids)}
            for kind in ("normalised", "raw")}


def score_images(surrogate, load_image, image_ids: Sequence[str], *, kind: str = "normalised") -> dict:
    """``{image_id: {question: score}}`` of a surrogate (``kind`` = ``"normalised"`` or ``"raw"``);
    :func:`image_scores` gives both kinds from one pass."""
    if kind not in ("normalised", "raw"):
        raise ValueError(f"kind must be 'normalised' or 'raw', got {kind!r}")
    return image_scores(surrogate, load_image, image_ids)[kind]
