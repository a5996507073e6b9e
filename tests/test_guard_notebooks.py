"""The credentialed-data guard end to end: notebooks executed by the real runner on a credentialed
record made from the synthetic MIMIC-CXR-JPG fixture.

* ``tests/fixtures/notebooks/leak_routes.py`` tries every route of issue 13 (and more) of showing the
  record's report text or pixels: the runner's scan must flag every route's cell, and write nothing;
* a notebook that glues report text with ``runs=[]`` fails (the first line of the guard does not
  trust ``runs=``) and leaves nothing in the book;
* the ModaLens tables chapter with the ``mimic`` profile's params, on records of the fixture, builds
  (the guard does not trip on aggregate tables).
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import jupytext
import pytest
import yaml

from shovir_core import paths
from shovir_core.book import CredentialedDataError, execute_notebook
from shovir_core.book.scan import LeakError, scan_notebook
from shovir_core.book.shingles import ShingleIndex

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
MIMIC_JPG = FIXTURES / "mimic_jpg"


@pytest.fixture
def book_root(tmp_path, monkeypatch, runs_root):
    """A repository root of its own: notebooks/, params/ and book/ under tmp (runs under tmp too)."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(REPO / "params" / "_profiles", root / "params" / "_profiles")  # the profiles' defaults
    (root / "book").mkdir()
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("SHOVIR_ROOT", str(root))
    monkeypatch.setenv("SHOVIR_DEMO_DATA", str(REPO / "data" / "demo"))
    return root


def _add_notebook(root: Path, name: str, source: str | Path, runs: dict, parameters: dict | None = None):
    text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
    (root / "notebooks" / f"{name}.py").write_text(text, encoding="utf-8")
    (root / "params" / name).mkdir(exist_ok=True)
    (root / "params" / name / "mimic.yaml").write_text(
        yaml.safe_dump({"runs": runs, "parameters": parameters or {}}), encoding="utf-8")


def _route_cells(source: Path) -> tuple[dict[int, str], int]:
    """Code-cell number in the executed notebook -> route name (papermill injects a cell after
    `parameters`), and the number of the last code cell."""
    nb = jupytext.read(source)
    out, number, injected = {}, 0, False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        number += 1
        if injected is False and "parameters" in cell.metadata.get("tags", []):
            number += 1
            injected = True
        m = re.match(r"# route: (.+)", cell.source)
        if m:
            out[number] = m.group(1).strip()
    return out, number


COHORT = {"cohort": {"protocol": "cohort", "name": "leak-fixture", "spec": {"dataset": f"mimic-jpg:{MIMIC_JPG}"}}}


def test_every_leak_route_is_blocked_and_nothing_is_written(book_root):
    source = FIXTURES / "notebooks" / "leak_routes.py"
    _add_notebook(book_root, "leak_routes", source, COHORT)
    with pytest.raises(LeakError) as info:
        execute_notebook("leak_routes", profile="mimic")
    err = info.value
    routes, last = _route_cells(source)
    assert len(routes) >= 45
    flagged = {leak.cell for leak in err.leaks}
    missed = {n: r for n, r in routes.items() if n not in flagged}
    assert not missed, f"routes that got through: {missed}"
    assert last not in routes and last not in flagged, "the aggregate figure and table of the last cell are allowed"
    kinds = {leak.kind for leak in err.leaks}
    assert {"report text", "refused display", "image", "embedded image", "pixel values"} <= kinds
    message = str(err)
    assert "leak_routes" in message and "code cell" in message and "\n" not in message
    assert "heart is enlarged" not in message.lower(), "the error never quotes the leaked text"
    assert not (book_root / "book" / "leak_routes.ipynb").exists()
    assert not (paths.runs_root() / ".book-failed").exists()


def test_glue_with_no_runs_or_a_public_run_is_refused_in_the_notebook(book_root):
    source = '''# %% tags=["parameters"]
profile = "mimic"
run_ids = None
# %%
from shovir_core import book
from shovir_core.data import load_dataset
runs = book.load_runs("leak_glue", profile=profile, run_ids=run_ids)
report = load_dataset(runs["cohort"].manifest["spec"]["dataset"]).reports["text"].iloc[0]
book.glue("leak.report", report, runs=[])
'''
    _add_notebook(book_root, "leak_glue", source, COHORT)
    with pytest.raises(CredentialedDataError, match=r"'leak_glue' failed in code cell \[In \d+\].*CredentialedDataError: "
                       r"glue 'leak.report': holds 3 or more consecutive words") as info:
        execute_notebook("leak_glue", profile="mimic")
    assert "heart" not in str(info.value).lower()
    assert not (book_root / "book" / "leak_glue.ipynb").exists()
    assert (paths.runs_root() / ".book-failed" / "leak_glue.ipynb").is_file(), \
        "a failed credentialed notebook is kept under runs/, never in book/"
    kept = json.loads((paths.runs_root() / ".book-failed" / "leak_glue.ipynb").read_text(encoding="utf-8"))
    errors = [o for c in kept["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert [e["ename"] for e in errors] == ["CredentialedDataError"], "the kept copy shows the failing cell's error"


def test_files_written_into_the_book_are_removed_and_reported(book_root):
    source = '''# %% tags=["parameters"]
profile = "mimic"
run_ids = None
# %%
import os
from shovir_core import book, paths
runs = book.load_runs("leak_file", profile=profile, run_ids=run_ids)
(paths.book_root() / "pixels.png").write_bytes(b"x")
open("here.txt", "w").write("written to the working folder, a temporary one")
print(os.getcwd() != str(paths.book_root()))
'''
    _add_notebook(book_root, "leak_file", source, COHORT)
    with pytest.raises(LeakError, match=r"file pixels\.png.*file written into book/") as info:
        execute_notebook("leak_file", profile="mimic")
    assert [leak.kind for leak in info.value.leaks] == ["file written into book/"]
    assert not (book_root / "book" / "pixels.png").exists() and not (book_root / "book" / "here.txt").exists()


def test_a_dataset_read_directly_is_scanned_too(book_root):
    source = '''# %% tags=["parameters"]
profile = "mimic"
run_ids = None
# %%
from shovir_core.data import load_dataset
print(load_dataset("mimic-jpg:%s").reports["text"].iloc[0])
''' % MIMIC_JPG
    _add_notebook(book_root, "leak_direct", source, {})
    with pytest.raises(LeakError, match="report text"):
        execute_notebook("leak_direct", profile="mimic", run_ids={})


TYPICAL_REPORTS = [
    # invented sentences in the style of chest X-ray reports: the phrases an aggregate table shares words with
    "FINDINGS: No focal consolidation, pleural effusion, or pneumothorax. Heart size is normal.",
    "The cardiomediastinal silhouette is within normal limits. No pulmonary edema.",
    "IMPRESSION: No acute cardiopulmonary process. No pleural effusion or pneumothorax.",
    "Small left pleural effusion with adjacent atelectasis. Mild cardiomegaly. Support devices in place.",
    "Lung opacity in the right lower lobe, possibly pneumonia. No evidence of fracture.",
    "Enlarged cardiomediastinum. Pleural other: blunting of the costophrenic angle. Lung lesion not excluded.",
    "Compared with the prior study, the report present on the image is unchanged; there is no change.",
    "1. Cardiomegaly. 2. Edema. 3. Consolidation. 4. Atelectasis. 5. Pleural effusion.",
    "The flip rate of the tube is stable; the lines are unchanged in position.",
]


def _chapter_on_fixture(book_root, notebook: str, parameters: dict) -> Path:
    shutil.copy(REPO / "notebooks" / f"{notebook}.py", book_root / "notebooks" / f"{notebook}.py")
    params = yaml.safe_load((REPO / "params" / notebook / "mimic.yaml").read_text(encoding="utf-8"))
    # the paper's model is not available here: the same arms with a reference model, tiny SSIM size
    for r in params["runs"].values():
        model = r["spec"]["model"]
        r["spec"] = {**r["spec"], "model": model if model.startswith("ref-") else "ref-anchored@0.5", "ssim_size": 32}
    (book_root / "params" / notebook).mkdir()
    (book_root / "params" / notebook / "mimic.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    out = execute_notebook(notebook, profile="mimic", parameters=parameters)
    assert out == book_root / "book" / f"{notebook}.ipynb"
    nb = json.loads(out.read_text(encoding="utf-8"))
    assert nb["metadata"]["shovir"]["credentialed"] is True
    # the other direction: the chapter's outputs against an index of typical report sentences
    index = ShingleIndex(TYPICAL_REPORTS, label="typical reports")
    text_leaks = [leak for leak in scan_notebook(nb, index=index, figure_key="", notebook=notebook)
                  if leak.kind != "image"]
    assert not text_leaks, text_leaks
    return out


def test_modalens_tables_chapter_builds_on_the_mimic_fixture(book_root, monkeypatch):
    """The mimic profile's ModaLens tables chapter, on records of the fixture, passes the scan."""
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(MIMIC_JPG))
    out = _chapter_on_fixture(book_root, "modalens_tables",
                              {"n_draws_primary": 200, "n_draws": 100, "reproduces_paper": False,
                               "primary_model": "ref-anchored@0.5"})
    assert "heart is enlarged" not in out.read_text(encoding="utf-8").lower()


def test_modalens_figures_chapter_builds_on_the_mimic_fixture(book_root, monkeypatch):
    """Figures pass when they are aggregate plots rendered through the tagging helper."""
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(MIMIC_JPG))
    out = _chapter_on_fixture(book_root, "modalens_figures",
                              {"n_draws": 100, "primary_model": "ref-anchored@0.5", "primary_w": 0.5})
    # figures reach the book as PNG files written by book.show and tagged in _figures/tags.jsonl
    figs = sorted((book_root / "book" / "_figures").glob("*.png"))
    tags = [json.loads(line) for line in (book_root / "book" / "_figures" / "tags.jsonl").read_text().splitlines() if line]
    by_file = {t["file"]: t["tag"] for t in tags}
    assert figs and all(by_file[f.name]["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest() for f in figs)


def test_staged_files_and_image_references_are_scanned(tmp_path):
    """A PNG without this execution's tag, any other file, and an output pointing at an untagged image are leaks."""
    from shovir_core.book.figures import figure_tag
    from shovir_core.book.scan import scan_staged

    index = ShingleIndex(TYPICAL_REPORTS, label="typical reports")
    figures = tmp_path / "_figures"
    figures.mkdir()
    good, bad = figures / "ok.png", figures / "xray.png"
    good.write_bytes(b"\x89PNG aggregate")
    bad.write_bytes(b"\x89PNG pixels")
    (figures / "tags.jsonl").write_text(json.dumps({"file": "ok.png", "tag": figure_tag(good.read_bytes(), key="k")}) + "\n")
    (tmp_path / "_tables").mkdir()
    (tmp_path / "_tables" / "t.csv").write_text("finding,n\nEdema,3\n")
    (tmp_path / "notes.bin").write_bytes(b"\x00")
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {"text/markdown": ":::{figure} _figures/ok.png\n:::"}},
        {"output_type": "display_data", "data": {"text/markdown": "![x](/data/mimic/files/p10/s1.jpg)"}}]}]}
    leaks = scan_staged(tmp_path, nb=nb, index=index, figure_key="k", notebook="nb")
    where = sorted(leak.where for leak in leaks)
    assert where == ["file _figures/xray.png", "file notes.bin", "image reference"], leaks
    assert not scan_staged(tmp_path, nb={"cells": []}, index=index, figure_key="k", notebook="nb")[2:]
    (tmp_path / "_tables" / "t.csv").write_text(TYPICAL_REPORTS[0])
    assert any(leak.kind == "report text" for leak in scan_staged(tmp_path, nb={"cells": []}, index=index,
                                                                   figure_key="k", notebook="nb"))


def test_shovir_table1_chapter_builds_on_the_mimic_imagenome_fixture(book_root, monkeypatch, tiny_chexbert_files):
    """The mimic profile's ShoViR Table 1 chapter (reports read from the dataset) on the ImaGenome fixture.

    (``shovir_figures`` asserts the reference models' planted behaviour, which three images cannot show.)
    """
    notebook = "shovir_table1"
    monkeypatch.setenv("SHOVIR_MIMIC", str(FIXTURES / "mimic_imagenome"))
    weights, bert_dir, _ = tiny_chexbert_files  # the mimic profile labels with CheXbert (a tiny one here)
    monkeypatch.setenv("SHOVIR_CHEXBERT_WEIGHTS", str(weights))
    monkeypatch.setenv("SHOVIR_CHEXBERT_BERT", str(bert_dir))
    shutil.copy(REPO / "notebooks" / f"{notebook}.py", book_root / "notebooks" / f"{notebook}.py")
    params = yaml.safe_load((REPO / "params" / notebook / "mimic.yaml").read_text(encoding="utf-8"))
    refs = {"ref-blind-prior": "ref-blind-prior", "ref-image-classifier": "ref-image-classifier"}
    base = next(iter(params["runs"].values()))["spec"]
    params["runs"] = {k: {"protocol": "shovir", "name": f"mimic-imagenome-{k}", "spec": {**base, "model": m}}
                      for k, m in refs.items()}
    params["parameters"] = {**params["parameters"], "paper_models": {}, "paper_dataset": None}
    (book_root / "params" / notebook).mkdir()
    (book_root / "params" / notebook / "mimic.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    out = execute_notebook(notebook, profile="mimic")
    nb = json.loads(out.read_text(encoding="utf-8"))
    assert nb["metadata"]["shovir"]["credentialed"] is True
    index = ShingleIndex(TYPICAL_REPORTS, label="typical reports")
    assert not [leak for leak in scan_notebook(nb, index=index, figure_key="", notebook=notebook)
                if leak.kind != "image"]


def test_leak_error_is_a_credentialed_data_error():
    assert issubclass(LeakError, CredentialedDataError)
