"""CheXbert labeller, used only when its weights are on local disk.

CheXbert is BERT-base with 14 linear heads on the [CLS] state: 13 heads with four
classes (0 blank, 1 positive, 2 negative, 3 uncertain) and a No Finding head with
two (0 blank, 1 positive). The checkpoint (``chexbert.pth``, from the authors'
release) holds ``model_state_dict`` with DataParallel ``module.`` prefixes. The
tokenizer and BERT config come from a local ``bert-base-uncased`` directory.

Nothing is downloaded: without ``weights`` / ``SHOVIR_CHEXBERT_WEIGHTS`` and
``bert_dir`` / ``SHOVIR_CHEXBERT_BERT`` the labeller raises
:class:`LabellerUnavailable` with the reason, which callers record as
"unavailable". torch and transformers are imported lazily, on first use.

Reference
---------
Smit A. et al., "CheXbert: combining automatic labelers and expert annotations
for accurate radiology report labeling using BERT", EMNLP 2020.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..labels import CHEXPERT_CLASSES, NEGATIVE, POSITIVE, UNCERTAIN

__all__ = ["CheXbertLabeller", "LabellerUnavailable", "chexbert_availability", "HEAD_CODES"]

HEAD_CODES = (np.nan, POSITIVE, NEGATIVE, UNCERTAIN)
"""Output index -> CheXpert code for the 13 four-way heads (No Finding uses the first two)."""


class LabellerUnavailable(RuntimeError):
    """A labeller cannot run here (missing weights or package); the message says why."""


def chexbert_availability(*, weights=None, bert_dir=None) -> tuple[bool, str]:
    """Whether CheXbert can run: ``(available, reason)``."""
    import importlib.util

    for pkg in ("torch", "transformers"):
        if importlib.util.find_spec(pkg) is None:
            return False, f"python package {pkg!r} is not installed"
    w = weights or os.environ.get("SHOVIR_CHEXBERT_WEIGHTS")
    b = bert_dir or os.environ.get("SHOVIR_CHEXBERT_BERT")
    if not w:
        return False, "no local CheXbert checkpoint: pass weights= or set SHOVIR_CHEXBERT_WEIGHTS"
    if not Path(w).is_file():
        return False, f"CheXbert checkpoint {str(w)!r} does not exist"
    if not b:
        return False, "no local bert-base-uncased directory: pass bert_dir= or set SHOVIR_CHEXBERT_BERT"
    if not Path(b).is_dir():
        return False, f"BERT directory {str(b)!r} does not exist"
    return True, ""


class CheXbertLabeller:
    """CheXbert inference on CPU or GPU from local files (see the module docstring).

    Parameters
    ----------
    weights : path, optional
        The CheXbert checkpoint (default ``$SHOVIR_CHEXBERT_WEIGHTS``).
    bert_dir : path, optional
        Local directory with the BERT config and tokenizer (default ``$SHOVIR_CHEXBERT_BERT``).
    device : str
        torch device.
    batch_size : int
        Reports per forward pass.
    """

    name = "chexbert"

    def __init__(self, *, weights=None, bert_dir=None, device: str = "cpu", batch_size: int = 16) -> None:
        ok, reason = chexbert_availability(weights=weights, bert_dir=bert_dir)
        if not ok:
            raise LabellerUnavailable(f"CheXbert unavailable: {reason}")
        self.weights = Path(weights or os.environ["SHOVIR_CHEXBERT_WEIGHTS"])
        self.bert_dir = Path(bert_dir or os.environ["SHOVIR_CHEXBERT_BERT"])
        self.device, self.batch_size = device, batch_size
        self._model, self._tokenizer = self._load()

    def _load(self):
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

        config = BertConfig.from_pretrained(self.bert_dir, local_files_only=True)
        model = _CheXbert(config)
        state = torch.load(self.weights, map_location="cpu", weights_only=True)
        state = state.get("model_state_dict", state)
        state = {k.removeprefix("module."): v for k, v in state.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or [k for k in unexpected if not k.endswith("position_ids")]:
            raise ValueError(f"{self.weights}: not a CheXbert checkpoint (missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]})")
        model.eval().to(self.device)
        tokenizer = AutoTokenizer.from_pretrained(self.bert_dir, local_files_only=True)
        return model, tokenizer

    def label(self, texts: Iterable[str]) -> list[dict[str, float]]:
        """CheXpert codes per text (list of dicts class -> code)."""
        import torch

        texts = [" ".join(str(t).split()) for t in texts]
        out: list[dict[str, float]] = []
        for i in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(texts[i:i + self.batch_size], padding=True, truncation=True,
                                    max_length=512, return_tensors="pt").to(self.device)
            with torch.no_grad():
                logits = self._model(batch["input_ids"], batch["attention_mask"])
            preds = np.stack([lg.argmax(-1).cpu().numpy() for lg in logits], axis=1)
            for row in preds:
                out.append({cls: HEAD_CODES[int(k)] for cls, k in zip(CHEXPERT_CLASSES, row)})
        return out
