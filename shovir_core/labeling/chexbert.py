"""CheXbert labeller, used only when its weights are on local disk.

CheXbert is BERT-base with 14 linear heads on the [CLS] state: 13 heads with four
classes (0 blank, 1 positive, 2 negative, 3 uncertain) and a No Finding head with
two (0 blank, 1 positive). The checkpoint (``chexbert.pth``, from the authors'
release) holds ``model_state_dict`` with DataParallel ``module.`` prefixes. The
tokenizer and BERT config come from a local ``bert-base-uncased`` directory.

Nothing is downloaded: without ``weights`` / ``SHOVIR_CHEXBERT_WEIGHTS`` and
``bert_dir`` / ``SHOVIR_CHEXBERT_BERT`` the labeller raises
:class:`LabellerUnavailable` with the reason, which callers record as
"unavailable". The network itself is :mod:`shovir_core.models.chexbert` (the only
subpackage importing torch and transformers, lazily).

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
from ..errors import ShovirError

__all__ = ["CheXbertLabeller", "LabellerUnavailable", "chexbert_availability", "HEAD_CODES"]

HEAD_CODES = (np.nan, POSITIVE, NEGATIVE, UNCERTAIN)
"""Output index -> CheXpert code for the 13 four-way heads (No Finding uses the first two)."""


class LabellerUnavailable(ShovirError, RuntimeError):
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

    def provenance(self) -> dict:
        """The local files used: checkpoint name, size and SHA-256; the BERT folder's config hash."""
        import hashlib

        h = hashlib.sha256()
        with open(self.weights, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        config = self.bert_dir / "config.json"
        return {"weights": self.weights.name, "weights_bytes": self.weights.stat().st_size,
                "weights_sha256": h.hexdigest(),
                "bert_config_sha256": hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None,
                "device": self.device}

    def _load(self):
        from ..models.chexbert import load_chexbert

        return load_chexbert(self.weights, self.bert_dir, device=self.device)

    def label(self, texts: Iterable[str]) -> list[dict[str, float]]:
        """CheXpert codes per text (list of dicts class -> code)."""
        from ..models.chexbert import predict_heads

        texts = [" ".join(str(t).split()) for t in texts]
        preds = predict_heads(self._model, self._tokenizer, texts, device=self.device, batch_size=self.batch_size)
        return [{cls: HEAD_CODES[int(k)] for cls, k in zip(CHEXPERT_CLASSES, row)} for row in preds]
