"""`shovir records list` and `shovir jobs status` survive a record they cannot read (issue 25, item 4)."""
from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from shovir_core import cli
from shovir_core.jobs import RunTarget, status
from shovir_core.records import RunWriter, runs_df


def _make(name: str) -> Path:
    with RunWriter("proto", name, {"dataset": "demo", "name": name}) as w:
        w.append([{"trial_id": f"t{i}", "value": float(i)} for i in range(3)])
        assert w.complete(n_cells=1) is True
    return w.path


@pytest.fixture
def one_unreadable(runs_root, monkeypatch):
    """Three records; every file under the second raises Permission denied (as for another user's files)."""
    paths = [_make(n) for n in ("alpha", "beta", "gamma")]
    bad = paths[1]
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).is_relative_to(bad / "parts"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    return paths, bad


def test_records_list_shows_the_good_records_beside_an_unreadable_one(one_unreadable, capsys):
    paths, bad = one_unreadable
    df = runs_df(on_error="report")
    assert len(df) == 3 and df["problem"].notna().sum() == 1
    assert "Permission denied" in df.loc[df["name"] == "beta", "problem"].iloc[0]
    assert cli.main(["records", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for good in ("alpha", "gamma"):
        assert any(f"proto/{good}/" in line and "complete" in line for line in lines), out
    flagged = [line for line in lines if line.startswith("BAD proto/beta/")]
    assert len(flagged) == 1 and "Permission denied" in flagged[0]


def test_jobs_status_lists_every_readable_record(one_unreadable, monkeypatch):
    paths, bad = one_unreadable
    import importlib

    status_module = importlib.import_module("shovir_core.jobs.status")

    monkeypatch.setattr(status_module, "_record_path", lambda t: paths[["alpha", "beta", "gamma"].index(t.name)])
    df = status([RunTarget("proto", n, {"dataset": "demo", "name": n}) for n in ("alpha", "beta", "gamma")])
    assert list(df["record"]) == ["complete", "unreadable", "complete"]
    assert "Permission denied" in str(df.loc[1, "error"])
