import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shovir_core.data import DatasetError, load_dataset
from shovir_core.labels import CHEXPERT_CLASSES


@pytest.fixture(scope="module")
def demo():
    return load_dataset("demo")


def test_demo_schema(demo):
    assert {"image_id", "study_id", "patient_id", "view", "path", "width", "height"} <= set(demo.images.columns)
    assert list(demo.labels.columns) == list(CHEXPERT_CLASSES)
    assert len(demo.images) == 184 and len(demo.boxes) == 212
    assert set(demo.boxes["finding"]) <= set(CHEXPERT_CLASSES)
    assert (demo.boxes["x2"] > demo.boxes["x1"]).all()
    # every box's finding is positive in the image's labels
    for r in demo.boxes.itertuples():
        assert demo.labels.loc[r.image_id, r.finding] == 1
    # classes without an NIH counterpart are blank
    assert demo.labels["Fracture"].isna().all()
    img = demo.load_image(demo.images["image_id"].iloc[0])
    assert img.shape == (256, 256) and img.dtype == np.uint8


def test_multi_study_set():
    ds = load_dataset("demo-64px")
    per_patient = ds.images.groupby("patient_id")["study_id"].nunique()
    assert (per_patient >= 2).sum() == 136
    assert ds.boxes.empty


def test_manifest_hash_is_content_hash(demo, tmp_path):
    assert demo.manifest()["sha256"] == load_dataset("demo").manifest_hash
    folder = _copy_demo(tmp_path, n=5)
    h1 = load_dataset(folder).manifest_hash
    first = sorted((folder / "images").iterdir())[0]
    a = np.asarray(Image.open(first)).copy()
    a[0, 0] ^= 1
    Image.fromarray(a).save(first)
    assert load_dataset(folder).manifest_hash != h1


def _copy_demo(tmp_path, n=5):
    src = load_dataset("demo")
    keep = src.images["image_id"].iloc[:n].tolist()
    folder = tmp_path / "nih"
    (folder / "images").mkdir(parents=True)
    raw = pd.read_csv(src.root / "boxes.csv")
    raw = raw[raw["image"].map(lambda s: s[:-4]).isin(keep)]
    raw.to_csv(folder / "boxes.csv", index=False)
    for f in raw["image"].unique():
        shutil.copy(src.root / "images" / f, folder / "images" / f)
    return folder


def _edit(folder, **changes):
    raw = pd.read_csv(folder / "boxes.csv")
    for col, value in changes.items():
        raw.loc[0, col] = value
    raw.to_csv(folder / "boxes.csv", index=False)
    return raw.loc[0, "image"][:-4]


@pytest.mark.parametrize("changes, message", [
    ({"w": 0.0}, "zero-area box"),
    ({"h": -3.0}, "inverted box"),
    ({"x": 250.0, "w": 40.0}, "outside the 256x256 image"),
    ({"finding": "Dragon"}, "unknown finding 'Dragon'"),
])
def test_bad_boxes_name_the_item(tmp_path, changes, message):
    folder = _copy_demo(tmp_path)
    image_id = _edit(folder, **changes)
    with pytest.raises(DatasetError, match=message) as info:
        load_dataset(folder)
    assert image_id in str(info.value)


def test_missing_image_file(tmp_path):
    folder = _copy_demo(tmp_path)
    victim = sorted((folder / "images").iterdir())[0]
    victim.unlink()
    with pytest.raises(DatasetError, match=f"{victim.stem}.*file not found"):
        load_dataset(folder)


def test_unknown_dataset_and_layout(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(tmp_path / "nope")
    (tmp_path / "empty" / "images").mkdir(parents=True)
    with pytest.raises(DatasetError, match="neither boxes.csv nor index.csv"):
        load_dataset(tmp_path / "empty")


def test_box_index_equals_a_scan_of_the_box_table(demo):
    index = demo.boxes_by_image()
    assert sum(map(len, index.values())) == len(demo.boxes) > 0
    for image_id in demo.images["image_id"]:
        sub = demo.boxes[demo.boxes["image_id"] == image_id]
        scan = [(r.finding, float(r.x1), float(r.y1), float(r.x2), float(r.y2), str(r.box_id)) for r in sub.itertuples()]
        assert index.get(image_id, []) == scan  # same boxes, same (table) order
        assert demo.boxes_of(image_id) == [b[:5] for b in scan]
    first, table = demo.images["image_id"].iloc[0], demo.boxes
    try:
        demo.boxes = table[table["image_id"] != first]  # a replaced table is indexed again
        assert demo.boxes_of(first) == [] and first not in demo.boxes_by_image()
    finally:
        demo.boxes = table


def test_image_path_index_equals_a_scan_of_the_image_table(demo):
    paths = demo.image_paths()
    assert len(paths) == demo.images["image_id"].nunique() > 0
    for image_id in demo.images["image_id"]:
        assert paths[image_id] == demo.images.loc[demo.images["image_id"] == image_id, "path"].iloc[0]
    first, table = demo.images["image_id"].iloc[0], demo.images
    assert demo.load_image(first).shape == np.asarray(Image.open(paths[first])).shape
    try:
        demo.images = table[table["image_id"] != first]  # a replaced table is indexed again
        with pytest.raises(KeyError, match="no image"):
            demo.load_image(first)
    finally:
        demo.images = table
    with pytest.raises(KeyError, match="no image 'no-such-image'"):
        demo.load_image("no-such-image")
