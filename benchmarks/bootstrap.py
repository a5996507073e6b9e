"""Benchmark: vectorised clustered bootstrap vs a plain per-draw loop, in one process.

The ModaLens headline interval: 10,000 draws over 44,786 trials (3,199 cases × 14
questions) in 293 patient clusters, statistic = paired flip rates (report absent vs
present) with their difference and ratio computed inside each draw.

Target: vectorised ≤ 0.5 s and ≥ 20× faster than the loop. Each timing is the best
of ``--repeat`` runs (as ``timeit`` does), so load from other processes inflates it
less. The loop runs ``--loop-draws`` draws and its time is scaled to ``--draws``.

Second case (``--case appb``), ModaLens App. B at the paper's size: 6,398 pair-condition rows
(3,199 one-question pairs x report present/absent) in 293 patient clusters, 2,000 draws. Timed
together: the cluster-robust logistic regression of flip on z(distance) + label change + report
(statsmodels), its patient-clustered bootstrap cross-check (every draw refitted, all draws at
once: ``stats.logistic``) and the bootstrap of the one-question Q4 - Q1 flip-rate difference
(``tables.modalens_appb.fr_by_quartile``). Baseline: the plain way, one statsmodels refit and one
pandas groupby per draw (``--appb-loop-draws`` draws, scaled). Target: ≤ 2 s. The CPU time of one
run is printed as well: on a shared machine the wall time grows with the other processes' load.

    python benchmarks/bootstrap.py [--case all|headline|appb] [--draws 10000] [--loop-draws 2000]
                                   [--appb-draws 2000] [--appb-loop-draws 40] [--repeat 3] [--seed 0]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from limits import verdict
from shovir_core.stats import cluster_bootstrap, paired_rates


def synthetic_trials(*, n_trials: int, n_clusters: int, rng: np.random.Generator) -> pd.DataFrame:
    """Trials with uneven cluster sizes and cluster-level flip propensities."""
    sizes = rng.multinomial(n_trials - n_clusters, rng.dirichlet(np.full(n_clusters, 2.0))) + 1
    patient = np.repeat(np.arange(n_clusters), sizes)
    p = rng.beta(2, 20, n_clusters)[patient]
    return pd.DataFrame({"patient_id": patient,
                         "flip_A": (rng.random(n_trials) < 3.6 * p).astype(np.int8),
                         "flip_P": (rng.random(n_trials) < p).astype(np.int8)})


def loop_bootstrap(df: pd.DataFrame, *, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """The plain way: per draw, sample patients, concatenate their trials, compute the statistic."""
    rows = [np.flatnonzero(df.patient_id.to_numpy() == k) for k in np.sort(df.patient_id.unique())]
    a, p = df.flip_A.to_numpy(), df.flip_P.to_numpy()
    out = np.empty(n_draws)
    for b in range(n_draws):
        take = np.concatenate([rows[k] for k in rng.integers(0, len(rows), len(rows))])
        out[b] = a[take].mean() - p[take].mean()
    return out


def appb_rows(*, n_pairs: int, n_clusters: int, rng: np.random.Generator) -> pd.DataFrame:
    """Pair-condition rows like App. B's: flips from a logistic model with the paper's odds ratios."""
    from shovir_core.metrics.distance import quartile_bins

    sizes = rng.multinomial(n_pairs - n_clusters, rng.dirichlet(np.full(n_clusters, 2.0))) + 1
    patient = np.repeat(np.arange(n_clusters), sizes)
    distance = rng.gamma(4.0, 0.15, n_pairs)
    z = (distance - distance.mean()) / distance.std()
    label = (rng.random(n_pairs) < 0.7).astype(float)
    q = quartile_bins(distance)
    rows = []
    for report, log_or in ((1.0, np.log(0.12)), (0.0, 0.0)):
        eta = -2.2 + np.log(1.30) * z + np.log(1.43) * label + log_or
        flip = (rng.random(n_pairs) < 1 / (1 + np.exp(-eta))).astype(float)
        rows.append(pd.DataFrame({"patient_id": patient, "case_id": np.arange(n_pairs), "flip": flip, "z_distance": z,
                                  "distance": distance, "label_changed": label, "report_present": report,
                                  "quartile": q}))
    return pd.concat(rows, ignore_index=True)


def appb_loop(rows: pd.DataFrame, *, n_draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per draw: resample patients, concatenate their rows, refit statsmodels, recompute Q4 - Q1."""
    import statsmodels.formula.api as smf

    from shovir_core.tables.modalens_appb import FORMULA

    groups = [g for _, g in rows.groupby("patient_id", sort=True)]
    odds, q41 = np.empty(n_draws), np.empty(n_draws)
    for b in range(n_draws):
        draw = pd.concat([groups[k] for k in rng.integers(0, len(groups), len(groups))], ignore_index=True)
        odds[b] = np.exp(smf.logit(FORMULA, data=draw).fit(disp=False).params["z_distance"])
        absent = draw[draw["report_present"] == 0].groupby("quartile")["flip"].mean()
        q41[b] = absent.get(4, np.nan) - absent.get(1, np.nan)
    return odds, q41


def run_appb(args) -> None:
    from shovir_core.tables.modalens_appb import flip_regression, fr_by_quartile

    rows = appb_rows(n_pairs=args.appb_pairs, n_clusters=args.clusters, rng=np.random.default_rng(args.seed))

    def vectorised():
        reg = flip_regression(rows, n_draws=args.appb_draws, seed=args.seed + 1)
        byq = fr_by_quartile(rows, n_draws=args.appb_draws, seed=args.seed + 1)
        return reg, byq

    t_vec, (reg, byq) = best_of(vectorised, args.repeat)
    c0 = time.process_time()
    vectorised()
    cpu = time.process_time() - c0   # CPU seconds of one run: what the wall time is on an idle core
    t_loop, (odds, q41) = best_of(lambda: appb_loop(rows, n_draws=args.appb_loop_draws,
                                                    rng=np.random.default_rng(args.seed + 2)), 1)
    t_loop *= args.appb_draws / args.appb_loop_draws
    v, q = reg.values, byq.values
    print(f"App. B: rows={len(rows):,} clusters={rows.patient_id.nunique()} draws={args.appb_draws:,}")
    print(f"vectorised: {t_vec:.3f} s wall (best of {args.repeat}), {cpu:.3f} s CPU; regression + bootstrap "
          f"refits + Q4-Q1   "
          f"OR/SD {v['reg.z_distance.odds_ratio']:.3f} robust [{v['reg.z_distance.lo']:.3f}, "
          f"{v['reg.z_distance.hi']:.3f}] bootstrap [{v['reg.z_distance.boot_lo']:.3f}, "
          f"{v['reg.z_distance.boot_hi']:.3f}]   A Q4-Q1 {q['byq.absent.q4_minus_q1_pp']:+.2f} pp "
          f"[{q['byq.absent.q4_minus_q1_lo_pp']:+.2f}, {q['byq.absent.q4_minus_q1_hi_pp']:+.2f}]")
    lo, hi = np.nanquantile(odds, [0.025, 0.975])
    print(f"loop:       {t_loop:.3f} s ({args.appb_loop_draws} draws scaled to {args.appb_draws:,})   "
          f"OR/SD interval [{lo:.3f}, {hi:.3f}] (few draws)")
    print(f"speed-up:   {t_loop / t_vec:.1f}x   (target: vectorised <= 2 s)")


def best_of(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def run_headline(args) -> None:
    df = synthetic_trials(n_trials=args.trials, n_clusters=args.clusters, rng=np.random.default_rng(args.seed))

    def vectorised():
        return cluster_bootstrap(df, cluster="patient_id", sums={"n": 1, "a": "flip_A", "p": "flip_P"},
                                 statistic=paired_rates("a", "p", names=("fr_A", "fr_P")),
                                 n_draws=args.draws, rng=np.random.default_rng(args.seed + 1))

    t_vec, res = best_of(vectorised, args.repeat)
    t_loop, loop = best_of(lambda: loop_bootstrap(df, n_draws=args.loop_draws,
                                                  rng=np.random.default_rng(args.seed + 2)), args.repeat)
    t_loop *= args.draws / args.loop_draws

    est, lo, hi = res.interval("diff")
    lo_l, hi_l = np.quantile(loop, [0.025, 0.975])
    print(f"trials={len(df):,} clusters={df.patient_id.nunique()} draws={args.draws:,}")
    print(f"vectorised: {t_vec:.3f} s (best of {args.repeat})   diff {est:+.4f} [{lo:+.4f}, {hi:+.4f}]")
    print(f"loop:       {t_loop:.3f} s (best of {args.repeat}, {args.loop_draws:,} draws scaled to {args.draws:,})   "
          f"diff interval [{lo_l:+.4f}, {hi_l:+.4f}]")
    print(verdict("speed-up loop / vectorised", t_loop / t_vec, at_least=20) + "   (and vectorised <= 0.5 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("all", "headline", "appb"), default="all")
    ap.add_argument("--draws", type=int, default=10_000)
    ap.add_argument("--loop-draws", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, default=44_786)
    ap.add_argument("--clusters", type=int, default=293)
    ap.add_argument("--appb-pairs", type=int, default=3_199)
    ap.add_argument("--appb-draws", type=int, default=2_000)
    ap.add_argument("--appb-loop-draws", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.case in ("all", "headline"):
        run_headline(args)
    if args.case in ("all", "appb"):
        run_appb(args)


if __name__ == "__main__":
    main()
