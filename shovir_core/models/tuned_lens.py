"""Tuned lens: per-layer affine translators trained to match the final logits (ModaLens App. N.1, Table 34).

The tuned lens (Belrose et al., 2023, arXiv:2303.08112) replaces the logit lens's identity map
before the final norm and unembedding with one learnt affine map per layer,
``lens_l(h) = unembed(norm(A_l h + b_l))``, fitted so that ``lens_l`` matches the model's own
next-token distribution: the loss is the summed KL divergence ``KL(p_final || p_l)`` over layers and
token positions of a text corpus. ModaLens trained it on WikiText / WikiText-103 for MedGemma-27B
(appendix, tuned-lens training records) and reports in Table 34 that it scored below the logit lens
on both readout datasets. The demo trains it on the IU X-ray report extracts shipped in
``data/iu-reports/`` (:func:`corpus_texts`).

Why not the ``tuned-lens`` package (0.2.0, the current release): its model surgery
(``tuned_lens.model_surgery.get_final_norm``) recognises only OPT, GPT-NeoX, BLOOM, GPT-2/Neo/J and
Llama base models and raises ``NotImplementedError`` for Gemma-3 (MedGemma's class); its ``Unembed``
is the full ``lm_head`` without Gemma's final logit soft-capping; and it pulls in wandb, torchdata and
datasets. The translators are small, so they are written here:

* :class:`TunedLens` -- one ``torch.nn.Linear(d, d)`` per layer below the last (the embeddings and
  decoder layers ``0 .. L - 2``), **identity-initialised** (weight = I, bias = 0: the untrained tuned
  lens *is* the logit lens, exactly); the last layer needs none (its projection is the model's own
  readout);
* :func:`train_tuned_lens` -- Adam on the summed KL, batches drawn with a seeded
  ``numpy.random.Generator``, the frozen model run under ``torch.no_grad`` per batch (the corpus is
  never held in memory as activations); deterministic for a seed on the CPU;
* :func:`corpus_kl` -- per text and layer, the mean KL to the final distribution of the logit lens
  and of the tuned lens (the training objective, on held-out texts);
* :func:`answer_readouts` -- at the ModaLens answer position: per layer the projected readout-token
  logits of both lenses and their KL to the final distribution.

Memory: the KL needs the distribution over the vocabulary ``kl_ids`` (default: the full vocabulary,
as the paper's training does); every projection multiplies by the unembedding rows ``kl_ids`` only,
one layer at a time (in training each layer's backward runs before the next layer's forward: the
translators are independent), so memory is ``positions x len(kl_ids)`` for one batch and never
``layers x positions x vocabulary``; the final distribution's log-softmax is computed once per batch,
not once per layer. Readouts
(yes/no logits) use the two readout rows only (as :func:`shovir_core.models.lens.layer_logits`).
"""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch

from .lens import _project, decoder_parts
from .protocol import ScoreRequest

__all__ = ["TunedLens", "corpus_texts", "encode_corpus", "train_tuned_lens", "corpus_kl", "answer_readouts",
           "kl_to_final", "info_json", "wikitext_texts", "wikitext_file", "WIKITEXT_FILES"]


class TunedLens(torch.nn.Module):
    """Identity-initialised affine translators for layers ``0 .. n_layers - 1`` of a ``n_layers + 1``-entry lens.

    Entry ``l`` of the lens reads the residual after the embeddings (``l = 0``) or after decoder layer
    ``l - 1``; entries ``0 .. n_layers - 1`` get a translator, entry ``n_layers`` (the last layer's
    output) is the model's own readout and is left as it is.
    """

    def __init__(self, d_model: int, n_layers: int):
        super().__init__()
        if d_model < 1 or n_layers < 1:
            raise ValueError(f"TunedLens: need d_model >= 1 and n_layers >= 1, got {d_model}, {n_layers}")
        self.d_model, self.n_layers = int(d_model), int(n_layers)
        self.translators = torch.nn.ModuleList(torch.nn.Linear(d_model, d_model) for _ in range(n_layers))
        with torch.no_grad():
            for t in self.translators:
                t.weight.copy_(torch.eye(d_model))
                t.bias.zero_()

    @classmethod
    def for_model(cls, model) -> "TunedLens":
        parts = decoder_parts(model)
        return cls(int(parts["weight"].shape[1]), len(parts["layers"]))

    def translate(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """``A_layer h + b_layer`` (identity for the last entry ``layer == n_layers``)."""
        if layer == self.n_layers:
            return h
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"TunedLens.translate: layer {layer} outside 0..{self.n_layers}")
        t = self.translators[layer]
        return torch.nn.functional.linear(h.to(t.weight.dtype), t.weight, t.bias).to(h.dtype)

    def sha256(self) -> str:
        """SHA-256 of the translators' parameters (float32 bytes, in order)."""
        h = hashlib.sha256()
        for p in self.state_dict().values():
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


WIKITEXT_FILES = {"train": ("wiki.train.tokens", "wiki.train.raw"), "valid": ("wiki.valid.tokens", "wiki.valid.raw"),
                  "test": ("wiki.test.tokens", "wiki.test.raw")}
"""The files of a WikiText-103 split in its released format (``wikitext-103`` or ``wikitext-103-raw``)."""

_WIKI_JOINS = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}


def wikitext_file(path, *, split: str = "train"):
    """The file of ``split`` of a local WikiText-103 copy: ``path`` itself when it is a file, else
    ``path/wiki.<split>.tokens`` (or ``.raw``)."""
    from pathlib import Path

    path = Path(path)
    if path.is_file():
        return path
    for name in WIKITEXT_FILES[split]:
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(f"wikitext: {path} holds none of {list(WIKITEXT_FILES[split])} (the released "
                            "WikiText-103 format, Merity et al. 2016)")


def wikitext_texts(path, *, split: str = "train") -> list[str]:
    r"""The paragraphs of a local WikiText-103 split (the tuned lens's corpus in ModaLens App. N.1, Table 34).

    The released format has one paragraph per line, `` = Title = `` heading lines (``= = Section = =``
    deeper) and blank lines between; headings and blank lines are dropped and the tokenised joins
    ``@-@``, ``@,@``, ``@.@`` are undone. ``<unk>`` stays as it is.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "wiki.train.tokens").write_text(" \n = Valkyria = \n \n It is a 3 @,@ 000 @-@ year game . \n")
    >>> wikitext_texts(d)
    ['It is a 3,000-year game .']
    """
    lines = wikitext_file(path, split=split).read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        text = line.strip()
        if not text or (text.startswith("=") and text.endswith("=")):
            continue
        text = " ".join(text.split())
        for k, v in _WIKI_JOINS.items():
            text = text.replace(k, v)
        out.append(text)
    return out


def corpus_texts(source: str = "iu-reports", *, path=None) -> list[str]:
    """The tuned lens's text corpus.

    ``"iu-reports"`` (the demo's, shipped in ``data/iu-reports/``): the findings + impression text of
    every IU X-ray report (id order); ``"wikitext-103"`` (the paper's, ModaLens App. N.1): the training
    paragraphs of a local WikiText-103 copy at ``path`` (:func:`wikitext_texts`).
    """
    if source == "wikitext-103":
        if path is None:
            raise ValueError("corpus_texts: the wikitext-103 corpus needs path (a local WikiText-103 copy)")
        return wikitext_texts(path, split="train")
    if source != "iu-reports":
        raise ValueError(f"corpus_texts: unknown corpus {source!r}; 'iu-reports' or 'wikitext-103'")
    from ..data.iu import load_iu_reports

    df = load_iu_reports().sort_values("id")
    out = []
    for f, i in zip(df["findings"], df["impression"]):
        text = " ".join(str(x).strip() for x in (f, i) if isinstance(x, str) and x.strip())
        if text:
            out.append(text)
    return out


def encode_corpus(tokenizer, texts: Sequence[str], *, max_tokens: int) -> list[list[int]]:
    """Token ids of each text (no special tokens), cut to ``max_tokens``; texts shorter than 2 tokens dropped."""
    if max_tokens < 2:
        raise ValueError(f"encode_corpus: max_tokens must be >= 2, got {max_tokens}")
    out = []
    for t in texts:
        ids = tokenizer(t, add_special_tokens=False)["input_ids"][:max_tokens]
        if len(ids) >= 2:
            out.append(list(ids))
    return out


def _pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):  # right padding: causal attention never sees the pads of real positions
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def _text_residuals(model, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Residuals ``[(b, T, d)] * (n_layers + 1)`` of a text-only forward (entry 0: embeddings)."""
    parts = decoder_parts(model)
    captured: list[torch.Tensor] = []

    def pre(module, args, kwargs):
        captured.append(kwargs.get("hidden_states", args[0] if args else None).detach())

    def post(module, args, output):
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    handles = [parts["layers"][0].register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [layer.register_forward_hook(post) for layer in parts["layers"]]
    try:
        model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    return captured


def kl_to_final(final_logits: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    """``KL(softmax(final) || softmax(lens))`` over the last axis (nats), computed in float32."""
    return _kl(_final_dist(final_logits), lens_logits)


def _final_dist(final_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p, p)`` of the final distribution, computed once for all the layers compared with it."""
    lp = torch.log_softmax(final_logits.float(), dim=-1)
    return lp, lp.exp()


def _kl(final: tuple[torch.Tensor, torch.Tensor], lens_logits: torch.Tensor) -> torch.Tensor:
    """:func:`kl_to_final` from the final distribution's ``(log p, p)`` (the same operations, the same values)."""
    lp, p = final
    lq = torch.log_softmax(lens_logits.float(), dim=-1)
    return (p * (lp - lq)).sum(-1)


@contextmanager
def _frozen(model):
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, f in zip(model.parameters(), flags):
            p.requires_grad_(f)


def _kl_ids(model, kl_ids: Sequence[int] | None) -> torch.Tensor:
    parts = decoder_parts(model)
    device = parts["weight"].device
    if kl_ids is None:
        return torch.arange(parts["weight"].shape[0], device=device)
    ids = torch.as_tensor(list(kl_ids), dtype=torch.long, device=device)
    if ids.numel() < 2 or int(ids.min()) < 0 or int(ids.max()) >= parts["weight"].shape[0]:
        raise ValueError(f"kl_ids: need >= 2 ids in 0..{parts['weight'].shape[0] - 1}")
    return ids


def train_tuned_lens(model, tokenizer, texts: Sequence[str], *, steps: int, seed: int, batch_texts: int = 16,
                     max_tokens: int = 64, lr: float = 1e-3, kl_ids: Sequence[int] | None = None,
                     lens: TunedLens | None = None) -> tuple[TunedLens, dict]:
    """Fit the translators of a :class:`TunedLens` to ``model`` on ``texts``; returns ``(lens, info)``.

    The loss of a step is ``sum_l mean_positions KL(p_final || p_l)`` over the lens entries
    ``l = 0 .. n_layers - 1`` on ``batch_texts`` texts drawn (without replacement within a step) by
    ``numpy.random.default_rng(seed)``; ``kl_ids`` restricts the distributions to those vocabulary
    rows (default: the full vocabulary). ``info`` holds the per-step loss, the settings and the
    translators' SHA-256. The model's own parameters are never changed.
    """
    if steps < 0:
        raise ValueError(f"train_tuned_lens: steps must be >= 0, got {steps}")
    parts = decoder_parts(model)
    device = parts["weight"].device
    seqs = encode_corpus(tokenizer, texts, max_tokens=max_tokens)
    if not seqs:
        raise ValueError("train_tuned_lens: no text of the corpus has 2 or more tokens")
    lens = lens if lens is not None else TunedLens.for_model(model)
    lens.to(device=device, dtype=torch.float32).train()
    ids_t = _kl_ids(model, kl_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rng = np.random.default_rng(int(seed))
    opt = torch.optim.Adam(lens.parameters(), lr=float(lr))
    history = []
    with _frozen(model):
        for _ in range(int(steps)):
            pick = rng.choice(len(seqs), size=min(batch_texts, len(seqs)), replace=False)
            ids, mask = _pad([seqs[i] for i in pick], pad, device)
            resid = _text_residuals(model, ids, mask)
            keep = mask.bool()
            with torch.no_grad():
                final = _final_dist(_project(resid[-1][keep], parts, ids_t))
            opt.zero_grad()
            total = 0.0
            for layer in range(lens.n_layers):  # each translator's loss is separate: backward layer by layer
                h = lens.translate(resid[layer][keep], layer)
                loss = _kl(final, _project(h, parts, ids_t)).mean()
                loss.backward()
                total += float(loss.detach())
            opt.step()
            history.append(total)
    lens.eval()
    info = {"steps": int(steps), "seed": int(seed), "batch_texts": int(batch_texts), "max_tokens": int(max_tokens),
            "lr": float(lr), "n_texts": len(seqs), "kl_vocab": int(ids_t.numel()), "loss": history,
            "sha256": lens.sha256()}
    return lens, info


@torch.no_grad()
def corpus_kl(model, tokenizer, texts: Sequence[str], lens: TunedLens, *, max_tokens: int = 64,
              batch_texts: int = 16, kl_ids: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Per text and lens entry the mean KL to the final distribution: ``{"logit": (n, L+1), "tuned": (n, L+1)}``.

    The last entry (the model's own readout) is 0 for both lenses. Texts with fewer than 2 tokens are
    dropped (as in training); ``n`` counts the texts kept.
    """
    parts = decoder_parts(model)
    device = parts["weight"].device
    ids_t = _kl_ids(model, kl_ids)
    seqs = encode_corpus(tokenizer, texts, max_tokens=max_tokens)
    n_entries = len(parts["layers"]) + 1
    out = {"logit": np.zeros((len(seqs), n_entries)), "tuned": np.zeros((len(seqs), n_entries))}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(seqs), batch_texts):
        chunk = seqs[start:start + batch_texts]
        ids, mask = _pad(chunk, pad, device)
        resid = _text_residuals(model, ids, mask)
        m = mask.float()
        final = _final_dist(_project(resid[-1], parts, ids_t))
        for layer in range(n_entries - 1):
            for name, h in (("logit", resid[layer]), ("tuned", lens.translate(resid[layer], layer))):
                kl = _kl(final, _project(h, parts, ids_t))
                out[name][start:start + len(chunk), layer] = ((kl * m).sum(1) / m.sum(1)).cpu().numpy()
    return out


def answer_readouts(vlm, requests: Sequence[ScoreRequest], lens: TunedLens, *, token_ids: Sequence[int] | None = None,
                    kl_ids: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Logit and tuned lens at the ModaLens answer position.

    Returns ``logit``, ``tuned`` (``(n, L+1, len(token_ids))`` projected readout logits, default the
    lowercase yes/no ids; the last entry is the model's own logits for both) and ``kl_logit``,
    ``kl_tuned`` (``(n, L+1)`` KL to the final distribution over ``kl_ids``, default the full vocabulary).
    """
    from .residuals import answer_residuals

    parts = decoder_parts(vlm.model)
    device = parts["weight"].device
    ids = list(token_ids) if token_ids is not None else [vlm.families.yes_id, vlm.families.no_id]
    ids_t = torch.tensor(ids, device=device)
    kl_t = _kl_ids(vlm.model, kl_ids)
    resid = answer_residuals(vlm, requests).to(device=device, dtype=parts["weight"].dtype)
    n, n_entries = resid.shape[0], resid.shape[1]
    out = {k: np.zeros((n, n_entries, len(ids)), dtype=np.float32) for k in ("logit", "tuned")}
    out.update({k: np.zeros((n, n_entries), dtype=np.float32) for k in ("kl_logit", "kl_tuned")})
    with torch.no_grad():
        final = _final_dist(_project(resid[:, -1], parts, kl_t))
        for layer in range(n_entries):
            for name, h in (("logit", resid[:, layer]), ("tuned", lens.translate(resid[:, layer], layer))):
                out[name][:, layer] = _project(h, parts, ids_t).float().cpu().numpy()
                out[f"kl_{name}"][:, layer] = _kl(final, _project(h, parts, kl_t)).cpu().numpy()
    return out


def info_json(info: dict) -> str:
    """A training ``info`` dict as compact JSON (losses rounded to 6 significant digits)."""
    return json.dumps({**info, "loss": [float(f"{x:.6g}") for x in info["loss"]]}, sort_keys=True)
