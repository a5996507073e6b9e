"""Datasets without a report (ModaLens Table 6, §4.1, §4.3 / Table 9, App. N.4 and the appendix's "other records").

Pure functions of ``modalens-noreport`` records (:mod:`shovir_core.protocols.noreport`): one
frame of trials per (dataset, model), the estimates on the *admissible* pairs (the protocol's
leakage rule), intervals from the percentile bootstrap clustered by **source image** (the
resampling unit of these datasets: they have no patients), all computed by
:func:`shovir_core.stats.bootstrap_rates`.

Value keys: ``nr.<dataset>.<model>.<quantity>`` (``dataset`` in :data:`DATASET_KEYS`, ``model`` the
registry name with ``-`` as ``_``); :data:`PAPER_KEYS` maps the chapter's primary model's keys to the
paper's published ids.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.agreement import cohen_kappa
from ..metrics.arms import put_interval
from ..stats import bootstrap_rates
from .result import TableResult

__all__ = ["DATASET_KEYS", "TABLE6", "flips", "swap_summary", "tier_table", "symmetry_table", "map_generated",
           "open_ended", "label_audit", "omni_key_audit", "knockout_table", "table9", "accuracy_vs_majority",
           "table6", "model_key", "paper_keys", "FLOOR", "TABLE9_ORDER", "dataset_values", "models_table",
           "planted_failures", "other_paper_keys", "tiers_frame", "symmetry_frame",
           "knockout_frame", "AUDIT_PREFIXES"]

DATASET_KEYS = {"VQA-RAD": "vqarad", "SLAKE": "slake", "OmniMedVQA": "omni", "ProbMed": "probmed"}
TABLE6 = {
    "VQA-RAD": {"readout": "final-token yes/no", "licence": "CC0 1.0"},
    "SLAKE": {"readout": "final-token yes/no", "licence": "CC BY-SA 4.0"},
    "OmniMedVQA": {"readout": "option letter (A-D)", "licence": "per source dataset"},
    "ProbMed": {"readout": "final-token yes/no", "licence": "per source (MedICaT, ChestX-ray14)"},
}
"""ModaLens Table 6's readout per dataset (§2, "Other datasets") and each release's licence."""
AUDIT_PREFIXES = ("vqarad.", "n4.", "o.omni.", "o.slake.", "o.vqarad.")
"""Audit checks of these sections (ModaLens Part E checks 36-38 and the N.4 / other-record identities)."""
FLOOR = 0.5
"""The first-token probability an open-ended answer must reach to count (the paper's 0.5 floor)."""
TABLE9_ORDER = (("Organ", "organ"), ("Modality", "modality"), ("Abnormal", "abnormality"), ("KG", "kg"))
"""SLAKE ``content_type`` -> Table 9 row key."""


def model_key(name: str) -> str:
    """``ref-vlm-vqarad`` -> ``ref_vlm_vqarad`` (a glue-key part)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")


def flips(t: pd.DataFrame) -> np.ndarray:
    """1 where the answer moved between side c and side d (option text for four-option questions)."""
    return (t["choice_c"].astype(str) != t["choice_d"].astype(str)).to_numpy(float)


def _arm(trials: pd.DataFrame, arm: str, *, admissible: bool = True) -> pd.DataFrame:
    t = trials[trials["arm"] == arm]
    return t[t["admissible"]] if admissible else t


def _frame(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"image_id": t["image_id"].to_numpy(), "flip": flips(t),
                         "correct_c": (t["readout_c"] == t["key_c"]).to_numpy(float),
                         "correct_d": (t["readout_d"] == t["key_d"]).to_numpy(float),
                         "changed": t["key_changed"].to_numpy(float)})


def swap_summary(trials: pd.DataFrame, *, prefix: str, n_draws: int, seed: int) -> dict:
    """§4.1 for one (dataset, model): flip rate, accuracy on each image and on both, swap-changed pairs."""
    t = _arm(trials, "image_swap")
    f = _frame(t)
    f["both"] = f["correct_c"] * f["correct_d"]
    res = bootstrap_rates(f, rates={"flip_rate": "flip", "accuracy_c": "correct_c", "accuracy_d": "correct_d",
                                    "accuracy_both": "both", "swap_changed_share": "changed"},
                          contrasts={"accuracy_drop": ("diff", "accuracy_c", "accuracy_d")},
                          n_draws=n_draws, seed=seed, cluster="image_id")
    v = {f"{prefix}.n_pairs": int(len(t)), f"{prefix}.flip_cases": int(f["flip"].sum()),
         f"{prefix}.n_images": int(t["image_id"].nunique()), f"{prefix}.swap_changed": int(f["changed"].sum()),
         f"{prefix}.both_correct": int(f["both"].sum())}
    for k, iv in res.items():
        put_interval(v, f"{prefix}.{k}", iv)
    return v


def tier_table(trials: pd.DataFrame, *, prefix: str, n_draws: int, seed: int) -> dict:
    """Flip rate per swap tier (hard: same organ / source; easy: another) on the admissible pairs."""
    t = _arm(trials, "image_swap")
    v = {}
    for tier in ("hard", "easy"):
        sub = t[t["tier"] == tier]
        v[f"{prefix}.tier.{tier}.n"] = int(len(sub))
        v[f"{prefix}.tier.{tier}.flips"] = int(flips(sub).sum())
        if len(sub):
            put_interval(v, f"{prefix}.tier.{tier}.flip_rate",
                         bootstrap_rates(_frame(sub), rates={"r": "flip"}, n_draws=n_draws, seed=seed, cluster="image_id")["r"])
        else:
            put_interval(v, f"{prefix}.tier.{tier}.flip_rate", (float("nan"),) * 3)
    return v


def symmetry_table(trials: pd.DataFrame, *, prefix: str, n_draws: int, seed: int) -> dict:
    """Text-side symmetry: change rate under question swap, option swap, image swap, and the uniform reroll.

    The uniform option reroll is the chance reference: a key redrawn uniformly over the ``k``
    options differs from the original with probability ``1 - 1/k`` (0.5 for yes/no, 0.75 for four
    options); it is computed here by redrawing every admissible pair's key with the seed.
    """
    v = {}
    for arm in ("question_swap", "option_swap", "image_swap"):
        t = _arm(trials, arm)
        if len(t):
            put_interval(v, f"{prefix}.sym.{arm}", bootstrap_rates(_frame(t), rates={"r": "flip"}, n_draws=n_draws,
                                                                   seed=seed, cluster="image_id")["r"])
    t = _arm(trials, "image_swap")
    labels = [list("ABCD"[:len(json.loads(o))]) if json.loads(o) else ["yes", "no"] for o in t["options_c"]]
    k = np.array([len(x) for x in labels])
    rolled = np.random.default_rng(seed).integers(0, k) if len(t) else np.array([], dtype=int)
    changed = [lab[i] != key for lab, i, key in zip(labels, rolled, t["key_c"])]
    v[f"{prefix}.sym.option_reroll"] = float(np.mean(changed)) if len(t) else float("nan")
    v[f"{prefix}.sym.option_reroll_expected"] = float(np.mean(1 - 1 / k)) if len(t) else float("nan")
    return v


_LETTER = re.compile(r"^\W*([ABCD])(?:\W|$)")


def map_generated(text, options: list[str]) -> str | None:
    """The frozen mapping rule of open-ended answers: the option the generation names, else ``None``.

    Yes/no questions (``options`` empty): the first word, case-insensitive, ``yes`` or ``no``.
    Four-option questions: a leading option letter (``"B"``, ``"B."``, ``"(B)"``), else the one option
    whose text the generation contains (case-insensitive; two or more matches map to nothing).

    >>> map_generated(" Yes, there is", []), map_generated("maybe", []), map_generated("(C) lung", ["a", "b", "c", "d"])
    ('yes', None, 'C')
    >>> map_generated("it shows the Liver", ["Kidney", "Liver", "Spleen", "Heart"])
    'B'
    """
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return None
    s = str(text).strip()
    if not options:
        m = re.match(r"^\W*([A-Za-z]+)", s)
        word = m.group(1).lower() if m else ""
        return word if word in ("yes", "no") else None
    m = _LETTER.match(s)
    if m and "ABCD".index(m.group(1)) < len(options):
        return m.group(1)
    hits = [i for i, o in enumerate(options) if str(o).strip() and str(o).strip().lower() in s.lower()]
    return "ABCD"[hits[0]] if len(hits) == 1 else None


def open_ended(trials: pd.DataFrame, *, prefix: str) -> dict:
    """Open-ended answers on the original image mapped to an option, and those clearing the 0.5 floor."""
    t = _arm(trials, "image_swap")
    if t["generated_c"].isna().all():
        return {f"{prefix}.open.n": int(len(t)), f"{prefix}.open.mapped": float("nan"),
                f"{prefix}.open.floor": float("nan")}
    mapped = np.array([map_generated(g, json.loads(o)) is not None for g, o in zip(t["generated_c"], t["options_c"])])
    floor = mapped & (t["top1_prob_c"].to_numpy(float) >= FLOOR)
    return {f"{prefix}.open.n": int(len(t)), f"{prefix}.open.mapped": int(mapped.sum()),
            f"{prefix}.open.floor": int(floor.sum())}


def label_audit(trials: pd.DataFrame, *, prefix: str) -> dict:
    """The automatic unchanged-answer label against the image-decisive key, on every pool row.

    Per pool row (``image_swap`` arm, all rows, admissible or not): the *automatic label* says the
    answer key is unchanged between the source and its substitute image; the *image-decisive key*
    says the question's answer depends on the image, i.e. the release answers it both ``yes`` and
    ``no`` over the images it is asked of (a rule on the release's own answers, standing in for the
    paper's hand-made key). Agreement counts rows where "unchanged" meets "not image-decisive" or
    "changed" meets "image-decisive"; κ is Cohen's.
    """
    t = _arm(trials, "image_swap", admissible=False)
    decisive = t.groupby("group")["key_c"].transform("nunique").to_numpy() > 1
    unchanged = ~t["key_changed"].to_numpy(bool)
    auto, key = (~unchanged).astype(int), decisive.astype(int)
    return {f"{prefix}.audit.rows": int(len(t)), f"{prefix}.audit.questions": int(t["group"].nunique()),
            f"{prefix}.audit.agree_n": int((auto == key).sum()),
            f"{prefix}.audit.agreement": float((auto == key).mean()) if len(t) else float("nan"),
            f"{prefix}.audit.kappa": float(cohen_kappa(auto, key)) if len(t) else float("nan")}


def omni_key_audit(trials: pd.DataFrame, *, prefix: str) -> dict:
    """Answer-key audit of four-option questions: the correct option's text appears in the question.

    Flagged pairs can be answered from the question; accuracy on the original image overall, on the
    unflagged pairs, and its bounds if every flagged pair were wrong / right.
    """
    t = _arm(trials, "image_swap")
    key_text = [json.loads(o)["ABCD".index(k)] if k in ("A", "B", "C", "D") else "" for o, k in zip(t["options_c"], t["key_c"])]
    flagged = np.array([bool(str(x).strip()) and str(x).strip().lower() in q.lower() for x, q in zip(key_text, t["question"])])
    correct = (t["readout_c"] == t["key_c"]).to_numpy(bool)
    n = len(t)
    return {f"{prefix}.keyaudit.n": int(n), f"{prefix}.keyaudit.flagged": int(flagged.sum()),
            f"{prefix}.keyaudit.flagged_share": float(flagged.mean()) if n else float("nan"),
            f"{prefix}.keyaudit.unflagged": int(n - flagged.sum()),
            f"{prefix}.keyaudit.accuracy": float(correct.mean()) if n else float("nan"),
            f"{prefix}.keyaudit.accuracy_unflagged": float(correct[~flagged].mean()) if (~flagged).any() else float("nan"),
            f"{prefix}.keyaudit.bound_lo": float((correct & ~flagged).sum() / n) if n else float("nan"),
            f"{prefix}.keyaudit.bound_hi": float(((correct & ~flagged) | flagged).sum() / n) if n else float("nan")}


def knockout_table(trials: pd.DataFrame, *, prefix: str, n_draws: int, seed: int) -> dict:
    """App. N.4: answer change under image-token knockout and the count-matched random-token control."""
    v = {}
    for arm in ("knockout", "knockout_random"):
        t = _arm(trials, arm)
        if (trials["arm"] == arm).any():  # an arm the record did not run has no value (not NaN)
            v[f"{prefix}.{arm}.n"] = int(len(t))
            put_interval(v, f"{prefix}.{arm}.flip_rate",
                         bootstrap_rates(_frame(t), rates={"r": "flip"}, n_draws=n_draws, seed=seed, cluster="image_id")["r"])
    return v


def table9(trials: pd.DataFrame, *, prefix: str, n_draws: int, seed: int) -> TableResult:
    """SLAKE Table 9: image-swap flip rate by question category (organ, modality, abnormality, KG)."""
    t = _arm(trials, "image_swap")
    v, rows = {}, []
    for cat, key in TABLE9_ORDER:
        sub = t[t["category"] == cat]
        iv = (bootstrap_rates(_frame(sub), rates={"r": "flip"}, n_draws=n_draws, seed=seed, cluster="image_id")["r"]
              if len(sub) else (float("nan"),) * 3)
        put_interval(v, f"{prefix}.t9.{key}.flip_rate", iv)
        v[f"{prefix}.t9.{key}.n"] = int(len(sub))
        rows.append({"category": key.replace("kg", "knowledge graph"), "flip_rate": iv[0], "flip_rate_lo": iv[1],
                     "flip_rate_hi": iv[2], "pairs": int(len(sub)), "flips": int(flips(sub).sum())})
    return TableResult(pd.DataFrame(rows), v, metrics={c: "flip_rate" for c in ("flip_rate", "flip_rate_lo", "flip_rate_hi")},
                       labels={"category": "question category", "pairs": "pairs", "flips": "flips"},
                       caption="SLAKE: image-swap flip rate by question category (Table 9)")


def accuracy_vs_majority(trials: pd.DataFrame, *, prefix: str, split: str = "test") -> dict:
    """Accuracy of the ``original`` arm on ``split`` beside the training split's majority answer."""
    t = trials[trials["arm"] == "original"]
    test, train = t[t["split"] == split], t[t["split"] != split]
    majority = train["key_c"].value_counts().idxmax() if len(train) else t["key_c"].value_counts().idxmax()
    return {f"{prefix}.orig.n": int(len(test)), f"{prefix}.orig.accuracy": float((test["readout_c"] == test["key_c"]).mean()),
            f"{prefix}.orig.majority_accuracy": float((test["key_c"] == majority).mean()),
            f"{prefix}.orig.majority_answer": str(majority),
            f"{prefix}.orig.yes_rate": float((test["readout_c"] == "yes").mean())}


def table6(manifests: Mapping[str, dict], *, ran: Mapping[str, str]) -> TableResult:
    """Table 6: dataset, images, questions, readout, licence and what ran here (from the records' manifests)."""
    rows = []
    for name, info in TABLE6.items():
        m = manifests.get(name)
        rows.append({"dataset": name, "images": m["n_images"] if m else np.nan,
                     "questions": m["n_questions"] if m else np.nan,
                     "official": m.get("n_official", np.nan) if m else np.nan,
                     "closed_yes_no": m.get("n_yes_no", np.nan) if m else np.nan, "readout": info["readout"],
                     "licence": info["licence"], "here": ran.get(name, "not run")})
    frame = pd.DataFrame(rows)
    return TableResult(frame, {}, labels={"dataset": "dataset", "images": "images", "questions": "questions",
                                          "official": "official questions", "closed_yes_no": "closed yes/no",
                                          "readout": "readout", "licence": "licence", "here": "what ran here"},
                       caption="Datasets without a report (Table 6): what each release holds and what ran here")


def paper_keys(role: str = "main") -> dict[str, str]:
    """Run key of the chapter's main VQA-RAD model -> published id (§4.1, App. N.4, the other records)."""
    p = f"nr.vqarad.{model_key(role)}"
    return {f"{p}.n_pairs": "vqarad.n", f"{p}.flip_rate": "vqarad.fr", f"{p}.accuracy_both": "vqarad.acc",
            f"{p}.flip_cases": "o.vqarad.flip_cases", f"{p}.tier.hard.flip_rate": "o.vqarad.swap_hard",
            f"{p}.tier.easy.flip_rate": "o.vqarad.swap_easy", f"{p}.sym.question_swap": "o.vqarad.q_swap",
            f"{p}.knockout.flip_rate": "n4.vqarad_ko", f"{p}.knockout_random.flip_rate": "n4.vqarad_random",
            f"{p}.audit.rows": "o.vqarad.rows", f"{p}.audit.questions": "o.vqarad.questions",
            f"{p}.audit.agreement": "o.vqarad.label_agree", f"{p}.audit.kappa": "o.vqarad.kappa",
            f"{p}.ceiling": "o.vqarad.ceiling", f"{p}.open.mapped": "o.open.vqarad.mapped",
            f"{p}.open.floor": "o.open.vqarad.floor"}


def other_paper_keys(role: str = "main") -> dict[str, str]:
    """Run keys of the main SLAKE and OmniMedVQA models -> published ids (§4.3 / Table 9, App. N.4, other records)."""
    s, o = f"nr.slake.{model_key(role)}", f"nr.omni.{model_key(role)}"
    keys = {f"{s}.t9.{k}.flip_rate": f"s43.slake.{'kg' if k == 'kg' else k}" for _, k in TABLE9_ORDER}
    keys.update({f"{s}.knockout.flip_rate": "n4.slake_ko", f"{s}.n_pairs": "n4.slake_n", f"{s}.swap_changed": "o.slake.changed",
                 f"{s}.swap_changed_share": "o.slake.changed_share", f"{s}.sym.question_swap": "o.slake.q_swap",
                 f"{s}.sym.image_swap": "o.slake.image_swap", f"{s}.sym.option_reroll": "o.slake.option",
                 f"{s}.open.mapped": "o.open.slake.mapped", f"{s}.open.floor": "o.open.slake.floor",
                 f"{o}.knockout.flip_rate": "n4.omni_ko", f"{o}.knockout_random.flip_rate": "n4.omni_random",
                 f"{o}.n_pairs": "o.omni.n", f"{o}.pool_rows": "o.omni.pool", f"{o}.swap_changed": "o.omni.swap_changed",
                 f"{o}.keyaudit.flagged": "o.omni.flagged", f"{o}.keyaudit.flagged_share": "o.omni.flagged_share",
                 f"{o}.keyaudit.unflagged": "o.omni.unflagged", f"{o}.keyaudit.accuracy": "o.omni.acc",
                 f"{o}.keyaudit.accuracy_unflagged": "o.omni.acc_unflagged", f"{o}.keyaudit.bound_lo": "o.omni.bound_lo",
                 f"{o}.keyaudit.bound_hi": "o.omni.bound_hi", f"{o}.accuracy_c": "o.omni.acc_swap_orig",
                 f"{o}.accuracy_d": "o.omni.acc_swap_sub", f"{o}.accuracy_drop": "o.omni.acc_swap_drop",
                 f"{o}.flip_rate": "o.omni.swap_fr", f"{o}.tier.hard.flip_rate": "o.omni.swap_hard",
                 f"{o}.sym.question_swap": "o.omni.q_swap", f"{o}.sym.option_swap": "o.omni.option_swap",
                 f"{o}.sym.option_reroll": "o.omni.reroll", f"{o}.flip_cases": "o.omni.flip_cases",
                 f"{o}.open.mapped": "o.open.omni.mapped", f"{o}.open.floor": "o.open.omni.floor"})
    return keys


def dataset_values(trials: pd.DataFrame, *, dataset: str, role: str, counts: Mapping, n_draws: int,
                   seed: int) -> dict:
    """Every value of one (dataset, model) record, keyed ``nr.<dataset>.<role>.*``.

    ``role`` names the model's place in the chapter (``main``: the model under study, ``reader`` /
    ``qonly``: the reference models), so keys do not change with the profile's model.
    """
    prefix = f"nr.{DATASET_KEYS.get(dataset, model_key(dataset))}.{model_key(role)}"
    arms = set(trials["arm"])
    v = {f"{prefix}.{k}": int(counts[k]) for k in ("pool_rows", "pool_questions", "pool_images", "admissible",
                                                   "ceiling", "swap_changed") if k in counts}
    mcq = (trials["options_c"] != "[]").any()
    if "image_swap" in arms:
        v.update(swap_summary(trials, prefix=prefix, n_draws=n_draws, seed=seed))
        v.update(tier_table(trials, prefix=prefix, n_draws=n_draws, seed=seed))
        v.update(symmetry_table(trials, prefix=prefix, n_draws=n_draws, seed=seed))
        v.update(open_ended(trials, prefix=prefix))
        v.update(omni_key_audit(trials, prefix=prefix) if mcq else label_audit(trials, prefix=prefix))
    if arms & {"knockout", "knockout_random"}:
        v.update(knockout_table(trials, prefix=prefix, n_draws=n_draws, seed=seed))
    if "original" in arms:
        v.update(accuracy_vs_majority(trials, prefix=prefix))
    return v


def models_table(values: Mapping, *, dataset: str, models: Mapping[str, str]) -> TableResult:
    """One row per model (``models``: role -> model name) on one dataset: pairs, flip rate, accuracy on each
    image and on both, knockout and control."""
    ds = DATASET_KEYS.get(dataset, model_key(dataset))
    rows = []
    for role, m in models.items():
        p = f"nr.{ds}.{model_key(role)}"
        g = lambda k: values.get(f"{p}.{k}", np.nan)  # noqa: E731
        rows.append({"model": m, "pairs": g("n_pairs"), "flip_rate": g("flip_rate"), "flip_rate_lo": g("flip_rate_lo"),
                     "flip_rate_hi": g("flip_rate_hi"), "accuracy_c": g("accuracy_c"), "accuracy_d": g("accuracy_d"),
                     "accuracy_both": g("accuracy_both"), "knockout": g("knockout.flip_rate"),
                     "knockout_random": g("knockout_random.flip_rate")})
    fr = {c: "flip_rate" for c in ("flip_rate", "flip_rate_lo", "flip_rate_hi", "knockout", "knockout_random")}
    acc = {c: "accuracy" for c in ("accuracy_c", "accuracy_d", "accuracy_both")}
    return TableResult(pd.DataFrame(rows), {}, metrics={**fr, **acc},
                       labels={"model": "model", "pairs": "admissible pairs", "accuracy_c": "accuracy, original image",
                               "accuracy_d": "accuracy, substitute image", "accuracy_both": "correct on both images",
                               "knockout": "image-token knockout", "knockout_random": "random-token control"},
                       caption=f"{dataset}: image swap with the question fixed, per model (admissible pairs)")


def planted_failures(values: Mapping, *, dataset: str, role: str, model: str) -> list[str]:
    """What a reference model's stated behaviour (:mod:`shovir_core.models.reference_vqa`) violates ([] = none).

    ``ref-question-only``: image-swap flip rate, knockout and random-token control exactly 0, and the
    question swap moves it (> 0). ``ref-image-reader``: image-swap flip rate at least 0.3, the
    random-token control exactly 0, and the knockout within 0.2 of the flip rate. Other models: none.
    """
    p = f"nr.{DATASET_KEYS.get(dataset, model_key(dataset))}.{model_key(role)}"
    get = lambda k: values.get(f"{p}.{k}")  # noqa: E731
    out = []
    if model == "ref-question-only":
        for k in ("flip_rate", "knockout.flip_rate", "knockout_random.flip_rate"):
            if get(k) is not None and get(k) != 0.0:
                out.append(f"{p}.{k} = {get(k)} (must be exactly 0: the model never reads the image)")
        if get("sym.question_swap") is not None and not get("sym.question_swap") > 0:
            out.append(f"{p}.sym.question_swap = {get('sym.question_swap')} (the question must move the answer)")
    elif model == "ref-image-reader":
        if get("flip_rate") is None or not get("flip_rate") >= 0.3:
            out.append(f"{p}.flip_rate = {get('flip_rate')} (an image reader must flip on >= 0.3 of swaps)")
        if get("knockout_random.flip_rate") is not None and get("knockout_random.flip_rate") != 0.0:
            out.append(f"{p}.knockout_random.flip_rate = {get('knockout_random.flip_rate')} (must be 0)")
        if get("knockout.flip_rate") is not None and not abs(get("knockout.flip_rate") - get("flip_rate")) <= 0.2:
            out.append(f"{p}.knockout.flip_rate = {get('knockout.flip_rate')} is not its flip rate {get('flip_rate')}")
    return out


_DS_NAMES = {v: k for k, v in DATASET_KEYS.items()}


def _rate_rows(values: Mapping, rows: list[tuple[str, str, str, str]], names: Mapping | None = None) -> pd.DataFrame:
    """(dataset, model role, what, key) -> one row with the rate and its interval where the values have them;
    ``names`` maps ``(dataset key, role)`` to the model's name (default: the role)."""
    out = []
    for ds, role, what, key in rows:
        if key not in values:
            continue
        out.append({"dataset": _DS_NAMES.get(ds, ds), "model": (names or {}).get((ds, role), role), "arm": what, "rate": values[key],
                    "rate_lo": values.get(f"{key}_lo", np.nan), "rate_hi": values.get(f"{key}_hi", np.nan)})
    return pd.DataFrame(out, columns=["dataset", "model", "arm", "rate", "rate_lo", "rate_hi"])


def _result(frame: pd.DataFrame, caption: str) -> TableResult:
    return TableResult(frame, {}, metrics={"rate": "flip_rate", "rate_lo": "flip_rate", "rate_hi": "flip_rate"},
                       labels={"dataset": "dataset", "model": "model", "arm": "arm"}, caption=caption)


def tiers_frame(values: Mapping, *, datasets, roles, names: Mapping | None = None) -> TableResult:
    """Image-swap flip rate per swap tier (hard / easy) per dataset and model role."""
    rows = [(d, r, f"{tier} tier", f"nr.{d}.{r}.tier.{tier}.flip_rate") for d in datasets for r in roles
            for tier in ("hard", "easy")]
    return _result(_rate_rows(values, rows, names), "Image-swap flip rate by swap tier (hard: same organ or source)")


def symmetry_frame(values: Mapping, *, datasets, role: str, names: Mapping | None = None) -> TableResult:
    """Answer change under question swap, option swap, image swap and the uniform option reroll."""
    arms = (("question swap", "sym.question_swap"), ("option swap", "sym.option_swap"),
            ("image swap", "sym.image_swap"), ("uniform option reroll", "sym.option_reroll"))
    rows = [(d, role, what, f"nr.{d}.{role}.{k}") for d in datasets for what, k in arms]
    return _result(_rate_rows(values, rows, names), "Text-side symmetry: how often the answer moves, per arm")


def knockout_frame(values: Mapping, *, datasets, roles, names: Mapping | None = None) -> TableResult:
    """Image-swap flip rate beside the image-token knockout and the random-token control."""
    arms = (("image swap", "flip_rate"), ("image-token knockout", "knockout.flip_rate"),
            ("random-token control", "knockout_random.flip_rate"))
    rows = [(d, r, what, f"nr.{d}.{r}.{k}") for d in datasets for r in roles for what, k in arms]
    return _result(_rate_rows(values, rows, names), "App. N.4: answer change under image-token knockout and its control")
