"""The ``modalens`` protocol: image swap with and without the report (ModaLens §2-§3).

One record per (dataset, model, arm). An *arm* fixes the report condition (present / absent), the
block order (image first / text first), the answer instruction and whether the image is shown.
Every trial -- a (case, question) pair -- is run on the case's own image ``c`` and on its
substitute ``d`` with everything else identical, so flips are paired; one row per trial holds the
readouts of both sides (columns ``*_c`` and ``*_d``).

Cohort
    Frontal images, one source image per study (the smallest image id among the study's frontal
    images). A case is a source image plus the substitute drawn by
    :func:`shovir_core.perturb.sample_substitutes` (three tiers, SSIM rejection) among the same
    one-image-per-study pool; cases without any candidate are dropped and counted.
Questions
    13 finding questions from a fixed template per finding plus the composite "any acute
    cardiopulmonary finding" question, scored against any-of-13 (:data:`TEMPLATES`). Designs
    (:data:`DESIGNS`): ``all14``; ``f13`` (no composite); ``one_q`` (the case's primary positive
    finding -- the first positive of the 13 in CheXbert order under the primary policy -- else the
    composite with target no); ``six`` (the findings whose source yes-rate lies in
    ``six_range``, fixed in the resolved spec before any model runs).
Reports
    The source study's report, fixed on both sides. Datasets without report text (the 64-px NIH
    demo) use :func:`shovir_core.data.template_reports.template_report` of the study's labels
    (``reports: template``); the record says which. By default the template states every negative
    code and draws its phrasing per study (``template_negatives: all``, ``template_wording:
    varied``), as real reports state their negatives and differ from study to study; the fixed
    routine-negative template (``routine``, ``fixed``) is the one ``ref-vlm`` was trained on.
Prompt variants
    ``template`` (``alt``: App. L), ``order`` (text first: App. H), ``instruction`` (``no_yes``,
    ``yes_no_uncertain``: App. M), ``framing`` (a sentence before the report, App. D) and
    ``text_control`` (the report rewritten, Table 18: :mod:`shovir_core.data.text_controls`, applied
    per trial by :func:`trial_reports`). A section control keeps only the cases whose report has
    both a FINDINGS and an IMPRESSION section; the others are counted in
    ``counts["n_text_control_excluded"]`` and have no trial in the record.
Labels
    Per study, under every policy of :data:`shovir_core.labels.POLICIES`: ``target_c__<policy>``,
    ``target_d__<policy>`` and ``label_changed__<policy>``; the unsuffixed columns use
    ``primary_policy``. Raw codes: ``code_c``/``code_d`` (NaN for the composite) and the 14-code
    vectors ``labels_c``/``labels_d`` (JSON).
Readouts per side
    Every key of :data:`shovir_core.models.protocol.SCORE_KEYS` (lowercase logits and readout,
    token-family logits and readout, full-vocabulary log-probabilities, top-1 token, every family
    token's logit as JSON, the generated answer, its parse and compliance), plus ``input_hash``: the
    inference-cache key, a SHA-256 of the model identity and the exact model input.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import mimic_jpg as _mimic_jpg  # noqa: F401  (registers the "mimic-jpg" adapter)
from ..data.template_reports import template_fingerprint, template_reports
from ..vocab import COMPOSITE, DESIGNS, ORDERS, REPORT_CONDITIONS
from ..labels import CHEXPERT_CLASSES, FINDINGS_13, POLICIES, apply_policy
from ..records import Run, RunWriter
from .datasets import load_dataset
from . import shards
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = [
    "PROTOCOL", "DESIGNS", "TEMPLATES", "COMPOSITE", "REPORT_CONDITIONS", "DEFAULTS", "SPEC", "resolve_spec",
    "execute", "question_text", "question_id", "build_cases", "case_labels", "policy_targets",
    "primary_finding", "prespecified_findings", "select_questions", "arm_label", "trial_reports", "prefill_arms",
    "SIX_RANGE", "SIX_RANGE_BY_DATASET", "six_range",
]

SIX_RANGE: tuple[float, float] = (0.2, 0.8)
"""The paper's prespecified-six rule (ModaLens App. F, Table 13): the findings whose source yes-rate
lies in [20 %, 80 %], fixed from the labels before any model output exists."""

SIX_RANGE_BY_DATASET: dict[str, tuple[float, float]] = {"demo-64px": (0.1, 0.8)}
"""Datasets on which the paper's window selects no finding, and the window used there instead: on
the 64-px NIH demo cohort no finding reaches a 20 % yes-rate, so the lower bound is 10 % (fixed
before the models ran)."""


def six_range(dataset: str) -> tuple[float, float]:
    """The six design's yes-rate window for ``dataset``: :data:`SIX_RANGE`, or the dataset's entry of
    :data:`SIX_RANGE_BY_DATASET`. Every chapter that selects the six questions takes it from here."""
    return tuple(SIX_RANGE_BY_DATASET.get(str(dataset), SIX_RANGE))

PROTOCOL = "modalens"

TEMPLATES: dict[str, dict[str, str]] = {
    "default": {"finding": "Does this chest X-ray show {finding}?",
                "composite": "Does this chest X-ray show any acute cardiopulmonary finding?"},
    "alt": {"finding": "Is {finding} present on this chest X-ray?",
            "composite": "Is any acute cardiopulmonary finding present on this chest X-ray?"},
}
"""Question templates (ModaLens §2, App. Table 8; the second template: App. L): the finding is the CheXpert class
name in lower case."""

def _spec_schema() -> SpecSchema:
    from ..data.text_controls import TEXT_CONTROLS
    from ..models.prompts import FRAMINGS, INSTRUCTIONS

    def _six_range(v):
        if len(v) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            return "must be [lo, hi], two numbers"
        return None if 0.0 <= v[0] <= v[1] <= 1.0 else "must satisfy 0 <= lo <= hi <= 1"

    return SpecSchema(PROTOCOL, [
        Field("dataset", str, "demo-64px", doc="dataset name or adapter:path (mimic-jpg:$SHOVIR_MIMIC_JPG)"),
        Field("model", str, "ref-anchored@0.5", doc="registry name (shovir_core.models.list_models())"),
        Field("design", str, "all14", choices=DESIGNS),
        Field("template", str, "default", choices=tuple(TEMPLATES)),
        Field("report", str, "present", choices=REPORT_CONDITIONS),
        Field("order", str, "image_first", choices=ORDERS),
        Field("instruction", str, "none", choices=tuple(INSTRUCTIONS)),
        Field("image", bool, True, doc="show the image (false: the image-absent ablation arm)"),
        Field("answer_tokens", int, 8, range=(1, 256), doc="greedy tokens of the generated answer"),
        Field("reports", str, "auto", choices=("auto", "dataset", "template")),
        Field("template_negatives", str, "all", choices=("routine", "all", "none"),
              doc="negative codes the template reports state (reports: template)"),
        Field("template_wording", str, "varied", choices=("fixed", "varied"),
              doc="template-report phrasing: one per sentence kind, or drawn per study (reports: template)"),
        Field("substitute_seed", int, 0, range=(0, None)),
        Field("ssim_size", int, 896, range=(8, None), doc="side of the greyscale images SSIM compares"),
        Field("ssim_threshold", float, 0.9, range=(0.0, 1.0)),
        Field("n_patients", (int, type(None)), None, range=(1, None), doc="patient subset (null: all)"),
        Field("subset_seed", int, 0, range=(0, None)),
        Field("primary_policy", str, "u-negative", choices=tuple(POLICIES)),
        Field("six_range", list, list(SIX_RANGE), check=_six_range,
              doc="source yes-rate range of the six design (default: the paper's, SIX_RANGE)"),
        Field("framing", str, "none", choices=("none", *FRAMINGS),
              doc="sentence before the report (App. D: historical, warning); needs report: present"),
        Field("text_control", str, "none", choices=TEXT_CONTROLS,
              doc="report text-content control (Table 18, shovir_core.data.text_controls); needs report: present"),
        Field("text_control_seed", int, 0, range=(0, None),
              doc="seed of the neutral-prose, boilerplate and answer-sentence draws"),
        Field("replicate", int, 0, range=(0, None),
              doc="re-run index of an otherwise identical arm (0: the arm itself): a replicate is its own record "
                  "and bypasses the inference cache of the others (ModaLens Table 18's full-report re-run)"),
        # pinned by resolve_spec (a spec may carry them; a mismatch is an error)
        Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
        Field("model_fingerprint", (dict, type(None)), None, pin=True, doc="pinned model identity"),
        Field("six_findings", (list, type(None)), None, choices=FINDINGS_13, doc="pinned six-design findings"),
        Field("template_id", (str, type(None)), None, pin=True, doc="pinned template-report fingerprint"),
        # execution-only: never part of the record's identity
        Field("batch_cases", int, 64, range=(1, None), execution=True, doc="cases per record part"),
        Field("answer_batch_size", (int, str, type(None)), None, execution=True, check=_check_answer_batch,
              doc="requests per scoring batch of a transformer: null (the model's default), 'auto' "
                  "(from free GPU memory) or an integer"),
    ])


def _check_answer_batch(value) -> str | None:
    if value is None or value == "auto" or (isinstance(value, int) and value >= 1):
        return None
    return "use null, 'auto' or an integer >= 1"


def _set_answer_batch(model, setting) -> None:
    """Apply the spec's execution-only ``answer_batch_size`` to a transformer behind ``model``'s cache."""
    inner = getattr(model, "model", model)
    if setting is not None and hasattr(inner, "answer_batch_size"):
        inner.answer_batch_size = setting


SPEC = _spec_schema()
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`): every key, its type and default."""
DEFAULTS: dict = {k: v for k, v in SPEC.defaults.items()
                  if k not in ("dataset_sha256", "model_fingerprint", "six_findings", "template_id")}
"""Every user-facing identity key and its default (the paper's settings where it states them)."""


# --------------------------------------------------------------------------- questions
def question_id(finding: str) -> str:
    """Stable id of a question: the finding in snake case, or ``composite``.

    >>> question_id("Pleural Effusion")
    'pleural_effusion'
    """
    if finding == COMPOSITE:
        return COMPOSITE
    if finding not in FINDINGS_13:
        raise SpecError(f"unknown ModaLens finding {finding!r}; use one of {list(FINDINGS_13)} or {COMPOSITE!r}")
    return finding.lower().replace(" ", "_")


def question_text(finding: str, *, template: str = "default") -> str:
    """The question asked about ``finding`` (or the composite) under a template.

    >>> question_text("Pleural Effusion")
    'Does this chest X-ray show pleural effusion?'
    >>> question_text(COMPOSITE, template="alt")
    'Is any acute cardiopulmonary finding present on this chest X-ray?'
    """
    if template not in TEMPLATES:
        raise SpecError(f"unknown question template {template!r}; use one of {sorted(TEMPLATES)}")
    question_id(finding)
    t = TEMPLATES[template]
    return t["composite"] if finding == COMPOSITE else t["finding"].format(finding=finding.lower())


# --------------------------------------------------------------------------- labels
def policy_targets(codes: pd.DataFrame, policy: str) -> pd.DataFrame:
    """Binary targets of the 13 findings plus ``composite`` (any of the 13) under ``policy``.

    A composite target is 1 when any finding is positive, NaN when none is positive but some is
    excluded by the policy, else 0. ``No Finding`` never enters.
    """
    mapped = apply_policy(codes[list(FINDINGS_13)].astype(float), policy)
    any_pos = (mapped == 1.0).any(axis=1)
    any_nan = mapped.isna().any(axis=1)
    mapped[COMPOSITE] = np.where(any_pos, 1.0, np.where(any_nan, np.nan, 0.0))
    return mapped


def case_labels(cases: pd.DataFrame, labels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """CheXpert codes of each case's source and substitute image (index = case id)."""
    src = labels.reindex(cases["image_id"]).set_axis(pd.Index(cases["case_id"], name="case_id"))
    sub = labels.reindex(cases["sub_image_id"]).set_axis(pd.Index(cases["case_id"], name="case_id"))
    return src[list(CHEXPERT_CLASSES)].astype(float), sub[list(CHEXPERT_CLASSES)].astype(float)


def primary_finding(targets: pd.DataFrame) -> pd.Series:
    """Per case, the first positive of the 13 findings in CheXbert order, else ``composite``.

    ``targets`` are binary source targets (:func:`policy_targets`).
    """
    pos = targets[list(FINDINGS_13)].to_numpy(dtype=float) == 1.0
    first = np.where(pos.any(axis=1), pos.argmax(axis=1), -1)
    return pd.Series([FINDINGS_13[i] if i >= 0 else COMPOSITE for i in first], index=targets.index,
                     name="primary_finding")


def prespecified_findings(targets: pd.DataFrame, *, lo: float = SIX_RANGE[0], hi: float = SIX_RANGE[1]) -> list[str]:
    """Findings whose source yes-rate lies in ``[lo, hi]`` (the prespecified-six rule, default
    :data:`SIX_RANGE`), CheXbert order."""
    if not 0.0 <= lo <= hi <= 1.0:
        raise SpecError(f"six_range must satisfy 0 <= lo <= hi <= 1, got [{lo}, {hi}]")
    rates = targets[list(FINDINGS_13)].mean(axis=0, skipna=True)
    return [f for f in FINDINGS_13 if lo <= rates[f] <= hi]


def select_questions(targets: pd.DataFrame, *, design: str, six: list[str] | None = None) -> list[tuple[str, str]]:
    """(case id, finding) pairs of a design, in case then CheXbert order."""
    if design not in DESIGNS:
        raise SpecError(f"unknown design {design!r}; use one of {DESIGNS}")
    if design == "one_q":
        prim = primary_finding(targets)
        return [(c, prim[c]) for c in targets.index]
    findings = {"all14": [*FINDINGS_13, COMPOSITE], "f13": list(FINDINGS_13)}.get(design)
    if design == "six":
        if six is None:
            raise SpecError("design 'six' needs the prespecified findings (resolve_spec fills them)")
        findings = list(six)
    return [(c, f) for c in targets.index for f in findings]


# --------------------------------------------------------------------------- cohort
def _expand(source: str) -> str:
    return os.path.expandvars(source)


def _dataset(source: str):
    """The dataset of ``source``, reused in-process only while none of its files changed."""
    return load_dataset(_expand(source))


_PAIRS: OrderedDict[tuple, pd.DataFrame] = OrderedDict()
_PAIRS_MAX = 8


def _pairs(source: str, sha: str, seed: int, ssim_size: int, ssim_threshold: float,
           patients: frozenset | None = None) -> pd.DataFrame:
    """Substitute pairs of the cohort (a copy), cached by the dataset's content hash and the settings;
    ``patients`` restricts the dataset to those patients before any substitute is drawn."""
    from ..perturb import sample_substitutes
    from ..perturb.swap import cohort_from_dataset

    ds = _dataset(source)
    if ds.manifest_hash != sha:
        raise StaleSpecError(f"modalens: dataset {source!r} changed since the spec was resolved "
                           f"(sha256 {ds.manifest_hash[:12]}..., the spec pins {sha[:12]}...)")
    key = (sha, seed, ssim_size, ssim_threshold, patients)
    if key not in _PAIRS:
        def draw() -> pd.DataFrame:
            pool = _source_pool(ds)
            if patients is not None:
                of = dict(zip(ds.images["image_id"], ds.images["patient_id"].astype(str)))
                pool = [i for i in pool if of[i] in patients]
            cohort = cohort_from_dataset(ds)
            cohort = cohort[cohort["image_id"].isin(pool)].reset_index(drop=True)
            # the pool is frontal by construction (blank-view frontal MIMIC images included)
            views = tuple(cohort["view"].astype(str).unique())
            return sample_substitutes(cohort, seed=seed, sources=pool, ssim_size=ssim_size,
                                      ssim_threshold=ssim_threshold, frontal_views=views, load_image=ds.load_image)

        _PAIRS[key] = _pairs_on_disk(key, draw)
        while len(_PAIRS) > _PAIRS_MAX:
            _PAIRS.popitem(last=False)
    _PAIRS.move_to_end(key)
    return _PAIRS[key].copy()


def _pairs_on_disk(key: tuple, draw) -> pd.DataFrame:
    """The substitute pairs of ``key``, drawn once for every process sharing the runs root.

    At full scale the draw compares candidates by SSIM at 896 px for every case, and each shard of a
    sharded record (and each chapter's process) drew the whole cohort's pairs again. The pairs are kept in
    ``<runs root>/.cache/substitute-pairs/<hash>.parquet``, the hash over ``key`` (the dataset's content
    hash, the seed, SSIM size and threshold, the patients) and the bytes of the code that draws them
    (``perturb/swap.py``, this module), so a code change draws again; the first process draws under a
    lock while the others wait and then read. The file is sealed like an inference-cache entry: its
    SHA-256 is written beside it (``<hash>.sha256``) before it is moved into place, and a file whose bytes
    no longer match (edited, truncated, or left without its seal by a killed process) is set aside
    (``.bad``) with a warning and drawn again.
    """
    from .. import paths
    from ..perturb import swap
    from ..records.files import locked, make_temp_file

    code = hashlib.sha256()
    for source in (Path(swap.__file__), Path(__file__)):
        code.update(source.read_bytes())
    ident = json.dumps([list(key[:4]), sorted(key[4]) if key[4] is not None else None, code.hexdigest()])
    folder = paths.runs_root() / ".cache" / "substitute-pairs"
    path = folder / f"{hashlib.sha256(ident.encode()).hexdigest()[:24]}.parquet"
    seal = path.with_suffix(".sha256")
    with locked(folder / f".{path.stem}.lock"):
        if path.is_file():
            want = seal.read_text().strip() if seal.is_file() else None
            data = path.read_bytes()  # read once: checked, then parsed
            if want == hashlib.sha256(data).hexdigest():
                return pd.read_parquet(io.BytesIO(data))
            warnings.warn(f"substitute pairs {path} do not match their seal ({'missing' if want is None else 'differs'}): "
                          "set aside as .bad and drawn again", RuntimeWarning, stacklevel=2)
            os.replace(path, path.with_suffix(".bad"))
        pairs = draw()
        fd, tmp = make_temp_file(path)
        os.close(fd)
        try:
            pairs.to_parquet(tmp, index=False)
            seal.write_text(hashlib.sha256(Path(tmp).read_bytes()).hexdigest() + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return pd.read_parquet(path)  # what every other process reads: the same frame, dtypes included


def _source_pool(ds) -> list[str]:
    """One frontal image per study (smallest image id)."""
    from ..perturb.swap import FRONTAL_VIEWS

    img = ds.images
    frontal = img[img["view"].astype(str).str.upper().isin(FRONTAL_VIEWS)
                  | img.get("view_blank", pd.Series(False, index=img.index)).astype(bool)]
    return sorted(frontal.sort_values("image_id").groupby("study_id", sort=True)["image_id"].first())


def build_cases(spec: dict, *, patients=None) -> tuple[pd.DataFrame, dict]:
    """The cases of a resolved spec (one row per case) and the cohort accounting counts.

    ``patients`` (ids) restricts the dataset to those patients before substitutes are drawn (the
    cross-patient tier then draws among them): the probe cohort of a large pool (ModaLens App. N.3)
    pairs only the patients it drew instead of every study of the pool."""
    ds = _dataset(spec["dataset"])
    pairs = _pairs(spec["dataset"], spec["dataset_sha256"], int(spec["substitute_seed"]),
                   int(spec["ssim_size"]), float(spec["ssim_threshold"]),
                   None if patients is None else frozenset(str(p) for p in patients))
    img = ds.images.set_index("image_id")
    counts = {
        "n_images_dataset": int(len(img)),
        "n_studies_dataset": int(img["study_id"].nunique()),
        "n_patients_dataset": int(img["patient_id"].nunique()),
        "n_source_studies": int(len(pairs)),
        "n_no_substitute": int((pairs["tier"] == 0).sum()),
        "n_ssim_rejected": int(pairs["n_rejected_ssim"].sum()),
    }
    cases = pairs[pairs["tier"] > 0].copy()
    cases.insert(0, "case_id", cases["image_id"])
    counts["n_cases_cohort"] = int(len(cases))
    counts["n_patients_cohort"] = int(cases["patient_id"].nunique())
    if spec["n_patients"] is not None:
        patients = np.array(sorted(cases["patient_id"].unique()))
        k = int(spec["n_patients"])
        if not 1 <= k <= len(patients):
            raise SpecError(f"modalens: n_patients = {k} but the cohort has {len(patients)} patients")
        rng = np.random.default_rng(int(spec["subset_seed"]))
        keep = set(rng.choice(patients, size=k, replace=False).tolist())
        cases = cases[cases["patient_id"].isin(keep)]
    for extra in ("study_datetime", "view_blank", "follow_up"):
        if extra in img.columns:
            cases[f"{extra}_c"] = img.loc[cases["image_id"], extra].to_numpy()
            cases[f"{extra}_d"] = img.loc[cases["sub_image_id"], extra].to_numpy()
    counts.update({
        "n_cases": int(len(cases)), "n_patients": int(cases["patient_id"].nunique()),
        "n_patients_multi_study": int((cases.groupby("patient_id")["study_id"].nunique() >= 2).sum()),
        **{f"n_tier{t}": int((cases["tier"] == t).sum()) for t in (1, 2, 3)},
        "n_same_patient": int((cases["pair_type"] == "same-patient").sum()),
        "n_cross_patient": int((cases["pair_type"] == "cross-patient").sum()),
    })
    return cases.reset_index(drop=True), counts


def _reports(spec: dict, cases: pd.DataFrame) -> pd.Series:
    """Report text of each case's source study (index = case id)."""
    ds = _dataset(spec["dataset"])
    if spec["reports"] == "dataset":
        text = ds.reports["text"]
        missing = sorted(set(cases["study_id"]) - set(text.index.astype(str)))
        if missing:
            raise SpecError(f"modalens: study {missing[0]!r} of dataset {spec['dataset']!r} has no report")
        text.index = text.index.astype(str)
        return pd.Series(text.loc[cases["study_id"]].to_numpy(), index=cases["case_id"])
    labels = ds.labels.reindex(cases["image_id"])
    reps = template_reports(labels, negatives=spec["template_negatives"], wording=spec["template_wording"],
                            keys=cases["study_id"].astype(str).tolist())
    return pd.Series(reps["text"].to_numpy(), index=cases["case_id"])


# --------------------------------------------------------------------------- spec
def arm_label(spec: dict) -> str:
    """Short label of an arm, e.g. ``P/image_first/none/image`` (``+framing=warning`` and the like
    follow for a template, framing or text control other than the default)."""
    label = "/".join([{"present": "P", "absent": "A"}[spec["report"]], spec["order"], spec["instruction"],
                      "image" if spec["image"] else "no-image"])
    for key, default in (("template", "default"), ("framing", "none"), ("text_control", "none")):
        if spec.get(key, default) != default:
            label += f"+{key}={spec[key]}"
    return label


def resolve_spec(spec: dict) -> dict:
    """Fill every default, validate (:data:`SPEC`), and pin the dataset hash, the model fingerprint
    and (for ``six``) the prespecified findings. Execution-only keys are dropped."""
    out = SPEC.resolve(spec)
    if out["replicate"] == 0:  # absent on the arm itself, so adding the key changed no record's identity
        out.pop("replicate")
    lo, hi = out["six_range"] = [float(v) for v in out["six_range"]]
    for key in ("framing", "text_control"):
        if out[key] != "none" and out["report"] != "present":
            raise SpecError(f"modalens: {key} = {out[key]!r} rewrites the report and needs report: present "
                             f"(got report: {out['report']!r})")
    ds = _dataset(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    from ..models import model_fingerprint

    # the model's identity (parameters and the code that builds them, or the pinned checkpoint) is
    # part of the record's identity: a retrained reference model makes a new record
    fingerprint = model_fingerprint(out["model"])
    SPEC.pin(out, "model_fingerprint", fingerprint, what=f"model {out['model']!r}")
    if out["reports"] == "auto":
        out["reports"] = "dataset" if ds.reports is not None else "template"
    elif out["reports"] == "dataset" and ds.reports is None:
        raise SpecError(f"modalens: dataset {out['dataset']!r} has no report text; use reports: template")
    if out["reports"] == "template":
        SPEC.pin(out, "template_id", template_fingerprint(negatives=out["template_negatives"],
                                                          wording=out["template_wording"]),
                 what="the template-report writer")
    else:
        out.pop("template_id", None)
    if out["design"] == "six":
        if out.get("six_findings") is not None:
            out["six_findings"] = [f for f in FINDINGS_13 if f in out["six_findings"]]
        else:
            # the rule is applied to the full cohort's source labels, before any model output exists
            src = ds.labels.reindex(_source_pool(ds))[list(CHEXPERT_CLASSES)].astype(float)
            out["six_findings"] = prespecified_findings(policy_targets(src, out["primary_policy"]), lo=lo, hi=hi)
        if not out["six_findings"]:
            raise SpecError(f"modalens: no finding has a source yes-rate in [{lo}, {hi}] on {out['dataset']!r}")
    else:
        out.pop("six_findings", None)
    return out


# --------------------------------------------------------------------------- execution
def _sha(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _codes_json(codes: pd.DataFrame) -> list[str]:
    """Each row's codes as JSON (``{class: code or null}``, in column order)."""
    columns = [str(c) for c in codes.columns]
    return [json.dumps(dict(zip(columns, [None if v != v else v for v in row])))
            for row in codes.to_numpy(dtype=float).tolist()]


def _side_columns(res: dict, side: str) -> dict:
    out = {}
    for key, value in res.items():
        if key == "token_logits":
            value = json.dumps(value, sort_keys=True)
        out[f"{key}_{side}"] = value
    return out


def _trial_frame(spec: dict, cases: pd.DataFrame, reports: pd.Series) -> pd.DataFrame:
    """Every trial's ids, pair fields and labels (no model output yet), one row per trial."""
    ds = _dataset(spec["dataset"])
    src, sub = case_labels(cases, ds.labels)
    targets = {p: (policy_targets(src, p), policy_targets(sub, p)) for p in POLICIES}
    questions = select_questions(targets[spec["primary_policy"]][0], design=spec["design"],
                                 six=spec.get("six_findings"))
    q = pd.DataFrame(questions, columns=["case_id", "finding"])
    finding = [f for _, f in questions]  # a plain list: iterating an Arrow-backed column goes element by element
    q["question_id"] = q["finding"].map(question_id)
    c = cases.set_index("case_id")
    df = pd.DataFrame({
        "trial_id": q["case_id"] + ":" + q["question_id"], "case_id": q["case_id"], "design": spec["design"],
        "question_id": q["question_id"], "finding": q["finding"], "is_composite": q["finding"] == COMPOSITE,
        "template_id": spec["template"],
        "question": q["finding"].map({f: question_text(f, template=spec["template"]) for f in set(finding)}),
    })
    take = {"patient_id": "patient_id", "study_id": "study_id", "image_id": "image_id",
            "sub_patient_id": "sub_patient_id", "sub_study_id": "sub_study_id", "sub_image_id": "sub_image_id",
            "view_c": "view", "view_d": "sub_view", "pair_type": "pair_type", "tier": "tier",
            "tier_name": "tier_name", "n_candidates": "n_candidates", "n_rejected_ssim": "n_rejected_ssim",
            "ssim": "ssim"}
    for extra in ("study_datetime", "view_blank", "follow_up"):
        if f"{extra}_c" in c.columns:
            take.update({f"{extra}_c": f"{extra}_c", f"{extra}_d": f"{extra}_d"})
    for out_col, case_col in take.items():
        df[out_col] = c[case_col].reindex(q["case_id"]).to_numpy()
    df["substitute_seed"] = int(spec["substitute_seed"])
    row = src.index.get_indexer(q["case_id"])
    findings = list(CHEXPERT_CLASSES)
    col = np.array([findings.index(f) if f != COMPOSITE else -1 for f in finding], dtype=int)
    for side, codes in (("c", src), ("d", sub)):
        arr = codes.to_numpy(dtype=float)
        df[f"code_{side}"] = np.where(col >= 0, arr[row, np.maximum(col, 0)], np.nan)
        js = _codes_json(codes)
        df[f"labels_{side}"] = [js[i] for i in row]
    df["report_condition"], df["order"] = spec["report"], spec["order"]
    df["instruction"], df["image_included"] = spec["instruction"], bool(spec["image"])
    df["report_source"] = spec["reports"]
    df["framing"], df["text_control"] = spec.get("framing", "none"), spec.get("text_control", "none")
    for p, (tc, td) in targets.items():
        cols = list(tc.columns)
        tcol = np.array([cols.index(f) for f in finding], dtype=int)
        a = tc.to_numpy(dtype=float)[row, tcol]
        b = td.to_numpy(dtype=float)[row, tcol]
        df[f"target_c__{p}"], df[f"target_d__{p}"] = a, b
        df[f"label_changed__{p}"] = np.where(np.isnan(a) | np.isnan(b), np.nan, (a != b).astype(float))
    p = spec["primary_policy"]
    df["target_c"], df["target_d"] = df[f"target_c__{p}"], df[f"target_d__{p}"]
    df["label_changed"] = df[f"label_changed__{p}"]
    rep = trial_reports(spec, df, reports)
    df["report_sha256"] = rep.map(_sha).to_numpy()
    df["report_chars"] = rep.str.len().to_numpy()
    df = df[rep.notna().to_numpy()].reset_index(drop=True)  # outside a text-control arm (counted by execute)
    if "study_datetime_c" in df.columns:
        gap = (pd.to_datetime(df["study_datetime_d"], format="ISO8601")
               - pd.to_datetime(df["study_datetime_c"], format="ISO8601"))
        df["gap_days"] = gap.dt.total_seconds() / 86400.0
    return df


def trial_reports(spec: dict, trials: pd.DataFrame, reports: pd.Series) -> pd.Series:
    """The report text each trial shows (index = trial id; ``reports`` is indexed by case id).

    The case's report under the spec's ``text_control``
    (:func:`shovir_core.data.text_controls.apply_text_control` with the trial's finding and source
    target under the primary policy, seeded by ``text_control_seed`` and the case id); ``None``
    where the control leaves the trial out (a section control on a report without both sections,
    an answer control on a label the policy excludes).
    """
    from ..data.text_controls import apply_text_control

    text = reports.reindex(trials["case_id"]).to_numpy()
    index = pd.Index(trials["trial_id"].to_numpy(), name="trial_id")
    control = spec.get("text_control", "none")
    if control == "none":
        return pd.Series(text, index=index, dtype=object)
    seed = int(spec.get("text_control_seed", 0))
    out = [apply_text_control(control, t, finding=f, label=lab, seed=seed, case_id=c)
           for t, f, lab, c in zip(text, trials["finding"], trials["target_c"], trials["case_id"])]
    return pd.Series(out, index=index, dtype=object)


def _load_pixels(path: str) -> np.ndarray:
    """Pixels of one image file (as :meth:`shovir_core.data.Dataset.load_image`, without the id lookup)."""
    from ..data import DatasetError
    from ..data.pixels import read_pixels

    try:
        return read_pixels(path)
    except (OSError, SyntaxError, ValueError) as exc:  # e.g. a file truncated after the dataset was validated
        raise DatasetError(f"modalens: image {path} does not decode ({exc})") from None


def _chunk_requests(spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict) -> tuple[list, list]:
    """The score requests of some trials (both image sides) and their ``(trial id, side)``."""
    from ..models.protocol import ScoreRequest

    report_on = spec["report"] == "present"
    framing = None if spec.get("framing", "none") == "none" else spec["framing"]
    sides = ("c", "d") if spec["image"] else ("c",)
    # plain lists: iterating rows of Arrow-backed string columns goes through pandas element by element
    # (itertuples was half of this function's time on ref-vlm's tables arms)
    ids, questions, findings = (trials[c].tolist() for c in ("trial_id", "question", "finding"))
    if spec["image"]:
        image_ids = {"c": trials["image_id"].tolist(), "d": trials["sub_image_id"].tolist()}
    texts = reports.to_dict() if report_on else {}
    requests, where = [], []
    for k, trial_id in enumerate(ids):
        for side in sides:
            image = images[image_ids[side][k]] if spec["image"] else None
            requests.append(ScoreRequest(
                image=image, question=questions[k], report=texts[trial_id] if report_on else None,
                order=spec["order"], instruction=spec["instruction"], framing=framing,
                finding=findings[k],
            ))
            where.append((trial_id, side))
    return requests, where


def _score_chunk(model, spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict) -> pd.DataFrame:
    requests, where = _chunk_requests(spec, trials, reports, images)
    results = model.score_yes_no(requests, answer_tokens=spec["answer_tokens"])
    if len(results) != len(requests):
        raise RuntimeError(f"modalens: model {spec['model']!r} returned {len(results)} results "
                           f"for {len(requests)} requests")
    per_trial: dict[str, dict] = {}
    for (trial_id, side), res in zip(where, results):
        cols = _side_columns(res, side)  # includes input_hash_<side>: the inference-cache key
        per_trial.setdefault(trial_id, {}).update(cols)
        if not spec["image"]:  # image absent: both sides are the same input
            per_trial[trial_id].update({k[:-2] + "_d": v for k, v in cols.items()})
    # rows as a list of dicts: ``DataFrame.from_dict(orient="index")`` goes through a dict per column and was
    # a tenth of this function on ref-vlm's tables arms
    out = pd.DataFrame(list(per_trial.values()), index=pd.Index(list(per_trial), name="trial_id"))
    return trials.set_index("trial_id").join(out).reset_index()


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run every trial of ``spec`` (resolved) on both images; resumable by case chunks.

    ``execution`` holds the execution-only settings of :data:`SPEC` (``batch_cases``)."""
    from tqdm import tqdm

    from ..models import cached, get_model

    ds = _dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"modalens: dataset {spec['dataset']!r} changed since the spec was resolved")
    cases, counts = build_cases(spec)
    reports = _reports(spec, cases)
    trials = _trial_frame(spec, cases, reports)
    n_questions = len(select_questions(policy_targets(case_labels(cases, ds.labels)[0], spec["primary_policy"]),
                                       design=spec["design"], six=spec.get("six_findings")))
    counts["n_text_control_excluded"] = int(n_questions - len(trials))
    reports = trial_reports(spec, trials, reports)  # the text each trial shows (text controls applied)
    counts["n_text_control_empty"] = int((reports.str.len() == 0).sum())
    replicate = int(spec.get("replicate", 0))
    if replicate:  # a re-run computes afresh: its own inference cache, never the arm's
        from ..models.cache import default_cache_dir

        model = cached(get_model(spec["model"]), directory=default_cache_dir() / f"replicate-{replicate}",
                       progress=False, chunk_size=4096)
    else:
        model = cached(get_model(spec["model"]), progress=False, chunk_size=4096)
    _set_answer_batch(model, SPEC.execution(execution)["answer_batch_size"])
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    model_info = {"id": spec["model"], **model.provenance()}
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model=model_info, seeds=seeds,
                   credentialed=ds.credentialed) as writer:
        mine = shards.select(trials, writer, key="case_id", units=cases["case_id"])  # this shard (all unsharded)
        model.record_into(writer)  # the record lists the cache entries its trials came from
        todo = mine[~mine["trial_id"].isin(writer.done_ids)]
        image_paths = dict(zip(ds.images["image_id"], ds.images["path"]))
        case_ids = list(dict.fromkeys(todo["case_id"]))
        batch = SPEC.execution(execution)["batch_cases"]
        chunks = [case_ids[i:i + batch] for i in range(0, len(case_ids), batch)]
        bar = tqdm(total=len(todo), desc=f"modalens {spec['model']} {arm_label(spec)}", unit="trial",
                   disable=not progress)
        for chunk in chunks:
            part = todo[todo["case_id"].isin(chunk)]
            images = {}
            if spec["image"]:
                for image_id in pd.unique(pd.concat([part["image_id"], part["sub_image_id"]])):
                    images[image_id] = _load_pixels(image_paths[image_id])
            writer.append(_score_chunk(model, spec, part, reports, images))
            bar.update(len(part))
        bar.close()
        writer.complete(**counts, n_questions=int(trials["question_id"].nunique()),
                        arm=arm_label(spec))
    return shards.result(writer)

# --------------------------------------------------------------------------- several arms at once
_CASE_KEYS = ("dataset", "dataset_sha256", "substitute_seed", "ssim_size", "ssim_threshold", "n_patients",
              "subset_seed", "reports", "template_negatives", "template_wording", "template_id", "primary_policy",
              "answer_tokens")
"""Spec keys that arms scored together must share (same cases, reports, labels and decoding)."""


def _prefill_key(resolved: dict) -> tuple:
    """Arms with the same key are scored together by :func:`prefill_arms`: the model and :data:`_CASE_KEYS`."""
    return resolved["model"], json.dumps([resolved.get(k) for k in _CASE_KEYS], sort_keys=True, default=str)


def group_key(spec: dict, *, resolved: bool = False) -> tuple:
    """The group :func:`prefill_arms` scores an arm of ``spec`` (``resolved``: already resolved) with (arms
    with equal keys go together).

    The book's scheduler (:func:`shovir_core.book.schedule.book_plan`, through
    :func:`shovir_core.protocols.record_groups`) makes each such group in one task, so the arms are scored
    together as one notebook's :func:`shovir_core.book.runner.make_records` would.
    """
    return _prefill_key(dict(spec) if resolved else resolve_spec(dict(spec)))


def prefill_arms(runs, *, progress: bool = True, batch_cases: int = 64, shard=None) -> dict[str, int]:
    """Score the trials of several arms together, so the model shares their prompt prefixes.

    ``runs`` are ``(name, spec)`` pairs (records of one notebook, say). Arms with the same model and
    the same cases (:data:`_CASE_KEYS`) are scored case chunk by case chunk in one
    ``score_yes_no`` call through the inference cache: a transformer prefills each image once and
    every stretch of text two or more arms share once
    (:meth:`shovir_core.models.hf.HFVLM._score_prefix_group`), and the reference models compute each
    image's evidence once. The results land in the inference cache only; :func:`execute` then makes
    each record as usual and finds every model output there. Complete records are skipped. With
    ``shard`` (a :class:`~shovir_core.records.Shard`) only that shard's cases are scored -- the cases
    :func:`execute` gives the same shard (:func:`shovir_core.protocols.shards.mine`).
    Transformer outputs agree with a one-arm-at-a-time run to floating-point tolerance (1e-4 in
    the logits), not bit for bit; the inference cache keeps whichever was computed first.

    Returns counts: ``groups`` scored together, ``arms`` and ``requests`` in them.
    """
    from collections import defaultdict

    from ..models import cached, get_model
    from . import is_complete

    groups: dict[tuple, list[dict]] = defaultdict(list)
    answer_batch: dict[str, object] = {}
    for name, spec in runs:
        resolved = resolve_spec(dict(spec))
        answer_batch.setdefault(resolved["model"], SPEC.execution(dict(spec))["answer_batch_size"])
        if is_complete(PROTOCOL, name, resolved, resolved=True):
            continue
        key = _prefill_key(resolved)
        if resolved not in groups[key]:
            groups[key].append(resolved)
    out = {"groups": 0, "arms": 0, "requests": 0}
    for (model_name, _), specs in groups.items():
        if len(specs) < 2:
            continue
        first = specs[0]
        ds = _dataset(first["dataset"])
        cases, _ = build_cases(first)
        reports = _reports(first, cases)
        arms = []
        for spec in specs:
            trials = _trial_frame(spec, cases, reports)
            arms.append((spec, trials, trial_reports(spec, trials, reports)))
        model = cached(get_model(model_name), progress=False, chunk_size=1 << 20)
        _set_answer_batch(model, answer_batch.get(model_name))
        image_paths = dict(zip(ds.images["image_id"], ds.images["path"]))
        case_ids = shards.mine(cases["case_id"], shard)
        from tqdm import tqdm

        for start in tqdm(range(0, len(case_ids), batch_cases), desc=f"modalens {model_name}: {len(specs)} arms together",
                          unit="chunk", disable=not progress):
            chunk = set(case_ids[start:start + batch_cases])
            parts = [(spec, trials[trials["case_id"].isin(chunk)], texts) for spec, trials, texts in arms]
            images = {}
            for spec, part, _ in parts:
                if spec["image"]:
                    for image_id in pd.unique(pd.concat([part["image_id"], part["sub_image_id"]])):
                        if image_id not in images:
                            images[image_id] = _load_pixels(image_paths[image_id])
            requests = []
            for spec, part, texts in parts:
                requests += _chunk_requests(spec, part, texts, images)[0]
            model.score_yes_no(requests, answer_tokens=first["answer_tokens"])
            out["requests"] += len(requests)
        out["groups"] += 1
        out["arms"] += len(specs)
    return out

