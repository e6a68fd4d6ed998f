"""WAV files as blocks of samples: header parsing, fast decoding, writing, file timelines.

This is the sample reader under the WAV data source (no Spark import here). It turns a
RIFF/WAVE (or RF64/BW64) file into ``(start_sample, samples[channels, n])`` blocks that become
SigSegs (:mod:`wavesql.udfs.sigseg`), and places a directory of files on one sample timeline.

Speed is the point: a block is read with one ``readinto`` straight into its output array when
the file already holds float32 in the wanted layout, and otherwise through a small reused raw
buffer (cache-sized) converted with one numpy ufunc pass per channel. No Python loop runs per
sample, and the only copy besides the kernel's read is the conversion to float.

Documented choices
------------------
- **Scaling** of integer PCM to ``[-1, 1)``: uint8 ``(x - 128) / 128``, int16 ``x / 2**15``,
  int24 ``x / 2**23`` (sign-extended), int32 ``x / 2**31`` (codes within 64 of full scale
  round to 1.0 in float32; ``dtype=np.float64`` keeps all 32 bits); floats pass through.
  EXTENSIBLE files with fewer valid bits than the container (20 in 24) use the container's
  scale: their samples are left-justified in it.
- **Sizes we do not trust**: the RIFF size and the ``fmt`` byte rate are ignored (writers get
  them wrong; the file length and ``block_align`` are what matter). A data chunk size of
  ``0xFFFFFFFF``, or of 0 with bytes after the chunk header that are not another chunk, is
  what streaming recorders leave when they never patched the header: the data is taken to run
  to the end of the file (``open_ended=True``). RF64/BW64 take the 64-bit sizes from ``ds64``.
- **Truncation**: if the data chunk declares more whole frames than the file holds,
  ``read_info`` reports ``truncated=True`` with ``frames`` = the whole frames present, and
  raises ``TRUNCATED_FILE`` instead with ``strict=True``. A partial last frame is never read.
- **File order** (:func:`plan_timeline`): paths sort by *natural* name order on the whole path
  (digit runs compare as numbers, so ``rec_2.wav`` precedes ``rec_10.wav``; ties by the plain
  string), so a later file never takes an earlier one's place. The same file listed twice is
  placed once. In ``timestamped`` mode files are ordered by the start time in their names.

Error codes (:class:`WavError`): ``CORRUPT_FILE``, ``TRUNCATED_FILE``,
``UNSUPPORTED_ENCODING``, ``RATE_MISMATCH``, ``CHANNEL_MISMATCH``, ``OVERLAPPING_FILES``,
``INVALID_FILE_TIMESTAMP``. Missing files raise the usual :class:`OSError`.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from wavesql import storage

__all__ = ["WavError", "WavInfo", "FilePlacement", "read_info", "read_frames", "iter_segments",
           "write_wav", "check_declared", "plan_timeline", "parse_file_timestamp",
           "SAMPLE_FORMATS"]

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

# Multiplier from a stored integer to [-1, 1). int24 is widened into the top 3 bytes of an
# int32 (see _Decoder), so it shares int32's scale.
_SCALE = {"int16": 2.0 ** -15, "int24": 2.0 ** -31, "int32": 2.0 ** -31}

_WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# The sub-format GUID is the format tag followed by these 14 bytes (KSDATAFORMAT_SUBTYPE_*);
# the Ambisonic B-format GUIDs store the same PCM/float samples.
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
_AMBISONIC_GUID_TAIL = b"\x00\x00\x21\x07\xd3\x11\x86\x44\xc8\xc1\xca\x00\x00\x00"
_TAG_NAMES = {
    0x0001: "PCM", 0x0002: "Microsoft ADPCM", 0x0003: "IEEE float", 0x0006: "A-law",
    0x0007: "mu-law", 0x0011: "IMA ADPCM", 0x0031: "GSM 6.10", 0x0050: "MPEG",
    0x0055: "MPEG Layer 3", 0x00FF: "AAC", 0x0161: "Windows Media Audio",
    0x2000: "Dolby AC-3", 0xF1AC: "FLAC", _WAVE_FORMAT_EXTENSIBLE: "EXTENSIBLE",
}
# Magic numbers of other audio containers, so that "not a RIFF file" can say what it is.
_OTHER_MAGIC = {b"FORM": "an AIFF file", b"fLaC": "a FLAC file", b"OggS": "an Ogg file",
                b"ID3\x03": "an MP3 file", b"ID3\x04": "an MP3 file", b"caff": "a CAF file"}
_CONVERT_HINT = "convert it to PCM or float, e.g. `ffmpeg -i in.wav -c:a pcm_f32le out.wav`"

# Raw bytes decoded per step: small enough to stay in L2 between the read and the per-channel
# conversion passes, big enough that the syscall cost is noise.
_CHUNK_BYTES = 1 << 20
_U32_MAX = 0xFFFFFFFF


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


@dataclass(frozen=True)
class FilePlacement:
    """One file on a timeline: its frames are samples ``start_sample .. end_sample - 1``."""

    path: str
    info: WavInfo
    start_sample: int

    @property
    def end_sample(self) -> int:
        """One past the last sample of this file."""
        return self.start_sample + self.info.frames


# ---------------------------------------------------------------------------------- reading
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
            elif csize == _U32_MAX and ds64 is not None and cid != b"data":
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
    if riff != b"RIFF" and csize == _U32_MAX:
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
            csize = _U32_MAX
    return (size - body, True) if csize == _U32_MAX else (csize, False)


def _parse_fmt(path: str, fmt: bytes) -> tuple[str, int, int, int, int]:
    if len(fmt) < 16:
        raise WavError("CORRUPT_FILE", path, f"fmt chunk is {len(fmt)} bytes, needs 16")
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if channels == 0 or rate == 0:
        raise WavError("CORRUPT_FILE", path, f"fmt chunk declares {channels} channels at "
                       f"{rate} Hz")
    if tag == _WAVE_FORMAT_EXTENSIBLE:
        if len(fmt) < 40:
            raise WavError("CORRUPT_FILE", path, f"EXTENSIBLE fmt chunk is {len(fmt)} bytes, "
                           "needs 40")
        valid_bits, = struct.unpack_from("<H", fmt, 18)
        guid = fmt[24:40]
        if guid[2:] not in (_GUID_TAIL, _AMBISONIC_GUID_TAIL):
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


class _Decoder:
    """Reads frame ranges of one file into float arrays, reusing its raw buffers."""

    def __init__(self, info: WavInfo, channels: Sequence[int], dtype):
        self.info, self.channels, self.dtype = info, list(channels), np.dtype(dtype)
        self.all_channels = self.channels == list(range(info.channels))
        self.chunk_frames = max(1, _CHUNK_BYTES // info.block_align)
        self.raw_dtype = SAMPLE_FORMATS[info.sample_format][2]
        # (`is not None` first: np.dtype(None) means float64, so None == float64 is True.)
        self.direct = (self.raw_dtype is not None and self.all_channels
                       and self.raw_dtype == self.dtype)
        self.raw = self.pad = self.pos = None  # pos: file offset after the last read
        if info.sample_format == "int8u":  # a 256-entry table beats subtract-then-scale
            self.lut = ((np.arange(256) - 128) / 128).astype(self.dtype)

    def read(self, f, first: int, out: np.ndarray) -> None:
        """Frames ``first .. first + len(out) - 1`` into ``out`` of shape (n, channels)."""
        ba, n = self.info.block_align, out.shape[0]
        offset = self.info.data_offset + first * ba
        if self.direct and out.flags.c_contiguous:
            # Stored bytes are already the output: the kernel copies straight into it.
            self._fill(f, offset, memoryview(out.reshape(-1)).cast("B"))
            return
        for i in range(0, n, self.chunk_frames):
            m = min(self.chunk_frames, n - i)
            self._convert(self._read_raw(f, offset + i * ba, m), out[i:i + m])

    def _fill(self, f, offset: int, buf: memoryview) -> None:
        """Fill ``buf`` from byte ``offset``; the file shrinking underneath is an error."""
        if offset != self.pos:  # blocks are mostly sequential: skip the lseek syscall
            f.seek(offset)
        done, total, self.pos = 0, len(buf), None
        while done < total:
            got = f.readinto(buf[done:])
            if not got:
                raise WavError("TRUNCATED_FILE", self.info.path, f"file ended at byte "
                               f"{offset + done} while reading {total} bytes from byte "
                               f"{offset}", "the file shrank after its header was read")
            done += got
        self.pos = offset + total

    def _read_raw(self, f, offset: int, m: int) -> np.ndarray:
        nch, nbytes = self.info.channels, m * self.info.block_align
        if self.raw is None:  # one spare byte in front, for the int24 view below
            self.raw = np.empty(self.chunk_frames * self.info.block_align + 1, np.uint8)
        self._fill(f, offset, memoryview(self.raw)[1:1 + nbytes])
        if self.raw_dtype is not None:
            return self.raw[1:1 + nbytes].view(self.raw_dtype).reshape(m, nch)
        # int24: an int32 view starting one byte before each sample (stride 3) holds the
        # sample in its top 3 bytes -- sign included -- and a neighbour's byte at the bottom,
        # which the mask clears. 20x faster than copying 3-byte groups into a padded array.
        # The value is the sample times 2**8, hence _SCALE["int24"] = 2**-31.
        if self.pad is None:
            self.pad = np.empty(self.chunk_frames * nch, np.int32)
        view = np.ndarray((m, nch), "<i4", self.raw, 0, (3 * nch, 3))
        return np.bitwise_and(view, -256, out=self.pad[:m * nch].reshape(m, nch))

    def _convert(self, raw: np.ndarray, out: np.ndarray) -> None:
        if self.all_channels and out.flags.c_contiguous:
            pairs = [(raw, out)]  # frame-major output: one ufunc call over the block
        else:
            pairs = [(raw[:, c], out[:, k]) for k, c in enumerate(self.channels)]
        fmt = self.info.sample_format
        for src, dst in pairs:
            if fmt == "int8u":
                dst[...] = self.lut[src]
            elif fmt in _SCALE:
                np.multiply(src, _SCALE[fmt], out=dst, dtype=self.dtype, casting="unsafe")
            else:
                np.copyto(dst, src, casting="unsafe")



def _channel_list(info: WavInfo, channels) -> list[int]:
    if channels is None:
        return list(range(info.channels))
    chans = [int(c) for c in channels]
    if not chans or any(not 0 <= c < info.channels for c in chans):
        raise WavError("CHANNEL_MISMATCH", info.path, f"channels {chans} requested but the "
                       f"file has {info.channels} (numbered 0..{info.channels - 1})")
    return chans


def _same_file(path: str) -> str:
    """A key equal for two names of one file (symbolic links; an object store's location
    is its own key)."""
    return path if storage.is_remote(path) else os.path.realpath(path)


def _open(info: WavInfo, first: int, count: int):
    # Unbuffered: readinto then goes straight from the page cache (or, for an object
    # store's file, one ranged GET per block) into our array.
    f = storage.open_input(info.path)
    if hasattr(os, "posix_fadvise") and hasattr(f, "fileno") and not storage.is_remote(
            info.path):  # doubles kernel read-ahead on cold files
        os.posix_fadvise(f.fileno(), info.data_offset + first * info.block_align,
                         count * info.block_align, os.POSIX_FADV_SEQUENTIAL)
    return f


def read_frames(info, start_frame: int = 0, count: int | None = None, *,
                channels: Sequence[int] | None = None, dtype=np.float32) -> np.ndarray:
    """Read frames as floats in ``[-1, 1)`` (integer PCM) or as stored (float files).

    Parameters
    ----------
    info : WavInfo or path
        A header from :func:`read_info`, or a path to read it from.
    start_frame : int
        First frame (0-based within the file).
    count : int, optional
        Frames to read; default all up to ``info.frames``.
    channels : sequence of int, optional
        Channel indices to keep, in this order; default all.
    dtype : numpy dtype
        ``np.float32`` (default) or ``np.float64`` to keep 32-bit PCM / float64 precision.

    Returns
    -------
    numpy.ndarray
        Shape ``(count, n_channels)``, C-contiguous.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.array([[-32768, 0], [16384, 32767]], np.int16), 8000)
    >>> read_frames(read_info(p)).tolist()
    [[-1.0, 0.0], [0.5, 0.999969482421875]]
    """
    info = info if isinstance(info, WavInfo) else read_info(info)
    count = info.frames - start_frame if count is None else count
    if start_frame < 0 or count < 0 or start_frame + count > info.frames:
        raise ValueError(f"{info.path}: frames [{start_frame}, {start_frame + count}) are "
                         f"outside the file's {info.frames} frames")
    decoder = _Decoder(info, _channel_list(info, channels), dtype)
    out = np.empty((count, len(decoder.channels)), dtype)
    if count:
        with _open(info, start_frame, count) as f:
            decoder.read(f, start_frame, out)
    return out


def iter_segments(source, segment: int, *, start_sample: int = 0,
                  channels: Sequence[int] | None = None, dtype=np.float32,
                  start_frame: int = 0, stop_frame: int | None = None, align: bool = False,
                  strict: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """Yield the file as blocks of ``segment`` frames, channel-major, ready for SigSegs.

    Parameters
    ----------
    source : str, os.PathLike or WavInfo
    segment : int
        Frames per block (> 0); the last block may be shorter.
    start_sample : int
        Sample number of the file's frame 0 (from :func:`plan_timeline`).
    channels : sequence of int, optional
        Channel indices to yield, in this order; default all.
    dtype : numpy dtype
        ``np.float32`` (default) or ``np.float64``.
    start_frame, stop_frame : int, optional
        Read only frames ``[start_frame, stop_frame)`` of the file (to split one big file
        across tasks); default the whole file.
    align : bool
        Cut at multiples of ``segment`` in absolute sample numbers (the first block is then
        shorter), so blocks line up whatever file or split they come from.
    strict : bool
        Raise ``TRUNCATED_FILE`` for a truncated file instead of reading the frames present.

    Returns
    -------
    iterator of (int, numpy.ndarray)
        ``start_sample + frame offset`` of the block's first frame, and a fresh C-contiguous
        array of shape ``(len(channels), n)``: each row is one channel's samples.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.arange(10, dtype=np.int16) * 4096, 8000)
    >>> [(s, a.shape) for s, a in iter_segments(p, 4, start_sample=100)]
    [(100, (1, 4)), (104, (1, 4)), (108, (1, 2))]
    """
    if segment <= 0:
        raise ValueError(f"segment must be a positive number of frames, got {segment}")
    info = source if isinstance(source, WavInfo) else read_info(source, strict=strict)
    if strict and info.truncated:
        info = read_info(info.path, strict=True)  # raises the TRUNCATED_FILE error
    stop = info.frames if stop_frame is None else min(stop_frame, info.frames)
    if start_frame < 0 or start_frame > stop:
        raise ValueError(f"{info.path}: start_frame {start_frame} is outside [0, {stop}]")
    decoder = _Decoder(info, _channel_list(info, channels), dtype)
    # Checks above run at call time; the generator below only reads.
    return _iter_blocks(decoder, segment, start_sample, start_frame, stop, align)


def _iter_blocks(decoder, segment, start_sample, start_frame, stop, align):
    info, dtype, first = decoder.info, decoder.dtype, start_frame
    if first == stop:
        return
    with _open(info, start_frame, stop - start_frame) as f:
        while first < stop:
            n = segment
            if align and first == start_frame:
                n = segment - (start_sample + first) % segment
            n = min(n, stop - first)
            out = np.empty((len(decoder.channels), n), dtype)
            decoder.read(f, first, out.T)  # out.T is the (n, channels) frame view of `out`
            yield start_sample + first, out
            first += n


# ---------------------------------------------------------------------------------- writing
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
    if not 0 < rate <= _U32_MAX:
        raise ValueError(f"rate must be a positive 32-bit integer, got {rate}")
    tag, bits, _ = SAMPLE_FORMATS[sample_format]
    if tag == 1 and a.size:  # checked up front so that no half-written file is left
        lo, hi = _code_range(sample_format)
        if a.dtype.kind == "f" and np.isnan(a).any():
            raise ValueError(f"cannot write NaN as {sample_format} PCM")
        if a.dtype.kind != "f" and (a.min() < lo or a.max() > hi):
            raise ValueError(f"integer sample codes for {sample_format} must lie in "
                             f"[{lo}, {hi}], got [{a.min()}, {a.max()}]")
    frames, nch = a.shape
    block_align = nch * bits // 8
    data_bytes = frames * block_align
    extensible = nch > 2 or bits > 16
    fmt = struct.pack("<HHIIHH", _WAVE_FORMAT_EXTENSIBLE if extensible else tag, nch, rate,
                      min(rate * block_align, _U32_MAX), block_align, bits)
    if extensible:
        mask = {1: 0x4, 2: 0x3}.get(nch, 0)
        fmt += struct.pack("<HHIH", 22, bits, mask, tag) + _GUID_TAIL
    chunks = [(b"fmt ", fmt)]
    if tag == 3:
        chunks.append((b"fact", struct.pack("<I", min(frames, _U32_MAX))))
    pad = data_bytes & 1
    riff_size = 4 + sum(8 + len(body) for _, body in chunks) + 8 + data_bytes + pad
    rf64 = riff_size > _U32_MAX if rf64 is None else rf64
    if rf64:
        ds64 = struct.pack("<QQQI", riff_size + 36, data_bytes, frames, 0)
        head = b"RF64" + struct.pack("<I", _U32_MAX) + b"WAVE" + b"ds64"
        head += struct.pack("<I", len(ds64)) + ds64
    else:
        head = b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
    for cid, body in chunks:
        head += cid + struct.pack("<I", len(body)) + body
    head += b"data" + struct.pack("<I", _U32_MAX if rf64 else data_bytes)
    step = max(1, (16 << 20) // max(1, block_align))  # bounds the temporary copies
    with open(path, "wb") as f:
        f.write(head)
        for i in range(0, frames, step):
            f.write(memoryview(_encode(a[i:i + step], sample_format)).cast("B"))
        f.write(b"\0" * pad)


def _code_range(sample_format: str) -> tuple[int, int]:
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
        codes = np.clip(codes, *_code_range(sample_format))
    if sample_format == "int24":  # low 3 bytes of each little-endian int32
        return np.ascontiguousarray(codes.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3])
    return np.ascontiguousarray(codes, dtype=stored)


# ---------------------------------------------------------------------------------- catalog checks
def check_declared(info: WavInfo, expected_rate, expected_channels: int | None = None, *,
                   signal: str | None = None) -> None:
    """Check a file against what the catalog declares for its signal.

    Parameters
    ----------
    info : WavInfo
    expected_rate : int or float
        The signal's declared ``RATE`` in Hz.
    expected_channels : int, optional
        Number of channel columns declared (not checked if None).
    signal : str, optional
        The signal's name, for the message.

    Raises
    ------
    WavError
        ``RATE_MISMATCH`` or ``CHANNEL_MISMATCH``, naming the file, declaration and truth.

    Examples
    --------
    >>> info = WavInfo("a.wav", 44100, 1, "int16", 16, 2, 44, 10, 10, False)
    >>> try:
    ...     check_declared(info, 48000, signal="mic")
    ... except WavError as e:
    ...     print(e.code, "|", e.message)
    RATE_MISMATCH | file is sampled at 44100 Hz but signal mic is declared RATE 48000 HZ
    """
    who = f"signal {signal}" if signal else "the catalog"
    if float(expected_rate) != info.rate:
        raise WavError("RATE_MISMATCH", info.path,
                       f"file is sampled at {info.rate} Hz but {who} is declared RATE "
                       f"{expected_rate:g} HZ", f"resample the file or declare RATE "
                       f"{info.rate} HZ")
    if expected_channels is not None and expected_channels != info.channels:
        raise WavError("CHANNEL_MISMATCH", info.path,
                       f"file has {info.channels} channel(s) but {who} declares "
                       f"{expected_channels}", f"declare {info.channels} channel column(s) or "
                       "store the channels in separate files")


# ---------------------------------------------------------------------------------- timelines
# See parse_file_timestamp. '-' may stand in for ':', which Windows file names cannot hold.
_STAMP_RE = re.compile(
    r"(?:^|_)(?:(?P<ms>[0-9]{10,16})|(?P<Y>[0-9]{4})-?(?P<M>[0-9]{2})-?(?P<D>[0-9]{2})"
    r"[Tt](?P<h>[0-9]{2})[:\-]?(?P<m>[0-9]{2})[:\-]?(?P<s>[0-9]{2})(?:[.,](?P<f>[0-9]{1,9}))?"
    r"(?P<tz>[Zz]|[+\-][0-9]{2}(?::?[0-9]{2})?)?)$")


def parse_file_timestamp(path) -> int:
    """Start time encoded in a file name, in integer nanoseconds since the Unix epoch.

    Accepted names end, before the extension, in ``_<stamp>`` (or are just ``<stamp>``) where
    ``<stamp>`` is either Unix time in milliseconds (10-16 digits, ``rec_1700000000123.wav``)
    or an ISO 8601 date and time to the second, ``T`` between them, with an optional
    fraction (``.`` or ``,``, up to 9 digits) and zone (``Z``, ``+HH``, ``+HHMM``, ``+HH:MM``):
    extended ``2024-03-01T12:00:00.5Z``, filename-safe with ``-`` for ``:``
    ``2024-03-01T12-00-00.5+0100``, or basic ``20240301T120000Z``. No zone means UTC.

    Examples
    --------
    >>> parse_file_timestamp("mic_1970-01-01T00-00-01.25Z.wav")
    1250000000
    >>> parse_file_timestamp("/data/mic_1700000000123.wav")
    1700000000123000000
    """
    m = _STAMP_RE.search(os.path.splitext(os.path.basename(os.fspath(path)))[0])
    try:
        if m is None:
            raise ValueError("no _<timestamp> at the end of the name")
        if m["ms"]:
            return int(m["ms"]) * 1_000_000
        day = _dt.date(int(m["Y"]), int(m["M"]), int(m["D"]))
        h, mi, s = int(m["h"]), int(m["m"]), int(m["s"])
        if h > 23 or mi > 59 or s > 59:
            raise ValueError(f"time {h:02}:{mi:02}:{s:02} out of range")
    except ValueError as e:
        raise WavError("INVALID_FILE_TIMESTAMP", path, f"cannot read a start time from the "
                       f"file name: {e}", "name files <prefix>_<ISO 8601 time>.wav, e.g. "
                       "mic_2024-03-01T12-00-00.5Z.wav, or <prefix>_<unix ms>.wav") from None
    tz, offset_s = m["tz"] or "Z", 0
    if tz not in "Zz":
        digits = tz[1:].replace(":", "")
        offset_s = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
        offset_s *= -1 if tz[0] == "-" else 1
    days = day.toordinal() - _dt.date(1970, 1, 1).toordinal()
    seconds = days * 86400 + h * 3600 + mi * 60 + s - offset_s
    return seconds * 1_000_000_000 + int((m["f"] or "").ljust(9, "0"))


def _natural_key(path: str):
    parts = re.split(r"([0-9]+)", path)
    return [int(p) if i % 2 else p for i, p in enumerate(parts)], path


def plan_timeline(paths: Iterable, rate, *, mode: str = "concatenate",
                  channels: int | None = None, start_sample: int = 0, epoch_us: int = 0,
                  tolerance: int = 0, strict: bool = False,
                  read=None, identity=None) -> list[FilePlacement]:
    """Place files on one sample timeline.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        The files (e.g. a glob's matches); the same file twice is placed once.
    rate : int
        The signal's declared rate; every file must match (``RATE_MISMATCH``).
    mode : {'concatenate', 'timestamped'}
        ``concatenate``: files in natural name order, each starting where the previous one
        ends (contiguous sample numbers from ``start_sample``). ``timestamped``: each file
        starts at the time in its name (:func:`parse_file_timestamp`), as sample number
        ``ceil((t - epoch) * rate)`` -- the first sample at or after ``t``, the rule of
        :func:`wavesql.udfs.sigseg.sample_at` -- ordered by that, then by name; gaps stay gaps.
    channels : int, optional
        Declared channel count; every file must have it (``CHANNEL_MISMATCH``).
    start_sample, epoch_us : int
        First sample number (``concatenate``); timebase epoch in microseconds since 1970
        (``timestamped``).
    tolerance : int
        ``timestamped`` only: a file starting within this many samples of the previous file's
        end is taken as its continuation (clock jitter in recorder file names); default 0.
    strict : bool
        Truncated files raise ``TRUNCATED_FILE`` instead of contributing the frames present.
    read : callable, optional
        ``read(path, strict=...) -> WavInfo`` in place of :func:`read_info` (the streaming
        reader passes one that caches headers by path, size and modification time).
    identity : callable, optional
        ``identity(path)`` -> a key equal for two names of the same file (default
        ``os.path.realpath``; the streaming reader passes device and inode from its stats).

    Returns
    -------
    list of FilePlacement
        In timeline order.

    Raises
    ------
    WavError
        ``OVERLAPPING_FILES`` (two files claim a sample), ``INVALID_FILE_TIMESTAMP``,
        ``RATE_MISMATCH``, ``CHANNEL_MISMATCH``, and :func:`read_info`'s errors.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> for name, n in [("r_10.wav", 3), ("r_2.wav", 5)]:
    ...     write_wav(f"{d}/{name}", np.zeros(n), 1000)
    >>> [(os.path.basename(p.path), p.start_sample, p.end_sample)
    ...  for p in plan_timeline([f"{d}/r_10.wav", f"{d}/r_2.wav"], 1000)]
    [('r_2.wav', 0, 5), ('r_10.wav', 5, 8)]
    """
    if mode not in ("concatenate", "timestamped"):
        raise ValueError(f"mode must be 'concatenate' or 'timestamped', got {mode!r}")
    unique: dict = {}
    same = identity or _same_file
    for p in map(os.fspath, paths):
        unique.setdefault(same(p), p)
    ordered = sorted(unique.values(), key=_natural_key)
    infos = [(read or read_info)(p, strict=strict) for p in ordered]
    for info in infos:
        check_declared(info, rate, channels)
    if mode == "concatenate":
        out, nxt = [], start_sample
        for p, info in zip(ordered, infos):
            out.append(FilePlacement(p, info, nxt))
            nxt += info.frames
        return out
    r, epoch_ns = int(rate), epoch_us * 1000
    # -((epoch - t) * r // 1e9) == ceil((t - epoch) * r / 1e9), in exact integers
    stamped = [(-((epoch_ns - parse_file_timestamp(p)) * r // 10 ** 9), p, info)
               for p, info in zip(ordered, infos)]
    stamped.sort(key=lambda s: (s[0], _natural_key(s[1])))
    out, last = [], None
    for start, p, info in stamped:
        if info.frames and last is not None:
            if abs(start - last.end_sample) <= tolerance:
                start = last.end_sample
            elif start < last.end_sample:
                raise WavError(
                    "OVERLAPPING_FILES", p,
                    f"file starts at sample {start} but {last.path} covers samples "
                    f"[{last.start_sample}, {last.end_sample}) at {r} Hz "
                    f"({last.end_sample - start} samples overlap)",
                    "check the timestamps in the file names; with jittery recorder clocks "
                    "pass a tolerance in samples")
        placed = FilePlacement(p, info, start)
        out.append(placed)
        if info.frames and (last is None or placed.end_sample > last.end_sample):
            last = placed
    return out
