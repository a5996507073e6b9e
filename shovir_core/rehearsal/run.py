"""``shovir rehearse``: run a credentialed profile end to end at the papers' scale on a CPU.

The rehearsal (see the design's "The paper's setting, rehearsed") writes a synthetic tree in the
credentialed datasets' layouts (:mod:`shovir_core.rehearsal.synthetic`), points the profile's
environment variables at it (``SHOVIR_MIMIC``, ``SHOVIR_MIMIC_JPG``, ``SHOVIR_PADCHEST``), replaces
every real model by a CPU stand-in of the same interface (and CheXbert by a tiny random checkpoint,
:mod:`shovir_core.rehearsal.chexbert_stand_in`) (:data:`shovir_core.models.registry.STAND_INS_ENV`;
reference models, and a tiny transformer where a chapter's protocol needs layers), and runs every
chapter of the profile -- records, notebook, the credentialed guard --, a chapter's records and its
notebook each in a process of its own, so their wall time, CPU time and peak memory are measured (a
chapter's notebook runs beside the next chapter's records: :func:`rehearse`'s ``overlap``). A reduced rehearsal (``scale < 1``) shrinks the designs'
fixed sample sizes with the tree (:mod:`shovir_core.rehearsal.scaling`, ``$SHOVIR_REHEARSAL_SCALE``). Records live under the rehearsal's own runs root, their
model fingerprints name the stand-in, and every executed notebook starts with a rehearsal banner:
nothing made here can be mistaken for a result.

The report (:func:`rehearse` returns it; ``report-<profile>.json`` beside the runs) gives per chapter
its status, wall time, peak memory, model requests (the records' inference-cache entries), the sizes
a reduced rehearsal scaled (``scaled``: per record key, spec key -> ``[paper, run]``;
:mod:`shovir_core.rehearsal.scaling`) and the exact commands of the real run, and per record its
trials beside the paper's stated denominator for that record (equal, or the difference and its
reason: :mod:`shovir_core.rehearsal.denominators`).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from ..errors import UsageError
from .. import paths
from ..tables.paper_vs_run import REHEARSAL_ENV
from .synthetic import planted, write_tree

__all__ = ["rehearse", "REHEARSAL_ENV", "LAYER_PROTOCOLS", "stand_ins", "rehearsal_root", "BANNER"]

RECORDS_LINE = "REHEARSAL-RECORDS "
NOTEBOOK_LINE = "REHEARSAL-RESULT "
"""How a chapter's records process and notebook process hand their results to :func:`rehearse` (a line of
their stdout, then JSON)."""

LAYER_PROTOCOLS = frozenset({"modalens-layers", "modalens-interventions", "modalens-probes"})
"""Protocols that read a transformer's layers: their chapters get tiny transformers as stand-ins."""

_TINY_TWIN = {"medgemma-27b": "tiny-gemma3", "medgemma-4b": "tiny-gemma3", "gemma-3-27b": "tiny-gemma3",
              "medgemma-1.5-4b": "tiny-gemma3", "qwen3.5-9b": "tiny-qwen3.5", "qwen3.5-27b": "tiny-qwen3.5",
              "llava-next-mistral-7b": "tiny-llava-next", "llava-1.5-7b": "tiny-llava-1.5",
              "nv-reason-cxr": "tiny-nvreason"}
_REFERENCE = {"ShoViR": "ref-context-shortcut", "ModaLens": "ref-anchored@0.5"}

BANNER = ("**Rehearsal — not a result.** Every number on this page comes from a rehearsal of the "
          "`{profile}` profile: synthetic data in the credentialed layouts with planted cohort sizes "
          "(invented ids, scale {scale}) and CPU stand-in models in place of the paper's models "
          "({stand_ins}). It shows that the pipeline and the designs run at the papers' scale, not what "
          "any model does.")


def rehearsal_root() -> Path:
    """``$SHOVIR_RUNS/rehearsal`` (outside the repository when ``SHOVIR_RUNS`` is)."""
    return paths.runs_root() / "rehearsal"


def stand_ins(*, layers: bool, override: str | None = None) -> dict[str, str]:
    """``{real model: stand-in}`` for every real model of the registry.

    ``override`` replaces every registry model's stand-in by one model; otherwise a ShoViR model becomes
    ``ref-context-shortcut``, a ModaLens model ``ref-anchored@0.5``, and under ``layers`` each model
    with a tiny transformer twin becomes that twin, built with the real model's decoder-layer count
    (``text_layers`` of its registry entry: ``tiny-gemma3@62`` for MedGemma-27B), so that the layers a
    design names (App. N: L16, L25, L46, L61) exist on the stand-in.

    >>> stand_ins(layers=False)["medgemma-27b"], stand_ins(layers=True)["medgemma-27b"]
    ('ref-anchored@0.5', 'tiny-gemma3@62')
    >>> stand_ins(layers=False)["torchxrayvision"]
    'tiny-xrv-densenet'
    """
    from ..models.registry import REGISTRY, SURROGATE_STAND_INS

    # the models outside the registry (App. K's TorchXRayVision classifier) get theirs whatever the override
    out = {real: stand_in for stand_in, real in SURROGATE_STAND_INS.items()}
    for name, spec in REGISTRY.items():
        if spec.adapter in ("reference", "tiny", "ref-vlm"):
            continue
        if override:
            out[name] = override
        elif layers and name in _TINY_TWIN:
            out[name] = _TINY_TWIN[name] + (f"@{spec.text_layers}" if spec.text_layers else "")
        else:
            out[name] = _REFERENCE.get(spec.paper, "ref-anchored@0.5")
    return out


def _chapters(profile: str, only) -> list[str]:
    from ..params import profiles_of, toc_notebooks

    # the Rehearsal chapter's record on a credentialed profile is this rehearsal itself: rehearsing it would
    # start the rehearsal again inside itself
    names = [n for n in toc_notebooks() if profile in profiles_of(n) and not _is_rehearsal_page(n, profile)]
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise UsageError(f"not chapters of the {profile!r} profile: {unknown}; it has {names}")
        names = [n for n in names if n in only]
    return names


def run_order(chapters: list[str], profile: str) -> list[str]:
    """The order the rehearsal makes ``chapters``' records in: the chapters that run layer protocols first
    (ModaLens App. N: on the mimic profile two thirds of the model time, and the longest notebook, Table 26's
    bootstrap), then the others in the book's order. A chapter's notebook runs beside the next chapter's
    records (``rehearse(overlap=True)``), so the last notebook is the one no records run beside: ending with
    short chapters keeps the second core busy to the end. Every chapter's records are its own, so the order
    changes no record."""
    return sorted(chapters, key=lambda c: not _needs_layers(c, profile))  # stable: the book's order within each


def _is_rehearsal_page(chapter: str, profile: str) -> bool:
    from ..params import load_params
    from ..protocols.rehearsal import PROTOCOL

    runs = load_params(chapter, profile)["runs"].values()
    return bool(runs) and all(r["protocol"] == PROTOCOL for r in runs)


def _needs_layers(chapter: str, profile: str) -> bool:
    from ..params import load_params

    return any(r["protocol"] in LAYER_PROTOCOLS for r in load_params(chapter, profile)["runs"].values())


def _scaled(chapter: str, profile: str, scale: float) -> dict:
    """The sizes a reduced rehearsal changes in ``chapter``'s designs (:func:`~shovir_core.rehearsal.scaling.scaled_keys`
    of the profile's own, unscaled, specs)."""
    from ..params import load_params
    from .scaling import REHEARSAL_SCALE_ENV, scaled_keys

    old = os.environ.pop(REHEARSAL_SCALE_ENV, None)
    try:
        runs = load_params(chapter, profile)["runs"]
    finally:
        if old is not None:
            os.environ[REHEARSAL_SCALE_ENV] = old
    return scaled_keys(runs, scale)


def _banner(notebook: Path, text: str) -> None:
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(text, metadata={"tags": ["rehearsal-banner"]}))
    tmp = notebook.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, notebook)


def _peak_mb() -> float:
    """Peak resident memory of this process and of the processes it waited for (a notebook's kernel, local
    shards), in MB: Linux reports ``ru_maxrss`` in KiB."""
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return round(peak / 1024, 1)


def _child_records(profile: str, chapter: str, shards: int | None) -> int:
    """In a process of its own: make the chapter's records (sharded when asked).

    With ``shards`` the local shard processes start from here, as ``shovir run CHAPTER --shards N --executor
    local`` starts them, without that command's own interpreter and its status table: each chapter paid an
    interpreter start and a second resolution of its records' specs while one core idled. The records are
    then read (and any a shard left unfinished made) by :func:`~shovir_core.book.runner.make_records`."""
    from ..book.runner import make_records

    if shards:
        from ..cli import _print_outcomes
        from ..jobs import ShardTask, targets_of
        from ..jobs.submit import run_local

        task = ShardTask(targets_of([chapter], profile=profile), count=shards, progress=False)
        if _print_outcomes(run_local(task, range(shards))):
            return 1
    ids = make_records(chapter, profile=profile, progress=False)
    print(RECORDS_LINE + json.dumps({"run_ids": ids, "peak_mb": _peak_mb()}), flush=True)
    return 0


def _child_notebook(profile: str, chapter: str, out_dir: str, run_ids: dict) -> int:
    """In a process of its own: execute the chapter's notebook on its records (the guard included)."""
    from ..book.runner import execute_notebook

    # the profile's own parameters, reproduces_paper included: its paper comparisons run, and their
    # verdicts read "rehearsal" and hold nothing against the paper (tables.paper_vs_run)
    path = execute_notebook(chapter, profile=profile, run_ids=run_ids, output_dir=Path(out_dir))
    print(NOTEBOOK_LINE + json.dumps({"notebook": str(path), "peak_mb": _peak_mb()}), flush=True)
    return 0


def _spawn(cmd: list[str], env: dict, log: Path) -> tuple[int, float, float, str]:
    """Run one phase's process, its stderr appended to ``log``; returns its exit status, wall seconds, CPU
    seconds (its own and its descendants': ``wait4`` reports them for this process alone, so two phases
    running side by side are each measured apart) and its stdout."""
    start = time.monotonic()
    with open(log, "a", encoding="utf-8") as err, tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    return proc.returncode, time.monotonic() - start, usage.ru_utime + usage.ru_stime, text


def _result(text: str, prefix: str) -> dict | None:
    return next((json.loads(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), None)


def _last_line(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]


def _record_rows(run_ids: dict, *, chapter: str, profile: str, scale: float, root: Path) -> list[dict]:
    """One row per record under the runs root ``root``: its trials and model requests beside the paper's
    denominator for it (:mod:`shovir_core.rehearsal.denominators`). The root is passed, not set in
    ``$SHOVIR_RUNS``: the notebook lane's thread runs beside this one."""
    from ..records import load_run
    from .denominators import UNEXPLAINED, compare, record_denominator

    rows = []
    for key, run_id in run_ids.items():
        protocol, name, h = run_id.split("/")
        run = load_run(protocol, name, h, root=root)
        counts = run.manifest.get("counts") or {}
        # the distinct model requests the record made (its inference-cache entries), where it keeps them
        calls = (run.manifest.get("inference_cache") or {}).get("n_entries")
        try:
            denominator = record_denominator(chapter=chapter, key=key, protocol=protocol, spec=run.info.spec,
                                             profile=profile, scale=scale)
            verdict = compare(denominator, trials=run.info.n_trials, counts=counts)
        except (ValueError, KeyError) as e:  # a broken registry rule: reported on the record's row, not fatal
            denominator = {"paper_item": None, "paper_trials": None, "paper_trials_scaled": None, "compare": None}
            verdict = {"compared_trials": None, "difference": None, "verdict": UNEXPLAINED,
                       "reason": f"denominators.yaml could not be evaluated for this record: {e}"}
        rows.append({"key": key, "run_id": run_id, "protocol": protocol, "status": run.status,
                     "trials": run.info.n_trials, "seconds": run.info.seconds, "model_calls": calls,
                     "model": (run.info.model or {}).get("id") if isinstance(run.info.model, dict) else None,
                     "paper_item": denominator["paper_item"], "paper_trials": denominator["paper_trials"],
                     "paper_trials_scaled": denominator["paper_trials_scaled"], "compared": denominator["compare"],
                     **verdict})
    return rows


def rehearse(profile: str, *, only=None, stand_in: str | None = None, scale: float = 1.0, seed: int = 0,
             pixels: str = "small", shards: int | None = None, root: str | Path | None = None,
             progress: bool = True, overlap: bool = True) -> dict:
    """Rehearse ``profile`` (``mimic`` or ``padchest``); returns the report (also written as JSON).

    Each chapter's records are made in one process (with ``shards``, by that many local shard processes),
    then its notebook is executed in another. With ``overlap`` a chapter's notebook, which keeps one core
    busy, runs beside the next chapter's records, so no core idles while a notebook runs; a chapter's wall
    time is then its two phases' (``records_seconds``, ``notebook_seconds``), each measured while sharing
    the machine, and the chapters' times add up to more than the rehearsal's. Without it the phases run one
    after the other (as inside ``shovir book``, whose other workers fill the cores)."""
    if profile not in ("mimic", "padchest"):
        raise UsageError(f"rehearse: profile must be 'mimic' or 'padchest', got {profile!r}")
    if shards is not None and shards < 1:
        raise UsageError(f"rehearse: --shards must be at least 1, got {shards}")
    # absolute: every chapter's notebook runs in a folder of its own, where a relative root would name nothing
    root = (Path(root) if root else rehearsal_root()).resolve()
    chapters = _chapters(profile, only)
    tree_dir = root / "trees" / f"scale{scale:g}-seed{seed}-{pixels}"
    t0 = time.monotonic()
    tree = write_tree(tree_dir, scale=scale, seed=seed, pixels=pixels)
    tree_seconds = time.monotonic() - t0
    from .chexbert_stand_in import write_tiny_chexbert

    chexbert_weights, chexbert_bert = write_tiny_chexbert(tree_dir / "chexbert-stand-in", seed=seed)
    runs_root = root / "runs" / tree["sha256"][:12]
    book_dir = root / "book" / profile / tree["sha256"][:12]
    book_dir.mkdir(parents=True, exist_ok=True)
    # the chapters' logs stay out of the book: the guard removes any file that appears in the book while a
    # notebook that read credentialed data runs, as the next chapter's log would beside it
    log_dir = root / "logs" / profile / tree["sha256"][:12]
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SHOVIR_MIMIC=str(tree_dir / "mimic"), SHOVIR_MIMIC_JPG=str(tree_dir / "mimic"),
               SHOVIR_PADCHEST=str(tree_dir / "padchest-gr"), SHOVIR_RUNS=str(runs_root),
               SHOVIR_CHEXBERT_WEIGHTS=str(chexbert_weights), SHOVIR_CHEXBERT_BERT=str(chexbert_bert),
               SHOVIR_WIKITEXT103=str(tree_dir / "wikitext-103"),
               **{REHEARSAL_ENV: tree["sha256"]})
    from .scaling import REHEARSAL_SCALE_ENV

    env.pop(REHEARSAL_SCALE_ENV, None)
    if scale < 1:  # the designs' fixed sample sizes scale with the tree (rehearsal.scaling)
        env[REHEARSAL_SCALE_ENV] = repr(float(scale))
    report = {"profile": profile, "report": str(root / f"report-{profile}.json"), "scale": scale, "seed": seed, "pixels": pixels, "tree": str(tree_dir),
              "tree_sha256": tree["sha256"], "tree_seconds": round(tree_seconds, 1), "planted": planted(scale).counts,
              "runs_root": str(runs_root), "book": str(book_dir), "chapters": []}
    from tqdm import tqdm

    from ..kernel_forkserver import SERVER_ENV
    from ..models.registry import STAND_INS_ENV
    from ..tables.reproduction import _command

    bar = tqdm(total=len(chapters), desc=f"rehearse {profile}", unit="chapter", disable=not progress)

    def finish(entry: dict) -> None:  # the report lists the chapters in the book's order, whatever ran first
        report["chapters"].append(entry)
        report["chapters"].sort(key=lambda c: chapters.index(c["chapter"]))
        (root / f"report-{profile}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        bar.update()

    def notebook(entry: dict, cenv: dict, run_ids: dict) -> None:
        log = Path(entry["log"])
        rc, seconds, cpu, out = _spawn([sys.executable, "-m", "shovir_core.rehearsal.run", "notebook", profile,
                                        entry["chapter"], str(book_dir), json.dumps(run_ids)], cenv, log)
        result = _result(out, NOTEBOOK_LINE)
        entry.update(notebook_seconds=round(seconds, 1), seconds=round(entry["records_seconds"] + seconds, 1),
                     cpu_seconds=round(entry["cpu_seconds"] + cpu, 1))
        if rc == 0 and result is not None:
            entry["notebook_peak_mb"] = result["peak_mb"]
            entry["peak_mb"] = max(entry["records_peak_mb"], result["peak_mb"])
            _banner(Path(result["notebook"]), BANNER.format(profile=profile, scale=scale,
                                                           stand_ins=", ".join(entry["stand_ins"])))
            entry["notebook"] = result["notebook"]
        else:
            entry.update(status="failed", error=_last_line(log))
        finish(entry)

    # A chapter's notebook (one process, one core) runs beside the next chapter's records: the notebooks run
    # one after the other, and so do the records (in run_order)
    lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rehearsal-notebooks") if overlap else None
    pending = []
    try:
        for chapter in run_order(chapters, profile):
            table = stand_ins(layers=_needs_layers(chapter, profile), override=stand_in)
            cenv = dict(env, **{STAND_INS_ENV: json.dumps(table)})
            # the chapter's notebook kernel must be its child, whose peak memory and CPU time it reports with its
            # own: not a kernel forked by the book's kernel fork server, which is that server's child
            cenv.pop(SERVER_ENV, None)
            log = log_dir / f"{chapter}.log"
            log.write_text("", encoding="utf-8")
            rc, seconds, cpu, out = _spawn([sys.executable, "-m", "shovir_core.rehearsal.run", "records", profile,
                                            chapter, str(shards or 0)], cenv, log)
            entry = {"chapter": chapter, "status": "ok", "seconds": round(seconds, 1),
                     "records_seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "log": str(log),
                     "stand_ins": sorted(set(table.values())), "scaled": _scaled(chapter, profile, scale),
                     "command": _command(chapter, [profile], shards=16)}
            result = _result(out, RECORDS_LINE)
            if rc != 0 or result is None:
                entry.update(status="failed", error=_last_line(log))
                step = partial(finish, entry)
            else:
                entry["records"] = _record_rows(result["run_ids"], chapter=chapter, profile=profile, scale=scale,
                                                root=runs_root)
                entry["records_peak_mb"] = entry["peak_mb"] = result["peak_mb"]
                entry["trials"] = sum(r["trials"] or 0 for r in entry["records"])
                known = [r["model_calls"] for r in entry["records"] if r["model_calls"] is not None]
                entry["model_calls"] = sum(known) if known else None
                step = partial(notebook, entry, cenv, result["run_ids"])
            if lane is None:
                step()
            else:
                pending.append(lane.submit(step))
        for done in pending:
            done.result()  # re-raises what a notebook step raised
    finally:
        if lane is not None:
            lane.shutdown(wait=True)
        bar.close()
    report["seconds"] = round(time.monotonic() - t0, 1)
    report["peak_mb_together"] = _peak_together(report["chapters"], overlap)
    (root / f"report-{profile}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def _peak_together(chapters: list[dict], overlap: bool) -> float | None:
    """At most how much memory (MB) the rehearsal's processes held at once: the largest phase's peak, or with
    ``overlap`` the largest records peak plus the largest notebook peak (an upper bound: a notebook runs
    beside later chapters' records)."""
    records = [c["records_peak_mb"] for c in chapters if "records_peak_mb" in c]
    notebooks = [c["notebook_peak_mb"] for c in chapters if "notebook_peak_mb" in c]
    if not records:
        return None
    if overlap:
        return max(records) + max(notebooks, default=0.0)
    return max(records + notebooks)


if __name__ == "__main__":  # a chapter's records or notebook, in a process of its own (rehearse())
    if sys.argv[1] == "records":
        sys.exit(_child_records(sys.argv[2], sys.argv[3], int(sys.argv[4]) or None))
    sys.exit(_child_notebook(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])))
