"""Book writes that cannot collide (issue 25, item 1).

* two and three ``shovir book --only ...`` processes at once (one of them a credentialed chapter on
  the synthetic MIMIC-CXR-JPG fixture whose notebook waits until the others have published): every
  notebook, table and manifest each wrote is there, the credentialed guard deleted nothing of the
  others', and the glue index holds every notebook's keys, keyed by (notebook, key);
* a publish stopped (SIGKILL) after each of its write steps: the book is the old version or, once
  the next writer recovers, the new one, never a mix; the index always matches the notebooks;
* the work folder of a killed run is removed by the next run, which says so.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from shovir_core.book import publish as pub
from shovir_core.records.files import HOST

REPO = Path(__file__).resolve().parent.parent
MIMIC_JPG = Path(__file__).parent / "fixtures" / "mimic_jpg"

HEADER = """# %% tags=["parameters"]
profile = "demo"
run_ids = None
started = ""
wait_for = []
label = "a"
"""

PUBLIC = HEADER + """
# %%
import pathlib
import time

import pandas as pd

from shovir_core import book

pathlib.Path(started).write_text("started")
for _ in range(900):  # until the other processes' notebooks are executing (or have published)
    if all(pathlib.Path(p).is_file() for p in wait_for):
        break
    time.sleep(0.2)
else:
    raise RuntimeError(f"the other runs never reached {wait_for}")
book.glue("shared.n", 7, runs=[])
book.glue(f"pub.{label}", 1, runs=[])
book.show(pd.DataFrame({"x": [1, 2]}), runs=[], name=f"pub-{label}", caption="A public table.")

# %% [markdown]
# Seven: {glue:text}`shared.n`.
"""

CREDENTIALED = HEADER + """
# %%
import pathlib
import time

import pandas as pd

from shovir_core import book

runs = book.load_runs("cred", profile=profile, run_ids=run_ids)
pathlib.Path(started).write_text("started")
for _ in range(900):  # until the public chapters have published into the book
    if all(pathlib.Path(p).is_file() for p in wait_for):
        break
    time.sleep(0.2)
else:
    raise RuntimeError(f"the other runs never reached {wait_for}")
n = len(runs["cohort"].trials)
book.glue("shared.n", n, runs=runs)
book.show(pd.DataFrame({"group": ["all"], "n": [n]}), runs=runs, name="cred-counts", caption="Counts.")

# %% [markdown]
# Counted: {glue:text}`shared.n`.
"""

COHORT = {"cohort": {"protocol": "cohort", "name": "concurrency-fixture", "spec": {"dataset": f"mimic-jpg:{MIMIC_JPG}"}}}


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for d in ("notebooks", "params", "book"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    return root


def _chapter(root: Path, name: str, source: str, *, profile: str, runs: dict, parameters: dict) -> None:
    (root / "notebooks" / f"{name}.py").write_text(source, encoding="utf-8")
    (root / "params" / name).mkdir(exist_ok=True)
    (root / "params" / name / f"{profile}.yaml").write_text(
        yaml.safe_dump({"runs": runs, "parameters": parameters}), encoding="utf-8")


def _toc(root: Path, names: list[str]) -> None:
    (root / "_toc.yml").write_text(yaml.safe_dump(
        {"format": "jb-book", "root": f"book/{names[0]}", "chapters": [{"file": f"book/{n}"} for n in names[1:]]}))


def _env(root: Path) -> dict:
    env = dict(os.environ)
    env.update({"SHOVIR_ROOT": str(root), "SHOVIR_RUNS": str(root / "runs"),
                "SHOVIR_DEMO_DATA": str(REPO / "data" / "demo"), "PYTHONPATH": str(REPO)})
    return env


def _book(root: Path, name: str, profile: str = "demo") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shovir_core.cli", "book", "--only", name, "--no-build", "-q",
                             "--profile", profile], cwd=root, env=_env(root), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(procs: dict[str, subprocess.Popen]) -> None:
    outs = {name: p.communicate(timeout=600)[0] for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, f"{name}: exit {p.returncode}\n{outs[name]}"
        assert f"executed {Path('book') / name}.ipynb" in outs[name] or f"{name}.ipynb" in outs[name], outs[name]


def _check_index(book: Path, names: list[str]) -> dict:
    """The index file is in step with the notebooks: one entry per notebook, its hash, its glue keys."""
    data = json.loads((book / pub.GLUE_INDEX).read_text(encoding="utf-8"))
    assert data["format"] == pub.INDEX_FORMAT
    assert sorted(data["notebooks"]) == sorted(names)
    for name in names:
        nb = book / f"{name}.ipynb"
        glued = json.loads(nb.read_text(encoding="utf-8"))["metadata"]["shovir"]["glue"]
        assert data["notebooks"][name]["glue"] == glued
        assert data["notebooks"][name]["sha256"] == pub.file_sha256(nb)
    assert pub.glue_index(book) == {n: data["notebooks"][n]["glue"] for n in names}
    return data


def test_two_public_book_runs_at_once_keep_both_chapters(repo, tmp_path):
    names = ["pub_a", "pub_b"]
    for label, other in (("a", "b"), ("b", "a")):
        _chapter(repo, f"pub_{label}", PUBLIC, profile="demo", runs={}, parameters={
            "label": label, "started": str(tmp_path / f"started_{label}"), "wait_for": [str(tmp_path / f"started_{other}")]})
    _toc(repo, names)
    _finish({n: _book(repo, n) for n in names})
    book = repo / "book"
    for label in "ab":
        assert (book / f"pub_{label}.ipynb").is_file() and (book / "_tables" / f"pub-{label}.csv").is_file()
    index = pub.glue_index(book)
    assert index["pub_a"]["pub.a"] == [] and index["pub_b"]["pub.b"] == [] and "pub.b" not in index["pub_a"]
    assert "shared.n" in index["pub_a"] and "shared.n" in index["pub_b"]  # one key glued by two chapters
    _check_index(book, names)
    assert not list((book / pub.PUBLISH_DIR).glob("*-*-*")), "no transaction left behind"


def test_three_book_runs_at_once_with_a_credentialed_chapter(repo, tmp_path):
    names = ["cred", "pub_a", "pub_b"]
    book = repo / "book"
    _chapter(repo, "cred", CREDENTIALED, profile="mimic", runs=COHORT, parameters={
        "started": str(tmp_path / "started_cred"), "wait_for": [str(book / "pub_a.ipynb"), str(book / "pub_b.ipynb")]})
    for label in "ab":
        _chapter(repo, f"pub_{label}", PUBLIC, profile="demo", runs={}, parameters={
            "label": label, "started": str(tmp_path / f"started_{label}"), "wait_for": [str(tmp_path / "started_cred")]})
    _toc(repo, names)
    # the record first, so the credentialed notebook is executing while the public ones publish
    env = _env(repo)
    made = subprocess.run([sys.executable, "-m", "shovir_core.cli", "run", "cred", "--profile", "mimic", "-q"],
                          cwd=repo, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    procs = {"cred": _book(repo, "cred", "mimic")}
    procs.update({n: _book(repo, n) for n in ("pub_a", "pub_b")})
    _finish(procs)
    for name in names:
        assert (book / f"{name}.ipynb").is_file(), f"{name}.ipynb was deleted"
    for table in ("pub-a", "pub-b", "cred-counts"):
        assert (book / "_tables" / f"{table}.csv").is_file(), f"{table}.csv was deleted"
    manifests = list((book / "_records").glob("cohort/concurrency-fixture/*/manifest.json"))
    assert len(manifests) == 1
    index = _check_index(book, names)["notebooks"]
    run_id = manifests[0].parent.relative_to(book / "_records").as_posix()
    assert [r["run_id"] for r in index["cred"]["glue"]["shared.n"]] == [run_id]
    assert index["pub_a"]["glue"]["shared.n"] == [] == index["pub_b"]["glue"]["shared.n"]
    assert json.loads((book / "cred.ipynb").read_text())["metadata"]["shovir"]["credentialed"] is True


# --------------------------------------------------------------------------- kills at each write step
def _version(book: Path, text: str) -> tuple[str, dict]:
    nb = {"cells": [], "metadata": {"shovir": {"glue": {"k": [{"run_id": f"p/{text}/0", "spec_sha256": text}]}}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb), {"_tables/t.csv": text, "_records/p/n/0/manifest.json": text}


KILL = textwrap.dedent("""
    import os, signal, sys, json
    from pathlib import Path
    from shovir_core.book import publish as pub

    book, step, staged = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    def stop(name):
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)
    pub._after_step = stop
    files = {rel: staged / rel for rel in json.loads((staged / "files.json").read_text())}
    with pub.book_lock(book):
        pub.publish(book, "nb", notebook_text=(staged / "nb.ipynb").read_text(), files=files)
""")

STEPS = ["staged", "committed", "moved 0", "moved 1", "moved 2", "indexed", None]


@pytest.mark.parametrize("step", STEPS, ids=[s or "no-kill" for s in STEPS])
def test_a_publish_killed_after_any_step_leaves_the_book_consistent(tmp_path, step):
    book = tmp_path / "book"
    book.mkdir()
    old_nb, old_files = _version(book, "old")
    with pub.book_lock(book):
        staged = tmp_path / "old"
        for rel, text in old_files.items():
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_text(text)
        pub.publish(book, "nb", notebook_text=old_nb, files={rel: staged / rel for rel in old_files})
    _check_index(book, ["nb"])
    new_nb, new_files = _version(book, "new")
    staged = tmp_path / "new"
    for rel, text in new_files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text)
    (staged / "nb.ipynb").write_text(new_nb)
    (staged / "files.json").write_text(json.dumps(sorted(new_files)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", KILL, str(book), str(step), str(staged)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == (-signal.SIGKILL if step else 0), proc.stderr
    # whatever state the kill left, readers of the index see the notebooks as they are
    on_disk = json.loads((book / "nb.ipynb").read_text())["metadata"]["shovir"]["glue"]
    assert pub.glue_index(book) == {"nb": on_disk}
    with pub.book_lock(book):
        said = pub.recover(book)
    want = "old" if step == "staged" else "new"
    assert (book / "nb.ipynb").read_text() == (old_nb if want == "old" else new_nb)
    for rel in new_files:
        assert (book / rel).read_text() == want, (rel, step)
    assert bool(said) == (step is not None), said
    if step == "staged":
        assert "discarded" in said[0]
    elif step:
        assert "completed the publish of 'nb'" in said[0]
    _check_index(book, ["nb"])
    assert not [p for p in (book / pub.PUBLISH_DIR).iterdir() if p.is_dir()]


def test_a_killed_runs_work_folder_is_removed_by_the_next_run(runs_root, capsys):
    from shovir_core.book.runner import BOOK_TMP, _work_folder

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = runs_root / BOOK_TMP / f"cred-{HOST.replace('-', '_')}-{dead.pid}-0badc0de"
    (left / "outputs" / "_tables").mkdir(parents=True)
    (left / "cred.executed.ipynb").write_text("{}")
    (left / "outputs" / "_tables" / "t.csv").write_text("x")
    live = runs_root / BOOK_TMP / f"other-{HOST.replace('-', '_')}-{os.getpid()}-0badc0de"
    live.mkdir()
    with _work_folder("data") as tmp:
        assert Path(tmp).is_dir()
    err = capsys.readouterr().err
    assert not left.exists() and f"removed {left}" in err and "interrupted run of 'cred'" in err
    assert live.is_dir(), "a live process's work folder is kept"
    assert not Path(tmp).exists()


def test_the_sphinx_extension_reads_the_index_by_notebook(tmp_path):
    from types import SimpleNamespace

    from shovir_core.book.sphinx_ext import _glue_index

    book = tmp_path / "book"
    book.mkdir()
    for name, text in (("one", "old"), ("two", "new")):
        nb, _ = _version(book, text)
        with pub.book_lock(book):
            pub.publish(book, name, notebook_text=nb, files={})
    app = SimpleNamespace(srcdir=str(tmp_path), config=SimpleNamespace(shovir_book_dir="book"))
    index = _glue_index(app)
    assert index["one"]["k"][0]["spec_sha256"] == "old" and index["two"]["k"][0]["spec_sha256"] == "new"
    nb, _ = _version(book, "newer")  # a notebook rewritten behind the index's back (a killed publish)
    (book / "one.ipynb").write_text(nb)
    assert _glue_index(app)["one"]["k"][0]["spec_sha256"] == "newer"
