"""The Perturbations chapter's tables, from the trials of a ``perturbations`` record.

Box sets B_c / B_c̄ and the DOCO drop rule (ShoViR §3.2), the image-swap substitutes by tier
(ModaLens §2, "Sampling the discordant image") and the noise statistics of the gallery images. Every function
returns a :class:`~shovir_core.tables.result.TableResult` whose ``values`` are glue keys without the
``pt.`` namespace.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..perturb.report import rows_of_kind
from ..vocab import TIERS
from .result import TableResult

__all__ = ["box_set_counts", "tier_counts", "noise_table"]


def box_set_counts(trials: pd.DataFrame) -> TableResult:
    """Per target class: images, ``|B_c|``, ``|B_c̄|`` after the IoU rule, boxes dropped, DOCO items.

    Frame (index ``class``): ``images`` (images with a box of the class), ``B_c boxes``,
    ``B_cbar boxes`` (kept by the IoU rule), ``dropped by IoU`` (co-finding boxes removed),
    ``DOCO items`` (images with a non-empty ``B_c̄``) and ``DOCO dropped`` (images without); a
    ``total`` row sums them. ``values``: ``boxes.n_items``, ``boxes.n_doco_items``,
    ``boxes.n_doco_dropped``, ``boxes.n_dropped_iou`` (the totals).
    """
    b = rows_of_kind(trials, "box_sets").assign(doco_dropped=lambda d: d["doco_dropped"].astype(bool))
    table = b.groupby("target").agg(
        images=("image_id", "size"),
        **{"B_c boxes": ("n_target_boxes", "sum"), "B_cbar boxes": ("n_other_boxes", "sum"),
           "dropped by IoU": ("n_dropped_iou", "sum")},
        **{"DOCO dropped": ("doco_dropped", "sum")},
    )
    table["DOCO items"] = table["images"] - table["DOCO dropped"]
    table = table[["images", "B_c boxes", "B_cbar boxes", "dropped by IoU", "DOCO items", "DOCO dropped"]]
    table = table.astype(int)
    table.loc["total"] = table.sum()
    table.index.name = "class"
    total = table.loc["total"]
    values = {"boxes.n_items": int(total["images"]), "boxes.n_doco_items": int(total["DOCO items"]),
              "boxes.n_doco_dropped": int(total["DOCO dropped"]), "boxes.n_dropped_iou": int(total["dropped by IoU"])}
    return TableResult(table, values, metrics={c: "count" for c in table.columns},
                       labels={**{c: c for c in table.columns}, "B_cbar boxes": "B_c̄ boxes"},
                       caption="Box sets per target class and the items DOCO keeps.")


def tier_counts(trials: pd.DataFrame) -> TableResult:
    """Substitute accounting per tier (index ``tier``; 0 = no substitute): cases, share, same/cross
    patient, SSIM rejections, SSIM quartiles.

    ``values``: ``swap.n_cases``, ``swap.n_none``, ``swap.tier1`` .. ``swap.tier3``,
    ``swap.n_rejected`` (candidates rejected by the SSIM rule) and the SSIM quartiles and maximum
    over every pair (``swap.ssim.q1``, ``.median``, ``.q3``, ``.max``).
    """
    s = rows_of_kind(trials, "substitute")
    s = s.assign(tier=s["tier"].astype(int))
    rows = []
    for t, name in enumerate(TIERS, start=1):
        sub = s[s["tier"] == t]
        q = sub["ssim"].quantile([0.25, 0.5, 0.75]) if len(sub) else pd.Series([np.nan] * 3)
        rows.append({
            "tier": t, "rule": name, "cases": len(sub), "share": len(sub) / len(s),
            "same-patient": int((sub["pair_type"] == "same-patient").sum()),
            "cross-patient": int((sub["pair_type"] == "cross-patient").sum()),
            "rejected (SSIM)": int(sub["n_rejected_ssim"].sum()),
            "SSIM q1": q.iloc[0], "SSIM median": q.iloc[1], "SSIM q3": q.iloc[2],
        })
    none = s[s["tier"] == 0]
    rows.append({"tier": 0, "rule": "no substitute", "cases": len(none), "share": len(none) / len(s),
                 "same-patient": 0, "cross-patient": 0, "rejected (SSIM)": int(none["n_rejected_ssim"].sum()),
                 "SSIM q1": np.nan, "SSIM median": np.nan, "SSIM q3": np.nan})
    frame = pd.DataFrame(rows).set_index("tier")
    values = {"swap.n_cases": int(len(s)), "swap.n_none": int(frame.loc[0, "cases"]),
              **{f"swap.tier{t}": int(frame.loc[t, "cases"]) for t in (1, 2, 3)},
              "swap.n_rejected": int(s["n_rejected_ssim"].sum()),
              **{f"swap.ssim.{name}": float(s["ssim"].quantile(q)) for name, q in (("q1", .25), ("median", .5),
                                                                                   ("q3", .75))},
              "swap.ssim.max": float(s["ssim"].max())}
    metrics = {**{c: "count" for c in ("cases", "same-patient", "cross-patient", "rejected (SSIM)")},
               "share": "share", **{c: "ssim" for c in ("SSIM q1", "SSIM median", "SSIM q3")}}
    return TableResult(frame, values, metrics=metrics, labels={**{c: c for c in metrics}, "share": "share of cases"},
                       caption="Image-swap substitutes by tier.")


def noise_table(gallery: pd.DataFrame) -> TableResult:
    """Noise statistics of the gallery's Full Noise and OCO (p = 1) outputs, per preset.

    Frame (index ``preset, condition``): the statistics region, pixels used, trimming
    percentiles, the trimmed mean / median / SD, the centre and scale of the Gaussian, and the
    first 12 hex digits of the output's SHA-256. ``gallery``:
    :func:`shovir_core.perturb.report.gallery_frame`. ``values``: ``gallery.<preset>.noise_mean``
    and ``.noise_std`` (centre and scale of each preset's Full Noise image).
    """
    g = gallery[gallery["condition"].isin(["FullNoise", "OCO"]) & (gallery["p"] == 1.0)]
    rows = []
    for r in g.itertuples():
        n = json.loads(r.info)["noise"]
        rows.append({"preset": r.preset, "condition": r.condition, "region": n["region"],
                     "pixels": n["n_pixels"], "P_low": n["p_low"][0], "P_high": n["p_high"][0],
                     "trimmed mean": n["mean"][0], "trimmed median": n["median"][0], "trimmed SD": n["std"][0],
                     "centre": n["center"][0], "scale": n["scale"][0], "sha256": r.sha256[:12]})
    frame = pd.DataFrame(rows).set_index(["preset", "condition"])
    values = {}
    for (preset, cond), row in frame.iterrows():
        if cond == "FullNoise":
            values[f"gallery.{preset}.noise_mean"] = float(row["centre"])
            values[f"gallery.{preset}.noise_std"] = float(row["scale"])
    metrics = {"pixels": "count", **{c: "intensity" for c in ("P_low", "P_high", "trimmed mean", "trimmed median",
                                                              "trimmed SD", "centre", "scale")}}
    return TableResult(frame, values, metrics=metrics,
                       labels={**{c: c for c in metrics}, "sha256": "SHA-256 (first 12)"},
                       caption="Noise statistics of the Full Noise and OCO (p = 1) gallery images, per preset.")
