"""The files of a run record: part names, per-process temporary names, locks, part hashing.

Several processes may write one record at once (shards of its trial grid). Nothing here ever
touches a file another live process owns:

* a part is written to a temporary file named after its writer (``.w<pid>-<random>-<host>.tmp``)
  and then *linked* to the next free part name (``os.link`` fails instead of replacing a part
  another process claimed first), so two writers never overwrite each other's parts;
* temporary files are removed only when their writer is on this host and its process is dead;
* read-modify-write of the manifest and of shard markers happens under an exclusive ``flock`` on
  ``<record>/.manifest.lock`` (released by the kernel when a process dies).
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

try:  # POSIX; elsewhere records are single-writer and the locks are no-ops
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PART_RE", "TEMP_RE", "part_name", "part_files", "foreign_files", "temp_path", "stale_temps",
    "claim_part", "file_sha256", "locked", "TryLock", "pid_alive", "atomic_write_text", "HOST",
    "current_umask", "make_temp_file",
]

PART_RE = re.compile(r"^part-(?:(?P<token>s\d+of\d+)-)?(?P<num>\d{6,})\.parquet$")
"""Names of part files: ``part-NNNNNN.parquet`` (one process) or ``part-s<i>of<n>-NNNNNN.parquet``."""

TEMP_RE = re.compile(r"^\.w(?P<pid>\d+)-(?P<rand>[0-9a-f]{8})-(?P<host>.+)\.tmp$")
"""Names of in-flight part files (``.w<pid>-<random>-<host>.tmp``); readers ignore them."""

HOST = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def part_name(token: str | None, number: int) -> str:
    """File name of part ``number`` of writer ``token`` (``None``: the single-process writer)."""
    return f"part-{token + '-' if token else ''}{number:06d}.parquet"


def part_files(parts_dir: Path) -> list[Path]:
    """The part files present, sorted by name (temporary and foreign files excluded)."""
    if not parts_dir.is_dir():
        return []
    return sorted(p for p in parts_dir.iterdir() if PART_RE.match(p.name) and p.is_file())


def foreign_files(parts_dir: Path) -> list[str]:
    """Names in ``parts/`` that are neither part files nor hidden (temporary) files."""
    if not parts_dir.is_dir():
        return []
    return sorted(p.name for p in parts_dir.iterdir() if not p.name.startswith(".") and not PART_RE.match(p.name))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def temp_path(parts_dir: Path) -> Path:
    """A fresh temporary part path owned by this process."""
    return parts_dir / f".w{os.getpid()}-{secrets.token_hex(4)}-{HOST}.tmp"


def stale_temps(parts_dir: Path) -> list[Path]:
    """Temporary part files left by dead processes of this host (safe to delete)."""
    out = []
    if not parts_dir.is_dir():
        return out
    for p in parts_dir.iterdir():
        m = TEMP_RE.match(p.name)
        if m and m.group("host") == HOST and not pid_alive(int(m.group("pid"))):
            out.append(p)
    return sorted(out)


def claim_part(tmp: Path, parts_dir: Path, token: str | None, start: int) -> tuple[Path, int]:
    """Move ``tmp`` to the first free part name of ``token`` numbered ``>= start``.

    ``os.link`` refuses to replace an existing name, so a part claimed by another process at the
    same moment is never overwritten; the number is bumped and tried again. Returns the final path
    and its number.
    """
    number = start
    while True:
        final = parts_dir / part_name(token, number)
        try:
            os.link(tmp, final)
        except FileExistsError:
            number += 1
            continue
        except OSError:
            # a file system without hard links: claim the name exclusively, then replace it
            try:
                os.close(os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                number += 1
                continue
            os.replace(tmp, final)
            return final, number
        tmp.unlink()
        return final, number


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@contextmanager
def locked(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class TryLock:
    """A non-blocking exclusive ``flock`` held until :meth:`release` (or the process dies).

    The lock file holds ``<host> <pid>`` of the holder, for error messages.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> str | None:
        """Take the lock; returns ``None``, or the holder's ``host pid`` when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                return holder
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{HOST} {os.getpid()}\n".encode(), 0)
        self.fd = fd
        return None

    def held_elsewhere(self) -> str | None:
        """``host pid`` of another live process holding this lock, else ``None`` (does not take it)."""
        if fcntl is None or not self.path.is_file():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            return None
        finally:
            os.close(fd)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def current_umask() -> int:
    """The process's umask (read from ``/proc/self/status`` where it can be, else set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_temp_file(path: Path) -> tuple[int, str]:
    """``tempfile.mkstemp`` beside ``path``, but with the mode a plain ``open()`` would give.

    ``mkstemp`` creates files mode 0600 whatever the umask; renamed into place they would make
    manifests, shard markers and executed notebooks unreadable to the rest of a group on shared
    storage. Here the file gets ``0666 & ~umask`` (0644 under umask 022, 0664 under 002).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd, tmp


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place (mode as ``open()`` gives)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place (mode as ``open()`` gives)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
