"""Each rehearsal record's trial count beside the paper's stated denominator for that record.

The registry is :file:`shovir_core/resources/denominators.yaml`: rules matched, first match wins,
against a record's chapter, key, protocol and spec (the protocol's defaults filled in). A rule gives
either the paper's count for such a record -- an expression over the papers' published values
(:mod:`shovir_core.papers`, e.g. ``design.cases * design.questions_all14`` for ModaLens §3's 44,786
all-14 trials) times design factors (:func:`shovir_core.tables.reproduction.design_factors`), with
``{profile}`` standing for the rehearsed profile -- or ``trials: null``: the paper states no count for
it. Every rule carries a ``reason``: what the count is, or why the record's trials differ from it
(``expect: differs``), or why the paper states none.

A rehearsal at a reduced scale plants smaller cohorts (:func:`shovir_core.rehearsal.synthetic.planted`)
and shrinks the designs' fixed sample sizes (:func:`shovir_core.rehearsal.scaling.scale_design`), so
the paper's denominator is evaluated at the rehearsal's sizes: each published value with a planted
counterpart (``planted:``) or a scaled design size (``designs:``) is replaced by it, a constant of
the design (``constants:``, questions per case) stays, and an expression naming any other value is
multiplied by the scale (an approximation the verdict names). At scale 1 the planted counts are the papers' (tested), so the
denominator is the paper's own.

:func:`record_denominator` evaluates one record; :func:`compare` sets its trials beside it.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from functools import lru_cache
from importlib import resources

from .. import yaml_text

__all__ = ["load_rules", "record_denominator", "compare", "protocol_defaults", "VERDICTS", "EQUAL", "DIFFERS",
           "NO_COUNT", "UNEXPLAINED"]

EQUAL = "equal"
DIFFERS = "differs (named)"
NO_COUNT = "no stated count"
UNEXPLAINED = "differs (not explained)"
VERDICTS = (EQUAL, DIFFERS, NO_COUNT, UNEXPLAINED)
"""A record's verdict: its trials equal the (scaled) denominator, differ for a named reason, have no
stated count to compare with, or differ where the registry expects them equal (a defect to look at)."""

_RULE_KEYS = {"match", "paper", "trials", "factors", "compare", "expect", "reason"}
_MATCH_KEYS = {"chapter", "key", "protocol", "profile", "spec"}


@lru_cache(maxsize=1)
def load_rules() -> dict:
    """The registry (validated): ``{"planted": ..., "designs": ..., "rules": [...]}``."""
    doc = yaml_text.safe_load(resources.files("shovir_core.resources").joinpath("denominators.yaml").read_text("utf-8"))
    for i, rule in enumerate(doc["rules"]):
        unknown = set(rule) - _RULE_KEYS
        if unknown or set(rule.get("match") or {}) - _MATCH_KEYS:
            raise ValueError(f"denominators.yaml: rule {i} has unknown keys {sorted(unknown | (set(rule.get('match') or {}) - _MATCH_KEYS))}")
        if not rule.get("reason"):
            raise ValueError(f"denominators.yaml: rule {i} ({rule.get('match')}) gives no reason")
        if rule.get("trials") and rule.get("paper") not in ("shovir", "modalens"):
            raise ValueError(f"denominators.yaml: rule {i} has trials but no paper (shovir | modalens)")
        if rule.get("expect", "equal") not in ("equal", "differs"):
            raise ValueError(f"denominators.yaml: rule {i}: expect must be equal or differs")
    return doc


def protocol_defaults(protocol: str) -> dict:
    """The declared defaults of ``protocol``'s spec (its module's ``SPEC``; none where it declares none)."""
    from ..protocols import get_protocol

    spec = getattr(get_protocol(protocol), "SPEC", None)
    return dict(spec.defaults) if spec is not None else {}


def _globs(pattern, value) -> bool:
    patterns = pattern if isinstance(pattern, list) else [pattern]
    return any(fnmatch.fnmatchcase(str(value), str(p)) for p in patterns)


def _matches(match: dict, *, chapter: str, key: str, protocol: str, profile: str, spec: dict) -> bool:
    for field, value in (("chapter", chapter), ("key", key), ("protocol", protocol), ("profile", profile)):
        if field in match and not _globs(match[field], value):
            return False
    return all(spec.get(k) == v for k, v in (match.get("spec") or {}).items())


def _rule_for(**record) -> dict | None:
    return next((r for r in load_rules()["rules"] if _matches(r.get("match") or {}, **record)), None)


def _values_at(paper: str, scale: float) -> dict:
    """The published values of ``paper``, with the rehearsal's sizes in place of the planted ones at ``scale``."""
    from ..papers import load_values
    from .scaling import scale_design
    from .synthetic import planted

    values = dict(load_values(paper))
    if scale == 1:
        return values
    doc = load_rules()
    counts = planted(scale).counts
    for vid, name in (doc.get("planted") or {}).get(paper, {}).items():
        values[vid] = dataclasses.replace(values[vid], value=float(counts[name]))
    for vid, (protocol, spec_key) in (doc.get("designs") or {}).get(paper, {}).items():
        scaled = scale_design(protocol, {spec_key: int(values[vid].value)}, scale)[spec_key]
        values[vid] = dataclasses.replace(values[vid], value=float(scaled))
    return values


def _ids_of(section: str, paper: str) -> set[str]:
    return set((load_rules().get(section) or {}).get(paper) or [])


def _ids(text: str, values) -> set[str]:
    """The published value ids an expression names."""
    return {name for name in re.findall(r"[A-Za-z_][\w.]*", text) if name in values}


def record_denominator(*, chapter: str, key: str, protocol: str, spec: dict, profile: str,
                       scale: float = 1.0) -> dict:
    """The paper's denominator for one record (``spec``: its spec; the protocol's defaults fill the rest).

    Returns ``{"paper_item", "paper_trials", "paper_trials_scaled", "compare", "expect", "reason",
    "exact_scaling"}``; ``paper_trials`` is ``None`` (and ``paper_item`` says so) where the paper
    states no count for the record or no rule matches it (then ``reason`` says that no rule does).
    """
    from ..papers import evaluate, load_values
    from ..tables.reproduction import design_factors

    full = {**protocol_defaults(protocol), **(spec or {})}
    rule = _rule_for(chapter=chapter, key=key, protocol=protocol, profile=profile, spec=full)
    out = {"paper_item": None, "paper_trials": None, "paper_trials_scaled": None, "compare": "all trials",
           "expect": "equal", "reason": None, "exact_scaling": True}
    if rule is None:
        out["reason"] = f"no rule of denominators.yaml matches {chapter}/{key} ({protocol})"
        return out
    out["reason"] = rule["reason"]
    if not rule.get("trials"):
        out["paper_item"] = NO_COUNT
        return out
    paper, text = rule["paper"], rule["trials"].format(profile=profile)
    factor = 1
    factors = design_factors()
    for f in rule.get("factors") or []:
        factor *= factors[f] if isinstance(f, str) else int(f)
    full_eval = evaluate(text, _values_at(paper, 1.0))
    scaled_eval = evaluate(text, _values_at(paper, scale))
    inputs = _ids(text, _values_at(paper, 1.0))
    unscaled = inputs - _ids_of("planted", paper) - _ids_of("designs", paper) - _ids_of("constants", paper)
    scaled = float(scaled_eval.value) * factor
    if scale != 1 and unscaled:  # a published size the rehearsal does not plant: the paper's times the scale
        scaled = scaled * scale
    # a fixed sample size scaled by rehearsal.scaling is drawn from what the reduced tree holds, which may be less
    approximate = bool(unscaled or inputs & _ids_of("designs", paper))
    locations = sorted({load_values(paper)[i].location for i in inputs})
    name = {"shovir": "ShoViR", "modalens": "ModaLens"}[paper]
    out.update(paper_item=f"{name} {'; '.join(locations)}",
               paper_trials=int(round(float(full_eval.value) * factor)), paper_trials_scaled=int(round(scaled)),
               expect=rule.get("expect", "equal"), exact_scaling=scale == 1 or not approximate)
    if (rule.get("compare") or {}).get("conditions"):
        out["compare"] = "cells " + ", ".join(rule["compare"]["conditions"])
    elif (rule.get("compare") or {}).get("count"):
        out["compare"] = "count " + rule["compare"]["count"]
    return out


def compare(denominator: dict, *, trials: int | None, counts: dict | None = None) -> dict:
    """The record's trials beside ``denominator`` (:func:`record_denominator`): ``{"compared_trials",
    "difference", "verdict", "reason"}``. ``counts`` is the record manifest's: where the rule compares
    only some cells, its ``cells`` (``"<condition>|<class>"``) are summed over the compared conditions;
    where it compares a count the record states (``count <name>``: the steering's test trials), that one."""
    compared = trials
    counts = counts or {}
    if denominator["compare"].startswith("cells "):
        wanted = set(denominator["compare"][len("cells "):].split(", "))
        cells = counts.get("cells") if isinstance(counts.get("cells"), dict) else None
        compared = sum(int(n) for k, n in cells.items() if k.split("|")[0] in wanted) if cells else None
    elif denominator["compare"].startswith("count "):
        compared = counts.get(denominator["compare"][len("count "):])
    paper = denominator["paper_trials_scaled"]
    out = {"compared_trials": compared, "difference": None, "reason": denominator["reason"]}
    if paper is None:
        out["verdict"] = NO_COUNT
        return out
    if compared is None or (isinstance(compared, float) and math.isnan(compared)):
        out.update(verdict=UNEXPLAINED, reason="the record has no trial count to compare")
        return out
    out["difference"] = int(compared) - int(paper)
    if out["difference"] == 0:
        out["verdict"] = EQUAL
    elif denominator["expect"] == "differs":
        out["verdict"] = DIFFERS
    elif not denominator["exact_scaling"]:
        out.update(verdict=DIFFERS, reason="reduced scale: the denominator uses a published size the rehearsal does "
                                           "not plant (taken times the scale) or a fixed sample size scaled with the "
                                           "tree, which a reduced tree may not hold in full. " + denominator["reason"])
    else:
        out.update(verdict=UNEXPLAINED, reason="the registry expects the paper's count here: " + denominator["reason"])
    return out
