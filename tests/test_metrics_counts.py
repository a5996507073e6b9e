"""The count functions are the one formula behind every rate, F1 and μ-F1 (scalar, per class, per draw)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core import metrics as M


def test_f1_and_mu_f1_from_counts_match_the_per_class_path():
    rng = np.random.default_rng(0)
    ref = pd.DataFrame(rng.choice([1.0, 0.0, -1.0, np.nan], size=(60, 3)), columns=["Edema", "Atelectasis", "Fracture"])
    pred = pd.DataFrame(rng.choice([1.0, 0.0, np.nan], size=(60, 3)), columns=ref.columns)
    table = M.per_class_f1(pred, ref, classes=list(ref.columns))
    assert np.allclose(M.f1_from_counts(table.tp, table.fp, table.fn), table.f1)
    n = table.tp + table.fp + table.fn + table.tn
    assert M.mu_f1_from_counts(table.tp, table.fp, table.fn, n) == pytest.approx(M.mu_f1(table.f1, n))
    # vectorised over draws: one row per draw, classes on the last axis
    draws = np.stack([table[["tp", "fp", "fn"]].to_numpy().T * k for k in (1, 2, 3)])  # (3, 3 counts, 3 classes)
    mu = M.mu_f1_from_counts(draws[:, 0], draws[:, 1], draws[:, 2], np.stack([n.to_numpy()] * 3))
    assert np.allclose(mu, M.mu_f1(table.f1, n))
    assert np.isnan(M.mu_f1_from_counts([0, 0], [0, 0], [0, 0], [0, 0]))


def test_rates_and_balanced_accuracy_from_counts():
    from sklearn.metrics import balanced_accuracy_score

    rng = np.random.default_rng(1)
    for _ in range(20):
        t = rng.integers(0, 2, 30)
        p = rng.integers(0, 2, 30)
        c = M.confusion(p, t)
        want = balanced_accuracy_score(t, p)
        assert M.balanced_accuracy_from_counts(c["tp"], c["fn"], c["tn"], c["fp"]) == pytest.approx(want)
        assert M.balanced_accuracy(p, t) == pytest.approx(want)
    # one class absent: the rate of the other (scikit-learn's convention), per draw
    out = M.balanced_accuracy_from_counts(np.array([3, 0]), np.array([1, 0]), np.array([0, 2]), np.array([0, 2]))
    assert out.tolist() == [0.75, 0.5]
    assert np.isnan(M.balanced_accuracy_from_counts(0, 0, 0, 0))
    assert M.rate_from_counts(np.array([1, 0]), np.array([4, 0])).tolist()[0] == 0.25
    assert np.isnan(M.rate_from_counts(1, 0))
