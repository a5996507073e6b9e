"""Layerwise readouts and attention knockout on the transformers backend (ModaLens App. N.1-N.2).

:func:`layer_logits` runs one forward pass per batch of :class:`~shovir_core.models.protocol.ScoreRequest`
and reads the residual stream at the answer position (the last prompt token, where the first answer
token is predicted) after the embeddings and after every decoder layer. Without a knockout, requests
that share an image and everything before it (a case's 14 questions on one side) prefill that prefix
once and run only their own tokens after it, where the model allows prefix reuse (the readouts equal
whole-prompt passes up to float rounding; 2.3x on the 62-layer stand-in with a six-sentence report). Each residual goes through
the decoder's final norm and the unembedding **restricted to the readout rows** (by default the
lowercase ``yes``/``no`` ids; any requested token ids), never a full-vocabulary matmul per layer
(the logit lens, ModaLens App. N.1). The last entry is the model's own readout: the same norm,
the same rows, the same soft-capping.

:class:`Knockout` blocks query -> key attention for a key span at given layers (App. N.2, Figure 7):
a forward pre-hook on each chosen layer's attention module edits the 4-D attention mask it receives
(boolean masks for SDPA, additive float masks for eager attention; a skipped causal mask is built),
so no model code is copied. Spans come from :func:`token_spans`: the report line, the question line,
the image tokens, and size-/magnitude-matched controls. Query scopes: ``answer`` (the answer
position only) or ``non_image`` (every position that is neither an image token nor in the blocked
span).
"""
from __future__ import annotations

import hashlib

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .knockout_spans import SCOPES, SPANS
from .packed_cache import compact, packable, stacked_cache
from .protocol import ScoreRequest

__all__ = ["decoder_parts", "layer_logits", "layer_logits_each", "token_spans", "Knockout", "SPANS", "SCOPES",
           "knockout_hooks", "request_chunks", "answer_stream", "shared_prefix_batches", "shared_prefix_streams"]


def decoder_parts(model) -> dict:
    """The decoder layers, final norm, unembedding matrix and final soft-capping of a VLM.

    Works for ``*ForConditionalGeneration`` models whose ``get_decoder()`` exposes ``layers`` and
    ``norm`` (Gemma-3, LLaVA/Mistral, Qwen2-VL).
    """
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    norm = getattr(decoder, "norm", None)
    head = model.get_output_embeddings()
    if layers is None or norm is None or head is None:
        raise TypeError(f"{type(model).__name__}: cannot find decoder layers / final norm / lm_head")
    text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return {"layers": list(layers), "norm": norm, "weight": head.weight,
            "bias": getattr(head, "bias", None), "softcap": getattr(text_cfg, "final_logit_softcapping", None)}


def _project(h: torch.Tensor, parts: dict, ids: torch.Tensor) -> torch.Tensor:
    """Final norm + unembedding rows ``ids`` (+ soft-capping) of residuals ``h`` (..., d)."""
    x = parts["norm"](h)
    w = parts["weight"][ids]
    out = x @ w.T
    if parts["bias"] is not None:
        out = out + parts["bias"][ids]
    cap = parts["softcap"]
    if cap:
        out = torch.tanh(out / cap) * cap
    return out


@dataclass(frozen=True)
class Knockout:
    """Block query -> key attention for one span.

    Parameters
    ----------
    span
        One of :data:`SPANS`.
    layers
        Decoder layer indices (0-based) where attention is blocked; :meth:`cumulative` and
        :meth:`single` build the paper's two variants.
    scope
        One of :data:`SCOPES`.
    """

    span: str
    layers: tuple[int, ...]
    scope: str = "answer"

    def __post_init__(self) -> None:
        if self.span not in SPANS:
            raise ValueError(f"Knockout: span {self.span!r} not in {SPANS}")
        if self.scope not in SCOPES:
            raise ValueError(f"Knockout: scope {self.scope!r} not in {SCOPES}")
        object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))

    @classmethod
    def cumulative(cls, span: str, start: int, n_layers: int, *, scope: str = "answer") -> "Knockout":
        """Blocked at layers ``start ... n_layers - 1``."""
        if not 0 <= start < n_layers:
            raise ValueError(f"Knockout.cumulative: start {start} outside 0..{n_layers - 1}")
        return cls(span, tuple(range(start, n_layers)), scope)

    @classmethod
    def single(cls, span: str, layer: int, *, scope: str = "answer") -> "Knockout":
        """Blocked at ``layer`` only."""
        return cls(span, (int(layer),), scope)


def _image_ids(vlm) -> set[int]:
    """The image (soft) token ids: the model config's ``image_token_id``, else the processor's."""
    for i in (getattr(vlm.model.config, "image_token_id", None), getattr(vlm.processor, "image_token_id", None)):
        if i is not None:
            return {int(i)}
    return set()


def token_spans(vlm, request: ScoreRequest) -> dict[str, np.ndarray]:
    """Token positions (in the unpadded model input) of every span of :data:`SPANS` for one request.

    The report and question lines are located by tokenising the prompt cut at their character
    boundaries and comparing with the full prompt's tokens (a boundary token that merges differently
    at the cut is counted into the span); a span that cannot be located raises ``ValueError``. The
    full prompt and its cuts are encoded together: one processor call for the texts that carry the
    image and one for those cut before it (token ids do not depend on padding).
    """
    from .prompts import text_block

    text = vlm.render(request)
    block = text_block(request)
    at = text.find(block)
    if at < 0:
        raise ValueError(f"token_spans: the text block of {request.question!r} is not in the rendered prompt")
    q_at = at + block.rindex("Question: ")
    bounds = {"question": (q_at, at + len(block))}
    if request.report is not None:
        r_at = at + block.index("Report: ")
        bounds["report"] = (r_at, r_at + len("Report: ") + len(request.report))
    cuts = [c for a, b in bounds.values() for c in (a, b)]
    ids = _encode_unpadded(vlm, [text] + [text[:c] for c in cuts],
                           [True] + [_image_before(vlm, text, c) for c in cuts], request.image)
    full, cut_ids = ids[0], dict(zip(cuts, ids[1:]))
    spans: dict[str, np.ndarray] = {}
    for name, (a, b) in bounds.items():
        # a boundary token may merge differently at the cut (e.g. a newline run): the span starts at the
        # common prefix with the cut-before prompt and ends after the cut-after prompt's last shared token
        na = _common_prefix(full, cut_ids[a])
        shared = _common_prefix(full, cut_ids[b])
        nb = shared if shared == len(cut_ids[b]) else shared + 1
        if na >= nb or nb > len(full):
            raise ValueError(f"token_spans: cannot locate the {name} span of {request.question!r}")
        spans[name] = np.arange(na, nb)
    img = np.array([j for j, t in enumerate(full) if t in _image_ids(vlm)], dtype=int)
    spans["image"] = img
    spans.setdefault("report", np.array([], dtype=int))
    k_rep = len(spans["report"])
    if img.size and k_rep:
        pick = np.unique(np.linspace(0, img.size - 1, num=min(k_rep, img.size)).round().astype(int))
        spans["image_matched"] = img[pick]
    else:
        spans["image_matched"] = np.array([], dtype=int)
    spans["report_matched"] = spans["report"][:len(spans["question"])]
    seed = int.from_bytes(hashlib.sha256(np.asarray(full, dtype=np.int64).tobytes()).digest()[:8], "little")
    others = np.arange(len(full) - 1)
    spans["random_matched"] = np.sort(np.random.default_rng(seed).choice(others, size=min(img.size, others.size),
                                                                         replace=False))
    spans["none"] = np.array([], dtype=int)
    spans["answer"] = np.array([len(full) - 1])
    spans["length"] = np.array([len(full)])
    return spans


def _encode_unpadded(vlm, texts: list[str], with_image: list[bool], image) -> list[list[int]]:
    """Input ids of each text (the image attached where ``with_image`` and ``image`` is not None),
    encoded in one batch per kind and stripped of their padding."""
    out: list[list[int] | None] = [None] * len(texts)
    for kind in (True, False):
        rows = [i for i, w in enumerate(with_image) if bool(w and image is not None) == kind]
        if not rows:
            continue
        batch = vlm._encode([texts[i] for i in rows], [image if kind else None] * len(rows))
        keep = batch["attention_mask"].bool()
        for k, i in enumerate(rows):
            out[i] = batch["input_ids"][k][keep[k]].tolist()
    return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(diff[0]) if diff.size else n


def _image_before(vlm, text: str, cut: int) -> bool:
    """Whether the image placeholder of a rendered prompt lies before character ``cut``."""
    tok = vlm.tokenizer
    marks = [m for m in (getattr(vlm.processor, "boi_token", None), getattr(tok, "image_token", None),
                         getattr(vlm.processor, "image_token", None)) if m]
    first = min((text.find(m) for m in marks if text.find(m) >= 0), default=-1)
    return 0 <= first < cut


def _mask_edit(mask, *, batch: int, length: int, rows: list[tuple[np.ndarray, np.ndarray]], dtype, device,
               impl: str = "eager"):
    """A copy of a layer's 4-D attention mask with (query, key) pairs of each row blocked.

    A boolean mask blocks with False; an additive one with what its implementation puts where a boolean
    mask says False: -inf under ``sdpa`` (its conversion, made once per pass on the CPU by
    :func:`~shovir_core.models.attention_masks.forward_inputs`), the dtype's minimum under ``eager``
    (transformers' eager masks)."""
    if isinstance(mask, dict):  # per-layer-type masks are resolved before the layer; not expected here
        raise TypeError("knockout: got a mapping of masks at the attention module")
    if mask is None:
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        mask = causal.view(1, 1, length, length)
    mask = mask.expand(batch, -1, -1, -1).clone()
    if mask.dtype == torch.bool:
        blocked = False
    else:
        blocked = float("-inf") if impl == "sdpa" else torch.finfo(mask.dtype).min
    q_len, k_len = mask.shape[-2], mask.shape[-1]
    for b, (queries, keys) in enumerate(rows):
        if len(queries) and len(keys):
            q = torch.as_tensor(queries - (length - q_len), device=device)
            k = torch.as_tensor(keys - (length - k_len), device=device)
            mask[b, :, q.view(-1, 1), k.view(1, -1)] = blocked
    return mask


@contextmanager
def knockout_hooks(model, knockout: Knockout | None, rows: list[tuple[np.ndarray, np.ndarray]], *, length: int):
    """Install the mask-editing pre-hooks for one padded batch (positions in padded coordinates)."""
    if knockout is None or not knockout.layers or all(len(k) == 0 for _, k in rows):
        yield
        return
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in ("eager", "sdpa"):
        raise ValueError(f"knockout needs eager or sdpa attention, the model uses {impl!r}")
    layers = decoder_parts(model)["layers"]
    bad = [i for i in knockout.layers if not 0 <= i < len(layers)]
    if bad:
        raise ValueError(f"knockout: layers {bad} outside 0..{len(layers) - 1}")
    device = next(model.parameters()).device

    def hook(module, args, kwargs):
        hs = kwargs.get("hidden_states", args[0] if args else None)
        kwargs["attention_mask"] = _mask_edit(kwargs.get("attention_mask"), batch=hs.shape[0], length=length,
                                              rows=rows, dtype=hs.dtype, device=device, impl=impl)
        return args, kwargs

    handles = [layers[i].self_attn.register_forward_pre_hook(hook, with_kwargs=True) for i in knockout.layers]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _rows(spans: list[dict], knockout: Knockout | None, pads: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for s, pad in zip(spans, pads):
        if knockout is None:
            out.append((np.array([], int), np.array([], int)))
            continue
        keys = s[knockout.span]
        if knockout.scope == "answer":
            queries = s["answer"]
        else:
            excluded = set(s["image"].tolist()) | set(keys.tolist())
            queries = np.array([j for j in range(int(s["length"][0])) if j not in excluded], dtype=int)
        out.append((queries + pad, keys + pad))
    return out


def request_chunks(vlm, requests: Sequence[ScoreRequest]):
    """Index chunks of ``requests`` that run as one padded batch: at most ``vlm.batch_size`` each, requests
    with and without an image apart (the processor batches one kind at a time)."""
    groups: dict[bool, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(r.image is None, []).append(i)
    for idx in groups.values():
        for start in range(0, len(idx), vlm.batch_size):
            yield idx[start:start + vlm.batch_size]


def answer_stream(vlm, batch: dict) -> torch.Tensor:
    """The residual stream at the answer (last) position of an encoded batch: ``(b, n_layers + 1, d)``.

    Entry ``[:, 0]`` is the embedding (the first decoder layer's input), ``[:, l]`` the residual after
    decoder layer ``l - 1``; hooks installed by the caller around this call (a knockout) act on it.
    """
    return _stream_at(vlm, lambda: vlm.model(**vlm._forward_inputs(batch), use_cache=False, logits_to_keep=1))


def _stream_at(vlm, forward, last: torch.Tensor | None = None) -> torch.Tensor:
    """The residual stream after the embeddings and each decoder layer during ``forward()``, at each
    row's position ``last`` (``None``: the last position): ``(b, n_layers + 1, d)``."""
    parts = decoder_parts(vlm.model)
    captured: list[torch.Tensor] = []

    def take(hs: torch.Tensor) -> torch.Tensor:
        if last is None:
            return hs[:, -1].clone()
        return hs[torch.arange(hs.shape[0], device=hs.device), last].clone()

    def pre(module, args, kwargs):
        captured.append(take(kwargs.get("hidden_states", args[0] if args else None)))

    def post(module, args, output):
        captured.append(take(output[0] if isinstance(output, tuple) else output))

    handles = [parts["layers"][0].register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [layer.register_forward_hook(post) for layer in parts["layers"]]
    try:
        forward()
    finally:
        for h in handles:
            h.remove()
    return torch.stack(captured, dim=1)


def shared_prefix_batches(vlm, requests: Sequence[ScoreRequest], rest: list[int]):
    """Suffix batches of the requests that share an image and everything before it (a case's questions on
    one side): each group's shared prefix -- image included -- is prefilled once (when the generator
    reaches it, so under the caller's attention settings), and the rest of each prompt runs after it,
    right-padded. Yields ``(indices, inputs, last, prefix_ids)``: the requests, the model inputs of their
    suffixes, each row's last token within its suffix and each row's prefix token ids at the cache slots
    before its suffix (``(rows, slots)``, -1 on padding). Appends to ``rest`` the indices left for one pass
    per whole prompt (no prefix reuse for this model, no image, alone in their group, or a prefix that would
    not hold the image: text first).

    Where the caches can be packed (:mod:`~shovir_core.models.packed_cache`: dynamic layers, no sliding
    window a padded row could reach past), the suffixes of consecutive groups run together, each row after
    its own group's prefix (left-padded, the padding masked, at its own RoPE positions): eight cases' 14
    questions on two sides take 7 suffix passes of 32 rows instead of 16 of 14, and on the 62-layer
    stand-in a pass costs mostly its layers' calls, not its rows. Elsewhere each group's suffixes run after
    copies of its own cache. Both equal whole prompts up to float rounding (tested)."""
    requests = list(requests)
    if not getattr(vlm, "prefix_reuse", False):
        rest += range(len(requests))
        return
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        key = (id(r.image), r.report, r.order) if r.image is not None else ("alone", i)
        groups.setdefault(key, []).append(i)
    window = getattr(vlm.model.config.get_text_config(), "sliding_window", None)
    pending: list[_Row] = []  # packed rows not yet run, in request-group order
    template = None
    for idx, ids, n, cache, prefix, deltas, prefix_ids in _prefilled_groups(vlm, requests, groups, rest):
        widest = max(len(x) - n for x in ids)
        if prefix is not None and not (window and n + widest > window):
            if pending and window and max(n, *(r.n for r in pending)) + max(widest, *(len(r.suffix) for r in pending)) > window:
                yield from _flush(vlm, template, pending, len(pending))  # together they could reach past the window
            template = cache
            pending += [_Row(i, x[n:], prefix, prefix_ids, deltas, n) for i, x in zip(idx, ids)]
            yield from _flush(vlm, template, pending, vlm._answer_batch(n + widest, 0), whole=True)
            continue
        step = vlm._answer_batch(max(len(x) for x in ids), 0)  # each row copies the prefix cache (as the trie)
        for start in range(0, len(idx), step):
            rows = list(range(start, min(start + step, len(idx))))
            suffixes = [ids[k][n:] for k in rows]
            inputs = vlm._suffix_inputs(cache, n, suffixes, deltas)
            last = torch.tensor([len(x) - 1 for x in suffixes], device=vlm.device)
            vlm.stats["prefill_tokens"] += sum(len(x) for x in suffixes)
            vlm.stats["forward_passes"] += 1
            yield [idx[k] for k in rows], inputs, last, prefix_ids.view(1, -1).expand(len(rows), -1)
    yield from _flush(vlm, template, pending, len(pending))


def _prefilled_groups(vlm, requests: list[ScoreRequest], groups: dict, rest: list[int]):
    """Each group of :func:`shared_prefix_batches` with its prefix prefilled: ``(indices, token ids, prefix
    length, cache, compact prefix or None, RoPE offsets, prefix ids)``. Up to ``vlm.batch_size`` groups are
    prefilled in one left-padded pass (:meth:`~shovir_core.models.hf.HFVLM._prefill_rows`), where the model
    allows it; otherwise one pass each, the prefix compact only where the cache can be packed. Groups of one
    request, or whose prefix would not hold the image, go to ``rest``."""
    todo = []
    for idx in groups.values():
        if len(idx) < 2:
            rest += idx
            continue
        first, ids, n = vlm._encode_group([requests[i] for i in idx])
        if n == 0:
            rest += idx
            continue
        todo.append((idx, first, ids, n))
        if len(todo) == vlm.batch_size:
            yield from _prefill_window(vlm, todo)
            todo = []
    yield from _prefill_window(vlm, todo)


def _prefill_window(vlm, todo: list[tuple]):
    together = vlm._prefill_rows([t[1] for t in todo], [t[3] for t in todo])
    for k, (idx, first, ids, n) in enumerate(todo):
        prefix_ids = first["input_ids"][0, :n]
        if together is not None:
            yield idx, ids, n, together[0], together[1][k], None, prefix_ids
            continue
        cache, deltas = vlm._prefill(first, n)
        yield idx, ids, n, cache, compact(cache) if packable(cache) else None, deltas, prefix_ids


@dataclass
class _Row:
    """A request waiting in :func:`shared_prefix_batches`' packed batch: its index, its suffix's token ids,
    its group's compact prefix cache, token ids and multimodal RoPE offsets, and the prefix length."""
    index: int
    suffix: list[int]
    prefix: list
    prefix_ids: torch.Tensor
    deltas: torch.Tensor | None
    n: int


def _flush(vlm, template, pending: list[_Row], step: int, *, whole: bool = False):
    """Run ``pending``'s rows in batches of ``step`` (with ``whole``, only full batches: the rest wait for
    the next group), removing them from ``pending``."""
    while pending and (len(pending) >= step or not whole):
        rows, pending[:] = pending[:step], pending[step:]
        yield _packed_suffixes(vlm, template, rows)


def _packed_suffixes(vlm, template, rows: list[_Row]):
    """One :func:`shared_prefix_batches` batch of ``rows``, each suffix after its own group's prefix."""
    past, prefix_mask = stacked_cache(template, [r.prefix for r in rows])
    suffix_ids, new = vlm._right_padded([r.suffix for r in rows])
    slots, width = prefix_mask.shape[1], suffix_ids.shape[1]
    text = torch.tensor([r.n for r in rows], device=vlm.device).view(-1, 1) + torch.arange(width, device=vlm.device)
    deltas = None if rows[0].deltas is None else torch.cat([r.deltas.reshape(1) for r in rows])
    inputs = dict(input_ids=suffix_ids, attention_mask=torch.cat([prefix_mask, new], dim=1), cache=past,
                  use_cache=True, cache_position=torch.arange(slots, slots + width, device=vlm.device),
                  **vlm._positions(text, deltas))
    prefix_ids = torch.full((len(rows), slots), -1, dtype=torch.long, device=vlm.device)
    for b, r in enumerate(rows):
        prefix_ids[b, slots - r.n:] = r.prefix_ids.to(vlm.device)
    last = torch.tensor([len(r.suffix) - 1 for r in rows], device=vlm.device)
    vlm.stats["prefill_tokens"] += sum(len(r.suffix) for r in rows)
    vlm.stats["forward_passes"] += 1
    return [r.index for r in rows], inputs, last, prefix_ids


def shared_prefix_streams(vlm, requests: Sequence[ScoreRequest], store) -> list[int]:
    """Answer-position residual streams of requests that share an image and everything before it
    (:func:`shared_prefix_batches`), read at each row's own last token. Calls ``store(indices, resid)``
    per batch (``resid`` as :func:`answer_stream`'s); returns the indices left for the
    one-pass-per-prompt path.

    The streams equal a forward over each whole prompt up to float rounding (tested); on a group of 14
    questions the shared tokens -- the image and the report -- run once instead of 14 times.
    """
    rest: list[int] = []
    for rows, inputs, last, _ in shared_prefix_batches(vlm, requests, rest):
        store(rows, _stream_at(vlm, lambda: vlm.model(**inputs, logits_to_keep=1), last))
    return rest


def layer_logits(vlm, requests: Sequence[ScoreRequest], *, token_ids: Sequence[int] | None = None,
                 knockout: Knockout | None = None, spans: Sequence[dict] | None = None) -> np.ndarray:
    """Logit-lens readouts: array ``(n_requests, n_layers + 1, n_tokens)`` (float32).

    Entry ``[:, 0]`` reads the embeddings, ``[:, l]`` the residual after decoder layer ``l - 1``;
    the last entry equals the model's own logits of ``token_ids`` at the answer position (same
    norm, rows and soft-capping). ``token_ids`` defaults to ``(yes_id, no_id)`` of the adapter's
    token families. With ``knockout`` the forward pass runs with that span blocked; ``spans`` (one
    :func:`token_spans` dict per request) saves locating the spans again when several knockouts run
    on the same requests (:func:`layer_logits_each` runs several on one encoding of the requests).
    """
    return layer_logits_each(vlm, requests, [knockout], token_ids=token_ids, spans=spans)[0]


def _recorded_stream(vlm, batch: dict, first: int, keep: set[int]):
    """:func:`answer_stream` of ``batch`` (no knockout), recording each decoder layer's call from layer
    ``first`` on: ``(stream, {layer: (args, kwargs)})``, the layer's input hidden state kept only for the
    layers in ``keep`` (the others' calls keep their masks and position embeddings, shared tensors)."""
    layers = decoder_parts(vlm.model)["layers"]
    calls: dict[int, tuple] = {}

    def record(i: int):
        def hook(module, args, kwargs):
            if i not in keep:  # the hidden state is replaced at replay: do not hold every layer's
                args = (None, *args[1:]) if args else args
                kwargs = {k: v for k, v in kwargs.items() if k != "hidden_states"}
            calls[i] = (args, dict(kwargs))
        return hook

    handles = [layers[i].register_forward_pre_hook(record(i), with_kwargs=True) for i in range(first, len(layers))]
    try:
        stream = answer_stream(vlm, batch)
    finally:
        for h in handles:
            h.remove()
    return stream, calls


def _resumed_stream(vlm, clean: torch.Tensor, calls: dict[int, tuple], start: int) -> torch.Tensor:
    """The answer position's residual stream of a pass whose layers before ``start`` are those of the clean
    pass (``clean``, :func:`_recorded_stream`): its first ``start + 1`` entries, then decoder layers
    ``start ...`` called again from layer ``start``'s recorded input with their recorded arguments (the
    caller's knockout hooks act on them as in a whole pass)."""
    tail = [hs[:, -1].clone() for hs in _layers_from(vlm, calls, start, recorded_input(calls, start))]
    return torch.cat([clean[:, :start + 1], torch.stack(tail, dim=1).to(clean.dtype)], dim=1)


def recorded_input(calls: dict[int, tuple], layer: int) -> torch.Tensor:
    """The hidden state decoder layer ``layer`` received in the pass :func:`_recorded_stream` recorded (kept
    only for the layers it was asked to keep): the clean output of layer ``layer - 1``."""
    args, kwargs = calls[layer]
    return args[0] if args else kwargs["hidden_states"]


def _layers_from(vlm, calls: dict[int, tuple], start: int, hs: torch.Tensor):
    """Decoder layers ``start ...`` called again from ``hs`` with their recorded arguments; yields each one's output."""
    layers = decoder_parts(vlm.model)["layers"]
    for i in range(start, len(layers)):
        args, kwargs = calls[i]
        out = layers[i](hs, *args[1:], **kwargs) if args else layers[i](**{**kwargs, "hidden_states": hs})
        hs = out[0] if isinstance(out, tuple) else out
        yield hs


def _resumed_last(vlm, calls: dict[int, tuple], start: int, hs: torch.Tensor) -> torch.Tensor:
    """The last decoder layer's output at the last position when layers ``start ...`` run again from ``hs``
    (an edited input of layer ``start``) with the arguments :func:`_recorded_stream` recorded."""
    for out in _layers_from(vlm, calls, start, hs):
        hs = out
    return hs[:, -1]


@torch.inference_mode()
def layer_logits_each(vlm, requests: Sequence[ScoreRequest], knockouts: Sequence[Knockout | None], *,
                      token_ids: Sequence[int] | None = None, spans: Sequence[dict] | None = None,
                      resume: bool = True) -> list[np.ndarray]:
    """:func:`layer_logits` under each of ``knockouts`` (``None``: none), one array per knockout.

    Each padded batch is encoded once (the processor's tokenising and image preprocessing) and run once
    per knockout; each pass is the forward :func:`layer_logits` would run alone on that batch, so the
    arrays are those of one :func:`layer_logits` call per knockout. With ``resume`` (the default), when
    ``knockouts`` hold ``None`` and knockouts that start past layer 0, the clean pass records each decoder
    layer's call and a knockout starting at layer ``s`` runs only layers ``s ...`` again from layer ``s``'s
    recorded input: its layers before ``s`` are the clean pass's, element for element (App. N's 21 start
    layers of MedGemma-27B's 62 then run 46 % fewer layers; a test holds the arrays to whole passes). The
    recorded inputs of the start layers stay in memory for the batch: ``batch_size`` x prompt length x
    hidden size each.
    """
    parts = decoder_parts(vlm.model)
    ids = list(token_ids) if token_ids is not None else [vlm.families.yes_id, vlm.families.no_id]
    ids_t = torch.tensor(ids, device=vlm.device)
    requests = list(requests)
    knockouts = list(knockouts)
    outs = [np.zeros((len(requests), len(parts["layers"]) + 1, len(ids)), dtype=np.float32) for _ in knockouts]
    todo = list(range(len(requests)))
    if knockouts == [None]:  # no knockout: each group's shared prefix runs once

        def store(rows, resid):
            outs[0][np.asarray(rows)] = _project(resid, parts, ids_t).float().cpu().numpy()

        todo = shared_prefix_streams(vlm, requests, store)
    starts = {min(k.layers) for k in knockouts if k is not None and k.layers}
    resumable = sorted(x for x in starts if x > 0) if resume and None in knockouts else []
    for sub in request_chunks(vlm, [requests[i] for i in todo]):
        chunk = [todo[i] for i in sub]
        batch = vlm._encode([vlm.render(requests[i]) for i in chunk], [requests[i].image for i in chunk])
        length = int(batch["input_ids"].shape[1])
        pads = (length - batch["attention_mask"].sum(dim=1)).tolist()
        chunk_spans = None
        clean = calls = None
        if resumable:  # the clean pass first, recording the layers' calls the knockouts resume from
            clean, calls = _recorded_stream(vlm, batch, resumable[0], set(resumable))
        for out, knockout in zip(outs, knockouts):
            if knockout is None:
                rows = _rows([{}] * len(chunk), None, pads)
            else:
                if chunk_spans is None:
                    chunk_spans = ([spans[i] for i in chunk] if spans is not None
                                   else [token_spans(vlm, requests[i]) for i in chunk])
                rows = _rows(chunk_spans, knockout, pads)
            start = min(knockout.layers) if knockout is not None and knockout.layers else 0
            if knockout is None and clean is not None:
                resid = clean
            elif calls is not None and start > 0:
                with knockout_hooks(vlm.model, knockout, rows, length=length):
                    resid = _resumed_stream(vlm, clean, calls, start)
            else:
                with knockout_hooks(vlm.model, knockout, rows, length=length):
                    resid = answer_stream(vlm, batch)  # (b, L + 1, d)
            out[np.asarray(chunk)] = _project(resid, parts, ids_t).float().cpu().numpy()
    return outs
