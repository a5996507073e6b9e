"""Issue 13, part 3: every bad input gets a clear error naming the value (and file, row and field for
dataset files), nothing is silently accepted, and the CLI reports it in one line with exit status 2."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core import cli, paths
from shovir_core.params import ParamsError, load_params
from shovir_core.data import DatasetError, load_dataset
from shovir_core.data.mimic import load_mimic_imagenome
from shovir_core.data.mimic_jpg import load_mimic_jpg
from shovir_core.data.padchest import load_padchest_gr
from shovir_core.perturb import (PerturbInputError, UnknownTargetError, box_sets, full_noise, occlude,
                                 occlude_grid)
from shovir_core.perturb.export import export_perturbed

FIXTURES = Path(__file__).parent / "fixtures"
IMAGE = np.random.default_rng(0).integers(30, 220, (40, 40)).astype(np.uint8)
BOXES = [("Atelectasis", 2, 2, 12, 12), ("Edema", 25, 25, 35, 35), ("Edema", 3, 3, 11, 11)]
POOL = np.array([[0.2, 0.2]])


# --------------------------------------------------------------------------- perturbation API
def test_doco_lower_case_target_is_refused_naming_the_class():
    """Issue 29: a DOCO target in the wrong case ('atelectasis') was accepted without a word; it is refused,
    naming the spelling of the image's boxes. Boxes spelled differently from each other are still all target
    boxes (never co-finding boxes)."""
    with pytest.raises(UnknownTargetError, match=r"item 'i': DOCO target 'atelectasis' is not spelled as a class.*"
                                                 r"did you mean 'Atelectasis'"):
        occlude(IMAGE, BOXES, condition="DOCO", target="atelectasis", p=1.0, seed=0, item_id="i")
    exact, info = occlude(IMAGE, BOXES, condition="DOCO", target="Atelectasis", p=1.0, seed=0, item_id="i")
    assert info["target"] == "Atelectasis" and {b["finding"] for b in info["boxes"]} == {"Edema"}
    sets = box_sets([("Atelectasis", 0, 0, 5, 5), ("atelectasis ", 20, 20, 30, 30), ("Edema", 30, 0, 39, 9)],
                    "ATELECTASIS")
    assert len(sets.target) == 2 and [b.finding for b in sets.others] == ["Edema"]


@pytest.mark.parametrize("condition", ["RO", "OCO", "DOCO"])
def test_unknown_target_is_refused(condition):
    with pytest.raises(UnknownTargetError, match=r"item 'i'.*target 'Pneumothorax' is not a class.*Atelectasis"):
        occlude(IMAGE, BOXES, condition=condition, target="Pneumothorax", p=0.5, seed=0, item_id="i",
                size_pool=POOL)


@pytest.mark.parametrize("p", [True, False, np.bool_(True), "0.5", None, [0.5], float("nan"), float("inf"), -0.1, 1.01])
def test_p_must_be_a_real_number_in_0_1(p):
    with pytest.raises(PerturbInputError, match=r"item 'i': p must") as info:
        occlude(IMAGE, BOXES, condition="OCO", target="Atelectasis", p=p, seed=0, item_id="i")
    assert repr(p) in str(info.value)


@pytest.mark.parametrize("item_id", [None, "", "  ", True, 1.5, ("a",), b"x"])
def test_item_id_is_required(item_id):
    with pytest.raises(PerturbInputError, match="item_id is required"):
        occlude(IMAGE, BOXES, condition="OCO", target="Atelectasis", p=0.5, seed=0, item_id=item_id)
    with pytest.raises(PerturbInputError, match="item_id is required"):
        full_noise(IMAGE, seed=0, item_id=item_id)


@pytest.mark.parametrize("kwargs, match", [
    ({"ps": 0.5}, "ps must be a sequence"), ({"ps": "0.5"}, "ps must be a sequence"), ({"ps": []}, "ps is empty"),
    ({"ps": [0.2, True]}, r"ps\[1\] must be a real number"), ({"seed": -1}, "seed must be at least 0"),
    ({"seed": 1.0}, "seed must be an integer"), ({"seed": True}, "seed must be an integer"),
    ({"iou_threshold": 2}, "iou_threshold must lie in"), ({"iou_threshold": "0.1"}, "iou_threshold must be a real"),
    ({"max_retries": 0}, "max_retries must be at least 1"), ({"condition": ["OCO"]}, "condition must be one of"),
    ({"target": None}, "target must be a class name"), ({"target": ""}, "target must be a class name"),
])
def test_grid_arguments_are_checked(kwargs, match):
    args = {"condition": "OCO", "target": "Atelectasis", "ps": [0, 1], "seed": 0, **kwargs}
    with pytest.raises(PerturbInputError, match=match):
        occlude_grid(IMAGE, BOXES, item_id="i", **args)


def test_export_refuses_strings_where_lists_are_expected(tmp_path):
    ds = load_dataset("demo")
    for kwargs, match in (({"conditions": "OCO"}, r"conditions must be a list.*\['OCO'\]"),
                          ({"classes": "Atelectasis"}, "classes must be a list"),
                          ({"classes": ["Atelectasys"]}, "have no box in dataset"),
                          ({"ps": 0.5}, "ps must be a sequence"), ({"limit": 0}, "limit must be at least 1")):
        with pytest.raises(PerturbInputError if "box" not in match else ValueError, match=match):
            export_perturbed(ds, tmp_path / "x", progress=False, **kwargs)


# --------------------------------------------------------------------------- dataset adapters
def _imagenome(tmp_path, edit) -> Path:
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "mimic_imagenome", root)
    ann = json.loads((root / "imagenome_annotations.json").read_text())
    edit(ann)
    (root / "imagenome_annotations.json").write_text(json.dumps(ann))
    return root


FIRST = "zzzz0001-fixture0-invented-notareal-dicomid0"
THIRD = "zzzz0003-fixture0-invented-notareal-dicomid0"  # dropped by the No-Finding filter


@pytest.mark.parametrize("edit, match", [
    (lambda a: a[FIRST]["regions"][0].update(bbox=[4, 30, float("nan"), 60]), r"regions\[0\]\.bbox'.*x2 = nan is not a finite number"),
    (lambda a: a[FIRST]["regions"][0].update(bbox=[4, 30, "x", 60]), r"regions\[0\]\.bbox'.*x2 = 'x' is not a number"),
    (lambda a: a[FIRST]["regions"][0].update(bbox=[30, 30, 4, 60]), r"regions\[0\]\.bbox'.*inverted box"),
    (lambda a: a[FIRST]["regions"][0].update(bbox=[4, 30, 80, 60]), r"outside the 64x64 image.*clip_boxes"),
    (lambda a: a[FIRST]["regions"][0].update(bbox=None), r"regions\[0\]\.bbox'.*got null"),
    (lambda a: a[FIRST]["regions"][0].update(bbox=[True, 30, 40, 60]), r"bbox'.*x1 = True is not a number"),
    (lambda a: a[FIRST].update(regions=None), r"field 'regions'.*got null"),
    (lambda a: a[FIRST]["regions"][0].update(findings=["Atelectasys"]),
     r"regions\[0\]\.findings'.*unknown localisable CheXpert class 'Atelectasys'; did you mean 'Atelectasis'"),
    (lambda a: a[THIRD].update(regions=[{"anatomy": "x", "bbox": [1, 1, 5, 5], "findings": ["Edemaa"]}]),
     "Edemaa"),  # a typo is caught even on an image the filters would drop
    (lambda a: a[FIRST]["labels"].__setitem__(0, True), "code True"),
    (lambda a: a[FIRST].update(report=7), r"field 'report'.*expected text"),
    (lambda a: a.update({"x": "not a dict"}), "the entry must be a dict"),
])
def test_imagenome_errors_name_file_row_and_field(tmp_path, edit, match):
    root = _imagenome(tmp_path, edit)
    with pytest.raises(DatasetError, match=rf"imagenome_annotations\.json.*{match}"):
        load_mimic_imagenome(root)


def test_imagenome_clip_option_and_missing_files(tmp_path):
    root = _imagenome(tmp_path, lambda a: a[FIRST]["regions"][0].update(bbox=[-3, 30, 80, 60]))
    ds = load_mimic_imagenome(root, clip_boxes=True)
    b = ds.boxes[ds.boxes["box_id"] == f"{FIRST}#0"].iloc[0]
    assert (b.x1, b.x2) == (0.0, 64.0)
    with pytest.raises(DatasetError, match="metadata CSV not found.*missing.csv"):
        load_mimic_imagenome(FIXTURES / "mimic_imagenome", metadata_csv="missing.csv")
    (root / "imagenome_annotations.json").write_text("{not json")
    with pytest.raises(DatasetError, match=r"not valid JSON \(line 1, column 2"):
        load_mimic_imagenome(root)
    with pytest.raises(DatasetError, match="has no option"):
        load_dataset(f"mimic:{root}", clip=True)


def test_truncated_image_fails_at_load_naming_the_image(tmp_path):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURES / "mimic_jpg", root)
    victim = next((root / "files").rglob("0a1b2c3d-00000003.jpg"))
    victim.write_bytes(victim.read_bytes()[:-40])
    with pytest.raises(DatasetError, match=r"image '0a1b2c3d-00000003'.*truncated JPEG"):
        load_mimic_jpg(root)
    victim.write_bytes(b"not an image")
    with pytest.raises(DatasetError, match=r"image '0a1b2c3d-00000003'.*does not decode"):
        load_mimic_jpg(root)


@pytest.mark.parametrize("time, match", [
    ("12:30", "'12:30' is not a time HHMMSS"), ("250000", "not a time of day"), ("12a000", "is not a time"),
    ("126000", "not a time of day"),
])
def test_study_time_errors_name_file_row_and_field(tmp_path, time, match):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURES / "mimic_jpg", root)
    meta = root / "mimic-cxr-2.0.0-metadata.csv"
    meta.write_text(meta.read_text().replace("111111.111", time, 1))
    with pytest.raises(DatasetError, match=rf"metadata\.csv, row '0a1b2c3d-00000001', field 'StudyTime'.*{match}"):
        load_mimic_jpg(root)


def test_study_date_and_id_errors(tmp_path):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURES / "mimic_jpg", root)
    meta = root / "mimic-cxr-2.0.0-metadata.csv"
    text = meta.read_text()
    meta.write_text(text.replace("22510506", "2251-05-06", 1))
    with pytest.raises(DatasetError, match=r"row '0a1b2c3d-00000001', field 'StudyDate'.*'2251-05-06'"):
        load_mimic_jpg(root)
    meta.write_text(text.replace("90000032,90414267", "9000x032,90414267", 1))
    with pytest.raises(DatasetError, match=r"metadata\.csv, row 2, field 'subject_id'.*'9000x032'"):
        load_mimic_jpg(root)
    meta.write_text("")
    with pytest.raises(DatasetError, match="is empty"):
        load_mimic_jpg(root)


def _padchest(tmp_path, edit) -> Path:
    root = tmp_path / "p"
    shutil.copytree(FIXTURES / "padchest_gr", root)
    samples = json.loads((root / "verified_samples.json").read_text())
    edit(samples[next(iter(samples))])
    (root / "verified_samples.json").write_text(json.dumps(samples))
    return root


@pytest.mark.parametrize("edit, match", [
    (lambda e: e["regions"][0].update(bbox=[[0.9, 0.7, 0.6, 0.95]]), r"regions\[0\]\.bbox\[0\]'.*inverted"),
    (lambda e: e["regions"][0].update(bbox=[[0.6, 0.7, "x", 0.95]]), r"bbox\[0\]'.*x2 = 'x' is not a number"),
    (lambda e: e["regions"][0].update(bbox=[[0.6, 0.7, float("nan"), 0.95]]), r"x2 = nan is not a finite number"),
    (lambda e: e["regions"][0].update(bbox=[[0.6, 0.7, 1.5, 0.95]]), "not normalised"),
    (lambda e: e["regions"][0].update(bbox=None), r"regions\[0\]\.bbox'.*got null"),
    (lambda e: e.update(regions=None), r"field 'regions'.*got null"),
    (lambda e: e["regions"][0].update(chexpert_categories=["Pleural Efusion"]), "did you mean 'Pleural Effusion'"),
    (lambda e: e["regions"][0].update(chexpert_categories=None), r"chexpert_categories'.*got null"),
])
def test_padchest_errors_name_file_row_and_field(tmp_path, edit, match):
    root = _padchest(tmp_path, edit)
    with pytest.raises(DatasetError, match=rf"verified_samples\.json, row '999.*{match}"):
        load_padchest_gr(root)


def test_padchest_keeps_region_sentences_for_the_guard():
    ds = load_padchest_gr(FIXTURES / "padchest_gr")
    assert "Left pleural effusion." in set(ds.sentences["text"])


def test_nih_non_numeric_coordinate_names_the_line(tmp_path):
    src = load_dataset("demo")
    folder = tmp_path / "nih"
    shutil.copytree(src.root, folder)
    raw = pd.read_csv(folder / "boxes.csv")
    raw["x"] = raw["x"].astype(object)
    raw.loc[3, "x"] = "12px"
    raw.to_csv(folder / "boxes.csv", index=False)
    with pytest.raises(DatasetError, match=r"boxes\.csv, row 5, field 'x'.*'12px' is not a finite number"):
        load_dataset(folder)


def test_load_dataset_refuses_options_and_bad_sources():
    with pytest.raises(DatasetError, match="takes no options"):
        load_dataset("demo", split="test")
    with pytest.raises(DatasetError, match="must be a name or path"):
        load_dataset(None)
    with pytest.raises(DatasetError, match="give the folder after 'mimic-jpg:'"):
        load_dataset("mimic-jpg:")


# --------------------------------------------------------------------------- params files
@pytest.fixture
def params_root(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "params" / "nb").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("SHOVIR_ROOT", str(root))
    monkeypatch.setenv("SHOVIR_DEMO_DATA", str(Path(__file__).resolve().parent.parent / "data" / "demo"))
    return root / "params" / "nb"


@pytest.mark.parametrize("text, match", [
    ("runs: {a: [1, 2}\n", r"not valid YAML \(line 1"),
    ("runs:\n  - {protocol: cohort, name: demo}\n", "'runs' must be a mapping .* got a list"),
    ("- 1\n", "must be a mapping with 'runs'"),
    ("runs: {a: {protocol: cohort}}\n", "needs 'protocol' and 'name'"),
    ("runs: {a: {protocol: nope, name: x}}\n", "unknown protocol 'nope'"),
    ("runs: {a: {protocol: cohort, name: ../../etc}}\n", "'name' must be a name"),
    ("runs: {a: {protocol: cohort, name: x, spec: null}}\n", "'spec' must be a mapping .* got null"),
    ("runs: {a: {protocol: cohort, name: x, spec: [1]}}\n", "'spec' must be a mapping"),
    ("runs: {a: {protocol: cohort, name: x, specs: {}}}\n", r"unknown keys \['specs'\]"),
    ("parameters: [1]\n", "'parameters' must be a mapping"),
    ("parameters: {profile: demo}\n", "set by the runner"),
    ("parameters: {1x: 2}\n", "not a Python identifier"),
    ("run: {}\n", r"unknown top-level keys \['run'\]"),
])
def test_params_errors(params_root, text, match):
    (params_root / "demo.yaml").write_text(text)
    with pytest.raises(ParamsError, match=match):
        load_params("nb", "demo")


def test_params_names_are_plain(params_root):
    with pytest.raises(ParamsError, match="notebook name"):
        load_params("../nb", "demo")
    with pytest.raises(ParamsError, match="profile name"):
        load_params("nb", "de/mo")


# --------------------------------------------------------------------------- the CLI
def _one_line_error(capsys, argv, *, code=2, match=""):
    assert cli.main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("shovir: error: "), err
    assert not err[0].startswith("Traceback") and match in err[0]
    return err[0]


def test_cli_user_errors_are_one_line(capsys, params_root, runs_root):
    (params_root / "demo.yaml").write_text("runs: {a: [1, 2}\n")
    _one_line_error(capsys, ["run", "nb"], match="not valid YAML")
    (params_root / "demo.yaml").write_text("runs:\n  - 1\n")
    _one_line_error(capsys, ["run", "nb"], match="'runs' must be a mapping")
    (params_root / "demo.yaml").write_text("runs: {a: {protocol: cohort, name: x, spec: {colour: 1}}}\n")
    _one_line_error(capsys, ["run", "nb", "-q"], match="unknown key(s) ['colour']")  # a SpecError of a protocol
    _one_line_error(capsys, ["perturb", "--dataset", "nope", "-q"], match="dataset 'nope' not found")
    _one_line_error(capsys, ["perturb", "--dataset", "demo", "--ps", "1.5", "-q"], match="ps[0] must lie in")
    _one_line_error(capsys, ["perturb", "--dataset", "demo", "--out", str(paths.repo_root() / "x"), "-q"],
                    match="--force")
    _one_line_error(capsys, ["records", "show", "a/b/c"], match="a/b/c: no manifest.json")


def test_cli_debug_shows_the_traceback(params_root):
    (params_root / "demo.yaml").write_text("runs:\n  - 1\n")
    with pytest.raises(ParamsError):
        cli.main(["--debug", "run", "nb"])
    with pytest.raises(ParamsError):
        cli.main(["run", "nb", "--debug"])


def test_a_failed_record_keeps_its_trials_and_says_how_to_resume(capsys, params_root, runs_root, monkeypatch):
    from shovir_core.records import RunWriter

    (params_root / "demo.yaml").write_text("runs: {boxes: {protocol: cohort, name: demo-bbox, spec: {dataset: demo}}}\n")

    def fail(self, **counts):
        raise OSError("disk full")

    monkeypatch.setattr(RunWriter, "complete", fail)
    line = _one_line_error(capsys, ["run", "nb", "-q"], match="record 'boxes' (cohort/demo-bbox) failed")
    assert "OSError: disk full" in line and "trial(s) already written are kept in" in line
    assert "run `shovir run nb` again to resume" in line
    n = int(line.split("the ")[-1].split(" trial(s)")[0])
    assert n > 0


@pytest.mark.parametrize("error", [ZeroDivisionError("division by zero"), KeyError("colour"), TypeError("x")])
def test_cli_bugs_print_the_traceback_and_say_so(capsys, monkeypatch, error):
    def fail(args):
        raise error

    monkeypatch.setattr(cli, "_cmd_records", fail)
    assert cli.main(["records", "list"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "Traceback (most recent call last):", err
    assert f"internal error ({type(error).__name__})" in err[-1] and "this is a bug" in err[-1]
    assert not any(line.startswith("shovir: error:") for line in err)


def test_cli_a_project_error_raised_from_a_bug_is_a_bug(capsys, monkeypatch):
    from shovir_core.errors import ShovirError

    def fail(args):
        try:
            {}["colour"]
        except KeyError as exc:
            raise ShovirError("record 'x' failed") from exc

    monkeypatch.setattr(cli, "_cmd_records", fail)
    assert cli.main(["records", "list"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "this is a bug" in err


# --------------------------------------------------------------------------- protocol specs
@pytest.mark.parametrize("protocol, spec, match", [
    ("perturbations", {"ps": 0.5}, "ps"),
    ("shovir", {"conditions": "OCO"}, "conditions"),
    ("shovir", {"classes": "Atelectasis"}, "classes"),
    ("shovir", {"min_count": True}, "min_count"),
    ("modalens", {"ssim_threshold": 7}, "ssim_threshold"),
])
def test_protocol_spec_cases(protocol, spec, match):
    from shovir_core import protocols

    with pytest.raises(ValueError, match=match):
        protocols.resolve(protocol, {"dataset": "demo", **spec} if protocol != "modalens"
                          else {"dataset": "demo-64px", **spec})
