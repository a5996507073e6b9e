"""The CheXbert plug-in runs from local files: a tiny random BERT with CheXbert's heads."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from shovir_core.labeling import CheXbertLabeller, label_reports  # noqa: E402
from shovir_core.labels import CHEXPERT_CLASSES  # noqa: E402


@pytest.fixture
def tiny_chexbert(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "no", "pleural", "effusion", "mild", "cardiomegaly", "."]
    bert_dir = tmp_path / "bert"
    bert_dir.mkdir()
    (bert_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = transformers.BertTokenizer(str(bert_dir / "vocab.txt"))
    tok.save_pretrained(bert_dir)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    config.save_pretrained(bert_dir)
    bert = transformers.BertModel(config)  # random init: the zero-weight heads below ignore it
    state = {f"module.bert.{k}": v for k, v in bert.state_dict().items()}
    # heads with zero weights: the bias alone decides each class, so the output is known
    wanted = [1, 2, 3, 0] * 4  # positive, negative, uncertain, blank, ...
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


def test_chexbert_plugin_maps_heads_to_codes(tiny_chexbert):
    weights, bert_dir, wanted = tiny_chexbert
    df = label_reports(["Mild cardiomegaly.", "No pleural effusion."], labeller="chexbert",
                       weights=weights, bert_dir=bert_dir)
    codes = {0: np.nan, 1: 1.0, 2: 0.0, 3: -1.0}
    for i, cls in enumerate(CHEXPERT_CLASSES[:-1]):
        expected = codes[wanted[i]]
        got = df[cls].to_numpy()
        assert (np.isnan(got).all() if np.isnan(expected) else (got == expected).all()), cls
    assert df["No Finding"].isna().all()


def test_chexbert_rejects_foreign_checkpoint(tiny_chexbert, tmp_path):
    _, bert_dir, _ = tiny_chexbert
    bad = tmp_path / "bad.pth"
    torch.save({"model_state_dict": {"module.something.weight": torch.zeros(1)}}, bad)
    with pytest.raises(ValueError, match="not a CheXbert checkpoint"):
        CheXbertLabeller(weights=bad, bert_dir=bert_dir)
