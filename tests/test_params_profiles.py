"""Profile defaults: ``params/_profiles/<profile>.yaml`` merged under each chapter's parameters; one
value per quantity (no chapter params file and no notebook default repeats it), and every notebook
gets a value for every parameter it declares."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from shovir_core import paths
from shovir_core.params import (PROFILES_DIR, ParamsError, declared_parameters, load_params, profile_defaults,
                                profiles_of, toc_notebooks)

REPO = Path(__file__).resolve().parent.parent
_CELL = re.compile(r'^# %%[^\n]*tags=\[[^\]\n]*"parameters"[^\n]*\n(.*?)(?=^# %%|\Z)', re.M | re.S)


@pytest.fixture
def root(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for d in ("params/_profiles", "params/nb", "notebooks"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("SHOVIR_ROOT", str(root))
    (root / "params/_profiles/demo.yaml").write_text("parameters: {n_draws: 5, bootstrap_seed: 1, extra: x}\n")
    (root / "params/nb/demo.yaml").write_text("runs: {}\nparameters: {bootstrap_seed: 2, own: 3}\n")
    return root


def test_profile_defaults_merge_under_the_chapter(root):
    (root / "notebooks/nb.py").write_text('# %% tags=["parameters"]\nprofile = "demo"\nrun_ids = None\n'
                                          "n_draws = None\nbootstrap_seed = None\nown = None\n\n# %%\nx = 1\n")
    assert declared_parameters("nb") == {"profile", "run_ids", "n_draws", "bootstrap_seed", "own"}
    # the chapter's value wins; a default the notebook does not declare is not injected
    assert load_params("nb", "demo")["parameters"] == {"n_draws": 5, "bootstrap_seed": 2, "own": 3}


def test_without_a_notebook_source_every_default_is_given(root):
    assert declared_parameters("nb") is None
    assert load_params("nb", "demo")["parameters"] == {"n_draws": 5, "bootstrap_seed": 2, "extra": "x", "own": 3}


def test_a_profile_without_a_defaults_file_has_none(root):
    (root / "params/nb/other.yaml").write_text("parameters: {own: 1}\n")
    assert profile_defaults("other") == {}
    assert load_params("nb", "other")["parameters"] == {"own": 1}


@pytest.mark.parametrize("text, match", [
    ("parameters: [1]\n", "'parameters' must be a mapping"),
    ("runs: {}\n", "one key, 'parameters'"),
    ("parameters: {profile: mimic}\n", "set by the runner"),
    ("parameters: {a: [1, 2}\n", r"not valid YAML \(line 1"),
])
def test_a_malformed_profile_file_is_refused(root, text, match):
    (root / "params/_profiles/demo.yaml").write_text(text)
    with pytest.raises(ParamsError, match=match):
        load_params("nb", "demo")


# ----------------------------------------------------------------------------- the repository's chapters
def _cell_defaults(notebook: str) -> dict:
    cell = _CELL.search((paths.notebooks_root() / f"{notebook}.py").read_text(encoding="utf-8")).group(1)
    out = {}
    for node in ast.parse(cell).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


CHAPTERS = [nb for nb in toc_notebooks() if profiles_of(nb)]


def test_the_profiles_files_exist():
    assert sorted(p.stem for p in (paths.params_root() / PROFILES_DIR).glob("*.yaml")) == ["demo", "mimic", "padchest"]
    for profile in ("demo", "mimic", "padchest"):
        assert {"n_draws", "bootstrap_seed", "reproduces_paper"} <= set(profile_defaults(profile))


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_every_declared_parameter_gets_one_value(notebook):
    cell = _cell_defaults(notebook)
    declared = set(cell) - {"profile", "run_ids"}
    for profile in profiles_of(notebook):
        given = load_params(notebook, profile)["parameters"]
        # papermill warns about a parameter the notebook does not declare
        assert set(given) <= declared, f"{notebook}/{profile}: undeclared {sorted(set(given) - declared)}"
        # a placeholder (None) is always filled by the runner
        unfilled = sorted(k for k in declared if cell[k] is None and k not in given
                          and k not in {"manual_labels", "xrv_weights", "paper_dataset"})
        assert not unfilled, f"{notebook}/{profile}: no value for {unfilled}"
        # no chapter params file repeats its profile's default
        own = (yaml.safe_load((paths.params_root() / notebook / f"{profile}.yaml").read_text()) or {})
        defaults = profile_defaults(profile)
        repeated = sorted(k for k, v in (own.get("parameters") or {}).items() if k in defaults and defaults[k] == v)
        assert not repeated, f"params/{notebook}/{profile}.yaml repeats the profile's {repeated}"
    # no notebook default duplicates a value every profile gives
    always = set.intersection(*(set(load_params(notebook, p)["parameters"]) for p in profiles_of(notebook)))
    typed_twice = sorted(k for k in always if cell.get(k) is not None)
    assert not typed_twice, f"{notebook}: parameters cell repeats {typed_twice} (the runner injects them)"
