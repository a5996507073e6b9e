"""The params files of the ModaLens appendix chapters on the prompt and the report resolve (mimic: on
the MIMIC-CXR-JPG fixture), and a run name shared between chapters always names the same record."""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core.params import load_params, toc_notebooks
from shovir_core.protocols import modalens as ml
from shovir_core.records import spec_hash

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
NOTEBOOKS = ("modalens_s41", "modalens_appd", "modalens_apph", "modalens_appl", "modalens_appm",
             "modalens_text_controls")


@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_params_resolve_and_shared_names_are_one_record(profile, monkeypatch):
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    by_name: dict[str, str] = {}
    for notebook in (*NOTEBOOKS, "modalens_tables"):
        params = load_params(notebook, profile)
        for key, r in params["runs"].items():
            assert r["protocol"] == "modalens"
            spec = ml.resolve_spec(dict(r["spec"]))
            assert spec["dataset"] == r["spec"]["dataset"], "the unexpanded dataset string is hashed"
            if profile == "mimic":
                assert spec["reports"] == "dataset" and spec["ssim_size"] == 896 and spec["model"] == "medgemma-27b"
                assert params["parameters"]["reproduces_paper"] is True
            else:
                assert spec["reports"] == "template"
            h = spec_hash(spec)
            assert by_name.setdefault(r["name"], h) == h, f"{notebook}:{key}: run name {r['name']!r} names two specs"


def test_appendix_chapters_are_in_the_book():
    names = toc_notebooks()
    assert set(NOTEBOOKS) <= set(names)
    assert names.index("modalens_tables") < min(names.index(n) for n in NOTEBOOKS)
