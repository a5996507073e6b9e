"""The C parser (shovir_core.yaml_text) builds the same documents as PyYAML's pure-Python one from every YAML
file of the repository, under both schemas the project reads with."""
from pathlib import Path

import pytest
import yaml

from shovir_core import yaml_text

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for pattern in ("*.yaml", "*.yml") for p in ROOT.rglob(pattern)
               if not ({".venv", "runs", "_build", "node_modules"} & set(p.relative_to(ROOT).parts)))


def test_the_repository_has_yaml_files_to_compare():
    names = {p.name for p in FILES}
    assert {"_toc.yml", "shovir.yaml", "modalens.yaml", "metrics.yaml"} <= names and len(FILES) > 60


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml: yaml_text uses the Python parser")
@pytest.mark.parametrize("schema", ["safe", "base"])
def test_c_and_python_parsers_read_every_file_alike(schema):
    python = {"safe": yaml.SafeLoader, "base": yaml.BaseLoader}[schema]
    fast = {"safe": yaml_text.safe_load, "base": yaml_text.base_load}[schema]
    differ = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        if yaml.load(text, Loader=python) != fast(text):
            differ.append(str(path.relative_to(ROOT)))
    assert differ == []


def test_base_load_keeps_every_scalar_a_string():
    assert yaml_text.base_load("a: 1\nb: [true, 0.5]\n") == {"a": "1", "b": ["true", "0.5"]}
    assert yaml_text.safe_load("a: 1\nb: [true, 0.5]\n") == {"a": 1, "b": [True, 0.5]}
