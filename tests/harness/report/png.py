"""Read a PNG into an (height, width, 3) uint8 array with zlib and numpy: what the screenshot test
measures, without an imaging library the project does not otherwise need.

Enough for what headless Chromium writes: 8-bit RGB or RGBA, not interlaced, every row filter
(None, Sub, Up, Average, Paeth). Sub and Up are vectorised; Average and Paeth depend on the byte
just decoded, so they run byte by byte (a screenshot has few such rows: a fraction of a second).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}  # colour type -> bytes per pixel at bit depth 8


def _chunks(data: bytes) -> tuple[bytes, bytes]:
    """(IHDR body, all IDAT bodies joined)."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    header, idat, pos = b"", b"", len(SIGNATURE)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    return header, idat


def _sequential(kind: int, row: bytearray, prior: bytes, bpp: int) -> None:
    for i in range(len(row)):
        a = row[i - bpp] if i >= bpp else 0
        b = prior[i]
        if kind == 3:  # Average
            row[i] = (row[i] + ((a + b) >> 1)) & 0xFF
            continue
        c = prior[i - bpp] if i >= bpp else 0  # Paeth
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF


def read_png(path: Path) -> np.ndarray:
    header, idat = _chunks(Path(path).read_bytes())
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace}")
    bpp = CHANNELS[colour]
    stride = width * bpp
    raw = zlib.decompress(idat)
    out = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        if kind == 0:
            row = line.copy()
        elif kind == 1:  # Sub: a running sum per channel, wrapping at 256
            row = np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint8).reshape(stride)
        elif kind == 2:  # Up
            row = line + prior
        elif kind in (3, 4):
            buffer = bytearray(line.tobytes())
            _sequential(kind, buffer, prior.tobytes(), bpp)
            row = np.frombuffer(bytes(buffer), np.uint8)
        else:
            raise ValueError(f"row {y}: unknown filter type {kind}")
        out[y] = row
        prior = row
    return out.reshape(height, width, bpp)[:, :, :3]
