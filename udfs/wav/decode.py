"""WAV samples as float arrays: :func:`read_frames` and :func:`iter_segments`.

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
- A file that shrinks under a read is ``TRUNCATED_FILE``; channels the file does not have
  are ``CHANNEL_MISMATCH`` (:class:`~.header.WavError`).
"""

from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from wavesql import storage

from .header import SAMPLE_FORMATS, WavError, WavInfo, read_info

__all__ = ["read_frames", "iter_segments"]

# Multiplier from a stored integer to [-1, 1). int24 is widened into the top 3 bytes of an
# int32 (see _Decoder), so it shares int32's scale.
_SCALE = {"int16": 2.0 ** -15, "int24": 2.0 ** -31, "int32": 2.0 ** -31}

# Raw bytes decoded per step: small enough to stay in L2 between the read and the per-channel
# conversion passes, big enough that the syscall cost is noise.
_CHUNK_BYTES = 1 << 20


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
    >>> from wavesql.udfs.wav import write_wav
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
    >>> from wavesql.udfs.wav import write_wav
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
