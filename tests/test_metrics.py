"""Metrics agree with scikit-learn / sacrebleu / rouge-score on identical inputs."""
import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from shovir_core import metrics as M
from shovir_core.labels import CHEXPERT_5, CHEXPERT_CLASSES


@pytest.fixture
def codes():
    rng = np.random.default_rng(7)
    choices = np.array([1.0, 0.0, -1.0, np.nan])
    shape = (60, len(CHEXPERT_CLASSES))
    ref = pd.DataFrame(rng.choice(choices, size=shape, p=[.3, .3, .1, .3]), columns=CHEXPERT_CLASSES)
    pred = pd.DataFrame(rng.choice(choices, size=shape, p=[.3, .3, .1, .3]), columns=CHEXPERT_CLASSES)
    return pred, ref


@pytest.mark.parametrize("uncertain", ["negative", "positive"])
@pytest.mark.parametrize("average", ["micro", "macro"])
@pytest.mark.parametrize("classes", ["14", "5"])
def test_f1_matches_sklearn(codes, uncertain, average, classes):
    pred, ref = codes
    cls = list(CHEXPERT_CLASSES if classes == "14" else CHEXPERT_5)
    u = 1.0 if uncertain == "positive" else 0.0
    to_bin = lambda df: df[cls].replace(-1.0, u).fillna(0.0).to_numpy(int)  # noqa: E731
    expected = skm.f1_score(to_bin(ref), to_bin(pred), average=average, zero_division=0)
    got = M.f1_chexbert(pred, ref, classes=classes, average=average, uncertain=uncertain)
    assert got == pytest.approx(expected, abs=1e-12)


def test_per_class_table_matches_sklearn(codes):
    pred, ref = codes
    table = M.per_class_f1(pred, ref)
    yb = lambda df: df.replace(-1.0, 0.0).fillna(0.0).to_numpy(int)  # noqa: E731
    p, r, f, s = skm.precision_recall_fscore_support(yb(ref), yb(pred), zero_division=0)
    np.testing.assert_allclose(table.precision, p)
    np.testing.assert_allclose(table.recall, r)
    np.testing.assert_allclose(table.f1, f)
    np.testing.assert_array_equal(table.support, s)


def test_uncertain_excluded_drops_pairs():
    ref = pd.DataFrame({"Edema": [1, -1, 1, 0]})
    pred = pd.DataFrame({"Edema": [1, 1, -1, 1]})
    t = M.per_class_f1(pred, ref, classes=["Edema"], uncertain="excluded")
    assert (t.tp.iloc[0], t.fp.iloc[0], t.fn.iloc[0], t.tn.iloc[0]) == (1, 1, 0, 0)


def test_report_label_f1_keys(codes):
    out = M.report_label_f1(*codes)
    assert set(out) == {"f1_14_micro", "f1_14_macro", "f1_5_micro", "f1_5_macro"}
    assert all(0 <= v <= 1 for v in out.values())


def test_missing_class_column_is_named():
    with pytest.raises(ValueError, match="Edema"):
        M.per_class_f1(pd.DataFrame({"Cardiomegaly": [1]}), pd.DataFrame({"Cardiomegaly": [1]}),
                       classes=["Cardiomegaly", "Edema"])


def test_mu_f1_weights_and_validation():
    assert M.mu_f1(pd.Series({"A": 0.2, "B": 0.8, "C": np.nan}), {"A": 1, "B": 3, "C": 0}) == pytest.approx(0.65)
    with pytest.raises(ValueError, match="'B'"):
        M.mu_f1({"A": 0.2}, {"A": 1, "B": 3})


def test_bleu_rouge_against_packages():
    import sacrebleu
    from rouge_score import rouge_scorer
    hyps = ["the heart size is normal . no effusion", "small left pleural effusion", "no acute disease"]
    refs = ["heart size is normal . no pleural effusion", "left pleural effusion is small", "no acute cardiopulmonary disease"]
    expected4 = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score / 100
    assert M.bleu(hyps, refs, max_order=4) == pytest.approx(expected4)
    b1 = M.bleu(hyps, refs, max_order=1)
    assert expected4 < b1 <= 1
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = np.mean([scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs)])
    assert M.rouge_l(hyps, refs) == pytest.approx(expected)
    with pytest.raises(ValueError, match="3 hypotheses but 2"):
        M.bleu(hyps, refs[:2])


def test_kappa_balanced_accuracy_match_sklearn():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 500)
    b = np.where(rng.random(500) < 0.8, a, 1 - a)
    assert M.cohen_kappa(a, b) == pytest.approx(skm.cohen_kappa_score(a, b))
    assert M.balanced_accuracy(a, b) == pytest.approx(skm.balanced_accuracy_score(b, a))
    assert M.accuracy(a, b) == pytest.approx(skm.accuracy_score(b, a))
    assert M.sensitivity(a, b) == pytest.approx(skm.recall_score(b, a))
    assert M.specificity(a, b) == pytest.approx(skm.recall_score(1 - b, 1 - a))
    assert M.precision(a, b) == pytest.approx(skm.precision_score(b, a))
    cats = rng.choice(["yes", "no", "unc"], 300)
    cats2 = np.where(rng.random(300) < .6, cats, rng.choice(["yes", "no", "unc"], 300))
    assert M.cohen_kappa(cats, cats2) == pytest.approx(skm.cohen_kappa_score(cats, cats2))


def test_flip_rate_and_validation():
    assert M.flip_rate([1, 0, 1, 0], [1, 1, 0, 0]) == 0.5
    with pytest.raises(ValueError, match="binary"):
        M.flip_rate([1, np.nan], [1, 0])
    with pytest.raises(ValueError, match="differ in length"):
        M.flip_rate([1, 0, 1], [1, 0])


def test_margins_and_target_alignment():
    mc, md = np.array([0.0, 1.0, -1.0, 2.0]), np.array([0.2, -1.0, 1.0, 2.0])
    s = M.margin_change_stats(mc, md)
    assert s["mean_abs_margin_change"] == pytest.approx((0.2 + 2 + 2 + 0) / 4)
    assert s["share_margin_change_above"] == 0.5
    t = M.target_aligned_change(mc, md, [1, 0, 1, 0])
    assert t["target_aligned_change"] == pytest.approx((0.2 + 2 + 2 + 0) / 4)
    assert t["share_target_aligned"] == 0.75
    assert M.share_larger_without_report([1, -2, 0.1], [0.5, 2, 0.2]) == pytest.approx(1 / 3)


def test_transitions_partition_trials():
    c = np.array([1, 1, 0, 0, 1])
    d = np.array([0, 1, 1, 0, 0])
    t = M.transitions(c, d)
    assert t.n.to_dict() == {"correct->wrong": 2, "wrong->correct": 1, "correct->correct": 1, "wrong->wrong": 1}
    assert t.share.sum() == pytest.approx(1.0)


def test_response_bias_floor_and_majority():
    assert M.response_bias_floor(["yes"] * 3 + ["no"]) == pytest.approx(0.75 ** 2 + 0.25 ** 2)
    assert M.majority_baseline([1, 0, 0, 0, 0]) == pytest.approx(0.8)


def test_modality_interaction_pooled_and_macro():
    rng = np.random.default_rng(0)
    rows = []
    for cell, acc in zip(M.MODALITY_CELLS, (0.9, 0.8, 0.7, 0.5)):
        for finding in ("A", "B"):
            t = rng.integers(0, 2, 400)
            p = np.where(rng.random(400) < acc, t, 1 - t)
            rows.append(pd.DataFrame({"cell": cell, "finding": finding, "target": t, "pred": p}))
    df = pd.concat(rows)
    pooled = M.modality_interaction(df, average="pooled")
    ba = {c: skm.balanced_accuracy_score(g.target, g.pred) for c, g in df.groupby("cell")}
    assert pooled["interaction"] == pytest.approx((ba["full"] - ba["report+q"]) - (ba["image+q"] - ba["q"]))
    macro = M.modality_interaction(df, average="macro")
    ba_m = {c: np.mean([skm.balanced_accuracy_score(h.target, h.pred) for _, h in g.groupby("finding")])
            for c, g in df.groupby("cell")}
    assert macro["ba_full"] == pytest.approx(ba_m["full"])
    with pytest.raises(ValueError, match="unknown cells"):
        M.modality_interaction(df.assign(cell="x"))


def test_shovir_flip_rate_pooling():
    y = pd.DataFrame({"A": [1, 1, 1, 0], "B": [1, 1, 0, 0]})
    ro = pd.DataFrame({"A": [1, 1, 0, 1], "B": [1, 1, 0, 0]})
    x = pd.DataFrame({"A": [0, 1, 0, 0], "B": [0, 0, 0, 0]})
    t = M.flip_rate_by_class(y, ro, x)
    assert t.loc["A", "n_eligible"] == 2 and t.loc["A", "n_flipped"] == 1
    assert t.loc["B", "flip_rate"] == 1.0
    assert M.pooled_flip_rate(t) == pytest.approx(3 / 4)
    assert M.pooled_flip_rate(t, pooling="class_weighted") == pytest.approx((0.5 * 3 + 1.0 * 2) / 5)
    assert M.pooled_flip_rate(t, pooling="macro") == pytest.approx(0.75)
    same = M.flip_rate_by_class(y, ro, ro)  # X identical to RO (p = 0): nothing flips
    assert M.pooled_flip_rate(same) == 0
    with pytest.raises(ValueError, match="label policy"):
        M.flip_rate_by_class(y.replace(0, -1), ro, x)


def test_deltas():
    assert M.delta_fn(0.5, 0.1) == pytest.approx(0.4)
    np.testing.assert_allclose(M.delta_x([0.5, 0.4], [0.2, 0.4]), [0.3, 0.0])
    assert np.isnan(M.ratio(0.1, 0.0))


def test_schema_loads_and_formats():
    schema = M.metric_schema()
    for name in ("bleu1", "bleu4", "rouge_l", "f1_14_micro", "f1_5_macro", "mu_f1", "delta_fn", "delta_x",
                 "flip_rate_c", "flip_rate", "paired_diff", "ratio", "cohen_kappa", "balanced_accuracy",
                 "interaction", "response_bias_floor", "f1_radgraph", "green", "bertscore"):
        assert name in schema
    assert M.format_metric("paired_diff", 0.1237) == "+12.37 pp"
    assert M.format_metric("ratio", 17.07 / 4.70) == "3.6x"
    assert M.format_metric("flip_rate", float("nan")) == "–"
    with pytest.raises(KeyError, match="unknown metric"):
        M.metric_spec("nope")
    with pytest.raises(ValueError, match="outside its range"):
        M.metric_spec("accuracy").check(1.2)


def test_external_metric_unavailable_is_explicit(monkeypatch, tmp_path):
    monkeypatch.delenv("SHOVIR_BERTSCORE_WEIGHTS", raising=False)
    r = M.compute_external("bertscore", ["a"], ["a"])
    assert not r.available and r.value is None and r.reason
    # a plugged-in metric with local "weights" runs and reports its value
    (tmp_path / "w").mkdir()
    M.register_external_metric("toy_overlap", package="numpy", weights_env="SHOVIR_TOY_WEIGHTS",
                               adapter=lambda h, r, w: (0.25, np.array([0.25])), replace=True)
    try:
        assert not M.compute_external("toy_overlap", ["a"], ["b"]).available
        out = M.compute_external("toy_overlap", ["a"], ["b"], weights=tmp_path / "w")
        assert out.available and out.value == 0.25
        missing = M.compute_external("toy_overlap", ["a"], ["b"], weights=tmp_path / "absent")
        assert "does not exist" in missing.reason
    finally:
        M.EXTERNAL_METRICS.pop("toy_overlap")


def test_report_metrics_reference_options(monkeypatch):
    for var in ("SHOVIR_RADGRAPH_WEIGHTS", "SHOVIR_GREEN_WEIGHTS"):
        monkeypatch.delenv(var, raising=False)
    hyps = ["Mild cardiomegaly. No pleural effusion.", "Small left pleural effusion."]
    refs = ["Cardiomegaly. No effusion.", "No effusion. Lungs are clear."]
    out = M.report_metrics(hyps, refs)
    # labels of the reference reports: effusion appears only in hypothesis 2 -> one FP
    assert out["per_class"].loc["Cardiomegaly", "tp"] == 1 and out["per_class"].loc["Pleural Effusion", "fp"] == 1
    assert {"bleu1", "bleu4", "rouge_l", "f1_14_micro", "f1_5_macro"} <= set(out)
    assert set(out["unavailable"]) == {"f1_radgraph", "green"} and "f1_radgraph" not in out
    dataset = pd.DataFrame({c: [np.nan, np.nan] for c in CHEXPERT_CLASSES})
    dataset.loc[:, "Pleural Effusion"] = [0.0, 1.0]
    dataset.loc[:, "Cardiomegaly"] = [1.0, 0.0]
    out_ds = M.report_metrics(hyps, refs, reference="dataset", reference_labels=dataset)
    assert out_ds["f1_5_micro"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="needs reference_labels"):
        M.report_metrics(hyps, refs, reference="dataset")


def test_auroc_matches_sklearn_and_aurc_by_hand():
    rng = np.random.default_rng(5)
    t = rng.integers(0, 2, 200)
    s = t + rng.normal(0, 1, 200)
    s[:20] = np.round(s[:20])  # some ties
    assert M.auroc(s, t) == pytest.approx(skm.roc_auc_score(t, s))
    assert np.isnan(M.auroc([0.1, 0.2], [1, 1]))
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 0, 1, 1])
    assert M.aurc(conf, correct) == pytest.approx(np.mean([0 / 1, 1 / 2, 1 / 3, 1 / 4]))
    assert M.aurc(conf, np.ones(4)) == 0.0


def test_display_frame_uses_schema():
    df = pd.DataFrame({"model": ["a"], "flip_rate": [2105 / 44786], "paired_diff": [0.1237]})
    out = M.display_frame(df)
    assert list(out.columns) == ["model", "Flip rate", "Paired difference"]
    assert out.iloc[0].tolist() == ["a", "4.70%", "+12.37 pp"]
    with pytest.raises(ValueError, match="lacks metric columns"):
        M.display_frame(df, {"kappa": "cohen_kappa"})


def test_margin_change_comparison_reports_ties():
    out = M.margin_change_comparison([1.0, -2.0, 0.0, 0.5], [1.0, 1.0, 0.0, 0.7])
    assert out == {"absent_larger": 0.25, "present_larger": 0.25, "tied": 0.5}


def test_nlg_metrics_bleu1_from_bleu4_statistics_and_remembered_tokens_change_nothing():
    """nlg_metrics' BLEU-1 (from BLEU-4's corpus statistics) is bleu(max_order=1) exactly, under both
    conventions, and ROUGE-L with the remembered tokenizer and repeated pairs is rouge-score's own mean."""
    from rouge_score import rouge_scorer

    from shovir_core.metrics.text import nlg_metrics

    rng = np.random.default_rng(0)
    words = "the heart is normal size no effusion pleural left lung opacity mild Small".split()
    for trial in range(40):
        n = int(rng.integers(1, 10))
        hyps = [" ".join(rng.choice(words, int(rng.integers(0, 12)))) for _ in range(n)]
        refs = [" ".join(rng.choice(words, int(rng.integers(1, 12)))) for _ in range(n)]
        hyps, refs = hyps + hyps[:2], refs + refs[:2]  # repeated pairs
        for convention, lower, smooth, stem in (("project", True, "exp", True), ("reference-code", False, "none", False)):
            got = nlg_metrics(hyps, refs, convention=convention)
            assert got["bleu1"] == M.bleu(hyps, refs, max_order=1, lowercase=lower, smooth=smooth)
            assert got["bleu4"] == M.bleu(hyps, refs, max_order=4, lowercase=lower, smooth=smooth)
            scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=stem)
            assert got["rouge_l"] == float(np.mean([scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs)]))
