"""Signals stored as tables: one row per sample in CSV, Parquet or JSON files.

``CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT) RATE 64 HZ FROM 'acc/' FORMAT csv``: each
row is one sample of every channel, a column per channel (named as the channels, any
case). Where a row sits on the signal's timeline comes from, in this order:

- ``OPTIONS (sample_column = 'n')``: an integer column holding the sample number (sample
  ``n`` is at ``EPOCH + n / RATE``);
- ``OPTIONS (time_column = 'ts')``: a timestamp column; the row is sample
  ``round((ts - EPOCH) * RATE)`` -- the nearest sample, so timestamps written to the
  microsecond (20.8 us apart at 48 kHz) land exactly;
- neither: the rows in file order, the files in name order, one after the other from
  sample 0.

Rows may be in any order within a file; samples missing from the numbering are **gaps**,
exactly as between WAV files: windows next to a gap are partial and a stateful filter starts
again after it. A sample number held by two rows (in one file or two) is an
``OVERLAPPING_SAMPLES`` error naming both, a NULL or fractional sample number or timestamp
is ``MALFORMED_ROW`` naming the file and row: nothing is dropped or averaged silently. A
NULL channel value is a NaN sample (it shows in every statistic over it).

How it runs: the planner reads each file's sample numbers in Spark tasks (only that
column; of a Parquet file only the footer, where a row group's statistics show it holds
exactly the samples from its minimum to its maximum), and places each gap-free *run* of rows on
the timeline as a placement (sources/placed.py); from there it is the WAV scan's plan --
the same windows, partitions and warm-ups of stateful filters -- and each partition's task
reads the files its runs are in (through wavesql.storage, so any location works), sorts
their rows by sample number and runs the same window and signal-function code as a WAV
scan. Every signal function, window and SYNC then works as over a WAV signal.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.sources.placed import Frames
from wavesql.spark_errors import runtime_errors

#: FORMATs a signal may be read from as a table, and the file suffixes of a folder's files
SUFFIXES = {"csv": (".csv",), "parquet": (".parquet", ".parq"),
            "json": (".json", ".jsonl", ".ndjson")}
FORMATS = tuple(SUFFIXES)
#: the OPTIONS a table signal takes (the CSV reader's own: ``delimiter``, ``header``)
OPTIONS = ("sample_column", "time_column", "delimiter", "header")


@dataclass(frozen=True)
class RowsPlacement:
    """A gap-free run of rows on the signal's timeline: rows ``row .. row + frames - 1`` of
    one *unit* of a file -- the whole file, or one Parquet row group (``group``) --, its
    rows taken in sample order, are samples ``start_sample ..``."""

    path: str
    info: Frames
    start_sample: int
    group: int  # the Parquet row group, -1: the whole file
    row: int
    samples: object = None  # in the task: the samples, read from the unit when first asked

    @property
    def end_sample(self) -> int:
        return self.start_sample + self.info.frames


@dataclass(frozen=True)
class Layout:
    """How to read a table signal's files: ``channels`` (declared names), the position
    column (``sample_column`` or ``time_column``, or neither), the signal's timebase."""

    format: str
    channels: tuple[str, ...]
    sample_column: str | None
    time_column: str | None
    rate: float
    epoch_us: int
    delimiter: str = ","
    header: bool = True

    @classmethod
    def of(cls, signal) -> "Layout":
        options = {k.lower(): v for k, v in signal.options}
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}`: unknown option "
                               f"`{unknown[0]}`", hint=f"options here: {', '.join(OPTIONS)}")
        if options.get("sample_column") and options.get("time_column"):
            raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}`: give "
                               "sample_column or time_column, not both",
                               hint="the sample number places a row exactly; use it alone")
        return cls(signal.format, tuple(c.name for c in signal.channels),
                   options.get("sample_column") or None, options.get("time_column") or None,
                   float(signal.rate_hz), int(signal.epoch_us),
                   options.get("delimiter", ","),
                   options.get("header", "true").lower() not in ("false", "0", "no"))

    @property
    def position(self) -> str | None:
        return self.sample_column or self.time_column


def list_files(path: str, fmt: str) -> list[str]:
    """The files of a signal at ``path`` in FORMAT ``fmt``: the file itself, a folder's files
    with the format's suffixes (any case), or a glob's files; sorted by name."""
    return [e.location for e in storage.files(path, suffix=SUFFIXES[fmt])]


# ------------------------------------------------------------------------------- reading
def read_file(path: str, layout: Layout, columns) -> "pyarrow.Table":
    """Columns ``columns`` (declared names, any case in the file) of file ``path``, named
    as declared; ``UNKNOWN_COLUMN`` naming the file when one is missing."""
    with _open(path) as f:
        if layout.format == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            table = pf.read(columns=[_find(names, c, path) for c in columns])
        elif layout.format == "csv":
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(f, **_csv_options(layout))
            if not layout.header:
                table = table.rename_columns(_headerless(layout, table.column_names))
        else:
            import pyarrow.json as pjson

            table = pjson.read_json(f)
    names = table.column_names
    table = table.select([_find(names, c, path) for c in columns])
    return table.rename_columns(list(columns))


def _csv_options(layout: Layout) -> dict:
    import pyarrow.csv as pcsv

    return {"read_options": pcsv.ReadOptions(autogenerate_column_names=not layout.header),
            "parse_options": pcsv.ParseOptions(delimiter=layout.delimiter)}


def _headerless(layout: Layout, names: list[str]) -> list[str]:
    """A CSV file without a header: its columns are the position column (if any), then the
    channels in declared order."""
    order = ([layout.position] if layout.position else []) + list(layout.channels)
    return order[:len(names)] + names[len(order):]


def _open(path: str):
    """``path`` as a pyarrow file: its readers decode without holding the GIL when they
    read through pyarrow's own filesystems (through a Python file object, 1.5-3x slower
    here, measured on 1 M-row groups)."""
    if storage.is_remote(path):
        fs, inner = storage.resolve(path)
        try:
            return fs.open_input_file(inner)
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - a store's own error, said plainly
            raise storage.translate(e, path, "opening it") from None
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem().open_input_file(path)


def _find(names, wanted: str, path: str) -> str:
    for name in names:
        if name.lower() == wanted.lower():
            return name
    from wavesql.errors import did_you_mean

    raise WaveSQLError("UNKNOWN_COLUMN", f"{path}: no column `{wanted}`",
                       hint=did_you_mean(wanted, names, "columns")
                       or f"its columns: {', '.join(names)}")


def sample_numbers(table, layout: Layout, path: str) -> np.ndarray:
    """The sample number of each row of ``table`` (its position column), int64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(layout.position).combine_chunks()
    if column.null_count:
        row = int(pc.index(pc.is_null(column), True).as_py())
        raise WaveSQLError("MALFORMED_ROW", f"{path}: row {row + 1} has a NULL "
                           f"`{layout.position}`", hint="every sample needs its place on "
                           "the timeline")
    if layout.sample_column:
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype.kind == "f":
            whole = np.isfinite(values) & (values == np.round(values))
            if not whole.all():
                row = int(np.argmin(whole))
                raise WaveSQLError("MALFORMED_ROW", f"{path}: row {row + 1}: sample number "
                                   f"{values[row]!r} is not a whole number",
                                   hint="sample numbers count samples from 0")
        elif values.dtype.kind not in "iu":
            raise WaveSQLError("MALFORMED_ROW", f"{path}: `{layout.position}` holds "
                               f"{column.type}, not sample numbers",
                               hint="an integer column, or name a timestamp: time_column")
        return values.astype(np.int64, copy=False)
    if not pa.types.is_timestamp(column.type):
        column = _timestamps(column, layout.position, path)
    micros = pc.cast(column, pa.timestamp("us", column.type.tz), safe=False).cast(pa.int64())
    return to_samples(micros.to_numpy(zero_copy_only=False), layout.rate, layout.epoch_us)


def _timestamps(column, name: str, path: str):
    """Text read as timestamps: ISO 8601, UTC unless it names a zone."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for target in (pa.timestamp("us"), pa.timestamp("us", "UTC")):  # naive, then zoned
        try:
            return pc.cast(column, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    raise WaveSQLError("MALFORMED_ROW", f"{path}: `{name}` holds {column.type} that is not "
                       "timestamps", hint="ISO timestamps, e.g. 2024-01-01 00:00:00.015625")


def to_samples(micros: np.ndarray, rate: float, epoch_us: int) -> np.ndarray:
    """The nearest sample number of each time (microseconds since 1970).

    Exact for a whole-number rate: ``t - epoch = q s + r us`` gives ``q * rate +
    round(r * rate / 1e6)`` with no product beyond int64 (10 hours at 48 kHz from 1970 would
    overflow ``t * rate``). Ties round half to even."""
    offset = micros.astype(np.int64) - np.int64(epoch_us)
    if float(rate).is_integer():
        seconds, rest = np.divmod(offset, 1_000_000)
        return seconds * np.int64(rate) + np.rint(rest * (rate / 1e6)).astype(np.int64)
    return np.rint(offset * (rate / 1e6)).astype(np.int64)


def file_runs(path: str, layout: Layout) -> tuple[list[tuple[int, int, int, int]], int]:
    """``(runs, rows)`` of one file: its gap-free runs ``(start sample, frames, group, first
    row in sample order)`` and its row count (module docstring). Without a position column
    each unit is one run from its first row's place (the caller shifts the file behind the
    files before it).

    A Parquet file is read per row group, and a row group whose statistics say it holds
    exactly the samples ``min .. max`` (``max - min + 1`` rows) is placed from them alone:
    whether it is in order, or holds a sample twice (then ``OVERLAPPING_SAMPLES``), is seen
    when a task reads it. Other row groups are read here (their position column only); a
    CSV or JSON file is parsed whole anyway, so its channels are checked to be numbers here
    too (``MALFORMED_ROW`` before anything runs, not in a task: a continuous query then
    refuses the file before its micro-batch is logged, sources/table_stream.py)."""
    if layout.format == "parquet":
        return _parquet_runs(path, layout)
    table = read_file(path, layout, list(layout.channels)
                      + ([layout.position] if layout.position else []))
    channel_samples(table, layout, path)
    if layout.position is None:
        rows = table.num_rows
        return ([(0, rows, -1, 0)] if rows else []), rows
    numbers = sample_numbers(table, layout, path)
    return [(a, n, -1, r) for a, n, r in sample_runs(np.sort(numbers, kind="stable"), path)], int(
        numbers.size)


def _parquet_runs(path: str, layout: Layout):
    import pyarrow as pa
    import pyarrow.parquet as pq

    runs, at = [], 0
    with _open(path) as f:
        pf = pq.ParquetFile(f)
        meta = pf.metadata
        for name in layout.channels:  # numbers, from the footer (as CSV's are checked)
            dtype = pf.schema_arrow.field(_find(pf.schema_arrow.names, name, path)).type
            if not (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
                    or pa.types.is_decimal(dtype) or pa.types.is_null(dtype)
                    or pa.types.is_boolean(dtype)):
                raise _not_numbers(path, name, dtype)
        column = (_find(pf.schema_arrow.names, layout.position, path)
                  if layout.position else None)
        index = pf.schema_arrow.names.index(column) if column else None
        for g in range(meta.num_row_groups):
            rows = meta.row_group(g).num_rows
            if rows == 0:
                continue
            if column is None:  # rows in file order
                runs.append((at, rows, g, 0))
            else:
                stats = meta.row_group(g).column(index).statistics
                whole = (layout.sample_column is not None and stats is not None
                         and stats.has_min_max and isinstance(stats.min, int)
                         and stats.max - stats.min + 1 == rows and stats.null_count == 0)
                if whole:
                    runs.append((int(stats.min), rows, g, 0))
                else:
                    table = pf.read_row_group(g, columns=[column])
                    numbers = np.sort(sample_numbers(
                        table.rename_columns([layout.position]), layout, path), kind="stable")
                    runs.extend((a, n, g, r) for a, n, r in sample_runs(numbers, path))
            at += rows
    return runs, at


def sample_runs(numbers: np.ndarray, path: str) -> list[tuple[int, int, int]]:
    """``(start sample, frames, first row)`` of each gap-free run of sorted ``numbers``;
    a number held twice is ``OVERLAPPING_SAMPLES``."""
    if numbers.size == 0:
        return []
    step = np.diff(numbers)
    if (step == 0).any():
        twice = int(numbers[int(np.argmax(step == 0))])
        raise WaveSQLError("OVERLAPPING_SAMPLES", f"{path}: two rows hold sample {twice}",
                           hint="every sample number may appear once")
    cuts = np.flatnonzero(step > 1) + 1
    firsts = np.concatenate(([0], cuts))
    lasts = np.concatenate((cuts, [numbers.size]))
    return [(int(numbers[a]), int(b - a), int(a)) for a, b in zip(firsts, lasts)]


def unit_samples(path: str, layout: Layout, group: int, parquet=None) -> np.ndarray:
    """A unit's channels (the file, or its row group ``group``) as ``(channels, rows)``
    float32, rows in sample order (NULL: NaN); ``OVERLAPPING_SAMPLES`` if two rows hold one
    sample. ``parquet``: the file, already open (a ``pyarrow.parquet.ParquetFile``)."""
    columns = list(layout.channels) + ([layout.position] if layout.position else [])
    if group < 0:
        table = read_file(path, layout, columns)
    else:
        import pyarrow.parquet as pq

        if parquet is None:
            with _open(path) as f:
                return unit_samples(path, layout, group, pq.ParquetFile(f))
        names = parquet.schema_arrow.names
        table = parquet.read_row_group(group, columns=[_find(names, c, path) for c in columns])
        table = table.rename_columns(columns)
    data = channel_samples(table, layout, path)
    if layout.position is not None:
        numbers = sample_numbers(table, layout, path)
        if (numbers[1:] <= numbers[:-1]).any():  # not in sample order
            order = np.argsort(numbers, kind="stable")
            sample_runs(numbers[order], path)  # two rows holding one sample: the error
            data = data[:, order]
    return data


def channel_samples(table, layout: Layout, path: str) -> np.ndarray:
    """``table``'s channels as ``(channels, rows)`` float32 (NULL: NaN); no copy of a
    single float32 channel without NULLs."""
    rows = []
    for name in layout.channels:
        column = table.column(name).combine_chunks()
        try:
            rows.append(column.to_numpy(zero_copy_only=False).astype(np.float32, copy=False))
        except (TypeError, ValueError):
            raise _not_numbers(path, name, column.type) from None
    return rows[0][None, :] if len(rows) == 1 else np.stack(rows)


def _not_numbers(path: str, name: str, dtype) -> WaveSQLError:
    return WaveSQLError("MALFORMED_ROW", f"{path}: channel `{name}` holds {dtype}, not "
                        "numbers", hint="one number per row and channel")


# ------------------------------------------------------------------------------- planning
def placements(spark, signal, layout: Layout, files: list[str]) -> list[RowsPlacement]:
    """Every run of every file on the timeline, in order (a Spark job reads the files'
    sample numbers in parallel); overlaps between files are ``OVERLAPPING_SAMPLES``."""
    settings = storage.current()

    def runs_of_file(item):
        storage.use(settings)
        return item[0], file_runs(item[1], layout)

    slices = max(1, min(len(files), 4 * spark.sparkContext.defaultParallelism))
    with runtime_errors():  # a bad file's WaveSQLError, not a worker's traceback
        found = (spark.sparkContext.parallelize(list(enumerate(files)), slices)
                 .map(runs_of_file).collect())
    return place(files, [runs for _, runs in sorted(found, key=lambda x: x[0])], layout)


def place(files: list[str], found, layout: Layout) -> list[RowsPlacement]:
    """The runs ``found[i] = file_runs(files[i], layout)`` of name-ordered ``files`` on the
    timeline, in order; overlaps between files are ``OVERLAPPING_SAMPLES``."""
    placed, shift = [], 0
    for path, (runs, rows) in zip(files, found):
        for start, frames, group, row in runs:
            placed.append(RowsPlacement(path, Frames(frames), start + shift, group, row))
        if layout.position is None:  # rows in file order, the files one after the other
            shift += rows
    placed.sort(key=lambda p: p.start_sample)
    for before, after in zip(placed, placed[1:]):
        if after.start_sample < before.end_sample:
            raise WaveSQLError(
                "OVERLAPPING_SAMPLES",
                f"{after.path} (samples {after.start_sample}..{after.end_sample - 1}) overlaps "
                f"{before.path} (samples {before.start_sample}..{before.end_sample - 1})",
                hint="every sample number may appear once in a signal's files")
    return placed


def batch_frame(spark, signal, program, width: int, slide: int, *, lookback: int | None,
                sequential: bool, tasks: int):
    """A batch read of table signal ``signal`` through ``program`` in ``[SAMPLES width
    SLIDE slide]`` windows: a DataFrame of the program's output (module docstring)."""
    from pyspark.sql import functions as F

    from wavesql.sources.placed import placed_plan, scan_part
    from wavesql.sqltext import quote

    layout = Layout.of(signal)
    files = list_files(signal.path, signal.format)
    placed = placed_plan(signal, program, placements(spark, signal, layout, files), width,
                         slide, path=signal.path, lookback=lookback, sequential=sequential,
                         tasks=tasks)
    struct_type = placed.struct_type
    count = len(placed.parts)
    if not placed.needed():
        return spark.createDataFrame([], struct_type)
    settings = storage.current()

    def scan(batches):
        storage.use(settings)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                with sampler(layout) as samples_of:
                    yield from scan_part(placed, index, samples_of).to_batches()

    frame = spark.range(count, numPartitions=count).mapInArrow(scan, struct_type)
    return frame.select(*[F.col(quote(f.name)) for f in struct_type.fields])


@contextlib.contextmanager
def sampler(layout: Layout):
    """``samples_of(placement, lo, hi)`` for :func:`.placed.scan_part` over a task's
    placements (samples ``[lo, hi)`` of the timeline), reading each unit once; the files
    it opened are closed when the block ends."""
    units = _Units(layout)

    def samples_of(f: RowsPlacement, lo: int, hi: int):
        return _Slice(units, f.path, f.group, f.row + lo - f.start_sample)

    try:
        yield samples_of
    finally:
        units.close()


class _Units:
    """The units a task has read, the last two kept: windows are read in timeline order,
    so a task holds about one unit at a time, not its whole share of the signal. Parquet
    files stay open (their footers parsed once) until the task ends."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.kept: dict[tuple[str, int], np.ndarray] = {}
        self.files: dict[str, object] = {}

    def get(self, path: str, group: int) -> np.ndarray:
        key = (path, group)
        if key not in self.kept:
            if len(self.kept) >= 2:
                del self.kept[next(iter(self.kept))]
            try:
                self.kept[key] = unit_samples(path, self.layout, group,
                                              self._parquet(path, group))
            except FileNotFoundError:
                raise WaveSQLError("MISSING_PATH", f"{path}: the file disappeared after the "
                                   "query was planned", hint="files of a signal must stay "
                                   "in place while it is read") from None
        return self.kept[key]

    def _parquet(self, path: str, group: int):
        if group < 0:
            return None
        if path not in self.files:
            import pyarrow.parquet as pq

            self.files[path] = pq.ParquetFile(_open(path))
        return self.files[path]

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()


class _Slice:
    """A placement's samples as the WAV scan reads them (``samples[chans, a:b]``), read
    from its unit when first asked for."""

    def __init__(self, units: _Units, path: str, group: int, first: int):
        self.units, self.path, self.group, self.first = units, path, group, first

    def __getitem__(self, key):
        chans, span = key
        data = self.units.get(self.path, self.group)
        if list(chans) == list(range(chans[0], chans[0] + len(chans))):
            chans = slice(chans[0], chans[0] + len(chans))  # a view, not a copy
        return data[chans, self.first + span.start:self.first + span.stop]


def check_files(signal) -> None:
    """At CREATE: the signal's files exist, and the first one has every channel and the
    position column (``UNKNOWN_COLUMN`` naming it otherwise)."""
    layout = Layout.of(signal)
    files = list_files(signal.path, signal.format)
    if not files:
        raise WaveSQLError("MISSING_PATH", f"no {signal.format} files at `{signal.path}` "
                           f"(looked for {', '.join('*' + s for s in SUFFIXES[signal.format])})")
    names = _column_names(files[0], layout)
    for column in list(layout.channels) + ([layout.position] if layout.position else []):
        _find(names, column, files[0])
    if layout.position and layout.position.lower() in {c.lower() for c in layout.channels}:
        raise WaveSQLError("INVALID_OPTION", f"`{layout.position}` is a channel of "
                           f"`{signal.name}`; it cannot also be its sample numbers or times",
                           hint="declare the channels only: the position column is named "
                                "in OPTIONS")


def _column_names(path: str, layout: Layout) -> list[str]:
    """The columns of a file, reading no more of it than its schema needs."""
    with _open(path) as f:
        if layout.format == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(f).schema_arrow.names
        if layout.format == "csv":
            import pyarrow.csv as pcsv

            names = pcsv.open_csv(f, **_csv_options(layout)).schema.names
            return names if layout.header else _headerless(layout, names)
        import pyarrow.json as pjson

        return pjson.open_json(f).schema.names


__all__ = ["FORMATS", "Layout", "RowsPlacement", "batch_frame", "check_files", "file_runs",
           "list_files", "place", "placements", "sampler", "to_samples"]
