"""ShoViR tables and figure data: pure functions of ``shovir`` run records.

The chapter's notebooks call these (one call per table); every value traces to
the trials of the records passed in.

Choices where the paper is silent (ShoViR §3.4 names the metrics, not these details), each an option:

* F1_14 / F1_5 are **micro**-averaged by default (the reference code lists
  micro first); uncertain (-1) counts as negative (``uncertain=``).
* Per-class F1_c is computed on class c's evaluation subset only, against the
  reference label of c (arco-group/ShoViR-Bench ``evaluations/run_eval_chexbert_class.py``@add95d5);
  with dataset labels as reference every item is positive, so F1_c is the
  F1 of recall-only errors.
* μ-F1 weights F1_c by the number of items of c **in that condition's subset**
  (DOCO, which drops items, uses its own counts; the reference code reused
  the OCO counts).
* Δ_X = μ-F1(RO) − μ-F1(X) on the items X was evaluated on (RO restricted to
  the DOCO items for Δ_DOCO), at p = 1 by default.
* FR pools (image, class) pairs (micro); intervals are item-level percentile
  bootstraps that resample images (2,000 draws by default).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13, apply_policy
from ..metrics import nlg_metrics, per_class_f1, report_label_f1
from ..records import Run
from ..protocols.shovir import label_columns

__all__ = [
    "trials_of", "image_level", "table1", "per_class", "mu_f1_curves", "shortcut_metrics",
    "per_class_across_models", "paper_table1", "external_metric_status", "TABLE1_METRICS", "run_counts",
    "key_part", "paper_figures", "text_convention",
]

TABLE1_METRICS = ("f1_14_micro", "f1_5_micro", "f1_radgraph", "green", "bleu1", "bleu4", "rouge_l")
"""Table 1 metric columns (schema names of ``metrics.yaml``), in the paper's order."""

_PAPER_METRIC = {"f1_14_micro": "F1_14", "f1_5_micro": "F1_5", "f1_radgraph": "F1_RG", "green": "GREEN",
                 "bleu1": "BLEU_1", "bleu4": "BLEU_4", "rouge_l": "ROUGE_L"}


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


def external_metric_status(table: pd.DataFrame | None = None) -> dict[str, str]:
    """``{metric: reason}`` for the model-based metrics (RadGraph F1, GREEN) without values.

    With ``table`` (from :func:`image_level` or :func:`table1`): the metrics that table lacks and
    why (scores cached in a record count as available even where the metric cannot run); without
    it, the metrics that cannot run here.
    """
    from ..metrics import external_availability

    if table is not None:
        return dict(table.attrs.get("unavailable", {}))
    out = {}
    for name in ("f1_radgraph", "green"):
        ok, reason, _ = external_availability(name)
        if not ok:
            out[name] = reason
    return out


def text_convention(trials: pd.DataFrame) -> str:
    """The BLEU/ROUGE convention of the records' noise preset (``text_metrics``; one per frame)."""
    from ..perturb import resolve_preset
    from ..records import Run

    if "record" not in trials:
        return "project"
    found = {resolve_preset(Run(Path(r)).manifest["spec"].get("preset", "paper")).text_metrics
             for r in trials["record"].unique()}
    if len(found) != 1:
        raise ValueError(f"records with different text-metric conventions {sorted(found)} in one table")
    return found.pop()


def image_level(trials: pd.DataFrame, *, uncertain: str = "negative", external: bool = True) -> pd.DataFrame:
    """Report-level metrics of the image-level conditions, one row per (model, condition).

    Columns: ``f1_14_micro, f1_14_macro, f1_5_micro, f1_5_macro, bleu1, bleu4,
    rouge_l, f1_radgraph, green, n_images``. BLEU/ROUGE follow the records' preset
    (:func:`text_convention`). RadGraph F1 and GREEN come from the record's score cache
    (:mod:`shovir_core.metrics.store`) or are computed (and cached) when their weights are
    available locally (``external=True``); else NaN (:func:`external_metric_status` gives the reason).
    """
    from ..metrics import compute_external
    from ..metrics.store import ScoreStore

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
        row.update(nlg_metrics(hyps, refs, convention=convention))
        store = ScoreStore(g["record"].iloc[0]) if "record" in g else None
        for name in ("f1_radgraph", "green"):
            res = compute_external(name, hyps, refs, store=store) if external else None
            row[name] = res.value if res is not None and res.available else np.nan
            if res is None or not res.available:
                unavailable.setdefault(name, "not computed (external=False)" if res is None else res.reason)
        rows.append(row)
    out = pd.DataFrame(rows).set_index(["model", "condition"])
    out.attrs["unavailable"] = unavailable
    out.attrs["text_convention"] = convention
    return out


def table1(trials: pd.DataFrame, *, uncertain: str = "negative") -> pd.DataFrame:
    """ShoViR Table 1: Baseline and Full Noise metrics per model, with Δ_FN for F1_14 and F1_5.

    Columns are a MultiIndex ``(arm, metric)`` with arms ``Baseline``,
    ``FullNoise`` and ``Δ_FN``.
    """
    il = image_level(trials, uncertain=uncertain)
    models = list(dict.fromkeys(il.index.get_level_values("model")))
    parts = {}
    for arm in ("Baseline", "FullNoise"):
        parts[arm] = pd.DataFrame({m: il.loc[(m, arm), list(TABLE1_METRICS)] for m in models}).T.astype(float)
    out = pd.concat(parts, axis=1)
    for metric in ("f1_14_micro", "f1_5_micro"):
        out[("Δ_FN", metric)] = out[("Baseline", metric)] - out[("FullNoise", metric)]
    out.index.name = "model"
    out.attrs = dict(il.attrs)
    return out


def per_class(trials: pd.DataFrame, *, uncertain: str = "negative") -> pd.DataFrame:
    """Per-class F1 on each class's evaluation subset, per (model, condition, p, class).

    Columns: ``n`` (items), ``tp, fp, fn, precision, recall, f1``.
    """
    dis = trials[trials["level"] == "disease"]
    if dis.empty:
        raise ValueError("no disease-level trials (RO / OCO / DOCO) in these records")
    rows = []
    for (model, cond, p, c), g in dis.groupby(["model", "condition", "p", "target"], sort=False):
        t = per_class_f1(g[[f"pred.{c}"]].set_axis([c], axis=1), g[[f"ref.{c}"]].set_axis([c], axis=1),
                         classes=[c], uncertain=uncertain).iloc[0]
        rows.append({"model": model, "condition": cond, "p": float(p), "class": c, "n": int(len(g)),
                     "tp": int(t.tp), "fp": int(t.fp), "fn": int(t.fn), "precision": float(t.precision),
                     "recall": float(t.recall), "f1": float(t.f1)})
    out = pd.DataFrame(rows)
    order = {c: i for i, c in enumerate(FINDINGS_13)}
    return (out.assign(_o=out["class"].map(order)).sort_values(["model", "condition", "p", "_o"])
            .drop(columns="_o").reset_index(drop=True))


def mu_f1_curves(per_class_table: pd.DataFrame) -> pd.DataFrame:
    """μ-F1 = Σ_c n_c F1_c / Σ_c n_c per (model, condition, p), with the item count."""
    from ..metrics import mu_f1

    rows = []
    for (model, cond, p), g in per_class_table.groupby(["model", "condition", "p"], sort=False):
        rows.append({"model": model, "condition": cond, "p": float(p),
                     "mu_f1": mu_f1(g.set_index("class")["f1"], g.set_index("class")["n"]),
                     "n_items": int(g["n"].sum())})
    return pd.DataFrame(rows)


def _binary(values: pd.Series, uncertain: str) -> np.ndarray:
    policy = {"negative": "u-negative", "positive": "u-positive", "excluded": "u-excluded"}[uncertain]
    return np.nan_to_num(apply_policy(values.to_numpy(dtype=float), policy), nan=0.0)


def _at_target(frame: pd.DataFrame, prefix: str) -> np.ndarray:
    """Each row's ``<prefix>.<target>`` label code."""
    arr = frame[label_columns(prefix)].to_numpy(dtype=float)
    idx = np.array([CHEXPERT_CLASSES.index(c) for c in frame["target"]], dtype=int)
    return arr[np.arange(len(frame)), idx] if len(frame) else np.zeros(0)


def _paired(dis: pd.DataFrame, model: str, arm: str, ref_arm: str, p: float, ref_p: float,
            uncertain: str) -> pd.DataFrame:
    """One row per (image, class) item evaluated under both arms, with binary calls of each."""
    keys = ["image_id", "target"]

    def side(cond, pp, tag):
        s = dis[(dis["model"] == model) & (dis["condition"] == cond) & np.isclose(dis["p"], pp)]
        return pd.DataFrame({"image_id": s["image_id"].to_numpy(), "target": s["target"].to_numpy(),
                             f"pred_{tag}": _binary(pd.Series(_at_target(s, "pred")), uncertain),
                             f"ref_{tag}": _binary(pd.Series(_at_target(s, "ref")), uncertain),
                             f"y_{tag}": _at_target(s, "gt")})

    a = side(arm, p, "x")
    b = side(ref_arm, ref_p, "r")
    items = a.merge(b, on=keys, how="inner", validate="one_to_one")
    items["ref"] = items["ref_x"]
    items["y"] = (items["y_x"] == 1.0).astype(float)
    return items.drop(columns=["ref_x", "ref_r", "y_x", "y_r"])


def _mu_f1_stat(classes: list[str], arms: tuple[str, ...]):
    def stat(s: dict) -> dict:
        out = {}
        for arm in arms:
            num = den = 0.0
            for c in classes:
                tp, fp, fn, n = (s[f"{k}_{arm}_{c}"] for k in ("tp", "fp", "fn", "n"))
                f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / np.where(2 * tp + fp + fn > 0, 2 * tp + fp + fn, 1), 0.0)
                num = num + n * f1
                den = den + n
            out[f"mu_f1_{arm}"] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        out["delta"] = out[f"mu_f1_{arms[1]}"] - out[f"mu_f1_{arms[0]}"]
        out["fr"] = np.where(s["eligible"] > 0, s["flipped"] / np.where(s["eligible"] > 0, s["eligible"], 1), np.nan)
        return out
    return stat


def shortcut_metrics(trials: pd.DataFrame, *, p: float = 1.0, n_draws: int = 2000,
                     rng: np.random.Generator, uncertain: str = "negative", level: float = 0.95) -> pd.DataFrame:
    """Δ_X and FR at strength ``p`` for X ∈ {OCO, DOCO}, plus the RO control, with bootstrap intervals.

    Rows: (model, arm) with arm ``OCO``, ``DOCO`` (reference arm RO at ``p``) and
    ``RO-control`` (RO at ``p`` against the Baseline image, i.e. RO at p = 0:
    how many findings random occlusion alone removes). Columns: ``delta``
    (μ-F1(reference arm) − μ-F1(arm)) and ``fr`` with ``_lo``/``_hi`` bounds,
    ``n_items``, ``n_eligible``, ``n_flipped``. Intervals resample images
    (:func:`shovir_core.stats.item_bootstrap`) with ``rng``.
    """
    from ..stats import item_bootstrap

    dis = trials[trials["level"] == "disease"]
    rows = []
    for model in dict.fromkeys(dis["model"]):
        conds = set(dis.loc[dis["model"] == model, "condition"])
        specs = [(x, "RO", p, p) for x in ("OCO", "DOCO") if x in conds and "RO" in conds]
        if "RO" in conds:
            specs.append(("RO-control", "RO", p, 0.0))
        for arm, ref_arm, pa, pr in specs:
            items = _paired(dis, model, "RO" if arm == "RO-control" else arm, ref_arm, pa, pr, uncertain)
            if items.empty:
                continue
            items["eligible"] = ((items["y"] == 1) & (items["pred_r"] == 1)).astype(float)
            items["flipped"] = (items["eligible"].astype(bool) & (items["pred_x"] == 0)).astype(float)
            classes = sorted(set(items["target"]))
            sums = {"eligible": "eligible", "flipped": "flipped"}
            for tag in ("r", "x"):
                for c in classes:
                    inc = (items["target"] == c).astype(float)
                    pr_, rf = items[f"pred_{tag}"], items["ref"]
                    items[f"tp_{tag}_{c}"] = inc * ((pr_ == 1) & (rf == 1))
                    items[f"fp_{tag}_{c}"] = inc * ((pr_ == 1) & (rf == 0))
                    items[f"fn_{tag}_{c}"] = inc * ((pr_ == 0) & (rf == 1))
                    items[f"n_{tag}_{c}"] = inc
                    for k in ("tp", "fp", "fn", "n"):
                        sums[f"{k}_{tag}_{c}"] = f"{k}_{tag}_{c}"
            res = item_bootstrap(items, sums=sums, statistic=_mu_f1_stat(classes, ("x", "r")),
                                 n_draws=n_draws, rng=rng, level=level, item="image_id")
            row = {"model": model, "arm": arm, "p": float(p), "n_items": int(len(items)),
                   "n_eligible": int(items["eligible"].sum()), "n_flipped": int(items["flipped"].sum())}
            for stat in ("delta", "fr", "mu_f1_r", "mu_f1_x"):
                est, lo, hi = res.interval(stat)
                row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"] = est, lo, hi
            row["bootstrap"] = f"{res.n_draws} draws over {res.unit}, {res.level:.0%} percentile"
            rows.append(row)
    return pd.DataFrame(rows)


def per_class_across_models(per_class_table: pd.DataFrame, *, p: float = 1.0) -> pd.DataFrame:
    """Figure 3(b): per-class F1 averaged across models for Baseline, RO, OCO and DOCO at ``p``.

    ``Baseline`` is OCO at p = 0 (the clean image on the OCO subset, as in the
    reference code). Columns: ``class, condition, f1_mean, f1_sd, n_models``.
    """
    t = per_class_table
    base = t[(t["condition"] == "OCO") & np.isclose(t["p"], 0.0)].assign(condition="Baseline")
    at_p = t[t["condition"].isin(["RO", "OCO", "DOCO"]) & np.isclose(t["p"], p)]
    both = pd.concat([base, at_p], ignore_index=True)
    out = (both.groupby(["class", "condition"])["f1"].agg(f1_mean="mean", f1_sd="std", n_models="count")
           .reset_index())
    out["condition"] = pd.Categorical(out["condition"], ["Baseline", "RO", "OCO", "DOCO"], ordered=True)
    out["class"] = pd.Categorical(out["class"], [c for c in FINDINGS_13 if c in set(out["class"])], ordered=True)
    return out.sort_values(["class", "condition"]).reset_index(drop=True)


def paper_table1(dataset: str, models: Mapping[str, str]) -> pd.DataFrame:
    """The published Table 1 values for ``dataset`` (``"MIMIC"`` or ``"PadChest"``), laid out as :func:`table1`.

    ``models`` maps a run key to the paper's model name (``{"maira2": "MAIRA-2"}``);
    keys whose model is not in the paper are left out.
    """
    from ..papers.values import load_values

    values = [v for v in load_values("shovir").values()
              if v.keys.get("table") == "1" and v.keys.get("dataset") == dataset]
    if not values:
        raise ValueError(f"no published Table 1 values for dataset {dataset!r} (MIMIC or PadChest)")
    arms = {"baseline": "Baseline", "full_noise": "FullNoise", "delta_fn": "Δ_FN"}
    back = {v: k for k, v in _PAPER_METRIC.items()}
    rows = {}
    for key, name in models.items():
        got = {(arms[v.keys["arm"]], back[v.keys["metric"]]): float(v.value)
               for v in values if v.keys.get("model") == name}
        if got:
            rows[key] = got
    out = pd.DataFrame.from_dict(rows, orient="index")
    if not out.empty:
        out.columns = pd.MultiIndex.from_tuples(out.columns)
        out.index.name = "model"
    return out


def run_counts(runs: Mapping[str, Run]) -> pd.DataFrame:
    """Counts per cell from the records' manifests: images, items per class, DOCO drops, model calls.

    One row per (record key, class) with ``images_in_class`` (the class's full
    subset in the dataset), ``items`` (evaluated per condition), ``doco_items``
    and ``doco_dropped`` (items without a co-finding box after the IoU rule).
    """
    rows = []
    for key, run in runs.items():
        counts = run.manifest.get("counts") or {}
        cells = counts.get("cells") or {}
        for c in counts.get("classes") or []:
            n_oco = cells.get(f"OCO|{c}", cells.get(f"RO|{c}", 0))
            n_ps = len(run.manifest["spec"]["ps"])
            rows.append({"model": key, "class": c, "images_in_class": int(counts["class_counts"][c]),
                         "items": int(n_oco // n_ps), "doco_items": int(cells.get(f"DOCO|{c}", 0) // n_ps),
                         "doco_dropped": int((counts.get("doco_dropped") or {}).get(c, 0))})
    return pd.DataFrame(rows)


def key_part(text: str) -> str:
    """A glue-key component: letters, digits and ``_`` only.

    >>> key_part("medgemma-1.5-4b")
    'medgemma_1_5_4b'
    """
    return "".join(ch if ch.isalnum() else "_" for ch in str(text))


def paper_figures(dataset: str, models: Mapping[str, str], *, shortcut: pd.DataFrame | None = None,
                  curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """The values the paper states for Figures 2 and 3(a), beside this run's values.

    Parameters
    ----------
    dataset : {"MIMIC", "PadChest"}
    models : mapping
        Run key -> the paper's model name.
    shortcut, curves : DataFrame, optional
        :func:`shortcut_metrics` and :func:`mu_f1_curves` of the run; their values
        fill the ``run`` column.

    Returns
    -------
    DataFrame
        One row per stated value: ``figure, model, condition, metric, paper, run``.
    """
    from ..papers.published import published

    back = {name: key for key, name in models.items()}
    rows = []
    for figure, metric_map in (("2", {"mu_F1": "mu_f1"}), ("3a", {"FR": "fr", "delta_F1": "delta"})):
        table = published("shovir", figure=figure, dataset=dataset)
        for v in table.to_dict("records"):
            key = back.get(v["model"])
            if key is None or v["metric"] not in metric_map:
                continue
            run_value = np.nan
            if figure == "3a" and shortcut is not None:
                hit = shortcut[(shortcut["model"] == key) & (shortcut["arm"] == v["condition"])]
                run_value = float(hit[metric_map[v["metric"]]].iloc[0]) if len(hit) else np.nan
            if figure == "2" and curves is not None:
                hit = curves[(curves["model"] == key) & (curves["condition"] == v["condition"])
                             & np.isclose(curves["p"], float(v["p"]) / 100)]
                run_value = float(hit["mu_f1"].iloc[0]) if len(hit) else np.nan
            rows.append({"figure": figure, "model": key, "condition": v["condition"], "metric": v["metric"],
                         "paper": float(v["value"]), "run": run_value})
    return pd.DataFrame(rows, columns=["figure", "model", "condition", "metric", "paper", "run"])
