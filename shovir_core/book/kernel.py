"""The notebooks' kernels talk to papermill over Unix sockets in a private temporary folder.

Over TCP (jupyter_client's default) every kernel warns that its traffic is unencrypted, one line per
notebook in every book log; a kernel on the same machine needs no network at all. The sockets live in
a fresh folder of the system's temporary directory (``$TMPDIR``: node-local on a cluster, readable by
its owner only, and a short path -- a Unix socket path is limited to about 100 characters, which a
folder under a group's runs root can exceed), so two notebooks, or two users, never share one.

The book's notebooks end their kernels at once (:data:`SHUTDOWN`, below). Asked to shut down instead -- papermill's
default, for any other caller of :func:`ipc_kernels` -- a kernel is given :data:`SHUTDOWN_WAIT_S` to exit, then
terminated. ipykernel 7.4 sometimes never exits by itself: its control thread blocks publishing the "idle" status
after the IOPub thread has stopped while the main thread joins it (a py-spy dump of such a kernel;
posit-dev/positron#7142 reports the same hang). jupyter_client's default waits 2.5 s before it sends
SIGTERM: on 2 cores, one notebook in eight of an empty notebook's 40 runs took 4.0 s instead of 0.7 s.
By then every cell has run and papermill holds every output; nothing of the notebook is lost.

Papermill ends each kernel with :data:`SHUTDOWN` ("immediate"): once the last cell's outputs are in, the
kernel process is killed instead of asked to shut down. A kernel has nothing left to do by then: the book's
logs, tables and figures are written and closed by the cells that make them, its history is in memory, and
ipykernel's exit only resets the namespace (a garbage collection). Measured on the 2-core machine: a two-cell
notebook took 0.9-1.2 s instead of 1.1-1.6 s, six runs each; the book's 31 notebooks spent about 3 CPU-seconds
in those exits (py-spy).
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ipc_kernels", "SHUTDOWN_WAIT_S", "SHUTDOWN"]

SHUTDOWN_WAIT_S = 1.0
"""jupyter_client's ``shutdown_wait_time`` for a graceful shutdown: half of it for the kernel to exit after the
shutdown request, then SIGTERM and the other half, then SIGKILL (default 5 s)."""

SHUTDOWN = "immediate"
"""nbclient's ``shutdown_kernel`` for the book's notebooks (see the module docstring); ``"graceful"`` is its
default."""


@contextmanager
def ipc_kernels() -> Iterator[type]:
    """A kernel-manager class for papermill whose kernels listen on Unix sockets in a folder of their own,
    removed on exit.

    >>> with ipc_kernels() as manager:
    ...     km = manager(kernel_name="python3")
    ...     (km.transport, Path(km.ip).parent.is_dir(), len(km.ip) < 90, km.shutdown_wait_time)
    ('ipc', True, True, 1.0)
    """
    from jupyter_client import AsyncKernelManager

    from ..kernel_forkserver import wrap

    with tempfile.TemporaryDirectory(prefix="shovir-kernel-") as folder:
        ip = str(Path(folder) / "k")

        class IPCKernelManager(AsyncKernelManager):
            def __init__(self, **kwargs):
                super().__init__(transport="ipc", ip=ip, shutdown_wait_time=SHUTDOWN_WAIT_S, **kwargs)

            def format_kernel_cmd(self, extra_arguments=None):
                # forked from the book's kernel fork server while one runs (shovir_core.kernel_forkserver)
                return wrap(super().format_kernel_cmd(extra_arguments))

        yield IPCKernelManager
