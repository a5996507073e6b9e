"""The shipped VQA-RAD release (data/vqa-rad) and the ``vqa-rad:`` adapter (ModaLens Table 6, §4.1)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from shovir_core import paths
from shovir_core.data import DatasetError, load_dataset

ROOT = paths.repo_root() / "data" / "vqa-rad"


def test_every_shipped_image_matches_the_release_hash_list():
    lines = (ROOT / "SHA256SUMS").read_text().splitlines()
    listed = {}
    for line in lines:
        digest, name = line.split(maxsplit=1)
        listed[name.strip()] = digest
    files = sorted(p.name for p in (ROOT / "images").iterdir())
    assert files == sorted(listed) and len(files) == 315
    for name in files:
        assert hashlib.sha256((ROOT / "images" / name).read_bytes()).hexdigest() == listed[name], name
    size = sum((ROOT / "images" / n).stat().st_size for n in files)
    assert 16.0e6 < size < 17.5e6


def test_vqa_rad_loads_the_official_questions_with_hashes_verified():
    ds = load_dataset("vqa-rad:data/vqa-rad")
    q = ds.questions
    assert len(ds.images) == 315
    off = q[q["official"]]
    assert len(off) == 2248 and off["image_id"].nunique() == 314
    assert (off["split"] == "train").sum() == 1797 and (off["split"] == "test").sum() == 451
    assert (q["phrase_type"] == "frame").sum() == 1267
    assert set(q["answer_type"]) == {"closed", "open"}  # "CLOSED " stripped
    yn = ds.closed_yes_no()
    assert len(yn) == 1193 and set(yn["key"]) == {"yes", "no"} and yn["path"].notna().all()
    assert set(q["organ"]) == {"CHEST", "HEAD", "ABD"}
    assert ds.manifest()["n_official"] == 2248


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "vqa-rad"
    shutil.copytree(ROOT, dst)
    return dst


def test_an_altered_image_is_refused_naming_it(tmp_path):
    from shovir_core.data.vqa_rad import load_vqa_rad

    root = _copy(tmp_path)
    victim = sorted((root / "images").iterdir())[3]
    data = bytearray(victim.read_bytes())
    data[-10] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=victim.name):
        load_vqa_rad(root)


def test_missing_image_unknown_field_and_malformed_row_name_file_and_row(tmp_path):
    from shovir_core.data.vqa_rad import load_vqa_rad

    root = _copy(tmp_path)
    (root / "SHA256SUMS").unlink()
    rows = json.loads((root / "testset.json").read_text())
    orig = json.dumps(rows)
    rows[5]["image_name"] = "synpic_nowhere.jpg"
    (root / "testset.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"testset.json, row 5 .*synpic_nowhere.jpg"):
        load_vqa_rad(root)
    rows = json.loads(orig)
    rows[7]["answer_kind"] = "x"
    (root / "testset.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"testset.json, row 7 .*unknown field.*answer_kind"):
        load_vqa_rad(root)
    rows = json.loads(orig)
    rows[9]["answer_type"] = "MAYBE"
    (root / "testset.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"testset.json, row 9 .*answer_type"):
        load_vqa_rad(root)


def test_the_official_release_file_without_phrase_type_is_read(tmp_path):
    from shovir_core.data.vqa_rad import OFFICIAL_FILE, load_vqa_rad

    root = tmp_path / "osf"
    root.mkdir()
    shutil.copytree(ROOT / "images", root / "VQA_RAD Image Folder")
    rows = [r for f in ("trainset.json", "testset.json") for r in json.loads((ROOT / f).read_text())
            if r["phrase_type"] != "frame"]
    for r in rows:
        del r["phrase_type"]
        r["image_case_url"] = "https://medpix.example/case"
    (root / OFFICIAL_FILE).write_text(json.dumps(rows))
    ds = load_vqa_rad(root)
    assert len(ds.questions) == 2248 and ds.questions["official"].all() and set(ds.questions["split"]) == {"all"}
    rows[0]["phrase_type"] = "sometimes"
    (root / OFFICIAL_FILE).write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match="row 0 .*phrase_type"):
        load_vqa_rad(root)
