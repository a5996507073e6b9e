"""Two processes that ask for the same missing record at once both get it: one makes it, the other
waits for it and reads it (before, the second failed with "record is complete; open a new spec")."""
import os
import subprocess
import sys


def test_two_processes_making_one_record_both_succeed(tmp_path):
    code = ("from shovir_core import protocols; r = protocols.run('cohort', 'demo-bbox', {'dataset': 'demo'}, "
            "progress=False); print(r.status, r.run_id)")
    env = dict(os.environ, SHOVIR_RUNS=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-800:] for _, err in outs]
    lines = {out.strip() for out, _ in outs}
    assert len(lines) == 1 and next(iter(lines)).startswith("complete cohort/demo-bbox/")
