"""The small CNN behind ``ref-image-classifier`` (torch; imported only when that model is built).

Input: one grayscale image resized to ``INPUT_SIZE`` x ``INPUT_SIZE``, floats in [0, 1]
standardised with the training mean/std. Output: one logit per class of ``CLASSES``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["INPUT_SIZE", "CLASSES", "build_cnn", "preprocess", "penultimate_features"]

INPUT_SIZE = 64

CLASSES: tuple[str, ...] = (
    "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia",
    "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
)
"""The CheXpert classes with positive images in the demo NIH box subset (the CNN's outputs)."""


def build_cnn(*, n_classes: int = len(CLASSES), generator=None):
    """Four 3x3 conv blocks (16-32-64-64 channels) + global average pooling + a linear head.

    Parameters
    ----------
    generator
        ``torch.Generator`` for the initial weights (deterministic, no global seeding).
    """
    import torch
    from torch import nn

    channels = (1, 16, 32, 64, 64)
    layers: list = []
    for i, (cin, cout) in enumerate(zip(channels[:-1], channels[1:])):
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
        if i < len(channels) - 2:
            layers.append(nn.MaxPool2d(2))
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], n_classes))
    if generator is not None:
        with torch.no_grad():
            for name, param in net.named_parameters():
                if param.ndim > 1:
                    fan_in = int(np.prod(param.shape[1:]))
                    param.copy_(torch.randn(param.shape, generator=generator) * (2.0 / fan_in) ** 0.5)
                elif name.endswith("bias"):
                    param.zero_()
    return net


def preprocess(gray: np.ndarray) -> np.ndarray:
    """Resize a 2-D float image in [0, 1] to ``INPUT_SIZE`` square with PIL bilinear (float32)."""
    from PIL import Image

    if gray.shape == (INPUT_SIZE, INPUT_SIZE):
        return gray.astype(np.float32)
    im = Image.fromarray(np.ascontiguousarray(gray, dtype=np.float32)).resize((INPUT_SIZE, INPUT_SIZE), Image.BILINEAR)
    return np.asarray(im, dtype=np.float32)


def penultimate_features(net, x):
    """The globally pooled features the linear head reads (64 per image): ``net`` without its last layer.

    ``x`` is a (n, 1, INPUT_SIZE, INPUT_SIZE) float tensor, standardised as for the classifier.
    """
    return net[:-1](x)
