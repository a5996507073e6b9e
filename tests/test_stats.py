"""Clustered bootstrap, nulls and regression against scipy / statsmodels / explicit loops."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from shovir_core import stats as S


def _trials(rng, n_clusters=40, max_per=6):
    sizes = rng.integers(1, max_per + 1, n_clusters)
    cl = np.repeat(np.arange(n_clusters), sizes)
    p = rng.uniform(0.05, 0.5, n_clusters)[cl]
    return pd.DataFrame({"patient": cl, "flip_A": (rng.random(len(cl)) < p).astype(int),
                         "flip_P": (rng.random(len(cl)) < p / 3).astype(int),
                         "later": rng.integers(0, 2, len(cl))})


def test_counts_are_multinomial_rows():
    c = S.draw_counts(293, n_draws=200, rng=np.random.default_rng(1))
    assert c.shape == (200, 293) and (c.sum(1) == 293).all()
    assert c.mean() == pytest.approx(1.0)
    with pytest.raises(TypeError, match="Generator"):
        S.draw_counts(3, n_draws=2, rng=np.random.RandomState(0))


def test_vectorised_equals_explicit_loop():
    """Same count matrix -> the same statistic as concatenating the sampled clusters' trials."""
    df = _trials(np.random.default_rng(2))
    res = S.cluster_bootstrap(df, cluster="patient", sums={"n": 1, "a": "flip_A", "p": "flip_P"},
                              statistic=S.paired_rates("a", "p"), n_draws=300, rng=np.random.default_rng(5))
    counts = S.draw_counts(df.patient.nunique(), n_draws=300, rng=np.random.default_rng(5))
    groups = [g for _, g in df.groupby("patient", sort=True)]
    diffs, ratios = [], []
    for row in counts:
        sample = pd.concat([groups[k] for k, m in enumerate(row) for _ in range(m)])
        diffs.append(sample.flip_A.mean() - sample.flip_P.mean())
        ratios.append(sample.flip_A.mean() / sample.flip_P.mean() if sample.flip_P.sum() else np.nan)
    np.testing.assert_allclose(res.draws[(None, "diff")], diffs)
    np.testing.assert_allclose(res.draws[(None, "ratio")], ratios)
    est, lo, hi = res.interval("diff")
    assert est == pytest.approx(df.flip_A.mean() - df.flip_P.mean())
    assert lo < est < hi
    assert res.seed == 5 and res.provenance()["n_draws"] == 300


def test_one_trial_per_cluster_matches_scipy():
    rng = np.random.default_rng(11)
    x = rng.normal(1.0, 2.0, 150)
    df = pd.DataFrame({"id": np.arange(150), "x": x})
    B = 10_000
    res = S.cluster_bootstrap(df, cluster="id", sums={"n": 1, "x": "x"}, statistic=S.rates(mean=("x", "n")),
                              n_draws=B, rng=np.random.default_rng(12))
    ref = st.bootstrap((x,), np.mean, n_resamples=B, method="percentile", confidence_level=0.95,
                       rng=np.random.default_rng(13)).confidence_interval
    est, lo, hi = res.interval("mean")
    se_boot = x.std(ddof=1) / np.sqrt(len(x))
    # Monte-Carlo SE of a 2.5% quantile of B draws: sqrt(p(1-p)/B) / density at the quantile
    mc_se = np.sqrt(0.025 * 0.975 / B) / (st.norm.pdf(1.96) / se_boot)
    tol = 4 * np.sqrt(2) * mc_se
    assert lo == pytest.approx(ref.low, abs=tol)
    assert hi == pytest.approx(ref.high, abs=tol)


def test_strata_scored_on_same_draw():
    df = _trials(np.random.default_rng(4))
    res = S.cluster_bootstrap(df, cluster="patient", sums={"n": 1, "a": "flip_A"}, statistic=S.rates(fr=("a", "n")),
                              n_draws=500, rng=np.random.default_rng(0), strata="later")
    assert set(res.table.stratum) == {0, 1}
    est, lo, hi = res.contrast("fr", 1, 0)
    assert est == pytest.approx(df[df.later == 1].flip_A.mean() - df[df.later == 0].flip_A.mean())
    d = res.draws[(1, "fr")] - res.draws[(0, "fr")]
    assert (lo, hi) == pytest.approx(S.percentile_interval(d))
    # each stratum's draws come from the one count matrix: recompute stratum 1 from it
    counts = S.draw_counts(df.patient.nunique(), n_draws=500, rng=np.random.default_rng(0))
    sub = df[df.later == 1]
    per = sub.groupby("patient").flip_A.agg(["sum", "size"]).reindex(sorted(df.patient.unique()), fill_value=0)
    expected = (counts @ per["sum"].to_numpy()) / (counts @ per["size"].to_numpy())
    np.testing.assert_allclose(res.draws[(1, "fr")], expected)


def test_joint_substitute_seed_resampling():
    rng = np.random.default_rng(8)
    base = _trials(rng, n_clusters=30)
    df = pd.concat([base.assign(seed=s, flip_A=(rng.random(len(base)) < 0.2 + 0.1 * s).astype(int))
                    for s in range(3)], ignore_index=True)
    res = S.cluster_bootstrap(df, cluster="patient", substitute="seed", sums={"n": 1, "a": "flip_A"},
                              statistic=S.rates(fr=("a", "n")), n_draws=2_000, rng=np.random.default_rng(1))
    est, lo, hi = res.interval("fr")
    assert est == pytest.approx(df.flip_A.mean())
    assert lo < est < hi
    assert res.unit == "patient x seed"
    # replay the draws: the same generator gives the same counts and seed splits
    rng2 = np.random.default_rng(1)
    counts = S.draw_counts(df.patient.nunique(), n_draws=2_000, rng=rng2)
    split = S.split_counts(counts, 3, rng=rng2)
    per = df.groupby(["patient", "seed"]).flip_A.agg(["sum", "size"]).unstack("seed")
    num = np.einsum("bks,ks->b", split, per["sum"].to_numpy())
    den = np.einsum("bks,ks->b", split, per["size"].to_numpy())
    np.testing.assert_allclose(res.draws[(None, "fr")], num / den)
    parts = S.split_counts(np.array([[3, 0, 5]]), 3, rng=np.random.default_rng(0))
    assert parts.shape == (1, 3, 3) and parts.sum(-1).tolist() == [[3, 0, 5]]
    many = S.split_counts(np.full((20_000, 1), 6), 3, rng=np.random.default_rng(2))[:, 0, :]
    np.testing.assert_allclose(many.mean(0), 2.0, atol=0.05)  # Multinomial(6, 1/3): mean 2
    np.testing.assert_allclose(many.var(0), 6 * (1 / 3) * (2 / 3), atol=0.08)


def test_item_bootstrap_resamples_rows_or_items():
    df = pd.DataFrame({"image": [0, 0, 1, 2, 3], "eligible": 1, "flipped": [1, 0, 1, 0, 1]})
    by_row = S.item_bootstrap(df, sums={"e": "eligible", "f": "flipped"}, statistic=S.rates(fr=("f", "e")),
                              n_draws=400, rng=np.random.default_rng(0))
    by_image = S.item_bootstrap(df, item="image", sums={"e": "eligible", "f": "flipped"},
                                statistic=S.rates(fr=("f", "e")), n_draws=400, rng=np.random.default_rng(0))
    assert by_row.table.n_clusters.iloc[0] == 5 and by_image.table.n_clusters.iloc[0] == 4
    assert by_row.interval("fr")[0] == pytest.approx(0.6)


def test_bootstrap_validation_names_the_problem():
    df = pd.DataFrame({"patient": [1, 2], "x": [1.0, np.nan]})
    with pytest.raises(ValueError, match="'x' has 1 missing"):
        S.cluster_bootstrap(df, cluster="patient", sums={"x": "x"}, statistic=S.rates(m=("x", "x")),
                            n_draws=10, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="no column 'pid'"):
        S.cluster_bootstrap(df, cluster="pid", sums={"n": 1}, statistic=S.rates(m=("n", "n")),
                            n_draws=10, rng=np.random.default_rng(0))


def test_balanced_accuracy_and_kappa_statistics_match_metrics():
    from shovir_core import metrics as M
    rng = np.random.default_rng(3)
    t = rng.integers(0, 2, 300)
    p = np.where(rng.random(300) < 0.75, t, 1 - t)
    df = pd.DataFrame({"pt": np.arange(300) // 3, "tp": p & t, "fn": (1 - p) & t, "tn": (1 - p) & (1 - t),
                       "fp": p & (1 - t), "agree": (p == t).astype(int), "ya": p, "yb": t})
    res = S.cluster_bootstrap(df, cluster="pt", n_draws=200, rng=np.random.default_rng(0),
                              sums={k: k for k in ("tp", "fn", "tn", "fp", "agree", "ya", "yb")} | {"n": 1},
                              statistic=S.combine(S.balanced_accuracy_stat(),
                                                  S.kappa_stat(yes_a="ya", yes_b="yb")))
    assert res.interval("balanced_accuracy")[0] == pytest.approx(M.balanced_accuracy(p, t))
    assert res.interval("cohen_kappa")[0] == pytest.approx(M.cohen_kappa(p, t))


def test_sign_flip_null():
    rng = np.random.default_rng(0)
    d = rng.normal(0, 1, 400)
    null = S.sign_flip_null(d, n_perm=2_000, rng=np.random.default_rng(1))
    assert null["p_value"] > 0.01 and abs(null["null_mean"]) < 0.01
    shifted = S.sign_flip_null(d + 0.5, clusters=np.arange(400) // 4, n_perm=2_000, rng=np.random.default_rng(1))
    assert shifted["p_value"] < 0.001
    # p-value by sign flips equals the exact enumeration on a tiny example
    tiny = S.sign_flip_null([1.0, 2.0, 3.0], n_perm=20_000, rng=np.random.default_rng(2))
    assert tiny["p_value"] == pytest.approx(2 / 8, abs=0.02)


def test_shuffled_pairing_null():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 300)
    b_dep = np.where(rng.random(300) < 0.9, a, 1 - a)
    res = S.shuffled_pairing_null(a, b_dep, S.jaccard, n_perm=300, rng=np.random.default_rng(1))
    assert res["observed"] > res["null_mean"] and res["p_value"] < 0.01
    g = np.repeat([0, 1], 150)
    res_g = S.shuffled_pairing_null(a, b_dep, S.phi, groups=g, n_perm=50, rng=np.random.default_rng(1))
    assert len(res_g["null"]) == 50


def test_jaccard_phi():
    a, b = np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0])
    assert S.jaccard(a, b) == pytest.approx(1 / 3)
    assert S.phi(a, a) == pytest.approx(1.0)
    assert S.phi(a, b) == pytest.approx(np.corrcoef(a, b)[0, 1])


def test_cluster_robust_logit_matches_statsmodels():
    import statsmodels.api as sm
    rng = np.random.default_rng(0)
    n = 2_000
    cl = rng.integers(0, 100, n)
    x = rng.integers(0, 2, n)
    u = rng.normal(0, 1, 100)[cl]
    y = (rng.random(n) < 1 / (1 + np.exp(-(-1.5 + 1.2 * x + u)))).astype(int)
    df = pd.DataFrame({"y": y, "x": x, "patient": cl})
    out = S.logistic_regression_cluster_robust(df, "y ~ x", cluster="patient")
    fit = sm.Logit(y, sm.add_constant(x)).fit(disp=False, cov_type="cluster", cov_kwds={"groups": cl})
    assert out.loc["x", "odds_ratio"] == pytest.approx(np.exp(fit.params[1]))
    assert out.loc["x", "se"] == pytest.approx(fit.bse[1])
    assert out.loc["x", "lo"] < out.loc["x", "odds_ratio"] < out.loc["x", "hi"]
    naive = sm.Logit(y, sm.add_constant(x)).fit(disp=False)
    assert out.loc["x", "se"] > naive.bse[1]  # clustering widens the interval here
    assert out.attrs["n_clusters"] == 100
