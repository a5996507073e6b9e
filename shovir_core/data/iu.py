"""IU X-ray (Open-i) radiology reports with the indexers' MeSH terms.

The Indiana University chest X-ray collection distributes each report as an XML
file holding the report sections (comparison, indication, findings, impression)
and the MeSH terms that human indexers assigned (``<MeSH><major>``). The terms
are an independent reference for report labellers: they were coded by people
reading the report, not produced by any of the labellers compared here.

The repository embeds a verbatim extract of the development set (one JSON line
per report, section texts and MeSH terms unchanged) in ``data/iu-reports/``;
:func:`extract_reports` rebuilds it from the original archive.

Licence: CC BY-NC-ND 4.0 (redistributed verbatim, with attribution).

References
----------
Demner-Fushman D., Kohli M. D., Rosenman M. B., et al. "Preparing a collection of
radiology examinations for distribution and retrieval." JAMIA 2016;23(2):304-310.
Open-i service of the U.S. National Library of Medicine, https://openi.nlm.nih.gov/.
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from .. import yaml_text

from .. import paths
from ..labels import CHEXPERT_CLASSES

__all__ = [
    "parse_report_xml", "extract_reports", "iu_reports_path", "load_iu_reports", "mesh_map",
    "mesh_reference", "report_text", "split_ids", "IU_CITATION", "IU_LICENSE", "MESH_MAP_FILE",
]

IU_CITATION = ('Demner-Fushman D, et al. "Preparing a collection of radiology examinations for '
               'distribution and retrieval." JAMIA 2016;23(2):304-310. Open-i, NLM.')
IU_LICENSE = "CC BY-NC-ND 4.0 (https://creativecommons.org/licenses/by-nc-nd/4.0/)"
MESH_MAP_FILE = "iu_mesh_chexpert.yaml"
_SECTIONS = ("COMPARISON", "INDICATION", "FINDINGS", "IMPRESSION")


def parse_report_xml(source: str | bytes | Path) -> dict:
    """Read one IU report XML (path, bytes or text) into a dict of verbatim fields.

    Returns
    -------
    dict
        ``id`` (IU X-ray id, int), ``uid``, ``comparison``, ``indication``,
        ``findings``, ``impression`` (verbatim text or None), ``mesh_major`` and
        ``mesh_automatic`` (lists of terms in file order), ``images`` (image ids).
    """
    if isinstance(source, Path):
        root = ET.parse(source).getroot()
    else:
        root = ET.fromstring(source)
    iu = root.find("IUXRId")
    uid = root.find("uId")
    if iu is None or uid is None:
        raise ValueError("not an IU X-ray report: no <IUXRId>/<uId> element")
    out: dict = {"id": int(iu.get("id")), "uid": uid.get("id")}
    texts = {el.get("Label"): el.text for el in root.iter("AbstractText")}
    for section in _SECTIONS:
        text = texts.get(section)
        out[section.lower()] = text if text is not None and text.strip() else None
    mesh = root.find("MeSH")
    out["mesh_major"] = [el.text for el in mesh.findall("major")] if mesh is not None else []
    out["mesh_automatic"] = [el.text for el in mesh.findall("automatic")] if mesh is not None else []
    out["images"] = [el.get("id") for el in root.findall("parentImage")]
    return out


def extract_reports(archive: str | Path, out: str | Path) -> int:
    """Write the verbatim JSON-lines extract of every report XML in ``archive`` (a .tgz).

    Returns the number of reports written. Lines are sorted by IU X-ray id.
    """
    rows = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".xml"):
                rows.append(parse_report_xml(tar.extractfile(member).read()))
    if not rows:
        raise ValueError(f"{archive}: no .xml reports found")
    rows.sort(key=lambda r: r["id"])
    buf = io.StringIO()
    for r in rows:
        buf.write(json.dumps(r, ensure_ascii=False) + "\n")
    Path(out).write_text(buf.getvalue(), encoding="utf-8")
    return len(rows)


def iu_reports_path() -> Path:
    """The embedded extract, ``data/iu-reports/iu_reports_dev.jsonl``."""
    return paths.data_root() / "iu-reports" / "iu_reports_dev.jsonl"


def load_iu_reports(path: str | Path | None = None) -> pd.DataFrame:
    """The IU reports as a DataFrame indexed by ``id`` (see :func:`parse_report_xml` for columns)."""
    p = Path(path) if path is not None else iu_reports_path()
    if not p.is_file():
        raise FileNotFoundError(f"IU report extract not found at {p}")
    df = pd.read_json(p, lines=True, dtype={"id": int})
    if not df["id"].is_unique:
        raise ValueError(f"{p}: duplicate report ids {df['id'][df['id'].duplicated()].tolist()[:5]}")
    return df.set_index("id").sort_index()


def report_text(reports: pd.DataFrame, *, sections: tuple[str, ...] = ("findings", "impression")) -> pd.Series:
    """The report text labellers read: the chosen sections joined by a space (empty if none)."""
    missing = [s for s in sections if s not in reports.columns]
    if missing:
        raise ValueError(f"reports lack section columns {missing}")
    parts = reports.loc[:, list(sections)].astype(object).where(reports.loc[:, list(sections)].notna(), "")
    return parts.apply(lambda row: " ".join(t.strip() for t in row if t.strip()), axis=1)


@lru_cache(maxsize=1)
def mesh_map() -> dict:
    """The MeSH -> CheXpert rules of ``resources/iu_mesh_chexpert.yaml`` (validated)."""
    raw = yaml_text.safe_load((paths.resources_root() / MESH_MAP_FILE).read_text(encoding="utf-8"))
    for cls, rule in raw["classes"].items():
        if cls not in CHEXPERT_CLASSES:
            raise ValueError(f"{MESH_MAP_FILE}: {cls!r} is not a CheXpert class")
        if set(rule) != {"positive", "ambiguous"}:
            raise ValueError(f"{MESH_MAP_FILE}: class {cls!r} needs exactly 'positive' and 'ambiguous'")
    return raw


def _matches(term: str, rule: str) -> bool:
    head, *quals = [t.strip() for t in term.split("/")]
    r_head, *r_quals = [t.strip() for t in rule.split("/")]
    return head == r_head and all(q in quals for q in r_quals)


def mesh_reference(reports: pd.DataFrame) -> pd.DataFrame:
    """Reference labels from the MeSH terms: 1 / 0 per evaluated class, NaN where excluded.

    Reports whose terms include a ``drop_reports_with`` heading ("No Indexing") are
    left out. Columns are the evaluated classes in CheXpert order.
    """
    rules = mesh_map()
    classes = [c for c in CHEXPERT_CLASSES if c in rules["classes"]]
    drop = set(rules.get("drop_reports_with", []))
    rows, index = [], []
    for rid, terms in reports["mesh_major"].items():
        terms = list(terms) if terms is not None else []
        if any(t.split("/")[0].strip() in drop for t in terms):
            continue
        row = []
        for cls in classes:
            rule = rules["classes"][cls]
            pos = any(_matches(t, r) for t in terms for r in rule["positive"])
            amb = any(_matches(t, r) for t in terms for r in rule["ambiguous"])
            row.append(np.nan if amb else float(pos))
        rows.append(row)
        index.append(rid)
    return pd.DataFrame(rows, index=pd.Index(index, name=reports.index.name), columns=classes)


def split_ids(ids, *, test_fraction: float = 0.5, salt: str = "iu-labeller-validation") -> pd.Series:
    """Deterministic dev/test assignment of report ids by a salted SHA-256 of the id.

    Stable under reordering and subsetting; the labeller's lexicon is tuned on
    ``dev`` reports only and ``test`` is held out.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    ids = list(ids)
    u = [int.from_bytes(hashlib.sha256(f"{salt}:{i}".encode()).digest()[:8], "big") / 2 ** 64 for i in ids]
    return pd.Series(np.where(np.array(u) < test_fraction, "test", "dev"), index=pd.Index(ids, name="id"),
                     name="split")
