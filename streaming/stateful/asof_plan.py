"""Which continuous ASOF JOINs run on Spark's state store, and the row encoding around them.

A continuous query of the ``asof`` shape (``streaming/joins.py`` :func:`plan_asof`: one
``ASOF [LEFT] JOIN`` of two catalog streams -- files or Kafka topics, a topic read as one
watermarked source per partition -- or of views row by row over them (a side's rows are
then the view's: :mod:`.view_rows`), backward or forward, by keys or not,
row-by-row SQL around it) runs on the state store
(:class:`.asof_query.StatefulAsofQuery`, kernel :mod:`.asof`) when

* every column of either stream has a type :data:`.plan.KEY_TYPES` carries exactly through
  the kernel, and each pair of key columns the same kind of value on both sides (the
  kernel compares the keys' hashes: an INT and a BIGINT key hash alike, an INT and a
  DOUBLE would not while SQL's ``=`` matches them).

Before the kernel (:attr:`AsofPlan.pre`, Spark SQL per input row, one list per stream):
the row's kind, its stream (``__right``), its event time, each column of its stream as
value plus NULL flag (the other stream's columns NULL), the keys as two independent hashes
(``xxhash64`` and ``hash`` over each key's NULL flag and value) with ``__nk`` (a key is
NULL: it matches nothing), and the row's **bucket** (a hash of the keys; no keys: one
bucket). After it, each stream's columns are decoded back into its own rows and the batch
plan runs over the rows the buckets hand back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from wavesql.catalog import objects as cat
from wavesql.planner import ir
from wavesql.planner.temporal import quote

from .. import plan as stream_plan
from . import asof as kernel
from .plan import (_FILL, ARRIVED, FLOATING, INTEGRAL, KEY_TYPES, STAT_NAMES, NotIncremental,
                   arrival, row_kind)


#: How the state's progress is kept, part of the fingerprint: checkpoints written when both
#: streams shared Spark's one watermark (their minimum) are refused, not reinterpreted.
PROGRESS_MODEL = "per-stream progress: right = Spark's watermark, left = driver record v1"


@dataclass(frozen=True)
class AsofPlan:
    """A continuous ASOF JOIN the stateful runner evaluates."""

    left: cat.StreamDef
    right: cat.StreamDef
    operator: kernel.AsofOperator
    #: ``(column name, Spark SQL)`` per input row of the left and the right stream
    pre_left: tuple[tuple[str, str], ...]
    pre_right: tuple[tuple[str, str], ...]
    output_ddl: str  # the kernel rows' Spark schema
    buckets: int
    explain: str
    #: per side (left, right): the view, CTE or subquery joined (row by row over the
    #: side's stream: its rows are what the kernel keeps), or None -- the stream itself
    views: tuple = (None, None)
    #: per side: the columns of the view the kernel's rows hold (the stream's: empty)
    view_columns: tuple = ((), ())
    #: an interval join whose sides were written inline, or a join of a stream with itself:
    #: ``(query, the query reading them as inputs)`` (streaming/joins.py ``_with_sides``,
    #: ``_itself``), or None
    hoisted: tuple | None = None

    @property
    def streams(self) -> tuple[cat.StreamDef, cat.StreamDef]:
        return self.left, self.right

    def columns(self, right: bool) -> tuple:
        """The columns of one side's rows: its view's, or its stream's."""
        return self.view_columns[right] or (self.right if right else self.left).columns

    def view(self, stream: cat.StreamDef):
        """The view joined over ``stream`` (None: the stream itself)."""
        return self.views[stream.key == self.right.key]

    @property
    def fingerprint(self) -> str:
        """What a checkpoint depends on, compared on restart: the operator, both streams'
        per-row SQL, the output schema, the buckets and the streams."""
        # a view's filters decide which rows the state holds: its SQL is part of it
        views = [[r.sql for r in ir.walk(v) if isinstance(r, ir.SqlQuery)]
                 for v in self.views if v is not None]
        text = json.dumps([repr(self.operator), self.pre_left, self.pre_right,
                           self.output_ddl, self.buckets, self.left.key, self.right.key,
                           PROGRESS_MODEL] + ([views] if views else []), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def decoded(self, right: bool) -> list[str]:
        """Spark SQL of one stream's columns from the kernel's encoded ones."""
        side = "r" if right else "l"
        out = []
        for i, c in enumerate(self.columns(right)):
            decode = KEY_TYPES[c.type.lower()][2].format(v=f"__{side}{i}")
            out.append(f"CASE WHEN __{side}n{i} THEN NULL ELSE {decode} END AS {quote(c.name)}")
        return out


def _family(spark_type: str) -> str:
    """What kind of value a key holds, for hashing alike on both sides."""
    t = spark_type.lower()
    return "integral" if t in INTEGRAL else "floating" if t in FLOATING else t


def recognize_asof(plan: stream_plan.Plan, emit_changes: bool, buckets: int,
                   spark=None) -> AsofPlan:
    """The :class:`AsofPlan` of a continuous query planned as ``asof``, or
    :class:`~.plan.NotIncremental` saying why not. (``EMIT CHANGES`` changes nothing: an
    ASOF JOIN's rows are final as they come, on either runner.)"""
    del emit_changes
    if plan.mode != "asof" or plan.asof is None or len(plan.inputs) != 2:
        raise NotIncremental("not an ASOF JOIN of two streams")
    info = plan.asof
    views = info.get("views") or {}
    cols = view_columns(spark, plan, views)
    left, right, pairs, n_buckets = joined_streams(plan, info["left"], info["right"],
                                                   info["pairs"], buckets, cols)
    keyed = bool(pairs)
    op = kernel.AsofOperator(encoded_types(left, cols.get(left.key)),
                             encoded_types(right, cols.get(right.key)),
                             info["direction"], bool(info["inclusive"]), keyed)
    pre_left = encoded_rows(left, False, [lc for lc, _ in pairs], op, n_buckets,
                            cols.get(left.key))
    pre_right = encoded_rows(right, True, [rc for _, rc in pairs], op, n_buckets,
                             cols.get(right.key))
    ddl = output_ddl(op, left, right)
    keys = ", ".join(f"{lc.name} = {rc.name}" for lc, rc in pairs) or "no keys"
    explain = (f"stateful ASOF JOIN{over_views(left, right, views)} on Spark's state store "
               f"({info['direction']}, "
               f"{'inclusive' if info['inclusive'] else 'strict'}, {keys}): each bucket keeps "
               f"the waiting {left.name} rows and the {right.name} rows a waiting or future "
               "one can still match; "
               + (f"{n_buckets} buckets of the keys" if keyed else "1 bucket (no keys)")
               + "; progress per stream (a row below its own stream's is late): the "
                 f"{right.name} stream's is Spark's watermark (a {left.name} row is final "
                 f"once it passes), the {left.name} stream's kept by the driver per "
                 "micro-batch; a micro-batch joins the left rows whose match became final")
    return AsofPlan(left, right, op, tuple(pre_left), tuple(pre_right), ddl, n_buckets,
                    explain, (views.get(left.key), views.get(right.key)),
                    (cols.get(left.key, ()), cols.get(right.key, ())), info.get("query"))


def over_views(a: cat.StreamDef, b: cat.StreamDef, views: dict) -> str:
    """EXPLAIN STREAM's words for the sides that are views ('' when neither is)."""
    over = [s for s in (a, b) if views.get(s.key) is not None]
    if not over:
        return ""
    names = " and ".join(f"a view of {s.name}" for s in over)
    return (f" over {names} (row by row: each micro-batch's rows of "
            f"{' and '.join(s.name for s in over)} are put through it, late rows judged by "
            "the stream's EVENT TIME before it)")


def view_columns(spark, plan: stream_plan.Plan, views: dict) -> dict:
    """Stream key -> the columns (:class:`~wavesql.catalog.objects.Column`) of the view
    joined over it, for the sides that are views. A side written inline in an interval
    join (streaming/joins.py ``_inline_side``) has no schema yet: Spark analyses it over
    no rows of its stream."""
    from wavesql.planner.lower import Runtime, lower_relation

    out = {}
    for i in plan.inputs:
        view = views.get(i.stream.key)
        if view is None:
            continue
        fields = [(f.name, f.type) for f in view.schema.fields]
        if not fields:
            ddl = ", ".join(f"{quote(c.name)} {c.type}" for c in i.stream.columns)
            empty = spark.createDataFrame([], ddl)
            frame = lower_relation(view, Runtime(spark, None, "",
                                                 streams={i.stream.key: empty}))
            fields = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]
        out[i.stream.key] = tuple(cat.Column(n, t) for n, t in fields)
    return out


def joined_streams(plan: stream_plan.Plan, left_key: str, right_key: str, pairs: list,
                   buckets: int, columns: dict | None = None) -> tuple:
    """``(left, right, key columns, buckets)`` of a join of two streams on the state store
    (:func:`checked_pairs`; without keys, one bucket); ``columns``: stream key -> the
    columns of a view joined over it (:func:`view_columns`)."""
    by_key = {i.stream.key: i.stream for i in plan.inputs}
    left, right = by_key[left_key], by_key[right_key]
    columns = columns or {}
    checked = checked_pairs(left, right, pairs, columns.get(left_key), columns.get(right_key))
    return left, right, checked, (buckets if checked else 1)


def checked_pairs(left: cat.StreamDef, right: cat.StreamDef, pairs: list,
                  left_columns=None, right_columns=None) -> list:
    """The key columns ``(left, right)`` of a join of two streams on the state store, or
    :class:`~.plan.NotIncremental`: every column of either stream (of the view joined over
    it: ``left_columns`` / ``right_columns``) must travel exactly through the kernel, and
    each key pair hash alike on both sides."""
    left_columns = left_columns or left.columns
    right_columns = right_columns or right.columns
    for s, columns in ((left, left_columns), (right, right_columns)):
        for c in columns:
            if c.type.lower() not in KEY_TYPES:
                raise NotIncremental(f"the column {s.name}.{c.name} of type {c.type}")
    lcols = {c.name.lower(): c for c in left_columns}
    rcols = {c.name.lower(): c for c in right_columns}
    out = []
    for lk, rk in pairs:
        lc, rc = lcols.get(lk.lower()), rcols.get(rk.lower())
        if lc is None or rc is None:
            raise NotIncremental(f"the key pair {lk} = {rk} is not two stream columns")
        if _family(lc.type) != _family(rc.type):
            raise NotIncremental(f"the keys {left.name}.{lc.name} ({lc.type}) and "
                                 f"{right.name}.{rc.name} ({rc.type}) hold different kinds "
                                 "of values")
        out.append((lc, rc))
    return out


def encoded_types(stream: cat.StreamDef, columns=None) -> tuple[str, ...]:
    """The kernel's types of a stream's columns (``columns``: a view's over it)."""
    return tuple(KEY_TYPES[c.type.lower()][1] for c in (columns or stream.columns))


def output_ddl(op, left: cat.StreamDef, right: cat.StreamDef) -> str:
    """The Spark schema of a two-stream kernel's rows (``op.schema()`` under ``__`` names,
    the passed-through rows' text and file, the counts)."""
    ddl = ["__kind TINYINT"] + [f"__{f.name} {_spark(f.type)}" for f in op.schema()]
    ddl += ["__record STRING", "__file STRING"]
    ddl += [f"__n{i} BIGINT" for i in range(len(STAT_NAMES))]
    if left.source == "kafka" or right.source == "kafka":
        ddl.append(f"{ARRIVED} BIGINT")  # a call's earliest Kafka record (result latency)
    return ", ".join(ddl)


def _spark(arrow_type) -> str:
    import pyarrow as pa

    return {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "STRING",
            pa.bool_(): "BOOLEAN"}[arrow_type]


def _key_sql(c: cat.Column) -> str:
    """One key's value as both sides hash it: integral keys as BIGINT, floating ones as
    DOUBLE with -0.0 as 0.0 (SQL's ``=`` matches them)."""
    family = _family(c.type)
    if family == "integral":
        return f"CAST({quote(c.name)} AS BIGINT)"
    if family == "floating":
        v = f"CAST({quote(c.name)} AS DOUBLE)"
        return f"CASE WHEN {v} = 0 THEN 0.0D ELSE {v} END"
    return quote(c.name)


def encoded_rows(stream: cat.StreamDef, right: bool, keys: list, op,
                 n_buckets: int, columns=None) -> list[tuple[str, str]]:
    """The per-row SQL of one stream's rows (module docstring); ``op``: a two-stream
    kernel's operator (its ``left`` / ``right`` encoded types). ``columns``: the rows are
    those of a view over the stream with these columns, the stream row's kind computed
    before the view and carried through it as ``__kind`` (.asof_query), its EVENT TIME
    passed through under its name (streaming/joins.py)."""
    if keys:
        parts = ", ".join(f"{quote(k.name)} IS NULL, {_key_sql(k)}" for k in keys)
        series = [("__sk", f"xxhash64({parts})"), ("__sh", f"CAST(hash({parts}) AS BIGINT)"),
                  ("__nk", " OR ".join(f"{quote(k.name)} IS NULL" for k in keys))]
        bucket = f"CAST(pmod(xxhash64({parts}), {n_buckets}) AS INT)"
    else:
        series, bucket = [("__sk", "0L"), ("__sh", "0L"), ("__nk", "false")], "0"
    kind = row_kind(stream) if columns is None else "__kind"
    pre = [("__kind", f"CAST({kind} AS TINYINT)"),
           ("__ts", f"coalesce(unix_micros({quote(stream.event_time)}), 0L)"),
           ("__right", "true" if right else "false")] + series
    for side, types, mine in (("l", op.left, not right), ("r", op.right, right)):
        for i, t in enumerate(types):
            if mine:
                c = (columns or stream.columns)[i]
                enc = KEY_TYPES[c.type.lower()][0].format(v=f"({quote(c.name)})")
                pre += [(f"__{side}n{i}", f"{quote(c.name)} IS NULL"),
                        (f"__{side}{i}", f"coalesce({enc}, {_FILL[t]})")]
            else:
                pre += [(f"__{side}n{i}", "true"), (f"__{side}{i}", _FILL[t])]
    pre += arrival(stream)
    pre.append(("__bucket", bucket))
    return pre
