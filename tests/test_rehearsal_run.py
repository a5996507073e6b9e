"""A reduced rehearsal (1 % of the ModaLens cohort, one chapter, §4.1's) runs the real code path end to end:
the synthetic tree, the stand-ins, the chapter's records made in two local shard processes (issue 26:
sharded execution works in rehearsal too), its notebook in a child process, the guard, the banner and
the report. (The book's Rehearsal chapter runs reduced ones without shards.)"""
import json

import nbformat
import pytest

from shovir_core.records import load_run
from shovir_core.rehearsal.run import rehearse


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("SHOVIR_RUNS", str(runs))
    try:
        yield rehearse("mimic", only=["modalens_s41"], scale=0.01, shards=2, progress=False), runs, mp
    finally:
        mp.undo()


def test_the_chapter_runs_to_the_end_with_stand_ins(report):
    rep, runs, mp = report
    (chapter,) = rep["chapters"]
    assert chapter["status"] == "ok", chapter.get("error")
    assert chapter["trials"] > 0 and chapter["peak_mb"] > 0 and chapter["seconds"] > 0
    # the CPU time of the chapter's processes (child, kernel, shards): at least the notebook's kernel start
    assert 1 < chapter["cpu_seconds"] < 2 * chapter["seconds"] + 5
    # every record's trials beside the paper's denominator at the rehearsal's planted sizes: §4.1's all-14 and
    # one-question records run exactly the paper's designs (ModaLens §3), so each is equal to it
    assert {r["verdict"] for r in chapter["records"]} == {"equal"}, [(r["key"], r["reason"]) for r in chapter["records"]]
    assert all(r["paper_trials"] > r["paper_trials_scaled"] == r["trials"] for r in chapter["records"])
    assert chapter["model_calls"] == sum(r["model_calls"] for r in chapter["records"]) >= chapter["trials"]  # each trial asks about two images; an image may recur
    assert "--profile mimic" in chapter["command"]
    assert json.loads((runs / "rehearsal" / "report-mimic.json").read_text())["chapters"][0]["status"] == "ok"
    mp.setenv("SHOVIR_RUNS", rep["runs_root"])
    for r in chapter["records"]:
        run = load_run(*r["run_id"].split("/"))
        assert run.info.spec.get("dataset", "").startswith("mimic-jpg:")
        text = json.dumps(run.manifest)
        assert "stand_in" in text, f"{r['run_id']}: the record does not name its stand-in"
        assert run.manifest.get("credentialed") is True  # the guard treats the synthetic tree as credentialed
        # the sharded records were made by the two shard processes, not again by the chapter's own process
        assert run.manifest.get("shards") == 2 and {p["file"].split("-")[1] for p in run.manifest["parts"]} == \
            {"s000of002", "s001of002"}, f"{r['run_id']}: not made by two shards"


def test_every_executed_page_carries_the_banner(report):
    rep, _, _ = report
    nb = nbformat.read(rep["chapters"][0]["notebook"], as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "Rehearsal — not a result" in nb.cells[0].source
    assert "stand-in" in nb.cells[0].source


def test_rehearsal_records_stay_out_of_the_users_runs(report):
    rep, runs, _ = report
    assert rep["runs_root"].startswith(str(runs / "rehearsal"))
    assert not (runs / "modalens").exists()


def test_a_chapters_kernel_is_its_own_child_under_the_books_fork_server(report, monkeypatch):
    """The chapter reports its kernel's peak memory and CPU time as its child's (RUSAGE_CHILDREN): inside
    ``shovir book`` (the demo's Rehearsal chapter) its kernel must not come from the book's kernel fork
    server, whose child it would be."""
    from shovir_core import kernel_forkserver
    from shovir_core.rehearsal import run as rehearsal_run

    rep, _, _ = report  # the tree is written and cached: this rehearsal only starts its chapter's process
    seen = []

    class Child:
        returncode = 1

        def __init__(self, cmd, env, **_):
            seen.append(env)

        def communicate(self):
            return "", None

    monkeypatch.setenv(kernel_forkserver.SERVER_ENV, "/nonexistent/fork")
    monkeypatch.setattr(rehearsal_run.subprocess, "Popen", Child)
    again = rehearse("mimic", only=["modalens_s41"], scale=0.01, progress=False)
    assert again["tree_sha256"] == rep["tree_sha256"] and len(seen) == 1
    assert seen[0]["SHOVIR_RUNS"] == again["runs_root"]  # the chapter's environment, as it is given
    assert kernel_forkserver.SERVER_ENV not in seen[0]
