"""Writing WAV files (:func:`write_wav`), for tests, demos and data generators."""

from __future__ import annotations

import struct

import numpy as np

from .header import GUID_TAIL, SAMPLE_FORMATS, U32_MAX, WAVE_FORMAT_EXTENSIBLE

__all__ = ["write_wav", "code_range"]


def write_wav(path, data, rate: int, sample_format: str = "int16", *,
              rf64: bool | None = None) -> None:
    """Write a standard WAV file (for tests and data generators).

    Uses ``WAVE_FORMAT_EXTENSIBLE`` when there are more than 2 channels or more than 16 bits
    per sample (as the format's specification asks; channel mask 0 -- sensors, not speakers
    -- beyond stereo), plain PCM otherwise, and adds the ``fact`` chunk float files need.

    Parameters
    ----------
    path : str or os.PathLike
    data : array_like
        Shape ``(frames, channels)`` or ``(frames,)``. Floating-point data is full-scale in
        ``[-1, 1)`` and, for integer formats, scaled, rounded and clipped. Integer data is
        taken as the stored sample codes (unsigned 0..255 for ``int8u``) and must fit
        (float formats just cast it).
    rate : int
        Frames per second.
    sample_format : str
        A key of :data:`SAMPLE_FORMATS`.
    rf64 : bool, optional
        Write RF64 (64-bit sizes); by default only when the file would exceed 4 GiB.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from wavesql.udfs.wav import read_frames, read_info
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.array([0.0, 0.5, -2.0]), 16000, "int24")
    >>> read_frames(read_info(p))[:, 0].tolist()
    [0.0, 0.5, -1.0]
    """
    if sample_format not in SAMPLE_FORMATS:
        raise ValueError(f"unknown sample_format {sample_format!r}; use one of "
                         f"{sorted(SAMPLE_FORMATS)}")
    a = np.asarray(data)
    a = a[:, None] if a.ndim == 1 else a
    if a.ndim != 2 or a.shape[1] == 0 or a.dtype.kind not in "biuf":
        raise ValueError(f"data must be real numbers of shape (frames, channels), got "
                         f"{a.dtype} {a.shape}")
    rate = int(rate)
    if not 0 < rate <= U32_MAX:
        raise ValueError(f"rate must be a positive 32-bit integer, got {rate}")
    tag, bits, _ = SAMPLE_FORMATS[sample_format]
    if tag == 1 and a.size:  # checked up front so that no half-written file is left
        lo, hi = code_range(sample_format)
        if a.dtype.kind == "f" and np.isnan(a).any():
            raise ValueError(f"cannot write NaN as {sample_format} PCM")
        if a.dtype.kind != "f" and (a.min() < lo or a.max() > hi):
            raise ValueError(f"integer sample codes for {sample_format} must lie in "
                             f"[{lo}, {hi}], got [{a.min()}, {a.max()}]")
    frames, nch = a.shape
    block_align = nch * bits // 8
    data_bytes = frames * block_align
    extensible = nch > 2 or bits > 16
    fmt = struct.pack("<HHIIHH", WAVE_FORMAT_EXTENSIBLE if extensible else tag, nch, rate,
                      min(rate * block_align, U32_MAX), block_align, bits)
    if extensible:
        mask = {1: 0x4, 2: 0x3}.get(nch, 0)
        fmt += struct.pack("<HHIH", 22, bits, mask, tag) + GUID_TAIL
    chunks = [(b"fmt ", fmt)]
    if tag == 3:
        chunks.append((b"fact", struct.pack("<I", min(frames, U32_MAX))))
    pad = data_bytes & 1
    riff_size = 4 + sum(8 + len(body) for _, body in chunks) + 8 + data_bytes + pad
    rf64 = riff_size > U32_MAX if rf64 is None else rf64
    if rf64:
        ds64 = struct.pack("<QQQI", riff_size + 36, data_bytes, frames, 0)
        head = b"RF64" + struct.pack("<I", U32_MAX) + b"WAVE" + b"ds64"
        head += struct.pack("<I", len(ds64)) + ds64
    else:
        head = b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
    for cid, body in chunks:
        head += cid + struct.pack("<I", len(body)) + body
    head += b"data" + struct.pack("<I", U32_MAX if rf64 else data_bytes)
    step = max(1, (16 << 20) // max(1, block_align))  # bounds the temporary copies
    with open(path, "wb") as f:
        f.write(head)
        for i in range(0, frames, step):
            f.write(memoryview(_encode(a[i:i + step], sample_format)).cast("B"))
        f.write(b"\0" * pad)


def code_range(sample_format: str) -> tuple[int, int]:
    """The lowest and highest stored code of an integer format (``int8u``: 0..255)."""
    if sample_format == "int8u":
        return 0, 255
    half = 1 << (SAMPLE_FORMATS[sample_format][1] - 1)
    return -half, half - 1


def _encode(block: np.ndarray, sample_format: str) -> np.ndarray:
    """One block of frames as the stored little-endian bytes (C-contiguous array)."""
    stored = SAMPLE_FORMATS[sample_format][2]
    if sample_format.startswith("float"):
        return np.ascontiguousarray(block, dtype=stored)
    codes = block
    if block.dtype.kind == "f":
        full_scale = 1 << (SAMPLE_FORMATS[sample_format][1] - 1)
        codes = np.rint(block.astype(np.float64) * full_scale)
        codes += 128 if sample_format == "int8u" else 0
        codes = np.clip(codes, *code_range(sample_format))
    if sample_format == "int24":  # low 3 bytes of each little-endian int32
        return np.ascontiguousarray(codes.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3])
    return np.ascontiguousarray(codes, dtype=stored)
