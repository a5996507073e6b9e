"""Dataset adapters behind one schema (:class:`Dataset`).

``load_dataset("demo")`` returns the embedded NIH box subset (ShoViR demo);
``load_dataset("demo-64px")`` the 64-px multi-study NIH subset (ModaLens demo);
a path loads an NIH-format folder. Further adapters register with
:func:`register_adapter` (MIMIC-CXR, PadChest-GR).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import paths
from .nih import NIH_CITATION, NIH_LICENCE, load_nih_folder
from .schema import BOX_COLUMNS, IMAGE_COLUMNS, Dataset, DatasetError, validate

__all__ = [
    "Dataset", "DatasetError", "load_dataset", "register_adapter", "DEMO_DATASETS",
    "IMAGE_COLUMNS", "BOX_COLUMNS", "validate", "load_nih_folder", "NIH_CITATION", "NIH_LICENCE",
]

DEMO_DATASETS = {"demo": "nih-bbox", "demo-bbox": "nih-bbox", "demo-64px": "nih-64px"}

_ADAPTERS: dict[str, Callable[..., Dataset]] = {}

# Built-in adapters (credentialed datasets; the no-report VQA datasets of ModaLens Table 6), imported on first use.
_BUILTIN: dict[str, tuple[str, str]] = {
    "mimic": ("shovir_core.data.mimic", "load_mimic_imagenome"),
    "mimic-jpg": ("shovir_core.data.mimic_jpg", "load_mimic_jpg"),
    "mimic-jpg-train": ("shovir_core.data.mimic_jpg", "load_mimic_jpg_train"),
    "padchest": ("shovir_core.data.padchest", "load_padchest_gr"),
    "vqa-rad": ("shovir_core.data.vqa_rad", "load_vqa_rad"),
    "slake": ("shovir_core.data.slake", "load_slake"),
    "omnimedvqa": ("shovir_core.data.omnimedvqa", "load_omnimedvqa"),
    "probmed": ("shovir_core.data.probmed", "load_probmed"),
}


def register_adapter(name: str, loader: Callable[..., Dataset]) -> None:
    """Register a loader reachable as ``load_dataset("<name>:<path>")``."""
    _ADAPTERS[name] = loader


def _adapter(name: str) -> Callable[..., Dataset] | None:
    if name not in _ADAPTERS and name in _BUILTIN:
        import importlib

        module, func = _BUILTIN[name]
        _ADAPTERS[name] = getattr(importlib.import_module(module), func)
    return _ADAPTERS.get(name)


def load_dataset(source: str | Path, **kwargs) -> Dataset:
    """Load a dataset by demo name, ``adapter:path``, or NIH-format folder path.

    ``kwargs`` are the adapter's options; an option the adapter does not have is a
    :class:`DatasetError` naming the options it has. When the book runner's read log is active, a
    credentialed dataset loaded here is logged, so the book scans what the notebook emitted.

    Examples
    --------
    >>> ds = load_dataset("demo")
    >>> ds.images.columns[:4].tolist()
    ['image_id', 'study_id', 'patient_id', 'view']
    """
    if isinstance(source, bool) or not isinstance(source, (str, Path)):
        raise DatasetError(f"dataset must be a name or path string, got {source!r}")
    if isinstance(source, str) and source in DEMO_DATASETS:
        _no_options(source, kwargs)
        ds = load_nih_folder(paths.demo_data_root() / DEMO_DATASETS[source], name=source)
    elif isinstance(source, str) and ":" in source and _adapter(source.split(":", 1)[0]) is not None:
        adapter, path = source.split(":", 1)
        loader = _adapter(adapter)
        _check_options(adapter, loader, kwargs)
        if not path.strip():
            raise DatasetError(f"dataset {source!r}: give the folder after '{adapter}:'")
        if "$" in path:
            raise DatasetError(f"dataset {source!r} names an unset environment variable; set it to the folder of "
                               "your copy of the data (see README, 'Profiles and credentialed data')")
        ds = loader(Path(path), **kwargs)
    else:
        path = Path(source)
        if not path.exists():
            raise DatasetError(
                f"dataset {str(source)!r} not found: give one of {sorted(DEMO_DATASETS)}, "
                f"'<adapter>:<path>' with adapter in {sorted(set(_ADAPTERS) | set(_BUILTIN))}, or an NIH-format folder"
            )
        _no_options(str(source), kwargs)
        ds = load_nih_folder(path)
    _log_read(ds, source, kwargs)
    return ds


def _no_options(source: str, kwargs: dict) -> None:
    if kwargs:
        raise DatasetError(f"dataset {source!r} takes no options, got {sorted(kwargs)}")


def _check_options(adapter: str, loader: Callable[..., Dataset], kwargs: dict) -> None:
    import inspect

    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    allowed = sorted(n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise DatasetError(f"dataset adapter {adapter!r} has no option(s) {unknown}; its options are {allowed}")


def _log_read(ds: Dataset, source, kwargs: dict) -> None:
    """Append a credentialed dataset to the book runner's read log (``SHOVIR_READ_LOG``), if active."""
    import json
    import os

    from ..records import READ_LOG_ENV

    log = os.environ.get(READ_LOG_ENV)
    if not log or not ds.credentialed:
        return
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": "dataset", "source": str(source), "options": kwargs, "name": ds.name,
                             "credentialed": True}, default=str) + "\n")
