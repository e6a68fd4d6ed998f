"""WAV files as a Spark data source (``wavesql_wav``), windowed and computed in the scan.

The scan reads WAV files in big blocks with :mod:`wavesql.udfs.wav`, cuts them into sample
windows on an absolute grid, runs the query's signal stage (a
:class:`wavesql.udfs.program.Program`) over whole blocks of windows, and hands Spark Arrow
record batches of the program's output -- raw samples never cross into the JVM unless the
program asks for them (the identity program does: one SigSeg column per channel).

Batch queries of the planner do not go through the data source: :func:`batch_frame` plans
the same partitions on the driver and runs them as ``mapInArrow`` tasks (no Python planning
processes per query); streaming reads and ``SET wavesql.wav.scan = source`` use it.

>>> register(spark)                                                   # doctest: +SKIP
>>> df = (spark.read.format("wavesql_wav").schema(prog.spark_ddl())   # doctest: +SKIP
...       .options(path="rec/", rate="48000", channels='["ch1"]', window="4096",
...                program=prog.to_json()).load())

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
                       look-back keeps its state between micro-batches (see *Streaming*);
                       the continuous-query runner passes ``<checkpoint>/signal_state``.
                       Programs of finite look-back warm up on the files before instead.
``max_files_per_trigger``  streaming only: read at most this many new files per micro-batch.
``tasks``              streaming only: cut each micro-batch's new windows into about this
                       many partitions (never under 1 M samples, never over
                       ``partition_samples``), so a batch of several new files -- stateful
                       programs of finite look-back included -- keeps every core busy.
                       Default: ``partition_samples`` alone decides.
``storage_secret``     JSON of the Hadoop settings that reach an object store holding the
                       files (:func:`storage_option`; wavesql.storage). Default: the
                       environment's (AWS default chain).
``settle_ms``          streaming only: how long a file whose header does not say where its
                       data ends must have been left alone before it is read (default 1000,
                       or ``$WAVESQL_FILE_SETTLE_SECONDS``); see *Files still being written*.

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

Streaming
---------
Offsets are ``{"end": e, "files": [...], "final": bool}``: every window piece with grid
start below ``e`` (a multiple of m; ``null`` before the first batch) has been emitted, and
``files`` are the paths read, in timeline order. Each micro-batch re-lists ``path``; new
files must come after every known one in the timeline (in ``concatenate`` mode: in natural
name order) -- a file that would land before an already-read one is ``OUT_OF_ORDER_FILE``.
A batch emits the windows whose data is complete: every piece of a run followed by a later
file (a gap ends the run), and the windows of the last run that end at or before its last
sample. **The partial tail window is never emitted in streaming** until the stream is
marked finished by a file ``*.eof`` in the directory (``final: true``); a ``.wav`` arriving
after the marker is ``OUT_OF_ORDER_FILE``. So the union of all micro-batches equals the batch
read of the same files (without the marker: minus the tail piece(s) still waiting). Files
already read must stay in place and unchanged.

**Files still being written** are deferred, not read in part: a new file is taken only once
it is complete -- its header parses and declares exactly the data present, or, for a header
that does not say where the data ends (a streaming recorder's unpatched size 0/0xFFFFFFFF)
or a file shorter than its header says (being copied in place), once it has not been
modified for ``settle_ms`` (``_TRUNCATED_GRACE`` times that for a truncated file, which is
then read leniently as a truncated file, as before). A deferred file holds back every file
after it in timeline order, so the timeline never changes; a later trigger takes them (with
``availableNow``, the run waits for them instead, up to the same bounds). Offsets record each
file's size (``"sizes"``): a file read by an earlier micro-batch whose size changed is
``FILE_CHANGED`` -- its samples are already on the timeline, and moving them would duplicate
or drop windows. Writing ``x.wav.part`` and renaming it into place avoids all of this.
Headers are read once per (path, size, modification time), not on every micro-batch. Without ``state_dir``, stateful programs need a finite look-back (the
Evaluator does not survive between micro-batches, so each batch warms up from the look-back
region); ``sequential`` or an unbounded look-back in streaming is then ``NOT_IMPLEMENTED``.

**Checkpointed state** (``state_dir``): a stateful program of unbounded look-back
(detectors, ``degap``, ``resample``, an IIR filter that never forgets) then runs each micro-batch as *one* partition holding all its new
windows in order, whose Evaluator starts from the states saved at the batch's start offset
(``state_dir/k=<k_from>.state``) and saves its states at the batch's end offset
(``k=<k_to>.state``, written atomically; JSON with numpy arrays, :mod:`wavesql.udfs.states`,
never a pickle: the checkpoint is the user's, and a pickle would run code). So the program sees every window exactly once, in
order, with the state the previous window left: the same output as one sequential batch
pass, however the recording is cut into files and micro-batches. A re-run of a micro-batch
(after a crash) reads the same start state and rewrites the same end state, so it is exactly
once; the pending output of detectors (``Evaluator.finish``) comes with the final batch (the
``*.eof`` marker), from a partition of no windows when nothing else is left. Warm-up replay
was not used for this because it cannot be exact for an unbounded look-back (IIR) and
re-reads the look-back on every batch.

Errors
------
All are :class:`~wavesql.udfs.wav.WavError` (``str`` = ``"<path>: <message> [<CODE>]"``).
:func:`plan` and :func:`load` raise them in the calling process: ``MISSING_PATH`` (no such
path, no ``.wav`` files), ``INVALID_OPTION``, and the file checks (``RATE_MISMATCH``,
``CHANNEL_MISMATCH``, ``CORRUPT_FILE``, ``UNSUPPORTED_ENCODING``, ``OVERLAPPING_FILES``,
``INVALID_FILE_TIMESTAMP``, ``TRUNCATED_FILE`` with ``strict``). Through plain
``spark.read...load()`` the same checks run when Spark plans the scan, and errors in workers
(a file vanished or changed) surface inside Spark's exception; the text always carries the
path and ``[CODE]``.
"""

from __future__ import annotations

import glob
import json
import logging
import math
import os
import time
import weakref
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import FilePlacement, WavError, iter_segments, plan_timeline, read_info

from .arrow import conform

__all__ = ["SHORT_NAME", "WavOptions", "WavPlan", "Run", "WavPartition", "WindowTask",
           "list_wav_files", "plan", "plan_partitions", "iter_window_blocks", "read_partition",
           "WavDataSource", "WavBatchReader", "WavStreamReader", "register", "load"]

SHORT_NAME = "wavesql_wav"
_log = logging.getLogger("wavesql.wav_source")

_DEFAULTS = {"segment": 4096, "partition_samples": 8_388_608, "block_samples": 1 << 19}
_OPTIONS = ("path", "rate", "channels", "timeline", "epoch_us", "tolerance", "segment",
            "window", "slide", "program", "partition_samples", "block_samples", "lookback",
            "sequential", "strict", "state_dir", "max_files_per_trigger", "settle_ms",
            "storage_secret", "tasks")
#: Streaming: a file whose header does not say where its data ends is read once it has not
#: been modified for this long (``settle_ms``; ``$WAVESQL_FILE_SETTLE_SECONDS``).
_SETTLE_MS = int(float(os.environ.get("WAVESQL_FILE_SETTLE_SECONDS", "1.0")) * 1000)
#: ... and a truncated one (its header declares more data) after this many times that.
_TRUNCATED_GRACE = 10


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
    window: int = _DEFAULTS["segment"]
    slide: int = _DEFAULTS["segment"]
    program: str | None = None
    partition_samples: int = _DEFAULTS["partition_samples"]
    block_samples: int = _DEFAULTS["block_samples"]
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
            raise _bad(path, f"unknown option(s) {unknown}", f"known: {', '.join(_OPTIONS)}")

        def integer(name, default, minimum):
            if opts.get(name) in (None, ""):
                return default
            try:
                value = int(str(opts[name]).strip())
            except ValueError:
                raise _bad(path, f"option {name}={opts[name]!r} is not a whole number") from None
            if minimum is not None and value < minimum:
                raise _bad(path, f"option {name}={value} must be at least {minimum}")
            return value

        def flag(name):
            text = str(opts.get(name, "false")).strip().lower()
            if text not in ("true", "false"):
                raise _bad(path, f"option {name}={opts[name]!r} must be true or false")
            return text == "true"

        rate = None
        if opts.get("rate") not in (None, ""):
            try:
                rate = float(opts["rate"])
            except ValueError:
                raise _bad(path, f"option rate={opts['rate']!r} is not a number") from None
            if not (rate > 0 and math.isfinite(rate)):
                raise _bad(path, f"option rate={opts['rate']!r} must be positive")
        channels = None
        if opts.get("channels") not in (None, ""):
            try:
                channels = json.loads(opts["channels"])
            except ValueError:
                channels = None
            if (not isinstance(channels, list) or not channels
                    or not all(isinstance(c, str) and c for c in channels)
                    or len(set(channels)) != len(channels)):
                raise _bad(path, f"option channels={opts['channels']!r} must be a JSON list of "
                           "distinct names", 'e.g. channels=\'["ch1", "ch2"]\'')
            channels = tuple(channels)
        timeline = str(opts.get("timeline") or "concatenate").lower()
        if timeline not in ("concatenate", "timestamped"):
            raise _bad(path, f"option timeline={timeline!r} must be concatenate or timestamped")
        segment = integer("segment", _DEFAULTS["segment"], 1)
        window = integer("window", segment, 1)
        return WavOptions(
            path=str(path), rate=rate, channels=channels, timeline=timeline,
            epoch_us=integer("epoch_us", 0, None), tolerance=integer("tolerance", 0, 0),
            window=window, slide=integer("slide", window, 1), program=opts.get("program") or None,
            partition_samples=integer("partition_samples", _DEFAULTS["partition_samples"], 1),
            block_samples=integer("block_samples", _DEFAULTS["block_samples"], 1),
            lookback=integer("lookback", None, 0), sequential=flag("sequential"),
            strict=flag("strict"), state_dir=opts.get("state_dir") or None,
            storage_secret=opts.get("storage_secret") or None,
            max_files_per_trigger=integer("max_files_per_trigger", None, 1),
            settle_ms=integer("settle_ms", _SETTLE_MS, 0), tasks=integer("tasks", None, 1))


def _bad(path: str, message: str, hint: str | None = None) -> WavError:
    return WavError("INVALID_OPTION", path, message, hint)


# ---------------------------------------------------------------------------------- files
def list_wav_files(path: str) -> list[str]:
    """The files ``path`` (a local path or a URI) names: itself, the ``*.wav`` (any case)
    of a folder, or a glob's files; sorted.

    An empty list when nothing matches (callers decide whether that is an error).
    """
    return [e.location for e in storage.files(path, suffix=".wav")]


def _eof_marked(path: str) -> bool:
    """Whether the stream under ``path`` is finished: a ``*.eof`` file next to its files."""
    folder = path if storage.is_dir(path) else storage.dirname(path) or "."
    return bool(storage.list_files(folder, suffix=".eof"))


def storage_option() -> dict[str, str]:
    """The ``storage_secret`` option carrying this process's storage settings to the
    source's planning and tasks (empty when there are none)."""
    settings = storage.current()
    return {"storage_secret": settings.to_json()} if settings.hadoop else {}


@dataclass(frozen=True)
class Run:
    """A gap-free stretch of samples ``[start, end)`` and the files holding it, in order."""

    start: int
    end: int
    files: tuple[FilePlacement, ...]


def _runs(placements: Sequence[FilePlacement]) -> list[Run]:
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
        return _program(self.program_json).spark_ddl()

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


def _program(text: str):
    from wavesql.udfs.program import Program  # lazy: keeps `import` of this module light

    return Program.from_json(text)


def plan(options: Mapping[str, str] | WavOptions, *, streaming: bool = False,
         files: Sequence[str] | None = None, allow_empty: bool | None = None,
         read=None, identity=None) -> WavPlan:
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
        raise _bad(o.path, "no files yet to learn the channels from",
                   'pass channels=\'["ch1", ...]\' (and rate) for a stream that starts empty')
    try:
        prog = Program.from_json(o.program) if o.program else Program.identity(channels)
    except (ValueError, KeyError, TypeError) as e:
        raise _bad(o.path, f"option program is not a valid program: {e}") from None
    missing = [c for c in prog.channels if c not in channels]
    if missing:
        raise _bad(o.path, f"the program reads channel(s) {missing} but the signal has "
                   f"{list(channels)}")
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
    placements = plan_timeline(paths, rate if rate is not None else 1, mode=o.timeline,
                               channels=len(channels), epoch_us=o.epoch_us,
                               tolerance=o.tolerance, strict=o.strict,
                               read=read, identity=identity) if paths else []
    truncated = [p.path for p in placements if p.info.truncated]
    for p in truncated:
        _log.warning("%s is truncated; reading the whole frames present", p)
    return WavPlan(o, placements, _runs(placements), float(rate or 0), tuple(channels),
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


def _k_range(run: Run, n: int, m: int) -> tuple[int, int]:
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


def _task(run: Run, n: int, m: int, k0: int, k1: int) -> WindowTask:
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
        lo, hi = _k_range(run, n, m)
        k, hi = max(lo, k_from), min(hi, k_to)
        while k < hi:
            take = hi - k if sequential else min(room, hi - k)
            current.append(_task(run, n, m, k, k + take))
            k += take
            room -= take
            if room <= 0 and not sequential:
                groups.append(current)
                current, room = [], per_part
    if current:
        groups.append(current)
    last_k = _k_range(runs[-1], n, m)[1] if runs else None
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
        lo, hi = _k_range(run, n, m)
        k0 = max(lo, (s0 - lookback - n) // m + 1)  # piece ends after s0 - lookback
        k1 = min(hi, (s0 - 1) // m + 1)  # piece starts before s0 (run.start < s0 here)
        if k0 < k1:
            out.append(_task(run, n, m, k0, k1))
    return tuple(out)


# ---------------------------------------------------------------------------------- reading
def _read_range(files: Sequence[FilePlacement], lo: int, hi: int, chans: list[int],
                strict: bool) -> np.ndarray:
    """Samples ``[lo, hi)`` of a run as ``(len(chans), hi - lo)`` float32, channel-major."""
    pieces = []
    for f in files:
        s, e = max(lo, f.start_sample), min(hi, f.end_sample)
        if s >= e:
            continue
        held = getattr(f, "samples", None)  # a Kafka block's samples (sources/kafka_signal)
        if held is not None:
            pieces.append(held[chans, s - f.start_sample:e - f.start_sample])
            continue
        try:
            blocks = iter_segments(f.info, e - s, start_sample=f.start_sample, channels=chans,
                                   start_frame=s - f.start_sample,
                                   stop_frame=e - f.start_sample, strict=strict)
            try:
                pieces.append(next(blocks)[1])  # one block: `segment` = the whole range
            finally:
                blocks.close()
        except FileNotFoundError:
            raise WavError("MISSING_PATH", f.path, "the file disappeared after the query was "
                           "planned", "files of a signal must stay in place while it is "
                           "read") from None
    got = sum(p.shape[1] for p in pieces)
    if got != hi - lo:  # a planned file got shorter under us
        raise WavError("TRUNCATED_FILE", files[0].path if files else "",
                       f"read {got} of the samples [{lo}, {hi}) planned from "
                       f"{[f.path for f in files]}", "a file shrank after planning")
    # Inside one file (the usual case) the block iter_segments read is the buffer: no copy.
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=1)


def iter_window_blocks(task: WindowTask, n: int, m: int, chans: list[int], *,
                       block_samples: int = _DEFAULTS["block_samples"],
                       strict: bool = False) -> Iterator[tuple[np.ndarray, list]]:
    """The window pieces of ``task`` as ``(starts, channels)`` blocks for ``run_windows``.

    Reads about ``block_samples`` samples per block (re-reading the n - m samples shared
    with the next block). Full windows come as one ``(k, n)`` view per channel (reshape
    for tumbling windows, ``sliding_window_view`` for sliding ones: no copy); partial
    pieces (at a run's ends) come as lists of 1-D arrays, in sample order.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from wavesql.udfs.wav import write_wav, plan_timeline
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.zeros(10), 1000)
    >>> run = _runs(plan_timeline([p], 1000))[0]
    >>> [(s.tolist(), [c.shape if hasattr(c, "shape") else len(c) for c in ch])
    ...  for s, ch in iter_window_blocks(_task(run, 4, 4, 0, 3), 4, 4, [0])]
    [([0, 4], [(2, 4)]), ([8], [1])]
    """
    a, b = task.run_start, task.run_end
    per_call = max(1, block_samples // max(n, m))
    for c0 in range(task.k0, task.k1, per_call):
        c1 = min(task.k1, c0 + per_call)
        lo, hi = max(c0 * m, a), min((c1 - 1) * m + n, b)
        buf = _read_range(task.files, lo, hi, chans, strict)
        grid = np.arange(c0, c1, dtype=np.int64) * m
        starts, ends = np.maximum(grid, a), np.minimum(grid + n, b)
        full = np.flatnonzero((starts == grid) & (ends == grid + n))
        f0, f1 = (int(full[0]), int(full[-1]) + 1) if full.size else (len(grid), len(grid))
        if f0 > 0:  # partial pieces at the run's start
            yield starts[:f0], _pieces(buf, starts[:f0] - lo, ends[:f0] - lo)
        if f1 > f0:
            o, k = int(starts[f0]) - lo, f1 - f0
            if m == n:
                views = [row[o:o + k * n].reshape(k, n) for row in buf]
            else:
                views = [np.lib.stride_tricks.sliding_window_view(
                    row[o:o + (k - 1) * m + n], n)[::m] for row in buf]
            yield starts[f0:f1], views
        if f1 < len(grid):  # partial pieces at the run's end
            yield starts[f1:], _pieces(buf, starts[f1:] - lo, ends[f1:] - lo)


def _pieces(buf: np.ndarray, i0: np.ndarray, i1: np.ndarray) -> list[list[np.ndarray]]:
    return [[row[s:e] for s, e in zip(i0.tolist(), i1.tolist())] for row in buf]


def read_partition(part: WavPartition, options: WavOptions, program_json: str,
                   channels: Sequence[str], stateful: bool = True):
    """Run the program over a partition's windows: an iterator of Arrow record batches.

    Warm-up tasks (stateful programs with a look-back) run first with their rows
    discarded; ``Evaluator.finish()`` is emitted only when the partition ends the data.
    """
    from wavesql.udfs.program import Evaluator

    if options.storage_secret:
        storage.use(storage.Settings.from_json(options.storage_secret))
    prog = _program(program_json)
    evaluator = Evaluator(prog)
    if part.state_in is not None:
        evaluator.states = _load_states(part.state_in)
    chans = [list(channels).index(c) for c in prog.channels]
    n, m = options.window, options.slide
    tasks = (part.warmup if stateful else ()) + part.tasks
    discard = part.discard_before if stateful else None
    for task in tasks:
        for starts, data in iter_window_blocks(task, n, m, chans,
                                               block_samples=options.block_samples,
                                               strict=options.strict):
            batch = evaluator.run_windows(starts, part.rate, data, discard_before=discard)
            if batch.num_rows:
                yield batch
    if part.flush:
        tail = evaluator.finish()
        if tail is not None and tail.num_rows:
            yield tail
    if part.state_out is not None:
        _save_states(part.state_out, evaluator.states)


def _state_file(folder: str, k: int) -> str:
    return storage.join(folder, f"k={k:015d}.state")


def _load_states(path: str) -> dict:
    """The Evaluator's states a micro-batch left (:mod:`wavesql.udfs.states`: code-free)."""
    from wavesql.udfs import states

    try:
        data = storage.read_bytes(path)
    except (FileNotFoundError, WaveSQLError) as err:
        if isinstance(err, WaveSQLError) and err.code != "MISSING_PATH":
            raise
        if storage.exists(path[:-len(".state")] + ".pkl"):
            raise WavError("CHECKPOINT_MISMATCH", path, "the checkpoint holds signal-function "
                           "state pickled by an older WaveSQL, which is not loaded (a "
                           "pickle can run code)", "start the query from a fresh "
                           "checkpoint") from None
        raise WavError("MISSING_PATH", path, "the state a stateful signal function left at the "
                       "previous micro-batch is missing", "the checkpoint is incomplete: start "
                       "the query from a fresh checkpoint") from None
    try:
        return states.loads(data)
    except ValueError as err:
        raise WavError("CORRUPT_FILE", path, f"the signal-function state is not readable "
                       f"({err})", "start the query from a fresh checkpoint") from None


def _save_states(path: str, states_: dict) -> None:
    from wavesql.udfs import states

    # whole or not at all (a rename locally, one PUT on an object store): a re-run of the
    # batch rewrites the same state
    storage.write_bytes(path, states.dumps(states_))


# ---------------------------------------------------------------------------------- Spark
def _target_schema(p: WavPlan, schema):
    """The Arrow schema the scan hands Spark for the Spark ``schema`` (a StructType), checked
    to be outputs of the plan's program."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    produced = _program(p.program_json).arrow_schema().names
    absent = [f.name for f in target if f.name not in produced]
    if absent:
        raise _bad(p.options.path, f"schema column(s) {absent} are not outputs of the "
                   f"program (it outputs {produced})")
    return target


class _Scan:
    """What a reader carries to the workers: options, resolved program, target schema."""

    def _init_scan(self, options, schema, streaming: bool):
        self.options = WavOptions.parse(options)
        if self.options.storage_secret:  # Spark plans this in a Python process of its own
            storage.use(storage.Settings.from_json(self.options.storage_secret))
        self._plan = plan(self.options, streaming=streaming)  # driver-side checks, early
        self._target = _target_schema(self._plan, schema)
        # Fixed for the query: the program and channel names come from the options (or the
        # files present at its start); the rate travels with each partition.
        p = self._plan
        self._program_json, self._channels, self._stateful = (p.program_json, p.channels,
                                                              p.stateful)

    def __getstate__(self):
        # The plan (every file's header) stays on the driver; partitions carry their files.
        state = dict(self.__dict__)
        for key in ("_plan", "_cached", "_infos", "_stats"):
            state.pop(key, None)
        return state

    def read(self, partition: WavPartition):
        for batch in read_partition(partition, self.options, self._program_json,
                                    self._channels, self._stateful):
            yield conform(batch, self._target)


class WavBatchReader(_Scan, DataSourceReader):
    """A batch read: all files listed when the query runs, split into partitions."""

    def __init__(self, options, schema):
        self._init_scan(options, schema, streaming=False)

    def partitions(self):
        return self._plan.partitions()


class WavStreamReader(_Scan, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over a growing directory of WAV files (offsets: module docstring)."""

    def __init__(self, options, schema):
        #: header cache: path -> ((size, mtime_ns), WavInfo); filled before the first plan
        self._infos: dict[str, tuple[tuple[int, int], object]] = {}
        self._init_scan(options, schema, streaming=True)
        self._frozen: tuple[list[str], bool] | None = None  # availableNow: listing, eof
        self._cached: tuple[tuple[str, ...], WavPlan] | None = None
        self._stats: dict[str, storage.Entry] = {}  # this latestOffset call's stats

    def initialOffset(self) -> dict:
        return {"end": None, "files": [], "final": False}

    def _stat(self, path: str) -> storage.Entry:
        """Size and modification time, once per file and ``latestOffset`` call
        (``self._stats``); ``FileNotFoundError`` when it is gone."""
        st = self._stats.get(path)
        if st is None:
            st = self._stats[path] = storage.stat(path)
        return st

    def _identity(self, path: str):
        """Device and inode: one file under two names is placed once (as realpath would
        tell, without its per-component lstat calls). An object's key is its identity."""
        try:
            st = self._stat(path)
        except OSError:
            return os.path.realpath(path)  # read_info then says what is wrong
        return st.inode or path

    def _info(self, path: str, *, strict: bool = False):
        """``read_info`` once per (path, size, modification time)."""
        st = self._stat(path)
        key = (st.size, st.mtime_ns)
        hit = self._infos.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        info = read_info(path, strict=strict)
        self._infos[path] = (key, info)
        return info

    def _not_ready(self, path: str, now: float) -> bool:
        """Whether the new file ``path`` may still be being written (module docstring)."""
        settle = self.options.settle_ms / 1000.0
        try:
            st = self._stat(path)
        except FileNotFoundError:
            return True  # renamed away between the listing and now
        quiet = now - st.mtime_ns / 1e9
        try:
            info = self._info(path)
        except WavError:
            return quiet < settle  # a header not written yet; once quiet, plan() says why
        if info.truncated:
            return quiet < settle * _TRUNCATED_GRACE
        return info.open_ended and quiet < settle

    def _admit(self, start: dict, listed: list[str]) -> tuple[list[str], bool]:
        """The files a micro-batch may read: the known ones (checked unchanged), then the
        new ones in timeline order up to the first that is not complete yet. Returns them
        and whether one was held back."""
        known = list(start.get("files") or [])
        sizes = start.get("sizes")
        if sizes is not None and len(sizes) == len(known):
            for path, size in zip(known, sizes):
                try:
                    now_size = self._stat(path).size
                except FileNotFoundError:
                    continue  # _plan_files reports it (MISSING_PATH)
                if now_size != size:
                    raise WavError("FILE_CHANGED", path, f"the file was read by an earlier "
                                   f"micro-batch with {size} bytes and now has {now_size}",
                                   "files of a stream must not change once read: write each "
                                   "file aside and rename it into place; restore the file, or "
                                   "start the query from a fresh checkpoint")
        seen = set(known)
        new = sorted((f for f in listed if f not in seen), key=self._order_key)
        now, admitted = time.time(), []
        for path in new:
            if self._not_ready(path, now):
                _log.info("%s: not complete yet; deferred with the files after it", path)
                return known + admitted, True
            admitted.append(path)
        return known + admitted, False

    def _order_key(self, path: str):
        """Timeline order of new files, from their names alone."""
        from wavesql.udfs.wav import _natural_key, parse_file_timestamp

        if self.options.timeline == "timestamped":
            try:
                return (0, parse_file_timestamp(path), _natural_key(path))
            except WavError:
                return (1, 0, _natural_key(path))  # plan() reports the bad name
        return (0, 0, _natural_key(path))

    def prepareForTriggerAvailableNow(self) -> None:
        # availableNow: read what is there now and not what arrives during the run.
        self._frozen = (list_wav_files(self.options.path), _eof_marked(self.options.path))

    def _plan_files(self, known: Sequence[str], files: list[str]) -> WavPlan:
        # latestOffset and then partitions plan the same files: read their headers once.
        key = tuple(sorted(files))
        if self._cached is not None and self._cached[0] == key:
            p = self._cached[1]
        else:
            p = plan(self.options, streaming=True, files=files, read=self._info,
                     identity=self._identity)
            self._cached = (key, p)
        order = [x.path for x in p.placements]
        if order[:len(known)] != list(known):
            known_set, listed = set(known), set(order)
            gone = [f for f in known if f not in listed]
            if gone:
                raise WavError("MISSING_PATH", gone[0], "the file was read by an earlier "
                               "micro-batch and is gone", "files of a stream must stay in "
                               "place (the timeline is computed from all of them)")
            early = next(f for f in order if f not in known_set)
            later = next(f for f in known if order.index(f) > order.index(early))
            raise WavError("OUT_OF_ORDER_FILE", early, f"the new file sorts before {later}, "
                           "which an earlier micro-batch already read",
                           "name files so that new recordings sort last (e.g. by start time)")
        return p

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        self._stats = {}  # stat each file once per call (readiness, sizes, header cache)
        try:
            return self._latest(start or self.initialOffset())
        finally:
            self._stats = {}

    def _latest(self, start: dict) -> dict:
        known = list(start.get("files") or [])
        listed, eof = self._frozen or (list_wav_files(self.options.path),
                                       _eof_marked(self.options.path))
        if start.get("final") and set(listed) - set(known):
            new = sorted(set(listed) - set(known))[0]
            raise WavError("OUT_OF_ORDER_FILE", new, "the file arrived after the stream was "
                           "marked finished (*.eof)", "remove the .eof marker before adding "
                           "files, and restart the query from a fresh checkpoint")
        listed, held = self._admit(start, listed)
        if held and self._frozen is not None:
            # availableNow: wait for the files present at the start rather than end the
            # run without them (bounded: the truncated-file grace)
            deadline = time.time() + self.options.settle_ms / 1000.0 * (_TRUNCATED_GRACE + 1)
            while held and time.time() < deadline:
                time.sleep(min(0.1, self.options.settle_ms / 4000.0 + 0.01))
                self._stats = {}
                listed, held = self._admit(start, self._frozen[0])
        # the end of the recording is only final once every file before the marker is in
        final = bool(start.get("final")) or (eof and not held)
        p = self._plan_files(known, listed)
        cap = self.options.max_files_per_trigger
        if cap is not None and len(p.placements) > len(known) + cap:
            # Rate limit: the next `cap` files in timeline order; the end is not final
            # until every listed file has been read.
            listed = [x.path for x in p.placements[:len(known) + cap]]
            p, final = self._plan_files(known, listed), bool(start.get("final"))
        n, m = self.options.window, self.options.slide
        if not p.runs:
            k_end = None
        elif final:
            k_end = _k_range(p.runs[-1], n, m)[1]
        else:  # the first window of the open last run that is not yet complete
            k_end = (p.runs[-1].end - n) // m + 1
        if start.get("end") is not None:
            k_end = max(k_end, start["end"] // m) if k_end is not None else start["end"] // m
        files = [x.path for x in p.placements]
        return {"end": None if k_end is None else k_end * m, "files": files,
                "final": final, "sizes": [self._size(f) for f in files]}

    def _size(self, path: str) -> int | None:
        try:
            return self._stat(path).size
        except OSError:
            return None

    def partitions(self, start: dict, end: dict):
        self._stats = {}
        m = self.options.slide
        if end.get("end") is None:
            return []
        if end["end"] % m or (start.get("end") is not None and start["end"] % m):
            raise _bad(self.options.path, "the checkpoint's offsets were written with another "
                       f"window slide than {m}", "start the query from a fresh checkpoint")
        p = self._plan_files(start.get("files") or [], list(end["files"]))
        k_from = None if start.get("end") is None else start["end"] // m
        k_to = end["end"] // m
        if self.options.state_dir and p.stateful and p.sequential:
            return self._stateful_partitions(p, start, end, k_from, k_to)
        # Finite look-back (stateless, FIR, IIR filters: udfs/kernels/filters.py): the new
        # windows run in parallel partitions, each warmed up on the files before it.
        return p.partitions(k_from, k_to, flush=bool(end.get("final")),
                            partition_samples=self._batch_partition_samples(p, k_from, k_to))

    def _batch_partition_samples(self, p: WavPlan, k_from, k_to) -> int | None:
        o = self.options
        if o.tasks is None:
            return None
        first = k_from if k_from is not None else (_k_range(p.runs[0], o.window, o.slide)[0]
                                                   if p.runs else k_to)
        new = max(0, k_to - first) * o.slide
        return min(o.partition_samples, max(1 << 20, -(-new // o.tasks)))

    def _stateful_partitions(self, p: WavPlan, start: dict, end: dict, k_from, k_to):
        """One partition of all the new windows, in order, carrying the Evaluator's state
        through ``state_dir`` (module docstring, *Checkpointed state*)."""
        o = self.options
        flush = bool(end.get("final")) and not start.get("final")
        found = plan_partitions(p.runs, o.window, o.slide, o.partition_samples, p.rate,
                                k_from=k_from, k_to=k_to, sequential=True, flush=flush)
        tasks = tuple(t for part in found for t in part.tasks)
        if not tasks and not flush:
            return []
        # No window before k_from (e.g. the first file was shorter than a window): the
        # program starts fresh, as in a batch read.
        first_k = _k_range(p.runs[0], o.window, o.slide)[0] if p.runs else None
        fresh = k_from is None or first_k is None or k_from <= first_k
        state_in = None if fresh else _state_file(o.state_dir, k_from)
        return [WavPartition(0, p.rate, tasks, (), None, flush, state_in,
                             _state_file(o.state_dir, k_to))]

    def commit(self, end: dict) -> None:
        pass  # nothing buffered: every batch is re-read from the files


class WavDataSource(DataSource):
    """The ``wavesql_wav`` Spark data source (batch and streaming reads).

    Examples
    --------
    >>> spark.dataSource.register(WavDataSource)              # doctest: +SKIP
    >>> spark.read.format("wavesql_wav").load("rec/").count()  # doctest: +SKIP
    """

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self):
        return plan(self.options, allow_empty=True).spark_ddl

    def reader(self, schema):
        return WavBatchReader(self.options, schema)

    def streamReader(self, schema):
        return WavStreamReader(self.options, schema)


_registered: "weakref.WeakSet" = weakref.WeakSet()


def register(spark) -> None:
    """Register ``wavesql_wav`` with a Spark session (once per session; idempotent)."""
    if spark in _registered:
        return
    spark.dataSource.register(WavDataSource)
    _registered.add(spark)


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)


def load(spark, schema: str | None = None, *, streaming: bool = False, **options):
    """Read WAV files as a DataFrame, checking the options and files here first.

    Unlike a bare ``spark.read.format("wavesql_wav")``, problems Spark would only report
    when the query runs (wrapped in its own exception) raise :class:`WavError` right away.

    Parameters
    ----------
    spark : SparkSession
    schema : str, optional
        Spark DDL of the columns wanted (default: all of the program's outputs).
    streaming : bool
        ``spark.readStream`` instead of ``spark.read``.
    **options
        The source options; lists become JSON, a Program its JSON, booleans true/false.

    Examples
    --------
    >>> df = load(spark, path="rec/", window=4096, channels=["ch1"])   # doctest: +SKIP
    """
    opts = {k: _option_text(v) for k, v in options.items() if v is not None}
    checked = plan(opts, streaming=streaming)
    register(spark)
    source = spark.readStream if streaming else spark.read
    return source.format(SHORT_NAME).schema(schema or checked.spark_ddl).options(**opts).load()


def batch_frame(spark, schema: str, options: Mapping[str, str], *, read=None):
    """A batch read planned here, on the driver, and run as ``mapInArrow`` tasks.

    The same partitions and the same reading as the ``wavesql_wav`` source's batch reader,
    without a Python data source: Spark plans one of those by starting Python processes on
    the driver (the schema, then the partitions) for every query, about 0.2 s of fixed cost
    that dominated short reads (benchmarks/signals/README.md). Here the plan is made in
    this process, and each task is one partition index handed to a reused Python worker.
    ``read`` is :func:`plan`'s (a header cache).
    """
    from pyspark.sql.types import _parse_datatype_string

    opts = WavOptions.parse(options)
    checked = plan(opts, read=read)
    struct = _parse_datatype_string(schema)
    target = _target_schema(checked, struct)
    parts = checked.partitions()
    program_json, channels, stateful = checked.program_json, checked.channels, checked.stateful
    settings = storage.current()  # the tasks reach the files' store as the driver does

    def wav_scan(batches):  # the name shows in Spark's plans: MapInArrow wav_scan(id)
        storage.use(settings)
        for b in batches:
            for i in b.column(0).to_pylist():
                for batch in read_partition(parts[i], opts, program_json, channels, stateful):
                    yield conform(batch, target)

    n = len(parts)
    return spark.range(0, n, 1, max(1, n)).mapInArrow(wav_scan, struct)
