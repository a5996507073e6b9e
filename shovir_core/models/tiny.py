"""Tiny random-weight vision-language models built offline, for tests and benchmarks.

Three architectures the real models use, each with a locally trained byte-level BPE tokenizer,
a chat template shaped like the real one and the architecture's PIL image processor:

``tiny-gemma3``   ``Gemma3ForConditionalGeneration`` (SigLIP + Gemma3; MedGemma's class),
                  Gemma turn markers, ``<start_of_image>`` expanded to ``image_tokens`` soft tokens
``tiny-llava``    ``LlavaForConditionalGeneration`` (CLIP + Mistral), Mistral ``[INST] ... [/INST]``
``tiny-qwen2vl``  ``Qwen2VLForConditionalGeneration``, ChatML with vision start/end markers
``tiny-nvreason`` ``Qwen2_5_VLForConditionalGeneration`` (windowed-attention vision tower with full-attention
                  blocks, MRoPE text model): the class of NV-Reason-CXR-3B (a Qwen2.5-VL-3B fine-tune),
                  ChatML with Qwen2.5-VL's default system turn ("You are a helpful assistant.") and its
                  vision markers; the tokenizer also knows NV-Reason's ``<think>`` / ``<answer>`` tags as text
``tiny-llava-next`` ``LlavaNextForConditionalGeneration`` (CLIP + Mistral; LLaVA-NeXT-Mistral-7B's class),
                  anyres tiling over its ``image_grid_pinpoints`` (the image-token count depends on
                  the image's size), Mistral ``[INST] ... [/INST]``
``tiny-qwen3.5``  ``Qwen3_5ForConditionalGeneration`` (Qwen3.5-9B/27B's class: gated-delta-net linear
                  attention layers interleaved with full attention, 3 : 1), ChatML, ``<think>`` markers
                  (thinking disabled through the template, as the registry's Qwen3.5 entries do) and the
                  Qwen2-VL image processor with its pixel cap (``max_pixels``)
``tiny-llava-1.5`` ``LlavaForConditionalGeneration`` (CLIP + Llama; LLaVA-1.5-7B's class), Vicuna-style
                  ``USER: ... ASSISTANT:`` template

Weights are drawn from a seeded ``torch.Generator`` (no global seeding; the construction-time
initialisation runs under ``torch.random.fork_rng`` so the global state is left untouched). Norm
weights keep their constant initialisation. Building one takes well under a second on a CPU.

The chat templates render content blocks in the order given (an image block becomes the model's
image placeholder), no default system prompt; a system turn (report prompts) is folded into the
first user turn for Gemma and Mistral, as their real templates do.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

from ..labels import CHEXPERT_CLASSES
from .prompts import FRAMINGS, INSTRUCTIONS
from .spec import ModelSpec

__all__ = ["build_tiny", "tiny_model_and_processor", "TINY_TEMPLATES", "tokenizer_corpus", "TINY_NAMES",
           "TINY_SPECS"]

TINY_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("tiny-gemma3", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              notes="random Gemma3ForConditionalGeneration, local BPE tokenizer and Gemma-style template"),
    ModelSpec("tiny-llava", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              notes="random LlavaForConditionalGeneration (CLIP + Mistral), Mistral [INST] template"),
    ModelSpec("tiny-nvreason", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              report_user="Find abnormalities and support devices.",
              notes="random Qwen2_5_VLForConditionalGeneration (NV-Reason-CXR-3B's class), one user turn "
                    "[image, text], Qwen2.5-VL default system turn; the report is the decoded continuation with "
                    "special tokens dropped and the reasoning text kept (as the authors' wrapper)"),
    ModelSpec("tiny-qwen2vl", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              notes="random Qwen2VLForConditionalGeneration, ChatML template"),
    ModelSpec("tiny-llava-next", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              notes="random LlavaNextForConditionalGeneration (CLIP + Mistral, anyres tiling), Mistral [INST] template"),
    ModelSpec("tiny-qwen3.5", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              chat_template_kwargs={"enable_thinking": False}, processor_kwargs={"max_pixels": 64 * 64},
              notes="random Qwen3_5ForConditionalGeneration (linear + full attention), ChatML, thinking disabled, "
                    "images capped at 64 x 64 px (16 merged tokens)"),
    ModelSpec("tiny-llava-1.5", "tiny", paper="test", dtype="float32", max_new_tokens=16,
              notes="random LlavaForConditionalGeneration (CLIP + Llama), USER/ASSISTANT template"),
)
"""The registry entries of the tiny models (:data:`shovir_core.models.REGISTRY` includes them)."""

TINY_NAMES = tuple(s.name for s in TINY_SPECS)

_SPECIALS = {
    "tiny-gemma3": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                    "<end_of_image>", "<image_soft_token>"],
    "tiny-llava": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<image>", "<pad>"],
    "tiny-qwen2vl": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                     "<|image_pad|>", "<|video_pad|>"],
    "tiny-llava-next": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<image>", "<pad>"],
    "tiny-qwen3.5": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                     "<|image_pad|>", "<|video_pad|>", "<think>", "</think>"],
    "tiny-llava-1.5": ["<unk>", "<s>", "</s>", "<image>", "<pad>"],
    "tiny-nvreason": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                      "<|image_pad|>", "<|video_pad|>"],
}

_SYSTEM_FOLD = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
)


def _content(image: str) -> str:
    return (
        "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
        "{%- else -%}{%- for item in message['content'] -%}"
        "{%- if item['type'] == 'image' -%}{{ '" + image + "' }}"
        "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}"
    )


TINY_TEMPLATES: dict[str, str] = {
    "tiny-gemma3": (
        "{{ bos_token }}" + _SYSTEM_FOLD +
        "{%- for message in loop_messages -%}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
        "{{ '<start_of_turn>' + role + '\\n' }}{%- if loop.first -%}{{ first_prefix }}{%- endif -%}"
        + _content("<start_of_image>") +
        "{{ '<end_of_turn>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
    ),
    "tiny-llava": (
        "{{ bos_token }}" + _SYSTEM_FOLD +
        "{%- for message in loop_messages -%}"
        "{%- if message['role'] == 'user' -%}{{ '[INST] ' }}{%- if loop.first -%}{{ first_prefix }}{%- endif -%}"
        + _content("<image>\\n") + "{{ ' [/INST]' }}"
        "{%- else -%}{{ ' ' }}" + _content("") + "{{ eos_token }}{%- endif -%}"
        "{%- endfor -%}"
    ),
    "tiny-qwen2vl": (
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        + _content("<|vision_start|><|image_pad|><|vision_end|>") +
        "{{ '<|im_end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    ),
    "tiny-qwen3.5": (
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        + _content("<|vision_start|><|image_pad|><|vision_end|>") +
        "{{ '<|im_end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}"
        "{%- else -%}{{ '<think>\\n' }}{%- endif -%}{%- endif -%}"
    ),
    "tiny-llava-1.5": (
        "{{ bos_token }}" + _SYSTEM_FOLD +
        "{%- for message in loop_messages -%}"
        "{%- if message['role'] == 'user' -%}{{ 'USER: ' }}{%- if loop.first -%}{{ first_prefix }}{%- endif -%}"
        + _content("<image>\\n") + "{{ ' ' }}"
        "{%- else -%}{{ 'ASSISTANT: ' }}" + _content("") + "{{ eos_token }}{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
    ),
    "tiny-nvreason": (
        "{%- if messages[0]['role'] != 'system' -%}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif -%}"
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        + _content("<|vision_start|><|image_pad|><|vision_end|>") +
        "{{ '<|im_end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    ),
}
TINY_TEMPLATES["tiny-llava-next"] = TINY_TEMPLATES["tiny-llava"]  # llava-v1.6-mistral uses Mistral's [INST] turns
"""Jinja chat templates of the tiny models."""

_NVREASON_LINES = ["Find abnormalities and support devices.", "You are a helpful assistant.",
                   "<think> Step by step. </think> <answer> There is cardiomegaly. </answer>"] * 5
"""Extra tokenizer text of ``tiny-nvreason`` (its prompt, default system turn and reasoning tags)."""


def tokenizer_corpus() -> list[str]:
    """The fixed text the tiny tokenizers are trained on (prompts, questions, report phrases)."""
    lines = []
    for finding in CHEXPERT_CLASSES:
        lines += [f"Does this chest X-ray show {finding}?", f"Is {finding} present on this chest X-ray?",
                  f"There is {finding.lower()}.", f"No {finding.lower()}."]
    lines += [s for s in INSTRUCTIONS.values() if s] + list(FRAMINGS.values())
    lines += ["Is any acute cardiopulmonary finding present on this chest X-ray?",
              "Findings: No acute cardiopulmonary abnormality.", "Report: ", "Question: ",
              "Describe this X-ray.", "Analyze this image.", "Based on the provided report,"]
    lines += ["Yes. No. yes no Uncertain", " yes yes Yes Yes no no No No", "Yes\nNo\nyes\nno"] * 20
    return lines


@lru_cache(maxsize=None)
def _tokenizer_json(name: str, vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=_SPECIALS[name], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(tokenizer_corpus() + (_NVREASON_LINES if name == "tiny-nvreason" else []), trainer)
    return tok.to_str()


def _tokenizer(name: str, vocab_size: int = 640):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    obj = Tokenizer.from_str(_tokenizer_json(name, vocab_size))
    if name == "tiny-gemma3":
        kw = dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                  extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                        "image_token": "<image_soft_token>"})
    elif name in ("tiny-llava", "tiny-llava-next", "tiny-llava-1.5"):
        kw = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                  extra_special_tokens={"image_token": "<image>"})
    else:  # tiny-qwen2vl, tiny-nvreason
        kw = dict(eos_token="<|im_end|>", pad_token="<|endoftext|>",
                  extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                                        "vision_start_token": "<|vision_start|>",
                                        "vision_end_token": "<|vision_end|>"})
    tok = PreTrainedTokenizerFast(tokenizer_object=obj, padding_side="left", **kw)
    tok.chat_template = TINY_TEMPLATES[name]
    return tok


def _gemma_vision(side: int, dims: dict | None) -> tuple[int, int]:
    """(image size, patch size) of the tiny Gemma3 vision tower: ``side`` x ``side`` pooled tokens."""
    dims = dims or {}
    size = int(dims.get("image_size", max(32, 4 * side)))
    patch = int(dims.get("patch_size", size // side))
    if size % patch or (size // patch) % side:
        raise ValueError(f"tiny-gemma3: image_size {size} / patch_size {patch} does not pool to {side} x {side} tokens")
    return size, patch


def _processor(name: str, tok, *, image_tokens: int, dims: dict | None = None):
    side = int(round(image_tokens ** 0.5))
    if side * side != image_tokens:
        raise ValueError(f"{name}: image_tokens must be a square number, got {image_tokens}")
    if name == "tiny-gemma3":
        from transformers import Gemma3ImageProcessorPil, Gemma3Processor

        size = _gemma_vision(side, dims)[0]
        ip = Gemma3ImageProcessorPil(size={"height": size, "width": size}, do_pan_and_scan=False)
        return Gemma3Processor(ip, tok, chat_template=tok.chat_template, image_seq_length=image_tokens)
    if name == "tiny-llava-next":
        from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor

        base = 8 * side
        ip = LlavaNextImageProcessorPil(size={"shortest_edge": base}, crop_size={"height": base, "width": base},
                                        image_grid_pinpoints=_llava_next_pinpoints(base))
        return LlavaNextProcessor(ip, tok, patch_size=8, vision_feature_select_strategy="default",
                                  chat_template=tok.chat_template, num_additional_image_tokens=1)
    if name == "tiny-qwen3.5":
        from transformers import Qwen2VLImageProcessorPil

        px = (16 * side) ** 2  # the pixel cap: 16 merged 8-px patches of 2 x 2 = side x side tokens
        ip = Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2, min_pixels=px, max_pixels=px)
        return _image_only_qwen3vl_processor()(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template)
    if name in ("tiny-llava", "tiny-llava-1.5"):
        from transformers import LlavaImageProcessorPil, LlavaProcessor

        ip = LlavaImageProcessorPil(size={"shortest_edge": 8 * side}, crop_size={"height": 8 * side, "width": 8 * side})
        return LlavaProcessor(ip, tok, patch_size=8, vision_feature_select_strategy="default",
                              chat_template=tok.chat_template, num_additional_image_tokens=1)
    from transformers import Qwen2VLImageProcessorPil

    px = (16 * side) ** 2
    ip = Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2, min_pixels=px, max_pixels=px)
    cls = _image_only_qwen2vl_processor("qwen2_5_vl" if name == "tiny-nvreason" else "qwen2_vl")
    return cls(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template)


def _llava_next_pinpoints(base: int) -> list[list[int]]:
    """Anyres grid of the tiny LLaVA-NeXT: 1x2, 2x1 and 2x2 tiles of the base crop (the real model's
    grid is the same shape at 336 px: [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]])."""
    return [[base, 2 * base], [2 * base, base], [2 * base, 2 * base]]


@lru_cache(maxsize=1)
def _image_only_qwen3vl_processor():
    """``Qwen3VLProcessor`` (Qwen3.5's processor class) without its video processor (needs torchvision)."""
    from transformers import Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = tokenizer.image_token
            self.video_token = tokenizer.video_token
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
            self.vision_start_token, self.vision_end_token = tokenizer.vision_start_token, tokenizer.vision_end_token
            self.vision_start_token_id = tokenizer.convert_tokens_to_ids(self.vision_start_token)
            self.vision_end_token_id = tokenizer.convert_tokens_to_ids(self.vision_end_token)

    return ImageOnlyQwen3VLProcessor


@lru_cache(maxsize=None)
def _image_only_qwen2vl_processor(kind: str = "qwen2_vl"):
    """``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` without a video processor (it needs torchvision, absent here)."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    base = Qwen2_5_VLProcessor if kind == "qwen2_5_vl" else Qwen2VLProcessor

    class ImageOnlyQwen2VLProcessor(base):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = tokenizer.image_token
            self.video_token = tokenizer.video_token
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnlyQwen2VLProcessor


def _config(name: str, tok, *, image_tokens: int, dims: dict | None):
    side = int(round(image_tokens ** 0.5))
    ids = tok.convert_tokens_to_ids
    d = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128, "vocab": len(tok)}
    d.update(dims or {})
    head_dim = int(d.get("head_dim", d["hidden"] // d["heads"]))
    if name == "tiny-gemma3":
        from transformers import Gemma3Config

        size, patch = _gemma_vision(side, dims)
        return Gemma3Config(
            text_config=dict(vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["intermediate"],
                             num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                             num_key_value_heads=d["kv_heads"], head_dim=head_dim, query_pre_attn_scalar=head_dim,
                             max_position_embeddings=4096, sliding_window=d.get("sliding_window", 512),
                             layer_types=d.get("layer_types", ["sliding_attention", "full_attention"] * (d["layers"] // 2)
                                               + ["sliding_attention"] * (d["layers"] % 2)),
                             pad_token_id=ids("<pad>"), bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>")),
            vision_config=dict(hidden_size=d.get("vision_hidden", 32), intermediate_size=d.get("vision_intermediate", 64),
                               num_hidden_layers=d.get("vision_layers", 2), num_attention_heads=d.get("vision_heads", 2),
                               image_size=size, patch_size=patch),
            mm_tokens_per_image=image_tokens, boi_token_id=ids("<start_of_image>"), eoi_token_id=ids("<end_of_image>"),
            image_token_id=ids("<image_soft_token>"), pad_token_id=ids("<pad>"), bos_token_id=ids("<bos>"),
            eos_token_id=ids("<eos>"),
        )
    if name == "tiny-llava-next":
        from transformers import LlavaNextConfig

        return LlavaNextConfig(
            vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, image_size=8 * side, patch_size=8, projection_dim=32),
            text_config=dict(model_type="mistral", vocab_size=d["vocab"], hidden_size=d["hidden"],
                             intermediate_size=d["intermediate"], num_hidden_layers=d["layers"],
                             num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=head_dim,
                             max_position_embeddings=4096, sliding_window=None,
                             pad_token_id=ids("<pad>"), bos_token_id=ids("<s>"), eos_token_id=ids("</s>")),
            image_token_id=ids("<image>"), vision_feature_layer=-1, vision_feature_select_strategy="default",
            image_grid_pinpoints=_llava_next_pinpoints(8 * side), pad_token_id=ids("<pad>"),
        )
    if name == "tiny-llava-1.5":
        from transformers import LlavaConfig

        return LlavaConfig(
            vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, image_size=8 * side, patch_size=8, projection_dim=32),
            text_config=dict(model_type="llama", vocab_size=d["vocab"], hidden_size=d["hidden"],
                             intermediate_size=d["intermediate"], num_hidden_layers=d["layers"],
                             num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=head_dim,
                             max_position_embeddings=4096,
                             pad_token_id=ids("<pad>"), bos_token_id=ids("<s>"), eos_token_id=ids("</s>")),
            image_token_id=ids("<image>"), vision_feature_layer=-2, vision_feature_select_strategy="default",
            pad_token_id=ids("<pad>"),
        )
    if name == "tiny-qwen3.5":
        from transformers import Qwen3_5Config

        qd = 32  # head_dim; partial rotary 0.25 -> 8 rotary dims, mrope sections (t, h, w) of 4 pairs
        return Qwen3_5Config(
            text_config=dict(vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["intermediate"],
                             num_hidden_layers=max(4, d["layers"]), num_attention_heads=d["heads"],
                             num_key_value_heads=d["kv_heads"], head_dim=qd, linear_key_head_dim=16,
                             linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                             max_position_embeddings=4096,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                              "mrope_interleaved": True, "partial_rotary_factor": 0.25},
                             pad_token_id=ids("<|endoftext|>"), bos_token_id=None, eos_token_id=ids("<|im_end|>")),
            vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=d["hidden"],
                               num_position_embeddings=64),
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        )
    if name == "tiny-llava":
        from transformers import LlavaConfig

        return LlavaConfig(
            vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, image_size=8 * side, patch_size=8, projection_dim=32),
            text_config=dict(model_type="mistral", vocab_size=d["vocab"], hidden_size=d["hidden"],
                             intermediate_size=d["intermediate"], num_hidden_layers=d["layers"],
                             num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=head_dim,
                             max_position_embeddings=4096, sliding_window=None,
                             pad_token_id=ids("<pad>"), bos_token_id=ids("<s>"), eos_token_id=ids("</s>")),
            image_token_id=ids("<image>"), vision_feature_layer=-1, vision_feature_select_strategy="default",
            pad_token_id=ids("<pad>"),
        )
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    half = head_dim // 2
    section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]  # [2, 3, 3] for head_dim 16
    if name == "tiny-nvreason":
        return Qwen2_5_VLConfig(
            text_config=dict(vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["intermediate"],
                             num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                             num_key_value_heads=d["kv_heads"], max_position_embeddings=4096,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
                             pad_token_id=ids("<|endoftext|>"), bos_token_id=None, eos_token_id=ids("<|im_end|>")),
            vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                               spatial_merge_size=2, temporal_patch_size=2, window_size=32, out_hidden_size=d["hidden"],
                               fullatt_block_indexes=[1], in_channels=3),
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        )
    return Qwen2VLConfig(
        text_config=dict(vocab_size=d["vocab"], hidden_size=d["hidden"], intermediate_size=d["intermediate"],
                         num_hidden_layers=d["layers"], num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"],
                         max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                        "mrope_section": section},
                         pad_token_id=ids("<|endoftext|>"), bos_token_id=None, eos_token_id=ids("<|im_end|>")),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=d["hidden"], num_heads=2, patch_size=8,
                           spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )


def _randomise(model, *, seed: int, std: float) -> None:
    import torch

    gens: dict = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                continue
            dev = param.device
            if dev not in gens:
                gens[dev] = torch.Generator(device=dev).manual_seed(seed)
            param.copy_(torch.randn(param.shape, generator=gens[dev], device=dev, dtype=torch.float32).to(param.dtype)
                        * std)


def tiny_model_and_processor(name: str, *, seed: int = 0, image_tokens: int = 16, dims: dict | None = None,
                             std: float = 0.1, device: str | None = None, dtype: str | None = None):
    """Build ``(model, processor, config_sha256)`` of a tiny architecture.

    Parameters
    ----------
    name
        One of :data:`TINY_NAMES`.
    seed
        Weight seed (``torch.Generator``).
    image_tokens
        Image tokens per image (a square number); 256 mirrors MedGemma's prompt structure.
    dims
        Overrides of the text dimensions (``hidden``, ``layers``, ``heads``, ``kv_heads``, ``head_dim``,
        ``intermediate``, ``vocab``; for Gemma3 also ``sliding_window``, ``layer_types``,
        ``vision_hidden``, ``vision_intermediate``, ``vision_layers``, ``vision_heads``, ``image_size``,
        ``patch_size``); used by the benchmark to build MedGemma-4B-sized random models.
    std
        Standard deviation of the random weights.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    if name not in TINY_NAMES:
        raise KeyError(f"unknown tiny model {name!r}; known: {TINY_NAMES}")
    tok = _tokenizer(name)
    processor = _processor(name, tok, image_tokens=image_tokens, dims=dims)
    config = _config(name, tok, image_tokens=image_tokens, dims=dims)
    torch_dtype = getattr(torch, dtype) if dtype else torch.float32
    target = torch.device(device or "cpu")
    with torch.random.fork_rng(devices=[target] if target.type == "cuda" else []), target:
        model = AutoModelForImageTextToText.from_config(config, dtype=torch_dtype)
    _randomise(model, seed=seed, std=std)
    model.eval()
    digest = hashlib.sha256(config.to_json_string(use_diff=False).encode()).hexdigest()
    return model, processor, digest


def build_tiny(name: str, *, seed: int = 0, device: str | None = None, dtype: str | None = None,
               image_tokens: int = 16, dims: dict | None = None, std: float = 0.1, batch_size: int = 8):
    """The tiny model as an :class:`~shovir_core.models.hf.HFVLM` (the registry's ``tiny-*`` names)."""
    from .hf import HFVLM

    specs = {s.name: s for s in TINY_SPECS}
    if name not in specs:
        raise KeyError(f"unknown tiny model {name!r}; known: {sorted(specs)}")
    model, processor, digest = tiny_model_and_processor(name, seed=seed, device=device, dtype=dtype,
                                                        image_tokens=image_tokens, dims=dims, std=std)
    return HFVLM(specs[name], model, processor,
                 source={"kind": "tiny-random", "seed": seed, "config_sha256": digest, "image_tokens": image_tokens,
                         "dims": dims or {}, "std": std}, batch_size=batch_size)
