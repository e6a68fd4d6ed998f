"""``MERGE`` and ``ZIP``: combining several streams into one relation.

``MERGE(a [AS name], b [AS name], ...)``
    The union of its inputs, each row tagged with ``_source``, the name of the input it came
    from (its ``AS`` name if given) (``UNION ALL`` keeps every row: nothing is deduplicated). The inputs must have the
    same columns (names and types, in any order; the first input's order is kept), so that a
    row's meaning never depends on which input it came from. In a continuous query the union
    runs as any ``UNION ALL`` of streams does there: its progress is the minimum of the
    inputs' (an idle input holds it back unless it declares a ``HEARTBEAT``), so a merged
    result is final only when every input has promised it.

``ZIP(a [AS name] [BY col], b [AS name] [BY col], ...)``
    Pairs the *i*-th rows of its inputs: row *i* of the result has ``_index`` = *i* (from 0)
    and one struct column per input, named after the input (its ``AS`` name), holding that input's *i*-th row.
    Rows are numbered in the order of the ``BY`` column, by default the stream's
    ``EVENT TIME`` (a signal: its segments' start sample; a CTE or view of a query over a
    signal's windows: its ``start_time(...)`` column, as a CQL window over it takes); ties are broken by the remaining
    columns of simple types, so the pairing is deterministic. Like any zip, the result is as
    long as the shortest input: the extra rows of longer inputs have no partner and are not
    in the result (count them with ``count(*)`` per input if that matters).
    A continuous ZIP is refused (``STREAMING_RULE``, streaming/launch.py): numbering rows
    would take only a counter per input, but an input faster than the others would make
    the query keep its unpaired rows without bound.

Both are rewritten here, before anything else is bound, into a plain subquery over the
inputs; so they compose with everything a subquery composes with (windows over it in an
outer query, joins, views), and ``EXPLAIN AST`` shows the original text.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.errors import Span, WaveSQLError

from . import ir

SOURCE = "_source"
INDEX = "_index"

# Spark types that can be ordered (and so break ZIP's ties); nested ones cannot.
_NESTED = ("array", "struct", "map", "variant")


def expand(node: exp.Expression, resolve: Callable[[exp.Table], ir.Relation],
           signal_time: Callable[[exp.Expression, ir.Relation], str | None] | None = None,
           ) -> exp.Expression:
    """``node`` with every MERGE/ZIP replaced by the equivalent subquery.

    ``resolve`` binds one input table to its relation (for its schema and event time);
    ``signal_time(table, relation)``: the time column of an input that is a query over a
    signal's windows (a CTE or view of one: its ``start_time(...)`` column), else None.
    """
    found = list(node.find_all(wn.Combine))
    if not found:
        return node
    from wavesql.dialect import parse_one

    node = node.copy()
    for combine in list(node.find_all(wn.Combine)):
        inputs = [(i, resolve(i.this)) for i in combine.expressions]
        names = [(i.args["alias"].name if i.args.get("alias") else i.this.name)
                 for i, _ in inputs]
        if combine.kind == "ZIP":
            _no_duplicates(inputs, names)
            sql = _zip_sql(inputs, names, signal_time)
        else:
            sql = _merge_sql(inputs, names)
        alias = combine.args.get("alias")
        query = parse_one(sql)
        combine.replace(exp.Subquery(this=query, alias=alias.copy() if alias else
                                     exp.TableAlias(this=exp.to_identifier(
                                         combine.kind.lower() + "d"))))
    return node


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _merge_sql(inputs, names) -> str:
    first_input, first = inputs[0]
    columns = first.schema.fields
    if first.schema.find(SOURCE) is not None:
        raise WaveSQLError("SCHEMA_MISMATCH", f"MERGE adds a `{SOURCE}` column and "
                           f"`{names[0]}` already has one", Span.of(first_input),
                           hint=f"rename it in a view: SELECT {SOURCE} AS src, ... FROM "
                                f"{names[0]}")
    want = {f.name.lower(): f.type.lower() for f in columns}
    for (node, rel), name in zip(inputs[1:], names[1:]):
        have = {f.name.lower(): f.type.lower() for f in rel.schema.fields}
        if have != want:
            missing = [c for c in want if c not in have]
            extra = [c for c in have if c not in want]
            typed = [f"{c} is {have[c]} here, {want[c]} in {names[0]}" for c in want
                     if c in have and have[c] != want[c]]
            detail = "; ".join(filter(None, [
                f"missing {', '.join(missing)}" if missing else "",
                f"extra {', '.join(extra)}" if extra else "", *typed]))
            raise WaveSQLError("SCHEMA_MISMATCH", f"MERGE input `{name}` does not have the "
                               f"columns of `{names[0]}`: {detail}", Span.of(node),
                               hint="give the inputs the same columns with views "
                                    "(CAST, AS, NULL AS missing_column)")
    cols = ", ".join(_q(f.name) for f in columns)
    return " UNION ALL ".join(
        f"SELECT '{name.replace(chr(39), chr(39) * 2)}' AS {SOURCE}, {cols} "
        f"FROM {_q(node.this.name)}" for (node, _), name in zip(inputs, names))


def _no_duplicates(inputs, names) -> None:
    seen: set[str] = set()
    for (node, _), name in zip(inputs, names):
        if name.lower() in seen:
            raise WaveSQLError("INVALID_OPTION", f"ZIP names `{name}` twice; its columns are "
                               "named after the inputs", Span.of(node),
                               hint=f"name the inputs: ZIP({name} AS a, {name} AS b)")
        seen.add(name.lower())


def _order_of(node: wn.ZipInput, rel: ir.Relation, name: str, signal_time=None) -> str:
    order = node.args.get("order")
    if order is not None:
        head = order.parts[0].name if order.parts else order.name
        if rel.schema.find(head) is None:
            from wavesql.errors import did_you_mean

            raise WaveSQLError("UNKNOWN_COLUMN", f"ZIP orders `{name}` by `{order.sql()}`, "
                               f"which is not one of its columns", Span.of(order),
                               hint=did_you_mean(head, rel.schema.names, "columns"))
        return order.sql(dialect="spark")
    if isinstance(rel, ir.StreamScan) and rel.stream.event_time:
        return _q(rel.stream.event_time)
    if not isinstance(rel, (ir.StreamScan, ir.SignalScan)):  # a view or CTE of a stream
        carried = ir.carried_event_time(rel) or (
            signal_time(node.this, rel) if signal_time is not None else None)
        if carried is not None:
            return _q(carried)
    if isinstance(rel, ir.SignalScan) and rel.schema.fields:
        return f"{_q(rel.schema.fields[0].name)}.start"
    raise WaveSQLError("ZIP_ORDER", f"ZIP cannot tell the order of `{name}`'s rows: it has no "
                       "EVENT TIME", Span.of(node),
                       hint=f"name a column to order it by: ZIP({name} BY t, ...)")


def _zip_sql(inputs, names, signal_time=None) -> str:
    parts, outputs = [], []
    for k, ((node, rel), name) in enumerate(zip(inputs, names)):
        order = _order_of(node, rel, name, signal_time)
        ties = [_q(f.name) for f in rel.schema.fields
                if not f.type.lower().startswith(_NESTED) and _q(f.name) != order]
        row = ", ".join(_q(f.name) for f in rel.schema.fields)
        parts.append(f"(SELECT CAST(row_number() OVER (ORDER BY {', '.join([order] + ties)})"
                     f" - 1 AS BIGINT) AS {INDEX}, struct({row}) AS __row "
                     f"FROM {_q(node.this.name)})"
                     f" __zip{k}")
        outputs.append(f"__zip{k}.__row AS {_q(name)}")
    joins = " ".join(f"JOIN {p} ON __zip0.{INDEX} = __zip{k}.{INDEX}"
                     for k, p in enumerate(parts) if k)
    return f"SELECT __zip0.{INDEX} AS {INDEX}, {', '.join(outputs)} FROM {parts[0]} {joins}"
