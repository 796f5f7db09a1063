"""Render resources/icons/moss-voice.svg into the PNG sizes and the Windows .ico the installers use.

    .venv/bin/python packaging/make_icons.py      # rewrites the files below; commit them

Outputs (committed, so a build needs no SVG renderer of its own):
- ``resources/icons/hicolor/<N>x<N>/apps/moss-voice.png`` for the freedesktop icon theme
  (the Linux tarball's install script copies this tree as it is);
- ``resources/icons/moss-voice.ico``: 16–48 px as 32-bit BMP images (what every Windows
  version and icon tool reads) and 256 px as PNG (Vista and later), for the executable and
  the Inno Setup installer.

Qt (PySide6, already a dependency) draws the SVG; the .ico container is written here.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "resources" / "icons"
SVG = ICONS / "moss-voice.svg"
ICO = ICONS / "moss-voice.ico"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 256)
ICO_PNG_MIN = 256  # entries this large are stored as PNG, smaller ones as BMP


def png_path(size: int, icons: Path = ICONS) -> Path:
    return icons / "hicolor" / f"{size}x{size}" / "apps" / "moss-voice.png"


def render(svg: Path, size: int):  # -> QImage (PySide6 imported lazily)
    """The SVG drawn into a transparent ``size``×``size`` ARGB32 image."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image


def bgra_rows(image) -> list[bytes]:
    """Pixel rows top to bottom as B, G, R, A bytes (ARGB32 on a little-endian machine)."""
    width, stride = image.width(), image.bytesPerLine()
    data = bytes(image.constBits())
    return [data[y * stride:y * stride + 4 * width] for y in range(image.height())]


def bmp_entry(image) -> bytes:
    """An ICO image in BMP form: BITMAPINFOHEADER (height doubled for the mask), 32-bit BGRA
    rows bottom-up, then the 1-bit AND mask (1 = transparent), rows padded to 4 bytes."""
    width, height = image.width(), image.height()
    rows = bgra_rows(image)
    mask_stride = ((width + 31) // 32) * 4
    mask = bytearray()
    for row in reversed(rows):
        bits = bytearray(mask_stride)
        for x in range(width):
            if row[4 * x + 3] == 0:
                bits[x // 8] |= 0x80 >> (x % 8)
        mask += bits
    pixels = b"".join(reversed(rows))
    header = struct.pack("<IiiHHIIiiII", 40, width, 2 * height, 1, 32, 0,
                         len(pixels) + len(mask), 0, 0, 0, 0)
    return header + pixels + bytes(mask)


def png_bytes(image) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise RuntimeError("Qt could not encode a PNG")
    buffer.close()
    return bytes(data.data())


def ico_bytes(images: dict[int, object]) -> bytes:
    """The .ico container: ICONDIR, one ICONDIRENTRY per size, then the images."""
    blobs = [(size, png_bytes(img) if size >= ICO_PNG_MIN else bmp_entry(img))
             for size, img in sorted(images.items())]
    offset = 6 + 16 * len(blobs)
    head = struct.pack("<HHH", 0, 1, len(blobs))
    entries, body = b"", b""
    for size, blob in blobs:
        side = 0 if size >= 256 else size  # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        body += blob
    return head + entries + body


def make_icons(svg: Path = SVG, icons: Path = ICONS) -> list[Path]:
    """Write every PNG size and the .ico; returns the files written."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # drawing needs one
    written = []
    for size in PNG_SIZES:
        path = png_path(size, icons)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png_bytes(render(svg, size)))
        written.append(path)
    ico = icons / ICO.name
    ico.write_bytes(ico_bytes({size: render(svg, size) for size in ICO_SIZES}))
    written.append(ico)
    return written


if __name__ == "__main__":
    for written_path in make_icons():
        print(written_path.relative_to(ROOT))
