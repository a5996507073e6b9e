"""Datasets as the protocols load them: cached in-process, loaded again when a file changed.

A protocol loads its dataset when it resolves a spec (to pin the content hash) and again when it
executes it (to check that hash). Loading and hashing every image twice is slow on MIMIC-CXR, but a
plain ``functools.lru_cache`` would hand ``execute`` the dataset as it was at resolve time, so
"dataset changed since the spec was resolved" could never be noticed in the same process.
:func:`load_dataset` keeps each dataset with the stat signature of every file it was read from (the
image files, the metadata files and the dataset folder; :func:`dataset_files`) and loads it again
when any of them changed (:func:`shovir_core.file_cache.cache_by_files`).
"""
from __future__ import annotations

from pathlib import Path

from ..data import Dataset
from ..data import load_dataset as _load_dataset
from ..file_cache import cache_by_files

__all__ = ["load_dataset", "dataset_files"]


def dataset_files(ds: Dataset) -> list[Path]:
    """The files a dataset was read from: its folder, its metadata files and every image file."""
    return [Path(ds.root), *(Path(p) for p in ds.extra_files), *(Path(p) for p in ds.images["path"])]


@cache_by_files(lambda ds, *args, **kwargs: dataset_files(ds), maxsize=4)
def load_dataset(source: str, **options) -> Dataset:
    """:func:`shovir_core.data.load_dataset`, reused while none of the dataset's files changed."""
    return _load_dataset(source, **options)
