"""Residual patching and steering on the transformers backend (ModaLens App. N.2 patching, N.3 Table 25).

Both interventions are forward hooks on the decoder layers that :func:`~shovir_core.models.lens.decoder_parts`
finds (no copy of model code), and both return the model's own readout logits of the requested
token ids (by default the lowercase ``yes``/``no`` ids) at the answer position, the last prompt
token, where the first answer token is predicted. Everything runs under ``torch.inference_mode``.

"The residual at layer ``L``" is the output of decoder layer ``L`` (0-based): the stream that
:func:`~shovir_core.models.lens.layer_logits` projects as its entry ``L + 1``.

Residual patching (App. N.2, "cross-condition residual patching"): :func:`residuals` records a
donor run's residual stream at chosen layers over its last ``k`` positions; :func:`patched_logits`
reruns the recipient prompts with the output of layer ``L`` replaced by the donor's over the last
``n`` positions of each row -- ``n = 1`` for the answer position, ``n =`` :func:`common_suffix` of the
two prompts for "the longest common token suffix" (the two prompts share those tokens, so position
``-j`` of one is the same token as position ``-j`` of the other). The paper patches the report-absent
run's residual into the report-present run, with a wrong-donor control (another patient's absent run).

Steering (App. N.3, Table 25): :func:`mean_difference` is the difference-of-means direction
between the residuals of two answer classes at a layer (Marks and Tegmark 2024; Turner et al. 2023,
as cited there); :func:`random_direction` a Gaussian direction of the same norm (the control);
:func:`steered_logits` adds one vector per request to the answer position's residual after the
chosen layers (one layer, or every layer: the other control).

Batches are left-padded (:meth:`~shovir_core.models.hf.HFVLM._encode`), so positions counted from the
end of a row are the same tokens whatever the padding.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .lens import decoder_parts, request_chunks
from .protocol import ScoreRequest

__all__ = ["residuals", "answer_residuals_at", "patched_logits", "patched_logits_each", "steered_logits", "steered_logits_each",
           "readout_logits", "common_suffix", "token_ids", "mean_difference", "random_direction"]


def _ids(vlm, token_ids: Sequence[int] | None) -> list[int]:
    return list(token_ids) if token_ids is not None else [vlm.families.yes_id, vlm.families.no_id]


def _hidden(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _with_hidden(output, hs: torch.Tensor):
    return (hs, *output[1:]) if isinstance(output, tuple) else hs


def _add_at_answer(add: torch.Tensor):
    """A decoder layer's forward hook adding ``add`` (one row per batch row) at the answer (last) position."""
    def fn(module, args, output):
        hs = _hidden(output).clone()
        hs[:, -1] = hs[:, -1] + add.to(hs.dtype)
        return _with_hidden(output, hs)
    return fn


def _check_positions(n_pos: np.ndarray, k: int, what: str) -> None:
    if (n_pos < 0).any() or (n_pos > k).any():
        raise ValueError(f"{what}: n_positions must lie in 0..{k} (the donor's positions), got "
                         f"{sorted(set(n_pos[(n_pos < 0) | (n_pos > k)].tolist()))}")


def _check_layers(layers: Sequence[int], n_layers: int, what: str) -> list[int]:
    out = [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n_layers]
    if bad:
        raise ValueError(f"{what}: layers {bad} outside 0..{n_layers - 1}")
    return out


def _forward(vlm, requests: Sequence[ScoreRequest], chunk: list[int], hooks, ids_t: torch.Tensor) -> torch.Tensor:
    """One padded forward pass of ``chunk`` with ``hooks`` = [(module, hook_fn)] installed; the readout
    logits ``(len(chunk), n_ids)``."""
    batch = vlm._encode([vlm.render(requests[i]) for i in chunk], [requests[i].image for i in chunk])
    handles = [module.register_forward_hook(fn) for module, fn in hooks(int(batch["input_ids"].shape[1]))]
    try:
        out = vlm.model(**vlm._forward_inputs(batch), use_cache=False, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    return out.logits[:, -1][:, ids_t].float()


def token_ids(vlm, request: ScoreRequest) -> list[int]:
    """The model input ids of one request (unpadded), as the forward passes here see them."""
    return vlm._encode([vlm.render(request)], [request.image])["input_ids"][0].tolist()


def common_suffix(vlm, a: ScoreRequest, b: ScoreRequest) -> int:
    """Length of the longest common token suffix of two requests' model inputs (at least 1 when
    both end in the same answer-turn token, as every prompt of one chat template does)."""
    ia, ib = token_ids(vlm, a), token_ids(vlm, b)
    n = 0
    for x, y in zip(reversed(ia), reversed(ib)):
        if x != y:
            break
        n += 1
    return n


@torch.inference_mode()
def readout_logits(vlm, requests: Sequence[ScoreRequest], *, token_ids: Sequence[int] | None = None) -> np.ndarray:
    """The plain readout: logits of ``token_ids`` at the answer position, ``(n_requests, n_ids)``."""
    ids_t = torch.tensor(_ids(vlm, token_ids), device=vlm.device)
    requests = list(requests)
    out = np.zeros((len(requests), len(ids_t)), dtype=np.float32)
    for chunk in request_chunks(vlm, requests):
        out[np.asarray(chunk)] = _forward(vlm, requests, chunk, lambda length: [], ids_t).cpu().numpy()
    return out


@torch.inference_mode()
def residuals(vlm, requests: Sequence[ScoreRequest], *, layers: Sequence[int], last: int = 1,
              with_logits: bool = False, store: str | None = None):
    """Residual stream after each of ``layers`` over the last ``last`` positions of every request.

    Returns a tensor ``(n_requests, len(layers), last, d)`` in the model's dtype on the model's device
    (``[:, j, -1]`` is the answer position after layer ``layers[j]``); with ``with_logits`` also the
    plain readout of the same pass (as :func:`readout_logits`). ``store="cpu"`` keeps the result in
    host memory (a large cohort's donors need not sit on the accelerator). Slots before a request's first
    token (a request shorter than ``last``) hold padding positions and are never used by
    :func:`patched_logits`, which patches at most :func:`common_suffix` positions.
    """
    parts = decoder_parts(vlm.model)
    layers = _check_layers(layers, len(parts["layers"]), "residuals")
    if last < 1:
        raise ValueError(f"residuals: last = {last}, need >= 1")
    requests = list(requests)
    d = int(parts["weight"].shape[1])
    dtype = next(vlm.model.parameters()).dtype
    out = torch.zeros((len(requests), len(layers), last, d), dtype=dtype, device=store or vlm.device)
    ids_t = torch.tensor(_ids(vlm, None), device=vlm.device)
    logits = np.zeros((len(requests), len(ids_t)), dtype=np.float32)
    for chunk in request_chunks(vlm, requests):
        captured: dict[int, torch.Tensor] = {}

        def hooks(length, captured=captured):
            def make(j):
                def fn(module, args, output):
                    hs = _hidden(output)
                    k = min(last, hs.shape[1])
                    buf = torch.zeros((hs.shape[0], last, hs.shape[2]), dtype=hs.dtype, device=hs.device)
                    buf[:, last - k:] = hs[:, -k:]
                    captured[j] = buf
                return fn
            return [(parts["layers"][layer], make(j)) for j, layer in enumerate(layers)]

        logits[np.asarray(chunk)] = _forward(vlm, requests, chunk, hooks, ids_t).cpu().numpy()
        out[torch.as_tensor(chunk, device=out.device)] = torch.stack([captured[j] for j in range(len(layers))],
                                                                     dim=1).to(out.device)
    return (out, logits) if with_logits else out


@torch.inference_mode()
def answer_residuals_at(vlm, requests: Sequence[ScoreRequest], *, layers: Sequence[int],
                        token_ids: Sequence[int] | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """The residual at the answer position after each of ``layers`` and the readout of the same passes.

    Returns ``(resid, logits)``: ``resid`` ``(n_requests, len(layers), d)`` (float32, on the CPU) equals
    ``residuals(..., last=1)[:, :, -1]`` and ``logits`` ``(n_requests, n_ids)`` :func:`readout_logits`, both
    up to float rounding (tested). Requests sharing an image and everything before it -- one side of a case
    and its questions -- prefill that prefix once (:func:`~shovir_core.models.residuals.answer_residuals`),
    where :func:`residuals` runs every whole prompt: the steering direction's fit reads 13 questions on
    both sides of every fit case (ModaLens App. N.3), and only the answer position.
    """
    from .lens import _project
    from .residuals import answer_residuals

    parts = decoder_parts(vlm.model)
    n_layers = len(parts["layers"])
    layers = _check_layers(layers, n_layers, "answer_residuals_at")
    stream = answer_residuals(vlm, requests, entries=[layer + 1 for layer in layers] + [n_layers])
    weight = parts["weight"]
    ids_t = torch.tensor(_ids(vlm, token_ids), device=weight.device)
    final = stream[:, -1].to(device=weight.device, dtype=weight.dtype)
    return stream[:, :-1], _project(final, parts, ids_t).float().cpu().numpy()


@torch.inference_mode()
def patched_logits(vlm, requests: Sequence[ScoreRequest], *, layer: int, donor: torch.Tensor,
                   n_positions: Sequence[int], token_ids: Sequence[int] | None = None) -> np.ndarray:
    """Readout logits with the output of decoder layer ``layer`` replaced by a donor's residual.

    Parameters
    ----------
    requests
        The recipient prompts (e.g. report present).
    layer
        0-based decoder layer whose output is patched.
    donor
        ``(n_requests, k, d)``: per request the donor's residual after ``layer`` over its last ``k``
        positions (a slice of :func:`residuals`; on any device).
    n_positions
        Per request how many of the last positions to patch (1: the answer position;
        :func:`common_suffix`: the longest common token suffix); at most ``k`` and at most the
        recipient's length.
    """
    parts = decoder_parts(vlm.model)
    (layer,) = _check_layers([layer], len(parts["layers"]), "patched_logits")
    requests = list(requests)
    n_pos = np.asarray(n_positions, dtype=int)
    if donor.ndim != 3 or donor.shape[0] != len(requests) or len(n_pos) != len(requests):
        raise ValueError(f"patched_logits: donor {tuple(donor.shape)} / n_positions {len(n_pos)} do not match "
                         f"{len(requests)} requests (donor must be (n_requests, k, d))")
    k = int(donor.shape[1])
    _check_positions(n_pos, k, "patched_logits")
    ids_t = torch.tensor(_ids(vlm, token_ids), device=vlm.device)
    out = np.zeros((len(requests), len(ids_t)), dtype=np.float32)
    for chunk in request_chunks(vlm, requests):
        rows = torch.as_tensor(chunk, device=donor.device)
        counts = torch.as_tensor(n_pos[chunk], device=vlm.device)

        def hooks(length, rows=rows, counts=counts):
            if int(counts.max()) > length:
                raise ValueError(f"patched_logits: {int(counts.max())} positions to patch in a prompt of {length}")
            m = min(k, length)
            slot = torch.arange(m, device=vlm.device)  # slot j <-> position length - m + j
            mask = slot.view(1, -1) >= (m - counts).view(-1, 1)  # (b, m): the last counts[i] positions

            def fn(module, args, output):
                hs = _hidden(output).clone()
                src = donor[rows][:, k - m:].to(device=hs.device, dtype=hs.dtype)
                tail = hs[:, length - m:]
                hs[:, length - m:] = torch.where(mask.unsqueeze(-1), src, tail)
                return _with_hidden(output, hs)
            return [(parts["layers"][layer], fn)]

        out[np.asarray(chunk)] = _forward(vlm, requests, chunk, hooks, ids_t).cpu().numpy()
    return out


@torch.inference_mode()
def patched_logits_each(vlm, requests: Sequence[ScoreRequest], *, layers: Sequence[int], donor: torch.Tensor,
                        n_positions: Sequence[int], token_ids: Sequence[int] | None = None) -> np.ndarray:
    """:func:`patched_logits` at each of ``layers``: ``(n_requests, len(layers), n_ids)``.

    ``donor`` is ``(n_requests, len(layers), k, d)`` (:func:`residuals` at ``layers``). Each batch is
    encoded once and run once clean, recording each decoder layer's call
    (:func:`~shovir_core.models.lens._recorded_stream`); a patch at layer ``L`` then edits the clean output of
    ``L`` and runs only layers ``L + 1 ...`` again with their recorded arguments, since the layers up to
    ``L`` are the clean pass's element for element (App. N.2 patches 17 of MedGemma-27B's 62 layers: the
    record runs about half the layers it ran as one whole pass per layer). The readout is the final norm and
    unembedding rows of :func:`~shovir_core.models.lens.layer_logits`' last entry: the model's own logits up
    to float rounding (a test holds it to :func:`patched_logits`).
    """
    from .lens import _project, _recorded_stream, _resumed_last, recorded_input

    parts = decoder_parts(vlm.model)
    n_layers = len(parts["layers"])
    layers = _check_layers(layers, n_layers, "patched_logits_each")
    requests = list(requests)
    n_pos = np.asarray(n_positions, dtype=int)
    if donor.ndim != 4 or donor.shape[:2] != (len(requests), len(layers)) or len(n_pos) != len(requests):
        raise ValueError(f"patched_logits_each: donor {tuple(donor.shape)} / n_positions {len(n_pos)} do not match "
                         f"{len(requests)} requests and {len(layers)} layers (donor must be (n_requests, n_layers, k, d))")
    k = int(donor.shape[2])
    _check_positions(n_pos, k, "patched_logits_each")
    ids_t = torch.tensor(_ids(vlm, token_ids), device=vlm.device)
    out = np.zeros((len(requests), len(layers), len(ids_t)), dtype=np.float32)
    starts = sorted({layer + 1 for layer in layers if layer + 1 < n_layers})
    for chunk in request_chunks(vlm, requests):
        batch = vlm._encode([vlm.render(requests[i]) for i in chunk], [requests[i].image for i in chunk])
        length = int(batch["input_ids"].shape[1])
        counts = torch.as_tensor(n_pos[chunk], device=vlm.device)
        if int(counts.max()) > length:
            raise ValueError(f"patched_logits_each: {int(counts.max())} positions to patch in a prompt of {length}")
        m = min(k, length)
        mask = (torch.arange(m, device=vlm.device).view(1, -1) >= (m - counts).view(-1, 1)).unsqueeze(-1)
        clean, calls = _recorded_stream(vlm, batch, starts[0] if starts else n_layers, set(starts))
        rows = torch.as_tensor(chunk, device=donor.device)
        for j, layer in enumerate(layers):
            src = donor[rows, j, k - m:].to(device=vlm.device, dtype=clean.dtype)
            if layer + 1 < n_layers:
                hs = recorded_input(calls, layer + 1).clone()  # the clean output of ``layer``
                hs[:, length - m:] = torch.where(mask, src.to(hs.dtype), hs[:, length - m:])
                last = _resumed_last(vlm, calls, layer + 1, hs)
            else:  # the last layer: only the answer position reaches the readout
                last = torch.where(mask[:, -1], src[:, -1], clean[:, -1])
            out[np.asarray(chunk), j] = _project(last, parts, ids_t).float().cpu().numpy()
    return out


@torch.inference_mode()
def steered_logits(vlm, requests: Sequence[ScoreRequest], *, vectors: torch.Tensor | np.ndarray,
                   layers: Sequence[int], token_ids: Sequence[int] | None = None) -> np.ndarray:
    """Readout logits with ``vectors[i]`` added to request ``i``'s answer-position residual after
    every decoder layer in ``layers`` (one layer: a steer at that layer; all layers: the
    every-layer injection). ``vectors`` is ``(n_requests, d)`` or ``(d,)`` (the same for all);
    the caller folds direction, sign and scale into it."""
    parts = decoder_parts(vlm.model)
    layers = _check_layers(layers, len(parts["layers"]), "steered_logits")
    requests = list(requests)
    vec = torch.as_tensor(vectors, device=vlm.device)
    if vec.ndim == 1:
        vec = vec.expand(len(requests), -1)
    d = int(parts["weight"].shape[1])
    if vec.shape != (len(requests), d):
        raise ValueError(f"steered_logits: vectors {tuple(vec.shape)}, need ({len(requests)}, {d}) or ({d},)")
    ids_t = torch.tensor(_ids(vlm, token_ids), device=vlm.device)
    out = np.zeros((len(requests), len(ids_t)), dtype=np.float32)
    for chunk in request_chunks(vlm, requests):
        add = vec[torch.as_tensor(chunk, device=vlm.device)]

        def hooks(length, add=add):
            return [(parts["layers"][layer], _add_at_answer(add)) for layer in layers]

        out[np.asarray(chunk)] = _forward(vlm, requests, chunk, hooks, ids_t).cpu().numpy()
    return out


@torch.inference_mode()
def steered_logits_each(vlm, requests: Sequence[ScoreRequest], jobs: Sequence[tuple], *,
                        token_ids: Sequence[int] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """:func:`steered_logits` for each ``(vectors, layers)`` of ``jobs``, one ``(n_requests, n_ids)`` array each,
    and the unsteered readout of the same clean passes (:func:`readout_logits` up to float rounding).

    Each batch is encoded once. A job that steers one layer ``L`` (not the last) resumes from the batch's
    clean pass, recorded once (:func:`~shovir_core.models.lens._recorded_stream`): layers up to ``L`` are
    the clean pass's element for element, so only layers ``L + 1 ...`` run again, from ``L``'s clean output
    with the vector added at the answer position, and the readout is the final norm and unembedding rows
    (the model's own logits up to float rounding). Other jobs (every layer, the last layer) run whole with
    :func:`steered_logits`' hooks. A test holds every job to one :func:`steered_logits` call.
    """
    from .lens import _project, _recorded_stream, _resumed_last, recorded_input

    parts = decoder_parts(vlm.model)
    n_layers = len(parts["layers"])
    requests = list(requests)
    d = int(parts["weight"].shape[1])
    todo = []
    for vectors, layers in jobs:
        layers = _check_layers(layers, n_layers, "steered_logits_each")
        vec = torch.as_tensor(vectors, device=vlm.device)
        if vec.ndim == 1:
            vec = vec.expand(len(requests), -1)
        if vec.shape != (len(requests), d):
            raise ValueError(f"steered_logits_each: vectors {tuple(vec.shape)}, need ({len(requests)}, {d}) or ({d},)")
        todo.append((vec, layers, layers[0] + 1 if len(layers) == 1 and layers[0] + 1 < n_layers else None))
    ids_t = torch.tensor(_ids(vlm, token_ids), device=vlm.device)
    outs = [np.zeros((len(requests), len(ids_t)), dtype=np.float32) for _ in todo]
    plain = np.zeros((len(requests), len(ids_t)), dtype=np.float32)
    starts = sorted({start for _, _, start in todo if start is not None})
    for chunk in request_chunks(vlm, requests):
        batch = vlm._encode([vlm.render(requests[i]) for i in chunk], [requests[i].image for i in chunk])
        clean, calls = _recorded_stream(vlm, batch, starts[0] if starts else n_layers, set(starts))
        plain[np.asarray(chunk)] = _project(clean[:, -1], parts, ids_t).float().cpu().numpy()
        rows = torch.as_tensor(chunk, device=vlm.device)
        for (vec, layers, start), out in zip(todo, outs):
            add = vec[rows]
            if start is not None:
                hs = recorded_input(calls, start).clone()  # the clean output of layer start - 1
                hs[:, -1] = hs[:, -1] + add.to(hs.dtype)
                out[np.asarray(chunk)] = _project(_resumed_last(vlm, calls, start, hs), parts, ids_t).float().cpu().numpy()
                continue
            handles = [parts["layers"][layer].register_forward_hook(_add_at_answer(add)) for layer in layers]
            try:
                logits = vlm.model(**vlm._forward_inputs(batch), use_cache=False, logits_to_keep=1).logits
            finally:
                for h in handles:
                    h.remove()
            out[np.asarray(chunk)] = logits[:, -1][:, ids_t].float().cpu().numpy()
    return outs, plain


def mean_difference(resid: torch.Tensor | np.ndarray, classes: Sequence[bool] | np.ndarray) -> np.ndarray:
    """Difference-of-means direction ``mean(resid[classes]) - mean(resid[~classes])`` (float64, ``(d,)``).

    ``resid`` is ``(n, d)`` (e.g. the answer-position residuals after one layer), ``classes`` a boolean
    per row (e.g. the answer is ``yes``); both classes must be present.

    >>> mean_difference(np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), [True, True, False]).tolist()
    [2.0, -2.0]
    """
    x = resid.detach().double().cpu().numpy() if torch.is_tensor(resid) else np.asarray(resid, dtype=float)
    c = np.asarray(classes, dtype=bool)
    if x.ndim != 2 or len(c) != len(x):
        raise ValueError(f"mean_difference: resid {x.shape} and classes {c.shape} must be (n, d) and (n,)")
    if c.all() or not c.any():
        raise ValueError(f"mean_difference: both classes are needed (got {int(c.sum())} of {len(c)} in class 1)")
    return x[c].mean(axis=0) - x[~c].mean(axis=0)


def random_direction(like: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
    """A Gaussian random direction with the norm of ``like`` (the steering control).

    >>> v = random_direction(np.array([3.0, 4.0]), rng=np.random.default_rng(0))
    >>> round(float(np.linalg.norm(v)), 6)
    5.0
    """
    like = np.asarray(like, dtype=float)
    v = rng.standard_normal(like.shape)
    return v * (np.linalg.norm(like) / np.linalg.norm(v))
