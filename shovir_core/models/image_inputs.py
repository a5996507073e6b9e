"""An image processor's outputs, kept per process by the image's content.

The arms of a ModaLens chapter ask about the same images (report present or absent, an instruction
variant, text first ...), each arm a record of its own, and every group of every arm preprocessed its
image again -- twice, since the group's first prompt and its token ids are two processor calls with
different options. On the demo book that was 6 s of ref-vlm's tables record alone; with MedGemma's
896-px preprocessing it is CPU time beside every GPU batch. :func:`kept_outputs` keeps each output in a
least-recently-used store of at most 128 MB per process (:data:`STORE`), keyed by a digest of the image
processor's settings, the image's pixel fingerprint and the call's options, so a changed pixel or a
changed processor setting is computed again.

The kept outputs are shared: each caller gets a shallow copy (its own mapping, the same tensors), as
:class:`~shovir_core.models.hf._OnceImageProcessor` already hands a group's prompts the same tensors.
Nothing downstream writes into them (the processor concatenates, the model reads).
"""
from __future__ import annotations

import copy
import hashlib
from typing import Callable

import numpy as np
import torch

from ..bounded_store import BoundedStore

__all__ = ["kept_outputs", "processor_digest", "STORE"]

STORE = BoundedStore(max_bytes=128 << 20)
"""The processor outputs a process keeps (an output larger than a quarter of its bound is not kept)."""


def processor_digest(processor) -> str:
    """SHA-256 of an image processor's class and settings (``to_json_string``: about 50 us).

    Computed from the settings each time it is asked (a caller holds it for one group at most), so a
    setting changed on the same object makes another key."""
    to_json = getattr(processor, "to_json_string", None)
    settings = to_json() if callable(to_json) else repr(sorted(vars(processor).items()))
    name = f"{type(processor).__module__}.{type(processor).__qualname__}"
    return hashlib.sha256(f"{name}\n{settings}".encode()).hexdigest()


def _nbytes(output) -> int | None:
    """Bytes of an output's tensors, arrays and numbers (in lists too); ``None`` where it holds anything else."""
    total = 0
    for value in output.values():
        size = _size(value)
        if size is None:
            return None
        total += size
    return total


def _size(value) -> int | None:
    if torch.is_tensor(value):
        return value.element_size() * value.nelement()
    if isinstance(value, np.ndarray):
        return value.nbytes if value.dtype != object else None
    if isinstance(value, (bool, int, float, np.number)):
        return 8
    if isinstance(value, (list, tuple)):
        sizes = [_size(v) for v in value]
        return None if any(s is None for s in sizes) else 8 + sum(sizes)
    return None


def kept_outputs(key: tuple, make: Callable[[], object]):
    """``make()`` (a processor's output mapping) once per process for ``key``; a shallow copy each call.

    ``key`` must name everything the output depends on: the processor (:func:`processor_digest`), the
    images' pixels (:func:`~shovir_core.models.protocol.image_fingerprint`), how they are nested and the
    call's options. An output holding anything but tensors, arrays and numbers (in lists) is not kept.
    """
    def made():
        output = make()
        return output, _nbytes(output)

    return copy.copy(STORE.get_or_make(key, made))
