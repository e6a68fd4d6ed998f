"""How the parallel RESAMPLE / ASOF JOIN (chunked_temporal.py) reads its inputs once and
spreads its chunks over Spark's partitions.

:class:`HeldInputs`: a catalog Parquet stream read as it is stays Spark's scan of its files
(columnar, pruned: read again at little cost), and its row count and span come from the
files' footers (file_ranges.py ``direct_groups``), with no job; any other input (CSV, JSON,
a view, a subquery, Kafka) becomes a lazy local checkpoint (``localCheckpoint(eager=False)``)
that the first job over it fills while it parses the input: every later job -- the
summaries, the context rows, the pass, or the SQL when the rule hands the query back --
reads the rows from the executors' block stores instead of parsing the text again. A local
checkpoint is not fault tolerant: an executor lost before the pass ran loses its blocks and
the query fails.

:func:`labels`: the value each chunk is grouped by, so that Spark's hash partitioning puts
every chunk in a partition of its own.
"""

from __future__ import annotations

import dataclasses

from .plan import SqlPlan


class HeldInputs:
    """The query's inputs, each read once (module docstring):
    :meth:`held` is an input's DataFrame as the rule reads it -- a Parquet stream read as it
    is stays Spark's scan of its files (its estimate comes from their footers:
    :meth:`footer`), any other input becomes a lazy local checkpoint, which the first job
    over it (the estimate, or for an ASOF's right side the summaries) fills while it reads
    the input, and every later job reads from the executors' block stores."""

    def __init__(self, plan: SqlPlan):
        self.plan = plan
        self.frames = dict(plan.frames)
        self.copies: dict[str, object] = {}   # name -> its held copy, once a job filled it
        self._held: dict[str, object] = {}

    def frame(self, name):
        return self.frames.get(name)

    def stream(self, name):
        """The catalog Parquet stream ``name`` scans as it is (no OPTIONS), else None."""
        s = self.plan.scans().get(name.lower())
        return s if s is not None and s.format == "parquet" and not dict(s.options) else None

    def held(self, name):
        if name not in self._held:
            frame = self.frames[name]
            self._held[name] = frame if self.stream(name) is not None else \
                frame.localCheckpoint(eager=False)
        return self._held[name]

    def filled(self, name) -> None:
        """A job over :meth:`held` ``name`` succeeded: its copy holds the input."""
        if self._held.get(name) is not self.frames[name]:
            self.copies[name] = self._held[name]

    def footer(self, name, time_field, columns=()):
        """``(rows with a time, first time, last time, NULLs in columns)`` of a Parquet
        stream read as it is, from its files' footers (no job), None when they cannot say
        (sources/parquet_chunks.py: ``index``; NULL times, ...). ``columns``: whose NULLs
        count (None: they may hold some)."""
        stream = self.stream(name)
        if stream is None or stream.progress_column or \
                time_field.dataType.simpleString() != "timestamp":
            return None
        from pyspark.sql.pandas.types import to_arrow_schema

        from .file_ranges import direct_groups

        frame, rt = self.frames[name], self.plan.rt
        wanted = {f.name: f.type for f in to_arrow_schema(frame.schema, timezone="UTC")}
        holes = False
        groups = direct_groups(frame, stream, rt, time_field.name, wanted, None, 0,
                               no_nulls=columns)
        if groups is None and columns:
            holes = True
            groups = direct_groups(frame, stream, rt, time_field.name, wanted, None, 0)
        if not groups:
            return None
        return (sum(g.rows for g in groups), min(g.lo for g in groups),
                max(g.hi for g in groups), holes)

    def sql_plan(self) -> SqlPlan:
        """The plan for the SQL, its inputs read from the copies filled so far."""
        if not self.copies:
            return self.plan
        return dataclasses.replace(self.plan, frames=[
            (n, self.copies.get(n, df)) for n, df in self.plan.frames])


def labels(count: int) -> list[int]:
    """A label for each chunk ``0 .. count - 1``: the value the pass groups it by, chosen
    so that Spark's hash partitioning into ``count`` partitions (Murmur3 of a BIGINT, seed
    42, ``pmod``: ``HashPartitioning``) puts chunk ``c`` alone in partition ``c``. Grouped
    by their index instead, eight chunks hashed into four partitions landed 3, 3, 0 and 2
    to a task (then coalesced unevenly): a core idle while the other ran most chunks. A
    label that Spark hashes otherwise (it cannot: it is the same function) would only cost
    balance, never a wrong group."""
    labels, taken, value = [None] * count, 0, 0
    while taken < count:
        c = murmur3_long(value) % count
        if labels[c] is None:
            labels[c] = value
            taken += 1
        value += 1
    return labels


def murmur3_long(value: int) -> int:
    """Spark's ``Murmur3_x86_32.hashLong(value, 42)`` as a signed 32-bit int."""
    m = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m

    def mix(h, k):
        k = rotl((k * 0xCC9E2D51) & m, 15) * 0x1B873593 & m
        return (rotl(h ^ k, 13) * 5 + 0xE6546B64) & m

    value &= 0xFFFFFFFFFFFFFFFF
    h = mix(mix(42, value & m), value >> 32) ^ 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h
