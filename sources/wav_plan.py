"""The plan of a WAV scan: its options, the files on their timeline, runs and partitions.

:func:`plan` checks the ``wavesql_wav`` source's options (:class:`WavOptions`) and files on
the driver and places the files on one sample timeline, in gap-free runs (:class:`WavPlan`,
:class:`Run`); :func:`plan_partitions` cuts the windows of the runs into Spark partitions
(:class:`WavPartition`), which :mod:`.wav_scan` reads. The data source itself is
:mod:`.wav_source`; streaming reads plan again at every micro-batch (:mod:`.wav_stream`).

Options (all strings)
---------------------
``path``               a file, a directory (its ``*.wav``, not recursive) or a glob. Required.
``rate``               declared rate in Hz; every file must have it (``RATE_MISMATCH``).
                       Default: the first file's rate.
``channels``           JSON list of channel names, mapped to the file's channels in order;
                       every file must have that many (``CHANNEL_MISMATCH``). Default
                       ``ch1..chN`` from the first file.
``timeline``           ``concatenate`` (default: natural name order, back to back) or
                       ``timestamped`` (start time in each name; gaps stay gaps).
``epoch_us``           ``timestamped``: timebase epoch, microseconds since 1970 (default 0).
``tolerance``          ``timestamped``: a file starting within this many samples of the
                       previous one's end continues it (default 0).
``segment``            the signal's stored segment size (default 4096).
``window``, ``slide``  n and m in samples; default ``segment`` and n.
``program``            JSON of a Program; default the identity over ``channels``.
``partition_samples``  target input samples per partition (default 8_388_608).
``block_samples``      samples per ``Evaluator.run_windows`` call (default 524_288: a block
                       and its float64 copy, 6 MB a channel, stay in cache beside another
                       core's; 2^20 made two concurrent STATFILTER tasks 25% slower each).
``lookback``           samples each partition re-reads before its first window to warm up
                       stateful functions (TiLT boundary resolution). Default: the program's
                       ``lookback`` if it is stateful, else 0.
``sequential``         ``true``: one partition (stateful programs of unbounded look-back;
                       also chosen automatically when the program says its look-back is
                       unbounded and no ``lookback`` is given).
``strict``             ``true``: a truncated file is an error (``TRUNCATED_FILE``). By default
                       the whole frames present are used and the file is logged as truncated
                       (``WavPlan.truncated`` lists them).
``state_dir``          streaming only: a folder where a stateful program of unbounded
                       look-back keeps its state between micro-batches
                       (:mod:`.wav_stream`, *Checkpointed state*);
                       the continuous-query runner passes ``<checkpoint>/signal_state``.
                       Programs of finite look-back warm up on the files before instead.
``max_files_per_trigger``  streaming only: read at most this many new files per micro-batch.
``tasks``              streaming only: cut each micro-batch's new windows into about this
                       many partitions (never under 1 M samples, never over
                       ``partition_samples``), so a batch of several new files -- stateful
                       programs of finite look-back included -- keeps every core busy.
                       Default: ``partition_samples`` alone decides.
``storage_secret``     JSON of the Hadoop settings that reach an object store holding the
                       files (:func:`.wav_source.storage_option`; wavesql.storage). Default: the
                       environment's (AWS default chain).
``settle_ms``          streaming only: how long a file whose header does not say where its
                       data ends must have been left alone before it is read (default 1000,
                       or ``$WAVESQL_FILE_SETTLE_SECONDS``); see :mod:`.wav_stream`,
                       *Files still being written*.

Windows
-------
Window k covers sample numbers ``[k*m, k*m + n)`` -- an absolute grid, so every file, split
and micro-batch agrees on it. A *run* is a maximal gap-free stretch of samples (concatenated
files always form one run; timestamped files form one run per gap-free group). For each run,
every window starting inside it is emitted, plus -- when the run does not begin on the grid
-- the window starting just before it; each is cut to the run. So a window at a run's end,
a run's off-grid start, or beside a gap is *partial* (narrower than n; a gap is never
bridged). Tumbling windows (m = n) therefore emit every sample
exactly once; sliding windows (m < n) overlap by n - m; with m > n the samples between
windows are skipped (read but not emitted). Keep full windows only with ``width(ch) = n``.
The SigSeg ``start`` of a piece is its first sample number.

Partitions
----------
A partition owns a range of grid indices k of one or more runs and reads what those windows
need, including the n - m samples past its last window start; so each window is produced
exactly once whatever the split. With ``lookback`` L > 0 and a stateful program, a partition
also runs the windows covering the L samples before its first window, discarding their rows
(``discard_before``). ``Evaluator.finish()`` (detectors' pending output) is emitted only by
the partition holding the end of the timeline -- elsewhere the next partition's warm-up
sees the same state and emits it exactly.

Errors
------
All are :class:`~wavesql.udfs.wav.WavError` (``str`` = ``"<path>: <message> [<CODE>]"``).
:func:`plan` (and :func:`.wav_source.load`, which calls it) raises them in the calling
process: ``MISSING_PATH`` (no such path, no ``.wav`` files), ``INVALID_OPTION``, and the file
checks (``RATE_MISMATCH``, ``CHANNEL_MISMATCH``, ``CORRUPT_FILE``, ``UNSUPPORTED_ENCODING``,
``OVERLAPPING_FILES``, ``INVALID_FILE_TIMESTAMP``, ``TRUNCATED_FILE`` with ``strict``).
Through plain ``spark.read...load()`` the same checks run when Spark plans the scan, and
errors in workers (a file vanished or changed: :mod:`.wav_scan`) surface inside Spark's
exception; the text always carries the path and ``[CODE]``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from pyspark.sql.datasource import InputPartition

from wavesql import storage
from wavesql.udfs.wav import FilePlacement, WavError, plan_timeline, read_info

__all__ = ["WavOptions", "DEFAULTS", "bad_option", "list_wav_files", "Run", "runs_of",
           "WavPlan", "load_program", "plan", "WindowTask", "WavPartition", "k_range",
           "window_task", "plan_partitions"]

_log = logging.getLogger("wavesql.wav_source")

DEFAULTS = {"segment": 4096, "partition_samples": 8_388_608, "block_samples": 1 << 19}
_OPTIONS = ("path", "rate", "channels", "timeline", "epoch_us", "tolerance", "segment",
            "window", "slide", "program", "partition_samples", "block_samples", "lookback",
            "sequential", "strict", "state_dir", "max_files_per_trigger", "settle_ms",
            "storage_secret", "tasks")
#: Streaming: a file whose header does not say where its data ends is read once it has not
#: been modified for this long (``settle_ms``; ``$WAVESQL_FILE_SETTLE_SECONDS``).
_SETTLE_MS = int(float(os.environ.get("WAVESQL_FILE_SETTLE_SECONDS", "1.0")) * 1000)


# ---------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class WavOptions:
    """The source options, parsed and checked (see the module docstring for each)."""

    path: str
    rate: float | None = None
    channels: tuple[str, ...] | None = None
    timeline: str = "concatenate"
    epoch_us: int = 0
    tolerance: int = 0
    window: int = DEFAULTS["segment"]
    slide: int = DEFAULTS["segment"]
    program: str | None = None
    partition_samples: int = DEFAULTS["partition_samples"]
    block_samples: int = DEFAULTS["block_samples"]
    lookback: int | None = None
    sequential: bool = False
    strict: bool = False
    state_dir: str | None = None
    max_files_per_trigger: int | None = None
    settle_ms: int = _SETTLE_MS
    tasks: int | None = None
    #: the Hadoop settings that reach the files' store (wavesql.storage.Settings as JSON);
    #: "secret" in the name makes Spark redact the option in its plans and UI
    storage_secret: str | None = None

    @staticmethod
    def parse(options: Mapping[str, str]) -> "WavOptions":
        """Parse Spark's string options; raises ``INVALID_OPTION`` / ``MISSING_PATH``.

        Examples
        --------
        >>> o = WavOptions.parse({"path": "a.wav", "window": "256", "channels": '["x","y"]'})
        >>> o.window, o.slide, o.channels
        (256, 256, ('x', 'y'))
        """
        opts = {str(k).lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise WavError("MISSING_PATH", "", "the WAV source needs a `path` option",
                           "pass a file, a directory or a glob")
        unknown = sorted(set(opts) - set(_OPTIONS))
        if unknown:
            raise bad_option(path, f"unknown option(s) {unknown}",
                             f"known: {', '.join(_OPTIONS)}")

        def integer(name, default, minimum):
            if opts.get(name) in (None, ""):
                return default
            try:
                value = int(str(opts[name]).strip())
            except ValueError:
                raise bad_option(path, f"option {name}={opts[name]!r} is not a whole "
                                 "number") from None
            if minimum is not None and value < minimum:
                raise bad_option(path, f"option {name}={value} must be at least {minimum}")
            return value

        def flag(name):
            text = str(opts.get(name, "false")).strip().lower()
            if text not in ("true", "false"):
                raise bad_option(path, f"option {name}={opts[name]!r} must be true or false")
            return text == "true"

        rate = None
        if opts.get("rate") not in (None, ""):
            try:
                rate = float(opts["rate"])
            except ValueError:
                raise bad_option(path, f"option rate={opts['rate']!r} is not a "
                                 "number") from None
            if not (rate > 0 and math.isfinite(rate)):
                raise bad_option(path, f"option rate={opts['rate']!r} must be positive")
        channels = None
        if opts.get("channels") not in (None, ""):
            try:
                channels = json.loads(opts["channels"])
            except ValueError:
                channels = None
            if (not isinstance(channels, list) or not channels
                    or not all(isinstance(c, str) and c for c in channels)
                    or len(set(channels)) != len(channels)):
                raise bad_option(path, f"option channels={opts['channels']!r} must be a JSON "
                                 "list of distinct names", 'e.g. channels=\'["ch1", "ch2"]\'')
            channels = tuple(channels)
        timeline = str(opts.get("timeline") or "concatenate").lower()
        if timeline not in ("concatenate", "timestamped"):
            raise bad_option(path, f"option timeline={timeline!r} must be concatenate or "
                             "timestamped")
        segment = integer("segment", DEFAULTS["segment"], 1)
        window = integer("window", segment, 1)
        return WavOptions(
            path=str(path), rate=rate, channels=channels, timeline=timeline,
            epoch_us=integer("epoch_us", 0, None), tolerance=integer("tolerance", 0, 0),
            window=window, slide=integer("slide", window, 1), program=opts.get("program") or None,
            partition_samples=integer("partition_samples", DEFAULTS["partition_samples"], 1),
            block_samples=integer("block_samples", DEFAULTS["block_samples"], 1),
            lookback=integer("lookback", None, 0), sequential=flag("sequential"),
            strict=flag("strict"), state_dir=opts.get("state_dir") or None,
            storage_secret=opts.get("storage_secret") or None,
            max_files_per_trigger=integer("max_files_per_trigger", None, 1),
            settle_ms=integer("settle_ms", _SETTLE_MS, 0), tasks=integer("tasks", None, 1))


def bad_option(path: str, message: str, hint: str | None = None) -> WavError:
    """The ``INVALID_OPTION`` error about the source reading ``path``."""
    return WavError("INVALID_OPTION", path, message, hint)


# ---------------------------------------------------------------------------------- files
def list_wav_files(path: str) -> list[str]:
    """The files ``path`` (a local path or a URI) names: itself, the ``*.wav`` (any case)
    of a folder, or a glob's files; sorted.

    An empty list when nothing matches (callers decide whether that is an error).
    """
    return [e.location for e in storage.files(path, suffix=".wav")]


@dataclass(frozen=True)
class Run:
    """A gap-free stretch of samples ``[start, end)`` and the files holding it, in order."""

    start: int
    end: int
    files: tuple[FilePlacement, ...]


def runs_of(placements: Sequence[FilePlacement]) -> list[Run]:
    """The gap-free runs of files placed on a timeline (in timeline order; files of no
    frames hold no samples and join no run)."""
    runs: list[Run] = []
    for p in placements:
        if p.info.frames == 0:
            continue
        if runs and runs[-1].end == p.start_sample:
            last = runs[-1]
            runs[-1] = Run(last.start, p.end_sample, last.files + (p,))
        else:
            runs.append(Run(p.start_sample, p.end_sample, (p,)))
    return runs


# ---------------------------------------------------------------------------------- plan
@dataclass
class WavPlan:
    """What the driver learned: the files on their timeline, runs, and the resolved program.

    Attributes
    ----------
    options : WavOptions
    placements : list of FilePlacement
        Every file in timeline order (zero-frame files included; they hold no samples).
    runs : list of Run
    rate : float
    channels : tuple of str
        Declared channel names (file channel i is ``channels[i]``).
    program_json : str
        The program to run (the identity over ``channels`` if none was given).
    stateful : bool
    lookback : int or None
        Resolved warm-up in samples (None: unbounded, so the read is sequential).
    sequential : bool
    truncated : list of str
        Truncated files read leniently (their whole frames present).
    """

    options: WavOptions
    placements: list
    runs: list
    rate: float
    channels: tuple
    program_json: str
    stateful: bool
    lookback: int | None
    sequential: bool
    truncated: list

    @property
    def spark_ddl(self) -> str:
        """The Spark schema of the program's output."""
        return load_program(self.program_json).spark_ddl()

    def partitions(self, k_from: int | None = None, k_to: int | None = None, *,
                   flush: bool = True, partition_samples: int | None = None
                   ) -> list["WavPartition"]:
        """Input partitions for grid windows ``k_from <= k < k_to`` (None: unbounded)."""
        o = self.options
        return plan_partitions(self.runs, o.window, o.slide,
                               partition_samples or o.partition_samples, self.rate,
                               k_from=k_from, k_to=k_to,
                               lookback=(self.lookback or 0) if self.stateful else 0,
                               sequential=self.sequential, flush=flush)


def load_program(text: str):
    """The :class:`~wavesql.udfs.program.Program` of its JSON text."""
    from wavesql.udfs.program import Program  # lazy: keeps `import` of this module light

    return Program.from_json(text)


def plan(options: Mapping[str, str] | WavOptions, *, streaming: bool = False,
         files: Sequence[str] | None = None, allow_empty: bool | None = None,
         read=None, identity=None, place=None) -> WavPlan:
    """Check the options and files and place the files on their timeline (driver side).

    Parameters
    ----------
    options : mapping of str or WavOptions
        The source options.
    streaming : bool
        No files yet is fine in streaming (they may arrive); the program must be usable
        across micro-batches.
    files : sequence of str, optional
        The files to plan (default: list ``path``); streaming passes its own listing.
    allow_empty : bool, optional
        Whether no files is fine (default: in streaming).
    read : callable, optional
        ``read(path, strict=...) -> WavInfo`` in place of ``read_info`` (a header cache).
    identity : callable, optional
        How to tell two names of one file apart (``plan_timeline``'s ``identity``).
    place : callable, optional
        ``place(paths) -> placements`` in timeline order, in place of reading WAV headers:
        samples the caller places itself (rows of a table, sources/table_stream.py; then
        ``rate`` and ``channels`` must be given).

    Raises
    ------
    WavError
        ``MISSING_PATH``, ``INVALID_OPTION``, ``NOT_IMPLEMENTED`` and the file checks of
        :func:`wavesql.udfs.wav.plan_timeline`.
    """
    from wavesql.udfs.program import Program

    o = options if isinstance(options, WavOptions) else WavOptions.parse(options)
    if o.storage_secret:
        storage.use(storage.Settings.from_json(o.storage_secret))
    paths = list_wav_files(o.path) if files is None else list(files)
    allow_empty = streaming if allow_empty is None else allow_empty
    folder = not paths and storage.is_dir(o.path)
    if not paths and not (allow_empty and (folder or storage.has_magic(o.path))):
        what = ("has no .wav files" if folder else
                "matches no files" if storage.has_magic(o.path) else "does not exist")
        raise WavError("MISSING_PATH", o.path, f"the signal's path {what}",
                       "check the FROM path of the signal")
    rate, channels = o.rate, o.channels
    if paths and (rate is None or channels is None):
        first = (read or read_info)(sorted(paths)[0], strict=o.strict)
        rate = first.rate if rate is None else rate
        channels = channels or tuple(f"ch{i + 1}" for i in range(first.channels))
    if channels is None:
        raise bad_option(o.path, "no files yet to learn the channels from",
                         'pass channels=\'["ch1", ...]\' (and rate) for a stream that starts '
                         'empty')
    try:
        prog = Program.from_json(o.program) if o.program else Program.identity(channels)
    except (ValueError, KeyError, TypeError) as e:
        raise bad_option(o.path, f"option program is not a valid program: {e}") from None
    missing = [c for c in prog.channels if c not in channels]
    if missing:
        raise bad_option(o.path, f"the program reads channel(s) {missing} but the signal "
                         f"has {list(channels)}")
    stateful = prog.stateful
    lookback = o.lookback
    if lookback is None:
        needed = prog.lookback(rate or 0.0) if stateful else 0
        lookback = None if isinstance(needed, str) else needed
    sequential = o.sequential or (stateful and lookback is None)
    if streaming and stateful and sequential and not o.state_dir:
        raise WavError("NOT_IMPLEMENTED", o.path, "a stateful program of unbounded look-back "
                       "cannot run over a stream: its state would have to survive between "
                       "micro-batches", "use a function with a finite look-back, or run the "
                       "query as a batch")
    if place is not None:
        placements = place(paths) if paths else []
    else:
        placements = plan_timeline(paths, rate if rate is not None else 1, mode=o.timeline,
                                   channels=len(channels), epoch_us=o.epoch_us,
                                   tolerance=o.tolerance, strict=o.strict,
                                   read=read, identity=identity) if paths else []
    truncated = [p.path for p in placements if p.info.truncated]
    for p in truncated:
        _log.warning("%s is truncated; reading the whole frames present", p)
    return WavPlan(o, placements, runs_of(placements), float(rate or 0), tuple(channels),
                   prog.to_json(), stateful, lookback, sequential, truncated)


# ---------------------------------------------------------------------------------- partitions
@dataclass(frozen=True)
class WindowTask:
    """Grid windows ``k0 <= k < k1`` of one run, with the files they read."""

    run_start: int
    run_end: int
    k0: int
    k1: int
    files: tuple[FilePlacement, ...]


@dataclass(frozen=True)
class WavPartition(InputPartition):
    """One Spark task: owned window tasks, warm-up tasks, and whether it ends the data."""

    index: int
    rate: float
    tasks: tuple[WindowTask, ...]
    warmup: tuple[WindowTask, ...] = ()
    discard_before: int | None = None
    flush: bool = False
    #: Checkpointed state (streaming with ``state_dir``): pickled Evaluator states to start
    #: from (None: fresh) and where to write them at the end.
    state_in: str | None = None
    state_out: str | None = None


def k_range(run: Run, n: int, m: int) -> tuple[int, int]:
    """Grid windows of the run: those starting inside it, plus -- when the run does not
    begin on the grid -- the one window starting just before it, cut to the run.

    Earlier overlapping windows would only repeat a prefix of that one, so they are not
    emitted: a signal starting at sample 0 begins with a full window, not a stack of
    slivers, and no sample of the run is left out of every window.
    """
    first = run.start // m
    if first * m + n <= run.start:  # m > n: the window before the run ends before it
        first += 1
    return first, (run.end - 1) // m + 1


def window_task(run: Run, n: int, m: int, k0: int, k1: int) -> WindowTask:
    """Grid windows ``k0 <= k < k1`` of ``run`` (``n`` samples every ``m``), with the files
    they read."""
    lo, hi = max(k0 * m, run.start), min((k1 - 1) * m + n, run.end)
    files = tuple(f for f in run.files if f.start_sample < hi and f.end_sample > lo)
    return WindowTask(run.start, run.end, k0, k1, files)


def plan_partitions(runs: Sequence[Run], n: int, m: int, partition_samples: int,
                    rate: float = 0.0, *, k_from: int | None = None, k_to: int | None = None, lookback: int = 0,
                    sequential: bool = False, flush: bool = True) -> list[WavPartition]:
    """Cut the windows of ``runs`` into partitions of about ``partition_samples`` samples.

    Partitions are cut at window-start boundaries (whole grid indices), small runs share a
    partition, and each window piece lands in exactly one partition. ``flush`` marks the
    partition holding the last window of the last run (when it is in range).

    Examples
    --------
    >>> runs = [Run(0, 10_000, ())]
    >>> [(t.k0, t.k1) for p in plan_partitions(runs, 1000, 1000, 4000) for t in p.tasks]
    [(0, 4), (4, 8), (8, 10)]
    """
    per_part = max(1, partition_samples // m)
    k_from = -math.inf if k_from is None else k_from
    k_to = math.inf if k_to is None else k_to
    groups: list[list[WindowTask]] = []
    current: list[WindowTask] = []
    room = per_part
    for run in runs:
        lo, hi = k_range(run, n, m)
        k, hi = max(lo, k_from), min(hi, k_to)
        while k < hi:
            take = hi - k if sequential else min(room, hi - k)
            current.append(window_task(run, n, m, k, k + take))
            k += take
            room -= take
            if room <= 0 and not sequential:
                groups.append(current)
                current, room = [], per_part
    if current:
        groups.append(current)
    last_k = k_range(runs[-1], n, m)[1] if runs else None
    parts = []
    for i, tasks in enumerate(groups):
        first = tasks[0]
        s0 = max(first.k0 * m, first.run_start)
        warm = _warmup(runs, n, m, s0, lookback) if lookback > 0 else ()
        ends = flush and i == len(groups) - 1 and tasks[-1].run_end == runs[-1].end \
            and tasks[-1].k1 == last_k
        parts.append(WavPartition(i, rate, tuple(tasks), warm, s0 if warm else None, ends))
    return parts


def _warmup(runs, n, m, s0, lookback) -> tuple[WindowTask, ...]:
    """Window pieces starting before ``s0`` that cover any of the ``lookback`` samples."""
    out = []
    for run in runs:
        if run.start >= s0 or run.end <= s0 - lookback:
            continue
        lo, hi = k_range(run, n, m)
        k0 = max(lo, (s0 - lookback - n) // m + 1)  # piece ends after s0 - lookback
        k1 = min(hi, (s0 - 1) // m + 1)  # piece starts before s0 (run.start < s0 here)
        if k0 < k1:
            out.append(window_task(run, n, m, k0, k1))
    return tuple(out)

