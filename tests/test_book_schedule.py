"""``shovir book --jobs K`` (issue 24, item 5): notebooks that share a record never run at once, the
reproduction map runs after every other chapter, and a failure stops new starts and is raised."""
from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from shovir_core.book import runner
from shovir_core.book.runner import BookError, book_schedule, execute_parallel
from shovir_core.params import load_params, toc_notebooks


def test_demo_schedule_chains_shared_records_and_puts_the_map_last():
    names = toc_notebooks()
    after = book_schedule(names, "demo")
    owners: dict[tuple[str, str], list[str]] = {}
    for n in names:
        for r in load_params(n, "demo")["runs"].values():
            owners.setdefault((r["protocol"], r["name"]), []).append(n)
    shared = [ns for ns in owners.values() if len(set(ns)) > 1]
    assert shared, "the demo has chapters sharing a record: the check below would be vacuous"
    for ns in shared:  # each later user waits (directly or transitively) for the earlier ones
        for earlier, later in zip(ns, ns[1:]):
            seen, todo = set(), [later]
            while todo:
                m = todo.pop()
                seen |= after[m]
                todo += [x for x in after[m] if x not in seen]
            assert earlier in seen, (earlier, later)
    assert after["reproduction_map"] == set(names) - {"reproduction_map"}
    assert not after["data"]


def test_requires_must_be_all_or_a_list(monkeypatch):
    specs = {"a": {"runs": {}, "requires": None, "path": "a.yaml"},
             "b": {"runs": {}, "requires": ["a", "not-in-build"], "path": "b.yaml"},
             "c": {"runs": {}, "requires": "a", "path": "c.yaml"}}
    monkeypatch.setattr(runner, "load_params", lambda n, profile: specs[n])
    assert book_schedule(["a", "b"], "demo") == {"a": set(), "b": {"a"}}
    with pytest.raises(BookError, match="'requires' must be"):
        book_schedule(["a", "c"], "demo")


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


def test_parallel_runs_at_once_but_never_a_notebook_before_the_ones_it_waits_for(sched_job, tmp_path):
    after = {"a": set(), "b": {"a"}, "c": set(), "d": set(), "last": {"a", "b", "c", "d"}}
    out = execute_parallel(list(after), profile="demo", progress=False, jobs=2, job=sched_job, after=after)
    assert out == list(after)
    s = _spans(tmp_path)
    for n, deps in after.items():
        for d in deps:
            assert s[d]["end"] <= s[n]["start"], (d, n)
    overlap = any(s[x]["start"] < s[y]["end"] and s[y]["start"] < s[x]["end"]
                  for x in s for y in s if x < y)
    assert overlap, "two independent notebooks should have run at the same time"


def test_a_failure_lets_the_running_finish_starts_nothing_and_is_raised(sched_job, tmp_path, capsys):
    after = {"bad": set(), "slow-ok": set(), "later": {"bad"}, "last": {"slow-ok"}}
    with pytest.raises(RuntimeError, match="bad notebook"):
        execute_parallel(list(after), profile="demo", progress=False, jobs=2, job=sched_job, after=after)
    s = _spans(tmp_path)
    assert "slow-ok" in s and "later" not in s and "last" not in s
    assert "not started" in capsys.readouterr().err
