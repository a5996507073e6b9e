"""ModaLens Appendix K (Table 24): the label-changed split redone with an image classifier.

The report-derived label split says whether the *reports* of the two studies disagree; the
surrogate split asks an image classifier whether the *images* do. Per trial whose question has a
classifier score, the classifier is called on the source and the substitute image
(:func:`~shovir_core.metrics.surrogate.surrogate_call`); a trial is a **predicted change** when the
two calls differ, a **predicted preservation** when they agree, and **excluded** when either score
lies inside the band. Flip rates on predicted changes vs preservations, per arm (report present P,
absent A), with patient-clustered intervals; trials on questions without a head lie outside the
denominator (the paper: pleural other and support devices, 6,398 trials).

Paper values (App. K, MedGemma-27B, TorchXRayVision): 38,388 trials; primary rule 2,249 change /
22,469 preservation / 13,670 excluded, A flips about 3x more often on predicted changes; the
report-derived split shows 4.55 vs 4.69 (P) and 16.91 vs 17.68 (A). Raw-probability rule: 4,706 /
24,441 / 9,241, FR P 7.44 % vs 3.64 %, FR A 31.24 % vs 13.82 %.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, pair_arms
from ..metrics.modalens import auroc
from ..metrics.surrogate import surrogate_call
from ..stats import cluster_bootstrap
from .result import TableResult

__all__ = ["surrogate_split", "surrogate_table", "head_validity", "record_scores", "PAPER_KEYS"]

PAPER_KEYS: dict[str, str] = {
    "t24.n_trials": "k.trials", "t24.n_change": "k.change", "t24.n_preserve": "k.preserve",
    "t24.n_excluded": "k.excluded", "t24.n_unmapped": "k.unmapped_trials",
    "t24raw.n_change": "k.raw.change", "t24raw.n_preserve": "k.raw.preserve", "t24raw.n_excluded": "k.raw.excluded",
    "t24raw.P.fr_change": "k.raw.fr_P_change", "t24raw.A.fr_change": "k.raw.fr_A_change",
    "t24raw.P.fr_preserve": "k.raw.fr_P_preserve", "t24raw.A.fr_preserve": "k.raw.fr_A_preserve",
    "t24.P.fr_label_changed": "k.report_split_P_change", "t24.P.fr_label_unchanged": "k.report_split_P_preserve",
    "t24.A.fr_label_changed": "k.report_split_A_change", "t24.A.fr_label_unchanged": "k.report_split_A_preserve",
    "n_images": "k.shown_images",
}
"""Run value key (the App. K chapter's values) -> published value id (paper ``modalens``, App. K / Table 24)."""


def record_scores(trials: pd.DataFrame) -> dict[str, dict[str, dict[str, float]]]:
    """``{kind: {image_id: {question: score}}}`` from a ``modalens-surrogate`` record's rows.

    >>> rows = pd.DataFrame({"image_id": ["a", "a"], "kind": ["normalised", "raw"],
    ...                      "scores": ['{"Edema": 0.7}', '{"Edema": 0.2}']})
    >>> record_scores(rows)["raw"]["a"]
    {'Edema': 0.2}
    """
    import json

    out: dict[str, dict[str, dict[str, float]]] = {}
    for image, kind, scores in zip(trials["image_id"], trials["kind"], trials["scores"]):
        out.setdefault(kind, {})[image] = {q: float(v) for q, v in json.loads(scores).items()}
    return out


def surrogate_split(trials: pd.DataFrame, scores: Mapping[str, Mapping[str, float]], *, threshold: float = 0.5,
                    band: float = 0.1) -> pd.DataFrame:
    """Each trial's surrogate calls and split: ``split`` = change / preserve / excluded / unmapped.

    ``scores`` maps an image id to ``{question: score}`` (the surrogate's normalised or raw scores);
    a question absent from an image's scores is unmapped.
    """
    for col in ("image_id", "sub_image_id", "finding"):
        if col not in trials.columns:
            raise ValueError(f"surrogate_split: trials lack column {col!r}")
    missing = sorted(set(trials["image_id"]).union(trials["sub_image_id"]) - set(scores))
    if missing:
        raise ValueError(f"surrogate_split: no scores for {len(missing)} image(s), e.g. {missing[0]!r}")
    sc = np.array([scores[i].get(f, np.nan) for i, f in zip(trials["image_id"], trials["finding"])], dtype=float)
    sd = np.array([scores[i].get(f, np.nan) for i, f in zip(trials["sub_image_id"], trials["finding"])], dtype=float)
    cc, cd = surrogate_call(sc, threshold=threshold, band=band), surrogate_call(sd, threshold=threshold, band=band)
    unmapped = np.isnan(sc) | np.isnan(sd)
    excluded = ~unmapped & (np.isnan(cc) | np.isnan(cd))
    split = np.where(unmapped, "unmapped", np.where(excluded, "excluded", np.where(cc != cd, "change", "preserve")))
    out = trials.copy()
    out["surrogate_c"], out["surrogate_d"], out["split"] = cc, cd, split
    return out


def surrogate_table(present: pd.DataFrame, absent: pd.DataFrame, scores: Mapping[str, Mapping[str, float]], *,
                    n_draws: int, seed: int, readout: str = "lowercase", threshold: float = 0.5, band: float = 0.1,
                    key: str = "t24") -> TableResult:
    """Table 24 for one rule: split counts and flip rates on predicted changes vs preservations, P and A.

    Values: ``<key>.n_change``, ``n_preserve``, ``n_excluded``, ``n_unmapped``, ``n_trials`` (mapped);
    per arm ``<key>.<P|A>.fr_change`` / ``fr_preserve`` / ``diff_pp`` with intervals; the
    report-derived split beside it (``<key>.<arm>.fr_label_changed`` / ``fr_label_unchanged``).
    """
    p, a = pair_arms(present, absent, names=["present", "absent"])
    s = surrogate_split(p, scores, threshold=threshold, band=band)
    counts = s["split"].value_counts()
    kept = s["split"].isin(["change", "preserve"]).to_numpy()
    ch = (s["split"] == "change").to_numpy()[kept].astype(float)
    lab = p["label_changed"].to_numpy(dtype=float)[kept]
    frame = {"patient_id": p["patient_id"].to_numpy()[kept], "ch": ch, "pr": 1 - ch, "lc": lab, "lu": 1 - lab}
    for arm, t in (("P", p), ("A", a)):
        yc, yd, valid = answers(t, readout)
        if not valid.all():
            raise ValueError(f"surrogate_table: {int((~valid).sum())} unscoreable answers in arm {arm}; "
                             "use a logit readout")
        f = (yc != yd).astype(float)[kept]
        frame.update({f"{arm}_f_ch": f * ch, f"{arm}_f_pr": f * (1 - ch), f"{arm}_f_lc": f * lab,
                      f"{arm}_f_lu": f * (1 - lab)})
    frame = pd.DataFrame(frame)

    def _div(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y > 0, x / np.where(y > 0, y, 1), np.nan)

    def statistic(t):
        out = {}
        for arm in ("P", "A"):
            out[f"{arm}.fr_change"] = _div(t[f"{arm}_f_ch"], t["ch"])
            out[f"{arm}.fr_preserve"] = _div(t[f"{arm}_f_pr"], t["pr"])
            out[f"{arm}.diff"] = out[f"{arm}.fr_change"] - out[f"{arm}.fr_preserve"]
            out[f"{arm}.ratio"] = _div(out[f"{arm}.fr_change"], out[f"{arm}.fr_preserve"])
            out[f"{arm}.fr_label_changed"] = _div(t[f"{arm}_f_lc"], t["lc"])
            out[f"{arm}.fr_label_unchanged"] = _div(t[f"{arm}_f_lu"], t["lu"])
        out["A_minus_P"] = out["A.diff"] - out["P.diff"]
        return out

    res = cluster_bootstrap(frame, cluster="patient_id", sums={c: c for c in frame.columns if c != "patient_id"},
                            statistic=statistic, n_draws=n_draws, rng=np.random.default_rng(seed))
    values = {f"{key}.n_{k}": int(counts.get(k, 0)) for k in ("change", "preserve", "excluded", "unmapped")}
    values[f"{key}.n_trials"] = int(len(s) - counts.get("unmapped", 0))
    rows = []
    for arm in ("P", "A"):
        for stat, label in (("fr_change", "FR, predicted change"), ("fr_preserve", "FR, predicted preservation"),
                            ("diff", "difference (change − preservation)"), ("ratio", "ratio"),
                            ("fr_label_changed", "FR, report label changed"),
                            ("fr_label_unchanged", "FR, report label unchanged")):
            est, lo, hi = res.interval(f"{arm}.{stat}")
            scale = 100.0 if stat == "diff" else 1.0
            lo_key, hi_key = (("diff_lo_pp", "diff_hi_pp") if stat == "diff" else (f"{stat}_lo", f"{stat}_hi"))
            values.update({f"{key}.{arm}.{'diff_pp' if stat == 'diff' else stat}": scale * est,
                           f"{key}.{arm}.{lo_key}": scale * lo, f"{key}.{arm}.{hi_key}": scale * hi})
            rows.append({"arm": arm, "quantity": label, "metric": _ROW_METRIC[stat], "estimate": est, "lo": lo, "hi": hi})
    est, lo, hi = res.interval("A_minus_P")
    values.update({f"{key}.a_minus_p_pp": 100 * est, f"{key}.a_minus_p_lo_pp": 100 * lo,
                   f"{key}.a_minus_p_hi_pp": 100 * hi, f"{key}.n_draws": int(n_draws)})
    rows.append({"arm": "A − P", "quantity": "difference of differences", "metric": "paired_diff", "estimate": est,
                 "lo": lo, "hi": hi})
    caption = (f"Surrogate split (threshold {threshold}, exclusion band ±{band}): {values[f'{key}.n_change']} predicted "
               f"changes, {values[f'{key}.n_preserve']} preservations, {values[f'{key}.n_excluded']} excluded; "
               f"{n_draws} draws.")
    # the "metric" column formats each row by its quantity: flip rates in %, differences in pp, ratios as x
    return TableResult(pd.DataFrame(rows), values, labels={"lo": "2.5%", "hi": "97.5%"}, caption=caption,
                       index=("arm", "quantity"))


_ROW_METRIC = {"fr_change": "flip_rate", "fr_preserve": "flip_rate", "diff": "paired_diff", "ratio": "ratio",
               "fr_label_changed": "flip_rate", "fr_label_unchanged": "flip_rate"}
"""Table 24 quantity -> metric of resources/metrics.yaml."""


def head_validity(trials: pd.DataFrame, scores: Mapping[str, Mapping[str, float]], *,
                  threshold: float = 0.5) -> TableResult:
    """Per question, the surrogate's AUROC against the source images' report labels, its
    positive-call rate and the label prevalence (one row per source image and question)."""
    per_image = trials.drop_duplicates(["image_id", "finding"])
    rows, values = [], {}
    for q, g in per_image.groupby("finding", sort=False):
        s = np.array([scores[i].get(q, np.nan) for i in g["image_id"]], dtype=float)
        t = g["target_c"].to_numpy(dtype=float)
        keep = ~(np.isnan(s) | np.isnan(t))
        if not keep.any():
            continue
        s, t = s[keep], t[keep]
        au = auroc(s, t) if 0 < t.sum() < len(t) else float("nan")
        rows.append({"question": q, "images": int(keep.sum()), "auroc": au, "call_rate": float((s >= threshold).mean()),
                     "prevalence": float(t.mean())})
        values.update({f"{q}.auroc": au, f"{q}.call_rate": float((s >= threshold).mean()), f"{q}.prevalence": float(t.mean())})
    return TableResult(pd.DataFrame(rows), values,
                       metrics={"images": "count", "auroc": "auroc", "call_rate": "share", "prevalence": "prevalence"},
                       labels={"question": "question", "images": "images", "auroc": "AUROC",
                               "call_rate": "positive-call rate", "prevalence": "prevalence"})
