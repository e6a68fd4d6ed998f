"""Argument checks and stream bookkeeping shared by the kernel families.

Every check raises :class:`~wavesql.udfs.sigseg.SignalError` with a stable code, so a bad
argument never surfaces as an exception from inside numpy or scipy.
"""

from __future__ import annotations

import numbers
from decimal import Decimal
from typing import Any, Sequence

import numpy as np

from ..sigseg import SigSeg, SignalError
from .values import Spectrum


def as_seg(value: Any, fname: str, pname: str = "seg") -> SigSeg:
    """``value`` if it is a SigSeg, else ``TYPE_ERROR``."""
    if not isinstance(value, SigSeg):
        raise SignalError("TYPE_ERROR",
                          f"{fname}: {pname} must be a signal segment, got {type(value).__name__}")
    return value


def as_spectrum(value: Any, fname: str, pname: str = "spectrum") -> Spectrum:
    """``value`` if it is a Spectrum, else ``TYPE_ERROR``."""
    if not isinstance(value, Spectrum):
        hint = "compute one with fft(seg)" if isinstance(value, SigSeg) else None
        raise SignalError("TYPE_ERROR",
                          f"{fname}: {pname} must be a spectrum, got {type(value).__name__}",
                          hint=hint)
    return value


def samples64(seg: SigSeg) -> np.ndarray:
    """The samples as float64 (Spark ships float32; kernels compute in double)."""
    return np.asarray(seg.samples, dtype=np.float64)


def is_number(value: Any) -> bool:
    """A real number (Spark decimals included); not a bool, though bool subclasses int."""
    return isinstance(value, (numbers.Real, Decimal)) and not isinstance(value, (bool, np.bool_))


def lit_int(value: Any, fname: str, pname: str, lo: int | None = None,
            hi: int | None = None) -> int:
    """An integer argument in ``[lo, hi]`` (``TYPE_ERROR`` / ``INVALID_ARGUMENT``)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise SignalError("TYPE_ERROR",
                          f"{fname}: {pname} must be an integer, got {value!r}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        span = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must be in {span}, got {v}")
    return v


def lit_float(value: Any, fname: str, pname: str, positive: bool = False,
              nonnegative: bool = False) -> float:
    """A finite number (optionally > 0 or >= 0) as float."""
    if not is_number(value):
        raise SignalError("TYPE_ERROR", f"{fname}: {pname} must be a number, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must be finite, got {v}")
    if positive and not v > 0:
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must be positive, got {v:g}")
    if nonnegative and v < 0:
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must be >= 0, got {v:g}")
    return v


def lit_choice(value: Any, fname: str, pname: str, choices: Sequence[str]) -> str:
    """A string argument, one of ``choices`` (case-insensitive)."""
    if not isinstance(value, str):
        raise SignalError("TYPE_ERROR", f"{fname}: {pname} must be a string, got {value!r}")
    v = value.strip().lower()
    if v not in choices:
        raise SignalError("INVALID_ARGUMENT",
                          f"{fname}: {pname} must be one of {', '.join(map(repr, choices))}, "
                          f"got {value!r}")
    return v


def lit_array(value: Any, fname: str, pname: str) -> np.ndarray:
    """A non-empty 1-D array of finite numbers, as float64."""
    if isinstance(value, (str, bytes)) or is_number(value) or value is None:
        raise SignalError("TYPE_ERROR",
                          f"{fname}: {pname} must be an array of numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SignalError("TYPE_ERROR",
                          f"{fname}: {pname} must be an array of numbers, got {value!r}") from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must be a non-empty 1-D array")
    if not np.all(np.isfinite(arr)):
        raise SignalError("INVALID_ARGUMENT", f"{fname}: {pname} must hold finite numbers")
    return arr


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints (exact for any size; b > 0)."""
    return -((-a) // b)


def new_stream_state(**extra) -> dict:
    """A fresh stream state: no rate and no position yet, plus ``extra`` entries."""
    return {"rate": None, "end": None, **extra}


def stream_step(state: dict, seg: SigSeg, fname: str) -> str:
    """Where ``seg`` falls relative to the stream so far.

    Returns ``"start"`` (first segment), ``"next"`` (starts where the previous ended),
    ``"gap"`` (starts later) or ``"empty"`` (no samples: stateful kernels pass it through
    without touching their state, wherever it starts). Raises ``RATE_MISMATCH`` if the
    rate changed and ``SEGMENT_ORDER`` if it overlaps or precedes the previous segment.
    Does not update ``state``; callers store ``rate`` and ``end`` after processing.
    """
    if state["rate"] is not None and seg.rate != state["rate"]:
        raise SignalError("RATE_MISMATCH",
                          f"{fname}: the input rate changed from {state['rate']:g} Hz to "
                          f"{seg.rate:g} Hz mid-stream", hint="resample() to one rate first")
    if seg.width == 0:
        return "empty"
    end = state["end"]
    if end is None:
        return "start"
    if seg.start < end:
        raise SignalError("SEGMENT_ORDER",
                          f"{fname}: segment [{seg.start}, {seg.end}) overlaps or precedes the "
                          f"previous one, which ended at {end}",
                          hint="stateful functions need their input in sample order")
    return "next" if seg.start == end else "gap"
