"""ShoViR tables call the metric functions: one path for FR, Δ_X and μ-F1 under every label policy."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.labels import apply_policy
from shovir_core.metrics import mu_f1, per_class_f1
from shovir_core.metrics import shovir as ms
from shovir_core.protocols.shovir import label_columns
from shovir_core.tables import shovir as sv

CLASSES = ("Edema", "Atelectasis")
POLICIES = sv.UNCERTAIN


def _row(model, cond, p, image, target, pred, ref, gt=1.0):
    row = {"model": model, "level": "disease", "condition": cond, "p": p, "image_id": image, "target": target}
    for prefix in ("pred", "ref", "gt"):
        row.update({col: np.nan for col in label_columns(prefix)})
    row.update({f"pred.{target}": pred, f"ref.{target}": ref, f"gt.{target}": gt})
    return row


def _random_trials(seed: int = 0, n_images: int = 40) -> pd.DataFrame:
    """RO / OCO at p = 0 and 1 with predictions and references drawn from 1, 0, -1 and blank."""
    rng = np.random.default_rng(seed)
    codes = np.array([1.0, 0.0, -1.0, np.nan])
    rows = []
    for i in range(n_images):
        for c in CLASSES[: 1 + i % 2]:
            ref = rng.choice([1.0, 1.0, 1.0, -1.0, 0.0])
            for cond in ("RO", "OCO"):
                for p in (0.0, 1.0):
                    pred = rng.choice(codes, p=[0.5, 0.2, 0.2, 0.1])
                    rows.append(_row("m", cond, p, f"img{i:03d}", c, pred, ref))
    return pd.DataFrame(rows)


def _side(trials, cond, p):
    s = trials[(trials["condition"] == cond) & np.isclose(trials["p"], p)]
    return pd.DataFrame({"image_id": s["image_id"], "target": s["target"],
                         "pred": [r[f"pred.{t}"] for t, (_, r) in zip(s["target"], s.iterrows())],
                         "ref": [r[f"ref.{t}"] for t, (_, r) in zip(s["target"], s.iterrows())],
                         "gt": [r[f"gt.{t}"] for t, (_, r) in zip(s["target"], s.iterrows())]})


def test_flip_rate_under_each_policy_by_hand():
    """Image d's OCO label is uncertain: a flip (negative), dropped (excluded), kept (positive)."""
    rows = []
    for image, ro, oco in (("a", 1.0, 0.0), ("b", 1.0, 1.0), ("c", 0.0, 0.0), ("d", 1.0, -1.0)):
        for cond, pred in (("RO", ro), ("OCO", oco)):
            rows.append(_row("m", cond, 1.0, image, "Edema", pred, 1.0))
    trials = pd.DataFrame(rows)
    got = {u: sv.shortcut_metrics(trials, n_draws=50, rng=np.random.default_rng(0), uncertain=u)
           .frame.set_index("arm").loc["OCO"] for u in POLICIES}
    assert got["negative"]["fr"] == pytest.approx(2 / 3)
    assert got["excluded"]["fr"] == pytest.approx(1 / 2)
    assert got["positive"]["fr"] == pytest.approx(1 / 3)
    assert (got["excluded"]["n_items"], got["excluded"]["n_excluded"], got["negative"]["n_excluded"]) == (4, 1, 0)
    # Δ_X = F1(RO) - F1(OCO), F1 = 2tp / (2tp + fp + fn): RO tp=3 fn=1 -> 6/7; OCO negative tp=1 fn=3 -> 2/5,
    # positive tp=2 fn=2 -> 2/3; excluded scores a, b, c only: RO tp=2 fn=1 -> 4/5, OCO tp=1 fn=2 -> 1/2
    assert got["negative"]["delta"] == pytest.approx(6 / 7 - 2 / 5)
    assert got["excluded"]["delta"] == pytest.approx(4 / 5 - 1 / 2)
    assert got["positive"]["delta"] == pytest.approx(6 / 7 - 2 / 3)


@pytest.mark.parametrize("uncertain", POLICIES)
def test_table_equals_metric_functions_on_the_same_records(uncertain, check_table):
    trials = _random_trials()
    table = sv.shortcut_metrics(trials, p=1.0, n_draws=100, rng=np.random.default_rng(0), uncertain=uncertain)
    check_table(table)
    rows = table.frame.set_index("arm")
    policy = f"u-{uncertain}"
    for arm, (cond_x, p_x, p_ro) in {"OCO": ("OCO", 1.0, 1.0), "RO-control": ("RO", 1.0, 0.0)}.items():
        x, ro = _side(trials, cond_x, p_x), _side(trials, "RO", p_ro)
        items = x.merge(ro, on=["image_id", "target"], suffixes=("_x", "_ro"))
        lab = {k: apply_policy(items[col].to_numpy(float), policy)
               for k, col in (("y", "gt_x"), ("ref", "ref_x"), ("pred_ro", "pred_ro"), ("pred_x", "pred_x"))}
        want = ms.shortcut_scores(items["target"], **lab)
        got = rows.loc[arm]
        for stat in ("fr", "delta", "mu_f1_r", "mu_f1_x"):
            assert got[stat] == pytest.approx(want[stat], rel=1e-12, abs=1e-15), (arm, stat)
        for n in ("n_items", "n_eligible", "n_flipped", "n_excluded"):
            assert got[n] == want[n], (arm, n)
        # FR through the wide per-class path (rows images, columns classes)
        wide = {k: pd.DataFrame({"image_id": items["image_id"], "target": items["target"], "v": v})
                .pivot(index="image_id", columns="target", values="v") for k, v in lab.items()}
        by_class = ms.flip_rate_by_class(wide["y"], wide["pred_ro"], wide["pred_x"])
        assert got["fr"] == pytest.approx(ms.pooled_flip_rate(by_class))
        # Δ_X through per-class F1 and μ-F1, on the items both arms can score
        both = ~(np.isnan(lab["pred_ro"]) | np.isnan(lab["pred_x"]) | np.isnan(lab["ref"]))
        mus = {}
        for side in ("ro", "x"):
            f1, n = {}, {}
            for c in CLASSES:
                keep = both & (items["target"] == c).to_numpy()
                t = per_class_f1(pd.DataFrame({c: items[f"pred_{side}"][keep]}),
                                 pd.DataFrame({c: items["ref_x"][keep]}), classes=[c], uncertain=uncertain).iloc[0]
                f1[c], n[c] = t.f1, t.tp + t.fp + t.fn + t.tn
            mus[side] = mu_f1(f1, n)
        assert got["delta"] == pytest.approx(ms.delta_x(mus["ro"], mus["x"]))
        assert got["delta_lo"] <= got["delta"] <= got["delta_hi"]


def test_excluded_policy_differs_from_negative_where_labels_are_uncertain():
    trials = _random_trials(seed=1)
    res = {u: sv.shortcut_metrics(trials, n_draws=50, rng=np.random.default_rng(0), uncertain=u).frame.set_index("arm")
           for u in POLICIES}
    assert (res["negative"]["n_excluded"] == 0).all() and (res["excluded"]["n_excluded"] > 0).all()
    for stat in ("fr", "delta"):
        assert not np.allclose(res["excluded"][stat], res["negative"][stat]), stat
        assert not np.allclose(res["excluded"][stat], res["positive"][stat]), stat
    # without uncertain codes the three policies agree
    certain = trials.replace(-1.0, 0.0)
    same = [sv.shortcut_metrics(certain, n_draws=50, rng=np.random.default_rng(0), uncertain=u).frame for u in POLICIES]
    for other in same[1:]:
        pd.testing.assert_frame_equal(same[0], other)


def test_per_class_drops_excluded_pairs_and_mu_f1_weights_what_it_scores(check_table):
    trials = _random_trials(seed=2)
    neg, exc = (sv.per_class(trials, uncertain=u) for u in ("negative", "excluded"))
    check_table(exc)
    key = ["model", "condition", "p", "class"]
    n, e = neg.frame.set_index(key), exc.frame.set_index(key)
    assert (n["n_excluded"] == 0).all() and (e["n_excluded"] > 0).any()
    assert ((e["n"] + e["n_excluded"]) == n["n"]).all()
    cell = e.loc[("m", "OCO", 1.0, "Edema")]
    s = _side(trials, "OCO", 1.0)
    s = s[s["target"] == "Edema"]
    keep = ~(s["pred"].eq(-1) | s["ref"].eq(-1))
    want = per_class_f1(s.loc[keep, ["pred"]].set_axis(["Edema"], axis=1),
                        s.loc[keep, ["ref"]].set_axis(["Edema"], axis=1), classes=["Edema"]).iloc[0]
    assert cell["n"] == keep.sum() and cell["f1"] == pytest.approx(want.f1)
    curves = sv.mu_f1_curves(exc)
    check_table(curves)
    g = e.loc[("m", "OCO", 1.0)]
    row = curves.frame.set_index(["model", "condition", "p"]).loc[("m", "OCO", 1.0)]
    assert row["mu_f1"] == pytest.approx((g["f1"] * g["n"]).sum() / g["n"].sum())
    assert row["n_items"] == g["n"].sum()
    assert curves.values["fig2.m.OCO.p100"] == pytest.approx(row["mu_f1"])


def test_glue_values_and_run_ids_follow_the_tables(check_table):
    trials = _random_trials()
    pc = sv.per_class(trials).with_runs(["shovir/a/000000000000"])
    fig3b = sv.per_class_across_models(pc)
    assert fig3b.run_ids == ("shovir/a/000000000000",)
    assert sv.mu_f1_curves(pc).run_ids == pc.run_ids
    check_table(fig3b)
    sc = sv.shortcut_metrics(trials, n_draws=50, rng=np.random.default_rng(0))
    assert sc.values["fig3a.m.OCO.n_eligible"] == int(sc.frame.set_index("arm").loc["OCO", "n_eligible"])
    assert {k.rsplit(".", 1)[1] for k in sc.values} == {"delta", "delta_lo", "delta_hi", "fr", "fr_lo", "fr_hi",
                                                       "n_eligible"}
    shown = sc.select(["n_items", "delta", "fr"]).display()
    assert list(shown.columns) == ["items", "Δ_X", "FR"] and shown.index.names == ["model", "arm"]
    with pytest.raises(ValueError, match="uncertain"):
        sv.per_class(trials, uncertain="ignore")


def _context_trials(*, n: int = 30, n_doco: int = 2, ro_flips: int = 10) -> pd.DataFrame:
    """ref-context-shortcut-like items: OCO never moves a call; RO at p = 1 turns off the first ``ro_flips``
    calls (items without a co-finding box); DOCO exists for the last ``n_doco`` items and turns them off."""
    m, rows = "ref-context-shortcut", []
    for i in range(n):
        img = f"img{i:03d}"
        for cond in ("RO", "OCO"):
            rows.append(_row(m, cond, 0.0, img, "Edema", 1.0, 1.0))
        rows.append(_row(m, "OCO", 1.0, img, "Edema", 1.0, 1.0))
        rows.append(_row(m, "RO", 1.0, img, "Edema", 0.0 if i < ro_flips else 1.0, 1.0))
        if i >= n - n_doco:
            rows.append(_row(m, "DOCO", 0.0, img, "Edema", 1.0, 1.0))
            rows.append(_row(m, "DOCO", 1.0, img, "Edema", 0.0, 1.0))
    return pd.DataFrame(rows)


def test_reference_checks_need_enough_items_and_fall_back_from_a_tiny_doco_set():
    few = sv.reference_checks(_context_trials(n_doco=2))
    assert few.values["checks.context.design"] == "RO without co-finding boxes"
    assert few.values["checks.context.n_doco"] == 2
    assert few.values["checks.context.fr_oco_clean"] == 0.0
    assert few.values["checks.context.fr_ro_no_cofinding"] == pytest.approx(10 / 28)
    assert few.frame["holds"].all() and (few.frame["n"] >= sv.MIN_FR_ITEMS).all()
    # the context noise check can fail: RO changes no call
    flat = sv.reference_checks(_context_trials(n_doco=2, ro_flips=0))
    assert not flat.frame["holds"].iloc[-1]
    # with enough DOCO items the paper's arm decides
    many = sv.reference_checks(_context_trials(n_doco=15, ro_flips=0))
    assert many.values["checks.context.design"] == "DOCO"
    assert "FR(DOCO) > FR(OCO)" in set(many.frame["check"]) and many.frame["holds"].all()
    # and a rate over fewer than the minimum cannot decide a check
    tiny = sv.reference_checks(_context_trials(n=8, n_doco=2, ro_flips=4))
    assert not tiny.frame["holds"].any()


def test_occluded_area_is_the_union_of_the_recorded_boxes():
    import json

    def trial(cond, target, boxes):
        return {"model": "m", "level": "disease", "condition": cond, "p": 1.0, "target": target,
                "perturbation": json.dumps({"boxes": [dict(zip(("x1", "y1", "x2", "y2"), b)) for b in boxes],
                                            "noise": {"n_pixels": 100 * 100}})}

    t = pd.DataFrame([trial("OCO", "Lung Lesion", [(0, 0, 10, 10)]),
                      trial("RO", "Lung Lesion", [(0, 0, 20, 10), (10, 0, 30, 10)]),  # overlap: 30 x 10
                      trial("OCO", "Lung Lesion", [(50, 50, 60, 70)])])
    a = sv.occluded_area(t)
    assert a.values["area.OCO.Lung_Lesion"] == pytest.approx((0.01 + 0.02) / 2)
    assert a.values["area.RO.Lung_Lesion"] == pytest.approx(0.03)
    assert a.frame.set_index(["condition", "class"]).loc[("OCO", "Lung Lesion"), "n_items"] == 2


def test_bleu_breakdown_separates_brevity_from_precision():
    ref = "there is pleural effusion . there is atelectasis . no pneumothorax . no edema ."
    rows = []
    for i in range(5):
        rows.append({"model": "m", "level": "image", "condition": "Baseline", "image_id": f"i{i}",
                     "generated": "there is pleural effusion .", "reference_text": ref})
        rows.append({"model": "m", "level": "image", "condition": "FullNoise", "image_id": f"i{i}",
                     "generated": "there is pleural effusion . there is consolidation . there is edema .",
                     "reference_text": ref})
    b = sv.bleu_breakdown(pd.DataFrame(rows)).frame.set_index("condition")
    assert np.allclose(b["bleu1"], b["brevity_penalty"] * b["precision_1"])
    # every clean word is in the reference, yet the longer noise report scores a higher BLEU-1
    assert b.loc["Baseline", "precision_1"] == 1.0 > b.loc["FullNoise", "precision_1"]
    assert b.loc["FullNoise", "bleu1"] > b.loc["Baseline", "bleu1"]
    assert b.loc["FullNoise", "brevity_penalty"] > b.loc["Baseline", "brevity_penalty"]


def test_attack_sensitivity_is_the_trapezoid_of_the_relative_drop(check_table):
    """S_AUC of a two-point grid is half the relative drop at p = 1; Δ subtracts RO's S_AUC."""
    trials = _random_trials(seed=4)
    pc = sv.per_class(trials)
    sens = sv.attack_sensitivity(pc)
    check_table(sens)
    curves = sv.mu_f1_curves(pc).frame.set_index(["model", "condition", "p"])["mu_f1"]
    s = sens.frame.set_index(["model", "condition"])
    for cond in ("RO", "OCO"):
        f0, f1 = curves[("m", cond, 0.0)], curves[("m", cond, 1.0)]
        assert s.loc[("m", cond), "s_auc"] == pytest.approx(0.5 * (f0 - f1) / f0)
        assert s.loc[("m", cond), "s_100"] == pytest.approx((f0 - f1) / f0)
    assert s.loc[("m", "OCO"), "delta_s_auc"] == pytest.approx(s.loc[("m", "OCO"), "s_auc"] - s.loc[("m", "RO"), "s_auc"])
    assert np.isnan(s.loc[("m", "RO"), "delta_s_auc"])
    assert sens.values["sens.m.OCO.delta"] == pytest.approx(s.loc[("m", "OCO"), "delta_s_auc"])
    unweighted = sv.attack_sensitivity(pc, weighting="unweighted").frame.set_index(["model", "condition"])
    g = pc.frame.set_index(["model", "condition", "p"])
    f0, f1 = (g.loc[("m", "OCO", p), "f1"].mean() for p in (0.0, 1.0))
    assert unweighted.loc[("m", "OCO"), "s_auc"] == pytest.approx(0.5 * (f0 - f1) / f0)
    with pytest.raises(ValueError, match="no model left"):
        sv.attack_sensitivity(pc, exclude_models=["m"])


def test_target_class_intervals_score_each_file_with_the_authors_bootstrap(check_table):
    from shovir_core.metrics.target_class import target_class_f1

    trials = _random_trials(seed=5)
    t = sv.target_class_intervals(trials, n_resamples=50)
    check_table(t)
    f = t.frame.set_index(["model", "condition", "p", "class"])
    assert set(f.index.get_level_values("condition")) == {"Baseline", "RO", "OCO"}
    s = _side(trials, "OCO", 1.0).assign(o=lambda d: d["target"].map({"Atelectasis": 0, "Edema": 1}))
    s = s.sort_values(["o", "image_id"])
    want = target_class_f1(s["target"].to_numpy(), s["pred"].to_numpy(), s["ref"].to_numpy(), n_resamples=50)
    for c in CLASSES:
        assert f.loc[("m", "OCO", 1.0, c), "median"] == want.loc[c, "median"]
        assert f.loc[("m", "OCO", 1.0, c), "n"] == want.loc[c, "n"]
    assert (f["ci_l"] <= f["median"]).all() and (f["median"] <= f["ci_h"]).all()


def _doco_trials(*, n_multi: int, doco_flips: bool, n_single: int = 20) -> pd.DataFrame:
    """Context-model items: ``n_multi`` images with Edema and Atelectasis boxes (both items enter DOCO,
    both called under RO at p = 1 and under OCO) and ``n_single`` images with an Edema box only. DOCO at
    p = 1 turns the calls off when ``doco_flips`` (the planted context shortcut), else keeps them."""
    m, rows = "ref-context-shortcut", []
    for i in range(n_multi + n_single):
        img = f"img{i:03d}"
        for c in CLASSES if i < n_multi else CLASSES[:1]:
            for cond in ("RO", "OCO"):
                rows += [_row(m, cond, 0.0, img, c, 1.0, 1.0), _row(m, cond, 1.0, img, c, 1.0, 1.0)]
            if i < n_multi:
                rows.append(_row(m, "DOCO", 1.0, img, c, 0.0 if doco_flips else 1.0, 1.0))
    return pd.DataFrame(rows)


def test_doco_status_counts_what_doco_rests_on_and_validates_only_with_enough_items():
    few = sv.doco_status(_doco_trials(n_multi=5, doco_flips=True))
    v = few.values
    assert (v["doco.n_images"], v["doco.n_multi_images"], v["doco.n_multi_items"]) == (25, 5, 10)
    assert (v["doco.n_doco_items"], v["doco.n_doco_images"], v["doco.n_eligible"]) == (10, 5, 10)
    assert not v["doco.validated"] and v["doco.holds"] is None, "10 eligible items < 30: DOCO unvalidated"
    planted = sv.doco_status(_doco_trials(n_multi=20, doco_flips=True)).values
    assert planted["doco.validated"] and planted["doco.n_eligible"] == 40 and planted["doco.holds"]
    # the check can fail: a model whose calls survive DOCO does not show the context shortcut
    plain = sv.doco_status(_doco_trials(n_multi=20, doco_flips=False)).values
    assert plain["doco.validated"] and plain["doco.holds"] is False
    assert sv.doco_status(_doco_trials(n_multi=20, doco_flips=True), min_items=41).values["doco.holds"] is None
