"""ShoViR tables and figure data: pure functions of ``shovir`` run records.

The chapter's notebooks call these (one call per table); every value traces to
the trials of the records passed in. Every table comes back as a
:class:`~shovir_core.tables.result.TableResult` whose ``values`` are the glue keys
without the ``sv.`` namespace. The formulas live in :mod:`shovir_core.metrics`
(F1, μ-F1, Δ_FN, Δ_X, FR); the functions here select and pair trials and call them.

Choices where the paper is silent (ShoViR §3.4 names the metrics, not these details), each an option:

* F1_14 / F1_5 are **micro**-averaged by default (the authors' evaluation code lists
  micro first); uncertain (-1) counts as negative (``uncertain=``: ``"negative"``,
  ``"positive"`` or ``"excluded"``, the same policy for every label a metric reads).
* Per-class F1_c is computed on class c's evaluation subset only, against the
  reference label of c (arco-group/ShoViR-Bench ``evaluations/run_eval_chexbert_class.py``@add95d5); with dataset
  labels as reference every item is positive, so F1_c is the F1 of recall-only errors.
* μ-F1 weights F1_c by the number of items of c scored **in that condition's subset**
  (DOCO, which drops items, uses its own counts; the authors' code reused the OCO counts).
* Δ_X = μ-F1(RO) − μ-F1(X) on the items X was evaluated on (RO restricted to
  the DOCO items for Δ_DOCO), at p = 1 by default.
* FR pools (image, class) pairs (micro); intervals are item-level percentile
  bootstraps that resample images (2,000 draws by default).
* ``uncertain="excluded"`` drops a pair wherever one of the labels it is scored on is
  uncertain: per-class F1 drops (prediction, reference) pairs, Δ_X drops items whose
  reference or either prediction is excluded, FR items whose y or either prediction is
  (:mod:`shovir_core.metrics.shovir`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13, apply_policy
from ..metrics import nlg_metrics, per_class_f1, report_label_f1
from ..metrics import shovir as ms
from ..records import Run
from ..protocols.shovir import label_columns
from ..vocab import SHOVIR_CONDITIONS
from .result import TableResult, frame_of, run_ids_of

__all__ = [
    "trials_of", "image_level", "table1", "per_class", "mu_f1_curves",
    "shortcut_items", "shortcut_metrics", "per_class_across_models", "no_doco_note", "occluded_area", "MIN_FR_ITEMS",
    "attack_sensitivity", "target_class_intervals",
    "reference_checks", "external_metric_status", "doco_status", "DOCO_VALIDATION_ITEMS",
    "TABLE1_METRICS", "UNCERTAIN", "pipeline_check", "bleu_breakdown", "run_counts", "doco_counts", "key_part", "text_convention",
]

TABLE1_METRICS = ("f1_14_micro", "f1_5_micro", "f1_radgraph", "green", "bleu1", "bleu4", "rouge_l")
"""Table 1 metric columns (schema names of ``metrics.yaml``), in the paper's order."""

UNCERTAIN = ("negative", "positive", "excluded")
"""Label policies for uncertain (-1) codes; blank (not mentioned) is always negative."""

_PAPER_METRIC = {"f1_14_micro": "F1_14", "f1_5_micro": "F1_5", "f1_radgraph": "F1_RG", "green": "GREEN",
                 "bleu1": "BLEU_1", "bleu4": "BLEU_4", "rouge_l": "ROUGE_L"}
_BASELINE, _FULL_NOISE, _RO, _OCO, _DOCO = SHOVIR_CONDITIONS
_DISEASE = (_RO, _OCO, _DOCO)
_DELTA_FN = "Δ_FN"
_ARM_LABELS = {_FULL_NOISE: "Full Noise Image"}
_COUNT_LABELS = {"n": "items", "n_items": "items", "n_images": "images", "n_excluded": "excluded",
                 "n_eligible": "eligible", "n_flipped": "flipped", "n_models": "models", "tp": "TP", "fp": "FP",
                 "fn": "FN"}


def _policy(uncertain: str) -> str:
    if uncertain not in UNCERTAIN:
        raise ValueError(f"uncertain must be one of {UNCERTAIN}, got {uncertain!r}")
    return f"u-{uncertain}"


def trials_of(runs: Mapping[str, Run]) -> pd.DataFrame:
    """Trials of several ``shovir`` records, with a ``model`` column holding each record's key."""
    frames = []
    for key, run in runs.items():
        if run.manifest.get("protocol") != "shovir":
            raise ValueError(f"record {run.run_id!r} (key {key!r}) is not a shovir record")
        frames.append(run.trials.assign(model=key, dataset=(run.manifest.get("dataset") or {}).get("name"),
                                        record=str(run.path)))
    if not frames:
        raise ValueError("no shovir records given")
    return pd.concat(frames, ignore_index=True)


def _labels(frame: pd.DataFrame, prefix: str) -> pd.DataFrame:
    out = frame[label_columns(prefix)].astype(float)
    out.columns = list(CHEXPERT_CLASSES)
    return out.reset_index(drop=True)


def external_metric_status(table: "TableResult | pd.DataFrame | None" = None) -> dict[str, str]:
    """``{metric: reason}`` for the model-based metrics (RadGraph F1, GREEN) without values.

    With ``table`` (from :func:`image_level` or :func:`table1`): the metrics that table lacks and
    why (scores cached in a record count as available even where the metric cannot run); without
    it, the metrics that cannot run here.
    """
    from ..metrics import external_availability

    if table is not None:
        return dict(getattr(table, "frame", table).attrs.get("unavailable", {}))

    out = {}
    for name in ("f1_radgraph", "green"):
        ok, reason, _ = external_availability(name)
        if not ok:
            out[name] = reason
    return out


def text_convention(trials: pd.DataFrame) -> str:
    """The BLEU/ROUGE convention of the records' noise preset (``text_metrics``; one per frame)."""
    from ..perturb import resolve_preset

    if "record" not in trials:
        return "project"
    found = {resolve_preset(Run(Path(r)).manifest["spec"].get("preset", "paper")).text_metrics
             for r in trials["record"].unique()}
    if len(found) != 1:
        raise ValueError(f"records with different text-metric conventions {sorted(found)} in one table")
    return found.pop()


def key_part(text: str) -> str:
    """A glue-key component: letters, digits and ``_`` only.

    >>> key_part("medgemma-1.5-4b")
    'medgemma_1_5_4b'
    """
    return "".join(ch if ch.isalnum() else "_" for ch in str(text))


# --------------------------------------------------------------------------- Table 1
def image_level(trials: pd.DataFrame, *, uncertain: str = "negative", external: bool = True,
                text: bool = True) -> TableResult:
    """Report-level metrics of the image-level conditions, one row per (model, condition).

    Columns: ``model, condition, n_images, f1_14_micro, f1_14_macro, f1_5_micro, f1_5_macro, bleu1,
    bleu4, rouge_l, f1_radgraph, green``. BLEU/ROUGE follow the records' preset
    (:func:`text_convention`). RadGraph F1 and GREEN come from the record's score cache
    (:mod:`shovir_core.metrics.store`) or are computed (and cached) when their weights are
    available locally (``external=True``); else NaN (:func:`external_metric_status` gives the
    reason; ``frame.attrs`` holds ``unavailable`` and ``text_convention``). ``text=False`` leaves out the
    text metrics (BLEU, ROUGE-L and the external ones) for a caller that reads only the label F1s.
    """
    from ..metrics import compute_external
    from ..metrics.store import ScoreStore

    _policy(uncertain)
    img = trials[trials["level"] == "image"]
    if img.empty:
        raise ValueError("no image-level trials (conditions Baseline / FullNoise) in these records")
    convention = text_convention(img)
    rows, unavailable = [], {}
    for (model, cond), g in img.groupby(["model", "condition"], sort=False):
        g = g.sort_values("image_id")
        row = {"model": model, "condition": cond, "n_images": int(len(g))}
        row.update(report_label_f1(_labels(g, "pred"), _labels(g, "ref"), uncertain=uncertain))
        hyps, refs = g["generated"].tolist(), g["reference_text"].tolist()
        if not text:
            rows.append(row)
            continue
        row.update(nlg_metrics(hyps, refs, convention=convention))
        store = ScoreStore(g["record"].iloc[0]) if "record" in g else None
        for name in ("f1_radgraph", "green"):
            res = compute_external(name, hyps, refs, store=store) if external else None
            row[name] = res.value if res is not None and res.available else np.nan
            if res is None or not res.available:
                unavailable.setdefault(name, "not computed (external=False)" if res is None else res.reason)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update(unavailable=unavailable, text_convention=convention)
    metric_cols = [c for c in frame.columns if c not in ("model", "condition", "n_images")]
    return TableResult(frame, metrics={"n_images": "count", **{c: c for c in metric_cols}},
                       labels={"n_images": "images", **_ARM_LABELS}, index=("model", "condition"),
                       caption="Report-level metrics of the image-level conditions.", na_rep="unavailable")


def _table1_frame(il: pd.DataFrame) -> pd.DataFrame:
    models = list(dict.fromkeys(il["model"]))
    il = il.set_index(["model", "condition"])
    parts = {}
    for arm in (_BASELINE, _FULL_NOISE):
        parts[arm] = pd.DataFrame({m: il.loc[(m, arm), list(TABLE1_METRICS)] for m in models}).T.astype(float)
    out = pd.concat(parts, axis=1)
    for metric in ("f1_14_micro", "f1_5_micro"):
        out[(_DELTA_FN, metric)] = ms.delta_fn(out[(_BASELINE, metric)], out[(_FULL_NOISE, metric)])
    out.index.name = "model"
    return out


def _table1_result(frame: pd.DataFrame, values: dict, caption: str, run_ids=()) -> TableResult:
    return TableResult(frame, values=values, metrics={col: col[1] for col in frame.columns},
                       labels=dict(_ARM_LABELS), caption=caption, na_rep="unavailable", run_ids=run_ids)


def pipeline_check(trials: pd.DataFrame, models: Sequence[str]) -> TableResult:
    """What a pipeline-only model (a random-weight transformer) produced: reports per condition,
    distinct reports, mean length in characters and the share of reports with any positive label.

    Such a model shows that the pipeline runs end to end through a real chat template; its reports
    are random text (their labels have nothing to do with the image), so it is reported here instead
    of as a Table 1 row. ``values``:
    ``pipeline.<model>.n_reports`` / ``.n_distinct`` / ``.share_positive``.
    """
    rows, values = [], {}
    sub = trials[trials["model"].isin(list(models))]
    if sub.empty:
        raise ValueError(f"pipeline_check: no trials of {list(models)}")
    pred = [f"pred.{c}" for c in CHEXPERT_CLASSES]
    for (model, cond), g in sub.groupby(["model", "condition"], sort=False):
        text = g["generated"].fillna("")
        rows.append({"model": model, "condition": cond, "n_reports": int(len(g)), "n_distinct": int(text.nunique()),
                     "mean_chars": float(text.str.len().mean()),
                     "share_positive": float((g[pred] == 1.0).any(axis=1).mean())})
    for model, g in pd.DataFrame(rows).groupby("model"):
        values[f"pipeline.{key_part(model)}.n_reports"] = int(g["n_reports"].sum())
        values[f"pipeline.{key_part(model)}.n_distinct"] = int(g["n_distinct"].sum())
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, metrics={"n_reports": "count", "n_distinct": "count", "mean_chars": "count",
                                               "share_positive": "share"},
                       labels={"n_reports": "reports", "n_distinct": "distinct reports", "mean_chars": "mean length (chars)",
                               "share_positive": "reports with a positive finding"}, index=("model", "condition"),
                       caption="Pipeline check: what the random-weight transformer generated.")


def bleu_breakdown(trials: pd.DataFrame) -> TableResult:
    """BLEU-1 of the image-level conditions taken apart: brevity penalty, unigram precision and length ratio.

    Corpus BLEU-1 = BP · p_1 (:func:`shovir_core.metrics.bleu_parts`, the records' text convention): a model
    whose clean reports are much shorter than the references loses most of its BLEU to the brevity penalty,
    so longer reports under the Full Noise Image can raise BLEU while the findings they state are wrong.
    One row per (model, condition); ``values``: ``bleu.<model>.<condition>.{bleu1,brevity_penalty,precision_1,
    length_ratio,mean_words}``.
    """
    from ..metrics import bleu_parts
    from ..metrics.text import TEXT_CONVENTIONS

    img = trials[trials["level"] == "image"]
    if img.empty:
        raise ValueError("no image-level trials (conditions Baseline / FullNoise) in these records")
    c = TEXT_CONVENTIONS[text_convention(img)]
    rows = []
    for (model, cond), g in img.groupby(["model", "condition"], sort=False):
        g = g.sort_values("image_id")
        hyps = g["generated"].fillna("").tolist()
        parts = bleu_parts(hyps, g["reference_text"].tolist(), max_order=1, lowercase=c["lowercase"],
                           smooth=c["smooth"])
        rows.append({"model": model, "condition": cond, "n_images": int(len(g)), "bleu1": parts["bleu"],
                     "brevity_penalty": parts["brevity_penalty"], "precision_1": parts["precision_1"],
                     "length_ratio": parts["length_ratio"], "n_distinct": int(pd.Series(hyps).nunique()),
                     "mean_words": float(np.mean([len(h.split()) for h in hyps]))})
    frame = pd.DataFrame(rows)
    values = {}
    for r in frame.to_dict("records"):
        stem = f"bleu.{key_part(r['model'])}.{r['condition']}"
        for k in ("bleu1", "brevity_penalty", "precision_1", "length_ratio", "mean_words"):
            values[f"{stem}.{k}"] = float(r[k])
        values[f"{stem}.n_distinct"] = int(r["n_distinct"])
    return TableResult(frame, values, metrics={"n_images": "count", "bleu1": "bleu1", "brevity_penalty": "value",
                                               "precision_1": "precision", "length_ratio": "value",
                                               "n_distinct": "count", "mean_words": "value"},
                       labels={"n_images": "images", "brevity_penalty": "brevity penalty",
                               "precision_1": "unigram precision", "length_ratio": "words / reference words",
                               "n_distinct": "distinct reports", "mean_words": "mean words", **_ARM_LABELS},
                       index=("model", "condition"),
                       caption="BLEU-1 = brevity penalty × unigram precision, per model and image-level condition.")


def table1(trials: pd.DataFrame, *, uncertain: str = "negative") -> TableResult:
    """ShoViR Table 1: Baseline and Full Noise metrics per model, with Δ_FN for F1_14 and F1_5.

    ``frame``: index ``model``, MultiIndex columns ``(arm, metric)`` with arms ``Baseline``,
    ``FullNoise`` and ``Δ_FN`` (:func:`shovir_core.metrics.delta_fn`). ``values``:
    ``t1.<model>.<arm>.<metric>`` for every available cell, the largest and smallest Δ_FN (F1_14)
    with their models, ``t1.n_models`` and ``t1.n_images_max`` (images of the largest image set).
    """
    il = image_level(trials, uncertain=uncertain).frame
    out = _table1_frame(il)
    out.attrs = dict(il.attrs)
    values = {}
    for model, row in out.iterrows():
        for (arm, metric), value in row.items():
            if pd.notna(value):
                values[f"t1.{key_part(model)}.{key_part(arm)}.{metric}"] = float(value)
    delta = out[(_DELTA_FN, "f1_14_micro")]
    values.update({"t1.max_delta_fn_f1_14": float(delta.max()), "t1.max_delta_fn_model": str(delta.idxmax()),
                   "t1.min_delta_fn_f1_14": float(delta.min()), "t1.min_delta_fn_model": str(delta.idxmin()),
                   "t1.n_models": int(len(out)), "t1.n_images_max": int(il["n_images"].max())})
    return _table1_result(out, values, "ShoViR Table 1: Baseline vs Full Noise Image, with Δ_FN.")


# --------------------------------------------------------------------------- per class, Figure 2
def per_class(trials: pd.DataFrame, *, uncertain: str = "negative") -> TableResult:
    """Per-class F1 on each class's evaluation subset, per (model, condition, p, class).

    Columns: ``model, condition, p, class``, ``n`` (items scored: a pair whose prediction or
    reference the label policy excludes is dropped), ``n_excluded``, ``tp, fp, fn, precision,
    recall, f1`` (:func:`shovir_core.metrics.per_class_f1`).
    """
    _policy(uncertain)
    # only the columns read: taking rows copies every column, and the perturbations and reports are most bytes
    dis = trials.loc[trials["level"] == "disease", ["model", "condition", "p", "target", *label_columns("pred"),
                                                    *label_columns("ref")]]
    if dis.empty:
        raise ValueError("no disease-level trials (RO / OCO / DOCO) in these records")
    rows = []
    for (model, cond, p, c), g in dis.groupby(["model", "condition", "p", "target"], sort=False):
        t = per_class_f1(g[[f"pred.{c}"]].set_axis([c], axis=1), g[[f"ref.{c}"]].set_axis([c], axis=1),
                         classes=[c], uncertain=uncertain).iloc[0]
        scored = int(t.tp + t.fp + t.fn + t.tn)
        rows.append({"model": model, "condition": cond, "p": float(p), "class": c, "n": scored,
                     "n_excluded": int(len(g) - scored), "tp": int(t.tp), "fp": int(t.fp), "fn": int(t.fn),
                     "precision": float(t.precision), "recall": float(t.recall), "f1": float(t.f1)})
    out = pd.DataFrame(rows)
    order = {c: i for i, c in enumerate(FINDINGS_13)}
    out = (out.assign(_o=out["class"].map(order)).sort_values(["model", "condition", "p", "_o"])
           .drop(columns="_o").reset_index(drop=True))
    return TableResult(out, metrics={"p": "strength", **{k: "count" for k in ("n", "n_excluded", "tp", "fp", "fn")},
                                     "precision": "precision", "recall": "recall", "f1": "f1_class"},
                       labels=dict(_COUNT_LABELS), index=("model", "condition", "p", "class"),
                       caption="Per-class F1 on each class's evaluation subset.")


def mu_f1_curves(per_class_table) -> TableResult:
    """Figure 2: μ-F1 = Σ_c n_c F1_c / Σ_c n_c per (model, condition, p), with the item count.

    ``per_class_table``: :func:`per_class` (its run ids are kept). ``values``:
    ``fig2.<model>.<condition>.p<100 p>`` (``p100`` for p = 1).
    """
    from ..metrics import mu_f1

    t = frame_of(per_class_table)
    rows = []
    for (model, cond, p), g in t.groupby(["model", "condition", "p"], sort=False):
        rows.append({"model": model, "condition": cond, "p": float(p),
                     "mu_f1": mu_f1(g.set_index("class")["f1"], g.set_index("class")["n"]),
                     "n_items": int(g["n"].sum())})
    frame = pd.DataFrame(rows)
    values = {f"fig2.{key_part(r.model)}.{r.condition}.p{int(round(r.p * 100)):03d}": float(r.mu_f1)
              for r in frame.itertuples()}
    return TableResult(frame, values=values, metrics={"p": "strength", "mu_f1": "mu_f1", "n_items": "count"},
                       labels=dict(_COUNT_LABELS), run_ids=run_ids_of(per_class_table),
                       index=("model", "condition", "p"), caption="Figure 2: μ-F1 against occlusion strength p.")


# --------------------------------------------------------------------------- Figure 3
def _at_target(frame: pd.DataFrame, prefix: str) -> np.ndarray:
    """Each row's ``<prefix>.<target>`` label code."""
    arr = frame[label_columns(prefix)].to_numpy(dtype=float)
    idx = np.array([CHEXPERT_CLASSES.index(c) for c in frame["target"]], dtype=int)
    return arr[np.arange(len(frame)), idx] if len(frame) else np.zeros(0)


def shortcut_items(trials: pd.DataFrame, *, model: str, arm: str, ref_arm: str = _RO, p: float = 1.0,
                   ref_p: float | None = None, uncertain: str = "negative") -> pd.DataFrame:
    """The (image, class) items evaluated under both ``arm`` at ``p`` and ``ref_arm`` at ``ref_p``.

    One row per item: ``image_id``, ``target`` and the binary labels of the target class after the
    label policy (NaN where it excludes): ``y`` (dataset label), ``ref`` (reference label),
    ``pred_ro`` (prediction under the reference arm) and ``pred_x`` (under ``arm``) -- the inputs of
    :func:`shovir_core.metrics.shovir.shortcut_counts`.
    """
    policy = _policy(uncertain)
    ref_p = p if ref_p is None else ref_p
    dis = trials.loc[(trials["level"] == "disease") & (trials["model"] == model),  # the columns read (per_class)
                     ["condition", "p", "image_id", "target", *label_columns("pred"), *label_columns("ref"),
                      *label_columns("gt")]]

    def side(cond, pp, tag):
        s = dis[(dis["condition"] == cond) & np.isclose(dis["p"], pp)]
        out = pd.DataFrame({"image_id": s["image_id"].to_numpy(), "target": s["target"].to_numpy(),
                            f"pred_{tag}": apply_policy(_at_target(s, "pred"), policy)})
        if tag == "x":
            out["ref"] = apply_policy(_at_target(s, "ref"), policy)
            out["y"] = apply_policy(_at_target(s, "gt"), policy)
        return out

    items = side(arm, p, "x").merge(side(ref_arm, ref_p, "ro"), on=["image_id", "target"], how="inner",
                                    validate="one_to_one")
    return items[["image_id", "target", "y", "ref", "pred_ro", "pred_x"]]


def shortcut_metrics(trials: pd.DataFrame, *, p: float = 1.0, n_draws: int = 2000,
                     rng: np.random.Generator, uncertain: str = "negative", level: float = 0.95) -> TableResult:
    """Figure 3(a): Δ_X and FR at strength ``p`` for X ∈ {OCO, DOCO}, plus the RO control, with intervals.

    Rows: (model, arm) with arm ``OCO``, ``DOCO`` (reference arm RO at ``p``) and
    ``RO-control`` (RO at ``p`` against the Baseline image, i.e. RO at p = 0:
    how many findings random occlusion alone removes). Columns: ``delta``
    (μ-F1(reference arm) − μ-F1(arm)), ``fr``, ``mu_f1_r``, ``mu_f1_x``, each with ``_lo``/``_hi``
    bounds, ``n_items``, ``n_excluded`` (items the label policy drops), ``n_eligible``,
    ``n_flipped``, ``bootstrap``. Every estimate is
    :func:`shovir_core.metrics.shovir.shortcut_from_counts` of the items' counts; intervals
    resample images (:func:`shovir_core.stats.item_bootstrap`) with ``rng``. ``values``:
    ``fig3a.<model>.<arm>.{delta,fr}[_lo|_hi]`` (where defined) and ``.n_eligible``.
    """
    from ..stats import item_bootstrap

    _policy(uncertain)
    dis = trials.loc[trials["level"] == "disease", ["model", "condition"]]
    rows = []
    for model in dict.fromkeys(dis["model"]):
        conds = set(dis.loc[dis["model"] == model, "condition"])
        specs = [(x, x, p, p) for x in (_OCO, _DOCO) if x in conds and _RO in conds]
        if _RO in conds:
            specs.append(("RO-control", _RO, p, 0.0))
        for name, arm, pa, pr in specs:
            items = shortcut_items(trials, model=model, arm=arm, ref_arm=_RO, p=pa, ref_p=pr, uncertain=uncertain)
            if items.empty:
                continue
            classes = sorted(set(items["target"]))
            counts = ms.shortcut_counts(items["target"], y=items["y"], ref=items["ref"],
                                        pred_ro=items["pred_ro"], pred_x=items["pred_x"], classes=classes)
            res = item_bootstrap(counts.assign(image_id=items["image_id"].to_numpy()),
                                 sums={c: c for c in counts.columns},
                                 statistic=lambda s, classes=classes: ms.shortcut_from_counts(s, classes),
                                 n_draws=n_draws, rng=rng, level=level, item="image_id")
            row = {"model": model, "arm": name, "p": float(p), "n_items": int(len(items)),
                   "n_excluded": int(len(items) - counts["dx_scored"].sum()),
                   "n_eligible": int(counts["eligible"].sum()), "n_flipped": int(counts["flipped"].sum())}
            for stat in ("delta", "fr", "mu_f1_r", "mu_f1_x"):
                est, lo, hi = res.interval(stat)
                row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"] = est, lo, hi
            row["bootstrap"] = f"{res.n_draws} draws over {res.unit}, {res.level:.0%} percentile"
            rows.append(row)
    frame = pd.DataFrame(rows)
    values = {}
    for r in frame.to_dict("records"):
        stem = f"fig3a.{key_part(r['model'])}.{key_part(r['arm'])}"
        for stat in ("delta", "delta_lo", "delta_hi", "fr", "fr_lo", "fr_hi"):
            if pd.notna(r[stat]):
                values[f"{stem}.{stat}"] = float(r[stat])
        values[f"{stem}.n_eligible"] = int(r["n_eligible"])
    metrics = {"p": "strength", **{c: "count" for c in ("n_items", "n_excluded", "n_eligible", "n_flipped")}}
    labels = dict(_COUNT_LABELS)
    for stat, metric, head in (("delta", "delta_x", "Δ_X"), ("fr", "flip_rate_c", "FR"),
                               ("mu_f1_r", "mu_f1", "μ-F1 (RO)"), ("mu_f1_x", "mu_f1", "μ-F1 (X)")):
        for suffix in ("", "_lo", "_hi"):
            metrics[stat + suffix] = metric
            labels[stat + suffix] = head + suffix.replace("_", " ")
    return TableResult(frame, values=values, metrics=metrics, labels=labels, index=("model", "arm"),
                       caption=f"Figure 3(a): Δ_X and flip rate at p = {p:g} with "
                               f"{level:.0%} percentile bootstrap intervals.")


MIN_FR_ITEMS = 10
"""Fewest eligible items (target positive and called by the reference arm) a flip rate may rest on to be
headlined or to decide a validation check; rates over fewer items are shown with their n only."""


def _fr(items: pd.DataFrame) -> tuple[float, int]:
    if items.empty:
        return float("nan"), 0
    s = ms.shortcut_scores(items["target"], y=items["y"], ref=items["ref"], pred_ro=items["pred_ro"],
                           pred_x=items["pred_x"])
    return s["fr"], s["n_eligible"]


def reference_checks(trials: pd.DataFrame, *, p: float = 1.0, min_items: int = MIN_FR_ITEMS) -> TableResult:
    """The reference models' planted behaviour in the disease-level trials, each check with the items it rests on.

    * ``ref-blind-prior``: Δ_FN (F1_14) = 0 and no flip under RO, OCO or DOCO (against RO at ``p``).
    * ``ref-image-classifier``: FR(OCO) > FR(RO-control) (RO at ``p`` against the clean image).
    * ``ref-context-shortcut`` (it reads a finding from the pixels outside its own boxes): FR_OCO against
      the clean image (OCO at p = 0) is 0; and context noise turns calls off. The latter is FR(DOCO) >
      FR(OCO) where DOCO and OCO each have at least ``min_items`` eligible items; otherwise it is tested on
      the items without a co-finding box (their context region is the whole image outside the target's
      boxes, where the RO boxes land): FR(RO-control) on those items > FR_OCO against the clean image.

    A check whose flip rates rest on fewer than ``min_items`` eligible items does not hold (it cannot be
    decided). Columns ``model, check, n`` (the fewest eligible items of the rates it compares; images for
    Δ_FN), ``holds``; ``values``: ``checks.n``, ``checks.n_hold``,
    ``checks.min_items``, ``checks.context.design`` (``"DOCO"`` or ``"RO without co-finding boxes"``) and the
    rates and n of the context model's checks.
    """
    dis = trials[trials["level"] == "disease"]
    models = set(dis["model"])
    rows, values = [], {"checks.min_items": int(min_items)}
    if "ref-blind-prior" in models:
        t1 = table1(trials[trials["model"] == "ref-blind-prior"])
        rows.append(("ref-blind-prior", "Δ_FN (F1_14) = 0 (n: images)", int(t1.values["t1.n_images_max"]),
                     bool(float(t1.frame[(_DELTA_FN, "f1_14_micro")].iloc[0]) == 0.0)))
        flips, n = 0, 0
        for arm in (_OCO, _DOCO):
            items = shortcut_items(trials, model="ref-blind-prior", arm=arm, p=p)
            if len(items):
                s = ms.shortcut_scores(items["target"], y=items["y"], ref=items["ref"], pred_ro=items["pred_ro"],
                                       pred_x=items["pred_x"])
                flips, n = flips + s["n_flipped"], n + s["n_eligible"]
        rows.append(("ref-blind-prior", "no flips under OCO or DOCO (against RO)", int(n), flips == 0 and n > 0))
    if "ref-image-classifier" in models:
        fr_oco, n_oco = _fr(shortcut_items(trials, model="ref-image-classifier", arm=_OCO, p=p))
        fr_ro, n_ro = _fr(shortcut_items(trials, model="ref-image-classifier", arm=_RO, ref_arm=_RO, p=p, ref_p=0.0))
        rows.append(("ref-image-classifier", "FR(OCO) > FR(RO-control)", int(min(n_oco, n_ro)),
                     bool(min(n_oco, n_ro) >= min_items and fr_oco > fr_ro)))
    if "ref-context-shortcut" in models:
        m = "ref-context-shortcut"
        fr_clean, n_clean = _fr(shortcut_items(trials, model=m, arm=_OCO, ref_arm=_OCO, p=p, ref_p=0.0))
        rows.append((m, "FR_OCO against the clean image = 0", int(n_clean),
                     bool(n_clean >= min_items and fr_clean == 0.0)))
        fr_doco, n_doco = _fr(shortcut_items(trials, model=m, arm=_DOCO, p=p))
        fr_oco, n_oco = _fr(shortcut_items(trials, model=m, arm=_OCO, p=p))
        values.update({"checks.context.fr_oco_clean": fr_clean, "checks.context.n_oco_clean": int(n_clean),
                       "checks.context.n_doco": int(n_doco)})
        if n_doco >= min_items and n_oco >= min_items:
            values["checks.context.design"] = "DOCO"
            rows.append((m, "FR(DOCO) > FR(OCO)", int(min(n_doco, n_oco)), bool(fr_doco > fr_oco)))
        else:
            values["checks.context.design"] = "RO without co-finding boxes"
            doco_ids = set(map(tuple, dis.loc[(dis["model"] == m) & (dis["condition"] == _DOCO),
                                              ["image_id", "target"]].to_numpy()))
            ro = shortcut_items(trials, model=m, arm=_RO, ref_arm=_RO, p=p, ref_p=0.0)
            ro = ro[[(i, c) not in doco_ids for i, c in zip(ro["image_id"], ro["target"])]]
            fr_ro, n_ro = _fr(ro)
            values.update({"checks.context.fr_ro_no_cofinding": fr_ro, "checks.context.n_ro_no_cofinding": int(n_ro)})
            rows.append((m, f"DOCO has {n_doco} eligible items (< {min_items}); instead, on the items without a "
                            "co-finding box: FR(RO-control) > FR_OCO against the clean image", int(min(n_ro, n_clean)),
                         bool(min(n_ro, n_clean) >= min_items and fr_ro > fr_clean)))
    frame = pd.DataFrame(rows, columns=["model", "check", "n", "holds"])
    values.update({"checks.n": int(len(frame)), "checks.n_hold": int(frame["holds"].sum())})
    return TableResult(frame, values, metrics={"n": "count"},
                       labels={"check": "expected behaviour", "n": "n (fewest eligible items)"},
                       caption=f"The reference models' planted behaviour at p = {p:g}; a flip rate decides a check "
                               f"only over at least {min_items} eligible items.")


def no_doco_note(classes: Sequence[str]) -> str:
    """The Figure 3(b) caption's note on the classes without a DOCO bar ("" when there is none).

    Each class name stands between label words ("without DOCO", "no DOCO item"): on credentialed data a
    common word next to a class name ("for Lung Opacity") is a 3-word window of the reports ("Negative
    for lung opacity") and the credentialed guard would refuse the caption
    (:mod:`shovir_core.book.shingles`).

    >>> no_doco_note(["Lung Opacity"])
    ' Without DOCO: Lung Opacity (no DOCO item: no item of that class has a co-finding box that passes the IoU rule).'
    """
    if not classes:
        return ""
    return (f" Without DOCO: {', '.join(map(str, classes))} (no DOCO item: no item of that class has a co-finding box "
            "that passes the IoU rule).")


DOCO_VALIDATION_ITEMS = 30
"""Fewest eligible DOCO items (target positive and called under RO) on which this project calls the
context-shortcut model's DOCO behaviour validated; below it the book says DOCO is unvalidated."""


def doco_status(trials: pd.DataFrame, *, model: str = "ref-context-shortcut", p: float = 1.0,
                min_items: int = DOCO_VALIDATION_ITEMS) -> TableResult:
    """What a DOCO validation can rest on in these trials, and whether it holds.

    DOCO (ShoViR §3.2) occludes the co-finding boxes of an item, so only items whose image carries boxes
    of another evaluated class can enter it, and of those only the ones the IoU rule keeps. Counted on
    ``model``'s disease-level trials at ``p``: ``n_images`` (images with an item), ``n_multi_images``
    (images with items of two or more classes) and ``n_multi_items`` (their items: the items with a
    co-finding box before the IoU rule), ``n_doco_items`` and ``n_doco_images`` (items the IoU rule keeps,
    i.e. DOCO's trials, and their images), ``n_eligible`` (DOCO items with the target positive and called
    under RO: what FR(DOCO) rests on) and ``min_items``. ``validated`` is ``n_eligible >= min_items`` with
    as many eligible OCO items; then ``holds`` is the planted behaviour FR(DOCO) > FR(OCO) (both against RO
    at ``p``); otherwise ``holds`` is ``None``: DOCO is not validated. Values: ``doco.<name>``.
    """
    dis = trials[(trials["level"] == "disease") & (trials["model"] == model) & np.isclose(trials["p"], p)]
    items = dis.loc[dis["condition"] == _OCO, ["image_id", "target"]].drop_duplicates()
    per_image = items.groupby("image_id")["target"].nunique()
    multi = per_image[per_image >= 2]
    doco = dis.loc[dis["condition"] == _DOCO, ["image_id", "target"]].drop_duplicates()
    fr_doco, n_doco = _fr(shortcut_items(trials, model=model, arm=_DOCO, p=p)) if len(doco) else (float("nan"), 0)
    fr_oco, n_oco = _fr(shortcut_items(trials, model=model, arm=_OCO, p=p)) if len(items) else (float("nan"), 0)
    validated = bool(n_doco >= min_items and n_oco >= min_items)
    values = {"n_images": int(per_image.size), "n_multi_images": int(multi.size), "n_multi_items": int(multi.sum()),
              "n_doco_items": int(len(doco)), "n_doco_images": int(doco["image_id"].nunique()),
              "n_eligible": int(n_doco), "min_items": int(min_items)}
    labels = {"n_images": "images with an evaluated item",
              "n_multi_images": "images with boxes of two or more evaluated classes",
              "n_multi_items": "their items (a co-finding box before the IoU rule)",
              "n_doco_items": "DOCO items (kept by the IoU rule)", "n_doco_images": "images of the DOCO items",
              "n_eligible": f"DOCO items eligible for {model}'s flip rate (positive, called under RO)",
              "min_items": "eligible items a DOCO validation needs"}
    frame = pd.DataFrame({"quantity": [labels[k] for k in values], "value": list(values.values())})
    values = {f"doco.{k}": v for k, v in values.items()}
    values.update({"doco.validated": validated, "doco.fr_doco": fr_doco, "doco.fr_oco": fr_oco,
                   "doco.holds": bool(fr_doco > fr_oco) if validated else None})
    return TableResult(frame, values, metrics={"value": "count"}, index=("quantity",),
                       labels={"quantity": "quantity", "value": "count"},
                       caption=f"What a DOCO validation of {model} can rest on at p = {p:g}: items, co-finding "
                               f"boxes and eligible items")


def per_class_across_models(per_class_table, *, p: float = 1.0, exclude_models: Sequence[str] = ()) -> TableResult:
    """Figure 3(b): per-class F1 averaged across models for Baseline, RO, OCO and DOCO at ``p``.

    ``exclude_models``: models left out of the average (the demo's random-weight pipeline check,
    whose reports carry no findings, would drag every class mean towards 0).

    ``Baseline`` is OCO at p = 0 (the clean image on the OCO subset, as in the authors'
    code). Columns: ``class, condition, f1_mean, f1_sd, n_models``. ``values``:
    ``fig3b.<class>.<condition>`` (mean F1, where defined).
    """
    t = frame_of(per_class_table)
    t = t[~t["model"].isin(list(exclude_models))]
    if t.empty:
        raise ValueError(f"per_class_across_models: no model left after excluding {list(exclude_models)}")
    base = t[(t["condition"] == _OCO) & np.isclose(t["p"], 0.0)].assign(condition=_BASELINE)
    at_p = t[t["condition"].isin(list(_DISEASE)) & np.isclose(t["p"], p)]
    both = pd.concat([base, at_p], ignore_index=True)
    out = (both.groupby(["class", "condition"])["f1"].agg(f1_mean="mean", f1_sd="std", n_models="count")
           .reset_index())
    values = {f"fig3b.{key_part(r['class'])}.{r['condition']}": float(r["f1_mean"])
              for r in out.to_dict("records") if pd.notna(r["f1_mean"])}
    out["condition"] = pd.Categorical(out["condition"], [_BASELINE, *_DISEASE], ordered=True)
    out["class"] = pd.Categorical(out["class"], [c for c in FINDINGS_13 if c in set(out["class"])], ordered=True)
    out = out.sort_values(["class", "condition"]).reset_index(drop=True)
    return TableResult(out, values=values, metrics={"f1_mean": "f1_class", "f1_sd": "f1_class", "n_models": "count"},
                       labels={"f1_mean": "F1 (mean over models)", "f1_sd": "F1 (SD over models)", **_COUNT_LABELS},
                       run_ids=run_ids_of(per_class_table), index=("class", "condition"),
                       caption=f"Figure 3(b): per-class F1 at p = {p:g}, averaged across models.")


def attack_sensitivity(per_class_table, *, weighting: str = "mu", control: str = _RO,
                       exclude_models: Sequence[str] = ()) -> TableResult:
    """The authors' attack-sensitivity score per (model, arm) and its RO-corrected Δ
    (arco-group/ShoViR-Bench ``src/postprocessing/plots/sensitivity_score.py``@07a7a6d;
    :mod:`shovir_core.metrics.attack_sensitivity`): S_AUC = (1/100) ∫ [F(0) − F(p)] / F(0) dp by the trapezoid
    rule over the p grid, S_100 = [F(0) − F(1)] / F(0), Δ = S_AUC(X) − S_AUC(RO).

    ``weighting``: ``"mu"`` (F = μ-F1, the class-weighted mean the paper's figures use) or ``"unweighted"``
    (F = the plain mean of the per-class F1, ``np.nanmean``, as the script computes it). Columns ``model,
    condition, s_auc, s_100, n_p, delta_s_auc, delta_s_100`` (Δ NaN for RO); ``values``:
    ``sens.<model>.<condition>.s_auc`` and ``.delta``. ``exclude_models``: left out (a pipeline check).
    """
    from ..metrics.attack_sensitivity import sensitivity_deltas, sensitivity_scores

    t = frame_of(per_class_table)
    t = t[~t["model"].isin(list(exclude_models))]
    if t.empty:
        raise ValueError(f"attack_sensitivity: no model left after excluding {list(exclude_models)}")
    if weighting == "mu":
        curves = mu_f1_curves(t).frame.rename(columns={"mu_f1": "f"})
    elif weighting == "unweighted":
        curves = t.groupby(["model", "condition", "p"], as_index=False, sort=False)["f1"].agg(
            lambda v: float(np.nanmean(v)) if v.notna().any() else np.nan).rename(columns={"f1": "f"})
    else:
        raise ValueError(f"weighting must be 'mu' or 'unweighted', got {weighting!r}")
    scores = sensitivity_scores(curves[curves["condition"].isin(list(_DISEASE))], value="f")
    deltas = sensitivity_deltas(scores, control=control, arms=[a for a in _DISEASE if a != control])
    out = scores.merge(deltas, on=["model", "condition"], how="left")
    values = {}
    for r in out.itertuples():
        k = f"sens.{key_part(r.model)}.{r.condition}"
        values[f"{k}.s_auc"] = float(r.s_auc)
        if pd.notna(r.delta_s_auc):
            values[f"{k}.delta"] = float(r.delta_s_auc)
    return TableResult(out, values=values,
                       metrics={"s_auc": "s_auc", "s_100": "s_auc", "delta_s_auc": "s_auc", "delta_s_100": "s_auc",
                                "n_p": "count"},
                       labels={"s_auc": "S_AUC", "s_100": "S_100", "delta_s_auc": "Δ S_AUC (X − RO)",
                               "delta_s_100": "Δ S_100 (X − RO)", "n_p": "strengths"},
                       run_ids=run_ids_of(per_class_table), index=("model", "condition"),
                       caption="Attack sensitivity S_AUC (area of the relative F drop over p) and its RO-corrected "
                               f"Δ, F = {'μ-F1' if weighting == 'mu' else 'the unweighted class mean of F1'}.")


def target_class_intervals(trials: pd.DataFrame, *, ps: Sequence[float] = (0.0, 1.0), uncertain: str = "rrg-",
                           n_resamples: int = 500, seed: int = 3, exclude_models: Sequence[str] = ()) -> TableResult:
    """Per-target-class F1 with the authors' bootstrap, per (model, arm, p) -- one authors' result file each
    (arco-group/ShoViR-Bench ``evaluations/run_eval_chexbert_class.py``@add95d5;
    :func:`shovir_core.metrics.target_class.target_class_f1`): each item counts only for its target class,
    y_true the reference label, ``n_resamples`` resamples by ``random.Random(seed)``, 2.5/50/97.5 percentiles.

    The resamples depend on the order of the items: here items are ordered by (target class in CheXbert
    order, image id). At p = 0 every arm shows the clean image, so only OCO at p = 0 is scored, as
    ``Baseline`` (the authors' baseline file, ``oco/p00``). Columns ``model, condition, p, class, n, f1,
    median, ci_l, ci_h``. ``exclude_models``: left out (a pipeline check).
    """
    from ..metrics.target_class import target_class_f1

    dis = trials[(trials["level"] == "disease") & ~trials["model"].isin(list(exclude_models))]
    rows = []
    for (model, cond, p), g in dis.groupby(["model", "condition", "p"], sort=True):
        if not any(np.isclose(p, q) for q in ps) or (np.isclose(p, 0.0) and cond != _OCO):
            continue
        cond = _BASELINE if np.isclose(p, 0.0) else cond
        order = {c: i for i, c in enumerate(CHEXPERT_CLASSES)}
        g = g.assign(_o=g["target"].map(order)).sort_values(["_o", "image_id"])
        res = target_class_f1(g["target"].to_numpy(), _at_target(g, "pred"), _at_target(g, "ref"),
                              uncertain=uncertain, n_resamples=n_resamples, seed=seed)
        res = res[res["n"] > 0].reset_index()
        rows.append(res.assign(model=model, condition=cond, p=float(p)))
    if not rows:
        raise ValueError(f"no disease-level trials at p in {list(ps)}")
    frame = pd.concat(rows, ignore_index=True)[["model", "condition", "p", "class", "n", "f1", "median", "ci_l",
                                                "ci_h"]]
    rank = {c: i for i, c in enumerate((_BASELINE, *_DISEASE))}
    frame = (frame.assign(_c=frame["condition"].map(rank), _k=frame["class"].map(
        {c: i for i, c in enumerate(CHEXPERT_CLASSES)})).sort_values(["model", "_c", "p", "_k"])
             .drop(columns=["_c", "_k"]).reset_index(drop=True))
    return TableResult(frame, values={"n_resamples": int(n_resamples), "seed": int(seed)},
                       metrics={"p": "strength", "n": "count", "f1": "f1_class", "median": "f1_class",
                                       "ci_l": "f1_class", "ci_h": "f1_class"},
                       labels={"n": "items", "f1": "F1", "median": "bootstrap median", "ci_l": "2.5 %",
                               "ci_h": "97.5 %"},
                       index=("model", "condition", "p", "class"),
                       caption=f"Per-target-class F1 with the authors' bootstrap ({n_resamples} resamples, seed {seed}, "
                               f"{uncertain}).")


def occluded_area(trials: pd.DataFrame, *, p: float = 1.0) -> TableResult:
    """Share of the image each disease-level arm occludes, per (condition, class), from the boxes recorded
    with each trial (``perturbation``: the boxes blended and the image's pixel count).

    OCO covers the target's own boxes B_c, DOCO the co-finding boxes B_c̄, RO k ~ U{1, …, |B_c ∪ B_c̄|}
    random boxes whose sizes are drawn from the dataset-wide box-size distribution (ShoViR §3.3), placed
    away from every annotated box. RO so controls for *adding* noise patches of typical size, not for the
    area of the target's boxes: for a class whose boxes are smaller than the dataset's typical box, RO
    covers more of the image than OCO. A drawn RO box that touches an annotated box is drawn again (size and
    position, :func:`shovir_core.perturb.boxes.random_boxes`), so images with large annotated boxes end up
    with smaller RO boxes than the dataset's typical one. The trials of the first model are read (every
    model sees the same inputs). Columns ``condition, class, n_items, area_mean, area_median, boxes_mean``; ``values``:
    ``area.<condition>.<class>`` (mean share) and ``area.<condition>.all``.
    """
    import json

    dis = trials[(trials["level"] == "disease") & np.isclose(trials["p"], p)]
    if dis.empty:
        raise ValueError(f"no disease-level trials at p = {p:g}")
    dis = dis[dis["model"] == dis["model"].iloc[0]]
    rows = []
    for r in dis[["condition", "target", "perturbation"]].itertuples(index=False):
        info = json.loads(r.perturbation)
        boxes = info.get("boxes") or []
        n_pix = int(info["noise"]["n_pixels"])
        covered = 0
        if boxes:
            h = int(np.ceil(max(b["y2"] for b in boxes))) + 1
            w = int(np.ceil(max(b["x2"] for b in boxes))) + 1
            from ..perturb.boxes import union_mask

            covered = int(union_mask([("x", b["x1"], b["y1"], b["x2"], b["y2"]) for b in boxes], (h, w)).sum())
        rows.append({"condition": r.condition, "class": r.target, "area": covered / n_pix, "boxes": len(boxes)})
    long = pd.DataFrame(rows)
    out = (long.groupby(["condition", "class"])
           .agg(n_items=("area", "size"), area_mean=("area", "mean"), area_median=("area", "median"),
                boxes_mean=("boxes", "mean")).reset_index())
    order = {c: i for i, c in enumerate(FINDINGS_13)}
    out = (out.assign(_c=out["condition"].map({c: i for i, c in enumerate(_DISEASE)}), _o=out["class"].map(order))
           .sort_values(["_c", "_o"]).drop(columns=["_c", "_o"]).reset_index(drop=True))
    values = {f"area.{r['condition']}.{key_part(r['class'])}": float(r["area_mean"]) for r in out.to_dict("records")}
    values.update({f"area.{c}.all": float(g["area"].mean()) for c, g in long.groupby("condition")})
    return TableResult(out, values=values, metrics={"n_items": "count", "area_mean": "relative_area",
                                                    "area_median": "relative_area", "boxes_mean": "value"},
                       labels={"n_items": "items", "area_mean": "occluded share (mean)",
                               "area_median": "occluded share (median)", "boxes_mean": "boxes (mean)"},
                       index=("condition", "class"),
                       caption=f"Share of the image occluded at p = {p:g}, per arm and class.")


# --------------------------------------------------------------------------- counts
def run_counts(runs: Mapping[str, Run]) -> TableResult:
    """Counts per cell from the records' manifests: images, items per class, DOCO drops.

    One row per (record key, class) with ``images_in_class`` (the class's full
    subset in the dataset), ``items`` (evaluated per condition), ``doco_items``
    and ``doco_dropped`` (items without a co-finding box after the IoU rule).
    ``values``: ``n_classes`` (classes evaluated by any record).
    """
    rows = []
    for key, run in runs.items():
        counts = run.manifest.get("counts") or {}
        cells = counts.get("cells") or {}
        for c in counts.get("classes") or []:
            n_oco = cells.get(f"{_OCO}|{c}", cells.get(f"{_RO}|{c}", 0))
            n_ps = len(run.manifest["spec"]["ps"])
            rows.append({"model": key, "class": c, "images_in_class": int(counts["class_counts"][c]),
                         "items": int(n_oco // n_ps), "doco_items": int(cells.get(f"{_DOCO}|{c}", 0) // n_ps),
                         "doco_dropped": int((counts.get("doco_dropped") or {}).get(c, 0))})
    frame = pd.DataFrame(rows, columns=["model", "class", "images_in_class", "items", "doco_items", "doco_dropped"])
    return TableResult(frame, values={"n_classes": int(frame["class"].nunique())},
                       metrics={c: "count" for c in ("images_in_class", "items", "doco_items", "doco_dropped")},
                       labels={"images_in_class": "images of the class", "items": "items per condition",
                               "doco_items": "DOCO items", "doco_dropped": "dropped from DOCO"},
                       run_ids=run_ids_of(runs), index=("model", "class"),
                       caption="Evaluation sets: items per class and record.")


def doco_counts(runs: Mapping[str, Run]) -> TableResult:
    """The DOCO drop rule per class, from the first record that evaluates the class.

    Columns ``class, images_in_class, doco_items, doco_dropped``; ``values``: ``n_doco_items``,
    ``n_doco_dropped`` (sums over the classes), ``n_classes``.
    """
    rc = run_counts(runs)
    first = rc.frame.drop_duplicates("class")[["class", "images_in_class", "doco_items", "doco_dropped"]]
    values = {"n_doco_items": int(first["doco_items"].sum()), "n_doco_dropped": int(first["doco_dropped"].sum()),
              "n_classes": int(len(first))}
    return TableResult(first.reset_index(drop=True), values=values,
                       metrics={c: "count" for c in ("images_in_class", "doco_items", "doco_dropped")},
                       labels=rc.labels, run_ids=rc.run_ids, index=("class",),
                       caption="Items per class kept and dropped by the DOCO rule.")
