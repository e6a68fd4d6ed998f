"""``SYNC JOIN``: for every control row, the exact segment of each channel over its range.

``SELECT d.t_from, m.ch1 FROM detections d SYNC JOIN mic m ON RANGE (d.t_from, d.t_to)``

Semantics (user documentation):

* The range ``(start, end)`` is half-open, ``[start, end)``. Timestamps are converted to
  sample numbers with WaveSQL's one rule (``udfs.sigseg.sample_at``: the first sample at or
  after the time, computed in integers), so the range covers samples
  ``sample_at(start) .. sample_at(end) - 1``; integer (BIGINT/INT) bounds are sample numbers
  themselves.
* Each channel of the signal comes back as one segment of exactly those samples, stitched
  across the stored segments and files it spans. A range the recording does not fully cover
  (outside the recorded data, or over a gap) gives what ``MISSING`` says: ``NULL``
  (default), ``TRUNCATE`` (the recorded part, if it has no gap inside) or ``ERROR``
  (``udfs/sync.py``).
* Every control row gives exactly one output row (identical control rows give identical
  output rows); a row whose range is NULL gets NULL segments.
* Several SYNC JOINs of one SELECT chain: each takes its own range over the control's
  columns (a SYNC's result carries the earlier signals' structs along) and turns it into
  samples at its own signal's rate, so the signals may have different rates: each
  segment carries its rate.
* The result exposes the control row as a struct named by its alias (``d.t_from``) and the
  channels as a struct named by the signal's alias (``m.ch1``), plus a top-level copy of
  every column whose name is unique; ``SELECT *`` is ``d.*, m.*``.

Lowering, two ways (``wavesql.sync.read``, planner/lower.py). By default (``files``) the
ranges -- identical control rows grouped first -- are handed to one ``mapInArrow`` pass that
reads each range's samples from the WAV files it overlaps (the timeline the scan would use)
and cuts them: the cost follows the audio asked for, not the recording's length, and the
recording is neither scanned nor shuffled. The other way (``join``, and what a signal that is
not plain files needs) is a **range join with time binning**, never a nested loop. Stored segments are
binned by ``floor(sample / SEGMENT)``; each control range is expanded to the bins it
overlaps (``explode(sequence(...))``) and equi-joined on the bin id plus the overlap
predicate; the overlapping pieces of each range are collected and one ``mapInArrow`` pass
stitches and cuts them (``udfs/sync.py``). Identical control rows are grouped first and
expanded again at the end, so duplicates cost one cut.
"""

from __future__ import annotations

from wavesql.errors import WaveSQLError
from wavesql.sqltext import quote

CONTROL = "__ctl"
_CARRIED = "__synced_"  # an earlier SYNC's signal struct, riding on the control


def sample_number(column, dtype, rate: float, epoch_us: int):
    """Spark expression: the sample number of a range bound -- a TIMESTAMP, a sample number
    (an integer), or seconds on the signal's timeline (DOUBLE, FLOAT, DECIMAL: seconds since
    sample 0). Every kind goes to the first sample at or after it (``sample_at``'s rule).

    Seconds are taken as written: a DOUBLE or FLOAT goes through its shortest decimal text
    (``0.1`` is 0.1 s, not 0.1000000000000000055), to the nanosecond, then times the rate
    in DECIMAL arithmetic, so ``ceil(0.1 * 48000)`` is sample 4800, not 4801. NaN and
    infinite seconds are NULL bounds (the row gets NULL segments, as a NULL bound does)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (DecimalType, FractionalType, IntegralType,
                                   TimestampNTZType, TimestampType)

    if isinstance(dtype, IntegralType):
        return column.cast("bigint")
    if isinstance(dtype, FractionalType):
        text = column if isinstance(dtype, DecimalType) else column.cast("string")
        seconds = text.try_cast("decimal(24,9)")
        return F.ceil(seconds * F.lit(repr(float(rate))).cast("decimal(16,6)")).cast("bigint")
    if not isinstance(dtype, (TimestampType, TimestampNTZType)):
        raise WaveSQLError("TYPE_ERROR", f"a SYNC range bound must be a TIMESTAMP, a sample "
                           f"number (BIGINT) or seconds (DOUBLE), not {dtype.simpleString()}",
                           hint="e.g. ON RANGE (d.t_from, d.t_to) with TIMESTAMP columns")
    offset = F.unix_micros(column) - F.lit(epoch_us)
    if float(rate).is_integer():  # ceil(offset * rate / 1e6), exactly, without overflow
        exact = offset.cast("decimal(38,0)") * F.lit(int(rate)).cast("decimal(20,0)")
        return F.ceil(exact / F.lit(1_000_000)).cast("bigint")
    return F.ceil(offset * F.lit(rate) / F.lit(1e6) - F.lit(1e-9)).cast("bigint")


def sync_frame(control, control_alias: str, signal_rows, channels: list[str], *, rate: float,
               epoch_us: int, segment: int, start_sql: str, end_sql: str, signal_alias: str,
               policy: str, signal_name: str, carried: tuple = (), placements=None):
    """The SYNC JOIN of ``control`` (DataFrame) with the signal's stored segments.

    ``carried``: ``(alias, channels)`` of the signals SYNCed before this one in the same
    SELECT; ``control`` is then that SYNC's result, whose control struct is unpacked again
    (the range is over the control's columns) and whose signal structs ride along.

    ``placements``: the signal's WAV files on its timeline. Given, the ranges read their
    samples from the files themselves (``udfs.sync.read_batch``) and ``signal_rows`` is not
    used: no scan of the whole recording, no shuffle of it."""
    from pyspark.sql import functions as F

    if carried:
        control = control.select(F.col(f"{quote(control_alias)}.*"),
                                 *[F.col(quote(a)).alias(_CARRIED + a) for a, _ in carried])
    names = control.columns
    aliased = control.alias(control_alias)
    ranged = aliased.select(
        F.struct(*[F.col(f"{quote(control_alias)}.{quote(n)}").alias(n) for n in names]).alias(CONTROL),
        F.expr(start_sql).alias("__a"), F.expr(end_sql).alias("__b"))
    types = {f.name: f.dataType for f in ranged.schema.fields}
    ranged = ranged.select(
        CONTROL, sample_number(F.col("__a"), types["__a"], rate, epoch_us).alias("__s0"),
        sample_number(F.col("__b"), types["__b"], rate, epoch_us).alias("__s1"))
    groups = ranged.groupBy(CONTROL, "__s0", "__s1").agg(F.count(F.lit(1)).alias("__n"))
    if placements is not None:
        cut = _read_from_files(groups, channels, rate, policy, signal_name, placements)
    else:
        cut = _binned_join(groups, signal_rows, channels, rate, policy, signal_name, segment)
    repeated = cut.withColumn("__copy", F.explode(F.sequence(F.lit(1).cast("bigint"),
                                                            F.col("__n"))))
    own = [n for n in names if not n.startswith(_CARRIED)]
    signals = list(carried) + [(signal_alias, channels)]
    unique = _unique_names(own, signals, control_alias)
    structs = [F.col(f"{CONTROL}.{quote(_CARRIED + a)}").alias(a) for a, _ in carried]
    flat = [F.col(f"{CONTROL}.{quote(_CARRIED + a)}.{quote(c)}").alias(c)
            for a, chans in carried for c in chans if c.lower() in unique]
    return repeated.select(
        F.struct(*[F.col(f"{CONTROL}.{quote(n)}").alias(n) for n in own]).alias(control_alias),
        *structs, F.struct(*[F.col(quote(c)) for c in channels]).alias(signal_alias),
        *[F.col(f"{CONTROL}.{quote(n)}").alias(n) for n in own if n.lower() in unique],
        *flat, *[F.col(quote(c)) for c in channels if c.lower() in unique])


def _binned_join(groups, signal_rows, channels, rate, policy, signal_name, segment):
    """The range join with time binning: stored segments binned by ``segment``, each range
    expanded to the bins it overlaps, equi-join on the bin plus the overlap predicate; the
    pieces of each range collected and cut in one ``mapInArrow`` pass."""
    from pyspark.sql import functions as F

    b = F.lit(segment)
    bins = F.when(F.col("__s1") > F.col("__s0"), F.sequence(
        F.floor(F.col("__s0") / b), F.floor((F.col("__s1") - 1) / b)))
    wanted = groups.withColumn("__bin", F.explode_outer(bins))
    first = channels[0]
    start = F.col(f"{quote(first)}.start")
    end = start + F.size(F.col(f"{quote(first)}.samples"))
    stored = signal_rows.select(
        F.struct(*[F.col(quote(c)) for c in channels]).alias("__piece"),
        start.alias("__p0"), end.alias("__p1"),
        F.explode(F.sequence(F.floor(start / b), F.floor((end - 1) / b))).alias("__bin"))
    # A range and a piece overlapping over two bins meet in both: keep the first common bin
    # only, so every piece is collected once per range.
    first_common = F.greatest(F.floor(wanted["__s0"] / b), F.floor(stored["__p0"] / b))
    joined = wanted.join(stored, (wanted["__bin"] == stored["__bin"])
                         & (stored["__p0"] < wanted["__s1"]) & (stored["__p1"] > wanted["__s0"])
                         & (wanted["__bin"] == first_common), "left")
    gathered = joined.groupBy(CONTROL, "__s0", "__s1", "__n").agg(
        F.collect_list("__piece").alias("__pieces"))

    def run(batches):
        from wavesql.udfs.sync import sync_batch

        for batch in batches:
            yield sync_batch(batch, channels, rate, policy, quote(signal_name))

    return gathered.mapInArrow(run, _cut_schema(groups, channels))


def _read_from_files(groups, channels, rate, policy, signal_name, placements):
    """Each range's samples read from the WAV files it overlaps (``udfs.sync.read_batch``)."""
    placements = list(placements)

    def run(batches):
        from wavesql.udfs.sync import read_batch

        for batch in batches:
            yield read_batch(batch, placements, channels, rate, policy, quote(signal_name))

    return groups.mapInArrow(run, _cut_schema(groups, channels))


def _cut_schema(groups, channels) -> str:
    """The ranges (``groups``' columns) and one cut segment per channel."""
    return (f"{CONTROL} {groups.schema[CONTROL].dataType.simpleString()}, "
            "__s0 bigint, __s1 bigint, __n bigint, "
            + ", ".join(f"{quote(c)} struct<start:bigint,rate:double,samples:array<float>>"
                        for c in channels))


def _unique_names(control: list[str], signals: list, control_alias: str) -> set[str]:
    """Names that get a top-level copy: those of exactly one control column or channel,
    and not an alias (``signals``: ``(alias, channels)`` pairs)."""
    lower = [n.lower() for n in control] + [c.lower() for _, chans in signals for c in chans]
    aliases = {control_alias.lower()} | {a.lower() for a, _ in signals}
    return {n for n in lower if lower.count(n) == 1 and n not in aliases}


def output_fields(control_fields, signals: list, control_alias: str):
    """The result schema of :func:`sync_frame` as ``(name, type)`` pairs, for the SYNCs of
    ``signals`` (``(alias, channels)`` pairs, in the SELECT's order) over one control."""
    from wavesql.udfs.program import SPARK_TYPES

    sigseg = SPARK_TYPES["sigseg"]
    names = [f.name for f in control_fields]
    unique = _unique_names(names, signals, control_alias)
    struct = ",".join(f"{quote(f.name)}:{f.type}" for f in control_fields)
    out = [(control_alias, f"struct<{struct}>")]
    out += [(a, "struct<" + ",".join(f"{quote(c)}:{sigseg}" for c in chans) + ">")
            for a, chans in signals]
    out += [(f.name, f.type) for f in control_fields if f.name.lower() in unique]
    out += [(c, sigseg) for _, chans in signals for c in chans if c.lower() in unique]
    return out
