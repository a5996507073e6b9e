"""The protocols' dataset cache: reused while the files are unchanged, so a dataset edited between
``resolve_spec`` and ``execute`` in one process is refused with a clear error."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from shovir_core import paths
from shovir_core.file_cache import cache_by_files, stat_signature
from shovir_core.protocols import cohort, modalens, perturbations, shovir
from shovir_core.protocols import datasets as protocol_datasets

MIMIC_JPG = Path(__file__).parent / "fixtures" / "mimic_jpg"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _edit_csv(path: Path, column: str) -> None:
    """Change one value of a metadata table (what a user re-exporting a dataset might do)."""
    df = pd.read_csv(path)
    df.loc[0, column] = "AP" if df.loc[0, column] != "AP" else "PA"
    df.to_csv(path, index=False)


def test_cache_reuses_until_a_file_changes(tmp_path):
    root = _copy(paths.demo_data_root() / "nih-64px", tmp_path)
    first = protocol_datasets.load_dataset(str(root))
    assert protocol_datasets.load_dataset(str(root)) is first, "unchanged files: the same object"
    sha = first.manifest_hash
    image = Path(first.images["path"].iloc[0])
    image.write_bytes(image.read_bytes() + b"\0")  # an image file changed
    second = protocol_datasets.load_dataset(str(root))
    assert second is not first and second.manifest_hash != sha
    (root / "new-file.txt").write_text("x")  # the folder changed
    assert protocol_datasets.load_dataset(str(root)) is not second


def test_cache_by_files_notices_missing_and_appearing_files(tmp_path):
    path = tmp_path / "a.txt"
    calls = []

    @cache_by_files(lambda value, p: [p], maxsize=1)
    def read(p: Path) -> str | None:
        calls.append(p)
        return p.read_text() if p.exists() else None

    assert read(path) is None and read(path) is None and len(calls) == 1
    path.write_text("now here")
    assert read(path) == "now here" and len(calls) == 2
    path.unlink()
    assert read(path) is None and len(calls) == 3
    assert read(tmp_path / "b.txt") is None and read.cache_info()["size"] == 1, "maxsize bounds the cache"
    assert stat_signature([path]) == ((str(path), None, None),)
    with pytest.raises(ValueError, match="maxsize"):
        cache_by_files(lambda v: [], maxsize=0)


def test_modalens_refuses_a_dataset_changed_after_resolving(tmp_path, runs_root):
    root = _copy(MIMIC_JPG, tmp_path)
    spec = modalens.resolve_spec({"dataset": f"mimic-jpg:{root}", "ssim_size": 32})
    modalens.build_cases(spec)  # the substitute pairs are now cached too
    _edit_csv(root / "mimic-cxr-2.0.0-metadata.csv", "ViewPosition")
    with pytest.raises(RuntimeError, match=r"modalens: dataset 'mimic-jpg:.*' changed since the spec was resolved"):
        modalens.execute("changed", spec, progress=False)
    with pytest.raises(RuntimeError, match="changed since the spec was resolved"):
        modalens.build_cases(spec)
    assert not (runs_root / "modalens").exists(), "nothing was written"


def test_shovir_refuses_a_dataset_changed_after_resolving(tmp_path, runs_root):
    root = _copy(paths.demo_data_root() / "nih-bbox", tmp_path)
    spec = shovir.resolve_spec({"dataset": str(root), "min_count": 20, "max_per_class": 1,
                                "reference_labels": "dataset", "reference_text": "template"})
    _edit_csv(root / "boxes.csv", "view")
    with pytest.raises(RuntimeError, match="shovir: dataset .* changed since the spec was resolved"):
        shovir.execute("changed", spec, progress=False)
    with pytest.raises(ValueError, match="the spec pins"):
        shovir.resolve_spec(spec)


def test_cohort_and_perturbations_refuse_a_changed_dataset(tmp_path, runs_root):
    root = _copy(paths.demo_data_root() / "nih-64px", tmp_path)
    spec = cohort.resolve_spec({"dataset": str(root)})
    pspec = perturbations.resolve_spec({"cohort_dataset": str(root), "ssim_size": 64, "n_cases": 2})
    _edit_csv(root / "index.csv", "view")
    with pytest.raises(RuntimeError, match="cohort: dataset .* changed since the spec was resolved"):
        cohort.execute("changed", spec, progress=False)
    with pytest.raises(RuntimeError, match="perturbations: dataset .* changed since the spec was resolved"):
        perturbations.execute("changed", pspec, progress=False)
