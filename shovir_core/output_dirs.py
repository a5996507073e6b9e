"""Where exports and trained weights go: never into the repository's tracked tree by default.

Perturbed images of a credentialed dataset or weights fitted on one are derived from credentialed
data; written into a folder git does not ignore they are one ``git add`` away from a public
repository. So every command that writes such files

* defaults to a folder under the run-records root (``$SHOVIR_RUNS``, default ``<repo>/runs``, which
  git ignores): :func:`default_output_dir`;
* refuses a folder inside the repository that git does not ignore unless forced
  (:func:`check_output_dir`). Outside a git checkout (an installed package) every folder inside the
  package's root counts as tracked, except the run-records root.

The one exception is the demo training command, which writes the reference models' parameters into
the tracked ``shovir_core/resources/`` (``python -m shovir_core.training.reference`` on ``demo``).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from . import paths
from .errors import ShovirError

__all__ = ["OutputPathError", "default_output_dir", "in_tracked_tree", "check_output_dir"]


class OutputPathError(ShovirError, ValueError):
    """An output folder inside the repository's tracked tree was refused."""


def default_output_dir(kind: str, name: str) -> Path:
    """``<runs root>/exports/<kind>/<name>`` (git-ignored, or outside the repository under ``$SHOVIR_RUNS``)."""
    safe = "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in str(name)) or "dataset"
    return paths.runs_root() / "exports" / kind / safe


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def in_tracked_tree(path: str | Path) -> bool:
    """True when ``path`` lies in the repository and git would not ignore files written there."""
    p = Path(path).expanduser().resolve()
    root = paths.repo_root().resolve()
    if not _inside(p, root):
        return False
    if _inside(p, paths.runs_root().resolve()) and _ignored(paths.runs_root().resolve(), root) is not False:
        return False
    verdict = _ignored(p, root)
    return True if verdict is None else not verdict


def _ignored(p: Path, root: Path) -> bool | None:
    """Whether git ignores files written in folder ``p`` (None: not a git checkout or no git)."""
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return None
    probe = (p / "__shovir_probe__").relative_to(root).as_posix()
    proc = subprocess.run([git, "-C", str(root), "check-ignore", "-q", "--", probe], capture_output=True)
    if proc.returncode == 0:
        return True
    if proc.returncode == 1:
        return False
    return None


def check_output_dir(path: str | Path, *, force: bool = False, what: str = "output") -> Path:
    """``path`` resolved; :class:`OutputPathError` if it is in the tracked tree and not ``force``."""
    if isinstance(path, bool) or not isinstance(path, (str, Path)) or not str(path).strip():
        raise OutputPathError(f"{what}: the output folder must be a path, got {path!r}")
    p = Path(path).expanduser().resolve()
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{what}: {p} exists and is not a folder")
    if in_tracked_tree(p) and not force:
        raise OutputPathError(
            f"{what}: refusing to write into {p}, a folder of the repository that git does not ignore "
            f"(files derived from credentialed data must never be committed); write under "
            f"{paths.runs_root()} (set SHOVIR_RUNS to a secure place) or outside the repository, or pass --force")
    return p
