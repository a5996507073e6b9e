"""Agreement, chance agreement, response-bias floor; centred cosine distance and quartile bins."""
from __future__ import annotations

import numpy as np
import pytest

from shovir_core.metrics import cohen_kappa, response_bias_floor
from shovir_core.metrics.agreement import agreement_summary, chance_agreement
from shovir_core.metrics.distance import centred_cosine_distance, cohort_mean, quartile_bins


def test_chance_agreement_and_kappa():
    a = [1, 1, 1, 0, 0, 1, 0, 1]
    b = [1, 0, 1, 0, 1, 1, 0, 1]
    pa, pb = np.mean(a), np.mean(b)
    assert chance_agreement(a, b) == pytest.approx(pa * pb + (1 - pa) * (1 - pb))
    s = agreement_summary(a, b)
    assert s["agreement"] == pytest.approx(6 / 8)
    assert s["kappa"] == pytest.approx(cohen_kappa(a, b))
    assert s["kappa"] == pytest.approx((s["agreement"] - s["chance"]) / (1 - s["chance"]))
    assert s["floor"] == pytest.approx(response_bias_floor(a + b)) and s["n"] == 8


def test_equal_marginals_make_chance_the_floor_and_constant_answers_undefined():
    a = [1, 0, 0, 1, 0, 0]
    s = agreement_summary(a, a)  # an image-blind model: the same answers on both images
    assert s["chance"] == pytest.approx(s["floor"]) and s["agreement"] == 1.0 and s["kappa"] == pytest.approx(1.0)
    c = agreement_summary([0, 0, 0], [0, 0, 0])
    assert c["chance"] == c["floor"] == c["agreement"] == 1.0 and np.isnan(c["kappa"])
    with pytest.raises(ValueError, match="missing"):
        agreement_summary([1, np.nan], [1, 0])
    with pytest.raises(ValueError, match="length"):
        chance_agreement([1, 0], [1])


def test_centred_cosine_distance():
    e_c = np.array([[2.0, 1.0], [1.0, 1.0], [3.0, 1.0]])
    e_d = np.array([[1.0, 2.0], [2.0, 2.0], [1.0, 3.0]])
    mu = cohort_mean(np.vstack([e_c, e_d]))
    a, b = e_c - mu, e_d - mu
    want = 1 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(centred_cosine_distance(e_c, e_d, mean=mu), want)
    # without centring, parallel vectors are at distance 0
    assert centred_cosine_distance([[1.0, 1.0]], [[2.0, 2.0]])[0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="zero"):
        centred_cosine_distance([[1.0, 1.0]], [[2.0, 2.0]], mean=[1.0, 1.0])
    with pytest.raises(ValueError, match="shape"):
        centred_cosine_distance([[1.0, 1.0]], [[2.0, 2.0, 1.0]])


def test_quartile_bins_are_equal_sized_and_ordered():
    x = np.random.default_rng(0).random(101)
    q = quartile_bins(x)
    assert sorted(set(q)) == [1, 2, 3, 4] and max(np.bincount(q)[1:]) - min(np.bincount(q)[1:]) <= 1
    assert all(x[q == k].max() < x[q == k + 1].min() for k in (1, 2, 3))
    assert quartile_bins([1.0] * 8).tolist() == [1, 1, 2, 2, 3, 3, 4, 4]  # ties split by order
    with pytest.raises(ValueError):
        quartile_bins([1.0, 2.0])
