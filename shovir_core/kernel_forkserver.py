"""Notebook kernels forked from one process that has already imported their third-party modules.

Every notebook of the book runs in a kernel of its own, and every kernel started as a new Python process
that imported IPython, ipykernel, NumPy, pandas, matplotlib, seaborn and SciPy again: about 1.5 s of CPU per
kernel, 50 of the demo book's 650 CPU-seconds (a py-spy profile of ``shovir book --no-build`` on 2 cores).
While ``shovir book`` runs (:func:`forkserver`), one *fork server* imports those modules once
(:data:`PRELOAD`) and forks a child per kernel, which then starts ipykernel exactly as
``python -m ipykernel_launcher`` would, in the launching process's folder, environment and standard streams.

jupyter_client still launches a process of its own per kernel, a small *shim* (``python -m
shovir_core.kernel_forkserver shim``; :func:`wrap`): it hands its request and its standard streams to the
server, forwards every signal jupyter_client sends it (interrupt, terminate) to the kernel (through a pidfd:
never to another process that took the pid), and exits with the kernel's exit status. When the shim is
killed, the server kills its kernel; when the server ends, its kernels end (ipykernel's parent poller); when
the process that started the server ends, the server ends.

What a forked kernel inherits was made in the server, so:

- the server imports third-party modules only, never ``shovir_core``'s own (``shovir_core.book``, on import,
  installs the book's figure tagging and display guard from the kernel's environment);
- a kernel is forked only when its environment equals the one the server started in, but for the variables
  each launch sets (:data:`PER_LAUNCH`) and a few that libraries set in the launching process
  (:data:`LAUNCHER_SIDE_EFFECTS`); any other difference (another ``PYTHONPATH``, ``MPLBACKEND``, thread counts,
  the rehearsal's runs root) and the shim starts ``python -m ipykernel_launcher`` itself, as before;
  so does a shim that finds no server (not started yet, or gone); a kernel spec naming another interpreter or
  environment than the server's is launched as it says (:func:`wrap`); elsewhere than on Linux there is no server;
- each forked kernel draws fresh seeds for ``random`` and NumPy's global generator, as a new process does;
- the server runs no Python thread; its native threads are OpenBLAS's and pyarrow's jemalloc's, pools that
  those libraries make safe to fork (their ``pthread_atfork`` handlers), as under multiprocessing's ``fork``.

``SHOVIR_KERNEL_FORK=0`` switches the server off.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["forkserver", "wrap", "PRELOAD", "PER_LAUNCH", "LAUNCHER_SIDE_EFFECTS", "SERVER_ENV", "SWITCH_ENV"]

SERVER_ENV = "SHOVIR_KERNEL_FORKSERVER"
"""The server's socket, for the kernel managers of this process and its children."""
SWITCH_ENV = "SHOVIR_KERNEL_FORK"
"""``0``: no server (every kernel starts as its own process)."""

PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "pyarrow.dataset", "scipy.stats", "matplotlib",
           "matplotlib.pyplot", "seaborn", "yaml", "myst_nb", "myst_nb.ext.glue", "rouge_score.rouge_scorer",
           "sacrebleu", "IPython", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.debugger",
           "jupyter_client", "zmq", "tornado")
"""Imported by the server before it forks: what the book's kernels import (``ipykernel.kernelapp`` is left to
each kernel: its class reads ``JPY_PARENT_PID`` when it is defined). The list follows a py-spy profile of the
demo book's kernels: ``myst_nb.ext.glue``, ``ipykernel.debugger``, ``pyarrow.dataset`` and ``sacrebleu`` were
still imported by the kernels (about 0.13 s each, and 0.18 s in each ShoViR chapter, on the 2-core machine)."""

PER_LAUNCH = ("JPY_", "SHOVIR_READ_LOG", "SHOVIR_GLUE_LOG", "SHOVIR_FIGURE_KEY", "SHOVIR_BOOK_DIR", SERVER_ENV)
"""Environment variables (names, or prefixes ending in ``_``) a kernel's launch may set differently from the
server's: jupyter_client's ``JPY_*``, the book runner's per-notebook logs and keys. None of them is read when
a :data:`PRELOAD` module is imported (debugpy, which ipykernel imports, reads its ``PYDEVD_*`` switches then:
they must match)."""

LAUNCHER_SIDE_EFFECTS = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR")
"""Variables libraries set in the launching process as a side effect of their import or use (scikit-learn,
joblib and threadpoolctl: the Intel OpenMP switches; torch's inductor: its cache folder), which every kernel
a book worker launches after it made a record inherits. None of :data:`PRELOAD` reads them on import (the
OpenMP runtime reads its switches when it first runs, in the kernel), so they do not keep a kernel from
being forked."""

_LAUNCHER = ("-m", "ipykernel_launcher")
_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _per_launch(name: str) -> bool:
    return (any(name.startswith(p) if p.endswith("_") else name == p for p in PER_LAUNCH)
            or name in LAUNCHER_SIDE_EFFECTS)


def env_difference(server: dict[str, str], kernel: dict[str, str]) -> list[str]:
    """The variables (other than :data:`PER_LAUNCH` and :data:`LAUNCHER_SIDE_EFFECTS`) whose values differ
    between two environments.

    >>> env_difference({"PATH": "/bin", "A": "1"}, {"PATH": "/bin", "A": "1", "JPY_PARENT_PID": "7"})
    []
    >>> env_difference({"PATH": "/bin"}, {"PATH": "/usr/bin", "MPLBACKEND": "agg"})
    ['MPLBACKEND', 'PATH']
    """
    names = {k for k in (*server, *kernel) if not _per_launch(k)}
    return sorted(k for k in names if server.get(k) != kernel.get(k))


def available() -> bool:
    """Whether kernels can be forked here: on Linux (macOS's system frameworks may abort a child forked after
    they started, and it is neither measured nor tested there), with Unix sockets and descriptor passing, and
    not switched off (:data:`SWITCH_ENV`)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "send_fds")
            and os.environ.get(SWITCH_ENV, "1") != "0")


@contextmanager
def forkserver() -> Iterator[str | None]:
    """Run a fork server while the block runs; yields its socket (``None`` where :func:`available` is false).

    The socket is named in ``os.environ`` (:data:`SERVER_ENV`), so kernels started by this process and by
    the processes it starts meanwhile (the book's workers) are forked from it. The server imports
    :data:`PRELOAD` first and listens only then: kernels launched before start as their own processes.
    """
    import shutil
    import subprocess
    import tempfile

    if not available():
        yield None
        return
    folder = tempfile.mkdtemp(prefix="shovir-kernels-")  # $TMPDIR: node-local, owner only, a short path
    path = os.path.join(folder, "fork")
    before = os.environ.get(SERVER_ENV)
    # started in its empty folder, so nothing there shadows a module it imports; with ``os.environ`` as
    # jupyter_client passes it to kernels (the C-level environment can hold more: GNU readline, once imported,
    # sets COLUMNS and LINES there)
    server = subprocess.Popen([sys.executable, "-m", __name__, "serve", path, str(os.getpid())], cwd=folder,
                              stdin=subprocess.DEVNULL, env=dict(os.environ))
    os.environ[SERVER_ENV] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(SERVER_ENV, None)
        else:
            os.environ[SERVER_ENV] = before
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def wrap(cmd: list[str]) -> list[str]:
    """A kernel command through the fork server named in the environment: ``python -m ipykernel_launcher
    ARGS`` becomes the shim's command when ``python`` is this interpreter, the server's (any other command,
    another interpreter -- a kernel spec of another environment --, or no server: returned as it is).

    >>> wrap(["/x/python", "-m", "other_kernel"]) == ["/x/python", "-m", "other_kernel"]
    True
    """
    path = os.environ.get(SERVER_ENV)
    if not path or not available() or tuple(cmd[1:3]) != _LAUNCHER or not _this_interpreter(cmd[0]):
        return list(cmd)
    return [cmd[0], "-m", __name__, "shim", path, "--", *cmd]


def _this_interpreter(executable: str) -> bool:
    """Whether ``executable`` is this interpreter in this environment: the same file, found in the same folder
    (a virtual environment's ``python`` links to its base interpreter, which is the same file but not the
    same environment)."""
    import shutil

    found = shutil.which(executable)
    try:
        return (found is not None and os.path.samefile(found, sys.executable)
                and os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(sys.executable)))
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------- the shim
def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _lines(sock: socket.socket) -> Iterator[dict]:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            try:
                chunk = sock.recv(4096)
            except InterruptedError:
                continue
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield json.loads(line)


def shim(path: str, cmd: list[str]) -> int:
    """Ask the server at ``path`` for a kernel running ``cmd`` (``python -m ipykernel_launcher ARGS``); where
    it cannot or will not, become that command. Returns the kernel's exit code."""
    import select
    import time

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = {"args": cmd[3:], "env": dict(os.environ), "cwd": os.getcwd()}
        data = json.dumps(request).encode() + b"\n"
        sent = socket.send_fds(sock, [data], [0, 1, 2])
        sock.sendall(data[sent:])
        replies = _lines(sock)
        reply = next(replies, {"refused": "the server closed the connection"})
    except OSError as exc:
        reply = {"refused": f"no server ({exc})"}
    if "pid" not in reply:
        sock.close()
        os.execvp(cmd[0], cmd)  # the kernel as its own process, as without the server
    pid = int(reply["pid"])
    try:  # the kernel itself, whatever happens to its pid once it has exited and been reaped
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone already, or a kernel before Linux 5.3
        handle = None

    def forward(signum, _frame):
        try:
            if handle is not None:
                signal.pidfd_send_signal(handle, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for name in _SIGNALS:
        signal.signal(getattr(signal, name), forward)
    for message in replies:
        if "exit" in message:
            return int(message["exit"])
    # the server is gone without a word: wait for the kernel (its parent poller ends it)
    if handle is not None:
        select.select([handle], [], [])  # a process's descriptor becomes readable when it exits
        return 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 1
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------- the server
def _preload() -> None:
    import importlib

    if not os.environ.get("MPLBACKEND"):  # what ipykernel's kernel app sets before anything imports matplotlib
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # not installed here: each kernel imports what it needs


def serve(path: str, parent: int) -> dict | None:
    """Serve kernels at ``path`` until terminated or until process ``parent`` ends. Returns ``None`` in the
    server; in a forked child, the kernel request it is to run (:func:`_run_kernel`)."""
    import select
    import threading

    environment = dict(os.environ)  # before _preload sets MPLBACKEND: kernels must match what it started in
    _preload()
    if threading.active_count() > 1:  # a module started a thread: forking now could copy a held lock
        return None  # no socket: every kernel starts as its own process
    me = os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    kernels: dict[int, socket.socket | None] = {}  # pid -> its shim's connection (None: the shim is gone)
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([listener, wake_r, *(c for c in kernels.values() if c)], [], [], 1.0)
            for r in ready:
                if r is wake_r:
                    try:
                        while wake_r.recv(512):
                            pass
                    except BlockingIOError:
                        pass
                elif r is listener:
                    conn, _ = listener.accept()
                    child = _answer(conn, environment, kernels)
                    if child is not None:  # this is the forked child: leave the server behind
                        signal.set_wakeup_fd(-1)
                        for s in (listener, wake_r, wake_w, *(c for c in kernels.values() if c)):
                            s.close()
                        kernels.clear()
                        return child
                else:  # a shim's connection: readable only when the shim is gone
                    pid = next(p for p, c in kernels.items() if c is r)
                    try:
                        gone = not r.recv(1)
                    except OSError:
                        gone = True
                    if gone:  # killed (jupyter_client's last resort): its kernel goes too
                        r.close()
                        kernels[pid] = None
                        try:
                            os.kill(pid, signal.SIGKILL)  # not reaped yet, so still this kernel's pid
                        except ProcessLookupError:
                            pass
            _reap(kernels)
    finally:
        if os.getpid() == me:
            for pid in kernels:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.unlink(path)
                os.rmdir(os.path.dirname(path))  # its folder too, made for it alone (:func:`forkserver`), when
            except OSError:  # the process that made it was killed before it could remove it; not if it holds more
                pass
    return None


def _reap(kernels: dict[int, socket.socket | None]) -> None:
    while kernels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        if conn:
            try:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            conn.close()


def _answer(conn: socket.socket, environment: dict, kernels: dict[int, socket.socket | None]) -> dict | None:
    """Read one shim's request and fork its kernel (or refuse). Returns the request in the forked child."""
    conn.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                raise OSError("request cut short")
            data += more
        request = json.loads(data)
        differ = env_difference(environment, request["env"])
        if differ or len(fds) != 3:
            _send(conn, {"refused": f"environment differs in {differ}" if differ else "no standard streams"})
            raise OSError("refused")
    except (OSError, ValueError, KeyError):
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    try:
        pid = os.fork()
    except OSError as exc:  # no memory or no process left: this kernel starts as its own process
        try:
            _send(conn, {"refused": f"fork failed ({exc})"})
        except OSError:
            pass  # the shim is gone already
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    if pid == 0:
        request["fds"] = fds
        request["conn"] = conn
        return request
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    kernels[pid] = conn
    try:
        _send(conn, {"pid": pid})
    except OSError:  # the shim was killed between the fork and this answer (its kernel may have run already):
        conn.close()  # its kernel goes as with a shim killed later, and the server serves on
        kernels[pid] = None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return None


def _run_kernel(request: dict) -> None:
    """In a forked child: become the kernel ``python -m ipykernel_launcher ARGS`` would start."""
    import random
    import runpy

    request["conn"].close()
    for name in ("SIGCHLD", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()  # a session of its own, as jupyter_client starts kernels
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # fresh seeds, as in a new process
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = ["ipykernel_launcher", *request["args"]]
    sys.path[0] = os.getcwd()  # as `python -m` sets it; the launcher removes it again
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"] and len(argv) == 3:
        request = serve(argv[1], int(argv[2]))
        if request is not None:
            _run_kernel(request)
        return 0
    if argv[:1] == ["shim"] and len(argv) >= 5 and argv[2] == "--":
        return shim(argv[1], argv[3:])
    print("usage: python -m shovir_core.kernel_forkserver serve SOCKET PARENT_PID | shim SOCKET -- KERNEL_CMD...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
