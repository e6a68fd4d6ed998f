"""A signal defined by a query, read continuously from its stream's rows: which catalog
stream its query is row by row over (:func:`source_stream`, with the refusal placed in the
signal's query), and a micro-batch's rows of that query placed on the timeline as blocks,
late rows apart (:func:`place_rows`). Shared by the continuous query over such a signal
(:mod:`.query_signals`) and the continuous SYNC over one (:mod:`.query_sync`), so both judge
a stream, a late row and two rows holding one sample the same way."""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.sqltext import JSON_OPTIONS, quote

from .plan import row_by_row_stream
from .report import REASON, BatchReport

__all__ = ["place_rows", "place_table", "sample_columns", "source_stream"]

_HINT = ("define the signal over a view (or query) that filters, projects and computes "
         "columns of one catalog stream's rows, e.g. AS SELECT n, ax AS x FROM readings "
         "WHERE device = 'a'; compute anything across rows in a continuous query of its own "
         "into a stream, and define the signal over that stream; or run it as a batch query "
         "(or a scheduled query file)")
#: what in a signal's query is not row by row, for the error's position
_ACROSS_ROWS = (exp.AggFunc, exp.Window, exp.Group, exp.Join, exp.Distinct, exp.Limit,
                exp.SetOperation)


def source_stream(spark, catalog, signal) -> cat.StreamDef:
    """The catalog stream ``signal``'s query is row by row over (module docstring); else
    the error, placed in the signal's query."""
    from wavesql.dialect import parse_one
    from wavesql.planner.analyze.context import BindContext
    from wavesql.planner.bind import bind_query
    from wavesql.planner.optimize import optimize
    from wavesql.planner.spark_environment import SparkEnvironment

    text = signal.path  # CREATE SIGNAL ... AS <query>: its text
    node = None
    try:
        node = parse_one(text)
        ctx = BindContext(catalog, SparkEnvironment(spark).for_text(text), binder=bind_query)
        relation = optimize(ir.QueryStatement(bind_query(node, None, ctx))).relation
        stream = row_by_row_stream(relation, _At(node), "a continuous query reads it only "
                                   "row by row over one catalog stream; it", _HINT)
        if stream.source != "files":
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"it reads stream `{stream.name}` from Kafka; a "
                "continuous query over a signal defined by a query reads a stream of files",
                Span.of(node),
                hint="Kafka partitions deliver rows out of sample order: publish the "
                     "samples as blocks (FORMAT samples) and define the signal FROM KAFKA")
    except WaveSQLError as err:
        if err.query is not None and err.query != text:
            raise
        span = err.span
        if err.code == "NOT_IMPLEMENTED" and node is not None:
            # point at what is not row by row, when it is in this text (not in a view)
            culprit = next((n for n in node.walk(bfs=False)
                            if isinstance(n, _ACROSS_ROWS)), None)
            span = Span.of(culprit) or span
        raise WaveSQLError(err.code, f"in the query of signal `{signal.name}`: {err.message}",
                           span, err.hint, text, f"signal {signal.name}") from None
    return stream


class _At:
    """The ``stmt`` the planning checks place their errors with: here the signal's query."""

    def __init__(self, node):
        self.node = node


def place_rows(spark, signal, view, batch_id: int, end_sample: int | None, pending: list,
               report: BatchReport, used: str | None = None) -> tuple[list, list]:
    """The rows of the signal's query (``view``) as blocks placed with ``pending`` (in
    timeline order), and the late-sink records of the rows below ``end_sample`` -- in
    windows already emitted (windows starting below it), or, ``used`` given, what the
    reason says instead (a continuous SYNC: the samples its released rows covered)."""
    names, columns = sample_columns(signal, view)
    return place_table(spark, signal, view.select(*columns).toArrow(), names, batch_id,
                       end_sample, pending, report, used)


def sample_columns(signal, view) -> tuple[list[str], list]:
    """``(names, columns)``: the query's position and channel columns (``view``'s names)
    and the Spark columns :func:`place_table` takes (the channels as DOUBLE)."""
    from pyspark.sql import functions as F

    from wavesql.sources.query_signal import check_columns, layout_of

    layout = layout_of(signal)
    found = check_columns(signal, [(f.name, f.dataType.simpleString())
                                   for f in view.schema.fields])
    position = found[layout.position]
    names = [position] + [found[c] for c in layout.channels]
    return names, [F.col(quote(position))] + [F.col(quote(found[c])).cast("double")
                                              for c in layout.channels]


def place_table(spark, signal, table, names: list[str], batch_id: int,
                end_sample: int | None, pending: list, report: BatchReport,
                used: str | None = None) -> tuple[list, list]:
    """:func:`place_rows` of the query's rows collected as Arrow ``table`` (the
    :func:`sample_columns`, named ``names``)."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import functions as F

    from wavesql.sources.kafka_signal import BlockInfo, BlockPlacement
    from wavesql.sources.query_signal import layout_of, sample_numbers
    from wavesql.sources.table_signal import Layout, channel_samples, sample_runs

    layout = layout_of(signal)
    where = f"signal `{signal.name}`'s query"
    report.rows_in += table.num_rows
    numbers = sample_numbers(table.column(0).combine_chunks(), layout, where)
    late = np.zeros(numbers.size, bool) if end_sample is None else numbers < end_sample
    records = []
    if late.any():
        gone = table.filter(pa.array(late)).rename_columns(names).append_column(
            "__sample", pa.array(numbers[late]))
        frame = spark.createDataFrame(gone)
        records.append(frame.select(
            F.lit(signal.name).alias("_stream"),
            F.concat(F.lit("late: sample "), F.col("__sample").cast("string"),
                     F.lit(used or f" is in a window of signal `{signal.name}` already "
                           f"emitted (windows starting below sample {end_sample})")).alias(REASON),
            F.to_json(F.struct(*[F.col(quote(c)) for c in names]), JSON_OPTIONS
                      ).alias("_row")))
        report.late = int(late.sum())
    keep = ~late
    numbers = numbers[keep]
    order = np.argsort(numbers, kind="stable")
    numbers = numbers[order]
    data = channel_samples(table.filter(pa.array(keep)).rename_columns(
        ["__pos"] + list(layout.channels)), Layout("query", layout.channels, None, None,
                                                   layout.rate, layout.epoch_us), where)
    data = data[:, order]
    report.on_time = int(numbers.size)
    placed = list(pending)
    for first, frames, row in sample_runs(numbers, where):
        clash = next((p for p in pending if first < p.end_sample
                      and p.start_sample < first + frames), None)
        if clash is not None:
            twice = max(first, clash.start_sample)
            raise WaveSQLError("OVERLAPPING_SAMPLES", f"{where}: two rows hold sample {twice} "
                               f"(one arrived in micro-batch {batch_id}, the other earlier)",
                               hint="every sample number may appear once")
        placed.append(BlockPlacement(
            f"query:{signal.name}/batch={batch_id}/{first}", BlockInfo(frames), first, 0,
            batch_id, np.ascontiguousarray(data[:, row:row + frames])))
    placed.sort(key=lambda p: p.start_sample)
    return placed, records
