"""Paper vs this run, honestly: the published value beside the run's, in one unit, with a verdict.

Each row names a run value (a key of a chapter's ``TableResult.values``), the published value it
sits beside (:mod:`shovir_core.papers`, by id), a readable label and the schema metric that formats
both sides (``resources/metrics.yaml``). Both sides are converted to that metric's unscaled unit
before they meet: the papers print rates in % and differences in percentage points, while the
run's rates are fractions and some of its differences are stored in points (keys ending ``_pp``),
so ModaLens Table 4's "changed − unchanged" is −0.50 pp in the paper and a fraction in the run; the
comparison divides the paper's value by 100, never the other way round by accident.

The verdict says what a comparison can mean:

* only where the profile runs the paper's model on the paper's data (``same_setting=True``) is a
  run value judged: "inside the paper's interval" / "outside the paper's interval" where the paper
  prints a 95% interval, "matches the printed value" (within half a unit of its last printed digit)
  / "differs from the printed value" where it does not;
* otherwise every row reads "different model/data: shown for scale": a demo model on demo data is
  not a replication, and no interval of the paper says anything about it;
* in a rehearsal (``shovir rehearse``: ``$SHOVIR_REHEARSAL`` is set in every process of it) every row
  reads "rehearsal: stand-in model on synthetic data", whatever the profile claims: the paper's
  setting is rehearsed, not run, and :func:`not_held` holds nothing against the paper.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .result import TableResult

__all__ = [
    "Comparison", "paper_vs_run", "MODALENS_ROWS", "shovir_table1_rows", "shovir_figure_rows", "rows_from_keys",
    "beside", "not_held", "DIFFERENT_SETTING", "INSIDE", "OUTSIDE", "MATCHES", "DIFFERS", "NOT_RUN", "REHEARSAL",
    "MODALENS_SETTING",
]

DIFFERENT_SETTING = "different model/data: shown for scale"
INSIDE = "inside the paper's interval"
OUTSIDE = "outside the paper's interval"
MATCHES = "matches the printed value"
DIFFERS = "differs from the printed value"
NOT_RUN = "not run in this profile"
REHEARSAL = "rehearsal: stand-in model on synthetic data"
REHEARSAL_ENV = "SHOVIR_REHEARSAL"

_RUN_UNITS = ("fraction", "pp", "value")
_PAPER_SCALE = {"%": 0.01, "pp": 0.01, "proportion": 1.0, "score": 1.0, "ratio": 1.0, "count": 1.0, "layer": 1.0}
MODALENS_SETTING = "MedGemma-27B on MIMIC-CXR"
"""The setting of every ModaLens number (its model and data)."""


@dataclass(frozen=True)
class Comparison:
    """One row of a paper-vs-run table.

    Attributes
    ----------
    key : str
        The run value's key (without the chapter namespace), e.g. ``t2.all14.diff_pp``.
    paper_id : str
        The published value's id (``papers.published(paper, id=...)``).
    label : str
        What the row is, for readers ("Paired difference A − P, all-14, image first").
    metric : str
        Schema metric that formats both sides (``flip_rate``, ``paired_diff``, ``accuracy`` ...).
    run_unit : {"fraction", "pp", "value"}
        How the run value is stored: a fraction (rates, shares, differences of rates), percentage
        points (keys ending ``_pp``), or a plain value in the metric's own unit (ratios, scores).
    """

    key: str
    paper_id: str
    label: str
    metric: str
    run_unit: str = "fraction"

    def __post_init__(self):
        if self.run_unit not in _RUN_UNITS:
            raise ValueError(f"Comparison {self.key!r}: run_unit {self.run_unit!r}; use one of {_RUN_UNITS}")


def _c(key, pid, label, metric, unit="fraction"):
    return Comparison(key, pid, label, metric, unit)


MODALENS_ROWS: tuple[Comparison, ...] = (
    _c("t2.all14.present.flip_rate", "t2.all14.P", "Flip rate, report present (all-14, image first)", "flip_rate"),
    _c("t2.all14.absent.flip_rate", "t2.all14.A", "Flip rate, report absent (all-14, image first)", "flip_rate"),
    _c("t2.all14.diff_pp", "t2.all14.diff", "Paired difference absent − present (all-14, image first)",
       "paired_diff", "pp"),
    _c("t2.all14.ratio", "t2.all14.ratio", "Ratio absent / present (all-14, image first)", "ratio", "value"),
    _c("t2.text_first.present.diff_pp", "t2.all14.tf_P_shift", "Text first − image first, report present (all-14)",
       "paired_diff", "pp"),
    _c("t2.text_first.absent.diff_pp", "t2.all14.tf_A_shift", "Text first − image first, report absent (all-14)",
       "paired_diff", "pp"),
    _c("t2.text_first.diff_pp", "t2.all14.tf_diff", "Paired difference absent − present within text first (all-14)",
       "paired_diff", "pp"),
    _c("t2.one_q.present.flip_rate", "t2.oneq.P", "Flip rate, report present (one question)", "flip_rate"),
    _c("t2.one_q.absent.flip_rate", "t2.oneq.A", "Flip rate, report absent (one question)", "flip_rate"),
    _c("t2.one_q.order_present.text_first.flip_rate", "t2.oneq.tf_P",
       "Flip rate, report present, text first (one question)", "flip_rate"),
    _c("t2.one_q.order_present.diff_pp", "t2.oneq.order_effect",
       "Order effect text − image first, report present (one question)", "paired_diff", "pp"),
    _c("t3.instructed.generated.present.flip_rate", "t3.gen.P", "Generated answer: flip rate, report present",
       "flip_rate"),
    _c("t3.instructed.generated.absent.flip_rate", "t3.gen.A", "Generated answer: flip rate, report absent",
       "flip_rate"),
    _c("t3.instructed.generated.diff_pp", "t3.gen.diff", "Generated answer: paired difference absent − present",
       "paired_diff", "pp"),
    _c("t3.instructed.family.diff_pp", "t3.family.diff", "Token family: paired difference absent − present",
       "paired_diff", "pp"),
    _c("t3.instructed.lowercase.absent.flip_rate", "t3.lower.A", "Lowercase token: flip rate, report absent",
       "flip_rate"),
    _c("t3.instructed.lowercase.diff_pp", "t3.lower.diff", "Lowercase token: paired difference absent − present",
       "paired_diff", "pp"),
    _c("t4.fr_changed", "t4.fr_changed", "Flip rate, label-changed trials", "flip_rate"),
    _c("t4.fr_unchanged", "t4.fr_unchanged", "Flip rate, label-unchanged trials", "flip_rate"),
    _c("t4.fr_changed_minus_unchanged", "t4.diff", "Flip rate difference, changed − unchanged", "paired_diff"),
    _c("t4.acc_original", "t4.acc_orig", "Accuracy on the original image", "accuracy"),
    _c("t4.acc_substitute", "t4.acc_sub", "Accuracy on the substitute image (its own label)", "accuracy"),
    _c("t4.ba_original", "t4.ba_orig", "Balanced accuracy, original image", "balanced_accuracy"),
    _c("t4.ba_substitute", "t4.ba_sub", "Balanced accuracy, substitute image", "balanced_accuracy"),
    _c("t4.majority", "t4.majority", "Majority baseline (original labels)", "majority_baseline"),
    _c("t5.plain.family.absent.flip_rate", "t5.plain.family.A", "Token family, plain prompt: flip rate, report absent",
       "flip_rate"),
    _c("t5.instructed.lowercase.present.flip_rate", "t5.instr.lower.P",
       "Lowercase token, instructed: flip rate, report present", "flip_rate"),
    _c("t5.instructed.lowercase.absent.flip_rate", "t5.instr.lower.A",
       "Lowercase token, instructed: flip rate, report absent", "flip_rate"),
    _c("t5.instructed.family.present.flip_rate", "t5.instr.family.P",
       "Token family, instructed: flip rate, report present", "flip_rate"),
    _c("t5.instructed.family.absent.flip_rate", "t5.instr.family.A",
       "Token family, instructed: flip rate, report absent", "flip_rate"),
    _c("t5.shift.lowercase.absent_pp", "t5.shift_lower", "Instruction shift of the report-absent flip rate, lowercase",
       "paired_diff", "pp"),
    _c("t5.shift.family.absent_pp", "t5.shift_family",
       "Instruction shift of the report-absent flip rate, token family", "paired_diff", "pp"),
    _c("fig2.present.mean_abs_dm", "f2.mean_P", "Mean |Δm|, report present", "mean_abs_margin_change", "value"),
    _c("fig2.absent.mean_abs_dm", "f2.mean_A", "Mean |Δm|, report absent", "mean_abs_margin_change", "value"),
    _c("fig2.present.share_above", "f2.share_gt05_P", "Share of trials with |Δm| > 0.5, report present",
       "share_margin_change_above"),
    _c("fig2.share_absent_larger", "f2.A_gt_P", "Share of trials with |Δm| larger without the report",
       "share_larger_without_report"),
)
"""ModaLens Tables 2-5 and Figure 2 (MedGemma-27B on MIMIC-CXR) against this run's values."""


def _run_value(c: Comparison, values: Mapping) -> float:
    v = values.get(c.key)
    if v is None:
        return float("nan")
    v = float(v)
    return v / 100.0 if c.run_unit == "pp" else v


def _section(location: str) -> str:
    return str(location).split("/")[0].strip()


def _section_order(section: str) -> tuple:
    """Tables by number, then figures by number, then sections of the text."""
    kind, _, rest = section.partition(" ")
    rank = {"Table": 0, "Figure": 1}.get(kind, 2)
    digits = "".join(ch for ch in rest if ch.isdigit())
    return (rank, int(digits) if digits and rank < 2 else 0, section)


def paper_vs_run(values: Mapping[str, float], *, paper: str, rows: Sequence[Comparison], same_setting: bool,
                 setting: str, runs=None) -> TableResult:
    """The published values beside this run's, in one unit per row, with what the comparison means.

    Parameters
    ----------
    values : mapping
        Run values by key (the union of a chapter's ``TableResult.values``).
    paper : {"shovir", "modalens"}
    rows : sequence of Comparison
        What to compare (:data:`MODALENS_ROWS`, :func:`shovir_table1_rows`, ...).
    same_setting : bool
        True only where the profile runs the paper's model on the paper's data; otherwise every
        verdict is :data:`DIFFERENT_SETTING`.
    setting : str
        The paper's setting in words ("MedGemma-27B on MIMIC-CXR"), for the caption.
    runs : optional
        The records the run values came from (``TableResult.run_ids``).

    Returns
    -------
    TableResult
        ``frame`` indexed by ``section`` (the paper's table or figure) and ``quantity`` with
        ``paper location``, ``metric`` (per-row schema metric), ``paper``, ``paper_lo``,
        ``paper_hi`` (NaN where the paper prints no interval), ``run`` (both sides in the metric's
        unscaled unit) and ``verdict``; ``values`` hold ``<key>`` -> the paper's value and
        ``<key>_lo`` / ``<key>_hi`` in the run's storage unit (points for ``_pp`` keys), each a
        :class:`~shovir_core.papers.PaperNumber` (glued as the paper's, not the run's), so prose
        can glue ``paper.<key>`` beside the run's ``<key>``, and ``verdict.<key>`` (see
        :func:`not_held`).
    """
    from ..metrics.schema import metric_spec
    from ..papers.published import PaperNumber
    from ..papers.values import load_values

    published = load_values(paper)
    rehearsal = bool(os.environ.get(REHEARSAL_ENV))
    out, glue = [], {}
    for c in rows:
        if c.paper_id not in published:
            raise KeyError(f"{paper}: no published value {c.paper_id!r} (row {c.key!r})")
        metric_spec(c.metric)  # raises on an unknown metric
        item = published[c.paper_id]
        if item.unit not in _PAPER_SCALE:
            raise ValueError(f"{paper}:{c.paper_id} has unit {item.unit!r}, not a number to compare")
        scale = _PAPER_SCALE[item.unit]
        pv = float(item.value) * scale
        ci = item.ci_values
        lo, hi = (ci[0] * scale, ci[1] * scale) if ci else (float("nan"), float("nan"))
        run = _run_value(c, values)
        if not np.isfinite(run):
            verdict = NOT_RUN
        elif rehearsal:
            verdict = REHEARSAL
        elif not same_setting:
            verdict = DIFFERENT_SETTING
        elif ci:
            verdict = INSIDE if lo <= run <= hi else OUTSIDE
        else:
            verdict = MATCHES if abs(run - pv) <= item.half_width * scale + 1e-12 else DIFFERS
        out.append({"section": _section(item.location), "quantity": c.label, "paper location": item.location,
                    "metric": c.metric, "paper": pv, "paper_lo": lo, "paper_hi": hi, "run": run,
                    "verdict": verdict})
        back = 100.0 if c.run_unit == "pp" else 1.0
        tag = dict(paper=paper, id=c.paper_id, scale=scale * back)
        glue[c.key] = PaperNumber(pv * back, **tag)
        glue[f"{c.key}_lo"] = PaperNumber(lo * back, part="lo", **tag)
        glue[f"{c.key}_hi"] = PaperNumber(hi * back, part="hi", **tag)
        glue[f"verdict.{c.key}"] = verdict
    frame = pd.DataFrame(out, columns=["section", "quantity", "paper location", "metric", "paper", "paper_lo",
                                       "paper_hi", "run", "verdict"])
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: (_section_order(frame["section"].iat[i]), i))]
    frame = frame.set_index(["section", "quantity"])
    glue["n_compared"] = int(len(frame))
    glue["n_inside"] = int((frame["verdict"] == INSIDE).sum())
    glue["n_outside"] = int((frame["verdict"] == OUTSIDE).sum())
    caption = (f"The paper's values ({setting}) beside this run's, both in the unit of the row's metric. "
               + ("This is a rehearsal: stand-in models on synthetic data in the paper's layouts, so nothing is "
                  "judged against the paper." if rehearsal else
                  "The profile runs the paper's model on the paper's data, so each run value is judged against "
                  "the paper's 95% interval (or, where none is printed, its rounding)."
                  if same_setting else
                  "This profile runs a different model on different data: the paper's values are shown for "
                  "scale and nothing is judged against their intervals."))
    result = TableResult(frame, values=glue, labels={"paper": "paper [95% CI]", "paper_lo": "paper 95% CI low",
                                                     "paper_hi": "paper 95% CI high", "run": "this run",
                                                     "section": "paper table"},
                         caption=caption)
    return result.with_runs(runs) if runs is not None else result


_SV_ARMS = {"baseline": "Baseline", "full_noise": "FullNoise", "delta_fn": "Δ_FN"}
_SV_METRICS = {"F1_14": "f1_14_micro", "F1_5": "f1_5_micro", "F1_RG": "f1_radgraph", "GREEN": "green",
               "BLEU_1": "bleu1", "BLEU_4": "bleu4", "ROUGE_L": "rouge_l"}


def _key_part(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in str(text))


def shovir_table1_rows(dataset: str, models: Mapping[str, str], *,
                       key: str = "t1.{model}.{arm}.{metric}") -> tuple[Comparison, ...]:
    """Rows for ShoViR Table 1 on ``dataset`` (``MIMIC``/``PadChest``) for the run keys in ``models``.

    ``models`` maps a run key to the paper's model name; ``key`` formats the run value key from
    ``model`` (the run key with non-alphanumerics as ``_``), ``arm`` (``Baseline``, ``FullNoise``,
    ``Δ_FN``) and ``metric`` (the schema metric).
    """
    from ..papers.values import load_values

    rows = []
    for v in load_values("shovir").values():
        k = v.keys
        if k.get("table") != "1" or k.get("dataset") != dataset or k.get("metric") not in _SV_METRICS:
            continue
        run_key = next((rk for rk, name in models.items() if name == k.get("model")), None)
        if run_key is None:
            continue
        arm, metric = _SV_ARMS[k["arm"]], _SV_METRICS[k["metric"]]
        label = f"{k['model']}: {metric_display(metric)}, {arm.replace('FullNoise', 'Full Noise')}"
        rows.append(Comparison(key.format(model=_key_part(run_key), arm=arm, metric=metric), v.id, label,
                               "delta_fn" if arm == "Δ_FN" else metric, "value"))
    return tuple(rows)


def shovir_figure_rows(dataset: str, models: Mapping[str, str], *,
                       fig2_key: str = "fig2.{model}.{condition}.p{p:03d}",
                       fig3a_key: str = "fig3a.{model}.{condition}.{stat}",
                       fig3b_key: str | None = "fig3b.{cls}.{condition}") -> tuple[Comparison, ...]:
    """Rows for the values ShoViR states for Figure 2 (μ-F1 at p), Figure 3(a) (FR, Δ_X) and Figure 3(b)
    (per-class F1 at p = 1, the mean over the paper's models: :func:`shovir_core.tables.shovir.per_class_across_models`
    keys ``fig3b.<class>.<condition>``; ``fig3b_key=None`` leaves them out). Figure 3(b) rows need no model
    of ``models``: they compare the cross-model mean, so they are only meaningful where the profile runs
    every model the paper averaged."""
    from ..papers.values import load_values

    rows = []
    for v in load_values("shovir").values():
        k = v.keys
        if k.get("dataset") != dataset or k.get("figure") not in ("2", "3a", "3b"):
            continue
        if k["figure"] == "3b":
            if fig3b_key is not None and k.get("metric") == "F1":
                rows.append(Comparison(fig3b_key.format(cls=_key_part(k["class"]), condition=k["condition"]), v.id,
                                       f"{k['class']}: F1 under {k['condition']} (mean over models)", "f1_class",
                                       "value"))
            continue
        run_key = next((rk for rk, name in models.items() if name == k.get("model")), None)
        if run_key is None:
            continue
        model = _key_part(run_key)
        if k["figure"] == "2" and k.get("metric") == "mu_F1":
            p = int(round(float(k["p"])))
            rows.append(Comparison(fig2_key.format(model=model, condition=k["condition"], p=p), v.id,
                                   f"{k['model']}: μ-F1, {k['condition']} at p = {p / 100:.1f}", "mu_f1", "value"))
        elif k["figure"] == "3a" and k.get("metric") in ("FR", "delta_F1"):
            fr = k["metric"] == "FR"
            stat = "fr" if fr else "delta"
            rows.append(Comparison(fig3a_key.format(model=model, condition=k["condition"], stat=stat), v.id,
                                   f"{k['model']}: {'FR' if fr else 'Δ_X'}, {k['condition']}",
                                   "flip_rate_c" if fr else "delta_x", "fraction" if fr else "value"))
    return tuple(rows)


def metric_display(metric: str) -> str:
    from ..metrics.schema import metric_spec

    return metric_spec(metric).display


_METRIC_HINTS = (("flip_rate", "flip_rate"), ("fr_", "flip_rate"), ("balanced_accuracy", "balanced_accuracy"),
                 ("specificity", "specificity"), ("sensitivity", "sensitivity"), ("accuracy", "accuracy"),
                 ("abstain", "abstention_rate"))
_UNIT_METRIC = {"%": "share", "pp": "paired_diff", "proportion": "proportion", "score": "value", "ratio": "ratio",
                "count": "count", "layer": "value"}


def _in_points(key: str) -> bool:
    """Run keys in percentage points end ``_pp`` (or ``_pp_lo`` / ``_pp_hi``); the rest are fractions."""
    return key.endswith("_pp") or key.endswith("_pp_lo") or key.endswith("_pp_hi")


def rows_from_keys(keys: Mapping[str, str], *, paper: str = "modalens") -> tuple[Comparison, ...]:
    """Comparison rows for a chapter's ``keys`` (run value key -> published value id).

    The label is the published value's description; the storage unit of the run value follows the
    key (points where it ends ``_pp``, ``_pp_lo``, ``_pp_hi``; the metric's own unit for counts,
    proportions, scores and ratios; a fraction otherwise); the metric that formats the row comes
    from the key's quantity (flip rate, accuracy, ...) or else from the published unit. An unknown
    published id raises, so a typo cannot drop a row.
    """
    from ..papers.values import load_values

    published = load_values(paper)
    rows = []
    for key, pid in keys.items():
        if pid not in published:
            raise KeyError(f"{paper}: no published value {pid!r} (run key {key!r})")
        item = published[pid]
        if item.unit not in _UNIT_METRIC:
            raise ValueError(f"{paper}:{pid} has unit {item.unit!r}, not a number to compare")
        metric = None
        if item.unit == "pp" or _in_points(key):  # a difference of rates
            metric = "interaction_pp" if "interaction" in key else "rate_shift" if "yes_shift" in key \
                else "paired_diff"
        elif item.unit == "%":
            last = key.rsplit(".", 1)[-1]
            metric = next((m for hint, m in _METRIC_HINTS if hint in last), None)
        metric = metric or _UNIT_METRIC[item.unit]
        unit = "pp" if _in_points(key) else "value" if item.unit in ("count", "proportion", "score", "ratio", "layer") \
            else "fraction"
        rows.append(Comparison(key, pid, item.desc[:1].upper() + item.desc[1:], metric, unit))
    return tuple(rows)


def beside(values: Mapping[str, float], keys: Mapping[str, str], *, same_setting: bool, runs=None,
           paper: str = "modalens", setting: str = MODALENS_SETTING, optional=(),
           show_missing: bool = False) -> TableResult:
    """:func:`paper_vs_run` for a chapter's ``keys`` (run value key -> published id, :func:`rows_from_keys`).

    Every key must have a run value unless it starts with one of the ``optional`` prefixes (values
    that exist only for some data, e.g. per-finding rows of findings that never changed label);
    optional keys without a value are left out -- or, with ``show_missing``, shown as
    :data:`NOT_RUN` (values of models a profile does not run) -- and counted in
    ``values["n_missing"]``.
    """
    missing = sorted(k for k in keys if k not in values or values[k] is None)
    required = [k for k in missing if not str(k).startswith(tuple(optional))]
    if required:
        raise KeyError(f"this run has no values for the published ids of {required}")
    kept = dict(keys) if show_missing else {k: v for k, v in keys.items() if k not in missing}
    result = paper_vs_run(values, paper=paper, rows=rows_from_keys(kept, paper=paper), same_setting=same_setting,
                          setting=setting, runs=runs)
    result.values["n_missing"] = len(missing)
    return result


def not_held(result: TableResult, keys) -> list[str]:
    """The ``keys`` whose verdict in ``result`` (of :func:`paper_vs_run`) is not inside the paper's
    interval or matching its printed value -- what a profile in the paper's setting asserts empty (a
    rehearsal judges nothing, so holds everything: also a value its stand-ins leave undefined, "not run",
    such as App. B's regression when the stand-in's few flips separate the fit)."""
    held = (INSIDE, MATCHES, REHEARSAL) + ((NOT_RUN,) if os.environ.get(REHEARSAL_ENV) else ())
    return [k for k in keys if result.values.get(f"verdict.{k}") not in held]
