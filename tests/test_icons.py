"""The committed icons are the SVG, drawn at each size (packaging/make_icons.py), and the .ico is
a valid icon container that Windows and Qt read."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.packaging_helpers import ROOT

_spec = importlib.util.spec_from_file_location("make_icons", ROOT / "packaging" / "make_icons.py")
assert _spec is not None and _spec.loader is not None
make_icons = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_icons)


def pixels(image) -> np.ndarray:
    """[H, W, 4] uint8 (B, G, R, A) of a QImage converted to ARGB32."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    rows = make_icons.bgra_rows(image)
    return np.frombuffer(b"".join(rows), np.uint8).reshape(image.height(), image.width(), 4)


def assert_same_picture(found: np.ndarray, expected: np.ndarray) -> None:
    """Equal up to anti-aliasing differences between Qt versions."""
    assert found.shape == expected.shape
    diff = np.abs(found.astype(int) - expected.astype(int))
    assert diff.mean() < 2.0 and np.percentile(diff, 99) < 48, (diff.mean(), diff.max())


def test_every_png_size_is_the_svg_drawn_at_that_size(qapp) -> None:
    from PySide6.QtGui import QImage

    for size in make_icons.PNG_SIZES:
        path = make_icons.png_path(size)
        image = QImage(str(path))
        assert not image.isNull(), path
        assert_same_picture(pixels(image), pixels(make_icons.render(make_icons.SVG, size)))


def ico_directory(data: bytes) -> list[tuple[int, int, int, int]]:
    """(size, bit count, byte length, offset) per ICONDIRENTRY."""
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    assert (reserved, kind) == (0, 1)
    entries = []
    for i in range(count):
        width, height, colors, _, planes, bits, length, offset = struct.unpack_from(
            "<BBBBHHII", data, 6 + 16 * i)
        assert width == height and colors == 0 and planes == 1
        entries.append((width or 256, bits, length, offset))
    return entries


def test_ico_holds_bmp_images_and_a_png_at_256(qapp) -> None:
    data = make_icons.ICO.read_bytes()
    entries = ico_directory(data)
    assert [e[0] for e in entries] == list(make_icons.ICO_SIZES)
    end = 6 + 16 * len(entries)
    for size, bits, length, offset in entries:
        assert bits == 32 and offset == end  # packed one after another
        end += length
        blob = data[offset:offset + length]
        if size >= make_icons.ICO_PNG_MIN:
            assert blob[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            header = struct.unpack_from("<IiiHH", blob, 0)
            assert header == (40, size, 2 * size, 1, 32)
            mask_bytes = ((size + 31) // 32) * 4 * size
            assert length == 40 + 4 * size * size + mask_bytes
    assert end == len(data)


def test_ico_images_read_back_as_the_svg(qapp) -> None:
    """Qt's own .ico reader sees the same pictures (right side up, alpha kept)."""
    from PySide6.QtGui import QImageReader

    reader = QImageReader(str(make_icons.ICO))
    assert reader.imageCount() == len(make_icons.ICO_SIZES)
    for index, size in enumerate(make_icons.ICO_SIZES):
        assert reader.jumpToImage(index)
        image = reader.read()
        assert image.width() == size
        assert_same_picture(pixels(image), pixels(make_icons.render(make_icons.SVG, size)))


def test_bmp_mask_marks_fully_transparent_pixels(qapp) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QImage

    image = QImage(32, 2, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    image.setPixelColor(0, 0, QColor(255, 0, 0, 255))  # top-left opaque
    blob = make_icons.bmp_entry(image)
    mask = blob[40 + 4 * 32 * 2:]
    assert len(mask) == 8  # two rows of 32 bits
    bottom_row, top_row = mask[:4], mask[4:]  # stored bottom-up
    assert bottom_row == b"\xff\xff\xff\xff"
    assert top_row == b"\x7f\xff\xff\xff"
    first_pixel_of_top_row = blob[40 + 4 * 32:40 + 4 * 32 + 4]
    assert first_pixel_of_top_row == bytes([0, 0, 255, 255])  # B, G, R, A


def test_make_icons_writes_every_file(qapp, tmp_path: Path) -> None:
    written = make_icons.make_icons(make_icons.SVG, tmp_path)
    assert written == [*(make_icons.png_path(s, tmp_path) for s in make_icons.PNG_SIZES),
                       tmp_path / "moss-voice.ico"]
    assert all(path.stat().st_size > 0 for path in written)
    sizes = [e[0] for e in ico_directory((tmp_path / "moss-voice.ico").read_bytes())]
    assert sizes == list(make_icons.ICO_SIZES)


@pytest.mark.parametrize("bad", ["<svg", ""])
def test_render_refuses_an_invalid_svg(qapp, tmp_path: Path, bad: str) -> None:
    svg = tmp_path / "bad.svg"
    svg.write_text(bad)
    with pytest.raises(ValueError, match="not a valid SVG"):
        make_icons.render(svg, 16)
