"""torch's CPU threads for the demo models (the reference models, ref-vlm, the tiny transformers).

torch starts one intra-op thread per core. The demo models are small: on the 2-core machines users,
reviewers and CI have, two threads barely help an idle machine and make scoring 6-16x slower as soon
as another process runs, while one thread stays at the idle speed. So where a demo model is loaded
for the CPU, torch is set to :data:`ENV` threads (default 1) in that process. Set at load, never at
import; real checkpoints and GPU runs are left as they are. The thread count enters no record: record
hashes, trial rows and inference-cache keys are the same with one thread or two
(tests/test_models_threads.py makes a small record both ways).
"""
from __future__ import annotations

import os

__all__ = ["ENV", "demo_threads", "use_demo_threads"]

ENV = "SHOVIR_TORCH_THREADS"
"""Environment variable: torch's intra-op threads for the demo models on the CPU (default 1)."""


def demo_threads() -> int:
    """The thread count for the demo models: ``$SHOVIR_TORCH_THREADS`` or 1.

    >>> demo_threads() >= 1
    True
    """
    value = os.environ.get(ENV, "").strip()
    if not value:
        return 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV} must be a positive integer, got {value!r}")
    return int(value)


def use_demo_threads(device=None) -> None:
    """Set torch's intra-op threads to :func:`demo_threads` when ``device`` (default CPU) is the CPU."""
    import torch

    if torch.device(device or "cpu").type == "cpu" and torch.get_num_threads() != demo_threads():
        torch.set_num_threads(demo_threads())
