"""The ``perturbations`` protocol record and the ``shovir perturb`` export."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shovir_core import protocols
from shovir_core.data import load_dataset
from shovir_core.perturb import box_sets, report
from shovir_core.perturb.cli import add_parser, main as perturb_main
from shovir_core.tables import perturbations as perturbation_tables

SPEC = {"n_cases": 12, "ssim_size": 64, "presets": ["paper", "reference-code"], "ps": [0.0, 0.5, 1.0]}


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("SHOVIR_RUNS", str(root))
    try:
        yield protocols.run("perturbations", "test", SPEC, progress=False)
    finally:
        mp.undo()


def test_record_rows_and_counts(record):
    t = record.trials
    assert record.status == "complete"
    counts = t["kind"].value_counts()
    ds = load_dataset("demo")
    n_pairs = ds.boxes.drop_duplicates(["image_id", "finding"]).shape[0]
    assert counts["box_sets"] == n_pairs
    assert counts["substitute"] == 12
    # per preset: Baseline + Full Noise + 3 conditions x 3 p
    assert counts["gallery"] == 2 * (2 + 3 * 3)
    assert t["trial_id"].is_unique


def test_box_counts_match_box_sets(record):
    ds = load_dataset("demo")
    table = perturbation_tables.box_set_counts(record.trials).frame
    for target in ("Atelectasis", "Pleural Effusion"):
        ids = ds.boxes.loc[ds.boxes["finding"] == target, "image_id"].unique()
        sets = [box_sets(ds.boxes_of(i), target) for i in ids]
        assert table.loc[target, "images"] == len(ids)
        assert table.loc[target, "B_cbar boxes"] == sum(len(s.others) for s in sets)
        assert table.loc[target, "dropped by IoU"] == sum(len(s.dropped) for s in sets)
        assert table.loc[target, "DOCO dropped"] == sum(s.doco_empty for s in sets)
    assert table.loc["total", "images"] == table.drop("total")["images"].sum()


def test_gallery_artifacts_match_their_hashes(record):
    g = report.gallery_frame(record)
    assert report.verify_gallery(g) == len(g)
    doco = g[(g["condition"] == "DOCO") & (g["preset"] == "paper")]
    assert all(b["set"] == "B_cbar" for boxes in doco["boxes_used"] for b in boxes)
    base = g[g["condition"] == "Baseline"].iloc[0]
    with Image.open(base["path"]) as im:
        assert np.array_equal(np.asarray(im), load_dataset("demo").load_image(base["image_id"]))
    fig = report.plot_gallery(g, preset="paper")
    assert len([ax for ax in fig.axes if ax.images]) == 2 + 3 * 3
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_tier_table(record):
    tiers = perturbation_tables.tier_counts(record.trials).frame
    assert tiers["cases"].sum() == 12
    assert tiers["share"].sum() == pytest.approx(1.0)


def test_rerun_returns_the_same_record(record, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(record.path.parents[2]))
    again = protocols.run("perturbations", "test", SPEC, progress=False)
    assert again.path == record.path


def test_spec_validation():
    with pytest.raises(ValueError, match="unknown spec keys"):
        protocols.resolve("perturbations", {"colour": 1})
    with pytest.raises(ValueError, match="not in dataset"):
        protocols.resolve("perturbations", {"gallery": [["nope", "Atelectasis"]]})


def test_cli_export(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "export"
    args = parser.parse_args(["perturb", "--dataset", "demo", "--out", str(out), "--limit", "3", "--ps", "0", "1",
                              "--conditions", "FullNoise", "OCO", "DOCO", "-q"])
    assert args.func is perturb_main
    assert perturb_main(args) == 0
    manifest = pd.read_csv(out / "manifest.csv")
    ok = manifest[manifest["status"] == "ok"]
    assert set(manifest["condition"]) <= {"FullNoise", "OCO", "DOCO"}
    assert (ok["condition"] == "FullNoise").sum() == 3
    for row in ok.itertuples():
        data = (out / row.file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == row.png_sha256
    again = tmp_path / "again"
    perturb_main(parser.parse_args(["perturb", "--out", str(again), "--limit", "3", "--ps", "0", "1",
                                    "--conditions", "FullNoise", "OCO", "DOCO", "-q"]))
    assert pd.read_csv(again / "manifest.csv")["sha256"].equals(manifest["sha256"])
    bad = parser.parse_args(["perturb", "--dataset", "no-such-dataset", "--out", str(tmp_path / "x"), "-q"])
    assert perturb_main(bad) == 1
