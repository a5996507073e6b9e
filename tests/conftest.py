"""Fixtures for the whole suite. Tests never touch the network, and read only files of this repository."""
from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# submitit configures logging when first imported (logging.config.dictConfig), which closes every handler
# that exists at that moment, and with them any stream a handler owned. Imported first inside a test (the
# sharding tests), it closed a stream an earlier test's code had attached, and pytest's capture with it
# ("I/O operation on closed file" in whichever test came next, depending on the order the workers ran the
# files in). Imported here, before any test, it finds nothing to close.
import submitit  # noqa: E402,F401

collect_ignore_glob = ["fixtures/*"]
"""Fixture files (stand-in packages, leak notebooks, fake SLURM commands) are data, not test or doctest modules."""


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    """An empty runs root for tests that write records."""
    root = tmp_path / "runs"
    monkeypatch.setenv("SHOVIR_RUNS", str(root))
    return root


@pytest.fixture
def tiny_chexbert_files(tmp_path):
    """A tiny random BERT with CheXbert's 14 heads whose zero-weight heads make each class's output known.

    Returns ``(weights, bert_dir, wanted)``: ``wanted[i]`` is the head index (0 blank, 1 positive,
    2 negative, 3 uncertain) that class ``i`` of the first 13 always gets; No Finding is always blank.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "no", "pleural", "effusion", "mild", "cardiomegaly", "."]
    bert_dir = tmp_path / "bert"
    bert_dir.mkdir()
    (bert_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(bert_dir / "vocab.txt")).save_pretrained(bert_dir)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    config.save_pretrained(bert_dir)
    state = {f"module.bert.{k}": v for k, v in transformers.BertModel(config).state_dict().items()}
    wanted = [1, 2, 3, 0] * 4
    for i in range(13):
        bias = torch.full((4,), -5.0)
        bias[wanted[i]] = 5.0
        state[f"module.linear_heads.{i}.weight"] = torch.zeros(4, 16)
        state[f"module.linear_heads.{i}.bias"] = bias
    state["module.linear_heads.13.weight"] = torch.zeros(2, 16)
    state["module.linear_heads.13.bias"] = torch.tensor([5.0, -5.0])
    weights = tmp_path / "chexbert.pth"
    torch.save({"model_state_dict": state}, weights)
    return weights, bert_dir, wanted


@pytest.fixture
def check_table():
    """Assert the table contract of a ``TableResult``: known metrics, a display with one readable
    header per column and one row per frame row."""
    def check(table):
        from shovir_core.metrics.schema import metric_schema
        from shovir_core.tables import TableResult

        assert isinstance(table, TableResult)
        assert set(table.metrics.values()) <= set(metric_schema())
        shown = table.display()
        assert len(shown) == len(table.frame)
        assert shown.columns.is_unique, f"display headers repeat: {list(shown.columns)}"
        return shown
    return check
