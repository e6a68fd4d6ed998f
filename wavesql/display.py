"""Pictures of signal results: ``wavesql.plot.waveform``, ``spectrogram``, ``detections``.

A signal result is rows with a SigSeg column (``struct<start, rate, samples>``). These
functions put its segments back on one time axis -- sample ``n`` at ``n / rate`` seconds,
the time ``start_time()`` reports -- and draw it with matplotlib.

They build figures with matplotlib's object API (``matplotlib.figure.Figure``), never with
pyplot: no GUI backend is picked, no global figure list grows, and the same code runs in a
notebook, a script or a Spark driver without a display. The returned :class:`SignalFigure`
shows itself in Jupyter (``_repr_png_``) and is an ordinary Figure otherwise
(``fig.savefig("wave.png")``).

Input (``data``) may be a Spark DataFrame (only ``column`` is fetched), the result of a
``%%wavesql`` cell, a list of Rows or dicts, or segments themselves. Segments are sorted by
``start``; segments that continue one another are drawn as one line, a gap in sample
numbers is left as a gap (never bridged), and samples two overlapping segments both hold
(sliding windows) are drawn once.

Examples
--------
>>> import numpy as np, wavesql                                           # doctest: +SKIP
>>> rows = ws.sql("SELECT ch1 FROM mic").collect()                        # doctest: +SKIP
>>> wavesql.plot.waveform(rows, "ch1")                                    # doctest: +SKIP
>>> wavesql.plot.detections(rows, "ch1", ws.sql("SELECT t_from, t_to FROM events"))  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

#: ``gid`` of the artists these functions draw, so code (and tests) can find them again.
WAVEFORM_GID = "wavesql-waveform"
DETECTION_GID = "wavesql-detection"
SPECTROGRAM_GID = "wavesql-spectrogram"


class SignalFigure(Figure):
    """A matplotlib Figure that Jupyter shows as a PNG without pyplot's inline backend."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


@dataclass(frozen=True)
class Run:
    """Consecutive samples of one signal: sample ``start + i`` is ``samples[i]``."""

    start: int
    rate: float
    samples: np.ndarray

    @property
    def end(self) -> int:
        return self.start + len(self.samples)

    def times(self) -> np.ndarray:
        """Seconds of each sample on the signal's time axis."""
        return (self.start + np.arange(len(self.samples))) / self.rate


# -- input ---------------------------------------------------------------------------------

def _rows(data, columns: Sequence[str] | None = None) -> list:
    """Rows out of whatever ``data`` is; a Spark DataFrame is collected (``columns`` only)."""
    frame = getattr(data, "dataframe", None)  # a %%wavesql CellResult
    if frame is not None and not hasattr(data, "collect"):
        data = frame
    if hasattr(data, "collect") and hasattr(data, "columns"):  # a Spark DataFrame
        if columns:
            data = data.select(*columns)
        return data.collect()
    if hasattr(data, "to_dict") and hasattr(data, "iterrows"):  # a pandas DataFrame
        return data.to_dict("records")
    return list(data)


def _get(obj, name: str):
    """``obj[name]`` for Rows and dicts, ``obj.name`` for objects (SigSeg)."""
    if isinstance(obj, dict):
        return obj.get(name)
    try:
        return obj[name]
    except (TypeError, KeyError, IndexError, ValueError):
        return getattr(obj, name, None)


def _is_segment(value) -> bool:
    return all(_get(value, k) is not None for k in ("start", "rate", "samples"))


def runs(data, column: str | None = None) -> list[Run]:
    """The segments of ``column`` in ``data`` as contiguous :class:`Run`\\ s, in time order.

    ``column`` may be omitted when ``data`` holds segments themselves. NULL segments are
    skipped. Raises ``ValueError`` when the segments have different rates.

    >>> from pyspark.sql import Row
    >>> rows = [Row(x=Row(start=3, rate=10.0, samples=[3.0, 4.0])),
    ...         Row(x=Row(start=0, rate=10.0, samples=[0.0, 1.0, 2.0]))]
    >>> [(r.start, r.samples.tolist()) for r in runs(rows, "x")]
    [(0, [0.0, 1.0, 2.0, 3.0, 4.0])]
    """
    if column is None:
        segments = _rows(data)
    else:
        segments = [_get(row, column) for row in _rows(data, [column])]
    segments = [s for s in segments if s is not None]
    for s in segments:
        if not _is_segment(s):
            raise TypeError(f"`{column}` does not hold signal segments (struct<start, rate, "
                            f"samples>); got {type(s).__name__}")
    rates = {float(_get(s, "rate")) for s in segments}
    if len(rates) > 1:
        raise ValueError(f"`{column}` mixes segments of rates {sorted(rates)}; plot one rate")
    rate = rates.pop() if rates else 0.0
    out: list[Run] = []
    pieces: list[np.ndarray] = []
    start = end = None
    for s in sorted(segments, key=lambda s: int(_get(s, "start"))):
        s_start = int(_get(s, "start"))
        x = np.asarray(_get(s, "samples"), dtype=np.float64)
        if end is not None and s_start <= end:  # continues (or overlaps) the current run
            pieces.append(x[end - s_start:])     # samples already drawn are not drawn again
            end = max(end, s_start + len(x))
            continue
        if pieces:
            out.append(Run(start, rate, np.concatenate(pieces)))
        start, end, pieces = s_start, s_start + len(x), [x]
    if pieces:
        out.append(Run(start, rate, np.concatenate(pieces)))
    return out


def to_seconds(value) -> float:
    """A time as seconds on the signal's axis: a timestamp (naive ones are read the way
    PySpark makes them, in the Python process's time zone) or a number of seconds."""
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, np.datetime64):
        return float(value.astype("datetime64[us]").astype(np.int64)) / 1e6
    if hasattr(value, "timestamp"):  # pandas.Timestamp
        return float(value.timestamp())
    return float(value)


def marks(events, start: str = "t_from", end: str | None = "t_to") -> list[tuple[float, float]]:
    """Detections as ``(from, to)`` seconds; an instant has ``from == to``.

    ``events`` is rows (Spark DataFrame, %%wavesql result, Rows, dicts) with fields
    ``start`` and ``end`` (``end=None`` or a missing field: instants), or plain values:
    timestamps / seconds (instants) and ``(from, to)`` pairs.
    """
    out = []
    for e in _rows(events, None):
        if isinstance(e, (dt.datetime, np.datetime64, int, float, np.number)):
            t = to_seconds(e)
            out.append((t, t))
        elif isinstance(e, (tuple, list)) and len(e) == 2 and not hasattr(e, "__fields__"):
            out.append((to_seconds(e[0]), to_seconds(e[1])))
        else:
            lo = _get(e, start)
            hi = _get(e, end) if end else None
            if lo is None:
                raise ValueError(f"a detection has no `{start}` field: {e!r}")
            out.append((to_seconds(lo), to_seconds(hi if hi is not None else lo)))
    return out


# -- figures -------------------------------------------------------------------------------

def _figure(rows: int, figsize, sharex: bool = True):
    fig = SignalFigure(figsize=figsize or (10, 2.2 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, 1, sharex=sharex, squeeze=False)[:, 0]
    return fig, list(axes)


def _draw_waveform(ax, signal: list[Run], column: str, color=None) -> None:
    if not signal:
        ax.text(0.5, 0.5, f"no samples in `{column}`", ha="center", va="center",
                transform=ax.transAxes)
    for run in signal:
        ax.plot(run.times(), run.samples, lw=0.6, color=color or "C0", gid=WAVEFORM_GID,
                label=column)
    ax.set_ylabel(column)
    ax.margins(x=0)


def waveform(data, column: str | Sequence[str], *, title: str | None = None,
             figsize: tuple[float, float] | None = None) -> SignalFigure:
    """The samples of ``column`` (or of several channel columns, one axes each) over time.

    Parameters
    ----------
    data : Spark DataFrame, %%wavesql result, rows, or segments
        Rows holding signal segments in ``column``.
    column : str or list of str
        The SigSeg column(s) to draw; channels share the time axis.

    Returns
    -------
    SignalFigure
        One line per contiguous run of samples (``gid`` :data:`WAVEFORM_GID`), x in seconds.
    """
    columns = [column] if isinstance(column, str) else list(column)
    rows = _rows(data, columns)
    fig, axes = _figure(len(columns), figsize)
    for i, (ax, col) in enumerate(zip(axes, columns)):
        _draw_waveform(ax, runs(rows, col), col, color=f"C{i}")
    axes[-1].set_xlabel("time (s)")
    if title:
        fig.suptitle(title)
    return fig


def detections(data, column: str | Sequence[str], events, *, start: str = "t_from",
               end: str | None = "t_to", title: str | None = None,
               figsize: tuple[float, float] | None = None) -> SignalFigure:
    """The waveform of ``column`` with detections marked on it.

    Parameters
    ----------
    events : rows or values
        What a detector returned: rows with ``start``/``end`` time fields (``t_from`` and
        ``t_to`` by default; ``end=None`` for instants), or timestamps, seconds, or
        ``(from, to)`` pairs. See :func:`marks`.

    Returns
    -------
    SignalFigure
        The waveform, a shaded span per range and a vertical line per instant, on every
        channel's axes (``gid`` :data:`DETECTION_GID`).
    """
    fig = waveform(data, column, title=title, figsize=figsize)
    spans = marks(events, start, end)
    for ax in fig.axes:
        drawn = []
        for lo, hi in spans:
            if hi > lo:
                drawn.append(ax.axvspan(lo, hi, color="C3", alpha=0.35, lw=0, gid=DETECTION_GID))
            else:
                drawn.append(ax.axvline(lo, color="C3", lw=1, gid=DETECTION_GID))
        if drawn:
            ax.legend([drawn[0]], [f"detections ({len(spans)})"], loc="upper right")
    return fig


def spectrogram(data, column: str, *, nperseg: int = 256, noverlap: int | None = None,
                window: str = "hann", fmax: float | None = None, db: bool = True,
                dynamic_range: float | None = 80.0, title: str | None = None, figsize: tuple[float, float] | None = None,
                cmap: str = "magma") -> SignalFigure:
    """Power spectral density of ``column`` over time (``scipy.signal.spectrogram``).

    Each contiguous run of samples gets its own short-time spectra (a gap is not bridged,
    and is left blank); runs shorter than ``nperseg`` are skipped.

    Parameters
    ----------
    nperseg, noverlap, window
        As in :func:`scipy.signal.spectrogram` (``noverlap`` defaults to ``nperseg // 8``).
    fmax : float, optional
        Top of the frequency axis, in Hz (default: Nyquist).
    db : bool
        Colour by ``10 log10(PSD)`` (dB/Hz) rather than PSD.
    dynamic_range : float, optional
        With ``db``, the colours span this many dB below the loudest cell (the data is
        not clipped): quiet noise floors otherwise take most of the colour scale.

    Returns
    -------
    SignalFigure
        One ``pcolormesh`` per run (``gid`` :data:`SPECTROGRAM_GID`) whose array is the
        ``(frequencies, times)`` PSD matrix; x in seconds, y in Hz.
    """
    from scipy import signal as sps

    signal = runs(data, column)
    fig, (ax,) = _figure(1, figsize or (10, 3.6))
    meshes = []
    for run in signal:
        if len(run.samples) < nperseg:
            continue
        f, t, sxx = sps.spectrogram(run.samples, fs=run.rate, window=window, nperseg=nperseg,
                                    noverlap=noverlap)
        values = 10 * np.log10(np.maximum(sxx, np.finfo(float).tiny)) if db else sxx
        meshes.append(ax.pcolormesh(t + run.start / run.rate, f, values, shading="nearest",
                                    cmap=cmap, gid=SPECTROGRAM_GID))
    if not meshes:
        raise ValueError(f"`{column}` has no run of at least nperseg={nperseg} consecutive "
                         f"samples to take a spectrogram of")
    if db and dynamic_range is not None:
        top = max(float(np.max(m.get_array())) for m in meshes)
        for m in meshes:
            m.set_clim(top - dynamic_range, top)
    fig.colorbar(meshes[-1], ax=ax, label="PSD (dB/Hz)" if db else "PSD (1/Hz)")
    ax.set_ylim(0, fmax if fmax is not None else signal[0].rate / 2)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"{column}: frequency (Hz)")
    if title:
        fig.suptitle(title)
    return fig


__all__ = ["waveform", "detections", "spectrogram", "runs", "marks", "to_seconds",
           "SignalFigure", "Run", "WAVEFORM_GID", "DETECTION_GID", "SPECTROGRAM_GID"]
