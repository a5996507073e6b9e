"""No credentialed bytes in tracked places: exports and trained weights default under the run-records
root and refuse a folder of the repository that git does not ignore unless forced."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shovir_core import paths
from shovir_core.output_dirs import OutputPathError, check_output_dir, default_output_dir, in_tracked_tree

FIXTURES = Path(__file__).parent / "fixtures"
REPO = paths.repo_root()
IS_GIT = (REPO / ".git").exists()


@pytest.mark.skipif(not IS_GIT, reason="needs a git checkout")
def test_tracked_tree(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOVIR_RUNS", raising=False)
    assert in_tracked_tree(paths.resources_root())
    assert in_tracked_tree(REPO / "perturbed")            # a new folder git does not ignore
    assert in_tracked_tree(REPO)
    assert not in_tracked_tree(REPO / "runs" / "exports")  # git-ignored
    assert not in_tracked_tree(tmp_path)
    monkeypatch.setenv("SHOVIR_RUNS", str(REPO / "my-runs"))  # a runs root inside the tracked tree is no escape
    assert in_tracked_tree(REPO / "my-runs" / "exports")


def test_defaults_live_under_the_runs_root(runs_root):
    d = default_output_dir("perturb", "mimic-cxr/jpg")
    assert d == runs_root / "exports" / "perturb" / "mimic-cxr_jpg"
    assert not in_tracked_tree(d)
    assert check_output_dir(d) == d.resolve()


@pytest.mark.skipif(not IS_GIT, reason="needs a git checkout")
def test_check_output_dir_refuses_unless_forced(tmp_path):
    with pytest.raises(OutputPathError, match="git does not ignore.*--force"):
        check_output_dir(REPO / "perturbed", what="x")
    assert check_output_dir(REPO / "perturbed", force=True) == (REPO / "perturbed").resolve()
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(OutputPathError, match="not a folder"):
        check_output_dir(f)
    with pytest.raises(OutputPathError, match="must be a path"):
        check_output_dir("")


def test_perturb_cli_defaults_outside_the_tracked_tree(runs_root, capsys):
    from shovir_core import cli

    assert cli.main(["perturb", "--dataset", f"mimic:{FIXTURES / 'mimic_imagenome'}", "--limit", "1",
                     "--ps", "1", "--conditions", "OCO", "-q"]) == 0
    out = runs_root / "exports" / "perturb" / "mimic-imagenome"
    assert (out / "manifest.csv").is_file()
    captured = capsys.readouterr()
    assert str(out) in captured.out and "credentialed" in captured.err


@pytest.mark.skipif(not IS_GIT, reason="needs a git checkout")
def test_train_reference_refuses_tracked_out_for_other_data(runs_root):
    from shovir_core.training import reference as train_reference

    mimic = f"mimic:{FIXTURES / 'mimic_imagenome'}"
    before = {p.name: p.stat().st_mtime for p in paths.resources_root().iterdir()}
    with pytest.raises(OutputPathError, match="train_reference --out"):
        train_reference.main(["--dataset", mimic, "--out", str(paths.resources_root()), "--epochs", "1"])
    with pytest.raises(OutputPathError):
        train_reference.main(["--dataset", "demo", "--out", str(REPO / "elsewhere"), "--epochs", "1"])
    record = train_reference.main(["--dataset", mimic, "--epochs", "1"])  # default: under the runs root
    out = runs_root / "exports" / "reference-models" / "mimic-imagenome"
    assert json.loads((out / "ref_reference_models.json").read_text())["sha256"] == record["sha256"]
    assert {p.name: p.stat().st_mtime for p in paths.resources_root().iterdir()} == before, \
        "the tracked resources/ is untouched"
