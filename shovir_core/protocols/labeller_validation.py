"""The ``labeller-validation`` protocol: report labellers vs the IU X-ray indexers' MeSH terms.

One trial row per IU X-ray report with text: the report id, its dev/test split,
the verbatim report text and MeSH terms, the MeSH reference label per evaluated
class (``ref.<class>``: 1 / 0, NaN where the mapping excludes the report) and
every labeller's raw CheXpert codes (``<labeller>.<class>``: 1 / 0 / -1 / NaN).
The "Labeller validation" chapter scores the labellers from this record.

Spec keys (:data:`SPEC`): ``reports`` ("iu-dev": the embedded extract), ``sections``
(report sections the labellers read), ``labellers`` (registry names), ``test_fraction``
and ``split_salt`` (the deterministic dev/test split). The resolved spec carries
the SHA-256 of the report extract, of the mention lexicon and of the MeSH map,
so editing any of them makes a new record; ``execute`` refuses a spec whose
pinned hashes no longer match the files.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from .. import paths
from ..labeling import LABELLERS, label_reports, labeller_availability
from ..labeling.chexbert import LabellerUnavailable
from ..data.iu import (IU_CITATION, IU_LICENSE, MESH_MAP_FILE, iu_reports_path, load_iu_reports,
                           mesh_reference, report_text, split_ids)
from ..labeling.lexicon import LEXICON_FILE
from ..labels import CHEXPERT_CLASSES
from ..records import Run, RunWriter, load_run, spec_hash
from .spec import Field, SpecSchema, StaleSpecError

__all__ = ["SPEC", "resolve_spec", "execute", "PROTOCOL", "REPORT_SETS"]

PROTOCOL = "labeller-validation"
REPORT_SETS = {"iu-dev": iu_reports_path}
_SECTIONS = ("comparison", "indication", "findings", "impression")


def _registered(value: list) -> str | None:
    unknown = [n for n in value if n not in LABELLERS]
    return f"unknown labellers {unknown}; registered: {sorted(LABELLERS)}" if unknown else None


def _open_unit(value: float) -> str | None:
    return None if 0.0 < value < 1.0 else "must lie in (0, 1), both ends excluded"


SPEC = SpecSchema(PROTOCOL, [
    Field("reports", str, "iu-dev", choices=tuple(REPORT_SETS), doc="report set (iu-dev: the embedded extract)"),
    Field("sections", list, ["findings", "impression"], items=str, choices=_SECTIONS, min_items=1, unique=True,
          doc="report sections the labellers read"),
    Field("labellers", list, ["rules", "keyword"], items=str, min_items=1, unique=True, check=_registered,
          doc="labeller registry names (shovir_core.labeling.LABELLERS)"),
    Field("test_fraction", float, 0.5, check=_open_unit, doc="share of reports in the test split"),
    Field("split_salt", str, "iu-labeller-validation", doc="salt of the deterministic dev/test split"),
    # pinned by resolve_spec (a spec may carry them; a mismatch is an error)
    Field("reports_sha256", (str, type(None)), None, pin=True, doc="pinned hash of the report extract"),
    Field("lexicon_sha256", (str, type(None)), None, pin=True, doc="pinned hash of the mention lexicon"),
    Field("mesh_map_sha256", (str, type(None)), None, pin=True, doc="pinned hash of the MeSH -> CheXpert map"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`)."""


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pinned(reports: str) -> dict[str, tuple]:
    """Each pinned hash key with the file it hashes and that file's current hash."""
    res = paths.resources_root()
    files = {"reports_sha256": REPORT_SETS[reports](), "lexicon_sha256": res / LEXICON_FILE,
             "mesh_map_sha256": res / MESH_MAP_FILE}
    return {key: (path, _sha256(path)) for key, path in files.items()}


def resolve_spec(spec: dict) -> dict:
    """Fill the defaults, validate (:data:`SPEC`) and pin the content hashes of the data and the
    labeller resources (a pinned hash that no longer matches is an error)."""
    out = SPEC.resolve(spec)
    for key, (path, sha) in _pinned(out["reports"]).items():
        SPEC.pin(out, key, sha, what=f"{path.name} ({key})")
    return out


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Label every report with every labeller and store codes next to the MeSH reference.

    The protocol has no execution-only settings (``execution`` must be empty)."""
    SPEC.execution(execution)
    for key, (changed, sha) in _pinned(spec["reports"]).items():
        if sha != spec[key]:
            raise StaleSpecError(f"{PROTOCOL}: {changed} changed since the spec was resolved ({key})")
    path = REPORT_SETS[spec["reports"]]()
    for lab in spec["labellers"]:
        ok, reason = labeller_availability(lab)
        if not ok:
            raise LabellerUnavailable(f"{PROTOCOL}: labeller {lab!r} is unavailable here: {reason}")
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
