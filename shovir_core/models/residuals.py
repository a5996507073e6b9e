"""Residual streams at the answer position, and two saliency scores of the image (ModaLens App. N.1, N.3).

:func:`answer_residuals` returns the residual stream at the answer position (the last prompt token)
after the embeddings and after every decoder layer, captured by the same forward hooks as the logit
lens (:func:`shovir_core.models.lens.layer_logits`), so ``lens._project(answer_residuals(...))``
is the logit lens. The linear probes of Table 26 read one layer of it; nothing here is stored in a
record (the protocols keep only scores).

The saliency baselines of Table 26 (Appendix N.3, "six fixed baselines"; the saliency AURC records
of the appendix's other-records list):

* :func:`image_attention_mass` -- the share of the answer position's attention that lands on the
  image tokens, averaged over heads and over the requested layers (eager attention is switched on
  for the call, then the model's implementation is restored);
* :func:`image_input_gradient` -- the L2 norm of the gradient of the final yes - no margin with
  respect to the image embeddings (the multimodal projector's output, where the image enters the
  decoder).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch

from .lens import (_image_ids, _stream_at, answer_stream, decoder_parts, request_chunks, shared_prefix_batches,
                   shared_prefix_streams)
from .protocol import ScoreRequest

__all__ = ["answer_residuals", "image_attention_mass", "image_input_gradient", "eager_attention"]


def _batches(vlm, requests: Sequence[ScoreRequest]):
    """(indices, encoded batch) per :func:`~shovir_core.models.lens.request_chunks` chunk."""
    for chunk in request_chunks(vlm, requests):
        yield chunk, vlm._encode([vlm.render(requests[i]) for i in chunk], [requests[i].image for i in chunk])


@torch.inference_mode()
def answer_residuals(vlm, requests: Sequence[ScoreRequest], *, entries: Sequence[int] | None = None) -> torch.Tensor:
    """Residuals at the answer position: tensor ``(n_requests, n_layers + 1, d)`` (float32, on the CPU).

    Entry ``[:, 0]`` is the embedding, ``[:, l]`` the residual after decoder layer ``l - 1``; the
    last entry, through the final norm and the unembedding, gives the model's own logits. ``entries``
    keeps only those entries, in that order (``(n_requests, len(entries), d)``): a real model's every
    layer for every request of a cohort would not fit in memory. Requests sharing an image and everything
    before it run their shared prefix once (:func:`~shovir_core.models.lens.shared_prefix_streams`), the
    others one whole prompt each.
    """
    parts = decoder_parts(vlm.model)
    requests = list(requests)
    n_entries = len(parts["layers"]) + 1
    keep = list(range(n_entries)) if entries is None else [int(e) for e in entries]
    if any(not 0 <= e < n_entries for e in keep):
        raise ValueError(f"answer_residuals: entries must lie in 0..{n_entries - 1} (the embedding and "
                         f"{n_entries - 1} layers), got {sorted(set(keep))}")
    pick = None if entries is None else torch.as_tensor(keep)
    out = torch.zeros((len(requests), len(keep), int(parts["weight"].shape[1])), dtype=torch.float32)

    def store(rows, resid):
        out[torch.as_tensor(rows)] = (resid if pick is None else resid[:, pick.to(resid.device)]).float().cpu()

    rest = shared_prefix_streams(vlm, requests, store)
    for chunk, batch in _batches(vlm, [requests[i] for i in rest]):
        store([rest[i] for i in chunk], answer_stream(vlm, batch))
    return out


@contextmanager
def eager_attention(model):
    """Switch a transformers model to eager attention (attention weights available), then restore it."""
    old = getattr(model.config, "_attn_implementation", None) or "eager"
    if old != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if old != "eager":
            model.set_attn_implementation(old)


def _answer_mass(attentions, use: list[int], last: torch.Tensor, is_img: torch.Tensor) -> torch.Tensor:
    """Share of each row's attention at position ``last`` (one per row) that lands where ``is_img`` (``(b, keys)``
    or ``(keys,)``), mean over heads and the layers ``use``: ``(b,)``."""
    rows = torch.arange(last.shape[0], device=last.device)
    mass = torch.stack([attentions[i][rows, :, last, :].float().mean(dim=1) for i in use], dim=1)  # (b, k, keys)
    return (mass * is_img.float().unsqueeze(-2)).sum(-1).mean(-1)


def _prefix_attention_mass(vlm, requests: list[ScoreRequest], use: list[int], image_t: torch.Tensor,
                           out: np.ndarray) -> list[int]:
    """:func:`image_attention_mass` of requests that share an image and everything before it: the
    shared prefix (the image included) is prefilled once and each question's own tokens run after
    it (:func:`~shovir_core.models.lens.shared_prefix_batches`, as for the residuals).
    The suffixes hold no image token (the prefix holds the whole image), so the answer position's mass
    on the image is its attention on its prefix's image tokens (a row's own slots of a packed batch). Fills ``out`` and returns the indices
    left for whole prompts."""
    rest: list[int] = []
    for rows, inputs, last, prefix in shared_prefix_batches(vlm, requests, rest):
        res = vlm.model(**inputs, logits_to_keep=1, output_attentions=True)
        keys = torch.zeros((len(rows), res.attentions[use[0]].shape[-1]), dtype=torch.bool, device=vlm.device)
        keys[:, :prefix.shape[1]] = torch.isin(prefix.to(vlm.device), image_t)  # each row's prefix slots
        out[np.asarray(rows)] = _answer_mass(res.attentions, use, last, keys).cpu().numpy()
    return rest


@torch.inference_mode()
def image_attention_mass(vlm, requests: Sequence[ScoreRequest], *, layers: Sequence[int] | None = None) -> np.ndarray:
    """Share of the answer position's attention on image tokens, mean over heads and ``layers`` (default all).

    Returns ``(n_requests,)`` float64 in [0, 1]; a request without an image gets 0. Requests sharing an
    image and everything before it (a case's questions on one side) run their shared prefix once
    (:func:`_prefix_attention_mass`; equal to whole prompts up to float rounding, tested), the others
    one whole prompt each.
    """
    parts = decoder_parts(vlm.model)
    n_layers = len(parts["layers"])
    use = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    bad = [x for x in use if not 0 <= x < n_layers]
    if bad or not use:
        raise ValueError(f"image_attention_mass: layers {bad or use} outside 0..{n_layers - 1}")
    image_t = torch.tensor(sorted(_image_ids(vlm)), device=vlm.device)
    requests = list(requests)
    out = np.zeros(len(requests), dtype=float)
    with eager_attention(vlm.model):
        rest = _prefix_attention_mass(vlm, requests, use, image_t, out)
        for chunk, batch in _batches(vlm, [requests[i] for i in rest]):
            res = vlm.model(**vlm._forward_inputs(batch), use_cache=False, output_attentions=True)
            is_img = torch.isin(batch["input_ids"], image_t.to(batch["input_ids"].device))
            last = torch.full((len(chunk),), batch["input_ids"].shape[1] - 1, device=batch["input_ids"].device)
            out[np.asarray([rest[i] for i in chunk])] = _answer_mass(res.attentions, use, last, is_img).cpu().numpy()
    return out


def image_input_gradient(vlm, requests: Sequence[ScoreRequest], *, streams: bool = False):
    """L2 norm of d(final yes - no margin) / d(image embeddings), one per request (``(n,)`` float64).

    The image embeddings are the multimodal projector's output. A batch's margins are summed before
    the backward pass: a request's margin does not depend on another request's image (left padding is
    masked), so each request's gradient is its own. Requests without an image raise ``ValueError``.
    With ``streams`` also returns the requests' answer-position residual streams read in the same forward
    passes (:func:`answer_residuals`' tensor, equal to it up to float rounding): Table 26's probe reads the
    source image's streams and gradients, and one pass gives both.
    """
    model = vlm.model
    projector = getattr(getattr(model, "model", model), "multi_modal_projector", None)
    if projector is None:
        raise TypeError(f"{type(model).__name__}: no multi_modal_projector to take the image gradient at")
    if any(r.image is None for r in requests):
        raise ValueError("image_input_gradient: a request without an image has no image gradient")
    yes, no = vlm.families.yes_id, vlm.families.no_id
    out = np.zeros(len(requests), dtype=float)
    resid = None
    if streams:
        parts = decoder_parts(model)
        resid = torch.zeros((len(requests), len(parts["layers"]) + 1, int(parts["weight"].shape[1])),
                            dtype=torch.float32)
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        for chunk, batch in _batches(vlm, list(requests)):
            held: list[torch.Tensor] = []

            def keep(module, args, output):
                output.requires_grad_(True)
                output.retain_grad()
                held.append(output)
                return output

            handle = projector.register_forward_hook(keep)
            try:
                with torch.enable_grad():
                    res = {}

                    def forward():
                        res["logits"] = model(**vlm._forward_inputs(batch), use_cache=False, logits_to_keep=1).logits

                    if streams:
                        resid[torch.as_tensor(chunk)] = _stream_at(vlm, forward).detach().float().cpu()
                    else:
                        forward()
                    logits = res["logits"][:, -1]
                    (logits[:, yes] - logits[:, no]).float().sum().backward()
            finally:
                handle.remove()
            grad = held[0].grad.float().reshape(len(chunk), -1)
            out[np.asarray(chunk)] = grad.norm(dim=1).cpu().numpy()
    finally:
        for p, f in zip(model.parameters(), flags):
            p.requires_grad_(f)
    return (out, resid) if streams else out
