"""Frozen configuration hash, disjoint sampler, probes, AURC and the clustered test (ModaLens Table 26)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from shovir_core.stats import probes as pr


def test_hash_round_trips_and_a_tampered_config_fails():
    cfg = {"layer": 20, "findings": ["Edema", "Atelectasis"], "test": {"alpha": 0.05, "n_draws": 10000}}
    manual = hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert pr.config_sha256(cfg) == manual
    f = pr.FrozenConfig.freeze(cfg)
    assert f.sha256 == manual and f.prefix == manual[:8]
    f.check(json.loads(json.dumps(cfg)))  # a reloaded copy hashes the same
    reloaded = pr.FrozenConfig.freeze(json.loads(json.dumps(f.config)))
    assert reloaded.sha256 == f.sha256
    with pytest.raises(pr.FrozenConfigError, match="layer"):
        f.check({**cfg, "layer": 21})
    with pytest.raises(pr.FrozenConfigError):
        with pr.frozen(cfg):
            cfg["findings"].append("Pneumonia")  # changed during the run
    with pytest.raises(TypeError, match="JSON"):
        pr.config_sha256({"x": np.float64("nan")})


def test_disjoint_sampler_excludes_and_is_seeded():
    pool = [f"p{i:03d}" for i in range(50)]
    exclude = pool[:20]
    a, counts = pr.disjoint_patients(pool, exclude=exclude, n=10, seed=0)
    b, _ = pr.disjoint_patients(reversed(pool), exclude=exclude, n=10, seed=0)
    c, _ = pr.disjoint_patients(pool, exclude=exclude, n=10, seed=1)
    assert a == b and a != c and len(set(a)) == 10
    assert not set(a) & set(exclude)
    assert counts == {"n_pool": 50, "n_excluded": 20, "n_available": 30}
    with pytest.raises(ValueError, match="available"):
        pr.disjoint_patients(pool, exclude=exclude, n=31, seed=0)


def test_aurc_by_hand():
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    losses = np.array([1, 0, 1, 0])
    # kept in order 0.1 (0), 0.3 (0), 0.5 (1), 0.9 (1): risks 0, 0, 1/3, 1/2
    cov, risk = pr.risk_coverage(scores, losses)
    np.testing.assert_allclose(cov, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 0, 1 / 3, 1 / 2])
    assert pr.aurc(scores, losses) == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)
    # the reverse order is the worst: risks 1, 1, 2/3, 1/2
    assert pr.aurc(-scores, losses) == pytest.approx((1 + 1 + 2 / 3 + 1 / 2) / 4)
    # a constant score: every coverage has the overall risk
    assert pr.aurc(np.zeros(4), losses) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pr.aurc(np.array([np.nan, 1.0]), np.array([0, 1]))


def test_probe_finds_a_linear_signal_out_of_fold():
    rng = np.random.default_rng(0)
    n = 300
    groups = np.repeat(np.arange(100), 3)
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 8))
    X[:, 2] += 2.5 * y
    model, oof = pr.fit_probe(X, y, groups=groups, n_folds=5, seed=0)
    assert not np.isnan(oof).any()
    assert pr.auroc(oof, y) > 0.8
    noise, oof_noise = pr.fit_probe(rng.normal(size=(n, 8)), y, groups=groups, seed=0)
    assert abs(pr.auroc(oof_noise, y) - 0.5) < 0.12
    _, again = pr.fit_probe(X, y, groups=groups, n_folds=5, seed=0)
    np.testing.assert_array_equal(oof, again)
    with pytest.raises(ValueError, match="both classes"):
        pr.fit_probe(X, np.zeros(n), groups=groups)


def test_clustered_difference_test_two_sided():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(80), 4)
    x = (rng.random(len(clusters)) < 0.3).astype(float)

    def mean(rows):
        return float(x[rows].mean())

    same = pr.clustered_difference_test(clusters, mean, baseline=x.mean(), n_draws=500, seed=0)
    assert not same["rejects"] and same["diff_lo"] < 0 < same["diff_hi"]
    above = pr.clustered_difference_test(clusters, mean, baseline=0.05, n_draws=500, seed=0)
    below = pr.clustered_difference_test(clusters, mean, baseline=0.6, n_draws=500, seed=0)
    assert above["rejects"] and above["diff_lo"] > 0
    assert below["rejects"] and below["diff_hi"] < 0
    again = pr.clustered_difference_test(clusters, mean, baseline=0.05, n_draws=500, seed=0)
    assert again == above
    assert above["n_clusters"] == 80 and above["estimate"] == pytest.approx(x.mean())


def test_stratified_auroc_ignores_what_separates_the_strata():
    # within each stratum the score is uninformative; across strata it tracks the label's base rate
    strata = np.array(["a"] * 4 + ["b"] * 4)
    labels = np.array([1, 1, 1, 0, 0, 0, 0, 1])
    scores = np.array([0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1])
    assert pr.auroc(scores, labels) > 0.7
    assert pr.stratified_auroc(scores, labels, strata) == pytest.approx(0.5)
    perfect = np.array([0.9, 0.8, 0.7, 0.1, 0.2, 0.3, 0.1, 0.95])
    assert pr.stratified_auroc(perfect, labels, strata) == pytest.approx(1.0)
    assert np.isnan(pr.stratified_auroc(scores, np.ones(8), strata))


@pytest.mark.parametrize("seed", range(6))
def test_rank_auroc_equals_sklearn_including_ties(seed):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    labels = rng.integers(0, 2, n)
    labels[:2] = [0, 1]
    # coarse scores: many ties within and across the classes; seeds 0-2 use bool labels, 3-5 labels {3, 7}
    scores = np.round(rng.normal(size=n) + 0.7 * labels, 1 if seed % 2 else 0)
    y = labels.astype(bool) if seed < 3 else np.where(labels == 1, 7, 3)
    assert pr.auroc(scores, y) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    assert pr.auroc(-scores, y) == pytest.approx(1 - pr.auroc(scores, y), abs=1e-12)


def test_rank_auroc_edge_cases():
    assert np.isnan(pr.auroc(np.array([0.1, 0.2]), np.array([1, 1])))
    assert pr.auroc(np.ones(4), np.array([0, 1, 0, 1])) == 0.5  # all tied
    with pytest.raises(ValueError):
        pr.auroc(np.array([0.1, np.nan]), np.array([0, 1]))
    with pytest.raises(ValueError):
        pr.auroc(np.array([0.1, 0.2, 0.3]), np.array([0, 1, 2]))


@pytest.mark.parametrize("seed", range(4))
def test_average_ranks_are_scipys_and_stratified_auroc_is_the_per_stratum_loop(seed):
    """The bootstrap's lean ranks equal scipy's rankdata bit for bit (ties included), and the sorted-strata
    split of stratified_auroc gives what a mask per sorted stratum gives, integer or string strata."""
    from scipy.stats import rankdata

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    x = np.round(rng.normal(size=n), seed % 3)  # seeds 0 and 3: integer-valued, many ties
    assert pr._average_ranks(x).tobytes() == rankdata(x).tobytes()
    labels = rng.integers(0, 2, n)
    strata = rng.choice(np.array(["q10", "q2", "q7"]), n)
    total = weight = 0.0
    for key in np.unique(strata):
        m = strata == key
        if len(np.unique(labels[m])) == 2:
            total += pr.auroc(x[m], labels[m]) * m.sum()
            weight += m.sum()
    want = total / weight if weight else np.nan
    codes = np.unique(strata, return_inverse=True)[1]
    for g in (strata, codes):
        got = pr.stratified_auroc(x, labels, g)
        assert got == want or (np.isnan(got) and np.isnan(want))
