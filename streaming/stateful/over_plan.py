"""Which continuous OVER-window queries run on Spark's state store, and the SQL around them.

A continuous query of the ``over`` shape (``streaming/planning.py``: OVER windows with
bounded PRECEDING frames, nested through CTEs and subqueries, over one catalog stream;
``lag``) runs on the state store (:mod:`.query`, kernel :mod:`.lookback`) when

* it does not ``EMIT CHANGES`` (early rows would need the rows after progress too), and
* every column of the stream has a type :data:`.plan.KEY_TYPES` carries exactly through the
  kernel (strings, booleans, integers, floating point, dates, timestamps), and Spark can
  evaluate each look-back rule's partition and predicate over the stream's rows.

Before the kernel (:attr:`OverPlan.pre`, Spark SQL per input row): the row's kind and event
time, each column as value plus NULL flag, each ROWS rule's partition as two independent
hashes (``xxhash64`` and ``hash``: 96 bits, so two partitions that would share both are
astronomically unlikely) and whether the row counts, and the row's **bucket**: a hash of
the partition keys every window shares (``PARTITION BY customer`` in all of them: buckets
of customers, evaluated apart), else one bucket holding the whole stream (a window over
the whole stream needs every row of its look-back, in order). After the kernel: the
columns decoded back into the stream's own rows, and the batch plan over them
(:class:`.query.StatefulOverQuery`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import unqualified
from wavesql.planner import ir
from wavesql.planner.temporal import quote

from .. import plan as stream_plan
from . import lookback as kernel
from .plan import _FILL, KEY_TYPES, STAT_NAMES, NotIncremental, _types, row_kind


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

    @property
    def fingerprint(self) -> str:
        """What a checkpoint of this plan depends on (compared on restart)."""
        text = json.dumps([repr(self.operator), self.pre, self.output_ddl, self.buckets,
                           self.stream.key], default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def decoded(self) -> list[str]:
        """Spark SQL of the stream's columns from the kernel's encoded ones."""
        out = []
        for i, c in enumerate(self.stream.columns):
            decode = KEY_TYPES[c.type.lower()][2].format(v=f"__c{i}")
            out.append(f"CASE WHEN __cn{i} THEN NULL ELSE {decode} END AS {quote(c.name)}")
        return out


def recognize_over(spark, plan: stream_plan.Plan, trees: list, emit_changes: bool,
                   buckets: int) -> OverPlan:
    """The :class:`OverPlan` of a continuous query planned as ``over`` (its ``trees``: the
    ASTs of its SQL queries), or :class:`~.plan.NotIncremental` saying why not."""
    if plan.mode != "over" or len(plan.inputs) != 1:
        raise NotIncremental("not OVER windows over one stream")
    if emit_changes:
        raise NotIncremental("EMIT CHANGES over OVER windows")
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
    pre += rule_sql + [("__bucket", bucket)]
    op = kernel.LookbackOperator(tuple(encoded), tuple(rules))
    ddl = ["__kind TINYINT", "__ts BIGINT"]
    for i, t in enumerate(encoded):
        ddl += [f"__cn{i} BOOLEAN", f"__c{i} {t.upper()}"]
    ddl += ["__record STRING", "__file STRING"] + [f"__n{i} BIGINT"
                                                   for i in range(len(STAT_NAMES))]
    kept = "; ".join(str(r) for r in plan.inputs[0].lookback)
    explain = (f"stateful OVER windows on Spark's state store: each bucket keeps its rows' "
               f"look-back ({kept}), "
               + (f"{n_buckets} buckets of {', '.join(shared)}" if shared
                  else "1 bucket (a window over the whole stream)")
               + "; a micro-batch evaluates the query over the buckets with rows due")
    return OverPlan(stream, op, tuple(pre), ", ".join(ddl), n_buckets, explain)


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
