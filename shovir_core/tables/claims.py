"""The claims index and the glossary: each claim of both papers with where this book checks it, how
strongly, and the models and abbreviations a reader meets (``resources/claims.yaml``, the model
registry :data:`shovir_core.models.registry.REGISTRY`)."""
from __future__ import annotations

from importlib import resources

import pandas as pd
from .. import yaml_text

from .. import paths
from .result import TableResult

__all__ = ["STRENGTHS", "load_claims", "claims_table", "models_table", "abbreviations_table"]

STRENGTHS = {
    "arithmetic": "paper arithmetic recomputed",
    "planted": "planted behaviour recovered",
    "scale": "shown for scale only",
    "none": "not checked in this build",
}
"""How strong the check behind a claim is, strongest first."""

_PAPERS = {"shovir": "ShoViR", "modalens": "ModaLens", "both": "both"}


def _data() -> dict:
    return yaml_text.safe_load(resources.files("shovir_core.resources").joinpath("claims.yaml").read_text("utf-8"))


def load_claims() -> list[dict]:
    """The claims of ``resources/claims.yaml``, validated: a known paper and strength, and chapters
    that are notebooks of this repository."""
    notebooks = {p.stem for p in paths.notebooks_root().glob("*.py")}
    claims = _data()["claims"]
    for c in claims:
        if c["paper"] not in _PAPERS or c["strength"] not in STRENGTHS:
            raise ValueError(f"claims.yaml: {c!r}: paper must be one of {sorted(_PAPERS)}, strength one of "
                             f"{sorted(STRENGTHS)}")
        unknown = [nb for nb in c["chapters"] if nb not in notebooks]
        if unknown:
            raise ValueError(f"claims.yaml: {c['claim'][:40]!r} names chapters that do not exist: {unknown}")
    return claims


def claims_table() -> TableResult:
    """One row per claim: paper, where it is made, the claim, the chapter(s) and the strength of the
    check; ``values`` count the claims per strength (``n_<strength>``) and in all (``n_claims``)."""
    rows = []
    for c in load_claims():
        for k, nb in enumerate(c["chapters"]):
            rows.append({"paper": _PAPERS[c["paper"]], "where": c["where"], "claim": c["claim"] if k == 0 else "",
                         "chapter": nb, "check": STRENGTHS[c["strength"]] if k == 0 else "",
                         "note": c.get("note", "") if k == 0 else ""})
    frame = pd.DataFrame(rows, columns=["paper", "where", "claim", "chapter", "check", "note"])
    claims = load_claims()
    values = {f"n_{s}": sum(c["strength"] == s for c in claims) for s in STRENGTHS}
    values["n_claims"] = len(claims)
    caption = ("Claims index: each claim of both abstracts and of each results section's summary, the chapter(s) "
               "that cover it and how strong the check is (paper arithmetic recomputed; planted behaviour of a "
               "reference model recovered; the paper's value shown beside a demo run for scale only; not checked).")
    return TableResult(frame=frame, values=values, caption=caption, labels={"where": "where in the paper"})


def models_table() -> TableResult:
    """Every registered model: name, kind (the papers' models, the demo's reference models, the tiny
    random-weight transformers), the paper that uses it, its weights and what it is."""
    from ..models.registry import REGISTRY

    kinds = {"reference": "reference model (demo; known behaviour)", "ref-vlm": "reference VLM (demo; trained here)",
             "tiny": "tiny random-weight transformer (pipeline test)", "hf": "paper model (Hugging Face)",
             "remote-code": "paper model (authors' code)"}
    rows = [{"model": name, "kind": kinds.get(spec.adapter, spec.adapter),
             "paper": spec.paper if spec.paper in ("ShoViR", "ModaLens") else "demo",
             "weights": spec.hf_id or "in this repository" if spec.adapter in ("reference", "ref-vlm") else
             (spec.hf_id or "random (no weights)"),
             "what it is": (spec.notes or "").split(";")[0]}
            for name, spec in REGISTRY.items()]
    frame = pd.DataFrame(rows, columns=["model", "kind", "paper", "weights", "what it is"])
    order = {"paper model (Hugging Face)": 0, "paper model (authors' code)": 0}
    frame = frame.sort_values(["kind", "model"], key=lambda s: s.map(lambda v: (order.get(v, 1), v))
                              if s.name == "kind" else s, kind="stable").reset_index(drop=True)
    return TableResult(frame=frame, values={"n_models": len(frame)},
                       caption="Glossary of models: the papers' models, the demo's reference models (whose behaviour "
                               "is known by construction) and the tiny random-weight transformers that test the "
                               "pipeline.")


def abbreviations_table() -> TableResult:
    """The abbreviations of ``resources/claims.yaml``."""
    frame = pd.DataFrame(_data()["abbreviations"], columns=["term", "meaning"])
    return TableResult(frame=frame, values={"n_terms": len(frame)}, caption="Glossary of abbreviations.")
