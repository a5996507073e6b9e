"""Shared vocabulary of both papers: names used by protocols, tables and notebooks alike.

Defined once here; this module imports nothing else from the package, so any module may import
it without creating a cycle.
"""
from __future__ import annotations

__all__ = [
    "COMPOSITE", "ORDERS", "TIERS", "REPORT_CONDITIONS", "INSTRUCTIONS", "DESIGNS", "READOUTS",
    "SIDES", "SHOVIR_CONDITIONS", "P_GRID",
]

COMPOSITE = "composite"
"""Question id of ModaLens' "any acute cardiopulmonary finding" question (target: any of the 13)."""

ORDERS = ("image_first", "text_first")
"""Block orders of the ModaLens user turn (ModaLens §2, "Prompt and readout": text first swaps the blocks; Table 2)."""

TIERS = ("differs-positive-set", "any-other", "cross-patient")
"""ModaLens substitute tiers, in the order they are tried (ModaLens §2, "Sampling the discordant image"; App. B, Table 7)."""

REPORT_CONDITIONS = ("present", "absent")
"""Report conditions of the main ModaLens arms (P / A)."""

INSTRUCTIONS = ("none", "yes_no", "no_yes", "yes_no_uncertain")
"""Answer instructions: none, "Answer with exactly Yes or No.", the reversed order, and Yes/No/Uncertain."""

DESIGNS = ("all14", "f13", "one_q", "six")
"""ModaLens question designs: all-14 and one-question (ModaLens §2, "Two question designs"; Table 2), 13-finding and
the prespecified six (appendix, "Questions selected independently of the source label")."""

READOUTS = ("lowercase", "family", "generated")
"""ModaLens readouts at the first generated position: lowercase first token, token family, generated answer
(ModaLens §2, "Prompt and readout"; §4.1; App. I)."""

SIDES = ("c", "d")
"""Concordant (source) and discordant (substitute) image of a ModaLens trial."""

SHOVIR_CONDITIONS = ("Baseline", "FullNoise", "RO", "OCO", "DOCO")
"""ShoViR conditions (ShoViR §3.2: image level Baseline, Full Noise Image; disease level RO, OCO, DOCO)."""

P_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""ShoViR blending strengths p (ShoViR §3.2)."""
