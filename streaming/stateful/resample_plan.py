"""Which continuous RESAMPLE queries run on Spark's state store, and the SQL around them.

A continuous query of the ``resample`` shape (``streaming/resample.py``: one RESAMPLE of
one catalog stream, per key with ``PARTITION BY`` or not, row-by-row SQL around it) runs
on the state store (:class:`.resample_query.StatefulResampleQuery`, kernel
:mod:`.resample`) when every column of the stream has a type :data:`.plan.KEY_TYPES`
carries exactly through the kernel (strings, booleans, integers, floating point, dates,
timestamps).

``EMIT CHANGES``: a bucket the micro-batch calls hands back its series with grid points not
final yet too (from each series' bound up to its last row), evaluated over the rows so far
and emitted with ``_final = false``; a bucket Spark does not call has the same points not
final yet, with the same values, as in the batch before, so they are carried from that
batch (:mod:`.pending`; a result row's bucket is its keys', which the result carries).

A RESAMPLE *under CQL windows* (TiLT's imputation, mode ``windowed``) stays on the
re-evaluating runner: its rows are final by the window instants, which join every key's
grid points to its bucket -- two operators' state (the grid, and the windows over it) and
a bound shared by all keys; see the decisions table in ``streaming/__init__.py``.

Before the kernel (:attr:`ResamplePlan.pre`, Spark SQL per input row): the row's kind
and event time, each column as value plus NULL flag, the series as two independent hashes
of its keys (``xxhash64`` and ``hash`` over each key's NULL flag and value: 96 bits, and
``(NULL, 'x')`` differs from ``('x', NULL)``), and the row's **bucket** (a hash of the
keys; un-keyed: one bucket). After it, the columns are decoded back into the stream's own
rows and the batch plan runs over the rows the buckets hand back.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavesql.catalog import objects as cat
from wavesql.planner import ir
from wavesql.planner.temporal import is_orderable, quote

from .. import plan as stream_plan
from . import resample as kernel
from .plan import _FILL, KEY_TYPES, STAT_NAMES, NotIncremental, arrival, fingerprint, row_kind

#: The kernel's output row kinds carrying a series' span of final points and (``EMIT
#: CHANGES``) of points not final yet (the other kinds: plan.py).
SPAN, PENDING = 5, 6


@dataclass(frozen=True)
class ResamplePlan:
    """A continuous RESAMPLE the stateful runner evaluates."""

    stream: cat.StreamDef
    operator: kernel.ResampleOperator
    #: ``(column name, Spark SQL)`` per input row, in order (module docstring)
    pre: tuple[tuple[str, str], ...]
    output_ddl: str  # the kernel rows' Spark schema
    buckets: int
    explain: str
    keys: tuple[str, ...]  # the PARTITION BY columns (the series' names)
    time_column: str
    #: the series' columns, ``(name, Spark type)``: the stream's, or the view's
    columns: tuple[tuple[str, str], ...] = ()
    #: the view, CTE or subquery RESAMPLEd (row by row over ``stream``), or None; its rows
    #: are what the kernel keeps (:meth:`.resample_query.StatefulResampleQuery._watermarked`)
    view: ir.Relation | None = None
    #: over a view: Spark SQL of a stream row's kind, evaluated before the view
    raw_kind: str | None = None
    #: Spark SQL of a row's bucket over the series' columns (``__bucket`` in ``pre``), over
    #: a result row too (its keys): ``EMIT CHANGES`` carries rows by it (:mod:`.pending`)
    bucket: str = "0"

    @property
    def changes(self) -> bool:
        return self.operator.changes

    @property
    def fingerprint(self) -> str:
        if self.view is None:
            return fingerprint(self)
        # the view's filters decide which rows the state holds: a checkpoint is its own
        views = [r.sql for r in ir.walk(self.view) if isinstance(r, ir.SqlQuery)]
        return fingerprint(self) + _digest(views)

    def decoded(self) -> list[str]:
        """Spark SQL of the series' columns from the kernel's encoded ones."""
        out = []
        for i, (name, type_) in enumerate(self.columns):
            decode = KEY_TYPES[type_.lower()][2].format(v=f"__c{i}")
            out.append(f"CASE WHEN __cn{i} THEN NULL ELSE {decode} END AS {quote(name)}")
        return out


def _digest(texts: list) -> str:
    import hashlib

    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:8]


def recognize_resample(plan: stream_plan.Plan, relation: ir.Relation, emit_changes: bool,
                       buckets: int) -> ResamplePlan:
    """The :class:`ResamplePlan` of a continuous query planned as ``resample``, or
    :class:`~.plan.NotIncremental` saying why not."""
    if plan.mode != "resample" or len(plan.inputs) != 1:
        raise NotIncremental("not a RESAMPLE of one stream")
    found = [q.resample for q in ir.walk(relation)
             if isinstance(q, ir.SqlQuery) and q.resample is not None]
    if len(found) != 1:
        raise NotIncremental("not one RESAMPLE")
    r = found[0]
    stream = plan.inputs[0].stream
    view = plan.resample.get("view")
    # over a view, the series are the view's rows (the stream's, row by row, filtered and
    # projected), encoded by the view's columns
    columns = (tuple((c.name, c.type) for c in stream.columns) if view is None else
               tuple((f.name, f.type) for f in view.schema.fields))
    encoded = []
    for name, type_ in columns:
        t = type_.lower()
        if t not in KEY_TYPES:
            raise NotIncremental(f"the column {name} of type {type_}")
        encoded.append(KEY_TYPES[t][1])
    index = {name.lower(): i for i, (name, _) in enumerate(columns)}
    keys = tuple(columns[index[k.lower()]][0] for k in r.keys)
    special = {r.time_column.lower()} | {k.lower() for k in keys}
    # the batch SQL breaks ties between rows of one instant by the other columns, in order
    order = tuple(i for i, (name, type_) in enumerate(columns)
                  if name.lower() not in special and is_orderable(type_))
    interp = tuple(index[n.lower()] for n in r.numeric) if r.method == "linear" else ()
    op = kernel.ResampleOperator(tuple(encoded), int(r.period_us), r.method, bool(keys),
                                 interp, order, emit_changes)
    n_buckets = buckets if keys else 1
    if keys:
        parts = ", ".join(f"{quote(k)} IS NULL, {quote(k)}" for k in keys)
        series = [("__sk", f"xxhash64({parts})"), ("__sh", f"CAST(hash({parts}) AS BIGINT)")]
        bucket = f"CAST(pmod(xxhash64({parts}), {n_buckets}) AS INT)"
    else:
        series, bucket = [("__sk", "0L"), ("__sh", "0L")], "0"
    # over a view the row's kind is the stream row's, computed before the view and carried
    kind = row_kind(stream) if view is None else "__kind"
    time = stream.event_time if view is None else r.time_column  # (the same, carried)
    pre = [("__kind", f"CAST({kind} AS TINYINT)"),
           ("__ts", f"coalesce(unix_micros({quote(time)}), 0L)")] + series
    ddl = ["__kind TINYINT", "__ts BIGINT", "__sk BIGINT", "__sh BIGINT"]
    for i, (name, type_) in enumerate(columns):
        enc = KEY_TYPES[type_.lower()][0].format(v=f"({quote(name)})")
        pre += [(f"__cn{i}", f"{quote(name)} IS NULL"),
                (f"__c{i}", f"coalesce({enc}, {_FILL[encoded[i]]})")]
        ddl += [f"__cn{i} BOOLEAN", f"__c{i} {encoded[i].upper()}"]
    pre += arrival(stream)
    pre.append(("__bucket", bucket))
    ddl += ["__lo BIGINT", "__lon BOOLEAN", "__hi BIGINT", "__cap BIGINT", "__capn BOOLEAN",
            "__b BIGINT", "__record STRING", "__file STRING"]
    ddl += [f"__n{i} BIGINT" for i in range(len(STAT_NAMES))]
    ddl += [f"{name} BIGINT" for name, _ in arrival(stream)]
    kept = "; ".join(str(rule) for rule in plan.inputs[0].lookback)
    over = ("" if view is None else
            f" over a view of {stream.name} (row by row: each micro-batch's rows are put "
            f"through it, late rows judged by {stream.event_time} before it)")
    explain = (f"stateful RESAMPLE{over} on Spark's state store ('{r.method}', every "
               f"{r.period_us} us): each series keeps its rows from its bound on and the "
               f"rows bracketing its next grid points ({kept}), "
               + (f"{n_buckets} buckets of {', '.join(keys)}" if keys else
                  "1 bucket (one series)")
               + "; a micro-batch evaluates the RESAMPLE over the series with grid points "
                 "becoming final"
               + ("; EMIT CHANGES: the points not final yet of the buckets a micro-batch "
                  "calls too (_final = false), the other buckets' carried from the batch "
                  "before" if emit_changes else ""))
    return ResamplePlan(stream, op, tuple(pre), ", ".join(ddl), n_buckets, explain, keys,
                        r.time_column, columns, view,
                        None if view is None else row_kind(stream), bucket)

