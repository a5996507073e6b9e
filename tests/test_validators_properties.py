"""Property tests of the boundary validators (hypothesis): any input either passes validation (and
the call runs) or fails with the project's error type, naming the offending value."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shovir_core.params import ParamsError, load_params
from shovir_core.book.shingles import ShingleIndex, words
from shovir_core.data import DatasetError
from shovir_core.data.checks import bbox4, number
from shovir_core.data.mimic_jpg import _datetime
from shovir_core.perturb import BoxError, PerturbInputError, UnknownTargetError, class_key, occlude
from shovir_core.perturb.validation import check_item_id, check_p_grid, check_real, resolve_target

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CLASSES = ["Atelectasis", "Pleural Effusion", "Edema"]
IMAGE = np.random.default_rng(1).integers(20, 230, (24, 24)).astype(np.uint8)
BOXES = [("Atelectasis", 1, 1, 8, 8), ("Pleural Effusion", 14, 14, 22, 22), ("Edema", 2, 2, 7, 7)]

anything = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.binary(max_size=6), st.lists(st.integers(0, 3), max_size=3),
    st.tuples(st.text(max_size=3)), st.sampled_from([np.float32(0.5), np.int64(3), np.bool_(True), np.nan]),
)


def _names(value, exc) -> bool:
    """The error names the value (its repr), or for containers the repr of the offending element."""
    return repr(value) in str(exc) or (isinstance(value, (list, tuple)) and any(repr(v) in str(exc) for v in value))


@SETTINGS
@given(value=anything)
def test_check_real(value):
    try:
        x = check_real(value, "p", lo=0.0, hi=1.0)
    except PerturbInputError as exc:
        assert _names(value, exc) and "p must" in str(exc)
    else:
        assert not isinstance(value, (bool, np.bool_, str, bytes)) and 0.0 <= x <= 1.0 and x == float(value)


@SETTINGS
@given(value=anything)
def test_check_item_id(value):
    try:
        out = check_item_id(value)
    except PerturbInputError as exc:
        assert _names(value, exc)
    else:
        assert out == value and not isinstance(value, (bool, np.bool_)) and isinstance(value, (str, int, np.integer))


@SETTINGS
@given(value=st.one_of(anything, st.lists(anything, max_size=4)))
def test_check_p_grid(value):
    try:
        ps = check_p_grid(value)
    except PerturbInputError as exc:
        assert _names(value, exc) or "is empty" in str(exc)
    else:
        assert ps and all(0.0 <= p <= 1.0 for p in ps)


@st.composite
def spellings(draw):
    base = draw(st.sampled_from(CLASSES + ["Pneumothorax", "Edemas"]))
    cased = "".join(c.upper() if draw(st.booleans()) else c.lower() for c in base)
    pad = draw(st.sampled_from(["", " ", "  ", "_"]))
    return pad + cased.replace(" ", draw(st.sampled_from([" ", "  ", "_"]))) + pad.strip("_")


@SETTINGS
@given(target=st.one_of(spellings(), anything))
def test_resolve_target(target):
    try:
        out = resolve_target(target, CLASSES, item_id="i")
    except UnknownTargetError as exc:
        assert repr(target) in str(exc) and target not in CLASSES
        if class_key(target) in {class_key(c) for c in CLASSES}:  # wrong case or spacing: the exact spelling named
            assert "did you mean" in str(exc)
    except PerturbInputError as exc:
        assert repr(target) in str(exc) and (not isinstance(target, str) or not target.strip())
    else:
        assert out == target and out in CLASSES


@SETTINGS
@given(p=anything, target=st.one_of(spellings(), st.none()), condition=st.sampled_from(["RO", "OCO", "DOCO", "XO"]),
       item_id=st.one_of(st.text(min_size=1, max_size=5), st.integers(0, 99), st.none(), st.booleans()))
def test_occlude_runs_or_names_the_bad_argument(p, target, condition, item_id):
    try:
        out, info = occlude(IMAGE, BOXES, condition=condition, target=target, p=p, seed=0, item_id=item_id,
                            size_pool=np.array([[0.2, 0.2]]))
    except UnknownTargetError as exc:
        assert repr(target) in str(exc)
    except PerturbInputError as exc:
        assert any(_names(v, exc) for v in (p, target, condition, item_id))
    else:
        assert out.shape == IMAGE.shape and info["target"] in CLASSES and info["p"] == float(p)
        if condition == "DOCO":  # the target's boxes are never co-finding boxes
            assert all(b["finding"] != info["target"] for b in info["boxes"])


@SETTINGS
@given(box=st.lists(st.one_of(st.floats(-5, 40), st.just(float("nan")), st.integers(-5, 40), st.text(max_size=2),
                              st.none(), st.booleans()), min_size=3, max_size=5))
def test_validate_boxes_and_bbox4(box):
    try:
        x1, y1, x2, y2 = bbox4(box, where="f, row 'r', field 'bbox'", width=24, height=24)
    except DatasetError as exc:
        assert "field 'bbox'" in str(exc)
        assert len(box) != 4 or any(repr(v) in str(exc) for v in box) or "inverted" in str(exc) \
            or "outside" in str(exc) or "empty" in str(exc)
    else:
        assert 0 <= x1 < x2 <= 24 and 0 <= y1 < y2 <= 24
    try:
        occlude(IMAGE, [("Edema", *box)], condition="OCO", target="Edema", p=1, seed=0, item_id="b")
    except BoxError as exc:
        assert "item 'b', box 0" in str(exc)


@SETTINGS
@given(value=anything)
def test_dataset_number(value):
    try:
        x = number(value, where="w", what="x1")
    except DatasetError as exc:
        assert repr(value) in str(exc)
    else:
        assert math.isfinite(x)


@SETTINGS
@given(date=st.one_of(st.from_regex(r"\d{8}", fullmatch=True), st.text(max_size=10)),
       time=st.one_of(st.from_regex(r"\d{1,6}(\.\d{1,3})?", fullmatch=True), st.text(max_size=10)))
def test_study_date_time(date, time):
    try:
        out = _datetime(date, time, file=Path("m.csv"), row="d1")
    except DatasetError as exc:
        assert "m.csv, row 'd1'" in str(exc)
        assert repr(date.strip()) in str(exc) or repr(time.strip()) in str(exc)
    else:
        assert out is None or out.startswith(date.strip()[:4])


yaml_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)


@SETTINGS
@given(doc=st.one_of(yaml_values, st.fixed_dictionaries({"runs": yaml_values, "parameters": yaml_values}),
                     st.text(max_size=40)))
def test_params_file_loads_or_says_what_is_wrong(doc, tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "params" / "nb").mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("SHOVIR_ROOT", str(root))
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    (root / "params" / "nb" / "demo.yaml").write_text(text, encoding="utf-8")
    try:
        out = load_params("nb", "demo")
    except ParamsError as exc:
        assert "demo.yaml" in str(exc)
    else:
        assert isinstance(out["runs"], dict) and isinstance(out["parameters"], dict)
        assert all(isinstance(r["spec"], dict) for r in out["runs"].values())


@SETTINGS
@given(text=st.text(max_size=60))
@example(text="0:0\\rR")  # an escape upper-cased: "\\r" -> "\\R" (found by this test in CI, 2026-12-06)
@example(text="no \\u00e9abcd effusion")
def test_a_report_always_leaks_itself(text):
    """Any text of three or more words (not only label words or numbers) trips an index built from it."""
    index = ShingleIndex([text], label="t", allow=[])
    tokens = words(text)
    exempt = all(index._exempt(tuple(tokens[i:i + 3])) for i in range(len(tokens) - 2))
    assert index.leaks(text) == (len(tokens) >= 3 and not exempt)
    assert index.leaks(text.upper()) == index.leaks(text)
