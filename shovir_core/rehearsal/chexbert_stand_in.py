"""A tiny random CheXbert checkpoint for rehearsals: CheXbert's interface, no learned behaviour.

CheXbert (Smit et al., "CheXbert: combining automatic labelers and expert annotations for accurate
radiology report labeling using BERT", EMNLP 2020) is the labeller of ShoViR's evaluation; its weights
are credential-free but cannot be downloaded here. A rehearsal needs only its interface: a BERT
folder (config + WordPiece vocabulary) and a checkpoint with ``module.bert.*`` and the 14
``module.linear_heads.*`` (13 four-way heads, one two-way head), which
:class:`shovir_core.labeling.CheXbertLabeller` loads exactly as it loads the real one. The weights
are drawn from a seeded generator: the labels it gives mean nothing.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["write_tiny_chexbert"]

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "no", "pleural", "effusion", "mild", "cardiomegaly",
          "opacity", "edema", "atelectasis", "possible", "the", "lungs", "are", "clear", "."]


def write_tiny_chexbert(folder: str | Path, *, seed: int = 0) -> tuple[Path, Path]:
    """Write ``<folder>/bert/`` and ``<folder>/chexbert.pth`` (once); returns ``(weights, bert_dir)``."""
    import torch
    import transformers

    folder = Path(folder)
    weights, bert_dir = folder / "chexbert.pth", folder / "bert"
    if weights.is_file() and (bert_dir / "config.json").is_file():
        return weights, bert_dir
    bert_dir.mkdir(parents=True, exist_ok=True)
    (bert_dir / "vocab.txt").write_text("\n".join(_VOCAB) + "\n", encoding="utf-8")
    transformers.BertTokenizer(str(bert_dir / "vocab.txt")).save_pretrained(bert_dir)
    config = transformers.BertConfig(vocab_size=len(_VOCAB), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=512)
    config.save_pretrained(bert_dir)
    gen = torch.Generator().manual_seed(seed)
    shapes = {k: v.shape for k, v in transformers.BertModel(config).state_dict().items()}
    state = {f"module.bert.{k}": torch.randn(shape, generator=gen) * 0.02 for k, shape in shapes.items()}
    for i in range(14):
        n = 2 if i == 13 else 4
        state[f"module.linear_heads.{i}.weight"] = torch.randn(n, 16, generator=gen)
        state[f"module.linear_heads.{i}.bias"] = torch.randn(n, generator=gen)
    tmp = weights.with_suffix(".tmp")
    torch.save({"model_state_dict": state}, tmp)
    tmp.replace(weights)
    return weights, bert_dir
