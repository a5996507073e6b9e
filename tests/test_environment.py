"""environment.yml (conda users) lists the same dependencies as pyproject.toml."""
import re
import tomllib

import yaml

from shovir_core import paths


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower()


def test_environment_yml_matches_pyproject():
    pyproject = tomllib.loads((paths.repo_root() / "pyproject.toml").read_text())
    wanted = {_norm(r) for r in pyproject["project"]["dependencies"]}
    wanted |= {_norm(r) for r in pyproject["project"]["optional-dependencies"]["dev"]}
    env = yaml.safe_load((paths.repo_root() / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {_norm(r) for r in pip if not r.startswith("-e")}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"


def test_jupyter_book_is_pinned_to_1x():
    deps = tomllib.loads((paths.repo_root() / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "jupyter-book>=1.0.4,<2" in deps
