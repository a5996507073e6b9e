"""A reduced rehearsal (1 % of the ModaLens cohort, two chapters, §4.1's and App. E's) runs the real code path
end to end: the synthetic tree, the stand-ins, each chapter's records made in two local shard processes (issue
26: sharded execution works in rehearsal too), its notebook in a child process beside the next chapter's
records, the guard, the banner and the report. (The book's Rehearsal chapter runs reduced ones without shards.)"""
import json
from pathlib import Path

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
        # two chapters: the first one's notebook runs beside the second one's records (overlap), under the guard
        yield rehearse("mimic", only=["modalens_s41", "modalens_appe"], scale=0.01, shards=2, progress=False), runs, mp
    finally:
        mp.undo()


def test_the_chapter_runs_to_the_end_with_stand_ins(report):
    rep, runs, mp = report
    chapter, second = rep["chapters"]
    assert chapter["status"] == "ok", chapter.get("error")
    assert second["status"] == "ok", second.get("error")  # its log, written while the first notebook ran, is no leak
    assert not any(Path(rep["book"]).glob("*.log"))
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

    def spawn(cmd, env, log):
        seen.append((cmd, env))
        return 1, 0.0, 0.0, ""

    monkeypatch.setenv(kernel_forkserver.SERVER_ENV, "/nonexistent/fork")
    monkeypatch.setattr(rehearsal_run, "_spawn", spawn)
    again = rehearse("mimic", only=["modalens_s41"], scale=0.01, progress=False)
    assert again["tree_sha256"] == rep["tree_sha256"] and len(seen) == 1  # its records failed: no notebook
    assert seen[0][0][-3:] == ["mimic", "modalens_s41", "0"]
    assert seen[0][1]["SHOVIR_RUNS"] == again["runs_root"]  # the chapter's environment, as it is given
    assert kernel_forkserver.SERVER_ENV not in seen[0][1]
    assert again["chapters"][0]["status"] == "failed"


@pytest.mark.parametrize("overlap", [True, False])
def test_a_chapters_notebook_runs_beside_the_next_chapters_records(report, monkeypatch, tmp_path, overlap):
    """With ``overlap`` chapter k's notebook (one core) runs while chapter k+1's records are made; the notebooks
    still run one at a time and in chapter order, a chapter whose records failed keeps its place in the report,
    and each phase is timed apart. Without it every phase waits for the one before (``shovir book``)."""
    import threading
    import time

    import nbformat

    from shovir_core.rehearsal import run as rehearsal_run

    rep, _, _ = report  # the tree is written and cached: only the phases' processes are faked
    events, lock = [], threading.Lock()

    def spawn(cmd, env, log):
        phase, chapter = cmd[3], cmd[5]
        with lock:
            events.append(("start", phase, chapter))
        time.sleep(0.3)
        with lock:
            events.append(("end", phase, chapter))
        if phase == "records":
            if chapter == "modalens_appd":
                return 1, 0.3, 0.1, ""
            return 0, 0.3, 0.2, rehearsal_run.RECORDS_LINE + json.dumps({"run_ids": {}, "peak_mb": 100.0})
        path = tmp_path / f"{chapter}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(), path)
        return 0, 0.3, 0.3, rehearsal_run.NOTEBOOK_LINE + json.dumps({"notebook": str(path), "peak_mb": 70.0})

    monkeypatch.setattr(rehearsal_run, "_spawn", spawn)
    chapters = ["modalens_s41", "modalens_appd", "modalens_apph"]
    out = rehearse("mimic", only=chapters, scale=0.01, progress=False, overlap=overlap)
    assert [c["chapter"] for c in out["chapters"]] == chapters
    assert [c["status"] for c in out["chapters"]] == ["ok", "failed", "ok"]
    first = out["chapters"][0]
    assert (first["records_seconds"], first["notebook_seconds"], first["seconds"]) == (0.3, 0.3, 0.6)
    assert first["cpu_seconds"] == 0.5 and first["peak_mb"] == 100.0
    assert out["peak_mb_together"] == (170.0 if overlap else 100.0)
    notebooks = [e for e in events if e[1] == "notebook"]
    assert notebooks == [("start", "notebook", "modalens_s41"), ("end", "notebook", "modalens_s41"),
                         ("start", "notebook", "modalens_apph"), ("end", "notebook", "modalens_apph")]
    beside = events.index(("start", "records", "modalens_appd")) < events.index(("end", "notebook", "modalens_s41"))
    assert beside is overlap
    if not overlap:  # one phase at a time
        assert all(a[0] == "start" and b == ("end", *a[1:]) for a, b in zip(events[::2], events[1::2]))


def test_the_layer_chapters_records_come_first_and_the_report_keeps_the_books_order(report, monkeypatch):
    """App. N's chapters (layer protocols: the longest records and Table 26's long notebook) are made first,
    so the notebook no records run beside is a short chapter's; the report still lists the book's order."""
    from shovir_core.rehearsal import run as rehearsal_run

    rep, _, _ = report
    started = []

    def spawn(cmd, env, log):
        phase, chapter = cmd[3], cmd[5]
        if phase == "records":
            started.append(chapter)
            return 0, 0.1, 0.1, rehearsal_run.RECORDS_LINE + json.dumps({"run_ids": {}, "peak_mb": 10.0})
        return 1, 0.1, 0.1, ""  # the notebooks' outcome is not what this test is about

    monkeypatch.setattr(rehearsal_run, "_spawn", spawn)
    chapters = ["modalens_s41", "modalens_appd", "modalens_appn", "modalens_appn_probes"]
    assert rehearsal_run.run_order(chapters, "mimic") == ["modalens_appn", "modalens_appn_probes", "modalens_s41",
                                                          "modalens_appd"]
    out = rehearse("mimic", only=chapters, scale=0.01, progress=False)
    assert started == ["modalens_appn", "modalens_appn_probes", "modalens_s41", "modalens_appd"]
    assert [c["chapter"] for c in out["chapters"]] == chapters
