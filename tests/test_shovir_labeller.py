"""The shovir protocol's ``labeller`` switch: part of the identity, CheXbert from local files or a clear failure."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core import protocols
from shovir_core.labeling import LabellerUnavailable
from shovir_core.labels import CHEXPERT_CLASSES
from shovir_core.protocols import shovir
from shovir_core.records import spec_hash

FIXTURES = Path(__file__).parent / "fixtures"
MIMIC = {"dataset": f"mimic:{FIXTURES / 'mimic_imagenome'}", "model": "ref-blind-prior", "min_count": 1,
         "ps": [0.0, 1.0], "conditions": ["Baseline", "OCO"]}


def test_labeller_is_validated_and_enters_the_identity():
    rules = shovir.resolve_spec(MIMIC)
    assert rules["labeller"] == "rules"
    chexbert = shovir.resolve_spec({**MIMIC, "labeller": "chexbert"})
    assert spec_hash(rules) != spec_hash(chexbert)
    with pytest.raises(ValueError, match=r"'labeller' = 'radgraph' is not allowed"):
        shovir.resolve_spec({**MIMIC, "labeller": "radgraph"})


def test_chexbert_without_weights_fails_before_generating(runs_root, monkeypatch):
    monkeypatch.delenv("SHOVIR_CHEXBERT_WEIGHTS", raising=False)
    with pytest.raises(LabellerUnavailable, match="SHOVIR_CHEXBERT_WEIGHTS"):
        protocols.run("shovir", "mimic-chexbert", {**MIMIC, "labeller": "chexbert"}, progress=False)
    assert not list(runs_root.glob("shovir/mimic-chexbert/*/part-*"))


def test_chexbert_labels_generated_and_reference_reports(runs_root, monkeypatch, tiny_chexbert_files):
    pytest.importorskip("torch")
    weights, bert_dir, wanted = tiny_chexbert_files
    monkeypatch.setenv("SHOVIR_CHEXBERT_WEIGHTS", str(weights))
    monkeypatch.setenv("SHOVIR_CHEXBERT_BERT", str(bert_dir))
    run = protocols.run("shovir", "mimic-chexbert", {**MIMIC, "labeller": "chexbert"}, progress=False)
    t = run.trials
    codes = {0: np.nan, 1: 1.0, 2: 0.0, 3: -1.0}
    for i, cls in enumerate(CHEXPERT_CLASSES[:-1]):  # the tiny CheXbert answers one code per class, whatever the text
        for prefix in ("pred", "ref"):
            got = t[f"{prefix}.{cls}"].to_numpy()
            want = codes[wanted[i]]
            assert (np.isnan(got).all() if np.isnan(want) else (got == want).all()), (prefix, cls)
    info = run.manifest["model"]["labeller"]
    assert info["name"] == "chexbert" and info["weights"] == "chexbert.pth" and len(info["weights_sha256"]) == 64
    rules = protocols.run("shovir", "mimic-rules", MIMIC, progress=False)
    assert rules.manifest["model"]["labeller"] == {"name": "rules"}
    assert not t["pred.Cardiomegaly"].equals(rules.trials["pred.Cardiomegaly"])
