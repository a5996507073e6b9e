"""Tables of residual patching and steering (ModaLens App. N.2 patching, N.3 Table 25) from
``modalens-interventions`` records (:mod:`shovir_core.protocols.modalens_interventions`).

* :func:`patching_table` -- per donor (correct / wrong), scope (answer position / common suffix) and
  patched layer: the flip rate of the patched report-present run, the share of the *restorable*
  trials (they flip without the report and not with it) that flip once patched ("flips restored"),
  and the share of image sides whose patched answer equals the trial's own report-absent answer,
  each with a patient-clustered bootstrap interval;
* :func:`steering_table` -- Table 25: on the same-answer test trials, the tracks-substitute rate
  (the steered answer on the substituted image matches that image's answer key) and the
  degradation (the share of answers correct on the source image before steering that are wrong
  after it), per steering layer, variant (difference-of-means direction, random direction of the
  same norm, every-layer injection) and scale; the paper's columns (largest scale, one layer) are
  the ``t25.*`` values.

Both return a :class:`~shovir_core.tables.result.TableResult`; :data:`PAPER_KEYS` maps run values
to the published ids of ModaLens App. N.2-N.3.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..metrics.arms import rate_interval
from .result import TableResult

__all__ = ["patching_table", "steering_table", "PAPER_KEYS", "STEER_LABELS"]

STEER_LABELS = {"dom": "difference of means", "random": "random direction (same norm)",
                "every_layer": "every-layer injection"}
"""Display names of the steering variants."""


def _with_bounds(metrics: dict) -> dict:
    """Each estimate's metric also for its ``_lo`` / ``_hi`` columns (intervals in the estimate's unit)."""
    return {**metrics, **{f"{c}_{end}": m for c, m in metrics.items() for end in ("lo", "hi")}}


def _yes(margin: pd.Series) -> np.ndarray:
    return margin.to_numpy(dtype=float) > 0


def patching_table(trials: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """Flip rate, flips restored and absent-answer agreement per donor, scope and layer (see the module)."""
    t = trials[trials["arm"] == "patching"]
    if t.empty:
        raise ValueError("patching_table: the record has no patching rows")
    first = t.drop_duplicates("base_trial_id")
    p_flip = _yes(first["base_margin_c"]) != _yes(first["base_margin_d"])
    a_flip = _yes(first["absent_margin_c"]) != _yes(first["absent_margin_d"])
    restorable_ids = set(first["base_trial_id"][a_flip & ~p_flip])
    values = {"n_trials": int(len(first)), "n_patients": int(first["patient_id"].nunique()),
              "n_restorable": len(restorable_ids)}
    for arm, flips in (("present", p_flip), ("absent", a_flip)):
        r = rate_interval(first, flips, n_draws=n_draws, seed=seed)
        values.update({f"{arm}.flip_rate": r["estimate"], f"{arm}.flip_lo": r["lo"], f"{arm}.flip_hi": r["hi"]})
    rows = []
    for (donor, scope, layer), g in t.groupby(["donor", "scope", "layer"], sort=True):
        yc, yd = _yes(g["margin_c"]), _yes(g["margin_d"])
        flip = rate_interval(g, yc != yd, n_draws=n_draws, seed=seed)
        restorable = g["base_trial_id"].isin(restorable_ids).to_numpy()
        restored = rate_interval(g, yc != yd, n_draws=n_draws, seed=seed, valid=restorable)
        agree = ((yc == _yes(g["absent_margin_c"])).astype(float) + (yd == _yes(g["absent_margin_d"]))) / 2
        ag = rate_interval(g, agree, n_draws=n_draws, seed=seed)
        row = {"donor": donor, "scope": scope, "layer": int(layer), "n_trials": int(len(g)),
               "flip_rate": flip["estimate"], "flip_lo": flip["lo"], "flip_hi": flip["hi"],
               "restored": restored["estimate"], "restored_lo": restored["lo"], "restored_hi": restored["hi"],
               "absent_agreement": ag["estimate"], "agreement_lo": ag["lo"], "agreement_hi": ag["hi"],
               "n_patched_mean": float(np.mean(np.r_[g["n_patched_c"], g["n_patched_d"]]))}
        rows.append(row)
        key = f"{donor}.{scope}.L{int(layer)}"
        for m in ("flip_rate", "flip_lo", "flip_hi", "restored", "restored_lo", "restored_hi", "absent_agreement",
                  "agreement_lo", "agreement_hi", "n_patched_mean"):
            values[f"{key}.{m}"] = row[m]
    frame = pd.DataFrame(rows)
    values["first_layer"], values["last_layer"] = int(frame["layer"].min()), int(frame["layer"].max())
    for (donor, scope), g in frame.groupby(["donor", "scope"]):  # profile-independent names of the two ends
        for end, layer in (("first", values["first_layer"]), ("last", values["last_layer"])):
            row = g[g["layer"] == layer]
            if len(row):
                for m in ("flip_rate", "flip_lo", "flip_hi", "restored", "restored_lo", "restored_hi",
                          "absent_agreement", "agreement_lo", "agreement_hi"):
                    values[f"{donor}.{scope}.{end}.{m}"] = float(row[m].iloc[0])
    c = frame[frame["donor"] == "correct"].pivot(index="layer", columns="scope", values="restored")
    if {"answer", "suffix"} <= set(c.columns):
        beats = [str(int(x)) for x in c.index[c["suffix"] > c["answer"]]]
        values["correct.suffix_over_answer_layers"] = ", ".join(beats) if beats else "none"
    for donor, g in frame.groupby("donor"):
        top = g.loc[g["flip_rate"].idxmax()]
        values.update({f"{donor}.max_flip_rate": float(top["flip_rate"]), f"{donor}.max_flip_lo": float(top["flip_lo"]),
                       f"{donor}.max_flip_hi": float(top["flip_hi"]), f"{donor}.max_flip_layer": int(top["layer"]),
                       f"{donor}.max_flip_scope": str(top["scope"])})
    frame = frame.rename(columns={"flip_lo": "flip_rate_lo", "flip_hi": "flip_rate_hi",
                                  "agreement_lo": "absent_agreement_lo", "agreement_hi": "absent_agreement_hi"})
    return TableResult(frame, values=values,
                       metrics=_with_bounds({"flip_rate": "flip_rate", "restored": "share", "absent_agreement": "agreement"}),
                       labels={"donor": "donor", "scope": "patched positions", "layer": "patched layer",
                               "n_trials": "trials", "restored": "flips restored",
                               "absent_agreement": "= own report-absent answer",
                               "n_patched_mean": "positions patched (mean)"},
                       caption="Residual patching: the report-absent residual (correct donor: same image; wrong "
                               "donor: another patient's images) replaces the report-present run's after a decoder "
                               "layer, at the answer position or over the longest common token suffix.")


def steering_table(trials: pd.DataFrame, *, n_draws: int, seed: int, layer: int | None = None,
                   scale: float | None = None) -> TableResult:
    """Table 25 per layer, variant and scale; ``t25.*`` values at ``layer`` (default: the last steered
    layer) and ``scale`` (default: the largest), the paper's columns."""
    t = trials[(trials["arm"] == "steering") & trials["same_answer"].astype(bool) & trials["target_d"].notna()
               & trials["target_c"].notna()]
    if t.empty:
        raise ValueError("steering_table: the record has no same-answer steering rows with answer keys")
    rows, values = [], {}
    for (lay, variant, sc), g in t.groupby(["layer", "variant", "scale"], sort=True):
        tracks = _yes(g["margin_d"]) == (g["target_d"].to_numpy() == 1)
        base_tracks = _yes(g["base_margin_d"]) == (g["target_d"].to_numpy() == 1)
        correct = _yes(g["base_margin_c"]) == (g["target_c"].to_numpy() == 1)
        broken = _yes(g["margin_c"]) != (g["target_c"].to_numpy() == 1)
        tr = rate_interval(g, tracks, n_draws=n_draws, seed=seed)
        dg = rate_interval(g, broken, n_draws=n_draws, seed=seed, valid=correct)
        rows.append({"layer": int(lay), "variant": variant, "scale": float(sc), "n_trials": int(len(g)),
                     "n_tracks": int(tracks.sum()), "tracks_rate": tr["estimate"], "tracks_lo": tr["lo"],
                     "tracks_hi": tr["hi"], "change": int(tracks.sum() - base_tracks.sum()),
                     "n_correct": int(correct.sum()), "degradation": dg["estimate"], "degradation_lo": dg["lo"],
                     "degradation_hi": dg["hi"], "direction_norm": float(g["direction_norm"].iloc[0])})
    frame = pd.DataFrame(rows)
    for r in rows:
        key = f"{r['variant']}.L{r['layer']}.s{r['scale']:g}"
        for m in ("tracks_rate", "tracks_lo", "tracks_hi", "n_tracks", "change", "degradation", "degradation_lo",
                  "degradation_hi"):
            values[f"{key}.{m}"] = r[m]
    layer = int(frame["layer"].max()) if layer is None else int(layer)
    scale = float(frame["scale"].max()) if scale is None else float(scale)
    head = frame[(frame["layer"] == layer) & (frame["scale"] == scale)].set_index("variant")
    zero = frame[(frame["layer"] == layer) & (frame["scale"] == frame["scale"].min())].iloc[0]
    if head.empty:
        raise ValueError(f"steering_table: no rows at layer {layer}, scale {scale:g}")
    base = t[(t["layer"] == layer) & (t["variant"] == head.index[0]) & (t["scale"] == scale)]
    base_tracks = _yes(base["base_margin_d"]) == (base["target_d"].to_numpy() == 1)
    ub = rate_interval(base, base_tracks, n_draws=n_draws, seed=seed)
    values.update({"t25.layer": layer, "t25.scale": scale, "t25.n_trials": int(len(base)),
                   "t25.n_patients": int(base["patient_id"].nunique()),
                   "t25.n_correct": int((_yes(base["base_margin_c"]) == (base["target_c"].to_numpy() == 1)).sum()),
                   "t25.unsteered.n_tracks": int(base_tracks.sum()), "t25.unsteered.tracks_rate": ub["estimate"],
                   "t25.unsteered.tracks_lo": ub["lo"], "t25.unsteered.tracks_hi": ub["hi"],
                   "t25.zero_scale": float(zero["scale"]), "t25.direction_norm": float(head["direction_norm"].iloc[0])})
    for variant, r in head.iterrows():
        values.update({f"t25.{variant}.{m}": r[m] for m in ("n_tracks", "tracks_rate", "tracks_lo", "tracks_hi",
                                                             "change", "degradation", "degradation_lo",
                                                             "degradation_hi")})
        values[f"t25.{variant}.n_down"] = int(-r["change"])
    frame.insert(2, "direction", frame["variant"].map(STEER_LABELS))
    frame = frame.drop(columns="variant").rename(columns={"tracks_lo": "tracks_rate_lo", "tracks_hi": "tracks_rate_hi"})
    return TableResult(frame, values=values,
                       metrics=_with_bounds({"tracks_rate": "proportion", "degradation": "proportion"}),
                       labels={"layer": "steered layer", "direction": "direction", "scale": "scale",
                               "n_trials": "trials", "n_tracks": "tracking trials",
                               "tracks_rate": "tracks-substitute rate", "change": "change (trials)",
                               "n_correct": "originally correct", "degradation": "degradation",
                               "direction_norm": "direction norm"},
                       caption="Table 25: difference-of-means steering toward each image's answer key on the "
                               "same-answer test trials: tracks-substitute rate and degradation of answers that "
                               "were correct on the source image, against a random direction of the same norm "
                               "and an every-layer injection.")


PAPER_KEYS: dict[str, str] = {
    "patch.wrong.max_flip_rate": "n2.wrong_donor",
    "patch.correct.max_flip_rate": "n2.correct_donor_max",
    "steer.t25.n_trials": "n3.trials",
    "steer.t25.unsteered.n_tracks": "n3.unsteered",
    "steer.t25.unsteered.tracks_rate": "n3.unsteered_rate",
    "steer.t25.dom.n_tracks": "n3.steered",
    "steer.t25.dom.tracks_rate": "n3.steered_rate",
    "steer.t25.dom.change": "n3.change",
    "steer.t25.every_layer.n_down": "n3.every_down",
    "steer.t25.random.n_down": "n3.random_down",
    "steer.t25.n_correct": "n3.correct",
    "steer.t25.dom.degradation": "n3.degr_dom",
    "steer.t25.every_layer.degradation": "n3.degr_every",
    "steer.t25.random.degradation": "n3.degr_random",
}
"""Run value key (``patch.`` + :func:`patching_table` values, ``steer.`` + :func:`steering_table` values) ->
published value id (ModaLens App. N.2-N.3, Table 25)."""
