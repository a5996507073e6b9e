"""The modalens-layers protocol on tiny-gemma3 and the layerwise statistics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core.metrics import layers as ly
from shovir_core.protocols import modalens_layers as mll
from shovir_core.protocols import run

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"
BASE = {"dataset": f"mimic-jpg:{FIXTURE}", "ssim_size": 32, "model": "tiny-gemma3", "n_patients": 1}


# --------------------------------------------------------------------------- statistics
def _lens(margins: np.ndarray) -> np.ndarray:
    m = np.asarray(margins, dtype=float)
    return np.stack([m, np.zeros_like(m)], axis=-1)


def test_disagreement_ends_at_the_flip_rate_and_agreement_has_a_floor():
    mc = np.array([[1, -1, 2], [-1, -1, -3], [1, 1, 1], [-1, 2, 0.5]])
    md = np.array([[1, 1, -2], [1, -1, -3], [-1, 1, 1], [-1, -2, 0.5]])
    m_c, m_d = ly.margins(_lens(mc)), ly.margins(_lens(md))
    dis = ly.disagreement(m_c, m_d)
    np.testing.assert_allclose(dis, [0.5, 0.5, 0.25])
    assert dis[-1] == np.mean((mc[:, -1] > 0) != (md[:, -1] > 0))
    np.testing.assert_allclose(ly.mean_abs_delta(m_c, m_d), [1.0, 1.5, 1.0])
    agree, floor = ly.agreement_with_final(m_c)
    np.testing.assert_allclose(agree, [0.75, 0.75, 1.0])
    assert floor == 0.75
    np.testing.assert_array_equal(ly.settling_layer(m_c), [2, 0, 0, 1])
    assert ly.still_apart(m_c, m_d).tolist() == [True, False, False, False]


def test_calibration_depth_finds_the_first_informative_layer():
    rng = np.random.default_rng(0)
    final = rng.random(200) > 0.5
    noise = rng.normal(size=(200, 3))
    m = np.column_stack([noise[:, 0], noise[:, 1], np.where(final, 1.0, -1.0) + 0.1 * noise[:, 2],
                         np.where(final, 1.0, -1.0)])
    bal = ly.balanced_agreement(m)
    assert bal[-1] == 1.0 and abs(bal[0] - 0.5) < 0.15
    depth = ly.calibration_depth(m, clusters=np.arange(200) // 2, n_draws=200, rng=np.random.default_rng(1),
                                 floor=0.6)
    assert depth["layer"] == 2 and depth["low"] <= 2 <= depth["high"]


def test_lens_shape_is_checked():
    with pytest.raises(ValueError, match="shape"):
        ly.margins(np.zeros((3, 4)))


# --------------------------------------------------------------------------- protocol
def test_spec_keys_and_lens_identity():
    a = mll.resolve_spec({**BASE})
    b = mll.resolve_spec({**BASE, "knockout_span": "question"})
    assert a == b and "knockout_span" not in a, "knockout keys never split a lens record's identity"
    k = mll.resolve_spec({**BASE, "analysis": "knockout", "knockout_layers": [0, 1]})
    assert k["knockout_span"] == "report" and k["knockout_layers"] == [0, 1]
    with pytest.raises(Exception, match="knockout_scope"):
        mll.resolve_spec({**BASE, "analysis": "knockout", "knockout_scope": "everything"})
    with pytest.raises(Exception, match="unknown"):
        mll.resolve_spec({**BASE, "layer": 3})


def test_lens_and_knockout_records_on_tiny_gemma3(runs_root):
    lens = run("modalens-layers", "t.lens", {**BASE}, progress=False).trials
    arr_c, arr_d = mll.lens_array(lens["lens_c"]), mll.lens_array(lens["lens_d"])
    assert arr_c.shape == (len(lens), 3, 2)  # embeddings + 2 layers
    m_c, m_d = ly.margins(arr_c), ly.margins(arr_d)
    flip = (lens["readout_c"] != lens["readout_d"]).mean()
    assert ly.disagreement(m_c, m_d)[-1] == flip
    np.testing.assert_allclose(arr_c[:, -1, 0], lens["logit_yes_c"], atol=1e-4)
    ko = run("modalens-layers", "t.ko", {**BASE, "analysis": "knockout", "knockout_span": "none"},
             progress=False).trials
    blocked = mll.lens_array(ko["ko_c"])
    assert blocked.shape == (len(ko), 2, 2)
    np.testing.assert_allclose(blocked[:, 0], arr_c[:, -1], atol=1e-4)  # blocking nothing = baseline
    with pytest.raises(ValueError, match="outside"):
        run("modalens-layers", "t.bad", {**BASE, "analysis": "knockout", "knockout_layers": [5]}, progress=False)


@pytest.mark.parametrize("profile", ["demo", "mimic"])
def test_appendix_n_params_resolve(profile, monkeypatch):
    """Every record the Appendix N params name resolves (mimic: MedGemma-27B on the fixture)."""
    from shovir_core.params import load_params

    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(FIXTURE))
    params = load_params("modalens_appn", profile)
    assert {"lens_P", "lens_A", "ko_report", "ko_image", "ko_question"} <= set(params["runs"])
    for r in params["runs"].values():
        assert r["protocol"] == "modalens-layers"
        spec = mll.resolve_spec(dict(r["spec"]))
        assert spec["model"] == ("medgemma-27b" if profile == "mimic" else "ref-vlm")
        if profile == "demo":
            from shovir_core.models.ref_vlm import EVAL_COHORT

            assert {k: spec[k] for k in EVAL_COHORT} == EVAL_COHORT, "the demo cohort is ref-vlm's held-out one"


def test_lens_array_reads_what_json_reads_and_falls_back_on_ragged_rows():
    import json

    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [json.dumps(np.round(rng.normal(size=(5, 2)), 5).tolist()) for _ in range(50)]
    rows += ["[[NaN, 1e-05], [Infinity, -Infinity], [-0.0, 3], [2.5, 1], [0, 0]]"]
    want = np.asarray([json.loads(v) for v in rows], dtype=float)
    got = mll.lens_array(pd.Series(rows))
    assert got.shape == (51, 5, 2) and got.tobytes() == want.tobytes()
    assert mll.lens_array(pd.Series(["[1.5, 2]", "[3, 4]"])).tolist() == [[1.5, 2.0], [3.0, 4.0]]
    with pytest.raises(ValueError):  # ragged rows are json's business (which refuses to make an array of them)
        mll.lens_array(pd.Series(["[1, 2]", "[1, 2, 3]"]))
