"""Which continuous RESAMPLE queries run on Spark's state store, and the SQL around them.

A continuous query of the ``resample`` shape (``streaming/resample.py``: one RESAMPLE of
one catalog stream, per key with ``PARTITION BY`` or not, row-by-row SQL around it) runs
on the state store (:class:`.resample_query.StatefulResampleQuery`, kernel
:mod:`.resample`) when

* it does not ``EMIT CHANGES`` (early grid points would need re-evaluation as rows come),
* every column of the stream has a type :data:`.plan.KEY_TYPES` carries exactly through
  the kernel (strings, booleans, integers, floating point, dates, timestamps).

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

#: The kernel's output row kind carrying a series' span (the other kinds: plan.py).
SPAN = 5


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
    keys: tuple[str, ...]  # the PARTITION BY columns (the stream's names)
    time_column: str

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


def recognize_resample(plan: stream_plan.Plan, relation: ir.Relation, emit_changes: bool,
                       buckets: int) -> ResamplePlan:
    """The :class:`ResamplePlan` of a continuous query planned as ``resample``, or
    :class:`~.plan.NotIncremental` saying why not."""
    if plan.mode != "resample" or len(plan.inputs) != 1:
        raise NotIncremental("not a RESAMPLE of one stream")
    if emit_changes:
        raise NotIncremental("EMIT CHANGES over a RESAMPLE")
    found = [q.resample for q in ir.walk(relation)
             if isinstance(q, ir.SqlQuery) and q.resample is not None]
    if len(found) != 1:
        raise NotIncremental("not one RESAMPLE")
    r = found[0]
    stream = plan.inputs[0].stream
    encoded = []
    for c in stream.columns:
        t = c.type.lower()
        if t not in KEY_TYPES:
            raise NotIncremental(f"the column {c.name} of type {c.type}")
        encoded.append(KEY_TYPES[t][1])
    index = {c.name.lower(): i for i, c in enumerate(stream.columns)}
    keys = tuple(stream.columns[index[k.lower()]].name for k in r.keys)
    special = {r.time_column.lower()} | {k.lower() for k in keys}
    # the batch SQL breaks ties between rows of one instant by the other columns, in order
    order = tuple(i for i, c in enumerate(stream.columns)
                  if c.name.lower() not in special and is_orderable(c.type))
    interp = tuple(index[n.lower()] for n in r.numeric) if r.method == "linear" else ()
    op = kernel.ResampleOperator(tuple(encoded), int(r.period_us), r.method, bool(keys),
                                 interp, order)
    n_buckets = buckets if keys else 1
    if keys:
        parts = ", ".join(f"{quote(k)} IS NULL, {quote(k)}" for k in keys)
        series = [("__sk", f"xxhash64({parts})"), ("__sh", f"CAST(hash({parts}) AS BIGINT)")]
        bucket = f"CAST(pmod(xxhash64({parts}), {n_buckets}) AS INT)"
    else:
        series, bucket = [("__sk", "0L"), ("__sh", "0L")], "0"
    kind = row_kind(stream)
    pre = [("__kind", f"CAST({kind} AS TINYINT)"),
           ("__ts", f"coalesce(unix_micros({quote(stream.event_time)}), 0L)")] + series
    ddl = ["__kind TINYINT", "__ts BIGINT", "__sk BIGINT", "__sh BIGINT"]
    for i, c in enumerate(stream.columns):
        enc = KEY_TYPES[c.type.lower()][0].format(v=f"({quote(c.name)})")
        pre += [(f"__cn{i}", f"{quote(c.name)} IS NULL"),
                (f"__c{i}", f"coalesce({enc}, {_FILL[encoded[i]]})")]
        ddl += [f"__cn{i} BOOLEAN", f"__c{i} {encoded[i].upper()}"]
    pre += arrival(stream)
    pre.append(("__bucket", bucket))
    ddl += ["__lo BIGINT", "__lon BOOLEAN", "__hi BIGINT", "__cap BIGINT", "__capn BOOLEAN",
            "__b BIGINT", "__record STRING", "__file STRING"]
    ddl += [f"__n{i} BIGINT" for i in range(len(STAT_NAMES))]
    ddl += [f"{name} BIGINT" for name, _ in arrival(stream)]
    kept = "; ".join(str(rule) for rule in plan.inputs[0].lookback)
    explain = (f"stateful RESAMPLE on Spark's state store ('{r.method}', every "
               f"{r.period_us} us): each series keeps its rows from its bound on and the "
               f"rows bracketing its next grid points ({kept}), "
               + (f"{n_buckets} buckets of {', '.join(keys)}" if keys else
                  "1 bucket (one series)")
               + "; a micro-batch evaluates the RESAMPLE over the series with grid points "
                 "becoming final")
    return ResamplePlan(stream, op, tuple(pre), ", ".join(ddl), n_buckets, explain, keys,
                        r.time_column)
