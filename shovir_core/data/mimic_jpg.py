"""Adapter for MIMIC-CXR-JPG (ModaLens): test-split images, CheXpert study labels and reports.

Expected layout (the PhysioNet release, v2.0.0 / v2.1.0; ``.csv`` or ``.csv.gz``)::

    <root>/mimic-cxr-2.0.0-metadata.csv   dicom_id, subject_id, study_id, ViewPosition, Rows, Columns,
                                          StudyDate, StudyTime, ViewCodeSequence_CodeMeaning, ...
    <root>/mimic-cxr-2.0.0-split.csv      dicom_id, study_id, subject_id, split (train/validate/test)
    <root>/mimic-cxr-2.0.0-chexpert.csv   subject_id, study_id, and the 14 CheXpert classes
                                          (1.0, 0.0, -1.0, blank)
    <root>/files/pXX/p<subject_id>/s<study_id>/<dicom_id>.jpg

Reports are not part of MIMIC-CXR-JPG; they come from MIMIC-CXR's ``mimic-cxr-reports`` archive
(``files/pXX/p<subject_id>/s<study_id>.txt``), found under ``reports_root`` (default
``<root>/mimic-cxr-reports``). Without them the dataset has no reports.

Rows of the images table: ``image_id`` = dicom_id, ``study_id`` and ``patient_id`` (= subject_id)
as strings, ``view`` = ``ViewPosition`` (``""`` when blank), ``width``/``height`` from
``Columns``/``Rows``, ``study_datetime`` (ISO, from StudyDate + StudyTime) and ``view_blank``.
Labels are per study (CheXpert labeller on the report) and are copied to each image of the study;
studies absent from the label file are blank.

Frontal selection (``frontal_only=True``): ``ViewPosition`` PA or AP, or a blank ``ViewPosition``
whose ``ViewCodeSequence_CodeMeaning`` is postero-anterior or antero-posterior (ModaLens keeps
such blank-view pairs and reports them separately).

Records made from this dataset are credentialed (``credentialed=True``): the book renders
aggregates only and nothing derived from the text or pixels leaves the run record.

Citation: Johnson AEW, Pollard TJ, Greenbaum NR, et al. "MIMIC-CXR-JPG, a large publicly available
database of labeled chest radiographs", arXiv:1901.07042; Johnson AEW et al., "MIMIC-CXR, a
de-identified publicly available database of chest radiographs with free-text reports", Scientific
Data 6:317 (2019).
Licence: PhysioNet Credentialed Health Data License 1.5.0 (credentialed access; data-use agreement).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, CODES
from .checks import at, check_image_file, read_csv
from .schema import BOX_COLUMNS, Dataset, DatasetError

__all__ = [
    "load_mimic_jpg", "load_mimic_jpg_train", "MIMIC_JPG_FILES", "FRONTAL_CODE_MEANINGS", "MIMIC_JPG_CITATION", "MIMIC_JPG_LICENCE",
    "image_relpath", "report_relpath",
]

MIMIC_JPG_FILES = {
    "metadata": "mimic-cxr-2.0.0-metadata.csv",
    "split": "mimic-cxr-2.0.0-split.csv",
    "chexpert": "mimic-cxr-2.0.0-chexpert.csv",
}
"""The three metadata files (each may also be gzipped, ``.csv.gz``)."""

FRONTAL_CODE_MEANINGS = ("postero-anterior", "antero-posterior")
"""``ViewCodeSequence_CodeMeaning`` values that admit a blank-ViewPosition image as frontal."""

SPLITS = ("train", "validate", "test")

MIMIC_JPG_CITATION = (
    "Johnson AEW, Pollard TJ, Greenbaum NR, et al. MIMIC-CXR-JPG, a large publicly available database of "
    "labeled chest radiographs. arXiv:1901.07042. Johnson AEW et al. MIMIC-CXR, a de-identified publicly "
    "available database of chest radiographs with free-text reports. Sci Data 6, 317 (2019)."
)
MIMIC_JPG_LICENCE = "PhysioNet Credentialed Health Data License 1.5.0 (credentialed access; data-use agreement)"


def image_relpath(subject_id: str, study_id: str, dicom_id: str) -> Path:
    """``files/pXX/p<subject_id>/s<study_id>/<dicom_id>.jpg`` of one image (invented ids below).

    >>> image_relpath("90000032", "90414267", "abc").as_posix()
    'files/p90/p90000032/s90414267/abc.jpg'
    """
    return Path("files") / f"p{subject_id[:2]}" / f"p{subject_id}" / f"s{study_id}" / f"{dicom_id}.jpg"


def report_relpath(subject_id: str, study_id: str) -> Path:
    """``files/pXX/p<subject_id>/s<study_id>.txt`` of one study's report (MIMIC-CXR reports archive)."""
    return Path("files") / f"p{subject_id[:2]}" / f"p{subject_id}" / f"s{study_id}.txt"


def _read_csv(root: Path, key: str) -> tuple[pd.DataFrame, Path]:
    base = MIMIC_JPG_FILES[key]
    for candidate in (root / base, root / f"{base}.gz"):
        if candidate.is_file():
            return read_csv(candidate, name="mimic-jpg", dtype=str, keep_default_na=False), candidate
    raise DatasetError(f"mimic-jpg: {root} has neither {base} nor {base}.gz")


def _need(df: pd.DataFrame, cols, file: Path) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DatasetError(f"mimic-jpg: {file.name} lacks columns {missing}")


def _ids(series: pd.Series, what: str, file: Path) -> pd.Series:
    s = series.str.strip()
    bad = s[~s.str.fullmatch(r"[0-9]+")]
    if not bad.empty:
        line = series.index.get_loc(bad.index[0]) + 2
        raise DatasetError(f"{at('mimic-jpg', file, line, what)}: {bad.iloc[0]!r} is not a numeric id "
                           "(rows counted as lines of the file, the header is line 1)")
    return s.str.lstrip("0").where(s.str.lstrip("0") != "", "0")


_TIME = re.compile(r"(?P<hms>[0-9]{1,6})(?:\.(?P<frac>[0-9]+))?")


def _datetime(date: str, time: str, *, file: Path | None = None, row=None) -> str | None:
    """ISO date-time of a study from DICOM ``StudyDate`` (``YYYYMMDD``) and ``StudyTime`` (``HHMMSS[.f]``).

    A time may have lost its leading zeros in a spreadsheet (``80556.875`` is 08:05:56.875); anything
    else (``12:30``, ``25:00:00``, a date ``2251-05-06``) is refused naming the file, row and field.
    """
    date, time = date.strip(), time.strip()
    if not date:
        if time:
            raise DatasetError(f"{at('mimic-jpg', file, row, 'StudyDate')}: empty while StudyTime is {time!r}")
        return None
    if not re.fullmatch(r"[0-9]{8}", date):
        raise DatasetError(f"{at('mimic-jpg', file, row, 'StudyDate')}: {date!r} is not a date YYYYMMDD")
    try:
        day = pd.to_datetime(date, format="%Y%m%d")
    except (ValueError, OverflowError):
        raise DatasetError(f"{at('mimic-jpg', file, row, 'StudyDate')}: {date!r} is not a valid date YYYYMMDD") from None
    if time:
        m = _TIME.fullmatch(time)
        if m is None:
            raise DatasetError(f"{at('mimic-jpg', file, row, 'StudyTime')}: {time!r} is not a time HHMMSS[.fff]")
        hhmmss = m.group("hms").zfill(6)
        hh, mm, ss = int(hhmmss[:2]), int(hhmmss[2:4]), int(hhmmss[4:6])
        if hh > 23 or mm > 59 or ss > 59:
            raise DatasetError(f"{at('mimic-jpg', file, row, 'StudyTime')}: {time!r} is not a time of day "
                               "(HH <= 23, MM <= 59, SS <= 59)")
        frac = float("0." + m.group("frac")) if m.group("frac") else 0.0
        day = day + pd.Timedelta(hours=hh, minutes=mm, seconds=ss + frac)
    return day.isoformat()


def _labels(chexpert: pd.DataFrame, file: Path) -> pd.DataFrame:
    _need(chexpert, ("subject_id", "study_id", *CHEXPERT_CLASSES), file)
    study = _ids(chexpert["study_id"], "study_id", file)
    if study.duplicated().any():
        raise DatasetError(f"mimic-jpg: {file.name}: duplicate study_id {study[study.duplicated()].iloc[0]!r}")
    out = pd.DataFrame(index=pd.Index(study.to_numpy(), name="study_id"))
    for cls in CHEXPERT_CLASSES:
        raw = chexpert[cls].str.strip()
        values = pd.to_numeric(raw.where(raw != "", None), errors="coerce").to_numpy(dtype=float)
        bad = ~(np.isnan(values) | np.isin(values, CODES)) | (np.isnan(values) & (raw.to_numpy() != ""))
        if bad.any():
            i = int(np.argmax(bad))
            raise DatasetError(f"mimic-jpg: {file.name}: study {study.iloc[i]!r}, class {cls!r}: "
                               f"label {raw.iloc[i]!r} is not 1, 0, -1 or blank")
        out[cls] = values
    return out


def load_mimic_jpg(root: str | Path, *, split: str | None = "test", frontal_only: bool = True,
                   reports_root: str | Path | None = None, name: str = "mimic-cxr-jpg") -> Dataset:
    """Load MIMIC-CXR-JPG images of one split with study labels (and reports when present).

    Parameters
    ----------
    root
        The MIMIC-CXR-JPG folder (metadata CSVs and ``files/``).
    split
        ``"test"`` (the ModaLens cohort), ``"validate"``, ``"train"`` or ``None`` for all.
    frontal_only
        Keep frontal images only (see the module docstring for the rule).
    reports_root
        Folder holding the MIMIC-CXR reports (``files/pXX/pSUBJECT/sSTUDY.txt``); default
        ``<root>/mimic-cxr-reports`` when it exists, else no reports.
    name
        Dataset name recorded in run manifests.

    Returns
    -------
    Dataset
        With ``credentialed=True`` and no boxes.

    Raises
    ------
    DatasetError
        Besides bad metadata values: a metadata row whose ``Columns`` x ``Rows`` differ from the size of
        its image file (where the file is present; the header is read, not the pixels), and a report file
        that is missing, not UTF-8 or empty.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"mimic-jpg: {root} is not a folder")
    if split is not None and split not in SPLITS:
        raise DatasetError(f"mimic-jpg: split {split!r} not in {SPLITS}")
    meta, meta_file = _read_csv(root, "metadata")
    _need(meta, ("dicom_id", "subject_id", "study_id", "ViewPosition", "Rows", "Columns", "StudyDate",
                 "StudyTime"), meta_file)
    splits, split_file = _read_csv(root, "split")
    _need(splits, ("dicom_id", "split"), split_file)
    chexpert, chexpert_file = _read_csv(root, "chexpert")
    study_labels = _labels(chexpert, chexpert_file)

    meta = meta.assign(subject_id=_ids(meta["subject_id"], "subject_id", meta_file),
                       study_id=_ids(meta["study_id"], "study_id", meta_file),
                       dicom_id=meta["dicom_id"].str.strip())
    if meta["dicom_id"].duplicated().any():
        raise DatasetError(f"mimic-jpg: {meta_file.name}: duplicate dicom_id "
                           f"{meta['dicom_id'][meta['dicom_id'].duplicated()].iloc[0]!r}")
    split_of = dict(zip(splits["dicom_id"].str.strip(), splits["split"].str.strip()))
    unknown = sorted(set(split_of.values()) - set(SPLITS))
    if unknown:
        raise DatasetError(f"mimic-jpg: {split_file.name}: unknown split values {unknown}")
    missing = meta["dicom_id"][~meta["dicom_id"].isin(split_of)]
    if not missing.empty:
        raise DatasetError(f"mimic-jpg: image {missing.iloc[0]!r} has no row in {split_file.name}")
    meta["split"] = meta["dicom_id"].map(split_of)
    if split is not None:
        meta = meta[meta["split"] == split]
    view = meta["ViewPosition"].str.strip().str.upper()
    code = (meta["ViewCodeSequence_CodeMeaning"].str.strip().str.lower()
            if "ViewCodeSequence_CodeMeaning" in meta.columns else pd.Series("", index=meta.index))
    frontal = view.isin(["PA", "AP"]) | ((view == "") & code.isin(FRONTAL_CODE_MEANINGS))
    meta = meta.assign(view=view, frontal=frontal)
    if frontal_only:
        meta = meta[meta["frontal"]]
    if meta.empty:
        raise DatasetError(f"mimic-jpg: no {'frontal ' if frontal_only else ''}images in split {split!r} of {root}")
    meta = meta.sort_values("dicom_id").reset_index(drop=True)

    rows = []
    for r in meta.itertuples():
        try:
            width, height = int(r.Columns), int(r.Rows)
        except ValueError:
            width = height = 0
        if width < 1 or height < 1:
            raise DatasetError(f"{at('mimic-jpg', meta_file, r.dicom_id, 'Rows/Columns')}: "
                               f"{r.Rows!r}/{r.Columns!r} are not positive integers")
        image_path = root / image_relpath(r.subject_id, r.study_id, r.dicom_id)
        if image_path.is_file():
            size = check_image_file(image_path, where=f"mimic-jpg: image {r.dicom_id!r}")
            if size != (width, height):
                raise DatasetError(f"{at('mimic-jpg', meta_file, r.dicom_id, 'Rows/Columns')}: the metadata row "
                                   f"says {width}x{height} (Columns x Rows) but the image file {image_path} is "
                                   f"{size[0]}x{size[1]}")
        rows.append({
            "image_id": r.dicom_id, "study_id": r.study_id, "patient_id": r.subject_id,
            "view": r.view, "path": str(image_path.resolve()),
            "width": width, "height": height,
            "study_datetime": _datetime(r.StudyDate, r.StudyTime, file=meta_file, row=r.dicom_id),
            "view_blank": r.view == "",
            "split": r.split,
        })
    images = pd.DataFrame(rows)
    labels = (study_labels.reindex(images["study_id"]).set_axis(pd.Index(images["image_id"], name="image_id"))
              .astype(float))

    if reports_root is None and (root / "mimic-cxr-reports").is_dir():
        reports_root = root / "mimic-cxr-reports"
    reports, report_files = None, ()
    if reports_root is not None:
        reports_root = Path(reports_root)
        texts, files = {}, []
        for study, subject in images[["study_id", "patient_id"]].drop_duplicates().itertuples(index=False):
            path = reports_root / report_relpath(subject, study)
            if not path.is_file():
                raise DatasetError(f"mimic-jpg: study {study!r}: report file not found: {path}")
            try:
                texts[study] = " ".join(path.read_text(encoding="utf-8").split())
            except UnicodeDecodeError as exc:
                raise DatasetError(f"mimic-jpg: study {study!r}: report {path} is not UTF-8 text "
                                   f"({exc.reason} at byte {exc.start})") from None
            if not texts[study]:
                raise DatasetError(f"mimic-jpg: study {study!r}: report {path} is empty (no text); a study's "
                                   "report file holds its report")
            files.append(path)
        reports = pd.DataFrame({"text": pd.Series(texts)}).rename_axis("study_id")
        report_files = tuple(files)

    boxes = pd.DataFrame({c: pd.Series(dtype=float if c[0] in "xy" else object) for c in BOX_COLUMNS})
    return Dataset(
        name=name, root=root, images=images, boxes=boxes, labels=labels, reports=reports, credentialed=True,
        citation=MIMIC_JPG_CITATION, licence=MIMIC_JPG_LICENCE,
        extra_files=(meta_file, split_file, chexpert_file, *report_files),
    )


def load_mimic_jpg_train(root: str | Path, *, frontal_only: bool = True, reports_root: str | Path | None = None,
                         name: str = "mimic-cxr-jpg-train") -> Dataset:
    """The training split of MIMIC-CXR-JPG (``load_dataset("mimic-jpg-train:<root>")``).

    The pool of ModaLens App. N.3's disjoint probe cohort ("650 patients drawn with seed 0 from the
    training pool"): :func:`load_mimic_jpg` with ``split="train"``, recorded under its own name, so a
    spec names the training pool as a dataset string beside the test-split cohort's ``mimic-jpg:<root>``.
    """
    return load_mimic_jpg(root, split="train", frontal_only=frontal_only, reports_root=reports_root, name=name)


def _register() -> None:
    from . import register_adapter

    register_adapter("mimic-jpg", load_mimic_jpg)
    register_adapter("mimic-jpg-train", load_mimic_jpg_train)


_register()
