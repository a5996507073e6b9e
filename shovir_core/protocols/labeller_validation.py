"""The ``labeller-validation`` protocol: report labellers vs the IU X-ray indexers' MeSH terms.

One trial row per IU X-ray report with text: the report id, its dev/test split,
the verbatim report text and MeSH terms, the MeSH reference label per evaluated
class (``ref.<class>``: 1 / 0, NaN where the mapping excludes the report) and
every labeller's raw CheXpert codes (``<labeller>.<class>``: 1 / 0 / -1 / NaN).
The "Labeller validation" chapter scores the labellers from this record.

Spec keys: ``reports`` ("iu-dev": the embedded extract), ``sections`` (report
sections the labellers read), ``labellers`` (registry names), ``test_fraction``
and ``split_salt`` (the deterministic dev/test split). The resolved spec carries
the SHA-256 of the report extract, of the mention lexicon and of the MeSH map,
so editing any of them makes a new record.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from .. import paths
from ..labeling import LABELLERS, label_reports, labeller_availability
from ..labeling.iu import (IU_CITATION, IU_LICENSE, MESH_MAP_FILE, iu_reports_path, load_iu_reports,
                           mesh_reference, report_text, split_ids)
from ..labeling.lexicon import LEXICON_FILE
from ..labels import CHEXPERT_CLASSES
from ..records import Run, RunWriter, load_run, spec_hash

__all__ = ["resolve_spec", "execute", "PROTOCOL", "REPORT_SETS"]

PROTOCOL = "labeller-validation"
REPORT_SETS = {"iu-dev": iu_reports_path}
_KEYS = {"reports", "sections", "labellers", "test_fraction", "split_salt"}
_SECTIONS = ("comparison", "indication", "findings", "impression")


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_spec(spec: dict) -> dict:
    """Fill the defaults and pin the content hashes of the data and the labeller resources."""
    unknown = set(spec) - _KEYS
    if unknown:
        raise ValueError(f"{PROTOCOL}: unknown spec keys {sorted(unknown)} (allowed: {sorted(_KEYS)})")
    reports = spec.get("reports", "iu-dev")
    if reports not in REPORT_SETS:
        raise ValueError(f"{PROTOCOL}: unknown report set {reports!r}; known: {sorted(REPORT_SETS)}")
    sections = list(spec.get("sections", ["findings", "impression"]))
    bad = [s for s in sections if s not in _SECTIONS]
    if bad or not sections:
        raise ValueError(f"{PROTOCOL}: sections must be a non-empty subset of {_SECTIONS}; got {sections}")
    labellers = list(spec.get("labellers", ["rules", "keyword"]))
    unknown_lab = [n for n in labellers if n not in LABELLERS]
    if unknown_lab or not labellers:
        raise ValueError(f"{PROTOCOL}: unknown labellers {unknown_lab}; registered: {sorted(LABELLERS)}")
    test_fraction = float(spec.get("test_fraction", 0.5))
    if not 0 < test_fraction < 1:
        raise ValueError(f"{PROTOCOL}: test_fraction must lie in (0, 1), got {test_fraction}")
    res = paths.resources_root()
    return {
        "reports": reports, "sections": sections, "labellers": labellers,
        "test_fraction": test_fraction, "split_salt": str(spec.get("split_salt", "iu-labeller-validation")),
        "reports_sha256": _sha256(REPORT_SETS[reports]()),
        "lexicon_sha256": _sha256(res / LEXICON_FILE),
        "mesh_map_sha256": _sha256(res / MESH_MAP_FILE),
    }


def execute(name: str, spec: dict, *, progress: bool = True) -> Run:
    """Label every report with every labeller and store codes next to the MeSH reference."""
    path = REPORT_SETS[spec["reports"]]()
    if _sha256(path) != spec["reports_sha256"]:
        raise RuntimeError(f"{PROTOCOL}: {path} changed after the spec was resolved")
    for lab in spec["labellers"]:
        ok, reason = labeller_availability(lab)
        if not ok:
            raise RuntimeError(f"{PROTOCOL}: labeller {lab!r} is unavailable here: {reason}")
    reports = load_iu_reports(path)
    n_extract = len(reports)
    text = report_text(reports, sections=tuple(spec["sections"]))
    reports = reports[text.str.len() > 0]
    ref = mesh_reference(reports)
    text = text.loc[ref.index]
    split = split_ids(ref.index, test_fraction=spec["test_fraction"], salt=spec["split_salt"])
    codes = {lab: label_reports(text, labeller=lab) for lab in spec["labellers"]}
    rows = []
    for rid in ref.index:
        row = {"trial_id": f"iu-{rid}", "report_id": int(rid), "split": split[rid], "text": text[rid],
               "mesh_major": json.dumps(list(reports.loc[rid, "mesh_major"]))}
        row.update({f"ref.{c}": float(ref.loc[rid, c]) for c in ref.columns})
        for lab, df in codes.items():
            row.update({f"{lab}.{c}": float(df.loc[rid, c]) for c in CHEXPERT_CLASSES})
        rows.append(row)
    dataset = {"name": "iu-xray-" + spec["reports"].removeprefix("iu-"), "sha256": spec["reports_sha256"],
               "path": str(path.relative_to(paths.repo_root())), "n_reports": int(n_extract),
               "license": IU_LICENSE, "citation": IU_CITATION, "credentialed": False}
    with RunWriter(PROTOCOL, name, spec, dataset=dataset, model={"labellers": spec["labellers"]}) as writer:
        writer.append(rows)
        writer.complete(n_reports=len(rows), n_dev=int((split == "dev").sum()),
                        n_test=int((split == "test").sum()),
                        n_ref_positive=int(np.nansum(ref.to_numpy())))
    return load_run(PROTOCOL, name, spec_hash(spec))
