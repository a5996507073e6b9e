"""shovir_core.data.pixels: a file's decoded pixels are kept per process while the file is unchanged."""
import os

import numpy as np
import pytest
from PIL import Image

from shovir_core.bounded_store import BoundedStore
from shovir_core.data import pixels


def _write(path, value: int, size=(8, 6)):
    Image.fromarray(np.full(size, value, dtype=np.uint8)).save(path)


def test_a_file_is_decoded_once_and_again_after_it_changes(tmp_path):
    path = tmp_path / "a.png"
    _write(path, 7)
    first = pixels.read_pixels(path)
    assert first.shape == (8, 6) and (first == 7).all() and not first.flags.writeable
    assert pixels.read_pixels(path) is first and pixels.read_pixels(str(path)) is first
    _write(tmp_path / "b.png", 9)
    os.replace(tmp_path / "b.png", path)  # replaced in place (another inode): decoded again
    assert (pixels.read_pixels(path) == 9).all()
    stat = path.stat()
    _write(path, 3)  # rewritten with the same size: its modification time tells
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert (pixels.read_pixels(path) == 3).all()
    with pytest.raises(ValueError):
        pixels.read_pixels(path)[0, 0] = 1


def test_the_kept_pixels_stay_within_their_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(pixels, "STORE", BoundedStore(max_bytes=4 * 48))  # four 8 x 6 images (48 bytes each)
    for i in range(6):
        _write(tmp_path / f"{i}.png", i)
        assert (pixels.read_pixels(tmp_path / f"{i}.png") == i).all()
    assert pixels.STORE.nbytes == 4 * 48
    kept = [k[0] for k in pixels.STORE.keys()]
    assert kept == [str(tmp_path / f"{i}.png") for i in (2, 3, 4, 5)], "the least recently used went"


def test_a_file_that_does_not_decode_raises_and_is_not_kept(tmp_path):
    path = tmp_path / "bad.png"
    path.write_bytes(b"not an image")
    with pytest.raises(OSError):
        pixels.read_pixels(path)
    assert not any(k[0] == str(path) for k in pixels.STORE.keys())


def test_a_prepared_image_is_made_once_and_each_caller_gets_its_own_copy(tmp_path):
    from shovir_core.protocols.noreport import prepare_image

    path = tmp_path / "c.png"
    Image.fromarray(np.arange(20 * 30, dtype=np.uint8).reshape(20, 30) % 251).save(path)
    a, b = prepare_image(path, size=8), prepare_image(str(path), size=8)
    with Image.open(path) as im:
        expected = np.asarray(im.convert("RGB").resize((8, 8), Image.Resampling.BILINEAR))
    assert a.shape == (8, 8, 3) and np.array_equal(a, expected) and np.array_equal(b, expected)
    assert a is not b and a.flags.writeable
    a[0, 0] = 0  # a caller's edit reaches no other caller
    assert np.array_equal(prepare_image(path, size=8), expected)
    assert prepare_image(path, size=0).shape == (20, 30, 3)
