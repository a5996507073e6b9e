"""Batched logistic fits: agreement with statsmodels, bootstrap draws as refits, pseudo-true values."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from shovir_core.stats import draw_counts, logistic_regression_cluster_robust
from shovir_core.stats.logistic import (design_matrices, fractional_logistic, logistic_cluster_bootstrap,
                                        logistic_fit)


def _data(n=600, k=60, seed=0):
    rng = np.random.default_rng(seed)
    pid = rng.integers(0, k, n)
    z = rng.normal(size=n)
    lab = rng.integers(0, 2, n).astype(float)
    rep = rng.integers(0, 2, n).astype(float)
    eta = -1.0 + 0.5 * z + 0.4 * lab - 1.2 * rep
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return pd.DataFrame({"flip": y, "z": z, "lab": lab, "rep": rep, "pid": pid})


FORMULA = "flip ~ z + lab + rep"


def test_single_fit_equals_statsmodels():
    d = _data()
    y, X, terms = design_matrices(d, FORMULA)
    fit = logistic_fit(X, y)
    ref = sm.Logit(y, X).fit(disp=False)
    assert bool(fit.converged) and terms == ["Intercept", "z", "lab", "rep"]
    np.testing.assert_allclose(fit.coef, ref.params, rtol=0, atol=1e-8)


def test_batched_weights_equal_refits_with_frequency_weights():
    d = _data(seed=1)
    y, X, _ = design_matrices(d, FORMULA)
    codes, clusters = pd.factorize(d["pid"], sort=True)
    counts = draw_counts(len(clusters), n_draws=5, rng=np.random.default_rng(3))
    w = counts[:, codes].astype(float)
    batch = logistic_fit(X, y, weights=w)
    for b in range(5):
        ref = sm.GLM(y, X, family=sm.families.Binomial(), freq_weights=w[b]).fit()
        np.testing.assert_allclose(batch.coef[b], ref.params, atol=1e-7)
        single = logistic_fit(X, y, weights=w[b], start=np.zeros(4))
        np.testing.assert_allclose(single.coef, batch.coef[b], atol=1e-9)


def test_separation_is_flagged_not_returned():
    X = np.column_stack([np.ones(6), [0, 0, 0, 1, 1, 1.0]])
    fit = logistic_fit(X, [0, 1, 0, 1, 1, 1.0])
    assert not fit.converged and np.isnan(fit.coef).all()
    batch = logistic_fit(X, [0, 1, 0, 1, 1, 1.0], weights=[[1] * 6, [1, 1, 1, 0, 0, 0]])
    assert not batch.converged.any()
    with pytest.raises(ValueError, match="y must lie"):
        logistic_fit(X, [0, 2, 0, 1, 1, 1.0])


def test_fractional_logistic_recovers_the_generating_coefficients():
    d = _data(seed=2)
    beta = np.array([-0.3, 0.8, -0.5, 0.2])
    _, X, _ = design_matrices(d, FORMULA)
    p = 1 / (1 + np.exp(-X @ beta))
    got = fractional_logistic(d, "z + lab + rep", probability=p)
    np.testing.assert_allclose(got.to_numpy(), beta, atol=1e-8)


def test_cluster_bootstrap_brackets_the_fit_and_matches_the_sandwich_width():
    d = _data(n=3000, k=200, seed=4)
    boot = logistic_cluster_bootstrap(d, FORMULA, cluster="pid", n_draws=400, rng=np.random.default_rng(0))
    robust = logistic_regression_cluster_robust(d, FORMULA, cluster="pid")
    np.testing.assert_allclose(boot["coef"], robust["coef"], atol=1e-7)
    assert (boot["lo"] < boot["odds_ratio"]).all() and (boot["odds_ratio"] < boot["hi"]).all()
    widths = np.log(boot["hi"] / boot["lo"]) / np.log(robust["hi"] / robust["lo"])
    assert ((widths > 0.7) & (widths < 1.4)).all(), widths
    assert boot.attrs["n_draws"] == 400 and boot.attrs["seed"] == 0 and boot["n_failed"].iloc[0] == 0
    again = logistic_cluster_bootstrap(d, FORMULA, cluster="pid", n_draws=400, rng=np.random.default_rng(0))
    pd.testing.assert_frame_equal(boot, again)
