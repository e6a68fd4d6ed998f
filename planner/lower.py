"""``lower``: typed IR -> Spark.

Relations lower to DataFrames (``lower_relation``); statements lower to their effect plus a
result DataFrame (``lower``): a query's rows, a DDL statement's one-row status, SHOW/DESCRIBE
tables, EXPLAIN text. A node without a rule raises ``NOT_IMPLEMENTED``, never a silent skip.
A SQL query's Spark SQL runs after the physical rules (planner/physical/), which may move
its windows into passes of their own or compute its whole result.

Spark's analysis errors raised while lowering are translated into positioned WaveSQL errors
(``wavesql.spark_errors``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

from wavesql import settings
from wavesql.catalog import objects as cat
from wavesql.dialect import to_spark_sql
from wavesql.errors import WaveSQLError
from wavesql.sources import kafka
from wavesql.sqltext import quote, status_frame

from . import bad_rows, ir, physical
from .spark_sql import run_sql_frames

#: Reader options WaveSQL sets unless the stream's OPTIONS override them. FAILFAST: a
#: malformed CSV/JSON row must raise (naming the file), never become a silent row of nulls.
#: (Quarantining bad rows instead is the reliability issue's work.)
FORMAT_DEFAULTS = {
    "csv": {"header": "true", "mode": "FAILFAST"},
    "json": {"mode": "FAILFAST"},
    "parquet": {},
}


@dataclass
class Runtime:
    """What lowering needs: the Spark session, the catalog, and the user's text for errors."""

    spark: object
    catalog: object
    user_text: str = ""
    #: Stream name (lower case) -> DataFrame standing in for the stream's files: the
    #: continuous runner evaluates the batch plan over its buffered rows this way (and
    #: ``("placements", signal key)`` -> the signal files a continuous SYNC may read).
    streams: dict | None = None
    #: What a direct pass planned for a relation, by ``(pass, id(relation))``: planned once
    #: per statement when two plans read it (a RESAMPLE and a fused total over it).
    prepared: dict = field(default_factory=dict)
    #: ``EXPLAIN STREAM``'s text for ``(spark, statement text, ir.QueryStatement)``: the
    #: continuous runner's, handed in by the caller (the planner sits below ``streaming``
    #: and never imports it); None where the caller runs no continuous queries.
    explain_stream: Callable | None = None


def lower_relation(rel: ir.Relation, rt: Runtime):
    """The DataFrame computing ``rel``."""
    rule = _RELATION_RULES.get(type(rel))
    if rule is None:
        raise WaveSQLError("NOT_IMPLEMENTED", f"no Spark lowering for {type(rel).__name__}")
    return rule(rel, rt)


def stream_reader_options(stream) -> dict:
    """Reader options of a stream: WaveSQL's defaults, overridden by its OPTIONS."""
    options = dict(FORMAT_DEFAULTS.get(stream.format, {}))
    options.update(dict(stream.options))
    return options


def _lower_stream_scan(rel: ir.StreamScan, rt: Runtime):
    s = rel.stream
    if rt.streams is not None and s.key in rt.streams:
        return rt.streams[s.key]
    if s.source == "kafka":
        # the topic up to the offsets current now; a bad payload fails the query naming
        # its record (sources/kafka.py)
        df = kafka.parse(kafka.load(rt.spark, s, streaming=False), s)
        df = bad_rows.fail_on_malformed(df, rel.schema.names, where="__file").drop("__file")
        if s.progress_column is not None:
            df = df.where(f"{quote(s.progress_column)} IS NULL")
        return df
    options = stream_reader_options(s)
    if bad_rows.applies(s, options):
        # a malformed CSV/JSON row fails the query naming its file (planner/bad_rows.py)
        options.update(bad_rows.reader_options(s.format))
        reader = rt.spark.read.format(s.format).schema(
            bad_rows.schema_ddl(rel.schema.ddl(), s.format)).options(**options)
        df = bad_rows.fail_on_malformed(reader.load(s.path), rel.schema.names)
    else:
        reader = rt.spark.read.format(s.format).schema(rel.schema.ddl()).options(**options)
        df = reader.load(s.path)
    if s.progress_column is not None:
        # A row carrying a value in the PROGRESS COLUMN is punctuation, not data.
        df = df.where(f"{quote(s.progress_column)} IS NULL")
    return df


def _lower_signal_scan(rel: ir.SignalScan, rt: Runtime):
    """The WAV data source, evaluating the scan's program (identity without one)."""
    from wavesql.udfs.program import Program

    from wavesql.sources import wav_source
    from wavesql.udfs.wav import WavError

    s = rel.signal
    if rt.streams is not None and ("signal", s.key) in rt.streams:
        return rt.streams[("signal", s.key)]  # a continuous signal query's micro-batch
    program = rel.program or Program.identity([c.name for c in s.channels])
    width, slide = rel.window or (s.segment, s.segment)
    split = ir.row_state_split(s, program)  # cfar: windows scored in parallel, then in order
    program = program if split is None else split.scan
    options = _wav_options(s, program, width, slide)
    if s.source != "kafka" and s.format == "wav":
        options["partition_samples"] = str(_partition_samples(s, width, rt))
    if program.stateful or split is not None:
        if slide < width:
            raise WaveSQLError(
                "STREAMING_RULE", "stateful signal functions need non-overlapping windows",
                hint=f"filter the signal in [SAMPLES {width}] windows, then window the result")
        lookback = program.lookback(s.rate_hz) if program.stateful else 0
        if isinstance(lookback, str):
            options["sequential"] = "true"  # the whole past matters: one ordered pass
        else:  # parallel partitions, each warmed up on the look-back before it
            options["lookback"] = str(lookback)
    if s.source == "kafka" or s.format != "wav":
        # sample blocks in a topic (sources/kafka_signal.py), rows of a table
        # (table_signal.py) or of a query (query_signal.py): placed on the timeline first,
        # then the WAV scan's plan
        from wavesql.sources import kafka_signal, query_signal, table_signal

        source = {"kafka": kafka_signal, "query": query_signal}.get(s.source, table_signal)
        rows = (_query_signal_rows(s, rt),) if s.source == "query" else ()
        tasks = TASKS_PER_CORE * max(1, rt.spark.sparkContext.defaultParallelism)
        return source.batch_frame(
            rt.spark, s, *rows, program, width, slide, lookback=options.get("lookback") and
            int(options["lookback"]), sequential=options.get("sequential") == "true",
            tasks=tasks)
    if settings.get(rt.spark, "wavesql.wav.scan") == "source":
        return wav_source.source_frame(rt.spark, program.spark_ddl(), options, split)
    try:
        return wav_source.batch_frame(rt.spark, program.spark_ddl(), options,
                                      read=_cached_header, split=split)
    except WavError as err:
        raise WaveSQLError(err.code, f"{err.path}: {err.message}", hint=err.hint) from None


def _query_signal_rows(signal, rt: Runtime):
    """The DataFrame of a signal's query, bound again now (like a view's body: what it
    reads may have changed or gone); an error points into the query, under the signal."""
    from wavesql.dialect import parse_one

    from .analyze.context import BindContext
    from .bind import bind_query
    from .optimize import optimize
    from .spark_environment import SparkEnvironment

    stack = rt.prepared.setdefault("query signals being read", [])
    if signal.key in stack:  # its query reads a signal whose query reads it
        raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}` reads itself",
                           hint=" -> ".join(stack + [signal.key]))
    stack.append(signal.key)
    try:
        ctx = BindContext(rt.catalog, SparkEnvironment(rt.spark).for_text(signal.path),
                          binder=bind_query)
        bound = optimize(ir.QueryStatement(bind_query(parse_one(signal.path), None, ctx)))
        return lower_relation(bound.relation, rt)
    except WaveSQLError as err:
        if err.query is not None and err.query != signal.path:
            raise
        raise WaveSQLError(err.code, f"in the query of signal `{signal.name}`: {err.message}",
                           err.span, err.hint, signal.path, f"signal {signal.name}") from None
    finally:
        stack.pop()


def _wav_options(signal, program, width: int, slide: int) -> dict:
    """The WAV source's options for ``signal`` read in ``[SAMPLES width SLIDE slide]``."""
    channels = [c.name for c in signal.channels]
    options = {
        "path": signal.path, "rate": repr(signal.rate_hz), "channels": json.dumps(channels),
        "window": str(width), "slide": str(slide), "program": program.to_json(),
    }
    options.update(dict(signal.options))
    return options


def signal_placements(signal, files: list[str] | None = None) -> list:
    """The signal's WAV files (default: all of them; else ``files``) placed on its timeline,
    headers checked (``sources.wav_source.plan``); a bad file is the WaveSQLError the scan
    would report, raised before any job."""
    from wavesql.sources import wav_source
    from wavesql.udfs.program import Program
    from wavesql.udfs.wav import WavError

    options = _wav_options(signal, Program.identity([c.name for c in signal.channels]),
                           signal.segment, signal.segment)
    try:
        return wav_source.plan(options, files=files, read=_cached_header).placements
    except WavError as err:
        raise WaveSQLError(err.code, f"{err.path}: {err.message}", hint=err.hint) from None


#: WAV headers read while planning: path -> ((size, mtime_ns), WavInfo). A batch scan sizes
#: its partitions and then plans them from the same headers, and a continuous SYNC places its
#: signal's files at every micro-batch; a header is read again only when the file's size or
#: modification time changed.
_HEADERS: dict = {}
_HEADERS_MAX = 100_000


def _cached_header(path: str, strict: bool = False):
    from wavesql import storage
    from wavesql.udfs.wav import read_info

    try:
        st = storage.stat(path)
    except OSError:
        return read_info(path, strict=strict)  # it says what is wrong, as without a cache
    key = (st.size, st.mtime_ns, strict)
    hit = _HEADERS.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    info = read_info(path, strict=strict)
    if len(_HEADERS) >= _HEADERS_MAX:
        _HEADERS.clear()
    _HEADERS[path] = (key, info)
    return info


TASKS_PER_CORE = 2


def _partition_samples(signal, width: int, rt: Runtime) -> int:
    """Samples per scan partition: about two tasks per core.

    Spark charges a fixed ~60 ms per Python data source task here; 48 tasks of 8 M samples
    cost more than the statistics over them (benchmarks/signals/README.md), so the scan is
    cut into as few partitions as keep every core busy, never smaller than 1 M samples.
    """
    from wavesql.udfs import wav

    from wavesql.sources.wav_source import list_wav_files

    total = 0
    for path in list_wav_files(signal.path):
        try:
            total += _cached_header(path).frames
        except (OSError, wav.WavError):
            pass  # the scan reports unreadable files itself, naming them
    tasks = TASKS_PER_CORE * max(1, rt.spark.sparkContext.defaultParallelism)
    per_task = -(-total // tasks)
    return max(1 << 20, -(-per_task // width) * width)


def _lower_signal_stage(rel: ir.SignalStage, rt: Runtime):
    from .segment_stage import stage_frame

    return stage_frame(rel, lower_relation(rel.input, rt), rt)


def _lower_window_scan(rel: ir.WindowScan, rt: Runtime):
    from .windows import windowed_frame

    return windowed_frame(lower_relation(rel.input, rt), rel.time_column, rel.window,
                          _joint_instants(rel, rt))


def _joint_instants(rel: ir.WindowScan, rt: Runtime):
    """The instants of a join of windowed tables (None for a window read alone), planned
    once per statement for all of its tables and its ISTREAM/DSTREAM (``rt.prepared``:
    they share one ``joint`` tuple)."""
    from .windows import joint_instants

    if not rel.joint:
        return None
    key = ("joint instants", id(rel.joint))
    if key not in rt.prepared:
        rt.prepared[key] = joint_instants([(lower_relation(w.input, rt), w.time_column,
                                            w.window) for w in rel.joint])
    return rt.prepared[key]


def _lower_stream_of(rel: ir.StreamOf, rt: Runtime):
    from .windows import relation_to_stream

    source = lower_relation(rel.window.input, rt)
    return relation_to_stream(lower_relation(rel.input, rt), rel.operator, rel.window.window,
                              source, rel.window.time_column, _joint_instants(rel.window, rt))


def _lower_sync_join(rel: ir.SyncJoin, rt: Runtime):
    from .sync import sync_frame

    s = rel.signal.signal
    channels = [c.name for c in s.channels]
    # files: each range's samples read from the WAV files it overlaps (the cost follows the
    # ranges, not the recording); join: the range join with time binning over the stored
    # segments, also what runs where the signal's rows are not plain files (a micro-batch)
    mode = settings.get(rt.spark, "wavesql.sync.read")
    # a continuous SYNC's complete files (`given`: WAV files, table rows): always direct
    given = rt.streams.get(("placements", s.key)) if rt.streams is not None else None
    direct = given is not None or (mode == "files" and rel.signal.program is None and s.format
                                   == "wav" and ("signal", s.key) not in (rt.streams or {}))
    placements = signal_rows = None
    if direct:
        placements = given if given is not None else signal_placements(s)
    else:
        signal_rows = lower_relation(rel.signal, rt)
    return sync_frame(
        lower_relation(rel.control, rt), rel.control_alias, signal_rows,
        channels, rate=s.rate_hz, epoch_us=s.epoch_us, segment=s.segment,
        start_sql=rel.start_sql, end_sql=rel.end_sql, signal_alias=rel.signal_alias,
        policy=rel.missing, signal_name=s.name, carried=rel.carried, placements=placements)


def _lower_rewindow(rel: ir.Rewindow, rt: Runtime):
    from .rewindow import rewindow_frame

    return rewindow_frame(lower_relation(rel.input, rt), list(rel.channels), rel.width, rel.slide)


def _lower_split_scan(rel: ir.SplitScan, rt: Runtime):
    from .windows import split_frame

    return split_frame(lower_relation(rel.input, rt), rel.n, rel.by_sql, rel.replicate_sql)


def _lower_spark_table(rel: ir.SparkTable, rt: Runtime):
    return rt.spark.table(rel.name)


def _lower_view(rel: ir.ViewRef, rt: Runtime):
    return lower_relation(rel.body, rt)


def lower_inputs(inputs, rt: Runtime) -> list:
    """``(name, DataFrame)`` of each input. Every input is lowered before any is registered:
    lowering one may run a nested query whose own internal views would otherwise replace a
    sibling's of the same name."""
    return [(name, lower_relation(rel, rt)) for name, rel in inputs]


def run_sql(sql: str, inputs, rt: Runtime, offset: int | None):
    """``spark.sql(sql)`` over ``inputs``, Spark's errors translated to the user's text."""
    return run_sql_frames(sql, lower_inputs(inputs, rt), rt, offset)


def _lower_sql_query(rel: ir.SqlQuery, rt: Runtime):
    """Spark SQL over the query's inputs, after the physical rules (planner/physical/):
    each may take work out of the SQL into a pass of its own, or compute the whole result."""
    plan = physical.SqlPlan(rel, rt, lower_inputs(rel.inputs, rt))
    for rule in physical.RULES:
        plan = rule(plan)
        if plan.result is not None:
            return plan.result
    if plan.tree is not None:  # the AST as the rules rewrote it, over the views they made
        return run_sql_frames(to_spark_sql(plan.tree), plan.inputs(), rt, None)
    return run_sql_frames(rel.sql, plan.frames, rt, rel.source_offset)


_RELATION_RULES: dict[type, Callable] = {
    ir.StreamScan: _lower_stream_scan,
    ir.SignalScan: _lower_signal_scan,
    ir.SignalStage: _lower_signal_stage,
    ir.WindowScan: _lower_window_scan,
    ir.StreamOf: _lower_stream_of,
    ir.SyncJoin: _lower_sync_join,
    ir.Rewindow: _lower_rewindow,
    ir.SplitScan: _lower_split_scan,
    ir.SparkTable: _lower_spark_table,
    ir.ViewRef: _lower_view,
    ir.SqlQuery: _lower_sql_query,
}


# ---------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------
def lower(stmt: ir.Statement, rt: Runtime, source_offset: int | None = None):
    """Carry out ``stmt`` and return its result as a DataFrame."""
    rule = _STATEMENT_RULES.get(type(stmt))
    if rule is None:
        raise WaveSQLError("NOT_IMPLEMENTED", f"no Spark lowering for {type(stmt).__name__}")
    return rule(stmt, rt, source_offset)


def _status(rt: Runtime, message: str):
    return status_frame(rt.spark, message)


def _lower_query(stmt: ir.QueryStatement, rt: Runtime, offset):
    return lower_relation(stmt.relation, rt)


def _lower_create(stmt: ir.CreateObject, rt: Runtime, offset):
    defn = stmt.definition
    existed = rt.catalog.get(defn.name) is not None
    stored = rt.catalog.create(defn, replace=stmt.replace, if_not_exists=stmt.if_not_exists)
    kind = defn.kind.lower()
    if existed and stmt.if_not_exists and not stmt.replace:
        return _status(rt, f"{kind} {defn.name} already exists (unchanged)")
    verb = "replaced" if existed else "created"
    return _status(rt, f"{verb} {kind} {defn.name} (version {stored.version})")


def _lower_drop(stmt: ir.DropObject, rt: Runtime, offset):
    existed = rt.catalog.get(stmt.name) is not None
    rt.catalog.drop(stmt.name, stmt.object_kind, if_exists=stmt.if_exists)
    if not existed:
        return _status(rt, f"{(stmt.object_kind or 'object').lower()} {stmt.name} does not exist "
                           "(nothing dropped)")
    return _status(rt, f"dropped {(stmt.object_kind or 'object').lower()} {stmt.name}")


def _schema_text(defn) -> str:
    cols = defn.channels if isinstance(defn, cat.SignalDef) else defn.columns
    return ", ".join(f"{c.name} {c.type}" for c in cols)


def _source_text(defn) -> str:
    if isinstance(defn, cat.ViewDef):
        return defn.sql
    if getattr(defn, "source", "files") == "kafka":
        return f"kafka:{defn.path}"
    return getattr(defn, "path", "")


#: Option names whose values DESCRIBE does not print (Kafka's SASL/SSL settings, keys).
_SECRET_OPTION = re.compile(r"password|secret|jaas|token|credential|\.key$", re.IGNORECASE)


def _lower_show(stmt: ir.ShowObjects, rt: Runtime, offset):
    rows = [
        (d.name, d.kind, getattr(d, "format", None), _source_text(d), _schema_text(d), d.version)
        for d in rt.catalog.list(stmt.object_kind)
    ]
    return rt.spark.createDataFrame(
        rows, "name string, kind string, format string, source string, schema string, "
              "version int")


def _lower_describe(stmt: ir.DescribeObject, rt: Runtime, offset):
    defn = stmt.definition
    rows = [(f.name, f.type, "") for f in stmt.schema.fields]
    rows.append(("", "", ""))
    rows.append((f"# {defn.kind.title()} Information", "", ""))
    for key, value in defn.to_dict().items():
        if key in ("columns", "channels", "name") or value in (None, (), [], ""):
            continue
        if key == "path" and getattr(defn, "source", None) == "query":
            key = "query"  # CREATE SIGNAL ... AS <query>: its text
        if key == "options":  # secrets stay in the catalog, not on the screen
            value = [[k, "<redacted>" if _SECRET_OPTION.search(k) else v] for k, v in value]
        text = value if isinstance(value, str) else json.dumps(value)
        rows.append((key, text, ""))
    return rt.spark.createDataFrame(rows, "col_name string, data_type string, comment string")


def _lower_temp_view(stmt: ir.TempView, rt: Runtime, offset):
    views = rt.catalog.temp_views
    key = stmt.name.lower()
    if stmt.definition is None:
        existed = views.pop(key, None) is not None
        return _status(rt, f"dropped temporary view {stmt.name}" if existed else
                       f"temporary view {stmt.name} does not exist (nothing dropped)")
    existed = key in views
    views[key] = stmt.definition
    rt.spark.catalog.dropTempView(stmt.name)  # a Spark one of that name would shadow it
    return _status(rt, f"{'replaced' if existed else 'created'} temporary view {stmt.name}")


def _lower_show_functions(stmt: ir.ShowFunctions, rt: Runtime, offset):
    """Spark's function list plus the matching signal functions, one sorted column."""
    import re

    from wavesql.udfs import registry

    names = {r[0] for r in rt.spark.sql(stmt.sql).collect()}
    if stmt.signal_functions:
        alternatives = [p.strip() for p in (stmt.pattern or "*").split("|")]
        for name in registry.names():
            for alternative in alternatives:
                try:
                    if re.fullmatch(alternative.replace("*", ".*"), name, re.IGNORECASE):
                        names.add(name)
                        break
                except re.error:  # Spark skips a bad alternative too
                    continue
    return rt.spark.createDataFrame([(n,) for n in sorted(names)], "function string")


def _lower_describe_function(stmt: ir.DescribeFunction, rt: Runtime, offset):
    from wavesql.udfs import registry

    return rt.spark.createDataFrame(
        [(line,) for line in registry.describe_function(stmt.name, stmt.extended)],
        "function_desc string")


def _lower_spark_command(stmt: ir.SparkCommand, rt: Runtime, offset):
    return run_sql(stmt.sql, stmt.inputs, rt, offset)


def _lower_explain(stmt: ir.Explain, rt: Runtime, offset):
    return rt.spark.createDataFrame([(explain_text(stmt, rt, offset),)], "plan string")


def _explain_stages(stmt: ir.Explain, rt: Runtime, offset) -> str:
    """``EXPLAIN STAGES``: the statement after each stage of the planner, in order."""
    from wavesql.dialect import parse_one

    from .optimize import RULES

    rules = ", ".join(rule.__name__ for rule in RULES)
    stages = [("parse (wavesql.dialect): the sqlglot AST", repr(parse_one(stmt.ast_text))),
              ("analyze (planner.bind): the bound IR", ir.explain_ir(stmt.analyzed or
                                                                     stmt.target)),
              (f"optimize (planner.optimize: {rules})", ir.explain_ir(stmt.target))]
    if isinstance(stmt.target, ir.QueryStatement):
        df = lower(stmt.target, rt, offset)  # the physical rules run here (planner.lower)
        stages.append(("physical (planner.lower): Spark's physical plan",
                       df._sc._jvm.PythonSQLUtils.explainString(
                           df._jdf.queryExecution(), "simple").strip()))
    return "\n\n".join(f"== {title} ==\n{text}" for title, text in stages)


def explain_text(stmt: ir.Explain, rt: Runtime, offset=None) -> str:
    """The text of ``EXPLAIN [AST|IR|STAGES|SPARK|EXTENDED|FORMATTED|CODEGEN|COST|STREAM]``."""
    if stmt.mode == "AST":
        return stmt.ast_text
    if stmt.mode == "STAGES":
        return _explain_stages(stmt, rt, offset)
    if stmt.mode == "IR":
        text = ir.explain_ir(stmt.target)
        splits = [r for rel in stmt.target.relations() for r in ir.walk(rel)
                  if isinstance(r, ir.SplitScan)]
        if splits:  # the split's cost figures need the data: one aggregation job each
            from .windows import split_costs

            text += "\n" + "\n".join(
                f"Split {s.stream}: " + split_costs(lower_relation(s.input, rt), s.n, s.by_sql,
                                                   s.replicate_sql) for s in splits)
        return text
    if stmt.mode == "STREAM" and stmt.unbound is not None:  # (it may run in parts)
        if rt.explain_stream is None:
            raise stmt.unbound
        return rt.explain_stream(rt.spark, stmt.ast_text, None, catalog=rt.catalog,
                                 unbound=stmt.unbound)
    if not isinstance(stmt.target, ir.QueryStatement):
        raise WaveSQLError("UNSUPPORTED_STATEMENT",
                           f"EXPLAIN {stmt.mode} needs a query, not a {stmt.target.kind} statement",
                           hint="use EXPLAIN IR to see how WaveSQL binds it")
    if stmt.mode == "STREAM":  # how it would run continuously (nothing runs)
        if rt.explain_stream is None:
            raise WaveSQLError("NOT_IMPLEMENTED", "EXPLAIN STREAM is not available here",
                               hint="run it in a session (wavesql.connect(), the REPL)")
        return rt.explain_stream(rt.spark, stmt.ast_text, stmt.target, catalog=rt.catalog)
    df = lower(stmt.target, rt, offset)
    mode = {"SPARK": "extended"}.get(stmt.mode, stmt.mode.lower())
    return df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), mode)


_STATEMENT_RULES: dict[type, Callable] = {
    ir.QueryStatement: _lower_query,
    ir.CreateObject: _lower_create,
    ir.DropObject: _lower_drop,
    ir.ShowObjects: _lower_show,
    ir.DescribeObject: _lower_describe,
    ir.SparkCommand: _lower_spark_command,
    ir.ShowFunctions: _lower_show_functions,
    ir.TempView: _lower_temp_view,
    ir.DescribeFunction: _lower_describe_function,
    ir.Explain: _lower_explain,
}
