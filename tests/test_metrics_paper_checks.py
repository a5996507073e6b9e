"""Paper-map Part E: pure-arithmetic consistency checks, computed through the metric functions.

Each case builds trial vectors with the published counts, runs them through the
same functions the notebooks use, and compares with the value the paper prints
(to the printed precision, via the metric schema's formatter).
"""
import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from shovir_core import metrics as M


def _indicator(k: int, n: int) -> np.ndarray:
    return np.r_[np.ones(k, int), np.zeros(n - k, int)]


@pytest.mark.parametrize("correct,n,printed", [(29_029, 44_786, "0.648"), (26_359, 44_786, "0.589")])
def test_accuracy_counts(correct, n, printed):  # E3, E4
    target = np.ones(n, int)
    assert M.format_metric("accuracy", M.accuracy(_indicator(correct, n), target)) == printed


@pytest.mark.parametrize("flipped,n,printed", [
    (2_105, 44_786, "4.70%"),    # E5 headline P
    (1_703, 35_439, "4.81%"),    # E7 label-unchanged P
    (402, 9_347, "4.30%"),       # E7 label-changed P
    (6_256, 35_439, "17.65%"),   # E8
    (7_644, 44_786, "17.07%"),   # E8 headline A
    (45, 3_199, "1.41%"), (44, 3_199, "1.38%"), (91, 3_199, "2.84%"),  # E17
    (329, 3_199, "10.28%"),      # E18
    (584, 3_199, "18.26%"), (55, 3_199, "1.72%"), (48, 3_199, "1.50%"),  # E20, E21
    (491, 3_199, "15.35%"), (655, 3_199, "20.48%"),  # E24
])
def test_flip_rate_counts(flipped, n, printed):
    c = np.zeros(n, int)
    d = _indicator(flipped, n)
    assert M.format_metric("flip_rate", M.flip_rate(c, d)) == printed


def test_unchanged_rate_is_one_minus_flip_rate():  # E35
    fr = M.flip_rate(np.zeros(44_786), _indicator(2_105, 44_786))
    assert M.format_metric("unchanged_rate", 1 - fr) == "0.953"


def test_label_changed_split_adds_up():  # E6, E7, E8
    assert 9_347 + 35_439 == 44_786
    assert 2_105 - 1_703 == 402
    diff = M.paired_difference(402 / 9_347, 1_703 / 35_439)
    assert M.format_metric("paired_diff", diff) == "-0.50 pp"
    a_changed = round(0.1485 * 9_347)
    assert a_changed == 1_388 and 6_256 + a_changed == 7_644
    assert M.format_metric("paired_diff", 0.1485 - 6_256 / 35_439) == "-2.80 pp"


@pytest.mark.parametrize("fa,fp,diff,ratio", [
    (7_644 / 44_786, 2_105 / 44_786, "+12.37 pp", "3.6x"),   # E15 headline
    (491 / 3_199, 83 / 3_199, "+12.75 pp", "5.9x"),          # E24 LLaVA-NeXT
    (655 / 3_199, 28 / 3_199, "+19.60 pp", "23.4x"),         # E24 Qwen3.5-27B
])
def test_paired_difference_and_ratio(fa, fp, diff, ratio):
    assert M.format_metric("paired_diff", M.paired_difference(fa, fp)) == diff
    assert M.format_metric("ratio", M.ratio(fa, fp)) == ratio


def test_seed_counts_effects():  # E19
    effects = [(a - p) / 3_199 for a, p in ((329, 44), (320, 43), (330, 42))]
    assert [M.format_metric("paired_diff", e) for e in effects] == ["+8.91 pp", "+8.66 pp", "+9.00 pp"]


def test_transitions_sum_to_one():  # E9: non-flip <=> correctness change on label-changed trials
    n = 9_347
    c2w, w2c, flips = round(0.613 * n), round(0.344 * n), 402
    w2w = flips - 295
    correct_c = np.r_[np.ones(c2w), np.zeros(w2c), np.ones(295), np.zeros(w2w)]
    correct_d = np.r_[np.zeros(c2w), np.ones(w2c), np.ones(295), np.zeros(w2w)]
    t = M.transitions(correct_c, correct_d)
    assert t.n.sum() == pytest.approx(n, abs=2)
    assert t.loc[["correct->correct", "wrong->wrong"], "n"].sum() == flips
    assert t.share.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("cells,printed", [
    ({"full": 0.717, "report+q": 0.770, "image+q": 0.665, "q": 0.500}, "-0.218"),  # E28 pooled
    ({"full": 0.767, "report+q": 0.837, "image+q": 0.655, "q": 0.500}, "-0.225"),  # composite excluded
    ({"full": 0.718, "report+q": 0.776, "image+q": 0.580, "q": 0.500}, "-0.138"),  # macro
])
def test_modality_interaction_arithmetic(cells, printed):
    assert M.format_metric("interaction", M.interaction_from_cells(cells)["interaction"]) == printed


def test_manual_label_kappa():  # E31: agreement 0.943, sens 0.894, precision 0.773 -> kappa 0.795
    n, manual_pos = 4_074, round(0.155 * 4_074)
    tp = round(0.894 * manual_pos)
    auto_pos = round(tp / 0.773)
    fp, fn = auto_pos - tp, manual_pos - tp
    tn = n - tp - fp - fn
    manual = np.r_[np.ones(tp), np.zeros(fp), np.ones(fn), np.zeros(tn)]
    auto = np.r_[np.ones(tp), np.ones(fp), np.zeros(fn), np.zeros(tn)]
    assert M.format_metric("accuracy", M.accuracy(auto, manual)) == "0.943"
    assert M.format_metric("accuracy", auto.mean()) == "0.179"
    kappa = M.cohen_kappa(manual, auto)
    assert kappa == pytest.approx(skm.cohen_kappa_score(manual, auto))
    assert kappa == pytest.approx(0.795, abs=0.002)


def test_medgemma4b_sensitivity_specificity():  # E26
    pos, neg, yes = 2_707, 492, 2_422
    fp = round((1 - 0.77) * neg)
    tp = yes - fp
    target = np.r_[np.ones(pos), np.zeros(neg)]
    pred = np.r_[np.ones(tp), np.zeros(pos - tp), np.ones(fp), np.zeros(neg - fp)]
    assert M.sensitivity(pred, target) == pytest.approx(0.853, abs=0.001)
    # specificity is printed as 0.77 (±0.005), so BA is known to ±0.0025
    assert M.balanced_accuracy(pred, target) == pytest.approx(0.810, abs=0.003)


def test_majority_baseline_all14():  # B.2: 0.796 for all-14
    target = _indicator(round(0.204 * 44_786), 44_786)
    assert M.format_metric("majority_baseline", M.majority_baseline(target)) == "0.796"


def test_shovir_counts_and_zero_occlusion():  # E41, E47 (structural)
    assert 3_858 - 1_397 - 232 == 2_229 and 2_229 - 2_160 == 69
    y = pd.DataFrame({"Edema": [1, 1, 0], "Atelectasis": [1, 0, 1]})
    ro = pd.DataFrame({"Edema": [1, 0, 0], "Atelectasis": [1, 0, 1]})
    table = M.flip_rate_by_class(y, ro, ro)
    assert M.pooled_flip_rate(table) == 0.0
    f1 = M.per_class_f1(ro, y, classes=["Edema", "Atelectasis"]).f1
    assert M.delta_x(M.mu_f1(f1, y.sum()), M.mu_f1(f1, y.sum())) == 0.0
