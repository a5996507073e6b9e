"""The report card of one audited model: its ShoViR and ModaLens numbers beside the papers' models.

One page per model (``card.html`` and ``card.md``, with ``card.csv`` holding every value): every number
of the model is computed here from its records by the chapters' own functions and links to the
record's manifest, its hover title naming the run id, the spec hash and the git commit; the papers'
values come from the stored published values (:mod:`shovir_core.papers.published`) and name the table
or figure they are from. Off the papers' setting (any profile but the one that runs the papers' data)
every paper value is marked "different data": it is context, not a target.

Quantities
    ShoViR (§3.4, Table 1; Figure 3(a)): Δ_FN = F1_14(Baseline) − F1_14(Full Noise Image); Δ_X = μ-F1(RO) −
    μ-F1(X) and the flip rate FR for X ∈ {OCO, DOCO} at p = 1 (:func:`shovir_core.tables.shovir.table1`,
    :func:`~shovir_core.tables.shovir.shortcut_metrics`).
    ModaLens (§4.1, Tables 2-3): the flip rates with the report absent and present and their paired
    difference A − P (the report's effect), without and with the answer instruction, lowercase readout
    (:func:`shovir_core.metrics.arms.compare_arms`).
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["card_values", "paper_values", "render_card", "write_card", "CARD_COLUMNS"]

CARD_COLUMNS = ("section", "quantity", "model", "value", "lo", "hi", "n", "unit", "source", "record", "manifest",
                "title", "data")
"""Columns of ``card.csv``: one row per number (the audited model's and the papers')."""

_PAPER_DATASETS = {"MIMIC": "MIMIC-CXR", "PadChest": "PadChest-GR"}


def _record_cols(run) -> dict:
    m = run.manifest
    git = (m.get("provenance") or {}).get("git") or {}
    commit = str(git.get("commit") or "unknown")[:12]
    return {"source": "record", "record": run.run_id, "manifest": str(Path(run.path) / "manifest.json"),
            "title": f"{run.run_id} · spec {str(m.get('spec_sha256'))[:12]} · commit {commit}",
            "data": (m.get("dataset") or {}).get("name")}


def card_values(model: str, runs: dict, *, n_draws: int = 200, seed: int = 3) -> pd.DataFrame:
    """The audited model's numbers, one row each (:data:`CARD_COLUMNS`), from ``runs`` (keys of
    :func:`shovir_core.audit.audit_runs`: ``shovir`` and ``modalens.<arm>``)."""
    rows = []
    if "shovir" in runs:
        from ..tables.shovir import shortcut_metrics, table1, trials_of

        run = runs["shovir"]
        trials = trials_of({model: run})
        t1 = table1(trials).frame.loc[model]
        rec = _record_cols(run)
        n_img = int((trials["condition"] == "Baseline").sum())
        for metric, label in (("f1_14_micro", "F1_14"), ("f1_5_micro", "F1_5")):
            rows.append({"section": "ShoViR", "quantity": f"Δ_FN ({label})", "value": float(t1[("Δ_FN", metric)]),
                         "n": n_img, "unit": "score", **rec})
        for arm in ("Baseline", "FullNoise"):
            rows.append({"section": "ShoViR", "quantity": f"F1_14 ({arm})", "value": float(t1[(arm, "f1_14_micro")]),
                         "n": n_img, "unit": "score", **rec})
        sm = shortcut_metrics(trials, p=1.0, n_draws=n_draws, rng=np.random.default_rng(seed)).frame
        for r in sm.to_dict("records"):
            if r["arm"] not in ("OCO", "DOCO"):
                continue
            rows.append({"section": "ShoViR", "quantity": f"Δ_{r['arm']} (p = 1)", "value": r["delta"],
                         "lo": r["delta_lo"], "hi": r["delta_hi"], "n": r["n_items"], "unit": "score", **rec})
            rows.append({"section": "ShoViR", "quantity": f"FR {r['arm']} (p = 1)", "value": r["fr"],
                         "lo": r["fr_lo"], "hi": r["fr_hi"], "n": r["n_eligible"], "unit": "proportion", **rec})
    from ..metrics.arms import compare_arms

    for suffix, label in (("", "no instruction"), ("_instr", "instructed")):
        a, p = runs.get(f"modalens.A{suffix}"), runs.get(f"modalens.P{suffix}")
        if a is None or p is None:
            continue
        r = compare_arms(a.trials, p.trials, n_draws=n_draws, seed=seed)
        for stat, quantity, rec_run, scale, unit in (
                ("fr_1", f"flip rate, report absent ({label})", a, 100, "%"),
                ("fr_2", f"flip rate, report present ({label})", p, 100, "%"),
                ("diff", f"paired effect A − P ({label})", p, 100, "pp")):
            rec = _record_cols(rec_run)
            if stat == "diff":
                rec["record"] = f"{_record_cols(a)['record']} + {rec['record']}"
                rec["title"] = f"{_record_cols(a)['title']} | {rec['title']}"
            rows.append({"section": "ModaLens", "quantity": quantity, "value": scale * r[stat],
                         "lo": scale * r[f"{stat}_lo"], "hi": scale * r[f"{stat}_hi"], "n": r["n_trials"],
                         "unit": unit, **rec})
    out = pd.DataFrame(rows).reindex(columns=list(CARD_COLUMNS))
    out["model"] = model
    return out


def paper_values(*, paper_dataset: str | None = None) -> pd.DataFrame:
    """The papers' published models on the card's quantities (:data:`CARD_COLUMNS`); ``data`` says which
    dataset each is on, with "different data" unless it is ``paper_dataset`` (``"MIMIC"`` or
    ``"PadChest"``: the papers' data that the profile runs; ``None``: none of them, e.g. the demo)."""
    from ..papers.published import published

    rows = []
    t1 = published("shovir", table="1")
    t1 = t1[(t1["arm"] == "delta_fn") & t1["metric"].isin(["F1_14", "F1_5"])]
    for r in t1.to_dict("records"):
        rows.append({"section": "ShoViR", "quantity": f"Δ_FN ({r['metric']})", "model": r["model"],
                     "value": r["value"], "unit": "score", "dataset": r["dataset"], "where": "ShoViR Table 1",
                     "id": r["id"]})
    f3 = published("shovir", figure="3a")
    for r in f3.to_dict("records"):
        quantity = f"FR {r['condition']} (p = 1)" if r["metric"] == "FR" else f"Δ_{r['condition']} (p = 1)"
        rows.append({"section": "ShoViR", "quantity": quantity, "model": r["model"], "value": r["value"],
                     "unit": "proportion" if r["metric"] == "FR" else "score", "dataset": r["dataset"],
                     "where": "ShoViR Figure 3(a)", "id": r["id"]})
    for vid, quantity in (("t2.all14.A", "flip rate, report absent (no instruction)"),
                          ("t2.all14.P", "flip rate, report present (no instruction)"),
                          ("t2.all14.diff", "paired effect A − P (no instruction)"),
                          ("t3.lower.A", "flip rate, report absent (instructed)"),
                          ("t3.lower.diff", "paired effect A − P (instructed)")):
        r = published("modalens", id=vid).iloc[0]
        rows.append({"section": "ModaLens", "quantity": quantity, "model": "MedGemma-27B", "value": r["value"],
                     "lo": r["ci_low"], "hi": r["ci_high"], "unit": r["unit"], "dataset": "MIMIC",
                     "where": f"ModaLens {r['location'].split(' / ')[0]}", "id": vid})
    out = pd.DataFrame(rows)
    names = out["dataset"].map(_PAPER_DATASETS)
    out["data"] = names.where(out["dataset"] == paper_dataset, names + ", different data")
    out["source"] = "paper"
    out["title"] = out["where"] + " (" + out["id"] + "): published value, not a record"
    return out.reindex(columns=list(CARD_COLUMNS))


def _fmt(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return f"{value:.2f}" if unit in ("%", "pp") else f"{value:.3f}"


def _cell(row: dict, folder: Path, *, markdown: bool) -> str:
    text = _fmt(row["value"], row["unit"])
    if pd.notna(row.get("lo")) and pd.notna(row.get("hi")):
        text += f" [{_fmt(row['lo'], row['unit'])}, {_fmt(row['hi'], row['unit'])}]"
    if row["source"] != "record":
        return html.escape(text) if not markdown else text
    href = os.path.relpath(row["manifest"], folder)
    if markdown:
        return f"[{text}]({href} \"{row['title']}\")"
    return f'<a href="{html.escape(href)}" title="{html.escape(row["title"])}">{html.escape(text)}</a>'


def render_card(model: str, ours: pd.DataFrame, paper: pd.DataFrame, folder: Path, *, profile: str,
                markdown: bool) -> str:
    """The card's page (HTML or markdown): per section, one table with the audited model's row first."""
    lines: list[str] = []
    title = f"Report card: {model} (profile {profile})"
    intro = ("Every number of the audited model links to the manifest of the record it was computed from "
             "(hover: run id, spec hash, git commit). Paper values are the published models' numbers, "
             "quoted from the papers; \"different data\" marks those measured on another dataset than this "
             "profile's.")
    if markdown:
        lines += [f"# {title}", "", intro, ""]
    else:
        lines += ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
                  "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse;"
                  "margin-bottom:2em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
                  "tr.ours{background:#eef}</style></head><body>",
                  f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(intro)}</p>"]
    for section in ("ShoViR", "ModaLens"):
        mine = ours[ours["section"] == section]
        if mine.empty:
            continue
        theirs = paper[(paper["section"] == section) & paper["quantity"].isin(set(mine["quantity"]))]
        head = ["quantity", "model", "value [95% interval]", "n", "data", "source"]
        body = []
        for frame in (mine, theirs.sort_values(["quantity", "data", "model"])):
            for r in frame.to_dict("records"):
                source = r["record"] if r["source"] == "record" else r["title"].split(":")[0]
                n = "" if pd.isna(r.get("n")) else str(int(r["n"]))
                body.append((r["source"] == "record", [r["quantity"], r["model"], _cell(r, folder, markdown=markdown),
                                                       n, str(r["data"]), source]))
        if markdown:
            lines += [f"## {section}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(c.replace("|", "\\|") if i != 2 else c for i, c in enumerate(cells)) + " |"
                      for _, cells in body]
            lines.append("")
        else:
            lines += [f"<h2>{section}</h2>", "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
            for is_ours, cells in body:
                tds = "".join(f"<td>{c if i == 2 else html.escape(c)}</td>" for i, c in enumerate(cells))
                lines.append(f"<tr class='{'ours' if is_ours else 'paper'}'>{tds}</tr>")
            lines.append("</table>")
    if not markdown:
        lines.append("</body></html>")
    return "\n".join(lines) + "\n"


def write_card(model: str, runs: dict, *, profile: str = "demo", out_dir: str | Path | None = None,
               n_draws: int = 200, seed: int = 3, paper_dataset: str | None = None) -> Path:
    """Compute and write ``card.html``, ``card.md`` and ``card.csv`` (default folder
    ``<runs>/cards/<model>/<profile>``); returns the HTML page's path.

    A card of credentialed records holds aggregates only (rates, scores and counts; no report text)."""
    from ..paths import runs_root

    folder = Path(out_dir) if out_dir else runs_root() / "cards" / model.replace("@", "-") / profile
    folder.mkdir(parents=True, exist_ok=True)
    ours = card_values(model, runs, n_draws=n_draws, seed=seed)
    paper = paper_values(paper_dataset=paper_dataset)
    pd.concat([ours, paper], ignore_index=True).to_csv(folder / "card.csv", index=False)
    (folder / "card.md").write_text(render_card(model, ours, paper, folder, profile=profile, markdown=True))
    page = folder / "card.html"
    page.write_text(render_card(model, ours, paper, folder, profile=profile, markdown=False))
    (folder / "card.json").write_text(json.dumps({"model": model, "profile": profile, "n_draws": n_draws,
                                                  "seed": seed, "records": {k: r.run_id for k, r in runs.items()}},
                                                 indent=2))
    return page
