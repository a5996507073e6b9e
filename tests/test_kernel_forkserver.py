"""shovir_core.kernel_forkserver: while a fork server runs, the book's kernels are forked from it -- with the
launching process's folder, environment and streams, inline figures and fresh seeds -- and a kernel whose
environment differs in anything but the per-launch variables starts as its own process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from shovir_core import kernel_forkserver as kf
from shovir_core.book.figures import FIGURE_KEY_ENV
from shovir_core.book.glue import GLUE_LOG_ENV
from shovir_core.book.kernel import ipc_kernels
from shovir_core.book.render import OUTPUT_DIR_ENV
from shovir_core.records import READ_LOG_ENV

pytestmark = pytest.mark.skipif(not kf.available(), reason="no fork here")

CELLS = [
    "import os, sys\nprint(json.dumps({'preloaded': 'pandas' in sys.modules, 'ppid': os.getppid(), 'cwd': os.getcwd(), "
    "'glue': os.environ.get('SHOVIR_GLUE_LOG'), 'backend': os.environ.get('MPLBACKEND')}))",
    "import matplotlib.pyplot as plt\nimport numpy as np\nplt.plot([1, 2])\nplt.show()\nprint(np.random.random())",
]


def _run(tmp_path, tag: str) -> tuple[dict, list[str], str]:
    import nbformat
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import json")] + [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / f"{tag}.ipynb", tmp_path / f"{tag}.out.ipynb"
    nbformat.write(nb, src)
    with ipc_kernels() as manager:
        papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path),
                                   kernel_manager_class=manager)
    cells = json.loads(out.read_text())["cells"]
    first = json.loads("".join(cells[1]["outputs"][0]["text"]))
    kinds = [k for o in cells[2]["outputs"] for k in o.get("data", {})]
    return first, kinds, "".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                                 for o in cells[2]["outputs"])


def _server_ready(path: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise AssertionError("the fork server never listened")
        time.sleep(0.1)


def test_per_launch_names_are_the_runners():
    """The variables a launch may set differently are the ones the book runner sets per notebook."""
    for name in (READ_LOG_ENV, GLUE_LOG_ENV, FIGURE_KEY_ENV, OUTPUT_DIR_ENV):
        assert kf._per_launch(name), name
    assert not kf._per_launch("PYTHONPATH") and not kf._per_launch("MPLBACKEND")
    assert kf._per_launch("KMP_INIT_AT_FORK") and kf._per_launch("JPY_PARENT_PID")


def test_kernels_are_forked_with_the_launchers_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(GLUE_LOG_ENV, str(tmp_path / "before"))
    with kf.forkserver() as path:
        _server_ready(path)
        runs = []
        monkeypatch.setenv("KMP_INIT_AT_FORK", "FALSE")  # as importing scikit-learn in the launcher sets it
        for i in range(2):
            monkeypatch.setenv(GLUE_LOG_ENV, str(tmp_path / f"glue-{i}"))
            runs.append(_run(tmp_path, f"fork{i}"))
        monkeypatch.setenv("SHOVIR_TEST_OTHER", "1")  # not a per-launch variable: the kernel starts on its own
        alone = _run(tmp_path, "alone")
    for i, (first, kinds, text) in enumerate(runs):
        assert first["preloaded"], "the kernel was not forked from the server"
        assert first["glue"] == str(tmp_path / f"glue-{i}") and first["cwd"] == str(tmp_path)
        assert first["backend"] == "module://matplotlib_inline.backend_inline"
        assert "image/png" in kinds  # the figure is shown inline
    assert runs[0][0]["ppid"] == runs[1][0]["ppid"] != os.getpid()  # both children of the one server
    assert runs[0][2] != runs[1][2]  # each kernel drew its own seed
    assert not alone[0]["preloaded"] and "image/png" in alone[1]
    assert kf.SERVER_ENV not in os.environ


def test_a_killed_shim_takes_its_kernel_and_no_server_means_a_plain_kernel(tmp_path):
    """SIGKILL to the shim (jupyter_client's last resort) ends its kernel; with the server gone the shim starts
    the kernel command itself."""
    script = tmp_path / "k.py"
    script.write_text("import os, sys, time\nprint(os.getpid(), 'pandas' in sys.modules, flush=True)\ntime.sleep(60)\n")
    # a stand-in "ipykernel_launcher" module: the shim's contract is only `python -m ipykernel_launcher ARGS`
    (tmp_path / "ipykernel_launcher.py").write_text(script.read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    server_path = tmp_path / "s" / "fork"
    server_path.parent.mkdir()
    server = subprocess.Popen([sys.executable, "-m", "shovir_core.kernel_forkserver", "serve", str(server_path),
                               str(os.getpid())], env=env, cwd=tmp_path / "s")
    try:
        _server_ready(str(server_path))
        cmd = [sys.executable, "-m", "shovir_core.kernel_forkserver", "shim", str(server_path), "--",
               sys.executable, "-m", "ipykernel_launcher"]
        shim = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        pid, preloaded = shim.stdout.readline().split()
        assert preloaded == "True" and int(pid) != shim.pid
        shim.kill()
        shim.wait()
        end = time.monotonic() + 10
        while _alive(int(pid)):
            assert time.monotonic() < end, "the kernel outlived its killed shim"
            time.sleep(0.1)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    assert not server_path.parent.exists()  # the socket's folder goes with it (its starter may have been killed)
    shim = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        pid, preloaded = shim.stdout.readline().split()
        assert preloaded == "False" and int(pid) == shim.pid  # became the kernel itself (exec)
    finally:
        shim.kill()
        shim.wait()


def test_a_shim_killed_before_its_answer_takes_its_kernel_and_the_server_serves_on(monkeypatch):
    """The forked kernel may run (and its shim be killed) before the server has sent the shim its pid: the
    failed answer must end that kernel, not the server (a CI run's server died of the BrokenPipeError, and a
    stand-in kernel outlived it)."""
    import socket

    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server_end, shim_end = socket.socketpair()
        streams = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
        socket.send_fds(shim_end, [json.dumps({"args": [], "env": {}, "cwd": "/"}).encode() + b"\n"], streams)
        for fd in streams:
            os.close(fd)
        shim_end.close()  # killed before the server answers
        monkeypatch.setattr(kf.os, "fork", lambda: kernel.pid)  # the server's side of a fork, without one
        kernels = {}
        assert kf._answer(server_end, {}, kernels) is None  # no BrokenPipeError
        assert kernels == {kernel.pid: None}
        assert kernel.wait(timeout=10) == -signal.SIGKILL
    finally:
        kernel.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_switched_off_means_no_server(monkeypatch):
    monkeypatch.setenv(kf.SWITCH_ENV, "0")
    with kf.forkserver() as path:
        assert path is None and kf.SERVER_ENV not in os.environ
        cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "c.json"]
        assert kf.wrap(cmd) == cmd


def test_only_this_interpreters_kernels_go_through_the_server(monkeypatch, tmp_path):
    """A kernel spec of another environment (another Python) starts as it says: the server's modules are
    this interpreter's."""
    monkeypatch.setenv(kf.SERVER_ENV, str(tmp_path / "fork"))
    ours = [sys.executable, "-m", "ipykernel_launcher", "-f", "c.json"]
    assert kf.wrap(ours)[2:5] == ["shovir_core.kernel_forkserver", "shim", str(tmp_path / "fork")]
    other = tmp_path / "python"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    theirs = [str(other), "-m", "ipykernel_launcher", "-f", "c.json"]
    assert kf.wrap(theirs) == theirs
    base = tmp_path / "venv" / "bin" / "python"  # another environment's link to this very interpreter
    base.parent.mkdir(parents=True)
    base.symlink_to(os.path.realpath(sys.executable))
    linked = [str(base), "-m", "ipykernel_launcher", "-f", "c.json"]
    assert kf.wrap(linked) == linked
