"""Agreement between the answers on the two images of a trial (ModaLens §4.3, Tables 10 and 32).

The unchanged-answer rate is the agreement of two "raters" -- the readout on the source image and
on the substitute -- over a finding's trials. Cohen's κ corrects it for the chance agreement of
the two marginals; the response-bias floor p_yes² + p_no² is the agreement a responder answering
from its pooled marginal alone would reach (ModaLens §4.3; appendix "other records": the floor over
per-finding evaluations). When the two marginals coincide (a model whose answers do not depend on
the image) the chance agreement equals the floor exactly, and when the answers are constant both
are 1 and κ is undefined (0/0).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .modalens import cohen_kappa, response_bias_floor

__all__ = ["chance_agreement", "agreement_summary"]


def _answers(x, name: str) -> np.ndarray:
    arr = np.asarray(x).ravel()
    if not len(arr):
        raise ValueError(f"{name} is empty")
    if pd.isna(arr).any():
        raise ValueError(f"{name} contains missing answers")
    return arr


def chance_agreement(a, b) -> float:
    """p_e = Σ_k p_a(k) p_b(k): the agreement of two independent raters with these marginals.

    >>> chance_agreement([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    """
    x, y = _answers(a, "a"), _answers(b, "b")
    if len(x) != len(y):
        raise ValueError(f"inputs differ in length: {len(x)} vs {len(y)}")
    cats = np.union1d(x, y)
    return float(sum((x == k).mean() * (y == k).mean() for k in cats))


def agreement_summary(a, b) -> dict[str, float]:
    """Agreement, chance agreement, response-bias floor and Cohen's κ of paired answers.

    Returns ``agreement`` (share of trials with equal answers = 1 − flip rate), ``chance``
    (:func:`chance_agreement`), ``floor`` (:func:`~shovir_core.metrics.modalens.response_bias_floor`
    of the pooled answers of both sides), ``kappa`` (NaN where the chance agreement is 1),
    ``yes_rate`` (share of yes = 1 over both sides) and ``n``.

    >>> s = agreement_summary([1, 1, 1, 1], [1, 1, 1, 1])
    >>> s["agreement"], s["chance"], s["floor"], bool(np.isnan(s["kappa"]))
    (1.0, 1.0, 1.0, True)
    """
    x, y = _answers(a, "a"), _answers(b, "b")
    if len(x) != len(y):
        raise ValueError(f"inputs differ in length: {len(x)} vs {len(y)}")
    both = np.concatenate([x, y])
    yes = float(np.mean(both.astype(float))) if both.dtype.kind in "biuf" else float("nan")
    return {"agreement": float((x == y).mean()), "chance": chance_agreement(x, y),
            "floor": response_bias_floor(both), "kappa": cohen_kappa(x, y), "yes_rate": yes, "n": int(len(x))}
