"""SLAKE, OmniMedVQA and ProbMed adapters on fixtures in their releases' exact layouts (invented images)."""
from __future__ import annotations

import filecmp
import json

import pytest

from shovir_core import paths
from shovir_core.data import DatasetError, load_dataset
from shovir_core.data.vqa_fixtures import write_all, write_omnimedvqa, write_probmed, write_slake


def test_the_committed_fixtures_match_their_generator(tmp_path):
    write_all(tmp_path)
    shipped = paths.repo_root() / "data" / "fixtures"
    for kind in ("slake", "omnimedvqa", "probmed"):
        cmp = filecmp.dircmp(tmp_path / kind, shipped / kind)
        stack = [cmp]
        while stack:
            c = stack.pop()
            assert not c.left_only and not c.right_only, (kind, c.left_only, c.right_only)
            _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
            assert not mismatch and not errors, (kind, mismatch, errors)
            stack.extend(c.subdirs.values())


def test_slake_keeps_english_questions_and_its_categories(tmp_path):
    root = write_slake(tmp_path)
    ds = load_dataset(f"slake:{root.parent}")
    q = ds.questions
    assert len(q) == 12 * 9  # 8 English closed + 1 open per image; the Chinese rows are dropped
    assert not q["question"].str.contains("肝").any()
    assert set(q["category"]) == {"Organ", "Modality", "Abnormal", "KG", "Position"}
    assert set(q["split"]) == {"train", "validate", "test"}
    assert q.loc[q["yes_no"], "key"].isin(["yes", "no"]).all() and (q["yes_no"].sum() == 96)


def test_slake_errors_name_file_and_row(tmp_path):
    root = write_slake(tmp_path)
    rows = json.loads((root / "test.json").read_text())
    rows[2]["img_name"] = "xmlab999/source.jpg"
    (root / "test.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"test.json, row 2 .*xmlab999"):
        load_dataset(f"slake:{root}")
    rows[2]["organ_system"] = "x"
    (root / "test.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"test.json, row 2 .*unknown field.*organ_system"):
        load_dataset(f"slake:{root}")


def test_omnimedvqa_reads_four_options_and_the_letter_key(tmp_path):
    root = write_omnimedvqa(tmp_path)
    ds = load_dataset(f"omnimedvqa:{root}")
    q = ds.questions
    assert len(q) == 40 and set(q["key"]) <= set("ABCD") and not q["yes_no"].any()
    row = q.iloc[0]
    assert json.loads(row["options"])["ABCD".index(row["key"])].lower() == row["answer"].lower()
    assert set(q["source"]) == {"Fixture Chest CT", "Fixture Fundus"}
    f = root / "QA_information" / "Open-access" / "Fixture Fundus.json"
    rows = json.loads(f.read_text())
    rows[4]["gt_answer"] = "Something else"
    f.write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"Fixture Fundus.json, row 4 .*gt_answer"):
        load_dataset(f"omnimedvqa:{root}")


def test_probmed_reads_yes_no_probes_and_refuses_a_bad_answer(tmp_path):
    root = write_probmed(tmp_path)
    ds = load_dataset(f"probmed:{root}")
    q = ds.questions
    assert len(q) == 50 and q["yes_no"].all() and set(q["source"]) == {"ct_abdomen", "mri_brain"}
    rows = json.loads((root / "probmed.json").read_text())
    rows[7]["answer"] = "maybe"
    (root / "probmed.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"probmed.json, row 7 .*answer"):
        load_dataset(f"probmed:{root}")


def test_one_row_check_serves_every_vqa_adapter(tmp_path):
    from shovir_core.data.vqa import check_question, question_rows

    file = tmp_path / "q.json"
    file.write_text(json.dumps([{"qid": 7, "answer": "yes", "answer_type": "closed ", "question": "Is it?"},
                                {"qid": 8, "answer": "yes", "answer_type": "CLOSED"}]))
    rows = question_rows(file, name="X", allowed=("qid", "answer", "answer_type", "question"), need=("qid", "question"))
    i, where, row = next(rows)
    assert (i, where) == (0, "X: q.json, row 0 (qid 7)")
    assert check_question(row, where=where, strings=("question",)) == "CLOSED"
    with pytest.raises(DatasetError, match=r"X: q.json, row 1 \(qid 8\): missing field\(s\) \['question'\]"):
        next(rows)
    for bad, match in (({"answer": " "}, "field 'answer'"), ({"answer": True}, "field 'answer'"),
                       ({"answer_type": "maybe"}, "not CLOSED or OPEN"), ({"question": ""}, "field 'question'")):
        with pytest.raises(DatasetError, match=match):
            check_question({**row, **bad}, where=where, strings=("question",))
    file.write_text(json.dumps({"qid": 1}))
    with pytest.raises(DatasetError, match="expected a JSON list"):
        next(question_rows(file, name="X", allowed=("qid",), need=("qid",)))
