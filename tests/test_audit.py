"""shovir audit / import: a model declared only in YAML to a report card; the export -> import round trip."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shovir_core.audit import audit_runs, make_records
from shovir_core.audit.card import write_card
from shovir_core.audit.export import export_inputs
from shovir_core.audit.imports import ImportError_, import_answers
from shovir_core.cli import main
from shovir_core.models import ScoreRequest, get_model, registry

from tiny_families import build_idefics3, catalogue_yaml

REFERENCE = "ref-anchored@0.5"
"""Reads pixels for reports and yes/no answers alike: the model answered outside and inside the protocols."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One runs root for the module (records, imports, cards, exports)."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("audit") / "runs"
    mp.setenv("SHOVIR_RUNS", str(root))
    mp.delenv("SHOVIR_MODELS", raising=False)
    yield root
    mp.undo()


def _links(page: Path) -> list[Path]:
    import re

    return [page.parent / href for href in re.findall(r'<a href="([^"]+)"', page.read_text())]


def test_declared_model_goes_through_audit_to_a_card(runs, tmp_path, capsys):
    """A tiny Idefics3 (a family the registry does not name), declared only in a YAML file."""
    ckpt = build_idefics3(tmp_path)
    cat = tmp_path / "models.yaml"
    cat.write_text(catalogue_yaml({"yaml-smolvlm": {"adapter": "hf-auto", "checkpoint": str(ckpt),
                                                    "max_new_tokens": 6, "dtype": "float32"}}))
    try:
        assert main(["--models", str(cat), "audit", "yaml-smolvlm", "-q"]) == 0
        page = Path(capsys.readouterr().out.strip().splitlines()[-1].split(": ", 1)[1])
        card = pd.read_csv(page.parent / "card.csv")
        ours = card[card["source"] == "record"]
        quantities = set(ours["quantity"])
        assert {"Δ_FN (F1_14)", "FR OCO (p = 1)", "Δ_OCO (p = 1)", "flip rate, report absent (no instruction)",
                "flip rate, report present (no instruction)", "paired effect A − P (instructed)"} <= quantities
        assert (ours["model"] == "yaml-smolvlm").all()
        defined = ours.set_index("quantity")["value"]
        assert defined[["Δ_FN (F1_14)", "Δ_OCO (p = 1)", "flip rate, report absent (no instruction)",
                        "paired effect A − P (instructed)"]].notna().all()
        undefined = ours[ours["value"].isna()]  # a rate over no eligible item (random weights) is n/a
        assert (undefined["n"].fillna(0) == 0).all()
        links = _links(page)
        assert len(links) == len(ours) and all(p.name == "manifest.json" and p.is_file() for p in links)
        manifests = {json.loads(p.read_text())["spec"]["model_fingerprint"]["declared_sha256"] for p in links}
        assert manifests == {registry.REGISTRY["yaml-smolvlm"].declared_sha256}
        paper = card[card["source"] == "paper"]
        assert len(paper) > 0 and paper["data"].str.endswith("different data").all()
        ended = sorted(json.loads(p.read_text())["ended"] for p in set(links))
        assert main(["--models", str(cat), "audit", "yaml-smolvlm", "-q", "--only", "modalens"]) == 0  # resumes
        assert sorted(json.loads(p.read_text())["ended"] for p in set(links)) == ended
    finally:
        from shovir_core.protocols import catalog

        registry.REGISTRY.pop("yaml-smolvlm", None)
        catalog._LOADED.pop(str(cat.resolve()), None)
        os.environ.pop(catalog.MODELS_ENV, None)


def _pixels(folder: Path, rel: str) -> np.ndarray:
    return np.asarray(Image.open(folder / rel)) if rel.endswith(".png") else np.load(folder / rel)


@pytest.fixture(scope="module")
def answered(runs):
    """An export of the demo audit, answered by the reference model outside the protocols."""
    folder = runs / "exports" / "audit-demo"
    export_inputs(folder, profile="demo", progress=False)
    trials = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    model = get_model(REFERENCE)
    rep = [t for t in trials if t["kind"] == "report"]
    yes_no = [t for t in trials if t["kind"] == "yes_no"]
    reports = model.generate_reports([_pixels(folder, t["image"]) for t in rep])
    requests = [ScoreRequest(_pixels(folder, t["image"]), t["question"], report=t["report"], order=t["order"],
                             instruction=t["instruction"], framing=t["framing"]) for t in yes_no]
    scored = model.score_yes_no(requests, answer_tokens=8)
    files = {"report": folder.parent / "reports.jsonl", "yes_no": folder.parent / "answers.csv"}
    files["report"].write_text("".join(json.dumps({"trial_id": t["trial_id"], "report": r}) + "\n"
                                       for t, r in zip(rep, reports)))
    pd.DataFrame([{"trial_id": t["trial_id"], "answer": s["readout"].upper(), "logit_yes": s["logit_yes"],
                   "logit_no": s["logit_no"], "generated": s["generated"]} for t, s in zip(yes_no, scored)]
                 ).to_csv(files["yes_no"], index=False)
    bench = folder.parent / "shovir_bench.json"  # the authors' runner's output: one item per image path
    bench.write_text(json.dumps([{"image_path": p, "prediction": r, "reference": "", "label": []}
                                 for p, r in dict(zip([t["image"] for t in rep], reports)).items()]))
    return folder, files, bench


def test_import_round_trip_is_exact(runs, answered):
    folder, files, bench = answered
    imported = {**import_answers(files["report"], name="elsewhere", export=folder, progress=False)["runs"],
                **import_answers(files["yes_no"], name="elsewhere", export=folder, progress=False)["runs"]}
    inside = make_records(audit_runs(REFERENCE), progress=False)
    assert set(imported) == set(inside) == {"shovir", "modalens.P", "modalens.A", "modalens.P_instr",
                                            "modalens.A_instr"}
    a = pd.read_csv(write_card(REFERENCE, inside, out_dir=runs / "card-in").parent / "card.csv")
    b = pd.read_csv(write_card("elsewhere", imported, out_dir=runs / "card-imp").parent / "card.csv")
    a, b = a[a["source"] == "record"], b[b["source"] == "record"]
    assert len(a) >= 12
    pd.testing.assert_frame_equal(a[["quantity", "value", "lo", "hi", "n"]].reset_index(drop=True),
                                  b[["quantity", "value", "lo", "hi", "n"]].reset_index(drop=True))
    fp = imported["shovir"].manifest["spec"]["model_fingerprint"]
    assert fp["adapter"] == "imported" and set(fp["answers_sha256"]) == {"report", "yes_no"}
    # `shovir audit NAME` finds the imported model and its complete records
    assert main(["audit", "elsewhere", "-q", "--out", str(runs / "card-cli")]) == 0
    c = pd.read_csv(runs / "card-cli" / "card.csv")
    assert set(c.loc[c["source"] == "record", "record"].str.split(" \\+ ").explode()) == \
        {r.run_id for r in imported.values()}
    # the same reports in the ShoViR-Bench output format make the same record trials
    via_bench = import_answers(bench, name="elsewhere-bench", export=folder, progress=False)["runs"]["shovir"]
    cols = ["trial_id", "generated", *[c for c in inside["shovir"].trials.columns if c.startswith("pred.")]]
    x = via_bench.trials[cols].sort_values("trial_id").reset_index(drop=True)
    y = inside["shovir"].trials[cols].sort_values("trial_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(x, y)


@pytest.mark.parametrize("edit, message", [
    (lambda rows: rows + [dict(rows[0], trial_id="modalens/P/no-such-case:edema/c")], "not yes_no trials of the export"),
    (lambda rows: rows[1:], "without an answer"),
    (lambda rows: rows + [rows[3]], "answered more than once"),
    (lambda rows: [dict(rows[0], answer="maybe", logit_yes=None, logit_no=None)] + rows[1:], "is not yes or no"),
    (lambda rows: [dict(rows[0], trial_id=rows[0]["trial_id"].replace("modalens/", "shovir/"))] + rows[1:],
     "not yes_no trials"),
])
def test_bad_import_file_is_refused_and_writes_nothing(runs, answered, tmp_path, edit, message):
    folder, files, _ = answered
    rows = pd.read_csv(files["yes_no"]).to_dict("records")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({k: (None if isinstance(v, float) and np.isnan(v) else v)
                                       for k, v in r.items()}) + "\n" for r in edit(rows)))
    with pytest.raises(ImportError_) as err:
        import_answers(bad, name="bad-import", export=folder, progress=False)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (runs / "imports" / "bad-import").exists()


def test_cli_bad_catalogue_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))
    cat = tmp_path / "bad.yaml"
    cat.write_text(catalogue_yaml({"typo-model": {"checkpoint": str(tmp_path), "max_new_token": 5}}))
    assert main(["--models", str(cat), "audit", "typo-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shovir: error: model catalogue") and "'max_new_token'" in err and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_cli_bad_import_is_one_line_and_writes_nothing(runs, answered, tmp_path, capsys):
    folder, files, _ = answered
    lines = files["report"].read_text().splitlines()
    bad = tmp_path / "reports.jsonl"
    bad.write_text("\n".join(lines[:-2] + [lines[0]]) + "\n")  # one repeated, two missing
    assert main(["import", str(bad), "--name", "cli-bad", "--export", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shovir: error: import: trial ids answered more than once") and "\n" not in err
    assert not (runs / "imports" / "cli-bad").exists()
    assert main(["import", str(files["report"]), "--name", "../outside", "--export", str(folder)]) == 2
    assert "model name '../outside'" in capsys.readouterr().err and not (runs / "outside").exists()


def test_paper_values_are_marked_off_the_papers_setting():
    from shovir_core.audit.card import paper_values

    demo, mimic = paper_values(), paper_values(paper_dataset="MIMIC")
    assert demo["data"].str.endswith("different data").all() and (demo["source"] == "paper").all()
    same = mimic["data"] == "MIMIC-CXR"
    assert same.any() and mimic.loc[~same, "data"].eq("PadChest-GR, different data").all()
    assert {"Δ_FN (F1_14)", "FR OCO (p = 1)", "paired effect A − P (no instruction)"} <= set(demo["quantity"])
