"""Tables 26 and 34 (shovir_core.tables.modalens_appn_probes) on synthetic records."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shovir_core.stats.probes import config_sha256
from shovir_core.tables import modalens_appn_probes as tp


def _lens(m_final: np.ndarray, n_layers: int = 3) -> list[str]:
    return [json.dumps([[float(m), 0.0]] * (n_layers + 1)) for m in m_final]


def _probe_record(seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for split, n_pat in (("test", 40), ("disjoint", 30)):
        for p in range(n_pat):
            for q in ("q1", "q2"):
                flip = rng.random() < 0.3
                rows.append({"trial_id": f"{split}{p}{q}", "split": split, "patient_id": f"{split}-{p}",
                             "question_id": q, "readout_c": "yes", "readout_d": "no" if flip else "yes",
                             "target_d": float(rng.random() < 0.5), "margin_d": rng.normal(),
                             "probe_flip_score": flip * 0.5 + rng.random() * 0.5,
                             "probe_label_score": rng.random(), "attention_mass": rng.random(),
                             "input_gradient": rng.random()})
    t = pd.DataFrame(rows)
    t["lens_c"] = _lens(np.ones(len(t)))
    cfg = {"probe": {"flip_layer": 1, "label_layer": 3}, "test": {"n_draws": 200, "alpha": 0.05, "seed": 0},
           "baselines": list(tp.STATISTICS)[:6],
           "split": {"disjoint": {"n_patients": 30}}}
    sha = config_sha256(cfg)
    t["protocol_sha256"] = sha
    return t, {"protocol": json.dumps(cfg), "protocol_sha256": sha}


def test_protocol_check_detects_a_tampered_record(check_table):
    t, counts = _probe_record()
    ok = tp.protocol_check(t, counts)
    check_table(ok)
    assert ok.values["round_trip"] and ok.values["recorded_prefix"] == counts["protocol_sha256"][:8]
    tampered = {**counts, "protocol": json.dumps({**json.loads(counts["protocol"]), "runs": 2})}
    assert not tp.protocol_check(t, tampered).values["round_trip"]
    t.loc[0, "protocol_sha256"] = "0" * 64
    assert not tp.protocol_check(t, counts).values["round_trip"]


def test_probe_table_rows_and_test(check_table):
    t, counts = _probe_record()
    res = tp.probe_table(t, counts)
    check_table(res)
    v = res.values
    assert len(res.frame) == len(tp.STATISTICS)
    test = t[t["split"] == "test"]
    assert v["unchanged_rate.test"] == pytest.approx((test["readout_c"] == test["readout_d"]).mean())
    assert v["probe_auroc.test"] > 0.8 and v["probe_auroc.disjoint"] > 0.8, "the planted flip signal"
    assert not v["label_probe_auroc.above_chance"], "a random label score is not above chance"
    assert v["settling_layer_median.test"] == 0 and v["n_draws"] == 200
    assert v["probe_auroc.lo"] <= v["probe_auroc.disjoint"] <= v["probe_auroc.hi"]
    with pytest.raises(ValueError, match="disjoint"):
        tp.probe_table(test, counts)


def test_tuned_lens_table(check_table):
    n_layers = 2
    corpus = pd.DataFrame({"trial_id": ["corpus:0", "corpus:1"], "kind": "corpus",
                           "kl_logit": [json.dumps([4.0, 1.0, 0.0])] * 2, "kl_tuned": [json.dumps([0.5, 0.2, 0.0])] * 2})
    trials = pd.DataFrame({"trial_id": ["a", "b"], "kind": "trial",
                           "lens_c": [json.dumps([[1, 0], [0, 1], [1, 0]]), json.dumps([[0, 1], [0, 1], [0, 1]])],
                           "lens_d": [json.dumps([[1, 0], [1, 0], [1, 0]])] * 2,
                           "tuned_c": [json.dumps([[1, 0], [1, 0], [1, 0]]), json.dumps([[1, 0], [0, 1], [0, 1]])],
                           "tuned_d": [json.dumps([[0, 1], [1, 0], [1, 0]])] * 2,
                           "kl_logit_c": [json.dumps([2.0, 1.0, 0.0])] * 2, "kl_logit_d": [json.dumps([2.0, 1.0, 0.0])] * 2,
                           "kl_tuned_c": [json.dumps([1.0, 0.5, 0.0])] * 2, "kl_tuned_d": [json.dumps([1.0, 0.5, 0.0])] * 2})
    res = tp.tuned_lens_table({"present": pd.concat([corpus, trials], ignore_index=True)})
    check_table(res)
    v = res.values
    assert v["present.n_layers"] == n_layers and v["present.n_heldout"] == 2
    assert v["present.corpus.tuned_at_most_logit"] and v["present.corpus.tuned_nonincreasing"]
    assert v["present.corpus.tuned_sum"] == pytest.approx(0.7)
    f = res.frame.set_index(["lens", "layer"])
    # final answers: c = yes, no; d = yes, yes. logit layer 0: c yes/no, d yes/yes -> 4/4; layer 1: c no/no -> 3/4
    assert f.loc[("logit", 0), "agreement_final"] == 1.0 and f.loc[("logit", 1), "agreement_final"] == 0.75
    # tuned layer 0: c yes, yes (1/2), d no, no (0/2) -> 1/4
    assert f.loc[("tuned", 0), "agreement_final"] == 0.25
    # tuned layer 1: c yes, no (2/2), d yes, yes (2/2) -> 1 > 0.75: tuned above at one layer
    assert f.loc[("tuned", 1), "agreement_final"] == 1.0
    assert v["present.agree.endpoint_equal"] and v["present.agree.n_layers_tuned_above"] == 1


def test_training_log_reads_the_best_loss_at_the_papers_steps():
    import json as _json

    from shovir_core.tables import modalens_appn_probes as _tp

    loss = [900.0 - k for k in range(1200)]
    counts = {"lens_training": _json.dumps({"steps": 1200, "n_texts": 50, "loss": loss})}
    log = _tp.training_log(counts)
    assert log.values["best_loss.100"] == 801.0 and log.values["best_loss.1000"] == -99.0
    assert "best_loss.2000" not in log.values and list(log.frame["steps"]) == [100, 1000]
    assert set(_tp.PAPER_KEYS) >= {f"lens.best_loss.{s}" for s in _tp.LOG_STEPS}
