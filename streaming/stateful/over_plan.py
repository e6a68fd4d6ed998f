"""Which continuous OVER-window queries run on Spark's state store, and the SQL around them.

A continuous query of the ``over`` shape (``streaming/planning.py``: OVER windows with
bounded PRECEDING frames, nested through CTEs and subqueries, over one catalog stream;
``lag``) runs on the state store (:mod:`.query`, kernel :mod:`.lookback`) when every
column of the stream has a type :data:`.plan.KEY_TYPES` carries exactly through the kernel
(strings, booleans, integers, floating point, dates, timestamps), and Spark can evaluate
each look-back rule's partition and predicate over the stream's rows.

``EMIT CHANGES``: a bucket the micro-batch calls hands back its rows not final yet (event
time at or after progress) with their look-back too, evaluated as the final ones and
emitted with ``_final = false``; a bucket Spark does not call (no new rows, none became
final) has the same rows not final yet, with the same values, as in the batch before, so
those result rows are carried from that batch (:mod:`.pending`). To tell a result row's
bucket, the buckets of a CHANGES query are of the shared partition columns its output
carries (:func:`_shared_partition` within the output's names): none carried, one bucket.

Before the kernel (:attr:`OverPlan.pre`, Spark SQL per input row): the row's kind and event
time, each column as value plus NULL flag, each ROWS rule's partition as two independent
hashes (``xxhash64`` and ``hash``: 96 bits, so two partitions that would share both are
astronomically unlikely) and whether the row counts, and the row's **bucket**: a hash of
the partition keys every window shares (``PARTITION BY customer`` in all of them: buckets
of customers, evaluated apart), else one bucket holding the whole stream (a window over
the whole stream needs every row of its look-back, in order). After the kernel, one of:

* **the kernel's windows** -- when the query is one SELECT over the stream whose windows
  are ``count / sum / avg / min / max / stddev / variance`` over RANGE frames ending at the
  current row, all partitioned alike (:func:`_kernel_windows`): the kernel computes the
  frames of the rows that became final itself (``udfs.time_windows``, Spark's semantics,
  prefix sums: a frame's length costs nothing), and the user's SELECT runs over those rows
  with each window replaced by its value (:attr:`OverPlan.post`);
* **the batch plan** -- otherwise (``lag``, ROWS frames, nesting, other functions): the
  columns are decoded back into the stream's own rows, and the batch plan runs over the
  rows each bucket hands back (:class:`.query.StatefulOverQuery`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import to_spark_sql, unqualified
from wavesql.planner import ir
from wavesql.planner.temporal import quote

from .. import plan as stream_plan
from . import lookback as kernel
from .plan import (_FILL, FLOATING, INTEGRAL, KEY_TYPES, RESULT, STAT_NAMES, NotIncremental,
                   _types, arrival, fingerprint, row_kind)

#: The kernel's evaluated rows in the post-projection.
VIEW = "__wavesql_over"


@dataclass(frozen=True)
class OverPlan:
    """A continuous OVER-window query the stateful runner evaluates."""

    stream: cat.StreamDef
    operator: kernel.LookbackOperator
    #: ``(column name, Spark SQL)`` per input row, in order (module docstring)
    pre: tuple[tuple[str, str], ...]
    output_ddl: str  # the kernel rows' Spark schema
    buckets: int
    explain: str
    #: Windows the kernel evaluates itself (``operator.windows`` set): the user's SELECT
    #: over the due rows and their window values (view :data:`VIEW`); None: the batch
    #: plan runs over the rows the kernel hands back.
    post: str | None = None
    #: Spark SQL of a row's bucket over the stream's columns (``__bucket`` in ``pre``);
    #: ``EMIT CHANGES``: over the query's output rows too (module docstring).
    bucket: str = "0"

    @property
    def changes(self) -> bool:
        return self.operator.changes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self)

    def decoded(self) -> list[str]:
        """Spark SQL of the stream's columns from the kernel's encoded ones."""
        out = []
        for i, c in enumerate(self.stream.columns):
            decode = KEY_TYPES[c.type.lower()][2].format(v=f"__c{i}")
            out.append(f"CASE WHEN __cn{i} THEN NULL ELSE {decode} END AS {quote(c.name)}")
        return out


def recognize_over(spark, plan: stream_plan.Plan, trees: list, emit_changes: bool,
                   buckets: int, names: tuple[str, ...] = ()) -> OverPlan:
    """The :class:`OverPlan` of a continuous query planned as ``over`` (its ``trees``: the
    ASTs of its SQL queries; ``names``: its output columns), or
    :class:`~.plan.NotIncremental` saying why not."""
    if plan.mode != "over" or len(plan.inputs) != 1:
        raise NotIncremental("not OVER windows over one stream")
    stream = plan.inputs[0].stream
    encoded = []
    for c in stream.columns:
        t = c.type.lower()
        if t not in KEY_TYPES:
            raise NotIncremental(f"the column {c.name} of type {c.type}")
        encoded.append(KEY_TYPES[t][1])
    rules, rule_sql = [], []
    for j, rule in enumerate(plan.inputs[0].lookback):
        if isinstance(rule, stream_plan.KeepTime):
            rules.append(kernel.KeepTime(rule.us))
            continue
        if not isinstance(rule, stream_plan.KeepRows):
            raise NotIncremental(f"a look-back of {rule}")
        rules.append(kernel.KeepRows(rule.n, rule.within_us))
        keys = ", ".join(f"({k})" for k in rule.keys)
        rule_sql += [(f"__rk{j}", f"xxhash64({keys})" if keys else "0L"),
                     (f"__rh{j}", f"CAST(hash({keys}) AS BIGINT)" if keys else "0L"),
                     (f"__rp{j}", f"coalesce(({rule.passes}), false)" if rule.passes
                      else "true")]
    shared = _shared_partition(trees, stream)
    if emit_changes:  # a result row's bucket from the row itself (module docstring)
        output = {n.lower() for n in names}
        shared = [c for c in shared if c.lower() in output]
    n_buckets = buckets if shared else 1
    bucket = (f"CAST(pmod(xxhash64({', '.join(quote(c) for c in shared)}), {n_buckets}) "
              "AS INT)" if shared else "0")
    columns = ir.Schema.of_columns(stream.columns)
    # Spark must be able to evaluate the rules' partitions and predicates over the rows
    _types(spark, columns, [sql_text for _, sql_text in rule_sql] + [bucket])
    kind = row_kind(stream)
    pre = [("__kind", f"CAST({kind} AS TINYINT)"),
           ("__ts", f"coalesce(unix_micros({quote(stream.event_time)}), 0L)")]
    for i, c in enumerate(stream.columns):
        enc = KEY_TYPES[c.type.lower()][0].format(v=f"({quote(c.name)})")
        pre += [(f"__cn{i}", f"{quote(c.name)} IS NULL"),
                (f"__c{i}", f"coalesce({enc}, {_FILL[encoded[i]]})")]
    pre += rule_sql
    evaluated = _kernel_windows(spark, trees, stream, columns, list(names))
    windows = post = None
    ddl = ["__kind TINYINT", "__ts BIGINT"]
    for i, t in enumerate(encoded):
        ddl += [f"__cn{i} BOOLEAN", f"__c{i} {t.upper()}"]
    if evaluated is not None:
        windows, extra_pre, post, value_types = evaluated
        pre += [(name, sql_text.replace("{kind}", kind)) for name, sql_text in extra_pre]
        for j, t in enumerate(value_types):
            ddl += [f"__wn{j} BOOLEAN", f"__w{j} {t.upper()}"]
    pre += arrival(stream)
    pre.append(("__bucket", bucket))
    op = kernel.LookbackOperator(tuple(encoded), tuple(rules), windows, emit_changes)
    ddl += ["__record STRING", "__file STRING"] + [f"__n{i} BIGINT"
                                                   for i in range(len(STAT_NAMES))]
    ddl += [f"{name} BIGINT" for name, _ in arrival(stream)]
    kept = "; ".join(str(r) for r in plan.inputs[0].lookback)
    explain = (f"stateful OVER windows on Spark's state store: each bucket keeps its rows' "
               f"look-back ({kept}), "
               + (f"{n_buckets} buckets of {', '.join(shared)}" if shared
                  else "1 bucket (a window over the whole stream)")
               + ("; a micro-batch computes the frames of the rows that became final in "
                  "the kernel (RANGE frames, numpy)" if windows is not None else
                  "; a micro-batch evaluates the query over the buckets with rows due")
               + ("; EMIT CHANGES: the rows not final yet of the buckets a micro-batch "
                  "calls are evaluated too (_final = false), the other buckets' carried "
                  "from the batch before" if emit_changes else ""))
    return OverPlan(stream, op, tuple(pre), ", ".join(ddl), n_buckets, explain, post, bucket)


#: Aggregates the kernel evaluates over RANGE frames (``udfs.time_windows.FUNCTIONS``).
_KERNEL_FUNCS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min",
                 exp.Max: "max", exp.StddevPop: "stddev_pop", exp.StddevSamp: "stddev_samp",
                 exp.Stddev: "stddev_samp", exp.VariancePop: "var_pop",
                 exp.Variance: "var_samp"}


def _kernel_windows(spark, trees: list, stream: cat.StreamDef, columns: ir.Schema,
                    names: list[str]):
    """``(Windows, pre columns, post SQL, value types)`` when the kernel can evaluate the
    query's windows itself: one SELECT over the stream, no nesting, each window an
    aggregate above over a RANGE frame ending at the current row, all partitioned alike;
    else None (the batch plan runs over the rows handed back). Spark's own sliding frames
    recompute each row's aggregate over its whole frame, so a long frame costs rows x
    frame per batch; the kernel's prefix sums cost the due rows and the look-back once."""
    from wavesql.planner.types import interval_us
    from wavesql.udfs import time_windows as tw

    if len(trees) != 1 or not isinstance(trees[0], exp.Select):
        return None
    select = trees[0]
    for arg in ("with_", "with", "joins", "group", "having", "distinct", "order", "limit",
                "offset", "qualify"):
        if select.args.get(arg):
            return None
    source = select.args.get("from_") or select.args.get("from")
    if (source is None or not isinstance(source.this, exp.Table)
            or len(select.expressions) != len(names)
            or any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(
                e.this, exp.Star)) for e in select.expressions)
            or any(isinstance(n, exp.Subquery) or (isinstance(n, exp.Select)
                                                   and n is not select) for n in select.walk())):
        return None
    windows = list(select.find_all(exp.Window))
    partition, specs, arg_sql, window_sql = None, [], [], []
    for w in windows:
        func = _KERNEL_FUNCS.get(type(w.this))
        spec = w.args.get("spec")
        if (func is None or spec is None or w.this.args.get("distinct")
                or str(spec.args.get("kind")).upper() != "RANGE"
                or any(isinstance(n, exp.Window) for n in w.this.walk() if n is not w.this)):
            return None
        keys = tuple(_sql(e) for e in w.args.get("partition_by") or ())
        if partition is not None and keys != partition:
            return None
        partition = keys
        arg = w.this.this
        if isinstance(arg, exp.Star) or (func == "count" and arg is None):
            name = None
        else:
            if arg is None or isinstance(arg, exp.Distinct):
                return None
            name = f"a{len(arg_sql)}"
            arg_sql.append(_sql(arg))
        specs.append(tw.Spec(func, name, interval_us(spec.args["start"]), 0))
        window_sql.append(_sql(w))
    if not windows:
        return None
    try:
        types = _types(spark, columns, list(partition) + arg_sql + window_sql)
    except NotIncremental:
        return None
    key_types = types[:len(partition)]
    arg_types = types[len(partition):len(partition) + len(arg_sql)]
    value_types = types[len(partition) + len(arg_sql):]
    if any(t not in KEY_TYPES for t in key_types) or any(
            t not in INTEGRAL + FLOATING for t in arg_types):
        return None
    enc_keys = tuple(KEY_TYPES[t][1] for t in key_types)
    enc_args = tuple("bigint" if t in INTEGRAL else "double" for t in arg_types)
    where = select.args.get("where")
    passes = f"coalesce(({_sql(where.this)}), false)" if where is not None else "true"
    pre = [("__p", f"({{kind}}) = {RESULT} AND {passes}")]
    for i, (sql_text, t) in enumerate(zip(partition, key_types)):
        enc = KEY_TYPES[t][0].format(v=f"({sql_text})")
        pre += [(f"__kn{i}", f"({sql_text}) IS NULL"),
                (f"__k{i}", f"coalesce({enc}, {_FILL[enc_keys[i]]})")]
    for j, (sql_text, enc) in enumerate(zip(arg_sql, enc_args)):
        value = f"CAST(CASE WHEN __p THEN ({sql_text}) END AS {enc.upper()})"
        pre += [(f"__an{j}", f"({value}) IS NULL"), (f"__a{j}", f"coalesce({value}, "
                                                            f"{_FILL[enc]})")]
    out_types = []
    for spec, t in zip(specs, value_types):
        integral = (spec.func == "count" or (spec.func in ("sum", "min", "max")
                                             and enc_args[int(spec.arg[1:])] == "bigint"))
        out_types.append("bigint" if integral else "double")
    post = _post(select, windows, value_types, source.this, names)
    return kernel.Windows(tuple(specs), enc_keys, enc_args), pre, post, out_types


def _post(select: exp.Select, windows: list, value_types: list[str], table: exp.Table,
          names: list[str]) -> str:
    """The user's SELECT over the kernel's evaluated rows (:data:`VIEW`): each window
    replaced by its value, the WHERE dropped (the kernel emits only rows that pass it),
    each item named as the batch query names it (``names``)."""
    tree = select.copy()
    tree.set("expressions", [exp.alias_(e.this if isinstance(e, exp.Alias) else e, name,
                                        quoted=True)
                             for e, name in zip(tree.expressions, names)])
    copies = list(tree.find_all(exp.Window))
    for j, (w, t) in enumerate(zip(copies, value_types)):
        w.replace(exp.maybe_parse(f"CAST(CASE WHEN __wn{j} THEN NULL ELSE __w{j} END AS {t})",
                                  dialect="spark"))
    tree.set("where", None)
    alias = table.alias_or_name
    tree.set("from_", exp.From(this=exp.to_table(VIEW).as_(alias, quoted=True)))
    return to_spark_sql(tree)


def _shared_partition(trees: list, stream: cat.StreamDef) -> list[str]:
    """The stream's columns every OVER window is partitioned by, passed through unchanged by
    every SELECT that outputs them (so a window's partition is a set of the stream's rows
    with equal values): rows of different values never meet, and buckets of them can be
    evaluated apart. Empty when any window is over the whole stream."""
    names = {c.name.lower(): c.name for c in stream.columns}
    shared: set[str] | None = None
    for tree in trees:
        if tree is None:
            return []
        for window in tree.find_all(exp.Window):
            mine = set()
            for e in window.args.get("partition_by") or ():
                e = unqualified(e)
                if isinstance(e, exp.Column) and e.name.lower() in names:
                    mine.add(e.name.lower())
            shared = mine if shared is None else shared & mine
    if not shared:
        return []
    kept = [n for n in sorted(shared) if all(stream_plan.passes_through(t, n) for t in trees)]
    return [names[n] for n in kept]


def _sql(e) -> str:
    return to_spark_sql(unqualified(e))
