"""WAV headers: what a RIFF/WAVE, RF64 or BW64 file declares, the sample formats, errors.

:func:`read_info` walks a file's chunks into a :class:`WavInfo` (rate, channels, sample
format, where the samples start, how many whole frames are present); the samples themselves
are read by :mod:`.decode`.

Documented choices
------------------
- **Sizes we do not trust**: the RIFF size and the ``fmt`` byte rate are ignored (writers get
  them wrong; the file length and ``block_align`` are what matter). A data chunk size of
  ``0xFFFFFFFF``, or of 0 with bytes after the chunk header that are not another chunk, is
  what streaming recorders leave when they never patched the header: the data is taken to run
  to the end of the file (``open_ended=True``). RF64/BW64 take the 64-bit sizes from ``ds64``.
- **Truncation**: if the data chunk declares more whole frames than the file holds,
  ``read_info`` reports ``truncated=True`` with ``frames`` = the whole frames present, and
  raises ``TRUNCATED_FILE`` instead with ``strict=True``. A partial last frame is never read.

Error codes (:class:`WavError`, raised here and by :mod:`.decode` and :mod:`.timeline`):
``CORRUPT_FILE``, ``TRUNCATED_FILE``, ``UNSUPPORTED_ENCODING``, ``RATE_MISMATCH``,
``CHANNEL_MISMATCH``, ``OVERLAPPING_FILES``, ``INVALID_FILE_TIMESTAMP``. Missing files raise
the usual :class:`OSError`.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from wavesql import storage

__all__ = ["WavError", "WavInfo", "read_info", "SAMPLE_FORMATS", "WAVE_FORMAT_EXTENSIBLE",
           "GUID_TAIL", "AMBISONIC_GUID_TAIL", "U32_MAX"]

#: Sample format name -> (format tag, bits per sample, numpy dtype of one stored sample).
#: int24 has no numpy dtype; it is widened to int32 while decoding.
SAMPLE_FORMATS = {
    "int8u": (1, 8, np.dtype("u1")),
    "int16": (1, 16, np.dtype("<i2")),
    "int24": (1, 24, None),
    "int32": (1, 32, np.dtype("<i4")),
    "float32": (3, 32, np.dtype("<f4")),
    "float64": (3, 64, np.dtype("<f8")),
}
_FORMAT_BY_TAG_BITS = {(tag, bits): name for name, (tag, bits, _) in SAMPLE_FORMATS.items()}

WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# The sub-format GUID is the format tag followed by these 14 bytes (KSDATAFORMAT_SUBTYPE_*);
# the Ambisonic B-format GUIDs store the same PCM/float samples.
GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
AMBISONIC_GUID_TAIL = b"\x00\x00\x21\x07\xd3\x11\x86\x44\xc8\xc1\xca\x00\x00\x00"
_TAG_NAMES = {
    0x0001: "PCM", 0x0002: "Microsoft ADPCM", 0x0003: "IEEE float", 0x0006: "A-law",
    0x0007: "mu-law", 0x0011: "IMA ADPCM", 0x0031: "GSM 6.10", 0x0050: "MPEG",
    0x0055: "MPEG Layer 3", 0x00FF: "AAC", 0x0161: "Windows Media Audio",
    0x2000: "Dolby AC-3", 0xF1AC: "FLAC", WAVE_FORMAT_EXTENSIBLE: "EXTENSIBLE",
}
# Magic numbers of other audio containers, so that "not a RIFF file" can say what it is.
_OTHER_MAGIC = {b"FORM": "an AIFF file", b"fLaC": "a FLAC file", b"OggS": "an Ogg file",
                b"ID3\x03": "an MP3 file", b"ID3\x04": "an MP3 file", b"caff": "a CAF file"}
_CONVERT_HINT = "convert it to PCM or float, e.g. `ffmpeg -i in.wav -c:a pcm_f32le out.wav`"
U32_MAX = 0xFFFFFFFF


class WavError(ValueError):
    """A WAV file cannot be read as declared.

    Parameters
    ----------
    code : str
        Stable UPPER_SNAKE code (listed in the module docstring).
    path : str
        The file concerned; ``str()`` always names it.
    message, hint : str
        What is wrong, with the numbers; what the user can do about it (optional).

    Examples
    --------
    >>> e = WavError("CORRUPT_FILE", "a.wav", "not a RIFF file", "is it a WAV file?")
    >>> str(e)
    'a.wav: not a RIFF file [CORRUPT_FILE] (hint: is it a WAV file?)'
    """

    def __init__(self, code: str, path: str, message: str, hint: str | None = None):
        self.code, self.path, self.message, self.hint = code, os.fspath(path), message, hint
        text = f"{self.path}: {message} [{code}]"
        super().__init__(text + (f" (hint: {hint})" if hint else ""))

    def __reduce__(self):
        # Keeps the error intact when pickled out of a Spark Python worker.
        return (type(self), (self.code, self.path, self.message, self.hint))


@dataclass(frozen=True)
class WavInfo:
    """What :func:`read_info` learned from a WAV header (see the field comments)."""

    path: str
    rate: int  #: frames per second
    channels: int
    sample_format: str  #: a key of SAMPLE_FORMATS; 'int8u' is unsigned 8-bit PCM
    bits: int  #: container bits per sample
    block_align: int  #: bytes per frame, channels * bits / 8
    data_offset: int  #: byte offset of the first sample
    frames: int  #: whole frames present in the file: what can be read
    declared_frames: int  #: frames the data chunk declares (> frames if truncated)
    truncated: bool  #: the file ends before the declared data does
    open_ended: bool = False  #: data size was unknown (0/0xFFFFFFFF): the rest of the file



def read_info(path, *, strict: bool = False) -> WavInfo:
    """Parse the header of a RIFF/WAVE, RF64 or BW64 file into a :class:`WavInfo`.

    Walks the chunks (skipping unknown ones such as ``LIST``, ``fact``, ``cue``, ``JUNK``;
    odd-sized chunks are padded to even) to find ``fmt `` and ``data``.

    Parameters
    ----------
    path : str or os.PathLike
    strict : bool
        Raise ``TRUNCATED_FILE`` if the data chunk declares more frames than are present,
        instead of reporting ``truncated=True``.

    Raises
    ------
    WavError
        ``CORRUPT_FILE`` (not RIFF/WAVE, no ``fmt``/``data``, short ``fmt``, zero channels or
        rate, ``block_align`` inconsistent), ``UNSUPPORTED_ENCODING`` (ADPCM, A-law, mu-law,
        12-bit, big-endian RIFX, ...), ``TRUNCATED_FILE`` (only with ``strict=True``).

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from wavesql.udfs.wav import write_wav
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.zeros((10, 2)), 8000)
    >>> info = read_info(p)
    >>> info.rate, info.channels, info.sample_format, info.frames, info.data_offset
    (8000, 2, 'int16', 10, 44)
    """
    path = os.fspath(path)
    with storage.open_input(path, buffer_size=1 << 16) as f:
        size = storage.file_size(f)
        head = f.read(12)
        if len(head) < 12:
            raise WavError("CORRUPT_FILE", path, f"file is {size} bytes, too short for a WAV "
                           "header (12 bytes)")
        riff, _, wave = struct.unpack("<4sI4s", head)
        if riff == b"RIFX":
            raise WavError("UNSUPPORTED_ENCODING", path, "big-endian RIFX files are not "
                           "supported", _CONVERT_HINT)
        if riff not in (b"RIFF", b"RF64", b"BW64"):
            what = _OTHER_MAGIC.get(head[:4], "no WAV file")
            raise WavError("CORRUPT_FILE", path, f"not a RIFF file (starts with {head[:4]!r}; "
                           f"looks like {what})", "WaveSQL reads RIFF/WAVE files")
        if wave != b"WAVE":
            raise WavError("CORRUPT_FILE", path, f"RIFF file of form {wave!r}, not 'WAVE'")
        fmt = data = ds64 = None
        seen, pos = [], 12
        while pos + 8 <= size:
            f.seek(pos)
            cid, csize = struct.unpack("<4sI", f.read(8))
            seen.append(cid.decode("latin-1"))
            body = pos + 8
            if cid == b"ds64" and riff != b"RIFF":
                ds64 = _parse_ds64(path, f.read(min(csize, 1 << 16)))
            elif csize == U32_MAX and ds64 is not None and cid != b"data":
                csize = ds64["table"].get(cid, csize)  # RF64: big chunks sized in the table
            if cid == b"fmt ":
                if body + csize > size:
                    raise WavError("CORRUPT_FILE", path, f"fmt chunk declares {csize} bytes "
                                   f"but the file ends {size - body} bytes after its header")
                fmt = f.read(min(csize, 1 << 16))
            elif cid == b"data" and data is None:
                csize, open_ended = _data_size(path, f, riff, ds64, csize, body, size)
                data = (body, csize, open_ended)
                if fmt is not None or open_ended:
                    break
            pos = body + csize + (csize & 1)
        if fmt is None:
            raise WavError("CORRUPT_FILE", path, f"no 'fmt ' chunk (chunks found: {seen})")
        if data is None:
            raise WavError("CORRUPT_FILE", path, f"no 'data' chunk (chunks found: {seen})",
                           "the file may have been cut off before any samples were written")
    sample_format, channels, rate, bits, block_align = _parse_fmt(path, fmt)
    data_offset, data_bytes, open_ended = data
    present = max(0, size - data_offset)
    declared_frames = data_bytes // block_align
    frames = min(declared_frames, present // block_align)
    truncated = frames < declared_frames
    if truncated and strict:
        raise WavError("TRUNCATED_FILE", path,
                       f"data chunk declares {declared_frames} frames ({data_bytes} bytes) but "
                       f"only {frames} whole frames ({present} bytes) are present",
                       "the recording was probably interrupted; read it with strict=False to "
                       f"use the {frames} frames present")
    return WavInfo(path, rate, channels, sample_format, bits, block_align, data_offset, frames,
                   declared_frames, truncated, open_ended)


def _parse_ds64(path: str, body: bytes) -> dict:
    """RF64/BW64 ``ds64``: 64-bit RIFF and data sizes plus a table of other big chunks."""
    if len(body) < 28:
        raise WavError("CORRUPT_FILE", path, f"ds64 chunk is {len(body)} bytes, needs 28")
    _, data_size, _, n_table = struct.unpack_from("<QQQI", body)
    table = dict(struct.unpack_from("<4sQ", body, 28 + 12 * i)
                 for i in range(min(n_table, (len(body) - 28) // 12)))
    return {"data_size": data_size, "table": table}


def _data_size(path, f, riff, ds64, csize, body, size) -> tuple[int, bool]:
    """The data chunk's byte size and whether it was unknown (then: the rest of the file)."""
    if riff != b"RIFF" and csize == U32_MAX:
        if ds64 is None:
            raise WavError("CORRUPT_FILE", path, f"{riff.decode()} file has no ds64 chunk to "
                           "give the size of its data chunk")
        return ds64["data_size"], False
    if csize == 0 and body < size:
        # Size 0 is a streaming recorder's unpatched header if sample bytes follow, and an
        # empty chunk if another chunk (ASCII id, size within the file) follows.
        f.seek(body)
        nxt = f.read(8)
        if not (len(nxt) == 8 and re.fullmatch(rb"[A-Za-z0-9 _\-]{4}", nxt[:4])
                and body + 8 + int.from_bytes(nxt[4:], "little") <= size):
            csize = U32_MAX
    return (size - body, True) if csize == U32_MAX else (csize, False)


def _parse_fmt(path: str, fmt: bytes) -> tuple[str, int, int, int, int]:
    if len(fmt) < 16:
        raise WavError("CORRUPT_FILE", path, f"fmt chunk is {len(fmt)} bytes, needs 16")
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if channels == 0 or rate == 0:
        raise WavError("CORRUPT_FILE", path, f"fmt chunk declares {channels} channels at "
                       f"{rate} Hz")
    if tag == WAVE_FORMAT_EXTENSIBLE:
        if len(fmt) < 40:
            raise WavError("CORRUPT_FILE", path, f"EXTENSIBLE fmt chunk is {len(fmt)} bytes, "
                           "needs 40")
        valid_bits, = struct.unpack_from("<H", fmt, 18)
        guid = fmt[24:40]
        if guid[2:] not in (GUID_TAIL, AMBISONIC_GUID_TAIL):
            raise WavError("UNSUPPORTED_ENCODING", path, "EXTENSIBLE sub-format GUID "
                           f"{guid.hex()} is not PCM or IEEE float", _CONVERT_HINT)
        if valid_bits > bits:
            raise WavError("CORRUPT_FILE", path, f"{valid_bits} valid bits in a {bits}-bit "
                           "container")
        tag, = struct.unpack_from("<H", guid)
    name = _FORMAT_BY_TAG_BITS.get((tag, bits))
    if name is None:
        what = _TAG_NAMES.get(tag, "unknown")
        detail = f", {bits}-bit" if tag in (1, 3) else ""
        raise WavError("UNSUPPORTED_ENCODING", path,
                       f"format tag 0x{tag:04X} ({what}{detail}) is not supported; WaveSQL "
                       "reads 8/16/24/32-bit PCM and 32/64-bit IEEE float", _CONVERT_HINT)
    if block_align != channels * bits // 8:
        raise WavError("CORRUPT_FILE", path, f"block_align is {block_align} bytes but "
                       f"{channels} channels of {bits} bits need {channels * bits // 8}")
    return name, channels, rate, bits, block_align
