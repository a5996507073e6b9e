"""The other-dataset runs of ModaLens App. N.4 (VQA-RAD, SLAKE, OmniMedVQA): not loadable here.

ModaLens App. N.4 repeats the image-token knockout (with a random-token control) on VQA-RAD, SLAKE and
OmniMedVQA, which use a final-token yes/no readout (OmniMedVQA: one of four option letters). This
repository ships none of these datasets and has no adapter for their formats yet, so
``load_dataset("vqa-rad:<folder>")`` (and ``slake:``, ``omnimedvqa:``) fail with
:class:`OtherDatasetUnavailable`, naming what is missing, rather than running on something else. The
knockout itself (span ``image`` with the ``random_matched`` control,
:mod:`shovir_core.models.lens`) is built and runs on the chest X-ray datasets.
"""
from __future__ import annotations

from pathlib import Path

from .schema import DatasetError

__all__ = ["OtherDatasetUnavailable", "OTHER_DATASETS", "load_vqa_rad", "load_slake", "load_omnimedvqa"]

OTHER_DATASETS = {"vqa-rad": "VQA-RAD", "slake": "SLAKE", "omnimedvqa": "OmniMedVQA"}
"""Adapter name -> the dataset ModaLens App. N.4 uses."""


class OtherDatasetUnavailable(DatasetError):
    """A dataset of ModaLens App. N.4 that this repository cannot load."""


def _unavailable(adapter: str, path: Path):
    raise OtherDatasetUnavailable(
        f"{OTHER_DATASETS[adapter]} ({adapter}:{path}): ModaLens App. N.4's other-dataset runs need an adapter "
        f"for {OTHER_DATASETS[adapter]}'s question/answer format, which this repository does not have yet; "
        "the image-token knockout and its random-token control run on the chest X-ray datasets "
        "(notebooks/modalens_appn.py)")


def load_vqa_rad(path: Path) -> None:
    """``vqa-rad:<folder>``: raises :class:`OtherDatasetUnavailable`."""
    _unavailable("vqa-rad", path)


def load_slake(path: Path) -> None:
    """``slake:<folder>``: raises :class:`OtherDatasetUnavailable`."""
    _unavailable("slake", path)


def load_omnimedvqa(path: Path) -> None:
    """``omnimedvqa:<folder>``: raises :class:`OtherDatasetUnavailable`."""
    _unavailable("omnimedvqa", path)
