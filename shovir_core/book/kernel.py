"""The notebooks' kernels talk to papermill over Unix sockets in a private temporary folder.

Over TCP (jupyter_client's default) every kernel warns that its traffic is unencrypted, one line per
notebook in every book log; a kernel on the same machine needs no network at all. The sockets live in
a fresh folder of the system's temporary directory (``$TMPDIR``: node-local on a cluster, readable by
its owner only, and a short path -- a Unix socket path is limited to about 100 characters, which a
folder under a group's runs root can exceed), so two notebooks, or two users, never share one.
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ipc_kernels"]


@contextmanager
def ipc_kernels() -> Iterator[type]:
    """A kernel-manager class for papermill whose kernels listen on Unix sockets in a folder of their own,
    removed on exit.

    >>> with ipc_kernels() as manager:
    ...     km = manager(kernel_name="python3")
    ...     (km.transport, Path(km.ip).parent.is_dir(), len(km.ip) < 90)
    ('ipc', True, True)
    """
    from jupyter_client import AsyncKernelManager

    with tempfile.TemporaryDirectory(prefix="shovir-kernel-") as folder:
        ip = str(Path(folder) / "k")

        class IPCKernelManager(AsyncKernelManager):
            def __init__(self, **kwargs):
                super().__init__(transport="ipc", ip=ip, **kwargs)

        yield IPCKernelManager
