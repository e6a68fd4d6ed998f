"""The signal segment (SigSeg): a run of isochronous samples plus its timebase.

A SigSeg is ``(start, rate, samples)``: ``start`` is the absolute sample number of the first
sample, so sample ``start + i`` is at ``epoch + (start + i) / rate`` seconds. There are no
per-sample timestamps (XStream: dropping them was worth 1.6-1.8x). In Spark a SigSeg travels
as ``struct<start: bigint, rate: double, samples: array<float>>`` (see
:data:`SIGSEG_SPARK_TYPE`); in kernels it is this class over a numpy array.

Times are converted to sample numbers with one rule, used everywhere
(:func:`sample_at`): the sample *at or after* a time, i.e. ``ceil((t - epoch) * rate)``
computed in integer microseconds, so a range ``[t0, t1)`` covers samples
``sample_at(t0) .. sample_at(t1) - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: How a SigSeg column looks in Spark.
SIGSEG_SPARK_TYPE = "struct<start:bigint,rate:double,samples:array<float>>"


class SignalError(ValueError):
    """A signal operation was asked something impossible (kernels raise this; the planner
    turns it into a WaveSQLError with the query position)."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        # The code travels in the text too: an error raised in a Spark worker reaches the
        # driver only as traceback text, from which ``wavesql.spark_errors`` recovers the code.
        super().__init__(f"{message} [{code}]")
        self.code = code
        self.message = message
        self.hint = hint

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.hint))


@dataclass(frozen=True, eq=False)
class SigSeg:
    """A signal segment.

    Parameters
    ----------
    start : int
        Absolute sample number of ``samples[0]``.
    rate : float
        Samples per second (> 0).
    samples : numpy.ndarray
        One-dimensional, contiguous.

    Examples
    --------
    >>> s = SigSeg(100, 10.0, np.arange(5, dtype=np.float32))
    >>> s.width, s.end
    (5, 105)
    >>> s.subseg(102, 2).samples.tolist()
    [2.0, 3.0]
    """

    start: int
    rate: float
    samples: np.ndarray

    def __post_init__(self):
        if not (self.rate > 0 and np.isfinite(self.rate)):
            raise SignalError("INVALID_RATE", f"segment rate must be positive, got {self.rate}")
        if self.samples.ndim != 1:
            raise SignalError("TYPE_ERROR", "segment samples must be one-dimensional")

    @property
    def width(self) -> int:
        """Number of samples."""
        return int(self.samples.shape[0])

    @property
    def end(self) -> int:
        """Sample number one past the last sample (exclusive)."""
        return self.start + self.width

    def start_time_us(self, epoch_us: int = 0) -> int:
        """Time of the first sample, in integer microseconds since the Unix epoch."""
        return epoch_us + time_of(self.start, self.rate)

    def end_time_us(self, epoch_us: int = 0) -> int:
        """Time just past the last sample (the next segment's start time)."""
        return epoch_us + time_of(self.end, self.rate)

    def subseg(self, start: int, length: int) -> "SigSeg":
        """Samples ``start .. start+length-1`` (absolute numbers); must lie inside."""
        if length < 0 or start < self.start or start + length > self.end:
            raise SignalError(
                "TYPE_ERROR",
                f"subseg [{start}, {start + length}) is outside segment [{self.start}, {self.end})")
        i = start - self.start
        return SigSeg(start, self.rate, self.samples[i:i + length])

    def append(self, other: "SigSeg") -> "SigSeg":
        """This segment followed by ``other``; they must be adjacent and share a rate."""
        if other.rate != self.rate:
            raise SignalError("TYPE_ERROR",
                              f"cannot append segments of different rates ({self.rate:g} Hz and "
                              f"{other.rate:g} Hz)", hint="resample one of them first")
        if other.start != self.end:
            what = "overlap" if other.start < self.end else "leave a gap"
            raise SignalError("TYPE_ERROR",
                              f"cannot append non-adjacent segments: [{self.start}, {self.end}) "
                              f"and [{other.start}, {other.end}) {what}",
                              hint="use degap() to fill gaps explicitly")
        return SigSeg(self.start, self.rate, np.concatenate([self.samples, other.samples]))


def time_of(sample: int, rate: float) -> int:
    """Microseconds from the epoch to sample number ``sample``, rounded *down*.

    Rounding down makes the two rules inverse: ``sample_at(time_of(n)) == n`` for every
    rate up to 1 MHz, so a range written with ``start_time``/``end_time`` (a SYNC range, a
    filter on time) selects exactly the samples of the segment it came from. (Rounding to
    nearest would move every time rounded up to the *next* sample at 48 kHz.)
    """
    if float(rate).is_integer():
        return (sample * 1_000_000) // int(rate)
    return int(np.floor(sample * 1_000_000 / rate + 1e-9))


def sample_at(time_us: int, rate: float, epoch_us: int = 0) -> int:
    """The first sample at or after ``time_us`` -- WaveSQL's one time-to-sample rule.

    Computed in integers where the rate is integral (all audio rates) so that no float can
    blur two neighbouring samples.
    """
    offset = time_us - epoch_us
    if float(rate).is_integer():
        r = int(rate)
        return -((-offset * r) // 1_000_000)  # ceil(offset * r / 1e6) exactly
    return int(np.ceil(offset * rate / 1_000_000 - 1e-9))


@dataclass(frozen=True, eq=False)
class SegBlock:
    """``k`` equal-width segments of one rate as a ``(k, n)`` matrix (row i starts at
    ``starts[i]``): the vectorised form the executor hands to ``batch`` kernels, usually a
    view of the file buffer (tumbling windows by reshape, sliding ones by stride tricks)."""

    starts: np.ndarray
    rate: float
    data: np.ndarray
    # Per-block results several batch kernels share (row means for seg_avg and seg_std),
    # so a program computing both reads the samples once for them.
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def k(self) -> int:
        return int(self.starts.shape[0])

    @property
    def width(self) -> int:
        return int(self.data.shape[1]) if self.data.ndim == 2 else 0
