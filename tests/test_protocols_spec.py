"""Declared protocol specs: the field rules, and every registered protocol's SPEC."""
from __future__ import annotations

import inspect

import pytest

from shovir_core import protocols
from shovir_core.protocols.spec import REQUIRED, Field, SpecError, SpecSchema


# --------------------------------------------------------------------------- field rules
def _one(field: Field, value):
    return SpecSchema("t", [field]).resolve({field.name: value})[field.name]


@pytest.mark.parametrize(("field", "value", "match"), [
    (Field("n", int, 1), True, "'n' = True must be an integer"),
    (Field("n", int, 1), 2.5, "must be an integer"),
    (Field("n", int, 1), "3", "must be an integer"),
    (Field("x", float, 0.0), False, "must be a number"),
    (Field("x", float, 0.0), float("nan"), "must be finite"),
    (Field("x", float, 0.0, range=(0.0, 1.0)), 1.01, r"is outside \[0.0, 1.0\]"),
    (Field("k", int, 1, range=(1, None)), 0, r"is outside \[1, inf\]"),
    (Field("flag", bool, True), 1, "must be a boolean"),
    (Field("flag", bool, True), "yes", "must be a boolean"),
    (Field("s", str, "a"), 3, "must be a string"),
    (Field("s", str, "a", choices=("a", "b")), "c", r"is not allowed; use one of \['a', 'b'\]"),
    (Field("xs", list, [], items=str), "OCO", "'xs' = 'OCO' must be a list of strings"),
    (Field("xs", list, [], items=float), 0.5, "must be a list of numbers"),
    (Field("xs", list, [], items=float), [0.5, "1"], "item '1' must be a number"),
    (Field("xs", list, [], items=float), [0.5, True], "item True must be a number"),
    (Field("xs", list, [], items=float, range=(0.0, 1.0)), [0.5, -0.1], r"item -0.1 is outside \[0.0, 1.0\]"),
    (Field("xs", list, [], items=float, unique=True), [0.5, 0.5], "item 0.5 is repeated"),
    (Field("xs", list, [], items=str, min_items=1), [], r"needs at least 1 item"),
    (Field("xs", list, [], items=str, choices=("a", "b")), ["a", "z"], r"is not allowed; use items of"),
    (Field("xs", (list, type(None)), None, items=str), "a", "must be a list of strings or null"),
    (Field("m", dict, {}), [], "must be a mapping"),
    (Field("s", str, "a", check=lambda v: None if v.islower() else "must be lower case"), "A",
     "'s' = 'A': must be lower case"),
])
def test_field_refuses(field, value, match):
    with pytest.raises(SpecError, match=match):
        _one(field, value)


def test_field_converts():
    assert _one(Field("x", float, 0.0), 1) == 1.0 and isinstance(_one(Field("x", float, 0.0), 1), float)
    assert _one(Field("n", int, 0), 3.0) == 3 and isinstance(_one(Field("n", int, 0), 3.0), int)
    assert _one(Field("xs", list, [], items=float), (0, 1)) == [0.0, 1.0]
    assert _one(Field("xs", (list, type(None)), [], items=str), None) is None
    assert _one(Field("p", (str, dict), "a"), {"base": "a"}) == {"base": "a"}
    assert Field("xs", (list, type(None)), None, items=float).describe() == "a list of numbers or null"


def test_schema_keys_defaults_and_execution():
    schema = SpecSchema("t", [Field("a", int, REQUIRED), Field("xs", list, [1.0], items=float),
                              Field("batch", int, 4, range=(1, None), execution=True)])
    with pytest.raises(SpecError, match=r"t spec: unknown key\(s\) \['b'\]; allowed: \['a', 'batch', 'xs'\]"):
        schema.resolve({"a": 1, "b": 2})
    with pytest.raises(SpecError, match="'a' is required"):
        schema.resolve({})
    with pytest.raises(SpecError, match="must be a mapping"):
        schema.resolve(["a"])  # type: ignore[arg-type]
    out = schema.resolve({"a": 1, "batch": 2})
    assert out == {"a": 1, "xs": [1.0]}, "execution keys leave the identity"
    out["xs"].append(2.0)
    assert schema.resolve({"a": 1})["xs"] == [1.0], "defaults are copied, never shared"
    with pytest.raises(SpecError, match="'batch' = 0 is outside"):
        schema.resolve({"a": 1, "batch": 0})  # validated at resolve time although not hashed
    assert schema.execution({"a": 1}) == {"batch": 4} and schema.execution({"batch": 2}) == {"batch": 2}
    assert schema.identity({"a": 1, "batch": 2}) == {"a": 1}
    assert schema.defaults == {"a": REQUIRED, "xs": [1.0]}
    with pytest.raises(ValueError, match="declared twice"):
        SpecSchema("t", [Field("a", int, 0), Field("a", int, 0)])


# --------------------------------------------------------------------------- every protocol
SMALL_SHOVIR = {"dataset": "demo", "min_count": 20, "max_per_class": 2, "reference_labels": "dataset",
                "reference_text": "template"}
CHEAP = {  # a spec of each protocol that resolves in well under a second
    "cohort": {"dataset": "demo"},
    "audit": {"paper": "shovir"},
    "labeller-validation": {},
    "shovir": SMALL_SHOVIR,
    "perturbations": {"ssim_size": 64},
    "modalens": {"dataset": "demo-64px"},
    "modalens-distance": {"dataset": "demo-64px", "n_patients": 4},
    "accounting": {"dataset": "demo"},
    "modalens-layers": {"dataset": "demo-64px", "model": "tiny-gemma3", "n_patients": 2},
    "modalens-probes": {"dataset": "demo-64px", "model": "tiny-gemma3", "n_patients": 2},
    "modalens-interventions": {"dataset": "demo-64px", "model": "tiny-gemma3", "n_patients": 2},
    "modalens-surrogate": {"dataset": "demo-64px", "n_patients": 2},
    "modalens-noreport": {"dataset": "probmed:data/fixtures/probmed", "heldout_split": "all"},
    "rehearsal": {"profile": "padchest", "scale": 0.02, "only": ["shovir_table1"]},
}


def test_every_protocol_declares_its_spec():
    assert set(CHEAP) == set(protocols.REGISTRY), "add a cheap spec of the new protocol to CHEAP"
    for name in protocols.REGISTRY:
        module = protocols.get_protocol(name)
        assert isinstance(module.SPEC, SpecSchema), name
        params = inspect.signature(module.execute).parameters
        assert params["execution"].kind is inspect.Parameter.KEYWORD_ONLY and params["execution"].default is None
        assert params["progress"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("protocol", sorted(CHEAP))
def test_resolved_spec_resolves_to_itself(protocol):
    resolved = protocols.resolve(protocol, CHEAP[protocol])
    assert protocols.resolve(protocol, dict(resolved)) == resolved
    assert set(resolved) <= set(protocols.get_protocol(protocol).SPEC.fields)
    assert not set(resolved) & {k for k, f in protocols.get_protocol(protocol).SPEC.fields.items() if f.execution}


@pytest.mark.parametrize(("protocol", "bad", "match"), [
    ("cohort", {"dataset": 3}, "'dataset' = 3 must be a string"),
    ("cohort", {"dataset_sha256": "0" * 64}, "the spec pins 000000000000"),
    ("audit", {"paper": "other"}, "'paper' = 'other' is not allowed"),
    ("audit", {"paper": ["shovir"]}, "'paper' = \\['shovir'\\] must be a string"),
    ("audit", {"paper": "shovir", "data_sha256": "0" * 64}, "the spec pins 000000000000"),
    ("labeller-validation", {"sections": "findings"}, "'sections' = 'findings' must be a list of strings"),
    ("labeller-validation", {"sections": ["abstract"]}, "'sections' = \\['abstract'\\] is not allowed"),
    ("labeller-validation", {"labellers": "rules"}, "'labellers' = 'rules' must be a list of strings"),
    ("labeller-validation", {"labellers": ["nope"]}, "unknown labellers \\['nope'\\]"),
    ("labeller-validation", {"test_fraction": 1.0}, "must lie in \\(0, 1\\)"),
    ("labeller-validation", {"test_fraction": True}, "must be a number"),
    ("labeller-validation", {"lexicon_sha256": "0" * 64}, "the spec pins 000000000000"),
    ("perturbations", {"ps": 0.5}, "'ps' = 0.5 must be a list of numbers"),
    ("perturbations", {"presets": "paper"}, "'presets' = 'paper' must be a list of strings or mappings"),
    ("perturbations", {"presets": ["nope"]}, "unknown noise preset 'nope'"),
    ("perturbations", {"presets": ["paper", "paper"]}, "duplicate presets"),
    ("perturbations", {"gallery": [["00000001_000"]]}, "must be \\[image_id, target\\]"),
    ("perturbations", {"gallery": "00000001_000"}, "must be a list of lists or null"),
    ("perturbations", {"ssim_threshold": 1.5}, "'ssim_threshold' = 1.5 is outside \\[0.0, 1.0\\]"),
    ("perturbations", {"iou_inclusive": "no"}, "must be a boolean"),
    ("perturbations", {"n_cases": True}, "must be an integer or null"),
    ("perturbations", {"chunk_size": 0}, "'chunk_size' = 0 is outside"),
    ("perturbations", {"cohort_sha256": "0" * 64}, "the spec pins 000000000000"),
    ("modalens", {"ssim_threshold": 2}, "'ssim_threshold' = 2.0 is outside"),
    ("rehearsal", {"profile": "demo"}, "'profile' = 'demo' is not allowed"),
    ("rehearsal", {"scale": 1.5}, "'scale' = 1.5 is outside"),
    ("rehearsal", {"code_sha256": "0" * 64}, "the spec pins 000000000000"),
])
def test_protocol_refuses(protocol, bad, match):
    with pytest.raises(ValueError, match=match):
        protocols.resolve(protocol, {**CHEAP[protocol], **bad})


def test_audit_needs_a_paper():
    with pytest.raises(ValueError, match="audit spec: 'paper' is required"):
        protocols.resolve("audit", {})


def test_run_passes_execution_settings(monkeypatch, runs_root):
    """protocols.run hands the execution-only keys to execute, outside the resolved spec."""
    from shovir_core.protocols import cohort

    seen = {}
    original = cohort.execute

    def spy(name, spec, *, progress=True, execution=None):
        seen["spec"], seen["execution"] = spec, execution
        return original(name, spec, progress=progress, execution=execution)

    monkeypatch.setattr(cohort, "execute", spy)
    protocols.run("cohort", "spy", {"dataset": "demo-64px"}, progress=False)
    assert seen["execution"] == {} and set(seen["spec"]) == {"dataset", "dataset_sha256"}


def test_pins_are_declared_and_checked_by_the_schema():
    """Every pinned hash or fingerprint is a ``Field(pin=True)`` that ``SpecSchema.pin`` fills and
    checks; no protocol writes its own "pinned value must match" check."""
    import importlib
    import re
    from pathlib import Path

    from shovir_core.protocols import REGISTRY
    from shovir_core.protocols.spec import Field, SpecError, SpecSchema

    for name, module in REGISTRY.items():
        mod = importlib.import_module(module)
        unpinned = [f.name for f in mod.SPEC.fields.values()
                    if re.search(r"sha256$|fingerprint$|^template_id$", f.name) and not f.pin]
        assert not unpinned, f"{name}: {unpinned} hold a hash but are not pin=True"
        source = Path(mod.__file__).read_text(encoding="utf-8")
        assert "not in (None," not in source, f"{module}: a hand-written pin check"
    schema = SpecSchema("demo", [Field("h", (str, type(None)), None, pin=True), Field("x", int, 1)])
    out = schema.resolve({})
    schema.pin(out, "h", "a" * 64, what="the thing")
    schema.pin(out, "h", "a" * 64, what="the thing")  # a resolved spec resolves to itself
    with pytest.raises(SpecError, match="the thing changed: it is bbbbbbbbbbbb..., the spec pins aaaaaaaaaaaa"):
        schema.pin(out, "h", "b" * 64, what="the thing")
    with pytest.raises(KeyError, match="pin=True"):
        schema.pin(out, "x", 2, what="x")
    with pytest.raises(ValueError, match="must default to None"):
        SpecSchema("demo", [Field("h", str, "x", pin=True)])
