"""Repository hygiene: no citation of files outside the repository, imports that need no network or
GPU (the doctest collection of ``make test`` imports every module), and ``make test`` runs the doctests."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from shovir_core import paths

ROOT = paths.repo_root()
SCANNED = ("shovir_core", "tests", "notebooks", "benchmarks", "params")
SUFFIXES = {".py", ".yaml", ".yml", ".json", ".csv", ".md", ".toml"}
# built from parts so that this file does not match itself
OUTSIDE = [re.compile(p) for p in (
    "paper" + r"[-_ ]map", "shovir-reference" + "-code", r"/work" + "/", r"\.\./" + "shared",
    "reference/" + "papers", "reference " + "notes", r"(?<![\w.])shared/" + "reference",
)]


def _files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                yield path


def test_nothing_cites_files_outside_the_repository():
    hits = []
    for path in _files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not hits, "cite the paper (section/table/equation) or arco-group/ShoViR-Bench path@commit:\n" + "\n".join(hits)


def test_the_scan_finds_a_citation():
    cited = ["see the " + "paper" + "-map B.1", "(" + "shovir-reference" + "-code.md §5.1)",
             "/work" + "/shared/" + "reference/" + "papers/shovir.md"]
    assert all(any(p.search(line) for p in OUTSIDE) for line in cited)
    assert not any(p.search("ModaLens App. G, Table 16; arco-group/ShoViR-Bench src/benchmark/cli.py@06324c9")
                   for p in OUTSIDE)


def test_importing_every_module_needs_no_network_and_no_gpu():
    code = (
        "import importlib, pkgutil, socket, sys\n"
        "def refuse(*args, **kwargs):\n"
        "    raise RuntimeError('network access while importing')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "import shovir_core\n"
        "names = sorted(m.name for m in pkgutil.walk_packages(shovir_core.__path__, 'shovir_core.'))\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "torch = sys.modules.get('torch')\n"
        "print(len(names), bool(torch is not None and torch.cuda.is_initialized()))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           "HOME": str(Path.home())}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    n, cuda = out.stdout.split()
    assert int(n) > 60 and cuda == "False"


def test_make_test_runs_the_doctests():
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--doctest-modules" in recipe and "shovir_core" in recipe.split("pytest", 1)[1]
