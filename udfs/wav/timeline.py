"""A directory of WAV files on one sample timeline (:func:`plan_timeline`).

Also the checks of a file against its catalog declaration (:func:`check_declared`) and the
start times in file names (:func:`parse_file_timestamp`).

Documented choices
------------------
- **File order** (:func:`plan_timeline`): paths sort by *natural* name order on the whole path
  (digit runs compare as numbers, so ``rec_2.wav`` precedes ``rec_10.wav``; ties by the plain
  string), so a later file never takes an earlier one's place. The same file listed twice is
  placed once. In ``timestamped`` mode files are ordered by the start time in their names.

Errors (:class:`~.header.WavError`): ``RATE_MISMATCH``, ``CHANNEL_MISMATCH``,
``OVERLAPPING_FILES``, ``INVALID_FILE_TIMESTAMP``, and :func:`~.header.read_info`'s.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from typing import Iterable

from wavesql import storage

from .header import WavError, WavInfo, read_info

__all__ = ["FilePlacement", "check_declared", "parse_file_timestamp", "natural_key",
           "plan_timeline"]


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


def natural_key(path: str):
    """Sort key of *natural* name order: digit runs compare as numbers, ties by the plain
    string (``rec_2.wav`` before ``rec_10.wav``).

    >>> sorted(["r_10.wav", "r_2.wav"], key=natural_key)
    ['r_2.wav', 'r_10.wav']
    """
    parts = re.split(r"([0-9]+)", path)
    return [int(p) if i % 2 else p for i, p in enumerate(parts)], path


def _same_file(path: str) -> str:
    """A key equal for two names of one file (symbolic links; an object store's location
    is its own key)."""
    return path if storage.is_remote(path) else os.path.realpath(path)


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
    >>> from wavesql.udfs.wav import write_wav
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
    ordered = sorted(unique.values(), key=natural_key)
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
    stamped.sort(key=lambda s: (s[0], natural_key(s[1])))
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
