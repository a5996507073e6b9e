"""Tables 7 (views), 8 (questions), App. I's token ids and Table 5's instruction shift on hand-built trials."""
from __future__ import annotations

import pandas as pd
import pytest

from shovir_core.protocols.modalens import COMPOSITE, FINDINGS_13, question_id
from shovir_core.tables import modalens as mt
from shovir_core.tables import modalens_design as design


def _all14(n_cases: int = 4) -> pd.DataFrame:
    rows = []
    for c in range(n_cases):
        for k, f in enumerate((*FINDINGS_13, COMPOSITE)):
            rows.append({"trial_id": f"c{c}:{question_id(f)}", "case_id": f"c{c}", "patient_id": f"p{c // 2}",
                         "question_id": question_id(f), "finding": f, "target_c": float((c + k) % 3 == 0),
                         "view_c": ["PA", "AP", "", "PA"][c % 4], "view_d": ["PA", "PA", "AP", "AP"][c % 4],
                         "pair_type": "cross-patient" if c == 3 else "same-patient"})
    return pd.DataFrame(rows)


def test_view_pairs_count_each_case_once():
    v = design.view_pairs_table(_all14()).values
    assert v["n_cases"] == 4 and v["n_same_view"] == 1 and v["n_view_changed"] == 3
    assert v["same-patient.blank.AP"] == 1 and v["cross-patient.PA.AP"] == 1


def test_questions_table_lists_fourteen_questions_with_targets():
    t = design.questions_table(_all14())
    assert len(t.frame) == 14 == t.values["n_questions"]
    row = t.frame.set_index("question_id").loc[question_id(COMPOSITE)]
    assert row["question"] == "Does this chest X-ray show any acute cardiopulmonary finding?"
    assert row["question_l"].startswith("Is any acute") and row["target_yes"] + row["target_no"] == 4


def test_answer_tokens_are_the_registry_ids():
    v = design.answer_token_table().values
    assert v["medgemma-27b.yes_id"] == 4443 and v["medgemma-27b.no_id"] == 1904
    assert v["n_models"] >= 3 and "qwen3.5-9b.yes_id" in v


def test_instruction_shift_is_the_paired_difference_per_readout():
    from test_modalens_tables import ABSENT, _arm

    plain, instr = _arm({p: [0] * len(f) for p, f in ABSENT.items()}), _arm(ABSENT)
    t = mt.instruction_shift({"A": plain, "A_instr": instr}, n_draws=200, seed=0, design="all14")
    v = t.values
    assert v["shift.lowercase.absent_pp"] == pytest.approx(100 * 8 / 14)
    assert v["shift.lowercase.absent_pp_lo"] > 0 and v["shift.family.absent.n_trials"] == 14
    with pytest.raises(ValueError, match="A_instr"):
        mt.instruction_shift({"A": plain}, n_draws=10, seed=0)
