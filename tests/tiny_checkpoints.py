"""Tiny checkpoints shaped like the remote-code ShoViR models (MAIRA-2, CheXagent-2, CXRMate): random weights
behind modelling code named in ``auto_map``, written for the tests from the models' public APIs. Shared by
test_models_remote.py and test_shovir_profiles.py."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

MAIRA_CONFIG = '''
from transformers import LlavaConfig


class TinyMaira2Config(LlavaConfig):
    model_type = "tiny_maira2"
'''

MAIRA_MODELING = '''
from transformers import LlavaForConditionalGeneration

from .configuration_tiny_maira2 import TinyMaira2Config


class TinyMaira2ForConditionalGeneration(LlavaForConditionalGeneration):
    config_class = TinyMaira2Config
'''

# Mirrors MAIRA-2's processor API: a reporting-input builder and an output converter. The prompt
# records every argument so the test can check what the adapter passed.
MAIRA_PROCESSING = '''
from transformers import LlavaProcessor

CALLS = []


class TinyMaira2Processor(LlavaProcessor):
    def format_and_preprocess_reporting_input(self, current_frontal, current_lateral, prior_frontal, indication,
                                              technique, comparison, prior_report, return_tensors="pt",
                                              get_grounding=False):
        CALLS.append(dict(size=current_frontal.size, lateral=current_lateral, prior=prior_frontal,
                          indication=indication, technique=technique, comparison=comparison,
                          prior_report=prior_report, grounding=get_grounding))
        text = "[INST] <image>\\nINDICATION: " + (indication or "None") + " [/INST]"
        return self(text=text, images=[current_frontal], return_tensors=return_tensors)

    def convert_output_to_plaintext_or_grounded_sequence(self, text):
        return "converted: " + text
'''



def build_maira2(root) -> Path:
    """A tiny MAIRA-2-shaped checkpoint: random LLaVA weights behind code named in ``auto_map``."""
    from safetensors.torch import save_file

    from shovir_core.models.tiny import tiny_model_and_processor

    path = Path(root) / "tiny-maira2"
    path.mkdir(parents=True)
    model, processor, _ = tiny_model_and_processor("tiny-llava", seed=3)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    # save_pretrained writes LLaVA's legacy parameter names (mapped back only for model_type "llava");
    # the remote code loads the current names, as a checkpoint written for its own code has them.
    (path / "model.safetensors").rename(path / "legacy.safetensors.bak")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    for name, code in (("configuration_tiny_maira2.py", MAIRA_CONFIG), ("modeling_tiny_maira2.py", MAIRA_MODELING),
                       ("processing_tiny_maira2.py", MAIRA_PROCESSING)):
        (path / name).write_text(textwrap.dedent(code))
    auto_map = {"AutoConfig": "configuration_tiny_maira2.TinyMaira2Config",
                "AutoModelForCausalLM": "modeling_tiny_maira2.TinyMaira2ForConditionalGeneration",
                "AutoProcessor": "processing_tiny_maira2.TinyMaira2Processor"}
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="tiny_maira2", architectures=["TinyMaira2ForConditionalGeneration"], auto_map=auto_map)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        f = path / name
        if f.is_file():
            data = json.loads(f.read_text())
            data["auto_map"] = {"AutoProcessor": auto_map["AutoProcessor"]}
            data["processor_class"] = "TinyMaira2Processor"
            f.write_text(json.dumps(data, indent=2))
    return path




CHEXAGENT_CONFIG = '''
from transformers import MistralConfig


class TinyCheXagentConfig(MistralConfig):
    model_type = "tiny_chexagent"
'''

CHEXAGENT_MODELING = '''
from transformers import MistralForCausalLM

from .configuration_tiny_chexagent import TinyCheXagentConfig


class TinyCheXagentForCausalLM(MistralForCausalLM):
    config_class = TinyCheXagentConfig
'''

# CheXagent-2's tokenizer API: from_list_format turns image paths and text into a query string (the
# real model then reads the image from the path). This stand-in opens the image at that moment
# and records it; its language model is text-only.
CHEXAGENT_TOKENIZATION = '''
from PIL import Image
from transformers import PreTrainedTokenizerFast

CALLS = []


class TinyCheXagentTokenizer(PreTrainedTokenizerFast):
    def from_list_format(self, items):
        parts = []
        for item in items:
            if "image" in item:
                with Image.open(item["image"]) as im:
                    CALLS.append({"path": item["image"], "format": im.format, "size": im.size})
                parts.append("<img>" + item["image"] + "</img>")
            else:
                parts.append(item["text"])
        return "\\n".join(parts)
'''

CHEXAGENT_TEMPLATE = ("{%- for m in messages -%}{{ '<|im_start|>' + m['from'] + '\\n' + m['value'] + '<|im_end|>\\n' }}"
                      "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>gpt\\n' }}{%- endif -%}")



def build_chexagent2(root) -> Path:
    """A tiny CheXagent-2-shaped checkpoint: remote tokenizer + random Mistral LM behind ``auto_map``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, MistralConfig

    from shovir_core.models.tiny import _tokenizer

    path = Path(root) / "tiny-chexagent"
    path.mkdir(parents=True)
    tok = _tokenizer("tiny-qwen2vl")
    tok.chat_template = CHEXAGENT_TEMPLATE
    tok.save_pretrained(path)
    ids = tok.convert_tokens_to_ids
    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                           sliding_window=None, pad_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                           bos_token_id=None, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForCausalLM.from_config(config)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    model.save_pretrained(path)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    for name, code in (("configuration_tiny_chexagent.py", CHEXAGENT_CONFIG),
                       ("modeling_tiny_chexagent.py", CHEXAGENT_MODELING),
                       ("tokenization_tiny_chexagent.py", CHEXAGENT_TOKENIZATION)):
        (path / name).write_text(textwrap.dedent(code))
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(model_type="tiny_chexagent", architectures=["TinyCheXagentForCausalLM"],
               auto_map={"AutoConfig": "configuration_tiny_chexagent.TinyCheXagentConfig",
                         "AutoModelForCausalLM": "modeling_tiny_chexagent.TinyCheXagentForCausalLM"})
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    tcfg = json.loads((path / "tokenizer_config.json").read_text())
    tcfg.update(tokenizer_class="TinyCheXagentTokenizer",
                auto_map={"AutoTokenizer": [None, "tokenization_tiny_chexagent.TinyCheXagentTokenizer"]})
    (path / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2))
    return path




CXRMATE_CODE = '''
from transformers import VisionEncoderDecoderConfig, VisionEncoderDecoderModel

CALLS = []


class TinyCXRMateConfig(VisionEncoderDecoderConfig):
    model_type = "tiny_cxrmate"


class TinyCXRMate(VisionEncoderDecoderModel):
    config_class = TinyCXRMateConfig

    def generate(self, pixel_values=None, **kwargs):
        CALLS.append({"pixel_values": pixel_values.clone(), **kwargs})
        return super().generate(pixel_values=pixel_values[:, 0], **kwargs)

    def split_and_decode_sections(self, token_ids, tokenizer):
        findings, impressions = [], []
        for row in token_ids.tolist():
            text = tokenizer.decode(row, skip_special_tokens=False)
            for special in ("[BOS]", "[EOS]", "[PAD]"):
                text = text.replace(special, "")
            head, _, tail = text.partition("[SEP]")
            findings.append(head.strip())
            impressions.append(tail.strip())
        return findings, impressions
'''



def build_cxrmate(root) -> Path:
    """A tiny CXRMate-shaped checkpoint: random ViT encoder + GPT-2 decoder behind ``auto_map``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, VisionEncoderDecoderConfig, VisionEncoderDecoderModel

    from shovir_core.models.tiny import tokenizer_corpus

    path = Path(root) / "tiny-cxrmate"
    path.mkdir(parents=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(tokenizer_corpus(), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[BOS]", "[SEP]", "[EOS]", "[NF]", "[NI]"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="[PAD]", bos_token="[BOS]", sep_token="[SEP]",
                                  eos_token="[EOS]")
    tok.save_pretrained(path)
    ids = tok.convert_tokens_to_ids
    config = VisionEncoderDecoderConfig(
        encoder=dict(model_type="vit", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, image_size=32, patch_size=8, image_mean=[0.5, 0.4, 0.3],
                     image_std=[0.2, 0.25, 0.3]),
        decoder=dict(model_type="gpt2", vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=128,
                     is_decoder=True, add_cross_attention=True, bos_token_id=ids("[BOS]"),
                     eos_token_id=ids("[EOS]"), pad_token_id=ids("[PAD]")),
        decoder_start_token_id=ids("[BOS]"), pad_token_id=ids("[PAD]"), eos_token_id=ids("[EOS]"))
    with torch.random.fork_rng(devices=[]):
        model = VisionEncoderDecoderModel(config=config)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name and "ln_" not in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    model.save_pretrained(path)
    (path / "modeling_tiny_cxrmate.py").write_text(textwrap.dedent(CXRMATE_CODE))
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(model_type="tiny_cxrmate", architectures=["TinyCXRMate"],
               auto_map={"AutoConfig": "modeling_tiny_cxrmate.TinyCXRMateConfig",
                         "AutoModel": "modeling_tiny_cxrmate.TinyCXRMate"})
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


