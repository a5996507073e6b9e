"""Tiny random checkpoints saved to disk with ``save_pretrained``, for the ``hf-auto`` adapter's tests.

``save_registry_family(name, root)``: a registry tiny model (``shovir_core.models.tiny``) written to a
folder, as a user's checkpoint would be. ``build_idefics3`` and ``build_paligemma``: two families the
registry does not name (Idefics3/SmolVLM and PaliGemma), built here from their public configs with a
locally trained byte-level BPE tokenizer; the package has no code for them. Each is a few hundred
kilobytes and builds in well under a second.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["save_registry_family", "build_idefics3", "build_paligemma", "UNNAMED_FAMILIES", "catalogue_yaml",
           "PALIGEMMA_TEMPLATE", "IDEFICS3_TEMPLATE"]


def _bpe(specials: list[str], *, vocab_size: int = 600):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from shovir_core.models.tiny import tokenizer_corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(tokenizer_corpus(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _randomise(model, seed: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)


def save_registry_family(name: str, root) -> Path:
    """A registry tiny model (``tiny-gemma3``, ``tiny-qwen2vl``, ...) saved with ``save_pretrained``."""
    from shovir_core.models.tiny import tiny_model_and_processor

    path = Path(root) / name
    model, processor, _ = tiny_model_and_processor(name, seed=1)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>"
    "{% else %} {{ item['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""SmolVLM's chat-template shape (``User:<image> text<end_of_utterance>\\nAssistant:``)."""


def build_idefics3(root) -> Path:
    """A tiny ``Idefics3ForConditionalGeneration`` (SigLIP-style tower + Llama, pixel shuffle) on disk."""
    import torch
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessorPil,
                              Idefics3Processor, PreTrainedTokenizerFast)

    path = Path(root) / "tiny-idefics3"
    specials = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
                "<global-img>"]
    tok = PreTrainedTokenizerFast(tokenizer_object=_bpe(specials), bos_token="<|im_start|>",
                                  eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
                                  extra_special_tokens={"image_token": "<image>",
                                                        "fake_image_token": "<fake_token_around_image>",
                                                        "global_image_token": "<global-img>",
                                                        "end_of_utterance_token": "<end_of_utterance>"})
    ids = tok.convert_tokens_to_ids
    ip = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": 32},
                                   max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(ip, tok, chat_template=IDEFICS3_TEMPLATE, image_seq_len=4)
    config = Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, pad_token_id=ids("<|endoftext|>"),
                         bos_token_id=ids("<|im_start|>"), eos_token_id=ids("<end_of_utterance>")),
        scale_factor=2, image_token_id=ids("<image>"), pad_token_id=ids("<|endoftext|>"))
    with torch.random.fork_rng(devices=[]):
        model = Idefics3ForConditionalGeneration(config)
    _randomise(model, 11)
    model.generation_config.eos_token_id = ids("<end_of_utterance>")
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


PALIGEMMA_TEMPLATE = (
    "{% for message in messages %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>"
    "{% endif %}{% endfor %}{% for item in message['content'] %}{% if item['type'] == 'text' %}"
    "{{ item['text'] }}{% endif %}{% endfor %}{% endfor %}"
)
"""A chat template for PaliGemma (whose checkpoints carry none): images first, then the text; the
processor adds ``<bos>`` after the image tokens and a newline at the end."""


def build_paligemma(root) -> Path:
    """A tiny ``PaliGemmaForConditionalGeneration`` (SigLIP + Gemma) on disk, without a chat template
    (the test catalogue declares one)."""
    import torch
    from transformers import (PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor,
                              PreTrainedTokenizerFast, SiglipImageProcessorPil)

    path = Path(root) / "tiny-paligemma"
    specials = ["<pad>", "<eos>", "<bos>", "<image>"]
    tok = PreTrainedTokenizerFast(tokenizer_object=_bpe(specials), bos_token="<bos>", eos_token="<eos>",
                                  pad_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    ip = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    ip.image_seq_length = 16
    processor = PaliGemmaProcessor(ip, tok)  # adds PaliGemma's <loc>/<seg> tokens
    ids = processor.tokenizer.convert_tokens_to_ids
    config = PaliGemmaConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8,
                           projection_dim=32),
        text_config=dict(model_type="gemma", vocab_size=len(processor.tokenizer), hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                         head_dim=8, max_position_embeddings=1024, pad_token_id=ids("<pad>"),
                         bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>")),
        image_token_index=ids("<image>"), projection_dim=32, pad_token_id=ids("<pad>"))
    with torch.random.fork_rng(devices=[]):
        model = PaliGemmaForConditionalGeneration(config)
    _randomise(model, 12)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


UNNAMED_FAMILIES = {"tiny-idefics3": build_idefics3, "tiny-paligemma": build_paligemma}
"""Families the registry does not name -> their builders."""


def catalogue_yaml(entries: dict[str, dict]) -> str:
    """A catalogue file's text for ``{name: entry}``."""
    import yaml

    return yaml.safe_dump({"models": entries}, sort_keys=False)
