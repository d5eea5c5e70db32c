"""Test images with known content, written with the standard library only.

Each picture is a coloured square centred on a white canvas. Its edges fall on 8-pixel
boundaries, so every 8x8 block is one flat colour: that keeps the baseline JPEG writer
tiny (only DC coefficients; every block ends at once) and the PNG exact. The canvas is
128 pixels wide on purpose: a *tiny* flat PNG once got an unexplained answer sent directly
to OpenAI (docs/live-acceptance.md, the ``images_*`` row), so these are neither tiny nor
a single colour.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

RGB = tuple[int, int, int]

COLOURS: dict[str, RGB] = {"red": (220, 20, 20), "green": (20, 170, 40), "blue": (30, 60, 220)}
WHITE: RGB = (255, 255, 255)
SIZE = 128
MARGIN = 24  # the square spans [MARGIN, SIZE - MARGIN) in both directions


@dataclass(frozen=True)
class Picture:
    colour: str
    media_type: str  # image/png | image/jpeg
    data: bytes

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


def square_pixels(colour: RGB, size: int = SIZE, margin: int = MARGIN) -> list[list[RGB]]:
    """Rows of pixels: ``colour`` inside the centred square, white around it."""
    inside = range(margin, size - margin)
    return [
        [colour if x in inside and y in inside else WHITE for x in range(size)] for y in range(size)
    ]


def picture(colour: str, media_type: str) -> Picture:
    rows = square_pixels(COLOURS[colour])
    data = png(rows) if media_type == "image/png" else jpeg(rows)
    return Picture(colour, media_type, data)


# --- PNG ---------------------------------------------------------------------------------


def png(rows: Sequence[Sequence[RGB]]) -> bytes:
    """An 8-bit RGB PNG of ``rows`` (filter 0 on every scanline)."""
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel) for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(raw, 9))
        + _png_chunk(b"IEND", b"")
    )


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(tag + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


# --- baseline JPEG for block-flat images ---------------------------------------------------

# Annex K.3 of ITU T.81: the standard luminance DC table (code lengths, then symbols).
_DC_BITS = (0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0)
_DC_VALUES = tuple(range(12))
# An AC table with one symbol, end-of-block: flat blocks have no AC coefficients.
_AC_BITS = (1,) + (0,) * 15
_AC_VALUES = (0x00,)
_QUANT = 8  # every coefficient; the DC of a flat block is then exactly its level - 128


def jpeg(rows: Sequence[Sequence[RGB]]) -> bytes:
    """A baseline JPEG (YCbCr 4:4:4) of an image whose 8x8 blocks are each one colour."""
    height, width = len(rows), len(rows[0])
    if height % 8 or width % 8:
        raise ValueError("the JPEG writer needs dimensions that are multiples of 8")
    dc_codes = _huffman_codes(_DC_BITS, _DC_VALUES)
    eob = _huffman_codes(_AC_BITS, _AC_VALUES)[0x00]
    bits = _BitWriter()
    previous = [0, 0, 0]
    for top in range(0, height, 8):
        for left in range(0, width, 8):
            block = {rows[y][x] for y in range(top, top + 8) for x in range(left, left + 8)}
            if len(block) != 1:
                raise ValueError(f"the 8x8 block at ({left}, {top}) is not one flat colour")
            for component, level in enumerate(_ycbcr(block.pop())):
                dc = level - 128  # F(0,0) = 8 * (level - 128), quantized by 8
                diff, previous[component] = dc - previous[component], dc
                category = abs(diff).bit_length()
                bits.write(*dc_codes[category])
                if category:
                    bits.write(diff if diff > 0 else diff + (1 << category) - 1, category)
                bits.write(*eob)
    components = b"".join(bytes((ident, 0x11, 0)) for ident in (1, 2, 3))
    return b"".join(
        (
            b"\xff\xd8",
            _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
            _segment(0xDB, b"\x00" + bytes([_QUANT] * 64)),
            _segment(0xC0, struct.pack(">BHHB", 8, height, width, 3) + components),
            _segment(0xC4, b"\x00" + bytes(_DC_BITS) + bytes(_DC_VALUES)),
            _segment(0xC4, b"\x10" + bytes(_AC_BITS) + bytes(_AC_VALUES)),
            _segment(0xDA, b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00"),
            bits.finish(),
            b"\xff\xd9",
        )
    )


def _ycbcr(pixel: RGB) -> tuple[int, int, int]:
    r, g, b = pixel
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    return tuple(max(0, min(255, round(v))) for v in (y, cb, cr))  # type: ignore[return-value]


def _huffman_codes(bits: Sequence[int], values: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Canonical codes (code, length) from a DHT's counts per length (T.81 Annex C)."""
    codes: dict[int, tuple[int, int]] = {}
    code, index = 0, 0
    for length, count in enumerate(bits, start=1):
        for _ in range(count):
            codes[values[index]] = (code, length)
            code, index = code + 1, index + 1
        code <<= 1
    return codes


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload


class _BitWriter:
    """MSB-first bits with JPEG byte stuffing (0xFF is followed by 0x00)."""

    def __init__(self) -> None:
        self._out = bytearray()
        self._acc = 0
        self._count = 0

    def write(self, value: int, length: int) -> None:
        for shift in range(length - 1, -1, -1):
            self._acc = (self._acc << 1) | ((value >> shift) & 1)
            self._count += 1
            if self._count == 8:
                self._emit()

    def finish(self) -> bytes:
        while self._count:  # pad the last byte with 1 bits
            self.write(1, 1)
        return bytes(self._out)

    def _emit(self) -> None:
        self._out.append(self._acc)
        if self._acc == 0xFF:
            self._out.append(0x00)
        self._acc, self._count = 0, 0
