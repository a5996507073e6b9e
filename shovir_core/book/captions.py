"""Captions that say what ran: the data and the model(s) behind a table or figure, from its records.

Every table and figure of the book names the paper item it shows, the data and the model(s) (issue
30: "demo: NIH 64 px, ref-anchored"). The records' manifests hold both (``dataset.name``,
``model.id``), so :func:`what_ran` reads them from the runs a notebook passes to ``book.show``
and :func:`with_what_ran` appends them to the caption; a notebook need not repeat them.
"""
from __future__ import annotations

from collections.abc import Mapping

from .guard import runs_list

__all__ = ["DATASET_NAMES", "FIXTURES_DIR", "what_ran", "with_what_ran", "names_data_and_model", "PAPER_ONLY"]

DATASET_NAMES = {
    "demo": "demo: NIH boxes",
    "demo-bbox": "demo: NIH boxes",
    "demo-64px": "demo: NIH 64 px",
    "nih-bbox": "demo: NIH boxes",
    "nih-64px": "demo: NIH 64 px",
    "mimic-cxr": "MIMIC-CXR (credentialed)",
    "padchest-gr": "PadChest-GR (credentialed)",
    "iu-xray-dev": "demo: IU X-ray reports (embedded extract)",
}
"""Readable names of the datasets a record can name (the rest print as named, marked credentialed
where their manifest says so, or as public data: ``data: VQA-RAD``; a dataset read from the test
fixtures, whose images are invented, says so: ``data: SLAKE fixture (invented images)``)."""

FIXTURES_DIR = "data/fixtures"
"""Datasets read from under this folder are fixtures in a release's layout with invented images."""

PAPER_ONLY = "data: the paper's published numbers (no run)"
"""What a table of the paper's numbers alone (an audit's checks) shows."""

_MAX_MODELS = 4


def _model_of(manifest: Mapping) -> str | None:
    model = manifest.get("model")
    if isinstance(model, Mapping):
        model = model.get("id") or ("labellers: " + ", ".join(model["labellers"])
                                    if isinstance(model.get("labellers"), list) else None)
    if not model:
        model = (manifest.get("spec") or {}).get("model")
    return str(model) if model else None


def _data_of(manifest: Mapping) -> str | None:
    ds = manifest.get("dataset") or {}
    name = ds.get("name") if isinstance(ds, Mapping) else ds
    if not name:
        name = (manifest.get("spec") or {}).get("dataset")
    if not name:
        return None
    name = str(name)
    if name in DATASET_NAMES:
        return DATASET_NAMES[name]
    credentialed = isinstance(ds, Mapping) and ds.get("credentialed")
    if credentialed:
        return f"{name} (credentialed)"
    source = str((manifest.get("spec") or {}).get("dataset") or "")
    if FIXTURES_DIR in source.replace("\\", "/"):
        return f"data: {name} fixture (invented images)"
    return f"data: {name}"


def what_ran(runs) -> str:
    """``"demo: NIH 64 px; models: ref-anchored, tiny-vlm"``: the data and models of ``runs`` (records,
    or anything with a ``manifest`` mapping); ``""`` when the records name neither.

    >>> class R:
    ...     def __init__(self, d, m): self.manifest = {"dataset": {"name": d}, "model": {"id": m}}
    >>> what_ran([R("demo-64px", "ref-anchored"), R("demo-64px", "ref-anchored")])
    'demo: NIH 64 px, ref-anchored'
    >>> what_ran({"a": R("demo", "x"), "b": R("demo-64px", "y")})
    'demo: NIH boxes, NIH 64 px; models: x, y'
    >>> what_ran([R("VQA-RAD", "ref-vlm-vqarad"), R("SLAKE", "ref-image-reader")])
    'data: VQA-RAD, SLAKE; models: ref-vlm-vqarad, ref-image-reader'
    """
    data, models = [], []
    runs = runs_list(runs)
    manifests = [getattr(r, "manifest", None) or {} for r in runs]
    if manifests and all(m.get("protocol") == "audit" for m in manifests):  # the audit reads the papers only
        return PAPER_ONLY
    for manifest in manifests:
        d, m = _data_of(manifest), _model_of(manifest)
        if d and d not in data:
            data.append(d)
        if m and m not in models:
            models.append(m)
    if not data and not models:
        return ""
    for prefix in ("demo: ", "data: "):  # one prefix for the data of one kind
        same = [d for d in data if d.startswith(prefix)]
        if len(same) > 1:
            joined = prefix + ", ".join(d[len(prefix):] for d in same)
            data = [joined if d == same[0] else d for d in data if d == same[0] or d not in same]
    shown = models[:_MAX_MODELS] + ([f"{len(models) - _MAX_MODELS} more"] if len(models) > _MAX_MODELS else [])
    text = ", ".join(data)
    if shown:
        text += (", " if len(models) == 1 else "; models: ") + ", ".join(shown)
    return text.lstrip(", ;")


def with_what_ran(caption: str, runs, *, what: str | None = None) -> str:
    """``caption`` ending with what ran (``what``, or :func:`what_ran` of ``runs``) in brackets,
    unless the caption already says it or nothing is known.

    >>> with_what_ran("Table 2: flip rates.", [], what="demo: NIH 64 px, ref-anchored")
    'Table 2: flip rates. [demo: NIH 64 px, ref-anchored]'
    """
    ran = what if what is not None else what_ran(runs)
    caption = (caption or "").rstrip()
    if not ran or ran in caption:
        return caption
    return f"{caption} [{ran}]" if caption else f"[{ran}]"


def names_data_and_model(caption: str) -> bool:
    """Whether a caption says what ran: a bracketed data/model note, or the paper's own setting.

    >>> names_data_and_model("Flip rates [demo: NIH 64 px, ref-anchored]")
    True
    >>> names_data_and_model("Part 2 of 3")
    False
    """
    import re

    return bool(re.search(r"\[(demo: |data: |[^\]]*\(credentialed\))[^\]]*\]", caption or ""))
