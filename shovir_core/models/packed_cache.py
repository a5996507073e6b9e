"""Key/value caches of different prompt prefixes packed into one batch, and single rows taken back out.

The prefix trie of :meth:`~shovir_core.models.hf.HFVLM.score_yes_no` prefills each shared stretch of text
(a report, a framing) once. Run one trie node at a time, each node costs a forward pass and a decoding
loop of its own, and on a small model a pass costs more than the tokens it saves. Packed, the nodes of
one trie level run together, and so do the suffixes of different nodes: each row of a batch continues
its own prefix, left-padded to the longest prefix of the batch (the padding slots are masked out of
attention; each row keeps its own RoPE positions), its new tokens right-padded after it.

A row's prefix is held *compact* -- one ``(keys, values)`` pair per layer, shape ``(1, heads, length,
head_dim)``, no padding -- so that rows of any node can be packed with any other. Only the
``transformers`` layer kinds whose state is just those tensors are packed (:func:`packable`).
"""
from __future__ import annotations

import copy

import torch

__all__ = ["Prefix", "packable", "compact", "stacked_cache", "cut_rows"]

Prefix = list[tuple[torch.Tensor, torch.Tensor]]
"""One row's cache: ``(keys, values)`` per layer, each ``(1, heads, length, head_dim)``."""


def packable(cache) -> bool:
    """Whether ``cache`` (a model's returned cache) holds only dynamic layers whose state is their keys
    and values (and, for a sliding-window layer, the count of tokens seen), so that rows can be cut out
    and stacked. Other kinds (static, quantised, recurrent, indexed) are not packed."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) and layer.is_initialized
                                for layer in layers)


def compact(cache) -> Prefix:
    """The one-row ``cache`` as a :data:`Prefix` (its tensors, not copies)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def stacked_cache(template, prefixes: list[Prefix]):
    """A cache of ``len(prefixes)`` rows, each prefix left-padded with zeros to the longest.

    ``template``: a cache of the same model (its layer kinds are copied, not its tensors). Returns the
    cache and the ``(rows, slots)`` long mask of each row's real prefix slots (0 on the padding).
    """
    slots = max(p[0][0].shape[-2] for p in prefixes)
    lengths = [p[0][0].shape[-2] for p in prefixes]
    shell = copy.copy(template)
    shell.layers = [copy.copy(layer) for layer in template.layers]
    for li, layer in enumerate(shell.layers):
        keys = [p[li][0] for p in prefixes]
        values = [p[li][1] for p in prefixes]
        if all(n == slots for n in lengths):
            layer.keys, layer.values = torch.cat(keys, dim=0), torch.cat(values, dim=0)
        else:
            k0, v0 = keys[0], values[0]
            layer.keys = k0.new_zeros((len(prefixes), k0.shape[1], slots, k0.shape[3]))
            layer.values = v0.new_zeros((len(prefixes), v0.shape[1], slots, v0.shape[3]))
            for row, (k, v) in enumerate(zip(keys, values)):
                layer.keys[row, :, slots - k.shape[-2]:] = k[0]
                layer.values[row, :, slots - v.shape[-2]:] = v[0]
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = slots
    device = prefixes[0][0][0].device
    mask = torch.zeros((len(prefixes), slots), dtype=torch.long, device=device)
    for row, n in enumerate(lengths):
        mask[row, slots - n:] = 1
    return shell, mask


def cut_rows(cache, starts: list[int], stops: list[int]) -> list[Prefix]:
    """Row ``b``'s slots ``[starts[b], stops[b])`` of a batch ``cache`` as a compact :data:`Prefix` each
    (views: a row's left padding lies before ``starts[b]``, its right padding after ``stops[b]``)."""
    return [[(layer.keys[row:row + 1, :, a:b], layer.values[row:row + 1, :, a:b]) for layer in cache.layers]
            for row, (a, b) in enumerate(zip(starts, stops))]
