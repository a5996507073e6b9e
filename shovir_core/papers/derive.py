"""Closed-form derivations the audit uses to recompute published numbers from their components.

Each function is plain arithmetic on floats, so the audit can evaluate it at the
corners of its inputs' rounding intervals.
"""
from __future__ import annotations

import math

__all__ = ["kappa_from_agreement", "balanced_accuracy_from_yes", "implied_rate", "interaction"]


def kappa_from_agreement(agreement: float, sensitivity: float, precision: float) -> float:
    """Cohen's κ of a binary rater against a reference, from agreement, sensitivity and precision.

    With cell proportions ``a`` (both yes), ``b`` (rater yes, reference no),
    ``c`` (rater no, reference yes) and ``d``: ``b + c = 1 − agreement``,
    ``c = a (1/sensitivity − 1)`` and ``b = a (1/precision − 1)`` fix ``a``; then
    ``p_e = (a + c)(a + b) + (1 − a − c)(1 − a − b)`` and ``κ = (p_o − p_e)/(1 − p_e)``.

    Examples
    --------
    ModaLens Appendix E: agreement 0.943, sensitivity 0.894, precision 0.773.

    >>> round(kappa_from_agreement(0.943, 0.894, 0.773), 3)
    0.795
    """
    for name, v in (("agreement", agreement), ("sensitivity", sensitivity), ("precision", precision)):
        if not 0 < v <= 1:
            raise ValueError(f"kappa_from_agreement: {name} must be in (0, 1], got {v}")
    disagreement = 1.0 - agreement
    c_per_a = 1.0 / sensitivity - 1.0
    b_per_a = 1.0 / precision - 1.0
    if c_per_a + b_per_a == 0:
        raise ValueError("kappa_from_agreement: perfect sensitivity and precision leave κ = 1 by construction")
    a = disagreement / (c_per_a + b_per_a)
    reference_yes, rater_yes = a * (1 + c_per_a), a * (1 + b_per_a)
    p_e = reference_yes * rater_yes + (1 - reference_yes) * (1 - rater_yes)
    if p_e >= 1:
        raise ValueError("kappa_from_agreement: chance agreement is 1 (no positives implied); κ is undefined")
    return (agreement - p_e) / (1.0 - p_e)


def balanced_accuracy_from_yes(n_yes: float, n_pos: float, n_neg: float, specificity: float) -> float:
    """Balanced accuracy implied by the number of yes answers, the class sizes and the specificity.

    False positives are ``(1 − specificity)·n_neg``, so true positives are
    ``n_yes − FP`` and sensitivity ``TP / n_pos``; BA = (sensitivity + specificity)/2.

    >>> round(balanced_accuracy_from_yes(2422, 2707, 492, 0.77), 3)
    0.811
    """
    if n_pos <= 0 or n_neg <= 0:
        raise ValueError("balanced_accuracy_from_yes: class sizes must be positive")
    false_pos = (1.0 - specificity) * n_neg
    sensitivity = (n_yes - false_pos) / n_pos
    return (sensitivity + specificity) / 2.0


def implied_rate(rate: float, n: float, scale: float = 100.0) -> float:
    """The rate ``k/n·scale`` of the whole count ``k`` nearest to ``rate·n/scale``.

    A printed rate over a known denominator must be a rounded ``k/n``; comparing
    the printed value with this one (within half a unit of its last digit)
    tests that.

    >>> round(implied_rate(1.41, 3199), 4)
    1.4067
    """
    if n <= 0 or n != int(n):
        raise ValueError(f"implied_rate: the denominator must be a positive whole number, got {n}")
    return math.floor(rate * n / scale + 0.5) / n * scale


def interaction(full: float, report_q: float, image_q: float, q: float) -> float:
    """2×2 modality interaction: (full − report+Q) − (image+Q − Q).

    Delegates to :func:`shovir_core.metrics.modalens.interaction_from_cells`, the
    function the ablation chapters use on run records.

    >>> round(interaction(0.717, 0.770, 0.665, 0.500), 3)
    -0.218
    """
    from ..metrics.modalens import interaction_from_cells

    cells = {"full": full, "report+q": report_q, "image+q": image_q, "q": q}
    return interaction_from_cells(cells)["interaction"]
