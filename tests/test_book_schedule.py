"""``shovir book --jobs K`` (issue 24, item 5): the records of all chapters are made once each (a record two
chapters name, by one task), a notebook waits only for the tasks making its own records, the reproduction map
runs after every other chapter, and a failure stops new starts and is raised."""
from __future__ import annotations

import json
import os
import textwrap
from functools import partial

import pytest

from shovir_core.book import schedule
from shovir_core.book.runner import BookError
from shovir_core.book.schedule import book_plan, execute_parallel
from shovir_core.params import load_params, toc_notebooks
from shovir_core.protocols import run_id
from shovir_core.records import spec_hash


def test_demo_plan_makes_each_record_once_and_starts_the_map_after_every_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))  # no record exists yet: every one gets a task
    names = toc_notebooks()
    plan = book_plan(names, "demo")
    made = [rid for rids in plan.records.values() for rid in rids]
    assert len(made) == len(set(made)), "a record is made by two tasks"
    maker = {rid: task for task, rids in plan.records.items() for rid in rids}
    owners: dict[str, list[str]] = {}
    for n in names:
        for r in load_params(n, "demo")["runs"].values():
            owners.setdefault(run_id(r["protocol"], r["name"], r["spec"]), []).append(n)
    assert set(maker) == set(owners), "every record a chapter names is made, and nothing else"
    shared = [rid for rid, ns in owners.items() if len(set(ns)) > 1]
    assert shared, "the demo has chapters sharing a record: the checks below would be vacuous"
    for rid in shared:  # made once, by the first chapter naming it (the one that made it chapter by chapter)
        assert maker[rid].startswith(owners[rid][0] + "["), (rid, maker[rid])
    for n in set(names) - {"reproduction_map"}:  # a notebook waits for the tasks making its records, no other
        needs = {maker[rid] for rid in plan.run_ids[n].values()}
        assert {t for t in plan.after[n] if t in plan.records} == needs, n
        assert set(plan.run_ids[n]) == set(load_params(n, "demo")["runs"]), n
    # the reproduction map reads every chapter's records (requires: records), no notebook's output
    assert plan.after["reproduction_map"] == set(plan.records)
    assert not any(plan.after[t] for t in plan.records), "record tasks wait for nothing"
    appn = [t for t in plan.records if t.startswith("modalens_appn[")]
    assert len(appn) > 1, "a chapter's slow records are split over several tasks"
    tables = [plan.records[t] for t in plan.records if t.startswith("modalens_tables[")]
    assert any(len(rids) > 1 for rids in tables), "arms one prefill scores together stay in one task"
    probes = load_params("modalens_appn_probes", "demo")["runs"].values()
    lens = {run_id(r["protocol"], r["name"], r["spec"]) for r in probes if r["spec"].get("analysis") == "tuned-lens"}
    assert len(lens) == 2 and len({maker[rid] for rid in lens}) == 1, "the tuned-lens records share one trained lens"
    records = [t for t in plan.priority if t in plan.records]
    rehearsals = [t for t in records if t.startswith("rehearsal[")]
    assert rehearsals and records[:len(rehearsals)] == rehearsals, \
        "the rehearsals (the longest record tasks) start first, not alone at the end"
    target = {run_id(r["protocol"], r["name"], r["spec"]): (r["protocol"], r["name"], r["spec"])
              for n in names for r in load_params(n, "demo")["runs"].values()}
    task_groups = {t: [target[rid] for rid in rids] for t, rids in plan.records.items()}
    ranks = [schedule._start_rank(task_groups[t]) for t in records]
    assert ranks == sorted(ranks) and ranks[0] == 0 and set(ranks) == {0, 1, 2, 3}, "longest expected first"
    vlm = [t for t in records if any(spec.get("model") == "ref-vlm" for _, _, spec in task_groups[t])]
    anchored = [t for t in records if all(str(spec.get("model", "")).startswith("ref-anchored")
                                          for _, _, spec in task_groups[t])]
    assert vlm and anchored and max(map(records.index, vlm)) < min(map(records.index, anchored)), \
        "ref-vlm's records start before the reference models'"


def test_a_complete_record_gets_no_task(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))
    first = book_plan(["data"], "demo")
    assert first.records and first.after["data"] == set(first.records)
    done = next(iter(first.records))
    complete = set(first.records[done])
    monkeypatch.setattr("shovir_core.protocols.is_complete",  # as if that task's records were made
                        lambda protocol, name, spec, resolved: f"{protocol}/{name}/{spec_hash(spec)[:12]}" in complete)
    again = book_plan(["data"], "demo")
    assert not complete & {rid for rids in again.records.values() for rid in rids}
    assert again.run_ids == first.run_ids and len(again.records) == len(first.records) - 1


def test_requires_must_be_all_records_or_a_list(monkeypatch):
    specs = {"a": {"runs": {}, "requires": None, "path": "a.yaml"},
             "b": {"runs": {}, "requires": ["a", "not-in-build"], "path": "b.yaml"},
             "c": {"runs": {}, "requires": "a", "path": "c.yaml"}}
    monkeypatch.setattr(schedule, "load_params", lambda n, profile: specs[n])
    plan = book_plan(["a", "b"], "demo")
    assert plan.after == {"a": set(), "b": {"a"}} and set(plan.tasks) == {"a", "b"}
    with pytest.raises(BookError, match="'requires' must be"):
        book_plan(["a", "c"], "demo")


def test_requires_records_waits_for_the_records_not_the_notebooks(tmp_path, monkeypatch):
    """The reproduction map reads every chapter's records: it starts once they exist, beside the notebooks."""
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))
    real = schedule.load_params
    monkeypatch.setattr(schedule, "load_params",
                        lambda n, profile: {**real(n, profile), "requires": "records"} if n == "perturbations"
                        else real(n, profile))
    plan = book_plan(["data", "perturbations"], "demo")
    own = {t for t in plan.records if t.startswith("perturbations[")}
    others = set(plan.records) - own
    assert others and plan.after["perturbations"] == own | others
    assert "data" not in plan.after["perturbations"]


JOB = textwrap.dedent('''
    import json, os, time
    from pathlib import Path

    def job(name, profile):
        log = Path(os.environ["SCHED_LOG"])
        start = time.time()
        time.sleep(1.0 if name.startswith("slow") else 0.4)
        if name == "bad":
            raise RuntimeError("bad notebook")
        with open(log / f"{name}.json", "w") as fh:
            json.dump({"start": start, "end": time.time(), "pid": os.getpid()}, fh)
        return name
''')


@pytest.fixture
def sched_job(tmp_path, monkeypatch):
    (tmp_path / "sched_job_mod.py").write_text(JOB)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("SCHED_LOG", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    import sched_job_mod

    return sched_job_mod.job


def _spans(tmp_path):
    return {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}


def test_parallel_runs_at_once_but_never_a_task_before_the_ones_it_waits_for(sched_job, tmp_path):
    after = {"a": set(), "b": {"a"}, "c": set(), "d": set(), "last": {"a", "b", "c", "d"}}
    tasks = {n: partial(sched_job, n, "demo") for n in after}
    out = execute_parallel(tasks, progress=False, jobs=2, after=after, priority=["last", "d", "c", "b", "a"])
    assert out == {n: n for n in after}
    s = _spans(tmp_path)
    assert s["a"]["start"] >= min(s["c"]["end"], s["d"]["end"]), "ready tasks start in priority order"
    for n, deps in after.items():
        for d in deps:
            assert s[d]["end"] <= s[n]["start"], (d, n)
    overlap = any(s[x]["start"] < s[y]["end"] and s[y]["start"] < s[x]["end"]
                  for x in s for y in s if x < y)
    assert overlap, "two independent notebooks should have run at the same time"


def test_a_failure_lets_the_running_finish_starts_nothing_and_is_raised(sched_job, tmp_path, capsys):
    after = {"bad": set(), "slow-ok": set(), "later": {"bad"}, "last": {"slow-ok"}}
    tasks = {n: partial(sched_job, n, "demo") for n in after}
    with pytest.raises(RuntimeError, match="bad notebook"):
        execute_parallel(tasks, progress=False, jobs=2, after=after)
    s = _spans(tmp_path)
    assert "slow-ok" in s and "later" not in s and "last" not in s
    assert "not started" in capsys.readouterr().err


MAKER = textwrap.dedent('''
    import os, time
    from pathlib import Path

    def make(n):
        from shovir_core import protocols
        from shovir_core.protocols import cohort

        log = Path(os.environ["SCHED_LOG"])

        real = cohort.execute

        def slow_execute(*args, **kwargs):  # a record that takes a while, so both processes ask while it is made
            with open(log / "executed.log", "a") as fh:
                fh.write(f"{os.getpid()}\\n")
            time.sleep(1.0)
            return real(*args, **kwargs)

        cohort.execute = slow_execute
        (log / f"ready-{os.getpid()}").touch()  # both processes imported: ask for the record together
        deadline = time.time() + 300
        while len(list(log.glob("ready-*"))) < n and time.time() < deadline:
            time.sleep(0.05)
        return protocols.run("cohort", "demo-bbox", {"dataset": "demo"}, progress=False).run_id
''')


def test_two_processes_asking_for_one_record_make_it_once(tmp_path, monkeypatch):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    (tmp_path / "sched_maker_mod.py").write_text(MAKER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("SCHED_LOG", str(tmp_path))
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import sched_maker_mod

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        ids = [f.result() for f in [pool.submit(sched_maker_mod.make, 2) for _ in range(2)]]
    assert len(list(tmp_path.glob("ready-*"))) == 2, "the two calls came from two processes"
    assert ids[0] == ids[1] == run_id("cohort", "demo-bbox", {"dataset": "demo"})
    makers = (tmp_path / "executed.log").read_text().split()
    assert len(makers) == 1, f"the record was made by {len(makers)} processes"
