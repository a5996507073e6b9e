"""The credentialed ShoViR profiles end to end on the synthetic fixtures with stand-ins of all eight models.

The profiles' specs (paper settings: all eight models, CheXbert, the paper's p grid, PadChest-GR classes
>= 40 images) run as written except for what the tiny fixtures cannot carry: two strengths, one item per
class, every class kept, 8 new tokens. The models run under their registry names through their own
adapters: CheXagent-2, MAIRA-2 and CXRMate from tiny remote-code checkpoints (tests/tiny_checkpoints.py);
LLaVA-Rad, Libra-v1 and RaDialog from stand-in code bases (tests/fixtures/upstream); MedGemma and
NV-Reason-CXR, whose real answer-token ids a tiny vocabulary cannot have, as random models of their
classes (tiny-gemma3, tiny-nvreason). Labels come from a tiny CheXbert.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core import protocols  # noqa: E402
from shovir_core.params import load_params  # noqa: E402
from shovir_core.models import list_models  # noqa: E402
from shovir_core.tables import shovir as sv  # noqa: E402
from tiny_checkpoints import build_chexagent2, build_cxrmate, build_maira2  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
PAPER_PS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
FIXTURE_SIZE = {"ps": [0.0, 1.0], "max_per_class": 1, "min_count": 1, "max_new_tokens": 8}
CLASS_STAND_IN = {"medgemma-1.5-4b": "tiny-gemma3", "nv-reason-cxr": "tiny-nvreason"}


@pytest.fixture(scope="module")
def environment(tmp_path_factory):
    import torch

    mp = pytest.MonkeyPatch()
    models = tmp_path_factory.mktemp("models")
    for build, name in ((build_maira2, "maira-2"), (build_chexagent2, "chexagent-2"), (build_cxrmate, "cxrmate")):
        build(models).rename(models / name)
    for name in ("libra-v1", "llava-rad", "radialog", "liuhaotian--llava-v1.5-7b"):
        (models / name).mkdir()
        (models / name / "config.json").write_text('{"mm_projector_type": "TAC"}')
    # a tiny CheXbert (BERT + 14 heads) whose heads read the text
    import transformers

    bert = tmp_path_factory.mktemp("bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "no", "effusion", "cardiomegaly", "there", "is", "."]
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(bert / "vocab.txt")).save_pretrained(bert)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=512)
    config.save_pretrained(bert)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = transformers.BertModel(config)
        state = {f"module.bert.{k}": v for k, v in net.state_dict().items()}
        for i in range(14):
            n = 2 if i == 13 else 4
            state[f"module.linear_heads.{i}.weight"] = torch.randn(n, 16)
            state[f"module.linear_heads.{i}.bias"] = torch.zeros(n)
    weights = bert / "chexbert.pth"
    torch.save({"model_state_dict": state}, weights)
    runs = tmp_path_factory.mktemp("runs")
    for key, value in {"SHOVIR_MODEL_DIR": models, "SHOVIR_CODE_DIR": FIXTURES / "upstream", "SHOVIR_RUNS": runs,
                       "SHOVIR_CHEXBERT_WEIGHTS": weights, "SHOVIR_CHEXBERT_BERT": bert,
                       "SHOVIR_MIMIC": FIXTURES / "mimic_imagenome", "SHOVIR_PADCHEST": FIXTURES / "padchest_gr"}.items():
        mp.setenv(key, str(value))
    for key in ("SHOVIR_RADGRAPH_WEIGHTS", "SHOVIR_GREEN_WEIGHTS"):
        mp.delenv(key, raising=False)
    yield runs
    mp.undo()


@pytest.mark.parametrize("profile", ["mimic", "padchest"])
def test_profile_uses_the_paper_settings(profile):
    runs = load_params("shovir_table1", profile)["runs"]
    assert {r["spec"]["model"] for r in runs.values()} == set(list_models(paper="ShoViR"))
    assert len(runs) == 8
    for r in runs.values():
        spec = r["spec"]
        assert spec["labeller"] == "chexbert" and spec["ps"] == PAPER_PS and spec["seed"] == 3
        assert spec["reference_labels"] == "report" and spec["reference_text"] == "report"
        assert spec["min_count"] == (40 if profile == "padchest" else 1)


@pytest.mark.parametrize("profile", ["mimic", "padchest"])
def test_profile_makes_its_records_end_to_end(profile, environment):
    made = {}
    for key, r in load_params("shovir_table1", profile)["runs"].items():
        spec = {**r["spec"], **FIXTURE_SIZE, "model": CLASS_STAND_IN.get(r["spec"]["model"], r["spec"]["model"])}
        made[key] = protocols.run(r["protocol"], r["name"], spec, progress=False)
    assert len(made) == 8
    for key, run in made.items():
        assert run.status == "complete" and run.credentialed, key
        assert run.manifest["model"]["labeller"]["name"] == "chexbert"
        t = run.trials
        assert set(t["condition"]) >= {"Baseline", "FullNoise", "RO", "OCO"}
        assert t["generated"].map(lambda s: isinstance(s, str)).all()
    for key in ("libra-v1", "llava-rad", "radialog"):
        assert made[key].manifest["model"]["upstream"]["kind"] == "checkout"
    trials = sv.trials_of(made)
    table = sv.table1(trials).frame
    assert list(table.index) == list(made)
    values = table.xs("f1_14_micro", axis=1, level=1)[["Baseline", "FullNoise"]].to_numpy()
    assert np.isfinite(values).all() and ((values >= 0) & (values <= 1)).all()
    assert set(sv.external_metric_status(table)) == {"f1_radgraph", "green"}
    curves = sv.mu_f1_curves(sv.per_class(trials)).frame
    assert set(curves["model"]) == set(made) and set(curves["p"]) == {0.0, 1.0}
