"""Ranges of event time read straight from a stream's Parquet files (no Spark import).

The time-chunked OVER windows (planner/physical/chunked_windows.py) need, per chunk of event
time, the chunk's own rows plus the rows its frames reach (*context*). Through Spark that is a
scan, an ``explode`` of every row into its chunks, a shuffle and a sort by chunk before the
numpy kernel sees a row: on the TiLT trend query 2.1 s of which the kernel is 0.3. When the
windows read a catalog Parquet stream directly, this module does it TiLT's way instead: the row
groups' min/max statistics of the event-time column say which row groups a time range needs
(:func:`index`), and each Spark task reads just those with pyarrow, keeps the rows of its range
and marks the context (:func:`read_range`); the rows never enter the JVM before the windows.

Only files Spark would read the same way qualify: :func:`index` returns None (the planner
then keeps Spark's scan) when a footer is unreadable, a needed column is missing or of
another type than the stream declares, the event time lacks statistics or holds NULLs, or
a timestamp is not microsecond/millisecond precision.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

#: Column the context flag travels in (udfs/time_windows.py reads it).
from wavesql import storage
from wavesql.udfs.time_windows import CONTEXT

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group and the span of its event time (inclusive, microseconds)."""

    path: str
    index: int
    rows: int
    lo: int
    hi: int
    #: No punctuation rows: ``lo`` and ``hi`` are the times of data rows.
    pure: bool = True


@dataclass(frozen=True)
class Range:
    """One task's share: own rows ``start <= t < end``; reads ``need_lo <= t <= need_hi``
    from ``groups`` (the row groups that can hold such rows). With neighbours (a RESAMPLE's,
    across a gap however long), also the rows at the latest time before ``start`` and at
    the earliest from ``end`` on: ``before`` / ``after`` are the further row groups that
    can hold them, nearest first, read only until they are found."""

    start: int
    end: int
    need_lo: int
    need_hi: int
    groups: tuple[RowGroup, ...]
    neighbours: bool = False
    before: tuple[RowGroup, ...] = ()
    after: tuple[RowGroup, ...] = ()
    #: how the task reaches the files' store (the driver's settings when it planned)
    settings: storage.Settings = storage.Settings()


def index(files, time_col: str, wanted: dict[str, pa.DataType], utc_naive: bool,
          progress: str | None = None, no_nulls=(), null_times: bool = False,
          integer_time: bool = False):
    """The row groups of ``files`` with their event-time spans, or None when a file is not
    read by pyarrow exactly as Spark reads it with the stream's schema.

    ``wanted`` maps each column to read to the Arrow type Spark gives it; a TIMESTAMP column
    may be stored with milliseconds, and without a time zone only when ``utc_naive`` (Spark
    then reads the stored value as UTC, which is this session's time zone); with
    ``integer_time`` an integer time column's span is its values. Also None when a
    ``no_nulls`` column may hold NULLs (by its statistics), or the time column may (unless
    ``null_times``: a reader that drops rows without a time, as an ASOF JOIN's right side;
    a group of NULL times only is left out)."""

    groups = []
    for path in files:
        try:
            meta = parquet_file(path).metadata
            schema = meta.schema.to_arrow_schema()
        except Exception:  # noqa: BLE001 -- Spark's scan reports unreadable files itself
            return None
        for name, want in wanted.items():
            if schema.get_field_index(name) < 0 or not _readable(schema.field(name).type, want,
                                                                 utc_naive):
                return None
        paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
        col = paths.index(time_col)
        punct = paths.index(progress) if progress else None
        checked = [paths.index(c) for c in no_nulls]
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            if rg.num_rows == 0:
                continue
            if any(_may_hold_nulls(rg.column(c).statistics) for c in checked):
                return None
            st = rg.column(col).statistics
            if null_times and st is not None and st.null_count == rg.num_rows:
                continue  # no row with a time
            span = _statistics_span(st, null_times, integer_time)
            if span is None:
                return None
            lo, hi = span
            pure = True
            if punct is not None:
                pst = rg.column(punct).statistics
                pure = pst is not None and pst.null_count == rg.num_rows
            groups.append(RowGroup(path, g, rg.num_rows, lo, hi, pure))
    return groups


def _readable(stored: pa.DataType, want: pa.DataType, utc_naive: bool) -> bool:
    if pa.types.is_timestamp(want):
        return (pa.types.is_timestamp(stored) and stored.unit in ("ms", "us")
                and (stored.tz in ("UTC", "+00:00", "Etc/UTC") or (stored.tz is None
                                                                    and utc_naive)))
    return stored.equals(want)


def micros(value) -> int | None:
    """Microseconds since the epoch of a footer statistic (naive values are UTC); None for
    anything else."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _statistics_span(st, nulls: bool = False, integer: bool = False):
    """``(lo, hi)`` microseconds (an ``integer`` column: its values) of a time column's
    statistics, None if unusable (absent, NULLs counted unless ``nulls``, or beyond what
    Python's datetime holds)."""
    if st is None or (_may_hold_nulls(st) and not nulls) or not st.has_min_max:
        return None
    if integer and type(st.min) is int and type(st.max) is int:
        return st.min, st.max
    try:
        lo, hi = micros(st.min), micros(st.max)
    except (OverflowError, ValueError):
        return None
    return None if lo is None or hi is None else (lo, hi)


def ranges(groups, tasks: int, before: int, after: int, min_span: int,
           neighbours: bool = False, align: int | None = None) -> list[Range]:
    """About ``tasks`` consecutive time ranges of equal row counts (by the row groups'
    density), each at least ``min_span`` long, with the row groups each one needs: its
    own rows and the ``before`` / ``after`` microseconds its frames reach beyond them;
    with ``neighbours``, also those that can hold the latest rows before the range and the
    earliest after it (every row of a row group lies within its min/max, and the min and max
    of a row group without punctuation rows are data rows: the latest data row before
    ``start`` is at or after each such group's max below ``start``, or min below it).
    ``align``: interior boundaries fall on ``k * align + 1`` (us), so that each range owns
    whole tumbling windows ``(k * align - align, k * align]``."""
    lo = min(g.lo for g in groups)
    hi = max(g.hi for g in groups)
    cuts = _cuts(groups, lo, hi, tasks, min_span)
    if align:  # whole tumbling windows (t - align, t] per range: cuts at k * align + 1
        cuts = sorted({lo, hi + 1} | {(c - 1) // align * align + 1 for c in cuts[1:-1]
                                      if lo < (c - 1) // align * align + 1 <= hi})
    out = []
    for start, end in zip(cuts, cuts[1:]):
        if any(g.hi >= start and g.lo <= end - 1 for g in groups):  # rows of its own
            out.append(span_range(groups, start, end, before, after, neighbours))
    return out


def span_range(groups, start: int, end: int, before: int = 0, after: int = 0,
               neighbours: bool = False) -> Range:
    """The :class:`Range` ``start <= t < end`` of ``groups`` (:func:`ranges`: what it
    reads), whether or not any row lies in it; also how an ASOF JOIN's right side is read
    over the ranges its left side was cut into (planner/physical/direct_asof.py)."""
    need_lo, need_hi = start - before, end - 1 + after
    read = {g for g in groups if g.hi >= need_lo and g.lo <= need_hi}
    further_before = further_after = ()
    if neighbours:
        # a pure row group's min and max are data rows: one wholly before the range
        # holds a row at its max, one reaching into it a row at its min
        floor = max((g.hi if g.hi < start else g.lo for g in groups
                     if g.pure and g.lo < start), default=None)
        further_before = tuple(sorted((g for g in groups if g not in read and g.lo < start
                               and (floor is None or g.hi >= floor)),
                              key=lambda g: -g.hi))
        ceiling = min((g.lo if g.lo >= end else g.hi for g in groups
                       if g.pure and g.hi >= end), default=None)
        further_after = tuple(sorted((g for g in groups if g not in read and g.hi >= end
                              and (ceiling is None or g.lo <= ceiling)),
                             key=lambda g: g.lo))
    return Range(start, end, need_lo, need_hi, tuple(g for g in groups if g in read),
                 neighbours, further_before, further_after, storage.current())


def _cuts(groups, lo: int, hi: int, tasks: int, min_span: int) -> list[int]:
    """Range boundaries from ``lo`` to ``hi + 1``: quantiles of the rows, each row group's
    rows taken as spread evenly over its span."""
    total = sum(g.rows for g in groups)
    points = sorted({lo, hi + 1} | {g.lo for g in groups} | {g.hi + 1 for g in groups})
    xs = np.array(points, dtype=np.float64)
    density = np.zeros(len(xs))  # rows up to each point
    for g in groups:
        span = max(g.hi + 1 - g.lo, 1)
        density += g.rows * np.clip((xs - g.lo) / span, 0.0, 1.0)
    cuts = [lo]
    for k in range(1, max(1, tasks)):
        t = int(np.interp(total * k / tasks, density, xs))
        if t - cuts[-1] >= min_span and hi + 1 - t >= min_span:
            cuts.append(t)
    cuts.append(hi + 1)
    return cuts


def read_untimed(files, columns: list[str], time_col: str, progress: str | None,
                 wanted: dict[str, pa.DataType], settings: storage.Settings) -> pa.Table:
    """The data rows of ``files`` without a time (from the row groups whose statistics
    may count NULL times), with ``columns`` as Spark types them: what an ``ASOF LEFT
    JOIN`` keeps unmatched, which no range of time holds."""
    import pyarrow.compute as pc

    storage.use(settings)
    read = {c: wanted[c] for c in dict.fromkeys(columns + [time_col]
                                                 + ([progress] if progress else []))}
    groups = []
    for path in files:
        meta = parquet_file(path).metadata
        col = [meta.schema.column(i).path for i in range(meta.num_columns)].index(time_col)
        groups += [RowGroup(path, g, meta.row_group(g).num_rows, 0, 0)
                   for g in range(meta.num_row_groups)
                   if _may_hold_nulls(meta.row_group(g).column(col).statistics)]
    table = _read(groups, read, progress)
    return table.filter(pc.is_null(table.column(time_col))).select(columns)


def read_range(r: Range, columns: list[str], time_col: str, progress: str | None,
               wanted: dict[str, pa.DataType], context: bool = True) -> pa.Table:
    """The rows of ``r`` (own and context, ``CONTEXT`` true for context; ``context``
    False: no such column) with ``columns`` as Spark types them; punctuation rows
    (``progress`` not NULL) are not data."""
    import pyarrow.compute as pc

    storage.use(r.settings)
    read = {c: wanted[c] for c in dict.fromkeys(columns + [time_col]
                                                 + ([progress] if progress else []))}
    table = _read(r.groups, read, progress)
    us = _micros(table, time_col)

    def needed(us):
        return pc.and_(pc.greater_equal(us, r.need_lo), pc.less_equal(us, r.need_hi))

    keep = None
    if r.neighbours:
        pieces = [table]
        below = _nearest(us, r.start, r.before, "below", read, progress, time_col, pieces)
        above = _nearest(us, r.end, r.after, "above", read, progress, time_col, pieces)
        if len(pieces) > 1:
            table = pa.concat_tables(pieces)
            us = _micros(table, time_col)
        keep = needed(us)
        for t in (below, above):
            if t is not None:
                keep = pc.or_(keep, pc.equal(us, t))
    elif len(us):
        bounds = pc.min_max(us)  # row groups wholly inside the range: nothing to filter
        if us.null_count or bounds["min"].as_py() < r.need_lo \
                or bounds["max"].as_py() > r.need_hi:
            keep = needed(us)  # (a NULL time is in no range)
    if keep is not None:
        table = table.filter(keep)
        us = _micros(table, time_col)
    if not context:
        return pa.table([table.column(c) for c in columns], names=columns)
    context = pc.or_(pc.less(us, r.start), pc.greater_equal(us, r.end))
    return pa.table([table.column(c) for c in columns] + [context], names=columns + [CONTEXT])


def parquet_file(location: str):
    """``pyarrow.parquet.ParquetFile`` of a local path or an object store's location
    (wavesql.storage: ranged reads of the footer and the row groups asked for)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(storage.open_input(location) if storage.is_remote(location)
                          else location)


def _read(groups, wanted: dict[str, pa.DataType], progress) -> pa.Table:
    """The data rows (punctuation rows left out) of ``groups``, each column as ``wanted``
    types it (files may store it differently: ms or us, the zone spelt otherwise, a
    required column beside an optional one)."""
    import pyarrow.compute as pc

    by_file: dict[str, list[int]] = {}
    for g in groups:
        by_file.setdefault(g.path, []).append(g.index)
    schema = pa.schema([pa.field(name, t) for name, t in wanted.items()])
    pieces = []
    for path, idx in by_file.items():
        try:
            piece = parquet_file(path).read_row_groups(idx, columns=list(wanted),
                                                       use_threads=False)
        except FileNotFoundError:
            raise ReadError("MISSING_PATH", path, "the file was removed after the query was "
                            "planned", "run the query again") from None
        except (OSError, pa.ArrowException) as err:
            reason = " ".join(str(err).split())  # one line: the driver reads it back
            raise ReadError("CORRUPT_FILE", path, f"cannot read its row groups {idx}: "
                            f"{reason}", "is the file complete? rewrite or remove it") from None
        pieces.append(pa.Table.from_arrays(
            [_as(piece.column(name), t) for name, t in wanted.items()], schema=schema))
    if not pieces:  # no row group (an ASOF JOIN's right side may have none in a range)
        return schema.empty_table()
    table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
    if progress and table.column(progress).null_count < table.num_rows:
        table = table.filter(pc.is_null(table.column(progress)))
    return table


class ReadError(ValueError):
    """A stream's file cannot be read in a task: ``str()`` names the file and carries the
    ``[CODE]`` the driver recovers from the worker's traceback (wavesql/spark_errors.py)."""

    def __init__(self, code: str, path: str, message: str, hint: str | None = None):
        self.code, self.path, self.message, self.hint = code, path, message, hint
        text = f"{path}: {message} [{code}]"
        super().__init__(text + (f" (hint: {hint})" if hint else ""))

    def __reduce__(self):  # intact when pickled out of a Spark Python worker
        return (ReadError, (self.code, self.path, self.message, self.hint))


def _micros(table: pa.Table, time_col: str):
    column = table.column(time_col)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us"))
    return column.cast(pa.int64())


def _nearest(us, edge: int, further, side: str, wanted, progress, time_col, pieces):
    """The latest time before ``edge`` (``side`` "below") or the earliest from it on
    ("above") among the rows read and, until it is found, the ``further`` row groups
    (nearest first; each one read is appended to ``pieces``)."""
    import pyarrow.compute as pc

    def best(times):
        if side == "below":
            return pc.max(pc.filter(times, pc.less(times, edge))).as_py()
        return pc.min(pc.filter(times, pc.greater_equal(times, edge))).as_py()

    found = best(us)
    for g in further:
        if found is not None and (g.hi < found if side == "below" else g.lo > found):
            break  # this group and the further ones hold nothing nearer
        table = _read([g], wanted, progress)
        pieces.append(table)
        t = best(_micros(table, time_col))
        if t is not None and (found is None or (t > found if side == "below" else t < found)):
            found = t
    return found


def _as(column: pa.ChunkedArray, want: pa.DataType) -> pa.ChunkedArray:
    return column if column.type.equals(want) else column.cast(want)


def _may_hold_nulls(st) -> bool:
    return st is None or st.null_count is None or st.null_count > 0


def filter_columns(spec) -> list[str]:
    """The columns a row filter (planner/physical/row_filter.py) reads."""
    if spec is None:
        return []
    op = spec[0]
    if op in ("and", "or"):
        return filter_columns(spec[1]) + filter_columns(spec[2])
    if op == "not":
        return filter_columns(spec[1])
    return [spec[2] if op == "compare" else spec[1]]


def evaluate_filter(spec, table: pa.Table):
    """The row filter's answer per row, with SQL's three values (NULL: the row is not
    kept) and Spark's NaN, which is greater than every number."""
    import pyarrow.compute as pc

    op = spec[0]
    if op == "and":
        return pc.and_kleene(evaluate_filter(spec[1], table), evaluate_filter(spec[2], table))
    if op == "or":
        return pc.or_kleene(evaluate_filter(spec[1], table), evaluate_filter(spec[2], table))
    if op == "not":
        return pc.invert(evaluate_filter(spec[1], table))
    if op == "is_null":
        return pc.is_null(table.column(spec[1]))
    if op == "column":
        return table.column(spec[1])
    _, how, name, value, floating = spec
    column = table.column(name)
    if floating:
        column = column.cast(pa.float64())  # Spark widens FLOAT to DOUBLE to compare
    result = getattr(pc, how)(column, value)
    if floating and how in ("greater", "greater_equal"):
        result = pc.or_kleene(result, pc.is_nan(column))  # NaN > every number
    return result
