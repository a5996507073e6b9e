"""``ref-anchored@w`` holds its planted behaviour on the ModaLens demo designs, not only per distinct pair.

The gate is a hash of (report text, finding), so the share of *trials* that follow the report is
w only when the trials' reports differ: the demo's template reports state every negative and draw
their phrasing per study (``template_negatives: all``, ``template_wording: varied``). With the old
fixed routine-negative template, 246 of the 507 one-question cases shared one report text and the
realised share was 0.168.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.models import get_model
from shovir_core.models.reference import Anchored
from shovir_core.protocols import modalens as ml

DEMO = {"dataset": "demo-64px", "ssim_size": 64, "n_patients": 120, "model": "ref-anchored@0.5"}


def _trials(**spec):
    resolved = ml.resolve_spec({**DEMO, **spec})
    cases, _ = ml.build_cases(resolved)
    reports = ml._reports(resolved, cases)
    trials = ml._trial_frame(resolved, cases, reports)
    return resolved, cases, trials, ml.trial_reports(resolved, trials, reports)


@pytest.mark.parametrize("design", ["one_q", "all14"])
def test_demo_reports_are_distinct_per_study_and_the_gate_share_is_w(design):
    _, cases, trials, shown = _trials(design=design)
    assert shown.nunique() == len(cases)  # one distinct report per case
    for w in (0.25, 0.5, 0.75):
        share = np.mean([Anchored.gate(s, f) < w for s, f in zip(trials["report_sha256"], trials["finding"])])
        assert abs(share - w) < 0.06, (design, w, share)


def test_answer_sentence_arm_gate_share_is_near_w():
    _, _, trials, _ = _trials(design="one_q", text_control="answer_sentence")
    share = np.mean([Anchored.gate(s, f) < 0.5 for s, f in zip(trials["report_sha256"], trials["finding"])])
    assert abs(share - 0.5) < 0.1, share


def _score(spec, trials, shown, cases, *, image=True):
    from shovir_core.protocols.modalens import _load_pixels

    ds = ml._dataset(spec["dataset"])
    paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    images = {}
    if image:
        images = {i: _load_pixels(paths[i]) for i in pd.unique(pd.concat([trials["image_id"], trials["sub_image_id"]]))}
    out = ml._score_chunk(get_model(spec["model"]), spec, trials, shown, images)
    return out.set_index("trial_id").loc[trials["trial_id"]]


@pytest.fixture(scope="module")
def one_q_arms():
    arms = {}
    for key, extra in {"P": {}, "A": {"report": "absent"}, "P_noimage": {"image": False}}.items():
        spec, cases, trials, shown = _trials(design="one_q", **extra)
        arms[key] = _score(spec, trials, shown, cases, image=spec["image"])
    return arms


def test_one_question_report_branch_answers_the_report_and_the_rest_equals_report_absent(one_q_arms):
    P, A, N = one_q_arms["P"], one_q_arms["A"], one_q_arms["P_noimage"]
    follows = np.array([Anchored.gate(s, f) < 0.5 for s, f in zip(P["report_sha256"], P["finding"])])
    target = P["target_c"].to_numpy()
    yes = lambda df, side="c": (df[f"readout_{side}"].astype(str) == "yes").to_numpy()  # noqa: E731
    # the report states every label, so the report branch answers the source label on both images
    assert (yes(P)[follows] == (target[follows] == 1)).all()
    assert (yes(P, "d")[follows] == (target[follows] == 1)).all()
    assert (yes(N)[follows] == (target[follows] == 1)).all()
    # the image branch is exactly the report-absent answer
    assert (yes(P)[~follows] == yes(A)[~follows]).all() and (yes(P, "d")[~follows] == yes(A, "d")[~follows]).all()
    acc = {k: float(np.mean(yes(v) == (target == 1))) for k, v in one_q_arms.items()}
    assert acc["P"] > acc["A"] + 0.3, acc  # old template: 0.219 vs 0.097
    assert acc["P_noimage"] > 0.4, acc  # old template: 0.168 (specificity 0)
    flip = {k: float(np.mean(yes(v) != yes(v, "d"))) for k, v in one_q_arms.items()}
    assert flip["P_noimage"] == 0.0
    assert abs(flip["P"] / flip["A"] - 0.5) < 0.1, flip  # old template: 0.62
