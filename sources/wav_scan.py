"""Reading a WAV scan's partitions: windows cut from big blocks, the program run over them.

A partition (:class:`.wav_plan.WavPartition`) is read with :mod:`wavesql.udfs.wav` in big
blocks, cut into sample windows on the absolute grid (:func:`iter_window_blocks`), and the
query's signal stage (a :class:`wavesql.udfs.program.Program`) runs over whole blocks of
windows (:func:`read_partition`): Spark gets Arrow record batches of the program's output
(:class:`WavScan`, :func:`target_schema`) -- raw samples never cross into the JVM unless the
program asks for them (the identity program does: one SigSeg column per channel).

A stateful program's state can be carried between micro-batches in state files
(:func:`state_file`, :func:`load_states`; :mod:`.wav_stream`, *Checkpointed state*).

Errors in the workers: a planned file that vanished is ``MISSING_PATH``, one that shrank
``TRUNCATED_FILE``; a checkpoint's missing, unreadable or pickled state is ``MISSING_PATH``,
``CORRUPT_FILE`` or ``CHECKPOINT_MISMATCH`` (:class:`~wavesql.udfs.wav.WavError`).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import FilePlacement, WavError, iter_segments

from .arrow import conform
from .wav_plan import (DEFAULTS, WavOptions, WavPartition, WavPlan, WindowTask, bad_option,
                       load_program, plan)

__all__ = ["iter_window_blocks", "read_partition", "state_file", "load_states", "save_states",
           "target_schema", "WavScan"]


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
                       block_samples: int = DEFAULTS["block_samples"],
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
    >>> from wavesql.sources.wav_plan import runs_of, window_task
    >>> p = tempfile.mkdtemp() + "/a.wav"
    >>> write_wav(p, np.zeros(10), 1000)
    >>> run = runs_of(plan_timeline([p], 1000))[0]
    >>> [(s.tolist(), [c.shape if hasattr(c, "shape") else len(c) for c in ch])
    ...  for s, ch in iter_window_blocks(window_task(run, 4, 4, 0, 3), 4, 4, [0])]
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
    prog = load_program(program_json)
    evaluator = Evaluator(prog)
    if part.state_in is not None:
        evaluator.states = load_states(part.state_in)
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
        save_states(part.state_out, evaluator.states)


def state_file(folder: str, k: int) -> str:
    """Where the Evaluator's states at grid window ``k`` are kept under ``folder``
    (``state_dir``)."""
    return storage.join(folder, f"k={k:015d}.state")


def load_states(path: str) -> dict:
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


def save_states(path: str, states_: dict) -> None:
    """Write the Evaluator's states (:func:`load_states` reads them back)."""
    from wavesql.udfs import states

    # whole or not at all (a rename locally, one PUT on an object store): a re-run of the
    # batch rewrites the same state
    storage.write_bytes(path, states.dumps(states_))


# ---------------------------------------------------------------------------------- Spark
def target_schema(p: WavPlan, schema):
    """The Arrow schema the scan hands Spark for the Spark ``schema`` (a StructType), checked
    to be outputs of the plan's program."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    produced = load_program(p.program_json).arrow_schema().names
    absent = [f.name for f in target if f.name not in produced]
    if absent:
        raise bad_option(p.options.path, f"schema column(s) {absent} are not outputs of "
                         f"the program (it outputs {produced})")
    return target


class WavScan:
    """What a reader carries to the workers: options, resolved program, target schema."""

    def _init_scan(self, options, schema, streaming: bool, **plan_options):
        self.options = WavOptions.parse(options)
        if self.options.storage_secret:  # Spark plans this in a Python process of its own
            storage.use(storage.Settings.from_json(self.options.storage_secret))
        # driver-side checks, early (plan_options: a placed source's, table_stream.py)
        self._plan = plan(self.options, streaming=streaming, **plan_options)
        self._target = target_schema(self._plan, schema)
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

