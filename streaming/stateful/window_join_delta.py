"""``ISTREAM`` / ``DSTREAM`` of a per-instant join of windowed streams from the pairs
entering and leaving it: the driver's side, one Spark plan per micro-batch.

When the query is additive over the join keys, the join is inner (or outer on key
equalities only) and the SQL around it row by row, the buckets hand back pair events
(:mod:`.window_join_pairs`: each an encoded row holding the left stream's columns of
``a`` and the right one's of ``b``, ``__ts`` the instant, ``__pk`` the sign, ``__ph`` its
number in its bucket's call). The result at
instant ``t`` changes by the pairs starting there minus those ending there, so per
projected row ``v``: ``ISTREAM(t)(v) = max(0, E_t(v) - L_t(v))``, ``DSTREAM(t)(v) =
max(0, L_t(v) - E_t(v))`` -- no relation per instant, no rows x instants. An outer join's
preserved row NULL-padded over part of its interval comes as an event of its own row
alone, which the user's outer join pads.

:func:`delta` runs the user's own per-instant SQL (the bound ``SqlQuery`` under the
``ISTREAM``/``DSTREAM``: its join, ON, WHERE and projections exactly as the batch plan
has them) over each event's pair alone: each event gets an instant of its own, ``u`` (its
bucket -- a function of the key hashes -- plus the buckets times its number in the call:
unique in the micro-batch, as a bucket's events all come from one call: a second call in
one micro-batch, its timer after its rows, has ``[P, P)`` to make final), both rows carry
``u`` as ``_time``, and the query's join on ``_time`` pairs exactly the event's two rows
(the keys equal, as the user's ON/WHERE still checks). The rows it gives are mapped back
from ``u`` to the event's instant and sign, summed per instant and row (bags: NULL equals
NULL as in GROUP BY) and emitted ``n`` times (ISTREAM, ``n > 0``) or ``-n`` times
(DSTREAM, ``n < 0``) -- what :func:`wavesql.planner.windows.relation_to_stream` gives over
the per-instant result, whose instants before and after change by exactly these pairs.

:func:`pair_query` says whether a bound statement has the shape this reads (else the
runner keeps the per-instant evaluation, :mod:`.window_join_query`).
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from wavesql.planner import ir
from wavesql.planner.windows import TIME


def pair_query(relation: ir.Relation) -> ir.SqlQuery | None:
    """The per-instant ``SqlQuery`` of an ``ISTREAM``/``DSTREAM`` joining two windowed
    catalog streams directly (``StreamOf`` over it, each input a ``WindowScan`` of a
    ``StreamScan``), or None (another shape: it stays on the per-instant evaluation)."""
    if not isinstance(relation, ir.StreamOf) or not isinstance(relation.input, ir.SqlQuery):
        return None
    query = relation.input
    if query.tree is None or len(query.inputs) != 2 or not all(
            isinstance(r, ir.WindowScan) and isinstance(r.input, ir.StreamScan)
            for _, r in query.inputs):
        return None
    return query if time_items(query) else None


def time_items(query: ir.SqlQuery) -> list[int]:
    """The positions of the query's output columns that are the instant (``_time`` or the
    ``COALESCE`` of the sides' ``_time`` the window rewrite writes; the recognizer lets
    ``_time`` appear only as a bare item)."""
    tree = query.tree
    out = []
    for i, e in enumerate(tree.expressions if isinstance(tree, exp.Select) else []):
        cols = list(e.find_all(exp.Column))
        if cols and all(c.name.lower() == TIME for c in cols):
            out.append(i)
    return out


def _over_pairs(query: ir.SqlQuery) -> ir.SqlQuery:
    """The query reading each windowed stream's rows directly (a stream of ``_time`` and
    its columns: the frames :func:`delta` makes), not through its window."""
    inputs = tuple((name, ir.StreamScan(rel.input.stream, rel.schema))
                   for name, rel in query.inputs)
    return replace(query, inputs=inputs)


def delta(spark, runtime, query: ir.SqlQuery, events, buckets: int, kind: str,
          left_columns: list[str], right_columns: list[str], keys: tuple[str, str]):
    """``kind`` (``ISTREAM``/``DSTREAM``) rows of the micro-batch from its pair ``events``
    (module docstring): ``runtime(streams)`` the batch plan's runtime over the given
    streams' rows, ``left_columns``/``right_columns`` each stream's decoding SQL, ``keys``
    the two streams' catalog keys."""
    from pyspark.sql import functions as F

    from wavesql.planner.lower import lower_relation

    u = f"pmod(__sk, {int(buckets)}) + {int(buckets)} * __ph"
    # a NULL-padded event (``__nk``) holds the row of one stream (``__right``) only
    held = ("NOT (__nk AND __right)", "NOT (__nk AND NOT __right)")
    frames = {key: events.where(where).selectExpr(f"timestamp_micros({u}) AS {TIME}", *columns)
              for key, columns, where in zip(keys, (left_columns, right_columns), held)}
    result = lower_relation(_over_pairs(query), runtime(frames))
    names = result.columns
    at = set(time_items(query))
    cols = [f"__c{i}" for i in range(len(names))]
    first = min(at)  # the leading _time the window rewrite writes
    signs = events.selectExpr(f"{u} AS __u", "__ts AS __at", "__pk AS __sign")
    kept = [c for i, c in enumerate(cols) if i not in at]
    counts = (result.toDF(*cols).withColumn("__u", F.unix_micros(F.col(cols[first])))
              .join(signs, "__u").groupBy("__at", *kept)
              .agg(F.sum("__sign").alias("__n")))
    n = F.col("__n") if kind == "ISTREAM" else -F.col("__n")
    copies = (counts.where(n > 0).withColumn(
        "__copy", F.explode(F.sequence(F.lit(1).cast("bigint"), n.cast("bigint")))))
    instant = F.timestamp_micros(F.col("__at"))
    out = [instant if i in at else F.col(c) for i, c in enumerate(cols)]
    return copies.select(*out).toDF(*names)
