"""Per-target-class CheXbert F1 with the authors' bootstrap (ShoViR disease-level evaluation).

arco-group/ShoViR-Bench ``evaluations/run_eval_chexbert_class.py``@add95d5
(``compute_chexbert_f1_per_target_category``) scores one result file (one model, arm and p): each item
counts only for its target class c, with y_true = CheXbert(reference report)[c] and
y_pred = CheXbert(generated report)[c], binarised ``rrg-`` (positive only) or ``rrg+`` (positive or
uncertain), and F1_c is scikit-learn's binary F1 (zero_division 0). Its bootstrap draws, for the classes
in CheXbert head order, ``n_resamples`` (500) resamples of the class's items with replacement, each item
by ``random.Random(seed).choice`` (seed 3) from ONE generator shared by the classes, and reports the
2.5 / 50 / 97.5 percentiles of the resampled F1 (``np.percentile``).

Here the same numbers come vectorised: :class:`PythonChoiceStream` replays ``random.Random(seed)``'s
Mersenne Twister on numpy's ``MT19937`` (the same 624-word state) and applies CPython's rejection rule of
``_randbelow`` (``getrandbits(k)`` = the top k bits of one 32-bit word, redrawn while ≥ n) to whole blocks,
so the resampled indices, the F1 of every resample and the percentiles equal the script's bit for bit
(``tests/test_metrics_target_class.py``; F = 2 TP / (2 TP + FP + FN) is scikit-learn's
``(1 + β²) TP / (β² (TP + FN) + TP + FP)`` at β = 1 on the same integers).
"""
from __future__ import annotations

import random

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES
from .classification import f1_from_counts

__all__ = ["PythonChoiceStream", "binarize_chexbert", "target_class_f1", "UNCERTAIN_MODES"]

UNCERTAIN_MODES = ("rrg-", "rrg+")
"""The script's binarisations: ``rrg-`` counts positive (code 1) only, ``rrg+`` also uncertain (−1)."""


class PythonChoiceStream:
    """Indices ``random.Random(seed)._randbelow(n)`` would return, in blocks (what ``choice`` draws).

    >>> import random
    >>> r = random.Random(3)
    >>> [r.choice(range(7)) for _ in range(5)] == PythonChoiceStream(3).randbelow(7, 5).tolist()
    True
    """

    def __init__(self, seed: int):
        state = random.Random(seed).getstate()[1]
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937",
                            "state": {"key": np.asarray(state[:624], dtype=np.uint32), "pos": int(state[624])}}
        self._pending = np.empty(0, dtype=np.uint64)

    def _words(self, count: int) -> np.ndarray:
        if count > len(self._pending):
            self._pending = np.concatenate([self._pending, self._bits.random_raw(count - len(self._pending))])
        return self._pending[:count]

    def randbelow(self, n: int, count: int) -> np.ndarray:
        """The next ``count`` values of ``_randbelow(n)`` (``int64``), consuming the words they use."""
        if n < 1 or n >= 2 ** 32:
            raise ValueError(f"randbelow: n must be in [1, 2**32), got {n}")
        if count == 0:
            return np.empty(0, dtype=np.int64)
        k = int(n).bit_length()
        need = int(count * (2 ** k) / n * 1.05) + 64
        while True:
            r = (self._words(need) >> np.uint64(32 - k)).astype(np.int64)
            ok = np.flatnonzero(r < n)
            if len(ok) >= count:
                used = int(ok[count - 1]) + 1
                out = r[ok[:count]]
                self._pending = self._pending[used:]
                return out
            need *= 2


def binarize_chexbert(codes, *, uncertain: str = "rrg-") -> np.ndarray:
    """0/1 of CheXpert codes (1 positive, 0 negative, −1 uncertain, NaN blank) under ``rrg-`` / ``rrg+``.

    >>> binarize_chexbert([1.0, 0.0, -1.0, np.nan], uncertain="rrg+").tolist()
    [1, 0, 1, 0]
    """
    if uncertain not in UNCERTAIN_MODES:
        raise ValueError(f"uncertain must be one of {UNCERTAIN_MODES}, got {uncertain!r}")
    c = np.asarray(codes, dtype=float)
    pos = (c == 1.0) | ((c == -1.0) if uncertain == "rrg+" else False)
    return pos.astype(np.int64)


def target_class_f1(target, pred, ref, *, uncertain: str = "rrg-", bootstrap: bool = True,
                    n_resamples: int = 500, seed: int = 3, classes=CHEXPERT_CLASSES) -> pd.DataFrame:
    """Per-target-class F1 of one result file, with the authors' bootstrap.

    Parameters
    ----------
    target : sequence of str
        Each item's target class (exact CheXpert names; an unknown name raises).
    pred, ref : array-like
        Each item's label code of its target class from the generated and the reference report
        (1, 0, −1, NaN).
    uncertain : {"rrg-", "rrg+"}
    bootstrap, n_resamples, seed
        The script's ``--bootstrap-ci``, ``--n-resamples`` (500) and ``--seed`` (3).
    classes : sequence of str
        The order the shared generator visits the classes in (CheXbert head order).

    Returns
    -------
    DataFrame
        Indexed by ``class`` (``classes`` order, classes without items included): ``n``, ``f1``, and with
        ``bootstrap`` ``median``, ``ci_l``, ``ci_h`` (NaN for a class without items, as in the script).
    """
    target = np.asarray(target, dtype=object)
    unknown = sorted(set(target.tolist()) - set(classes))
    if unknown:
        raise ValueError(f"target_class_f1: unknown target class {unknown[0]!r}; expected one of {list(classes)} "
                         "(exact names)")
    yp = binarize_chexbert(pred, uncertain=uncertain)
    yt = binarize_chexbert(ref, uncertain=uncertain)
    if not (len(target) == len(yp) == len(yt)):
        raise ValueError(f"target_class_f1: lengths differ (target {len(target)}, pred {len(yp)}, ref {len(yt)})")
    tp_i, fp_i, fn_i = yp & yt, yp & (1 - yt), (1 - yp) & yt
    stream = PythonChoiceStream(seed) if bootstrap else None
    rows = []
    for c in classes:
        idx = np.flatnonzero(target == c)
        row = {"class": c, "n": int(len(idx))}
        if len(idx) == 0:
            row["f1"] = np.nan
            if bootstrap:
                row.update(median=np.nan, ci_l=np.nan, ci_h=np.nan)
            rows.append(row)
            continue
        row["f1"] = float(f1_from_counts(tp_i[idx].sum(), fp_i[idx].sum(), fn_i[idx].sum()))
        if bootstrap:
            draws = idx[stream.randbelow(len(idx), n_resamples * len(idx)).reshape(n_resamples, len(idx))]
            samples = f1_from_counts(tp_i[draws].sum(axis=1), fp_i[draws].sum(axis=1), fn_i[draws].sum(axis=1))
            lo, med, hi = np.percentile(samples, [2.5, 50, 97.5])
            row.update(median=float(med), ci_l=float(lo), ci_h=float(hi))
        rows.append(row)
    return pd.DataFrame(rows).set_index("class")
