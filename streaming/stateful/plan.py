"""Which continuous queries run incrementally, and the Spark SQL around their kernel.

A windowed aggregate over one catalog stream runs on Spark's state store
(:mod:`.query`) when it has this shape::

    [RSTREAM | ISTREAM | DSTREAM] (
      SELECT <expressions over group keys, aggregates, _time>
      FROM stream [window] [AS alias]
      [WHERE <row predicate>] [GROUP BY <expressions over the stream's columns>]
      [HAVING <predicate over group keys and aggregates>])

with aggregates that keep a small partial per pane -- ``count``, ``count_if``, ``sum``,
``avg``, ``min``, ``max``, ``bool_and`` / ``bool_or``, the spreads -- or the values a
window needs -- ``percentile``, ``median``, ``collect_list``, ``collect_set``,
``count(DISTINCT)``, ``sum(DISTINCT)`` (:mod:`.window_aggregates` says which, and what
each keeps) and

* a slid window ``[RANGE r SLIDE s]`` (tumbling when ``r = s``): any of the three streams,
  ``EMIT CHANGES`` with RSTREAM;
* an unslid window -- ``[RANGE r]``, ``[NOW]``, ``[ROWS n]`` (no GROUP BY) or
  ``[PARTITION BY k ROWS n]`` (GROUP BY exactly ``k``) -- under ISTREAM or DSTREAM, whose
  SELECT lists each group key and aggregate bare (so a changed row is a changed aggregate).
  RSTREAM of an unslid window emits every key at every instant any key changes: its output
  alone grows with keys x rows, so it stays on the re-evaluating runner.

Everything around the kernel is Spark SQL: before it (:attr:`WindowedPlan.pre`), the row
predicate, the keys and the aggregates' arguments are evaluated per row and encoded as
values plus NULL flags; after it (:attr:`WindowedPlan.post`), the user's SELECT runs over
the kernel's rows with each aggregate replaced by its value -- so expressions, aliases,
column order and types are Spark's, as in the batch query. :func:`recognize` returns None
with the reason for any other shape (``EXPLAIN`` shows it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql, unqualified
from wavesql.planner import ir
from wavesql.planner.bad_rows import CORRUPT_COLUMN
from wavesql.planner.temporal import quote
from wavesql.planner.windows import TIME
from wavesql.sqltext import JSON_OPTIONS

from . import window_aggregates as aggregates_plan
from . import windows as kernel
from .encoding import _FILL, FLOATING, INTEGRAL, KEY_TYPES, NotIncremental  # noqa: F401


#: Kinds of input rows (``__kind``): data, punctuation, no event time, malformed, and a
#: HEARTBEAT's tick (carries progress only).
RESULT, PUNCTUATION, NO_TIME, MALFORMED, TICK = 0, 1, 2, 3, 9
#: Kinds of the kernel's output rows: results, late rows (the other kinds pass through),
#: per-call counts.
LATE, STATS = 1, 4
#: The counts a stats row carries, in ``__n0...`` order.
STAT_NAMES = ("on_time", "late", "no_time", "punctuation", "quarantined", "state_rows",
              "state_bytes")
#: The kernel output's view in the post-projection, and its instant column.
VIEW = "__wavesql_windowed"
#: A Kafka stream's input rows carry their record's Kafka timestamp (µs) in this column, and
#: a stats row the earliest of its call's rows (0: none), so that a micro-batch knows when
#: its records arrived -- the next batch's result latency (query.py) -- without a job.
ARRIVED = "__arrived"


def arrival(stream: cat.StreamDef) -> list[tuple[str, str]]:
    """The ``pre`` column of a Kafka stream's arrival time (none for files)."""
    if stream.source != "kafka":
        return []
    return [(ARRIVED, "coalesce(unix_micros(_timestamp), 0L)")]


@dataclass(frozen=True)
class WindowedPlan:
    """A continuous windowed aggregate the stateful runner evaluates."""

    stream: cat.StreamDef
    operator: kernel.Operator
    #: ``(column name, Spark SQL)`` evaluated per input row, in order (``__kind``,
    #: ``__ts``, ``__pass``, keys, arguments, order columns, ``__row``, ``__bucket``)
    pre: tuple[tuple[str, str], ...]
    key_types: tuple[str, ...]  # encoded types of the keys (KEY_TYPES' second item)
    arg_types: tuple[str, ...]  # bigint | double per argument
    order_types: tuple[str, ...]
    output_ddl: str  # the kernel rows' Spark schema
    post: str  # the user's SELECT over VIEW
    buckets: int
    explain: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self)


#: The input row as JSON, for the late sink (microsecond timestamps: wavesql.sqltext's
#: JSON_OPTIONS, as the other runners write it).
ROW_JSON = "__row"
_JSON_OPTIONS_SQL = "map({})".format(", ".join(  # (the formats' quotes escaped for SQL)
    "'{}', '{}'".format(k, v.replace("'", "\\'")) for k, v in JSON_OPTIONS.items()))


def fingerprint(plan) -> str:
    """What a checkpoint of a state-store plan (windowed or OVER) depends on, compared on
    restart: its operator, the per-row SQL before it, its output schema, buckets, stream.
    The late row's JSON (``__row``) never enters the state: it is fingerprinted as it was
    first written (Spark's default, milliseconds), so a checkpoint started before it kept
    microseconds runs on -- its late rows keep microseconds from then on."""
    cols = ", ".join(quote(c.name) for c in plan.stream.columns)
    pre = [(n, f"to_json(struct({cols}))") if n == ROW_JSON else (n, sql)
           for n, sql in plan.pre]
    text = json.dumps([repr(plan.operator), pre, plan.output_ddl, plan.buckets,
                       plan.stream.key], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def buckets_for(spark, checkpoint) -> int:
    """How many buckets of keys a query keeps its state in: the number its checkpoint was
    started with, else two per shuffle partition (Spark fixes the partitions of a
    checkpoint's state; a bucket is one state value and one kernel call per micro-batch,
    so fewer, larger buckets cost less per batch -- a call is a few milliseconds -- while
    a bucket's value stays a fraction of the state)."""
    if checkpoint is not None:
        from wavesql import storage

        try:
            marker = storage.read_text(storage.join(str(checkpoint), "wavesql.json"))
            return int(json.loads(marker)["buckets"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
    return max(2, min(2 * partitions, 1024))


def recognize(spark, stmt, bound: ir.Relation, emit_changes: bool,
              buckets: int) -> WindowedPlan:
    """The :class:`WindowedPlan` of a bound continuous query, or :class:`NotIncremental`."""
    node = stmt.node
    output = "RSTREAM"
    if isinstance(node, wn.RelationToStream):
        output, node = node.kind, node.this
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    if not isinstance(node, exp.Select):
        raise NotIncremental("not a single SELECT")
    select = node
    for arg, what in (("with_", "a WITH clause"), ("with", "a WITH clause"),
                      ("joins", "a join"), ("distinct", "DISTINCT"), ("order", "ORDER BY"),
                      ("limit", "LIMIT"), ("offset", "OFFSET"), ("qualify", "QUALIFY")):
        if select.args.get(arg):
            raise NotIncremental(f"{what}")
    if any(True for _ in select.find_all(exp.Window)):
        raise NotIncremental("an OVER window")
    select = aggregates_plan.unfiltered(select)
    if any(True for _ in select.find_all(exp.Filter)):
        raise NotIncremental("an aggregate with FILTER")
    if any(isinstance(n, (exp.Subquery, exp.Exists)) or (isinstance(n, exp.Select)
                                                         and n is not select)
           for n in select.walk()):
        raise NotIncremental("a subquery")
    source = select.args.get("from_") or select.args.get("from")
    table = source.this if source is not None else None
    window = table.args.get("window") if isinstance(table, exp.Table) else None
    scans = [r for r in ir.walk(bound) if isinstance(r, ir.WindowScan)]
    if window is None or len(scans) != 1 or not isinstance(scans[0].input, ir.StreamScan):
        raise NotIncremental("not one windowed catalog stream")
    stream = scans[0].input.stream
    spec = scans[0].window
    group = select.args.get("group")
    keys = [unqualified(e) for e in (group.expressions if group is not None else [])]
    names = {c.name.lower() for c in stream.columns}
    for e in keys:
        # GROUP BY 1 or GROUP BY <a SELECT alias> mean a SELECT item, not this expression
        if isinstance(e, exp.Literal) or any(c.name.lower() not in names
                                             for c in e.find_all(exp.Column)):
            raise NotIncremental(f"GROUP BY {e.sql()} (a position or an alias)")
    key_sql = [to_spark_sql(e) for e in keys]
    operator_window, size, slide = _window(spec, key_sql, output, emit_changes)
    aggs = aggregates_plan.find(select)
    if not aggs:
        raise NotIncremental("no aggregate (a windowed projection)")

    columns = ir.Schema.of_columns(stream.columns)
    types = _types(spark, columns, key_sql + [a[1] for a in aggs if a[1] is not None])
    key_types = types[:len(key_sql)]
    for sql_text, t in zip(key_sql, key_types):
        if t not in KEY_TYPES:
            raise NotIncremental(f"a group key of type {t} ({sql_text})")
    arg_types = iter(types[len(key_sql):])
    aggregates, arg_sql, arg_enc = [], [], []
    for func, arg, param in aggs:
        if arg is None:
            aggregates.append(kernel.Aggregate("count"))
            continue
        kernel_func, arg, t, enc = aggregates_plan.argument(func, arg, next(arg_types))
        fractions, many = param or ((), False)
        aggregates.append(kernel.Aggregate(kernel_func, len(arg_sql),
                                           t in INTEGRAL + ("boolean",), fractions, many))
        arg_sql.append(arg)
        arg_enc.append((t, enc))
    order_cols = ([c for c in stream.columns] if operator_window == "ROWS" else [])
    for c in order_cols:
        if c.type.lower() not in KEY_TYPES:
            raise NotIncremental(f"a ROWS window over a column of type {c.type} ({c.name})")
    op = kernel.Operator(operator_window, size, slide, output, len(key_sql), tuple(aggregates),
                         len(order_cols), emit_changes)
    post = _post(select, keys, key_sql, key_types, aggs, aggregates, arg_enc, output)
    where = select.args.get("where")
    pass_sql = to_spark_sql(unqualified(where.this)) if where is not None else "true"
    pre = _pre(stream, pass_sql, key_sql, key_types, arg_sql, arg_enc, order_cols,
               keys_of_all_rows=operator_window == "ROWS")
    pre += arrival(stream)
    pre.append(("__bucket", _bucket(len(key_sql), buckets)))
    enc_keys = tuple(KEY_TYPES[t][1] for t in key_types)
    ddl = _output_ddl(enc_keys, [aggregates_plan.value_type(
        a.func, a.integral, a.many, arg_enc[a.arg][1] if a.arg is not None else None)
        for a in aggregates])
    ddl += "".join(f", {name} BIGINT" for name, _ in arrival(stream))
    explain = (f"stateful {op.window.lower()} window on Spark's state store "
               f"({'panes of ' + str(op.pane) + ' us' if op.window == 'SLIDE' else 'rows'}), "
               f"{output}, {len(key_sql)} key(s) in {buckets if key_sql else 1} bucket(s), "
               f"aggregates {aggregates_plan.explained(aggs, op.window)}")
    return WindowedPlan(stream, op, tuple(pre), enc_keys, tuple(e for _, e in arg_enc),
                        tuple(KEY_TYPES[c.type.lower()][1] for c in order_cols), ddl, post,
                        buckets if key_sql else 1, explain)


def _window(spec, key_sql: list[str], output: str, changes: bool) -> tuple[str, int, int]:
    kind = spec.kind
    if kind == "SLIDE":
        if changes and output != "RSTREAM":
            raise NotIncremental("EMIT CHANGES with ISTREAM/DSTREAM")
        return "SLIDE", spec.size, spec.slide
    if kind in ("RANGE", "NOW", "ROWS", "PARTITION_ROWS") and output == "RSTREAM":
        raise NotIncremental("RSTREAM of an unslid window (every key at every instant)")
    if changes:
        raise NotIncremental("EMIT CHANGES over an unslid window")
    if kind == "RANGE":
        return "RANGE", spec.size, 0
    if kind == "NOW":
        return "RANGE", 1, 0
    if kind == "ROWS":
        if key_sql:
            raise NotIncremental("GROUP BY over a [ROWS n] window of the whole stream")
        return "ROWS", spec.size, 0
    if kind == "PARTITION_ROWS":
        if sorted(key_sql) != sorted(spec.partition_by):
            raise NotIncremental("GROUP BY other than the window's PARTITION BY")
        return "ROWS", spec.size, 0
    raise NotIncremental(f"a {kind} window")


def _types(spark, columns: ir.Schema, sql: list[str]) -> list[str]:
    """Spark's types of expressions over the stream's columns (analysis only, no job)."""
    if not sql:
        return []
    frame = spark.createDataFrame([], columns.ddl())
    try:
        analyzed = frame.selectExpr(*sql)
    except Exception as err:  # noqa: BLE001 - whatever Spark refuses stays on the other runner
        raise NotIncremental(f"Spark cannot type {sql}: {str(err).splitlines()[0]}") from None
    return [f.dataType.simpleString().lower() for f in analyzed.schema.fields]


def _pre(stream: cat.StreamDef, pass_sql: str, key_sql, key_types, arg_sql, arg_enc,
         order_cols, keys_of_all_rows: bool) -> list[tuple[str, str]]:
    """Per input row: kind, time, predicate, encoded keys / arguments / order columns and the
    row as JSON (for the late sink). Arguments are evaluated only where the predicate holds
    (CASE WHEN, as Spark's filter-then-aggregate would), keys too unless a ROWS window
    needs every row's partition."""
    kind = row_kind(stream)
    out = [("__kind", f"CAST({kind} AS TINYINT)"),
           ("__ts", f"coalesce(unix_micros({quote(stream.event_time)}), 0L)"),
           ("__pass", f"({kind}) = {RESULT} AND coalesce(({pass_sql}), false)")]
    for i, (sql_text, t) in enumerate(zip(key_sql, key_types)):
        value = sql_text if keys_of_all_rows else f"CASE WHEN __pass THEN ({sql_text}) END"
        out += _encoded(f"__k{i}", value, t)
    for j, (sql_text, (t, enc)) in enumerate(zip(arg_sql, arg_enc)):
        value = f"CAST(CASE WHEN __pass THEN ({sql_text}) END AS {enc.upper()})"
        out += [(f"__an{j}", f"({value}) IS NULL"),
                (f"__a{j}", f"coalesce({value}, {_FILL[enc]})")]
    for m, c in enumerate(order_cols):
        out += _encoded(f"__o{m}", quote(c.name), c.type.lower())
    cols = ", ".join(quote(c.name) for c in stream.columns)
    out.append((ROW_JSON, f"to_json(struct({cols}), {_JSON_OPTIONS_SQL})"))
    return out


def row_kind(stream: cat.StreamDef) -> str:
    """Spark SQL of an input row's kind (malformed, punctuation, no event time, data)."""
    kind = "CASE "
    kind += f"WHEN {quote(CORRUPT_COLUMN)} IS NOT NULL THEN {MALFORMED} " if _quarantines(
        stream) else ""
    if stream.progress_column:
        kind += f"WHEN {quote(stream.progress_column)} IS NOT NULL THEN {PUNCTUATION} "
    return kind + f"WHEN {quote(stream.event_time)} IS NULL THEN {NO_TIME} ELSE {RESULT} END"


def _encoded(name: str, value: str, spark_type: str) -> list[tuple[str, str]]:
    encode, enc_type, _ = KEY_TYPES[spark_type]
    v = encode.format(v=f"({value})")
    null = name.replace("__k", "__kn").replace("__o", "__on")
    return [(null, f"({value}) IS NULL"), (name, f"coalesce({v}, {_FILL[enc_type]})")]


def _quarantines(stream: cat.StreamDef) -> bool:
    from wavesql.planner import bad_rows
    from wavesql.planner.lower import stream_reader_options

    return bad_rows.applies(stream, stream_reader_options(stream))


def _bucket(n_keys: int, buckets: int) -> str:
    """The state-store key of a row: a hash bucket of its encoded group keys. A micro-batch
    calls the kernel once per bucket it touches (per-key calls cost about a millisecond
    each in Python: 10,000 keys would take 10 s), and a bucket's state is one value."""
    if not n_keys:
        return "0"
    parts = ", ".join(f"__kn{i}, __k{i}" for i in range(n_keys))
    return f"CAST(pmod(xxhash64({parts}), {buckets}) AS INT)"


def _output_ddl(key_types, value_types) -> str:
    cols = ["__kind TINYINT", "__time BIGINT", "__final BOOLEAN"]
    for i, t in enumerate(key_types):
        cols += [f"__kn{i} BOOLEAN", f"__k{i} {t.upper()}"]
    for j, t in enumerate(value_types):
        cols += [f"__gn{j} BOOLEAN", f"__g{j} {t.upper()}"]
    cols += ["__row STRING", "__record STRING", "__file STRING"]
    cols += [f"__n{i} BIGINT" for i in range(len(STAT_NAMES))]
    return ", ".join(cols)


def _post(select: exp.Select, keys, key_sql, key_types, aggs, aggregates, arg_enc,
          output: str) -> str:
    """The user's SELECT over the kernel's rows (view :data:`VIEW`): aggregates and group
    keys replaced by the decoded kernel columns, HAVING as WHERE, ``_time`` first unless
    listed (as the batch plan adds it)."""
    tree = select.copy()
    for arg in ("from_", "from", "where", "group", "having", "emit", "late_into"):
        tree.set(arg, None)
    having = select.args.get("having")
    decoded_keys = [_decode_key(i, t) for i, t in enumerate(key_types)]
    decoded_aggs = []
    for j, (agg, (func, _, _)) in enumerate(zip(aggregates, aggs)):
        value = f"CASE WHEN __gn{j} THEN NULL ELSE __g{j} END"
        t = arg_enc[agg.arg][0] if agg.arg is not None else None
        decoded_aggs.append(aggregates_plan.decoded(func, value, t, agg.many))

    def replace(node):
        if aggregates_plan.name_of(node) is not None:
            item = aggregates_plan.item_of(node)
            return exp.maybe_parse(decoded_aggs[aggs.index(item)], dialect="spark")
        if not isinstance(node, (exp.Alias, exp.Identifier)) and isinstance(
                node, exp.Expression) and not isinstance(node, exp.Star):
            try:
                text = to_spark_sql(unqualified(node))
            except Exception:  # noqa: BLE001 - a node Spark SQL cannot print is no key
                return node
            if text in key_sql:
                return exp.maybe_parse(decoded_keys[key_sql.index(text)], dialect="spark")
        return node

    items = []
    for e in tree.expressions:
        alias = e.alias if isinstance(e, exp.Alias) else None
        inner = e.this if isinstance(e, exp.Alias) else e
        name = alias or (inner.name if isinstance(inner, exp.Column) else None)
        if output != "RSTREAM":
            bare = aggregates_plan.name_of(inner) is not None or (
                to_spark_sql(unqualified(inner)) in key_sql) or (
                isinstance(inner, exp.Column) and inner.name.lower() == TIME)
            if not bare:
                raise NotIncremental("ISTREAM/DSTREAM of a computed column")
        new = inner.copy().transform(replace)
        if name is None:
            name = to_spark_sql(inner)  # Spark names an unaliased expression by its text
        items.append(exp.alias_(new, name, quoted=True))
    if output != "RSTREAM":
        listed = {to_spark_sql(unqualified(e.this if isinstance(e, exp.Alias) else e))
                  for e in tree.expressions}
        if having is not None or not set(key_sql) <= listed:
            raise NotIncremental("ISTREAM/DSTREAM without every group key listed, or with "
                                 "HAVING")
    for e in items:
        for col in e.find_all(exp.Column):
            if col.name.lower() != TIME and not col.name.startswith("__"):
                raise NotIncremental(f"`{col.sql()}` is neither a group key nor an aggregate")
    if not any(e.alias.lower() == TIME for e in items):
        items.insert(0, exp.alias_(exp.column(TIME), TIME))
    items.append(exp.alias_(exp.column("__final"), "_final"))  # the kernel's, carried through
    tree.set("expressions", items)
    tree.set("from_", exp.From(this=exp.to_table(VIEW)))
    if having is not None:
        tree.set("where", exp.Where(this=having.this.copy().transform(replace)))
    return to_spark_sql(tree)


def _decode_key(i: int, enc_spark_type: str) -> str:
    _, _, decode = KEY_TYPES[enc_spark_type]
    return f"CASE WHEN __kn{i} THEN NULL ELSE {decode.format(v=f'__k{i}')} END"
