"""One function that says where a result came from."""
from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys

from .. import paths

__all__ = ["provenance", "git_state", "TRACKED_PACKAGES"]

TRACKED_PACKAGES = (
    "shovir-core", "numpy", "pandas", "pyarrow", "scipy", "scikit-image", "scikit-learn",
    "statsmodels", "sacrebleu", "rouge-score", "spacy", "negspacy", "pillow", "torch",
    "transformers", "tokenizers", "accelerate", "papermill", "jupyter-book", "myst-nb",
)


def git_state() -> dict:
    """Commit and dirty flag of the repository (``None`` outside a git checkout)."""
    root = paths.repo_root()

    def _git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _versions() -> dict:
    out = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _torch_state() -> dict | None:
    torch = sys.modules.get("torch")  # only describe torch when a model actually used it
    if torch is None:
        return None
    state = {"version": torch.__version__, "cuda_available": bool(torch.cuda.is_available()),
             "cuda": torch.version.cuda, "threads": torch.get_num_threads()}
    if state["cuda_available"]:
        state["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return state


def provenance(*, seeds: dict | None = None) -> dict:
    """Git commit + dirty flag, package versions, Python, platform, torch/CUDA/GPU and seeds."""
    return {
        "git": git_state(),
        "packages": _versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "torch": _torch_state(),
        "seeds": dict(seeds or {}),
    }
