"""The published-number loaders, the expression language and its rounding rule."""
from __future__ import annotations

import math

import pytest

from shovir_core import papers
from shovir_core.papers import derive
from shovir_core.papers.audit import Check, _check, run_check
from shovir_core.papers.expression import ExpressionError, evaluate
from shovir_core.papers.values import PaperDataError, _item, parse_number


@pytest.fixture(scope="module")
def shovir():
    return papers.load_values("shovir")


@pytest.fixture(scope="module")
def modalens():
    return papers.load_values("modalens")


def test_values_keep_printed_precision(shovir, modalens):
    item = modalens["t2.all14.P"]
    assert item.text == "4.70" and item.value == 4.70 and item.decimals == 2
    assert item.quantum == pytest.approx(0.01) and not item.exact
    assert modalens["design.cases"].exact and modalens["design.cases"].quantum == 0
    assert modalens["t2.all14.diff"].ci_values == (11.19, 13.57)
    assert shovir["t1text.largest_dfn_models"].value == frozenset({"CheXagent-2", "MedGemma", "MAIRA-2"})


def test_table1_loaded_in_full(shovir):
    t1 = [v for v in shovir.values() if v.keys.get("table") == "1"]
    assert len(t1) == 16 * 16  # 8 models × 2 datasets × (7 + 7 + 2) columns
    assert {v.keys["dataset"] for v in t1} == {"MIMIC", "PadChest"}
    assert len({v.keys["model"] for v in t1}) == 8
    assert shovir["t1.PadChest.MedGemma.baseline.GREEN"].value == 0.287


def test_parse_number_refuses_thousands_separator():
    assert parse_number("-0.50", where="x") == (-0.5, 2)
    assert parse_number("+12.4", where="x") == (12.4, 1)
    with pytest.raises(PaperDataError, match="44,786"):
        parse_number("44,786", where="x")


@pytest.mark.parametrize(("raw", "match"), [
    ({"id": "a", "location": "T1", "value": "1.5", "unit": "count", "desc": "d"}, "count cannot have decimals"),
    ({"id": "a", "location": "T1", "value": "1", "unit": "furlong", "desc": "d"}, "unit"),
    ({"id": "a", "location": "T1", "value": "1", "unit": "count"}, "missing"),
    ({"id": "a b", "location": "T1", "value": "1", "unit": "count", "desc": "d"}, "dotted identifiers"),
    ({"id": "a", "location": "T1", "value": "1", "unit": "%", "desc": "d", "ci": ["1"]}, "ci must be"),
    ({"id": "a", "location": "T1", "value": "1", "unit": "%", "desc": "d", "extra": "x"}, "unknown fields"),
])
def test_value_validation_names_the_item(raw, match):
    with pytest.raises(PaperDataError, match=match):
        _item("modalens", raw, where="modalens.yaml item 0")


def test_check_validation():
    base = {"id": "x", "location": "T1", "kind": "sum", "desc": "d", "stated": "a", "recompute": "b"}
    assert _check("shovir", base, "w").id == "shovir.x"
    with pytest.raises(PaperDataError, match="kind"):
        _check("shovir", {**base, "kind": "vibes"}, "w")
    with pytest.raises(PaperDataError, match="op"):
        _check("shovir", {**base, "op": "!="}, "w")
    with pytest.raises(PaperDataError, match="same expression"):
        _check("shovir", {**base, "recompute": "a"}, "w")
    with pytest.raises(PaperDataError, match="not both"):
        _check("shovir", {**base, "tolerance": "1", "tolerance_units": "1"}, "w")


def test_unknown_paper():
    with pytest.raises(ValueError, match="unknown paper"):
        papers.load_values("chexpert")
    with pytest.raises(ValueError, match="unknown paper"):
        papers.audit("chexpert")


def test_evaluate_propagates_rounding(modalens):
    ev = evaluate("t2.all14.A - t2.all14.P", modalens)
    assert ev.value == pytest.approx(12.37)
    assert ev.low == pytest.approx(12.36) and ev.high == pytest.approx(12.38)
    assert ev.inputs == ("t2.all14.A", "t2.all14.P")
    exact = evaluate("g.correct_orig / design.all14_trials", modalens)
    assert exact.low == exact.high == exact.value and exact.inputs == ()


def test_evaluate_many_inputs_uses_first_order(modalens):
    expr = " + ".join(f"n2.{k}" for k in ("cum_L0", "cum_L20", "cum_L22", "cum_L28", "end_P", "end_A",
                                           "single_max", "answer_only_max", "matched_span_peak",
                                           "correct_donor_max", "wrong_donor"))
    ev = evaluate(expr, modalens)
    assert len(ev.inputs) == 11
    assert ev.high - ev.value == pytest.approx(11 * 0.005, rel=1e-6)


def test_evaluate_selection_functions(shovir):
    sel = 'select(table="1", dataset="MIMIC", arm="delta_fn", metric="F1_14")'
    assert evaluate(f"argmin({sel})", shovir).value == "LLaVA-Rad"
    assert evaluate(f"argmax({sel})", shovir).value == "CheXagent-2"
    assert evaluate(f"count({sel})", shovir).value == 8
    assert evaluate(f'rank_asc({sel}, "CXRMate")', shovir).value == 2
    assert evaluate(f'rank_desc({sel}, "CheXagent-2")', shovir).value == 1
    assert evaluate(f"bottom({sel}, 2)", shovir).value == frozenset({"LLaVA-Rad", "CXRMate"})
    assert evaluate(f"max({sel})", shovir).value == pytest.approx(0.547)
    assert evaluate(f"mean({sel})", shovir).value == pytest.approx(
        (0.366 + 0.547 + 0.252 + 0.348 + 0.256 + 0.524 + 0.458 + 0.310) / 8)


@pytest.mark.parametrize(("expr", "match"), [
    ("__import__('os')", "unknown function"),
    ("t2.all14.P.real", "unknown value"),
    ("t2.all14.P ** 2", "not allowed"),
    ("[t2.all14.P][0]", "not allowed"),
    ("t2.all14.Q", "unknown value"),
    ("t2.all14.P / 0", "division by zero"),
    ('select(table="9")', "matches no value"),
    ('min(select(table="2")) + select(table="2")', "mixes"),
    ('select(table="2")', "must be reduced"),
    ("lambda: 1", "not allowed"),
    ("t2.all14.P if True else 1", "not allowed"),
    ("1 +", "cannot parse"),
])
def test_evaluate_rejects(modalens, expr, match):
    with pytest.raises(ExpressionError, match=match):
        evaluate(expr, modalens)


def _row(stated, recompute, op="==", **kw):
    return run_check(Check(paper="modalens", id="modalens.test", location="test", kind="difference", desc="d",
                           stated=stated, recompute=recompute, op=op, **kw))


def test_equality_tolerance_is_one_unit_plus_input_rounding():
    # 17.07 − 4.70 = 12.37 ∈ [12.36, 12.38]; the stated 12.37 passes, 12.40 (= 12.38 + 0.02) does not.
    assert _row("t2.all14.diff", "t2.all14.A - t2.all14.P")["status"] == "passed"
    assert _row("12.39", "t2.all14.A - t2.all14.P", tolerance=0.01)["status"] == "passed"
    assert _row("12.40", "t2.all14.A - t2.all14.P", tolerance=0.01)["status"] == "flagged"
    row = _row("t2.all14.diff", "t2.all14.A - t2.all14.P")
    assert row["tolerance"] == pytest.approx(0.01)


def test_implied_count_uses_half_unit():
    # 1.41 is 45/3199 = 1.4067 (passes); 1.39 is not a rounded k/3199 (44 → 1.3754, 45 → 1.4067).
    assert _row("t2.oneq.P", "implied_rate(t2.oneq.P, design.cases)", tolerance_units=0.5)["status"] == "passed"
    assert _row("1.39", "implied_rate(1.39, design.cases)", tolerance=0.005)["status"] == "flagged"


def test_inequalities():
    assert _row("20", "f.six.yes.edema", op=">=")["status"] == "passed"
    assert _row("21", "f.six.yes.edema", op=">=")["status"] == "flagged"
    assert _row("0", "f2.sd.A - f2.sd.P", op="<=")["status"] == "flagged"
    assert _row("0", "f2.pe.P - f2.pe.A", op="<")["status"] == "passed"
    assert _row("0", "f2.pe.A - f2.pe.P", op=">")["status"] == "passed"


def test_label_versus_number_is_an_error():
    with pytest.raises(ExpressionError, match="label"):
        run_check(Check(paper="shovir", id="shovir.t", location="l", kind="text_claim", desc="d",
                        stated="t1text.smallest_dfn_model", recompute="t1text.smallest_dfn_mimic"))


def test_derivations():
    assert derive.kappa_from_agreement(0.943, 0.894, 0.773) == pytest.approx(0.7951, abs=1e-4)
    with pytest.raises(ValueError, match="undefined"):
        derive.kappa_from_agreement(1.0, 0.9, 0.8)  # agreement 1 implies no positives at all
    with pytest.raises(ValueError, match="sensitivity"):
        derive.kappa_from_agreement(0.9, 0.0, 0.8)
    assert derive.balanced_accuracy_from_yes(2422, 2707, 492, 0.77) == pytest.approx(0.8115, abs=1e-4)
    assert derive.implied_rate(1.41, 3199) == pytest.approx(100 * 45 / 3199)
    assert derive.implied_rate(0.7075, 400, 1) == pytest.approx(283 / 400)
    with pytest.raises(ValueError, match="whole"):
        derive.implied_rate(1.0, 3199.5)
    assert derive.interaction(0.717, 0.770, 0.665, 0.500) == pytest.approx(-0.218)


def test_kappa_matches_metrics_on_a_table():
    """κ from agreement/sensitivity/precision equals Cohen's κ on answers with those rates."""
    from shovir_core.metrics.modalens import cohen_kappa

    # 2×2 counts: a=30 (both yes), b=10 (rater yes only), c=5 (reference yes only), d=55
    rater = [1] * 30 + [1] * 10 + [0] * 5 + [0] * 55
    ref = [1] * 30 + [0] * 10 + [1] * 5 + [0] * 55
    kappa = derive.kappa_from_agreement(85 / 100, 30 / 35, 30 / 40)
    assert kappa == pytest.approx(cohen_kappa(rater, ref))


def test_data_hash_is_stable_and_per_paper():
    assert papers.data_sha256("shovir") == papers.data_sha256("shovir")
    assert papers.data_sha256("shovir") != papers.data_sha256("modalens")
    assert papers.data_files("shovir") == ("shovir.yaml", "shovir_table1.csv", "shovir_checks.yaml")
    assert len(papers.engine_sha256()) == 64


def test_published_accessor():
    df = papers.published("shovir", table="1", dataset="MIMIC", model="RaDialog", metric="F1_14")
    assert dict(zip(df["arm"], df["value"])) == {"baseline": 0.596, "full_noise": 0.230, "delta_fn": 0.366}
    assert set(df["location"]) == {"Table 1"}
    assert papers.published_value("shovir", table="1", dataset="PadChest", model="CXRMate",
                                  arm="baseline", metric="F1_RG") == 0.145
    assert papers.published_value("modalens", id="t2.all14.P") == 4.70
    ci = papers.published("modalens", id="t2.all14.diff")
    assert (ci["ci_low"].item(), ci["ci_high"].item()) == (11.19, 13.57)
    assert papers.published("modalens", table="99").empty
    with pytest.raises(LookupError, match="3 published values"):
        papers.published_value("shovir", table="1", dataset="MIMIC", model="RaDialog", metric="F1_14")
    with pytest.raises(LookupError, match="label"):
        papers.published_value("shovir", id="t1text.smallest_dfn_model")
    with pytest.raises(KeyError, match="no published value"):
        papers.published("shovir", id="nope")
    assert math.isnan(papers.published("shovir", id="t1text.smallest_dfn_model")["value"].item())
