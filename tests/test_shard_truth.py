"""Shard arguments and bookkeeping that say the truth (issue 25, item 3)."""
from __future__ import annotations

import pytest

from shovir_core import cli, protocols
from shovir_core.jobs.exit_status import describe_exit
from shovir_core.records import Shard, load_run

from test_shards import MODALENS


@pytest.mark.parametrize("argv, says", [
    (["--shards", "0"], "--shards 0: give a number of shards of at least 1"),
    (["--shards", "-2"], "--shards -2: give a number of shards of at least 1"),
    (["--shards", "0", "--executor", "local"], "--shards 0: give a number of shards of at least 1"),
    (["--shards", "3", "--shard", "3"], "--shard 3 must lie in 0..2"),
    (["--shards", "2", "--shard", "-1"], "--shard -1 must lie in 0..1"),
    (["--shard", "0"], "--shard and --executor need --shards N"),
])
def test_bad_shard_arguments_are_refused_with_one_line(runs_root, capsys, argv, says):
    assert cli.main(["run", "data", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not runs_root.exists() or not any(runs_root.rglob("manifest.json")), "nothing ran"


def test_exit_statuses_are_described():
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(137) == "exit status 137 (128 + 9: as if killed by SIGKILL, e.g. out of memory)"
    assert describe_exit(1) == "exit status 1"


SPEC = {**MODALENS, "n_patients": 3}


def test_records_complete_counts_the_markers_and_names_missing_shards(runs_root, capsys):
    for index in range(2):
        partial = protocols.run("modalens", "two-of-three", SPEC, progress=False, shard=Shard(index, 3))
    assert cli.main(["records", "complete", partial.run_id]) == 1
    err = capsys.readouterr().err
    assert "2 of 3 shard markers" in err and "done: 0/3, 1/3" in err and "never started: 2/3" in err, err
    assert "no shard markers" not in err and "running" not in err


def test_a_record_completed_in_one_process_after_shards_records_their_count(runs_root, capsys):
    partial = protocols.run("modalens", "forced", SPEC, progress=False, shard=Shard(0, 2))
    assert cli.main(["records", "complete", partial.run_id, "--force", "-q"]) == 0
    assert load_run("modalens", "forced").info.shards == 2
