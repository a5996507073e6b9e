"""The ShoViR Supplementary as chapters: pure functions of run records returning :class:`TableResult`.

* §A data accounting — :func:`funnel`, :func:`class_counts`, :func:`consistency`,
  :func:`validation_sample`, :func:`label_maps` (``accounting`` records);
* §B occluder-type ablation — :func:`occluder_ablation`, :func:`occluder_checks` (``shovir`` records
  that differ only in the occluder, ``fill`` / preset);
* §C.3 prompt sensitivity — :func:`prompt_sensitivity` (``shovir`` records under the model's
  default prompt and under the shared minimal prompt);
* §C / Table S6 compute cost — :func:`compute_cost` (``gen_seconds`` of the trial rows).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, apply_policy
from ..records import Run
from .result import TableResult
from .shovir import _labels, image_level, mu_f1_curves, per_class, shortcut_metrics, trials_of

__all__ = ["funnel", "FUNNEL_PAPER_IDS", "class_counts", "consistency", "validation_sample", "label_maps", "NIH_LABEL_ALIASES", "OCCLUDERS",
           "occluder_of", "resolve_preset_name", "occluder_ablation", "occluder_checks", "PLANTED_EXPECTATIONS",
           "prompt_sensitivity", "compute_cost", "paper_grid_inputs", "glue_key"]


def _one(runs, protocol: str) -> Run:
    run = runs if isinstance(runs, Run) else next(iter(runs.values()))
    if run.manifest.get("protocol") != protocol:
        raise ValueError(f"record {run.run_id!r} is not a {protocol} record")
    return run


def _kind(run: Run, kind: str) -> pd.DataFrame:
    t = run.trials
    return t[t["kind"] == kind].reset_index(drop=True)


# -- §A data accounting -----------------------------------------------------------------------
FUNNEL_STEPS = {
    "test_split": "images of the official test split", "test_split_frontal": "frontal images of the official test split",
    "imagenome": "with ImaGenome annotations", "annotated": "annotated images (ImaGenome)",
    "no_finding": "not only No Finding", "true_positive": "true-positive filter",
    "studies": "studies of the release (grounded reports)", "with_boxes": "with at least one box",
    "mapped": "abnormal finding boxes mapped to CheXpert (static lookup)", "not_negated": "sentence not negated",
    "verified": "verified samples (CheXbert sentence validation)", "images": "images", "with_box": "with a box",
    "in_subset": "in a class subset (positive label and a box of the class)",
    "min_count": "classes with at least min_count images",
}
"""How the table names each funnel step (by the record's ``key``): the project's own words, so that the
credentialed-data guard knows them (the records store their own wording)."""

FUNNEL_PAPER_IDS = {
    "step.test_split.images": "a1.mimic.test_images", "step.no_finding.images": "a1.mimic.candidates",
    "step.true_positive.images": "a1.mimic.final_images", "dropped.imagenome": "a1.mimic.no_imagenome",
    "dropped.no_finding": "a1.mimic.no_finding_only",
    "step.studies.images": "a1.padchest.studies", "step.with_boxes.images": "a1.padchest.with_boxes",
    "boxes_removed_share": "a1.padchest.boxes_removed_pct", "with_boxes_share": "a1.padchest.with_boxes_pct",
}
"""Funnel values (:func:`funnel`) -> the paper's published id (ShoViR §3.1), for :func:`shovir_core.tables.paper_vs_run.beside`."""


def funnel(run: Run) -> TableResult:
    """The cohort funnel (images and boxes after each step) of an ``accounting`` record.

    ``values``: ``first_images``, ``final_images``, ``final_boxes``, ``n_steps``, ``n_classes_kept``; per step
    ``step.<key>.images`` / ``.boxes`` and ``dropped.<key>`` (images the step removed); where the raw metadata
    was read, ``with_boxes_share`` (PadChest-GR studies with a box) and ``boxes_removed_share`` (boxes the CheXbert
    sentence validation removed), fractions and ``annotated_outside_test`` (MIMIC annotation entries outside the test
    split). :data:`FUNNEL_PAPER_IDS` names the published value of each.
    """
    run = _one(run, "accounting")
    f = _kind(run, "funnel").sort_values("order")
    keys = f["key"].tolist() if "key" in f.columns else [None] * len(f)
    labels = [FUNNEL_STEPS.get(f"{k}_frontal" if k == "test_split" and str(t).startswith("frontal") else k, t)
              if k else t for k, t in zip(keys, f["step"])]
    frame = pd.DataFrame({"step": labels, "images": f["images"].astype(int).tolist(),
                          "boxes": f["boxes"].astype(int).tolist()})
    frame["dropped"] = (frame["images"].shift(1) - frame["images"]).fillna(0).astype(int)
    counts = run.manifest["counts"]
    values = {"first_images": int(frame["images"].iloc[0]), "final_images": int(frame["images"].iloc[-1]),
              "final_boxes": int(frame["boxes"].iloc[-1]), "n_steps": int(len(frame)),
              "n_classes_kept": int(counts["n_classes_kept"])}
    for key, r in zip(keys, frame.itertuples()):
        if key:
            values.update({f"step.{key}.images": int(r.images), f"step.{key}.boxes": int(r.boxes),
                           f"dropped.{key}": int(r.dropped)})
    if "step.studies.images" in values and values["step.studies.images"]:
        values["with_boxes_share"] = values["step.with_boxes.images"] / values["step.studies.images"]
    if counts.get("boxes_removed_share") is not None:
        values["boxes_removed_share"] = float(counts["boxes_removed_share"])
    if counts.get("annotated_outside_test") is not None:
        values["annotated_outside_test"] = int(counts["annotated_outside_test"])
    return TableResult(frame, values, labels={"step": "step", "images": "images", "boxes": "boxes",
                                              "dropped": "images dropped"},
                       caption="Cohort funnel, recomputed from the raw metadata and the dataset adapter."
                       ).with_runs(run)


def class_counts(run: Run) -> TableResult:
    """Per localisable class: images of its evaluation subset and whether it passes ``min_count``."""
    run = _one(run, "accounting")
    c = _kind(run, "class")
    frame = pd.DataFrame({"class": c["class"], "images": c["images"].astype(int), "kept": c["kept"].astype(bool)})
    values = {"n_classes": int(frame["kept"].sum()), "min_count": int(run.manifest["spec"]["min_count"])}
    return TableResult(frame, values, index=("class",), labels={"kept": f"≥ {values['min_count']} images"},
                       caption="Per-class evaluation subsets.").with_runs(run)


def consistency(run: Run) -> TableResult:
    """Cross-source consistency: F1 of the dataset labels against the classes of the image's boxes."""
    run = _one(run, "accounting")
    c = _kind(run, "consistency")
    frame = pd.DataFrame({"class": c["class"], "tp": c["tp"].astype(int), "fn": c["fn"].astype(int),
                          "fp": c["fp"].astype(int)})
    denom = 2 * frame["tp"] + frame["fp"] + frame["fn"]
    frame["f1"] = np.where(denom > 0, 2 * frame["tp"] / denom.where(denom > 0, 1), np.nan)
    tp, fp, fn = int(frame["tp"].sum()), int(frame["fp"].sum()), int(frame["fn"].sum())
    micro = 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else float("nan")
    frame["has_boxes"] = (frame["tp"] + frame["fp"]) > 0
    boxed = frame[frame["has_boxes"]]
    btp, bfp, bfn = int(boxed["tp"].sum()), int(boxed["fp"].sum()), int(boxed["fn"].sum())
    boxed_f1 = 2 * btp / (2 * btp + bfp + bfn) if (2 * btp + bfp + bfn) else float("nan")
    no_box = frame[~frame["has_boxes"] & (frame["fn"] > 0)]
    values = {"f1": float(micro), "tp": tp, "fp": fp, "fn": fn, "n_images": int(c["images"].max()),
              "f1_boxed": float(boxed_f1), "n_classes_boxed": int(len(boxed)), "fn_boxed": bfn,
              "n_classes_without_boxes": int(len(no_box)), "fn_without_boxes": int(no_box["fn"].sum()),
              "classes_without_boxes": ", ".join(no_box["class"])}
    return TableResult(frame, values, index=("class",), metrics={"f1": "f1_class"},
                       labels={"has_boxes": "class has boxes"},
                       caption="Agreement of image labels with box classes (micro F1 pooled over classes)."
                       ).with_runs(run)


def validation_sample(run: Run) -> TableResult:
    """The radiologist-validation sample: images per class (ids only in the frame; never glued)."""
    run = _one(run, "accounting")
    v = _kind(run, "validation")
    frame = v.groupby("class", sort=False).agg(images=("image_id", "size")).reset_index()
    values = {"n_cases": int(len(v)), "per_class": int(run.manifest["spec"]["per_class"]),
              "n_classes": int(frame["class"].nunique())}
    out = TableResult(frame, values, index=("class",), caption="Validation cases drawn per class.").with_runs(run)
    out.ids = v[["class", "image_id", "rank"]].copy()  # for the user's copy; the book never prints these
    return out


NIH_LABEL_ALIASES = {"Infiltrate": "Infiltration"}
"""Labels of the NIH lookup that spell another NIH label differently: the box list (BBox_List_2017.csv) writes
``Infiltrate`` where the image labels (Data_Entry_2017.csv) write ``Infiltration``."""


def label_maps(run: Run) -> TableResult:
    """The static label lookups (NIH and PadChest labels -> CheXpert class) the adapters use.

    ``values``: per source ``labels`` (entries of the lookup), ``mapped`` (entries with a CheXpert class),
    ``unmapped`` (their names); for NIH also ``aliases`` (:data:`NIH_LABEL_ALIASES`) and ``distinct``
    (labels less aliases: the dataset's findings and No Finding). The PadChest lookup lists mapped labels only;
    how many PadChest-GR labels exist is the paper's count, not the lookup's."""
    run = _one(run, "accounting")
    m = _kind(run, "mapping")
    frame = m[["source", "source_label", "chexpert"]].reset_index(drop=True)
    mapped = frame[frame["chexpert"].astype(str) != ""]
    values = {f"{k}.labels": int((frame["source"] == s).sum()) for k, s in
              (("nih", "NIH ChestX-ray14"), ("padchest", "PadChest"))}
    values.update({f"{k}.mapped": int((mapped["source"] == s).sum()) for k, s in
                   (("nih", "NIH ChestX-ray14"), ("padchest", "PadChest"))})
    for k, src in (("nih", "NIH ChestX-ray14"), ("padchest", "PadChest")):
        un = frame[(frame["source"] == src) & (frame["chexpert"].astype(str) == "")]["source_label"]
        values[f"{k}.unmapped"] = ", ".join(un) or "none"
    nih = set(frame.loc[frame["source"] == "NIH ChestX-ray14", "source_label"])
    values["nih.aliases"] = int(len(nih & set(NIH_LABEL_ALIASES)))
    values["nih.distinct"] = values["nih.labels"] - values["nih.aliases"]
    return TableResult(frame, values, labels={"source_label": "source label", "chexpert": "CheXpert class"},
                       caption="Label mapping tables.").with_runs(run)


# -- §B occluder-type ablation ------------------------------------------------------------------
OCCLUDERS = {
    "matched Gaussian (paper)": "paper",
    "blurred matched (radius 2, as the authors' code)": {"base": "paper", "smooth_radius": 2.0},
    "uniform random (all_noise)": {"base": "paper", "fill": "uniform"},
    "mean fill": {"base": "paper", "fill": "mean"},
    "black": {"base": "paper", "fill": "black"},
}
"""The occluders of the ablation and the noise preset of each (the params files use these). Only the fill
changes: the image pipeline (no 8-bit rescaling, hard edges, the paper's box sets) is the paper preset's, so
every occluder shares one Baseline."""


def resolve_preset_name(preset) -> str:
    """The :data:`OCCLUDERS` name of a preset (name, dict or resolved options); its own name otherwise."""
    from ..perturb import resolve_preset

    options = resolve_preset(preset).to_dict()
    options.pop("name")
    for name, p in OCCLUDERS.items():
        cand = resolve_preset(p).to_dict()
        cand.pop("name")
        if cand == options:
            return name
    return resolve_preset(preset).name


def occluder_of(run: Run) -> str:
    """The :data:`OCCLUDERS` name of a record's preset."""
    return resolve_preset_name(run.manifest["spec"]["preset"])


def _target_called(trials: pd.DataFrame) -> pd.Series:
    """Per trial whether its report calls its own target positive (``pred.<target> == 1``), one column
    lookup per target class."""
    called = np.zeros(len(trials), dtype=bool)
    for target, rows in trials.groupby("target", sort=False).indices.items():  # positions
        called[rows] = trials[f"pred.{target}"].to_numpy()[rows] == 1.0
    return pd.Series(called, index=trials.index)


def occluder_ablation(runs: Mapping[str, Run], *, p: float = 1.0, n_draws: int = 200, seed: int = 3) -> TableResult:
    """Per (model, occluder): F1_14 Baseline / Full Noise, Δ_FN, μ-F1 RO / OCO at ``p``, Δ_OCO, FR_OCO.

    FR_OCO is the paper's (ShoViR §3.4): its reference arm is RO at ``p``, so an item counts where the target
    is called under RO and not under OCO, also when it is RO that changed the call (RO adding a call the
    clean image did not make). ``fr_oco_clean`` is the same share against the clean image (OCO at p = 0) as
    reference arm, ``n_eligible`` / ``n_eligible_clean`` the items each rate is over, and ``ro_changed`` the
    items whose call of the target under RO at ``p`` differs from the clean image's.

    Also ``fn_positive_calls`` (positive calls in the Full Noise reports: how many findings survive),
    ``oco_unchanged`` (share of OCO items whose call of the target is the same at p = 1 as on the clean
    image, OCO at p = 0) and ``n_images`` / ``n_items`` (the cohort: images under Baseline, items under OCO).
    ``values`` adds ``n_images`` and ``n_items`` when every record has the same cohort.
    """
    from ..metrics import shovir as ms
    from .shovir import shortcut_items

    rows = []
    for key, run in runs.items():
        trials = trials_of({key: run})
        il = image_level(trials, external=False, text=False).frame.set_index(["model", "condition"])
        base, fn = il.loc[(key, "Baseline")], il.loc[(key, "FullNoise")]
        curves = mu_f1_curves(per_class(trials)).frame.set_index(["condition", "p"])["mu_f1"]
        sm = shortcut_metrics(trials, p=p, n_draws=n_draws, rng=np.random.default_rng(seed)).frame.set_index("arm")
        full = trials[trials["condition"] == "FullNoise"]
        positives = int((full[[f"pred.{c}" for c in CHEXPERT_CLASSES[:-1]]] == 1.0).to_numpy().sum())
        oco = trials[trials["condition"] == "OCO"]
        call = _target_called(oco)
        at = {pp: call[np.isclose(oco["p"], pp)].set_axis(pd.MultiIndex.from_frame(
            oco.loc[np.isclose(oco["p"], pp), ["image_id", "target"]])) for pp in (0.0, p)}
        common = at[0.0].index.intersection(at[p].index)
        unchanged = float((at[0.0][common] == at[p][common]).mean()) if len(common) else np.nan
        clean = shortcut_items(trials, model=key, arm="OCO", ref_arm="OCO", p=p, ref_p=0.0)
        clean_counts = ms.shortcut_scores(clean["target"], y=clean["y"], ref=clean["ref"],
                                          pred_ro=clean["pred_ro"], pred_x=clean["pred_x"]) if len(clean) else {}
        ro = shortcut_items(trials, model=key, arm="RO", ref_arm="OCO", p=p, ref_p=0.0)
        rows.append({"model": run.manifest["spec"]["model"], "occluder": occluder_of(run),
                     "n_images": int(base["n_images"]), "n_items": int(len(common)),
                     "f1_base": float(base["f1_14_micro"]), "f1_fn": float(fn["f1_14_micro"]),
                     "delta_fn": float(base["f1_14_micro"] - fn["f1_14_micro"]),
                     "mu_f1_ro": float(curves.get(("RO", p), np.nan)),
                     "mu_f1_oco": float(curves.get(("OCO", p), np.nan)),
                     "delta_oco": float(sm.loc["OCO", "delta"]) if "OCO" in sm.index else np.nan,
                     "fr_oco": float(sm.loc["OCO", "fr"]) if "OCO" in sm.index else np.nan,
                     "n_eligible": int(sm.loc["OCO", "n_eligible"]) if "OCO" in sm.index else 0,
                     "fr_oco_clean": float(clean_counts.get("fr", np.nan)),
                     "n_eligible_clean": int(clean_counts.get("n_eligible", 0)),
                     "ro_changed": int((ro["pred_x"] != ro["pred_ro"]).sum()),
                     "fn_positive_calls": positives, "oco_unchanged": unchanged, "record": key})
    frame = pd.DataFrame(rows)
    values = {}
    if len(frame) and frame["n_images"].nunique() == 1 and frame["n_items"].nunique() == 1:
        values.update({"n_images": int(frame["n_images"].iloc[0]), "n_items": int(frame["n_items"].iloc[0])})
    for r in frame.itertuples():
        k = f"{glue_key(r.model)}.{glue_key(r.occluder)}"
        values.update({f"{k}.delta_fn": r.delta_fn, f"{k}.fr_oco": r.fr_oco, f"{k}.fn_positive_calls": r.fn_positive_calls,
                       f"{k}.fr_oco_clean": r.fr_oco_clean, f"{k}.n_eligible": r.n_eligible,
                       f"{k}.n_eligible_clean": r.n_eligible_clean, f"{k}.ro_changed": r.ro_changed})
    counts = ("n_images", "n_items", "n_eligible", "n_eligible_clean", "ro_changed", "fn_positive_calls")
    return TableResult(frame, values, metrics={"delta_fn": "delta_fn", "delta_oco": "delta_x", "fr_oco": "flip_rate_c",
                                               "fr_oco_clean": "flip_rate_c", "oco_unchanged": "share",
                                               **{c: "count" for c in counts}},
                       labels={"occluder": "occluder", "f1_base": "F1-14 Baseline", "f1_fn": "F1-14 Full Noise",
                               "mu_f1_ro": "μ-F1 RO", "mu_f1_oco": "μ-F1 OCO", "delta_oco": "Δ_OCO",
                               "fr_oco": "FR_OCO (vs RO)", "n_eligible": "n (vs RO)",
                               "fr_oco_clean": "FR_OCO (vs clean)", "n_eligible_clean": "n (vs clean)",
                               "ro_changed": "calls RO changed", "n_images": "images", "n_items": "items",
                               "fn_positive_calls": "positive calls (Full Noise)", "oco_unchanged": "OCO calls unchanged"},
                       index=("model", "occluder"), caption=f"Occluder-type ablation at p = {p:g}.").with_runs(runs)


def glue_key(text: str) -> str:
    """A glue-key component (:func:`shovir_core.tables.shovir.key_part` of the lower-cased text, runs of ``_`` merged).

    >>> glue_key("blurred matched (radius 2, as the authors' code)")
    'blurred_matched_radius_2_as_the_authors_code'
    """
    import re

    from .shovir import key_part

    return re.sub(r"_+", "_", key_part(str(text).lower())).strip("_")


PLANTED_EXPECTATIONS = {
    "cnn_fn_below_baseline": "ref-image-classifier: under every occluder its Full Noise F1_14 is below its Baseline "
                             "F1_14 (the findings it reports no longer come from the image)",
    "cnn_oco_not_above_ro": "ref-image-classifier: under every occluder OCO removes at least as much μ-F1 as RO "
                            "(Δ_OCO ≥ 0; it was trained with occlusion augmentation)",
    "context_oco_unchanged": "ref-context-shortcut: under every occluder OCO at p = 1 leaves every call of the "
                             "target as on the clean image (it never reads the target's own boxes)",
    "context_flat_fills_equal": "ref-context-shortcut: mean fill and black give identical Full Noise reports "
                                "(both flat: it reads texture, not the fill level)",
    "context_texture_turns_calls_off": "ref-context-shortcut: textured fills (matched Gaussian, uniform random) "
                                       "leave no positive call in Full Noise, flat fills (mean, black) leave some",
}
"""What the reference models must show in the ablation (their stated behaviour, checked by
:func:`occluder_checks` and asserted on the page)."""


def occluder_checks(table: TableResult, runs: Mapping[str, Run]) -> dict[str, bool]:
    """Whether each of :data:`PLANTED_EXPECTATIONS` holds in the ablation's records (only those whose
    models are present are checked)."""
    f = table.frame
    out = {}
    cnn = f[f["model"] == "ref-image-classifier"]
    if len(cnn):
        out["cnn_fn_below_baseline"] = bool((cnn["f1_fn"] < cnn["f1_base"]).all())
        out["cnn_oco_not_above_ro"] = bool((cnn["delta_oco"] >= 0).all())
    ctx = f[f["model"] == "ref-context-shortcut"]
    if len(ctx):
        out["context_oco_unchanged"] = bool((ctx["oco_unchanged"] == 1.0).all())
        by = ctx.set_index("occluder")
        reports = {}
        for key in ctx["record"]:
            t = runs[key].trials
            reports[occluder_of(runs[key])] = (t[t["condition"] == "FullNoise"].sort_values("image_id")["generated"]
                                               .tolist())
        if {"mean fill", "black"} <= set(reports):
            out["context_flat_fills_equal"] = reports["mean fill"] == reports["black"]
        textured = [o for o in ("matched Gaussian (paper)", "uniform random (all_noise)") if o in by.index]
        flat = [o for o in ("mean fill", "black") if o in by.index]
        if textured and flat:
            out["context_texture_turns_calls_off"] = bool((by.loc[textured, "fn_positive_calls"] == 0).all()
                                                          and (by.loc[flat, "fn_positive_calls"] > 0).all())
    return out


# -- §C.3 prompt sensitivity -------------------------------------------------------------------
def prompt_sensitivity(runs: Mapping[str, Run], *, n_draws: int = 2000, seed: int = 3,
                       level: float = 0.95) -> TableResult:
    """Baseline F1_14 (micro) per (model, prompt) with image-bootstrap intervals, and the share of
    identical reports between a model's two prompts.

    A record's prompt is ``"default"`` (spec ``prompt: null``: the model's benchmark prompt) or
    ``"shared"`` (any explicit prompt, the Supplementary's shared minimal prompt).
    """
    from ..stats import item_bootstrap

    rows, reports = [], {}
    for key, run in runs.items():
        trials = trials_of({key: run})
        g = trials[trials["condition"] == "Baseline"].sort_values("image_id")
        pred = pd.DataFrame(_binary_frame(_labels(g, "pred")))
        ref = pd.DataFrame(_binary_frame(_labels(g, "ref")))
        data = pd.DataFrame({"image_id": g["image_id"].to_numpy(), "tp": (pred * ref).sum(axis=1).to_numpy(),
                             "fp": (pred * (1 - ref)).sum(axis=1).to_numpy(),
                             "fn": ((1 - pred) * ref).sum(axis=1).to_numpy()})

        def stat(s):
            d = 2 * s["tp"] + s["fp"] + s["fn"]
            return {"f1": np.where(d > 0, 2 * s["tp"] / np.where(d > 0, d, 1), 0.0)}

        res = item_bootstrap(data, sums={"tp": "tp", "fp": "fp", "fn": "fn"}, statistic=stat, n_draws=n_draws,
                             rng=np.random.default_rng(seed), level=level)
        est, lo, hi = res.interval("f1")
        spec = run.manifest["spec"]
        prompt = "default" if spec.get("prompt") is None else "shared"
        rows.append({"model": spec["model"], "prompt": prompt, "prompt_text": spec.get("prompt") or "",
                     "f1": float(est), "f1_lo": float(lo), "f1_hi": float(hi), "n_images": int(len(g))})
        reports[(spec["model"], prompt)] = dict(zip(g["image_id"], g["generated"]))
    frame = pd.DataFrame(rows)
    same = {}
    for model in frame["model"].unique():
        a, b = reports.get((model, "default")), reports.get((model, "shared"))
        if a and b:
            common = sorted(set(a) & set(b))
            same[model] = float(np.mean([a[i] == b[i] for i in common])) if common else np.nan
    frame["identical_reports"] = frame["model"].map(same)
    wide = frame.pivot(index="model", columns="prompt", values="f1")
    values = {}
    for model, row in wide.iterrows():
        if {"default", "shared"} <= set(row.index):
            values[f"{glue_key(model)}.delta_f1"] = float(row["shared"] - row["default"])
        values[f"{glue_key(model)}.identical_reports"] = same.get(model, np.nan)
    return TableResult(frame, values, index=("model", "prompt"), metrics={"f1": "f1_14_micro"},
                       labels={"f1_lo": f"{level:.0%} CI low", "f1_hi": f"{level:.0%} CI high",
                               "identical_reports": "identical reports", "n_images": "images"},
                       caption=f"Baseline F1_14 under each prompt, {level:.0%} image-bootstrap intervals "
                               f"({n_draws} draws).").with_runs(runs)


def _binary_frame(frame: pd.DataFrame) -> dict:
    """0/1 labels per class, uncertain and blank as negative (the Table 1 policy)."""
    return {c: np.nan_to_num(apply_policy(frame[c].to_numpy(dtype=float), "u-negative"), nan=0.0)
            for c in frame.columns}


# -- §C / Table S6 compute cost -----------------------------------------------------------------
def _covers_full_grid(run: Run) -> bool:
    spec = run.manifest["spec"]
    return spec.get("max_per_class") is None and "DOCO" in spec.get("conditions", ())


def _grid_key(run: Run) -> tuple:
    spec = run.manifest["spec"]
    return (spec.get("dataset_sha256"), spec.get("min_count"), str(spec.get("classes")), spec.get("iou_threshold"))


def paper_grid_inputs(run: Run, *, full: Run | None = None) -> int:
    """Distinct model inputs of the paper's full grid on the record's whole dataset, as the protocol runs it:
    every image under Baseline and Full Noise, every class-subset item (classes passing ``min_count``) under RO
    and OCO at the five strengths p > 0 (p = 0 is the Baseline image), and under DOCO only the items the
    protocol keeps (a co-finding box passing the IoU rule; ``counts.doco_dropped`` of the record, counted by
    :func:`shovir_core.protocols.shovir.execute` with :func:`shovir_core.perturb.box_sets`).

    The DOCO drops are read from ``full``, a record on the same dataset and class subsets that ran every item
    under DOCO (``run`` itself when it did); raises ValueError when neither did.
    """
    source = run if _covers_full_grid(run) else full
    if source is None or not _covers_full_grid(source) or _grid_key(source) != _grid_key(run):
        raise ValueError(f"record {run.run_id!r} did not run every item under DOCO and no record on the same "
                         "dataset and class subsets that did was given (full=); its DOCO drops are unknown")
    counts = source.manifest["counts"]
    items = sum(int(counts["class_counts"][c]) for c in counts["classes"])
    doco = items - sum(int((counts.get("doco_dropped") or {}).get(c, 0)) for c in counts["classes"])
    n_images = int((source.manifest.get("dataset") or {}).get("n_images") or counts["n_images"])
    return 2 * n_images + 5 * (2 * items + doco)


def compute_cost(runs: Mapping[str, Run]) -> TableResult:
    """Table S6: seconds per report and reports per hour per (model, device) from the trials' ``gen_seconds``,
    and the projected hours of the paper's full grid on each record's dataset at that rate.

    Only reports generated and timed in the record count (``gen_seconds`` > 0); a report served from the
    inference cache or reused from another trial has no time (NaN) and never counts as 0 s. A record whose
    every report was read from the inference cache (``model_calls`` 0: made again after a code change, say)
    timed nothing; its rate is NaN and ``values["n_untimed"]`` counts it. The full grid is counted by
    :func:`paper_grid_inputs` (DOCO on its eligible items only).
    """
    full = {}
    for run in runs.values():
        if _covers_full_grid(run):
            full.setdefault(_grid_key(run), run)
    rows = []
    for key, run in runs.items():
        t = run.trials
        secs = pd.to_numeric(t["gen_seconds"], errors="coerce") if "gen_seconds" in t else pd.Series(dtype=float)
        timed = secs[secs > 0]  # NaN: served from the inference cache or another trial; never counted as 0 s
        model = run.manifest.get("model") or {}
        device = str(model.get("device") or model.get("device_type") or "cpu")
        spr = float(timed.mean()) if len(timed) else float("nan")
        try:
            grid = paper_grid_inputs(run, full=full.get(_grid_key(run)))
        except ValueError:
            grid = -1
        calls = int(run.manifest["counts"].get("n_model_calls_this_session", -1))
        unique = int(run.manifest["counts"].get("n_unique_inputs", -1))
        # the full grid's cells the record holds: Baseline and Full Noise per image, every item at p > 0 (p = 0 is
        # the Baseline image); two cells can show the same input (a random box that found no place beside the
        # annotated ones leaves the clean image), which is generated once
        cells = int((t["condition"].isin(["Baseline", "FullNoise"]) | (pd.to_numeric(t["p"]) > 0)).sum()) \
            if _covers_full_grid(run) else -1
        rows.append({"model": run.manifest["spec"]["model"], "device": device, "model_calls": calls,
                     "reports_timed": int(len(timed)),
                     "seconds_per_report": spr, "reports_per_hour": 3600.0 / spr if spr > 0 else float("nan"),
                     "grid_inputs": grid if grid >= 0 else np.nan,
                     "projected_hours": grid * spr / 3600.0 if spr == spr and grid >= 0 else float("nan"),
                     "unique_inputs": unique, "grid_cells": cells if cells >= 0 else np.nan,
                     "coinciding_inputs": cells - unique if cells >= 0 and unique >= 0 else np.nan,
                     "full_grid": _covers_full_grid(run), "record": key})
    frame = pd.DataFrame(rows)
    values = {"n_untimed": int((frame["reports_timed"] == 0).sum()) if len(frame) else 0}
    for r in frame.itertuples():
        k = glue_key(r.model)
        values.update({f"{k}.seconds_per_report": r.seconds_per_report, f"{k}.projected_hours": r.projected_hours})
    values["grid_inputs"] = int(frame["grid_inputs"].max()) if len(frame) and frame["grid_inputs"].notna().any() else 0
    values["coinciding_inputs"] = int(frame["coinciding_inputs"].max()) \
        if len(frame) and frame["coinciding_inputs"].notna().any() else 0
    return TableResult(frame, values, metrics={"model_calls": "count", "reports_timed": "count",
                                               "seconds_per_report": "seconds_per_report",
                                               "reports_per_hour": "reports_per_hour", "grid_inputs": "count",
                                               "projected_hours": "hours", "unique_inputs": "count",
                                               "grid_cells": "count", "coinciding_inputs": "count"},
                       labels={"model_calls": "model calls", "reports_timed": "reports timed",
                               "grid_inputs": "full-grid reports", "unique_inputs": "distinct inputs of the record",
                               "grid_cells": "full-grid cells of the record",
                               "coinciding_inputs": "cells sharing another cell's input",
                               "full_grid": "record runs the full grid"},
                       index=("model", "device"),
                       caption="Generation cost per model and device.").with_runs(runs)
