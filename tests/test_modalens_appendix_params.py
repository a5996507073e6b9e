"""The ``modalens`` records of every chapter of ``_toc.yml`` resolve (mimic: on the MIMIC-CXR-JPG
fixture), and a run name shared between chapters always names the same record. (Which pieces a
chapter needs is tests/test_chapter_recipe.py's.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core.params import load_params, profiles_of, toc_notebooks
from shovir_core.protocols import modalens as ml
from shovir_core.records import spec_hash

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"


def _modalens_chapters(profile: str) -> list[str]:
    """The toc's chapters with ``modalens`` records on ``profile``, in toc order."""
    return [nb for nb in toc_notebooks() if profile in profiles_of(nb)
            and any(r["protocol"] == "modalens" for r in load_params(nb, profile)["runs"].values())]


@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_params_resolve_and_shared_names_are_one_record(profile, monkeypatch):
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    by_name: dict[str, str] = {}
    chapters = _modalens_chapters(profile)
    assert {"modalens_tables", "modalens_s41", "modalens_appd", "modalens_appl"} <= set(chapters)
    for notebook in chapters:
        params = load_params(notebook, profile)
        for key, r in params["runs"].items():
            if r["protocol"] != "modalens":
                continue
            spec = ml.resolve_spec(dict(r["spec"]))
            assert spec["dataset"] == r["spec"]["dataset"], "the unexpanded dataset string is hashed"
            if profile == "mimic":
                assert spec["reports"] == "dataset" and spec["ssim_size"] == 896
                # a paper's model or a reference model whose planted effect the chapter sets beside it, never
                # a demo-only tiny model
                assert not spec["model"].startswith("tiny"), (notebook, key, spec["model"])
                assert params["parameters"]["reproduces_paper"] is True
            else:
                assert spec["reports"] == "template"
            h = spec_hash(spec)
            assert by_name.setdefault(r["name"], h) == h, f"{notebook}:{key}: run name {r['name']!r} names two specs"
