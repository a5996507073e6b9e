"""S_AUC and the per-target-class CheXbert F1 equal the authors' postprocessing exactly.

Two kinds of test:

* golden values: the numbers below were computed by running the authors' own code on the synthetic
  inputs built here (``_target_items`` / ``_curves``, fixed seeds), from a temporary copy outside the
  repository: arco-group/ShoViR-Bench ``evaluations/run_eval_chexbert_class.py``@add95d5
  (``compute_chexbert_f1_per_target_category`` with ``bootstrap_ci=True``, 500 resamples, seed 3; its
  CheXbert model replaced by a stub returning the synthetic labels, ``rrg_eval.factuality_utils.map_to_binary``
  by the rule the script relies on: code 1 positive under ``rrg-``, 1 or 3 under ``rrg+``) and
  ``src/postprocessing/plots/sensitivity_score.py``@07a7a6d (run as a script on result CSVs written from
  ``_curves``; its ``sensitivity_scores.csv`` read back with round-trip float parsing). The comparison is ``==``.
* live parity: with ``SHOVIR_BENCH_REPO`` pointing at a copy of the authors' repository (never inside this
  one), the same scripts run on several random inputs and every number must be equal; skipped otherwise.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.labels import CHEXPERT_CLASSES
from shovir_core.metrics.attack_sensitivity import s_auc, sensitivity_deltas, sensitivity_scores
from shovir_core.metrics.target_class import PythonChoiceStream, target_class_f1

BENCH = os.environ.get("SHOVIR_BENCH_REPO")
needs_bench = pytest.mark.skipif(
    not BENCH, reason="SHOVIR_BENCH_REPO is not set: the live parity runs the authors' scripts from a copy of "
                      "arco-group/ShoViR-Bench outside this repository (the golden-value tests cover it otherwise)")

_RAW = {1.0: 1, 0.0: 2, -1.0: 3}  # CheXpert code -> CheXbert head output (0 blank, 1 pos, 2 neg, 3 uncertain)


def _target_items(seed: int, n: int = 240, classes=("Atelectasis", "Cardiomegaly", "Edema", "Fracture",
                                                       "Pleural Effusion", "Support Devices")):
    rng = np.random.default_rng(seed)
    target = rng.choice(np.asarray(classes, dtype=object), size=n, p=np.linspace(1, 2, len(classes)) /
                        np.linspace(1, 2, len(classes)).sum())
    codes = np.array([1.0, 0.0, -1.0, np.nan])
    pred = rng.choice(codes, size=n, p=[0.45, 0.2, 0.15, 0.2])
    ref = np.where(rng.random(n) < 0.7, pred, rng.choice(codes, size=n, p=[0.5, 0.2, 0.2, 0.1]))
    return target, pred, ref


def _curves(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for model in ("MAIRA-2", "CXRMate", "RaDialog"):
        for cond in ("RO", "OCO", "DOCO"):
            base = rng.uniform(0.3, 0.8, size=4)
            for p in (0, 20, 40, 60, 80, 100):
                f = np.clip(base - rng.uniform(0, 0.1, size=4) * p / 20, 0, 1)
                for k, c in enumerate(("Atelectasis", "Cardiomegaly", "Edema", "Fracture")):
                    rows.append({"model": model, "condition": cond, "p": p, "class": c, "f1": float(f[k])})
    return pd.DataFrame(rows)


def test_python_choice_stream_replays_random_choice():
    import random

    r = random.Random(3)
    want = [r.choice(range(n)) for n in (1, 2, 3, 5, 7, 64, 65, 949) for _ in range(40)]
    s = PythonChoiceStream(3)
    got = np.concatenate([s.randbelow(n, 40) for n in (1, 2, 3, 5, 7, 64, 65, 949)]).tolist()
    assert got == want


# Golden values: authors' compute_chexbert_f1_per_target_category on _target_items(0), rrg-, bootstrap, 500, seed 3
GOLDEN_TARGET = {
    "Atelectasis": (0.96, 0.8440283400809716, 1.0),
    "Cardiomegaly": (0.7272727272727273, 0.47619047619047616, 0.8888888888888888),
    "Edema": (0.8235294117647058, 0.5390909090909091, 1.0),
    "Fracture": (0.8571428571428571, 0.7118663594470046, 0.9535173160173159),
    "Pleural Effusion": (0.8292682926829268, 0.6666666666666666, 0.9333333333333333),
    "Support Devices": (0.8888888888888888, 0.7915313734093901, 0.9629629629629629),
}
# and with bootstrap_ci=False (the point estimates)
GOLDEN_TARGET_POINT = {"Atelectasis": 0.9565217391304348, "Cardiomegaly": 0.72, "Edema": 0.8235294117647058,
                       "Fracture": 0.8571428571428571, "Pleural Effusion": 0.8292682926829268,
                       "Support Devices": 0.8846153846153846}


def test_target_class_f1_golden():
    target, pred, ref = _target_items(0)
    got = target_class_f1(target, pred, ref)
    for c, (med, lo, hi) in GOLDEN_TARGET.items():
        assert (got.loc[c, "median"], got.loc[c, "ci_l"], got.loc[c, "ci_h"]) == (med, lo, hi), c
    for c, f1 in GOLDEN_TARGET_POINT.items():
        assert got.loc[c, "f1"] == f1
    assert got.loc["Pneumonia", "n"] == 0 and np.isnan(got.loc["Pneumonia", "median"])
    with pytest.raises(ValueError, match="unknown target class 'atelectasis'"):
        target_class_f1(np.char.lower(target.astype(str)), pred, ref)


# Golden values: authors' sensitivity_score.py on _curves(0) as PadChest-GR and _curves(1) as MIMIC-CXR
GOLDEN_SAUC = {("MAIRA-2", "OCO"): 0.1997871013700101, ("CXRMate", "RO"): 0.2160947715163573,
               ("RaDialog", "DOCO"): 0.2645492172296815}
GOLDEN_DELTA = {("MAIRA-2", "OCO"): -0.08311802443378441, ("RaDialog", "DOCO"): 0.05827697038566307}


def _unweighted(curves: pd.DataFrame) -> pd.DataFrame:
    return curves.groupby(["model", "condition", "p"], as_index=False)["f1"].agg(lambda v: float(np.nanmean(v)))


def test_s_auc_golden():
    scores = sensitivity_scores(_unweighted(_curves(0)), value="f1")
    got = scores.set_index(["model", "condition"])["s_auc"]
    for key, want in GOLDEN_SAUC.items():
        assert got[key] == want, key
    deltas = sensitivity_deltas(scores).set_index(["model", "condition"])["delta_s_auc"]
    for key, want in GOLDEN_DELTA.items():
        assert deltas[key] == want, key


def test_s_auc_rules():
    s, s100 = s_auc([[0.5, 0.5, 0.5], [0.0, 0.1, 0.2], [np.nan, 0.1, 0.1]], [0, 50, 100])
    assert s[0] == 0 and s100[0] == 0 and np.isnan(s[1]) and np.isnan(s[2])
    with pytest.raises(ValueError, match="whole percent"):
        s_auc([[1, 1]], [0, 0.333])
    with pytest.raises(ValueError, match="start at 0"):
        s_auc([[1, 1]], [20, 40])


# ------------------------------------------------------------------------------------------- live parity
def _authors_target_module(monkeypatch):
    path = Path(BENCH) / "evaluations" / "run_eval_chexbert_class.py"
    if not path.is_file():
        pytest.skip(f"SHOVIR_BENCH_REPO={BENCH} has no evaluations/run_eval_chexbert_class.py")
    fu = types.ModuleType("rrg_eval.factuality_utils")
    fu.map_to_binary = lambda x, mode="rrg-": int(x == 1 or (mode == "rrg+" and x == 3))
    monkeypatch.setitem(sys.modules, "rrg_eval", types.ModuleType("rrg_eval"))
    monkeypatch.setitem(sys.modules, "rrg_eval.factuality_utils", fu)
    spec = importlib.util.spec_from_file_location("shovir_bench_chexbert_class", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _authors_target(mod, target, pred, ref, *, mode="rrg-", n_resamples=500, seed=3, bootstrap=True):
    rng = np.random.default_rng(99)
    n = len(target)
    cols = [list(rng.integers(0, 4, size=2 * n)) for _ in CHEXPERT_CLASSES]
    for i, c in enumerate(target):
        j = list(mod.CheXbert_CONDITIONS).index(c)
        cols[j][i] = 0 if np.isnan(pred[i]) else _RAW[float(pred[i])]
        cols[j][n + i] = 0 if np.isnan(ref[i]) else _RAW[float(ref[i])]

    class Stub:
        def __init__(self):
            pass

        def __call__(self, reports):
            assert len(reports) == 2 * n
            return cols

    mod.CheXbert = Stub
    return mod.compute_chexbert_f1_per_target_category(["p"] * n, ["r"] * n, list(target), uncertain_mode=mode,
                                                       bootstrap_ci=bootstrap, n_resamples=n_resamples, seed=seed)


@needs_bench
@pytest.mark.parametrize("seed,mode,n_resamples", [(0, "rrg-", 500), (1, "rrg+", 500), (2, "rrg-", 97)])
def test_target_class_f1_equals_the_authors_script(monkeypatch, seed, mode, n_resamples):
    mod = _authors_target_module(monkeypatch)
    target, pred, ref = _target_items(seed, n=180 + 40 * seed)
    theirs = _authors_target(mod, target, pred, ref, mode=mode, n_resamples=n_resamples)
    ours = target_class_f1(target, pred, ref, uncertain=mode, n_resamples=n_resamples)
    for c in CHEXPERT_CLASSES:
        t = theirs[c]
        got = ours.loc[c, ["median", "ci_l", "ci_h"]].tolist()
        want = [t["median"], t["ci_l"], t["ci_h"]]
        assert np.array_equal(got, want, equal_nan=True), (c, got, want)


def _write_results(root: Path, curves: pd.DataFrame, dataset: str) -> None:
    for (cond, p, model), g in curves.groupby(["condition", "p", "model"]):
        d = root / "results" / cond.lower() / ("p100" if p == 100 else f"p{int(p):02d}") / dataset
        d.mkdir(parents=True, exist_ok=True)
        row = pd.DataFrame([g.set_index("class")["f1"].to_dict()], index=["CheXbert F1 score"])
        row.to_csv(d / f"{model}.csv", float_format="%.17g")


@needs_bench
@pytest.mark.parametrize("seeds", [(0, 1), (5, 6)])
def test_s_auc_equals_the_authors_script(tmp_path, seeds):
    script = Path(BENCH) / "src" / "postprocessing" / "plots" / "sensitivity_score.py"
    if not script.is_file():
        pytest.skip(f"SHOVIR_BENCH_REPO={BENCH} has no src/postprocessing/plots/sensitivity_score.py")
    work = tmp_path / "bench"
    (work / "src" / "postprocessing" / "plots").mkdir(parents=True)
    (work / "src" / "postprocessing" / "plots" / "sensitivity_score.py").write_text(script.read_text())
    data = {"padchest-gr": _curves(seeds[0]), "mimic-cxr-jpg": _curves(seeds[1])}
    for ds, curves in data.items():
        _write_results(work, curves, ds)
    subprocess.run([sys.executable, str(work / "src/postprocessing/plots/sensitivity_score.py")], cwd=work,
                   check=True, capture_output=True, env={**os.environ, "MPLBACKEND": "Agg"})
    theirs = pd.read_csv(work / "results/plots/sensitivity_scores.csv", header=[0, 1], index_col=0)
    for ds, label in (("padchest-gr", "PadChest-GR"), ("mimic-cxr-jpg", "MIMIC-CXR")):
        # the script reads the CSVs it was given: score the same (printed) numbers
        curves = data[ds].assign(f1=lambda d: d["f1"].map(lambda v: float(f"{v:.17g}")))
        scores = sensitivity_scores(_unweighted(curves), value="f1")
        deltas = sensitivity_deltas(scores)
        for cond in ("RO", "OCO", "DOCO"):
            mine = scores[scores["condition"] == cond].set_index("model")
            for model in mine.index:
                assert theirs.loc[model, (f"{label}_raw_{cond}", "S_AUC")] == mine.loc[model, "s_auc"]
                assert theirs.loc[model, (f"{label}_raw_{cond}", "S_100")] == mine.loc[model, "s_100"]
        for cond in ("OCO", "DOCO"):
            mine = deltas[deltas["condition"] == cond].set_index("model")
            for model in mine.index:
                assert theirs.loc[model, (f"{label}_delta_{cond}", "Δ_S_AUC")] == mine.loc[model, "delta_s_auc"]
