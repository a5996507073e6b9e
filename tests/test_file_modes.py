"""Files the project writes respect the umask (issue 25): group-readable on shared cluster storage."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from shovir_core.records import atomic_write_text
from shovir_core.records.files import current_umask


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_the_process_umask(umask):
    assert current_umask() == umask


def test_atomic_write_text_gives_the_mode_open_would_give(tmp_path, umask):
    atomic_write_text(tmp_path / "manifest.json", "{}\n")
    with open(tmp_path / "plain.txt", "w") as fh:
        fh.write("x")
    assert _mode(tmp_path / "manifest.json") == 0o666 & ~umask == _mode(tmp_path / "plain.txt")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left"


def test_perturbation_pngs_respect_the_umask(tmp_path, umask):
    from shovir_core.protocols.perturbations import _write_png

    _write_png(np.zeros((4, 4), dtype=np.uint8), tmp_path / "img.png")
    assert _mode(tmp_path / "img.png") == 0o666 & ~umask
