"""A re-run of an arm is its own record (``replicate``), and Table 18's re-run row compares the two runs."""
from __future__ import annotations

import pytest

from shovir_core.protocols import modalens as ml
from shovir_core.records import spec_hash
from shovir_core.tables import modalens_text_controls as tct

BASE = {"dataset": "demo-64px", "ssim_size": 64, "n_patients": 4, "design": "one_q", "model": "ref-blind-prior"}


def test_replicate_zero_is_the_arm_itself_and_a_replicate_is_another_record():
    arm = ml.resolve_spec(dict(BASE))
    assert "replicate" not in arm and ml.resolve_spec({**BASE, "replicate": 0}) == arm
    again = ml.resolve_spec({**BASE, "replicate": 1})
    assert again["replicate"] == 1 and spec_hash(again) != spec_hash(arm)
    assert ml.resolve_spec(again) == again, "a resolved spec resolves to itself"


def test_rerun_table_counts_the_cases_that_differ():
    from test_modalens_tables import PRESENT, _arm

    one, two = _arm(PRESENT), _arm({**PRESENT, "p2": [1, 0, 0, 0]})
    v = tct.rerun_table(one, two, n_draws=100, seed=0).values
    assert v["tc.rerun.original.flips"] == 2 and v["tc.rerun.rerun.flips"] == 3
    assert v["tc.rerun.n_cases_differ"] == 1 == v["tc.rerun.flips_diff"]
    with pytest.raises(ValueError, match="exactly"):
        tct.rerun_table(one, two.iloc[:5], n_draws=10, seed=0)
