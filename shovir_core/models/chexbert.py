"""The CheXbert network (BERT-base + 14 linear heads), loaded from local files only.

``shovir_core.labeling`` wraps it as a report labeller; it lives here because this subpackage is
the only one that imports torch and transformers (lazily, inside the functions).

Reference
---------
Smit A. et al., "CheXbert: combining automatic labelers and expert annotations for accurate
radiology report labeling using BERT", EMNLP 2020.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["load_chexbert", "predict_heads"]


def load_chexbert(weights: Path, bert_dir: Path, *, device: str = "cpu"):
    """``(model, tokenizer)`` from a CheXbert checkpoint and a local ``bert-base-uncased`` folder.

    The checkpoint holds ``model_state_dict`` (DataParallel ``module.`` prefixes are stripped).
    A checkpoint that does not fill the network raises ``ValueError`` naming the file.
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    class _CheXbert(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.bert = BertModel(config, add_pooling_layer=True)
            self.dropout = torch.nn.Dropout(config.hidden_dropout_prob)
            h = config.hidden_size
            self.linear_heads = torch.nn.ModuleList([torch.nn.Linear(h, 4) for _ in range(13)]
                                                    + [torch.nn.Linear(h, 2)])

        def forward(self, input_ids, attention_mask):
            cls = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0][:, 0, :]
            cls = self.dropout(cls)
            return [head(cls) for head in self.linear_heads]

    config = BertConfig.from_pretrained(bert_dir, local_files_only=True)
    model = _CheXbert(config)
    state = torch.load(weights, map_location="cpu", weights_only=True)
    state = state.get("model_state_dict", state)
    state = {k.removeprefix("module."): v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or [k for k in unexpected if not k.endswith("position_ids")]:
        raise ValueError(f"{weights}: not a CheXbert checkpoint (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")
    model.eval().to(device)
    tokenizer = AutoTokenizer.from_pretrained(bert_dir, local_files_only=True)
    return model, tokenizer


def predict_heads(model, tokenizer, texts: Sequence[str], *, device: str = "cpu",
                  batch_size: int = 16) -> np.ndarray:
    """Argmax index of each of the 14 heads per text, shape ``(len(texts), 14)``."""
    import torch

    rows = []
    for i in range(0, len(texts), batch_size):
        batch = tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True,
                          max_length=512, return_tensors="pt").to(device)
        with torch.inference_mode():
            logits = model(batch["input_ids"], batch["attention_mask"])
        rows.append(np.stack([lg.argmax(-1).cpu().numpy() for lg in logits], axis=1))
    return np.concatenate(rows, axis=0) if rows else np.zeros((0, 14), dtype=int)
