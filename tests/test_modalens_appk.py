"""Appendix K: the surrogate's preprocessing and op-norm, the adapter on a DenseNet-shaped stand-in,
the offline weight policy, the surrogate split and Table 24 on hand-built trials."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.metrics.surrogate import (HEAD_TO_FINDING, SURROGATE_FINDINGS, XRV_PATHOLOGIES, center_crop,
                                           finding_scores, op_norm, surrogate_call, xrv_normalize, xrv_preprocess)
from shovir_core.models.spec import ModelNotAvailableError
from shovir_core.models.xrv import (XRV_WEIGHTS_FILE, ReferenceSurrogate, XRVSurrogate, image_scores, load_xrv,
                                    score_images, tiny_xrv_densenet, xrv_weights_path)
from shovir_core.tables import modalens_appk as tk


def test_preprocessing_follows_the_paper():
    img = np.zeros((40, 60), np.uint8)
    img[:, 30:] = 255
    x = xrv_preprocess(img)
    assert x.shape == (1, 224, 224) and x.dtype == np.float32
    assert x.min() >= -1024 - 1e-3 and x.max() <= 1024 + 1e-3
    assert center_crop(xrv_normalize(img)).shape == (40, 40), "centre crop to the shorter side"
    # anti-aliasing: a one-pixel checkerboard downsampled averages to mid-grey, not to aliased stripes
    fine = (np.indices((448, 448)).sum(axis=0) % 2 * 255).astype(np.uint8)
    assert np.abs(xrv_preprocess(fine)).max() < 100
    rgb = np.stack([img] * 3, axis=2)
    assert np.allclose(xrv_preprocess(rgb), x)


def test_op_norm_maps_the_operating_point_to_one_half_piecewise_linearly():
    op = np.array([0.053, 0.327, np.nan])
    p = np.array([[0.0, 0.0, 0.3], [0.053, 0.327, 0.3], [1.0, 1.0, 0.3], [0.0265, 0.6635, 0.3]])
    out = op_norm(p, op)
    assert out[0, :2].tolist() == [0.0, 0.0] and out[1, :2].tolist() == pytest.approx([0.5, 0.5])
    assert out[2, :2].tolist() == pytest.approx([1.0, 1.0])
    assert out[3, :2].tolist() == pytest.approx([0.25, 0.75])
    assert (out[:, 2] == 0.5).all(), "a blank slot reads 0.5, as the package's op_norm"
    grid = np.linspace(0, 1, 101)
    assert (np.diff(op_norm(grid, 0.2)) >= 0).all(), "monotone"


def test_heads_composite_and_calls():
    assert len(HEAD_TO_FINDING) == 11 and HEAD_TO_FINDING["Effusion"] == "Pleural Effusion"
    assert len(SURROGATE_FINDINGS) == 12 and "Support Devices" not in SURROGATE_FINDINGS
    s = np.full((2, 18), 0.1)
    s[0, XRV_PATHOLOGIES.index("Effusion")] = 0.9
    fs = finding_scores(s)
    assert fs["Pleural Effusion"].tolist() == [0.9, 0.1] and fs["composite"].tolist() == [0.9, 0.1]
    assert surrogate_call(np.array([0.39, 0.4, 0.5, 0.6, 0.61])).tolist()[0] == 0.0
    assert np.isnan(surrogate_call(np.array([0.45]))[0]) and surrogate_call(np.array([0.61]))[0] == 1.0
    with pytest.raises(ValueError, match="no head"):
        finding_scores(np.zeros((1, 2)), heads=("Edema", "Atelectasis"))


def test_adapter_on_a_densenet_shaped_stand_in():
    net, ops = tiny_xrv_densenet(seed=0)
    sur = XRVSurrogate(net, ops)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (64, 80), dtype=np.uint8), rng.integers(0, 256, (96, 96), dtype=np.uint8)]
    raw = sur.probabilities(imgs)
    assert raw.shape == (2, 18) and ((raw > 0) & (raw < 1)).all()
    sc = sur.scores(imgs)
    assert set(sc["normalised"]) == set(SURROGATE_FINDINGS)
    j = XRV_PATHOLOGIES.index("Edema")
    assert sc["normalised"]["Edema"] == pytest.approx(op_norm(raw[:, j], ops[j]))
    assert sc["raw"]["composite"] == pytest.approx(raw[:, [i for i, h in enumerate(XRV_PATHOLOGIES) if h]].max(axis=1))
    again = XRVSurrogate(*tiny_xrv_densenet(seed=0)).probabilities(imgs)
    assert np.array_equal(raw, again), "seeded, deterministic"
    with pytest.raises(ValueError, match="not the 11 heads"):
        XRVSurrogate(net, ops, pathologies=("Edema",) + XRV_PATHOLOGIES[1:])
    ids = {"a": imgs[0], "b": imgs[1]}
    by_id = score_images(sur, ids.__getitem__, ["a", "b", "a"])
    assert list(by_id) == ["a", "b"] and by_id["b"]["Edema"] == pytest.approx(sc["normalised"]["Edema"][1])
    both = image_scores(sur, ids.__getitem__, ["a", "b", "a"])
    assert both["normalised"] == by_id and both["raw"] == score_images(sur, ids.__getitem__, ["a", "b"], kind="raw")


def test_weights_come_from_a_local_file_only(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOVIR_XRV_WEIGHTS", raising=False)
    monkeypatch.setenv("SHOVIR_MODEL_DIR", str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match=XRV_WEIGHTS_FILE) as err:
        xrv_weights_path()
    assert str(tmp_path / "torchxrayvision" / XRV_WEIGHTS_FILE) in str(err.value) and "never downloads" in str(err.value)
    f = tmp_path / "torchxrayvision" / XRV_WEIGHTS_FILE
    f.parent.mkdir()
    f.write_bytes(b"x")
    assert xrv_weights_path() == f
    try:
        import torchxrayvision  # noqa: F401
    except ImportError:
        with pytest.raises(ModelNotAvailableError, match="torchxrayvision"):
            load_xrv()


def _trials(n_patients: int, *, seed: int):
    """P arm follows the report label (no flip); A flips exactly when the surrogate calls differ."""
    rng = np.random.default_rng(seed)
    rows, scores = [], {}
    for p in range(n_patients):
        c, d = f"i{p}c", f"i{p}d"
        scores[c] = {"Edema": float(rng.uniform(0, 1)), "composite": float(rng.uniform(0, 1))}
        scores[d] = {"Edema": float(rng.uniform(0, 1)), "composite": float(rng.uniform(0, 1))}
        for q in ("Edema", "composite", "Support Devices"):
            yc = scores[c].get(q, 0.0) >= 0.5
            yd = scores[d].get(q, 0.0) >= 0.5
            rows.append({"trial_id": f"{p}:{q}", "case_id": f"c{p}", "patient_id": f"p{p}", "finding": q,
                         "image_id": c, "sub_image_id": d, "label_changed": float(rng.random() < 0.3),
                         "readout_c": "yes" if yc else "no", "readout_d": "yes" if yd else "no"})
    t = pd.DataFrame(rows)
    present = t.assign(readout_d=t["readout_c"])
    return present, t, scores


def test_surrogate_split_and_table24():
    present, absent, scores = _trials(200, seed=0)
    s = tk.surrogate_split(absent, scores)
    assert (s.loc[s["finding"] == "Support Devices", "split"] == "unmapped").all()
    res = tk.surrogate_table(present, absent, scores, n_draws=300, seed=0)
    v = res.values
    assert v["t24.n_change"] + v["t24.n_preserve"] + v["t24.n_excluded"] == v["t24.n_trials"] == 400
    assert v["t24.n_unmapped"] == 200
    assert v["t24.A.fr_change"] == 1.0 and v["t24.A.fr_preserve"] == 0.0, "A flips exactly on predicted changes"
    assert v["t24.P.fr_change"] == 0.0 and v["t24.P.diff_pp"] == 0.0
    assert v["t24.a_minus_p_lo_pp"] > 50
    wide = tk.surrogate_table(present, absent, scores, n_draws=50, seed=0, band=0.3).values
    assert wide["t24.n_excluded"] > v["t24.n_excluded"]
    with pytest.raises(ValueError, match="no scores"):
        tk.surrogate_split(absent, {k: v for k, v in scores.items() if k != "i0c"})


def test_head_validity_auroc_and_rates():
    present, _, scores = _trials(100, seed=1)
    present = present.assign(target_c=[float(scores[i].get(f, 0.0) > 0.7) for i, f in
                                       zip(present["image_id"], present["finding"])])
    hv = tk.head_validity(present, scores).values
    assert hv["Edema.auroc"] == pytest.approx(1.0)
    assert "Support Devices.auroc" not in hv
    assert 0 < hv["Edema.call_rate"] < 1


def test_params_demo_reuse_the_tables_records_and_mimic_resolves(monkeypatch):
    from pathlib import Path

    from shovir_core import protocols
    from shovir_core.params import load_params

    demo, tables = load_params("modalens_appk", "demo"), load_params("modalens_appk", "mimic")
    ref = load_params("modalens_tables", "demo")["runs"]
    assert demo["runs"]["P"] == ref["P"] and demo["runs"]["A"] == ref["A"]
    assert demo["runs"]["scores"]["spec"]["surrogate"] == "reference"
    assert tables["runs"]["scores"]["spec"]["surrogate"] == "torchxrayvision"
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(Path(__file__).parent / "fixtures" / "mimic_jpg"))
    for key, r in tables["runs"].items():
        spec = protocols.resolve(r["protocol"], r["spec"])
        if key == "scores":  # the surrogate scores the cohort of the P and A records
            p = protocols.resolve("modalens", tables["runs"]["P"]["spec"])
            assert all(spec[k] == p[k] for k in ("dataset_sha256", "ssim_size", "n_patients", "substitute_seed"))
            assert spec["surrogate_id"] == "torchxrayvision:densenet121-res224-chex"
        else:
            assert spec["model"] == "medgemma-27b"


def test_surrogate_record_holds_the_scores_of_every_shown_image(runs_root):
    from shovir_core.data import load_dataset
    from shovir_core.protocols import modalens as ml
    from shovir_core.protocols import run

    spec = {"dataset": "demo-64px", "ssim_size": 64, "n_patients": 4, "surrogate": "reference"}
    rec = run("modalens-surrogate", "t.scores", dict(spec), progress=False)
    scores = tk.record_scores(rec.trials)
    cases, _ = ml.build_cases(ml.resolve_spec({"dataset": "demo-64px", "ssim_size": 64, "n_patients": 4}))
    shown = sorted(set(cases["image_id"]) | set(cases["sub_image_id"]))
    assert sorted(scores["normalised"]) == sorted(scores["raw"]) == shown
    ds = load_dataset("demo-64px")
    direct = score_images(ReferenceSurrogate(), ds.load_image, shown[:3], kind="raw")
    for i in shown[:3]:
        assert scores["raw"][i] == pytest.approx(direct[i])
    assert rec.manifest["counts"]["n_images"] == len(shown)
    with pytest.raises(ValueError, match="xrv_weights"):
        run("modalens-surrogate", "t.bad", {**spec, "xrv_weights": "x.pt"}, progress=False)


def test_equals_the_packages_own_functions_and_densenet_when_installed(tmp_path, monkeypatch):
    """Runs where torchxrayvision 1.5.4 (and torchvision) are installed; skipped otherwise."""
    xrv = pytest.importorskip("torchxrayvision")
    import torch

    from shovir_core.metrics.surrogate import XRV_OP_THRESHS

    rng = np.random.default_rng(0)
    for shape in [(300, 257), (100, 141)]:
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        ref = xrv.datasets.XRayResizer(224)(xrv.datasets.XRayCenterCrop()(xrv.datasets.normalize(img, 255)[None]))
        assert np.array_equal(xrv_preprocess(img), ref)
    p = rng.random((20, 18))
    ref = xrv.models.op_norm(torch.tensor(p, dtype=torch.float32), torch.tensor(XRV_OP_THRESHS, dtype=torch.float32))
    assert np.allclose(op_norm(p, XRV_OP_THRESHS), ref.numpy(), atol=1e-6)
    net = xrv.models.DenseNet(weights=None)  # the package's architecture, random weights, no download
    f = tmp_path / XRV_WEIGHTS_FILE
    torch.save(net, f)
    sur = load_xrv(weights_path=f)
    img = rng.integers(0, 256, (240, 260), dtype=np.uint8)
    x = torch.from_numpy(xrv_preprocess(img)[None])
    with torch.inference_mode():
        want = xrv.models.op_norm(torch.sigmoid(net.classifier(net.features2(x))),
                                  torch.tensor(XRV_OP_THRESHS, dtype=torch.float32)).numpy()[0]
    got = op_norm(sur.probabilities([img]), XRV_OP_THRESHS)[0]
    assert np.allclose(got, want, atol=1e-5)
