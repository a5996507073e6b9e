"""Gemma-3's attention masks for a forward pass over a whole prompt, built once instead of twice.

Gemma-3 (MedGemma, ``ref-vlm``, ``tiny-gemma3``) lets image tokens attend to each other both ways:
for every forward pass that carries ``token_type_ids`` it builds a full-attention mask (causal OR
same image block) and a sliding-window one (the same AND "within the window"). transformers 5
builds the second through ``torch.vmap`` over its mask functions, which on the CPU costs more than the
small models' whole forward pass (py-spy, App. N's demo records on ``ref-vlm``: 22 % of their time).

When no key is farther from its query than the window -- a pass over a prompt no longer than
``sliding_window`` with no cache before it, which is every prefill and whole-prompt pass of this
project's prompts (Gemma-3: 1,024 tokens; ``ref-vlm``: 512) -- the window excludes nothing, so the
sliding mask equals the full one element for element. :func:`forward_inputs` then builds the full mask
with transformers' own ``create_causal_mask`` (no vmap on that path) and hands the model both layer
types' masks, which the model uses as given. Anything else (another model, a longer prompt, a pass
after a cache, generation) is left to the model. A test holds the masks and logits to the model's own.

On the CPU the mask also goes in additive. Under ``sdpa`` the model's mask is boolean, and
``torch.nn.functional.scaled_dot_product_attention`` turns a boolean mask into an additive one (0 where
True, -inf where False) at every call, that is in every decoder layer: at 62 layers (the rehearsal's
MedGemma-27B stand-in) that conversion was a quarter of the logit lens's time (torch profiler,
``aten::where``). :func:`forward_inputs` makes the same additive mask once per pass, so every layer's
attention kernel receives exactly the tensor it would have made itself: the logits are identical
(tested; ``benchmarks/masks.py``). A knockout that edits the mask blocks with -inf there, as the boolean
False it replaces would have become (:func:`shovir_core.models.lens.knockout_hooks`). On an accelerator
the boolean mask is left as the model built it.
"""
from __future__ import annotations

__all__ = ["forward_inputs", "additive"]


def forward_inputs(model, inputs: dict) -> dict:
    """``inputs`` with ``attention_mask`` replaced by Gemma-3's per-layer-type masks where they coincide
    (see the module docstring); otherwise ``inputs`` itself."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "gemma3":
        return inputs
    types, mask2d = inputs.get("token_type_ids"), inputs.get("attention_mask")
    if types is None or mask2d is None or getattr(mask2d, "ndim", 0) != 2 or "cache" in inputs \
            or "past_key_values" in inputs:
        return inputs
    text = config.get_text_config()
    window = getattr(text, "sliding_window", None)
    if window is not None and mask2d.shape[1] > window:
        return inputs
    import torch
    from transformers.masking_utils import create_causal_mask
    from transformers.models.gemma3.modeling_gemma3 import get_block_sequence_ids_for_mask

    dtype = model.get_input_embeddings().weight.dtype
    shape_only = torch.empty((mask2d.shape[0], mask2d.shape[1], 0), dtype=dtype, device=mask2d.device)
    mask = create_causal_mask(config=text, inputs_embeds=shape_only, attention_mask=mask2d, cache=None,
                              position_ids=None,
                              block_sequence_ids=get_block_sequence_ids_for_mask(types, device=mask2d.device))
    if mask is not None and mask.dtype == torch.bool and mask.device.type == "cpu":
        mask = additive(mask, dtype)
    return {**inputs, "attention_mask": {"full_attention": mask, "sliding_attention": mask}}


def additive(mask, dtype):
    """The additive form of a boolean attention mask: 0 where a query may attend, -inf where it may not --
    what ``scaled_dot_product_attention`` makes of a boolean mask before its kernel runs.

    >>> import torch
    >>> additive(torch.tensor([[True, False]]), torch.float32)
    tensor([[0., -inf]])
    """
    import torch

    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), float("-inf"))
