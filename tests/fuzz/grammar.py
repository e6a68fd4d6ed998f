"""A small grammar of valid Spark SQL queries over two tables, for differential testing.

Every generated query is valid Spark SQL (ANSI mode) with a deterministic result multiset:

* expressions are typed (INT, DOUBLE, STRING, BOOLEAN, TIMESTAMP, DATE, ARRAY<STRING>), so
  comparisons, CASE branches, COALESCE arguments and UNION ALL columns always agree in type;
* nothing can raise at run time under ANSI mode: no division or modulo by anything but a
  non-zero literal, no string-to-number casts, no overflow (the values are small);
* ``ORDER BY ... LIMIT`` appears only at the top and orders by every output column, so the
  rows it keeps are determined (ties are identical rows); window functions either have no
  ``ORDER BY`` or order by ``rid``, unique in table ``a``, over ``a`` alone; arrays built by
  aggregates are sorted (``sort_array(collect_set(...))``).

Queries mention their tables as ``@a@`` / ``@b@``; :func:`render` substitutes real names, so
the same query runs over WaveSQL catalog streams and over plain Spark temp views.

Table and column aliases are drawn from a pool that includes words WaveSQL gives a meaning
(``emit``, ``late``, ``samples``, ``now``, ``rate``, ...), which Spark SQL allows as names.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

TABLES: dict[str, list[tuple[str, str]]] = {
    "a": [("rid", "INT"), ("id", "INT"), ("g", "STRING"), ("x", "DOUBLE"), ("n", "INT"),
          ("flag", "BOOLEAN"), ("ts", "TIMESTAMP")],
    "b": [("id", "INT"), ("g", "STRING"), ("w", "DOUBLE"), ("m", "INT"), ("d", "DATE")],
}
#: Types of output columns, common ones more often.
TYPES = ("INT", "DOUBLE", "STRING", "BOOLEAN", "INT", "DOUBLE", "STRING", "TIMESTAMP", "DATE",
         "ARRAY")
#: Types that may be GROUP BY keys and ORDER BY columns.
KEY_TYPES = ("INT", "DOUBLE", "STRING", "BOOLEAN", "TIMESTAMP", "DATE")

# Aliases: plain names and words that are WaveSQL keywords but ordinary names in Spark SQL.
TABLE_ALIASES = ("t", "u", "s1", "emit", "late", "samples", "now", "rate", "segment", "slide",
                 "final", "changes")
COLUMN_ALIASES = ("c", "v", "emit", "late", "samples", "now", "rate", "segment", "sync",
                  "final", "missing", "epoch", "hz", "istream")

INT_LITERALS = ("0", "1", "2", "3", "-1", "-4", "7")
DOUBLE_LITERALS = ("0.5D", "1.25D", "-2.0D", "CAST(0.75 AS DOUBLE)", "1e0", "2.5E-1")
DECIMAL_LITERALS = ("1.5", "0.25", "-3.0")
STRING_LITERALS = ("'ab'", "'Ab'", "''", "'it''s'", "'x\\\\y'", "'\u00e9'", "'b%c'", "'a_b'",
                   "'zz'", "'a b'", "\"ab\"", "'\\''")
TIMESTAMP_LITERALS = ("TIMESTAMP '2024-01-01 06:00:00'", "TIMESTAMP '2024-01-01 00:00:00'",
                      "CAST('2024-01-01 12:30:00' AS TIMESTAMP)")
DATE_LITERALS = ("DATE '2024-01-03'", "DATE '2024-01-01'", "CAST('2024-01-07' AS DATE)")
LIKE_PATTERNS = ("'a%'", "'%b'", "'_b'", "'%'", "'a\\\\_b'", "'%\\\\%%'", "'%''%'", "'A%'",
                 "'%\u00e9'")


def render(query: str, names: dict[str, str]) -> str:
    """``query`` with ``@a@``/``@b@`` replaced by the given table names."""
    for key, name in names.items():
        query = query.replace(f"@{key}@", name)
    return query


@functools.lru_cache(maxsize=None)
def _pick(*options):
    return st.sampled_from(options)


@functools.lru_cache(maxsize=None)
def _ints(low: int, high: int):
    return st.integers(low, high)


class Scope:
    """Columns visible to an expression: ``(qualifier or None, name, type)``; ``order`` is a
    column whose values are unique among the rows (for ORDER BY in window functions)."""

    def __init__(self, columns: list[tuple[str | None, str, str]], order: str | None = None):
        self.columns = columns
        self.order = order

    def of_type(self, typ: str) -> list[str]:
        return [f"{q}.{n}" if q else n for q, n, t in self.columns if t == typ]


def table_scope(table: str, alias: str | None) -> Scope:
    return Scope([(alias, name, typ) for name, typ in TABLES[table]],
                 order=f"{alias}.rid" if table == "a" else None)


# --------------------------------------------------------------------------- expressions
def expr(draw, scope: Scope, typ: str, depth: int = 0) -> str:
    """A random expression of SQL type ``typ`` over ``scope``."""
    columns = scope.of_type(typ)
    leaf = depth >= 3 or draw(_ints(0, 2)) == 0
    if leaf:
        if columns and draw(_ints(0, 3)):
            return draw(_pick(*columns))
        return draw(_literal(typ))
    return {"INT": _int_expr, "DOUBLE": _double_expr, "STRING": _string_expr,
            "BOOLEAN": _bool_expr, "TIMESTAMP": _timestamp_expr, "DATE": _date_expr,
            "ARRAY": _array_expr}[typ](draw, scope, depth + 1)


def _literal(typ: str):
    return {"INT": _pick(*INT_LITERALS), "DOUBLE": _pick(*DOUBLE_LITERALS),
            "STRING": _pick(*STRING_LITERALS), "BOOLEAN": _pick("TRUE", "FALSE"),
            "TIMESTAMP": _pick(*TIMESTAMP_LITERALS), "DATE": _pick(*DATE_LITERALS),
            "ARRAY": _pick("array('ab', 'zz')", "array('a b')", "split('x,y,x', ',')",
                           "CAST(array() AS ARRAY<STRING>)")}[typ]


def _case(draw, scope, typ, depth) -> str:
    whens = " ".join(f"WHEN {expr(draw, scope, 'BOOLEAN', depth)} THEN {expr(draw, scope, typ, depth)}"
                     for _ in range(draw(_ints(1, 2))))
    other = f" ELSE {expr(draw, scope, typ, depth)}" if draw(st.booleans()) else ""
    return f"CASE {whens}{other} END"


def _int_expr(draw, scope, depth) -> str:
    e = functools.partial(expr, draw, scope, "INT", depth)
    kind = draw(_ints(0, 14))
    if kind == 12:
        return f"{draw(_pick('hour', 'minute', 'dayofmonth'))}({expr(draw, scope, 'TIMESTAMP', depth)})"
    if kind == 13:
        return f"datediff({expr(draw, scope, 'DATE', depth)}, {draw(_pick(*DATE_LITERALS))})"
    if kind == 14:
        return f"size({expr(draw, scope, 'ARRAY', depth)})"
    if kind == 0:
        return f"({e()} + {e()})"
    if kind == 1:
        return f"({e()} - {e()})"
    if kind == 2:
        return f"({e()} * {draw(_pick('2', '3', '-1'))})"
    if kind == 3:
        return f"abs({e()})"
    if kind == 4:
        return f"coalesce({e()}, {draw(_pick(*INT_LITERALS))})"
    if kind == 5:
        return _case(draw, scope, "INT", depth)
    if kind == 6:
        return f"length({expr(draw, scope, 'STRING', depth)})"
    if kind == 7:
        return f"({e()} % {draw(_pick('3', '5', '-2'))})"
    if kind == 8:
        return f"({e()} DIV {draw(_pick('2', '4'))})"
    if kind == 9:
        return f"if({expr(draw, scope, 'BOOLEAN', depth)}, {e()}, {e()})"
    if kind == 10:
        return f"{draw(_pick('greatest', 'least'))}({e()}, {e()})"
    return f"nullif({e()}, {draw(_pick(*INT_LITERALS))})"


def _double_expr(draw, scope, depth) -> str:
    e = functools.partial(expr, draw, scope, "DOUBLE", depth)
    kind = draw(_ints(0, 8))
    if kind == 0:
        return f"({e()} + {e()})"
    if kind == 1:
        return f"({e()} * {draw(_pick('2', '0.5', '-1.5'))})"
    if kind == 2:
        return f"({expr(draw, scope, 'INT', depth)} / {draw(_pick('2', '4', '-8'))})"
    if kind == 3:
        return f"({e()} - {expr(draw, scope, 'INT', depth)})"
    if kind == 4:
        return f"coalesce({e()}, {draw(_pick(*DOUBLE_LITERALS))})"
    if kind == 5:
        return _case(draw, scope, "DOUBLE", depth)
    if kind == 6:
        return f"round({e()}, {draw(_pick('0', '1'))})"
    if kind == 7:
        return f"CAST({expr(draw, scope, 'INT', depth)} AS DOUBLE)"
    return f"({e()} + {draw(_pick(*DECIMAL_LITERALS))})"


def _string_expr(draw, scope, depth) -> str:
    e = functools.partial(expr, draw, scope, "STRING", depth)
    kind = draw(_ints(0, 11))
    if kind == 9:
        return f"date_format({expr(draw, scope, 'TIMESTAMP', depth)}, 'yyyy-MM-dd HH:mm')"
    if kind == 10:
        return f"array_join({expr(draw, scope, 'ARRAY', depth)}, '|')"
    if kind == 11:
        return f"CAST({expr(draw, scope, 'DATE', depth)} AS STRING)"
    if kind == 0:
        return f"{draw(_pick('upper', 'lower', 'trim', 'reverse'))}({e()})"
    if kind == 1:
        return f"concat({e()}, {e()})"
    if kind == 2:
        return f"({e()} || {e()})"
    if kind == 3:
        return f"substr({e()}, {draw(_pick('1', '2', '-1'))}, {draw(_pick('1', '2'))})"
    if kind == 4:
        return f"coalesce({e()}, {draw(_pick(*STRING_LITERALS))})"
    if kind == 5:
        return _case(draw, scope, "STRING", depth)
    if kind == 6:
        return f"CAST({expr(draw, scope, 'INT', depth)} AS STRING)"
    if kind == 7:
        return f"concat_ws('-', {e()}, {e()})"
    return f"replace({e()}, {draw(_pick(*STRING_LITERALS))}, {draw(_pick(*STRING_LITERALS))})"


def _timestamp_expr(draw, scope, depth) -> str:
    e = functools.partial(expr, draw, scope, "TIMESTAMP", depth)
    kind = draw(_ints(0, 5))
    if kind == 0:
        return f"({e()} + INTERVAL {draw(_pick('90', '1', '30'))} MINUTES)"
    if kind == 1:
        return f"({e()} - INTERVAL '1' DAY)"
    if kind == 2:
        return f"date_trunc('{draw(_pick('HOUR', 'DAY', 'MINUTE'))}', {e()})"
    if kind == 3:
        return f"CAST({expr(draw, scope, 'DATE', depth)} AS TIMESTAMP)"
    if kind == 4:
        return f"coalesce({e()}, {draw(_pick(*TIMESTAMP_LITERALS))})"
    return _case(draw, scope, "TIMESTAMP", depth)


def _date_expr(draw, scope, depth) -> str:
    e = functools.partial(expr, draw, scope, "DATE", depth)
    kind = draw(_ints(0, 5))
    if kind == 0:
        return f"to_date({expr(draw, scope, 'TIMESTAMP', depth)})"
    if kind == 1:
        return f"date_add({e()}, {draw(_pick('1', '-2', '10'))})"
    if kind == 2:
        return f"last_day({e()})"
    if kind == 3:
        return f"date_sub({e()}, {draw(_pick('1', '3'))})"
    if kind == 4:
        return f"coalesce({e()}, {draw(_pick(*DATE_LITERALS))})"
    return _case(draw, scope, "DATE", depth)


def _array_expr(draw, scope, depth) -> str:
    s = functools.partial(expr, draw, scope, "STRING", depth)
    a = functools.partial(expr, draw, scope, "ARRAY", depth)
    kind = draw(_ints(0, 6))
    if kind == 0:
        return f"array({s()}, {s()})"
    if kind == 1:
        return f"sort_array({a()}{draw(_pick('', ', false'))})"
    if kind == 2:
        return f"transform({a()}, e -> upper(e))"
    if kind == 3:
        return f"filter({a()}, e -> e IS NOT NULL AND e <> 'ab')"
    if kind == 4:
        return f"array_distinct({a()})"
    if kind == 5:
        return f"concat({a()}, {a()})"
    return f"array_remove({a()}, {draw(_pick(*STRING_LITERALS))})"


def _bool_expr(draw, scope, depth) -> str:
    kind = draw(_ints(0, 14))
    if kind <= 2:
        typ = draw(_pick("INT", "DOUBLE", "STRING", "INT", "TIMESTAMP", "DATE"))
        op = draw(_pick("=", "<>", "<", "<=", ">", ">=", "!=", "<=>", "=="))
        return f"{expr(draw, scope, typ, depth)} {op} {expr(draw, scope, typ, depth)}"
    b = functools.partial(expr, draw, scope, "BOOLEAN", depth)
    if kind == 3:
        return f"({b()} AND {b()})"
    if kind == 4:
        return f"({b()} OR {b()})"
    if kind == 5:
        return f"NOT ({b()})"
    if kind == 6:
        typ = draw(_pick(*TYPES))
        return f"({expr(draw, scope, typ, depth)}) IS {draw(_pick('', 'NOT '))}NULL"
    if kind == 7:
        typ = draw(_pick("INT", "STRING"))
        items = ", ".join(draw(st.lists(_literal(typ), min_size=1, max_size=4)))
        return f"{expr(draw, scope, typ, depth)} {draw(_pick('', 'NOT '))}IN ({items})"
    if kind == 8:
        typ = draw(_pick("INT", "DOUBLE"))
        return (f"{expr(draw, scope, typ, depth)} {draw(_pick('', 'NOT '))}BETWEEN "
                f"{draw(_literal(typ))} AND {draw(_literal(typ))}")
    if kind == 9:
        op = draw(_pick("LIKE", "NOT LIKE", "ILIKE", "RLIKE"))
        pattern = draw(_pick(*LIKE_PATTERNS)) if "LIKE" in op and op != "RLIKE" else \
            draw(_pick("'^a'", "'b$'", "'[%_]'", "'\\\\\\\\'"))
        return f"{expr(draw, scope, 'STRING', depth)} {op} {pattern}"
    if kind == 10:
        typ = draw(_pick("INT", "STRING"))
        return f"{expr(draw, scope, typ, depth)} IS {draw(_pick('', 'NOT '))}DISTINCT FROM " \
               f"{expr(draw, scope, typ, depth)}"
    if kind == 11:
        return f"coalesce({b()}, {draw(_pick('TRUE', 'FALSE'))})"
    if kind == 12:
        return f"array_contains({expr(draw, scope, 'ARRAY', depth)}, " \
               f"{expr(draw, scope, 'STRING', depth)})"
    if kind == 13:
        return f"exists({expr(draw, scope, 'ARRAY', depth)}, e -> e LIKE 'a%')"
    return _case(draw, scope, "BOOLEAN", depth)


def aggregate(draw, scope: Scope, typ: str) -> str:
    """An aggregate call of result type ``typ`` (INT means any integral: count is BIGINT)."""
    if typ == "INT":
        kind = draw(_ints(0, 4))
        if kind == 0:
            return "count(*)"
        if kind == 1:
            return f"count({expr(draw, scope, draw(_pick(*TYPES)), 1)})"
        if kind == 2:
            return f"count(DISTINCT {expr(draw, scope, draw(_pick('INT', 'STRING')), 1)})"
        if kind == 3:
            return f"sum({expr(draw, scope, 'INT', 1)})"
        return f"{draw(_pick('min', 'max'))}({expr(draw, scope, 'INT', 1)})"
    if typ == "DOUBLE":
        return f"{draw(_pick('sum', 'avg', 'min', 'max'))}({expr(draw, scope, 'DOUBLE', 1)})"
    if typ in ("STRING", "TIMESTAMP", "DATE"):
        return f"{draw(_pick('min', 'max'))}({expr(draw, scope, typ, 1)})"
    if typ == "ARRAY":
        return f"sort_array({draw(_pick('collect_set', 'collect_list'))}(" \
               f"{expr(draw, scope, 'STRING', 1)}))"
    return f"{draw(_pick('bool_or', 'bool_and', 'every'))}({expr(draw, scope, 'BOOLEAN', 1)})"


# ------------------------------------------------------------------------------ queries
def _aliases(draw, n: int) -> list[str]:
    pool = list(COLUMN_ALIASES)
    chosen = []
    for i in range(n):
        word = draw(_pick(*pool))
        chosen.append(word if word not in chosen else f"c{i}")
    return chosen


def _projections(draw, scope: Scope, types: list[str], aliases: list[str]) -> str:
    return ", ".join(f"{expr(draw, scope, t, 1)}{draw(_pick(' AS ', ' '))}{a}"
                     for t, a in zip(types, aliases))


def _source(draw, depth: int):
    """A FROM clause and the scope it gives: one table, a join, a subquery or a CTE name."""
    kind = draw(_ints(0, 5 if depth == 0 else 2))
    alias = draw(_pick(*TABLE_ALIASES))
    if kind <= 1:
        table = draw(_pick("a", "b"))
        as_ = draw(_pick(" AS ", " "))
        return f"@{table}@{as_}{alias}", table_scope(table, alias), ""
    if kind == 2:
        left, right = "t1", draw(_pick("t2", "emit", "late", "rate"))
        join = draw(_pick("JOIN", "INNER JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL OUTER JOIN",
                          "LEFT SEMI JOIN", "LEFT ANTI JOIN"))
        key = draw(_pick("id", "g"))
        scope_a, scope_b = table_scope("a", left), table_scope("b", right)
        on = f"{left}.{key} = {right}.{key}"
        if draw(st.booleans()):
            both = Scope(scope_a.columns + scope_b.columns)
            on += f" AND {expr(draw, both, 'BOOLEAN', 2)}"
        scope = scope_a if "SEMI" in join or "ANTI" in join else Scope(
            scope_a.columns + scope_b.columns)
        return f"@a@ {left} {join} @b@ {right} ON {on}", scope, ""
    if kind == 3:  # a subquery in FROM
        types = draw(st.lists(_pick(*TYPES), min_size=1, max_size=3))
        inner, names = select(draw, types, depth + 1)
        return f"({inner}) {alias}", Scope([(alias, n, t) for n, t in zip(names, types)]), ""
    # a CTE (kind 4-5)
    types = draw(st.lists(_pick(*TYPES), min_size=1, max_size=3))
    inner, names = select(draw, types, depth + 1)
    cte = draw(_pick("cte", "emit", "samples", "w1"))
    return f"{cte} {alias}", Scope([(alias, n, t) for n, t in zip(names, types)]), \
        f"WITH {cte} AS ({inner}) "


def select(draw, types: list[str], depth: int = 0, extra_column: bool = True
           ) -> tuple[str, list[str]]:
    """A SELECT whose output columns have ``types`` (plus, if ``extra_column``, maybe a
    window-function column); returns (sql, output column names)."""
    source, scope, with_ = _source(draw, depth)
    aliases = _aliases(draw, len(types))
    where = f" WHERE {expr(draw, scope, 'BOOLEAN', 1)}" if draw(st.booleans()) else ""
    if depth == 0 and draw(_ints(0, 4)) == 0:  # subquery predicates
        other = draw(_pick("a", "b"))
        key = draw(_pick("id", "g"))
        sub = draw(_ints(0, 2))
        if sub == 0:
            cond = f"{draw(_pick(*scope.of_type('INT') or ['1']))} IN " \
                   f"(SELECT id FROM @{other}@ WHERE id IS NOT NULL)"
        elif sub == 1:
            cols = scope.of_type("STRING" if key == "g" else "INT") or [
                "'ab'" if key == "g" else "1"]
            cond = f"EXISTS (SELECT 1 FROM @{other}@ z WHERE z.{key} = {draw(_pick(*cols))})"
        else:
            cond = f"{draw(_pick(*scope.of_type('INT') or ['1']))} <= " \
                   f"(SELECT max(id) FROM @{other}@)"
        where = f"{where} AND {cond}" if where else f" WHERE {cond}"
    grouped = draw(_ints(0, 2)) == 0 and types[0] in KEY_TYPES
    if grouped:
        n_keys = 1 + (len(types) > 1 and types[1] in KEY_TYPES and draw(st.booleans()))
        key_exprs = [expr(draw, scope, t, 2) for t in types[:n_keys]]
        # A bare integer literal in GROUP BY is a column ordinal in Spark: make it a value.
        key_exprs = [f"({k} + 0)" if k.lstrip("-").isdigit() else k for k in key_exprs]
        outs = [f"{k} AS {a}" for k, a in zip(key_exprs, aliases)]
        outs += [f"{aggregate(draw, scope, t)} AS {a}"
                 for t, a in zip(types[n_keys:], aliases[n_keys:])]
        # Spark: DOUBLE/BOOLEAN aggregates and count's BIGINT are compatible enough for our
        # comparisons; the UNION ALL caller only unions queries of the same shape.
        keys = ", ".join(key_exprs)
        if n_keys == 2 and draw(_ints(0, 2)) == 0:
            keys = draw(_pick(f"ROLLUP ({keys})", f"CUBE ({keys})",
                              f"GROUPING SETS (({keys}), ({key_exprs[0]}), ())"))
        sql = f"{with_}SELECT {', '.join(outs)} FROM {source}{where} GROUP BY {keys}"
        if draw(st.booleans()):
            sql += f" HAVING {aggregate(draw, scope, 'INT')} > {draw(_pick('0', '1', '2'))}"
        return sql, aliases
    distinct = draw(_pick("", "", "DISTINCT "))
    projections = _projections(draw, scope, types, aliases)
    if extra_column and depth == 0 and not distinct and draw(_ints(0, 3)) == 0 and \
            scope.of_type("STRING"):
        part = draw(_pick(*scope.of_type("STRING")))
        arg = draw(_pick(*(scope.of_type("INT") or ["1"])))
        window = f"{draw(_pick('count', 'sum', 'max'))}({arg}) OVER (PARTITION BY {part})"
        if scope.order and draw(st.booleans()):  # rows unique by scope.order: a total order
            window = draw(_pick(
                f"row_number() OVER (PARTITION BY {part} ORDER BY {scope.order})",
                f"lag({arg}, 1) OVER (ORDER BY {scope.order})",
                f"sum({arg}) OVER (PARTITION BY {part} ORDER BY {scope.order} "
                f"ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
                f"rank() OVER (ORDER BY {scope.order} DESC)",
                f"lead({part}, 2, 'none') OVER (PARTITION BY {part} ORDER BY {scope.order})",
            ))
        projections += f", {window} AS wnd"
        aliases = aliases + ["wnd"]
    return f"{with_}SELECT {distinct}{projections} FROM {source}{where}", aliases


@st.composite
def queries(draw) -> str:
    """A valid query, possibly a UNION ALL and/or with a top-level ORDER BY + LIMIT."""
    types = draw(st.lists(_pick(*TYPES), min_size=1, max_size=4))
    if draw(_ints(0, 4)) == 0:
        # Both sides project the same types (a grouped side's count/sum may widen INT to
        # BIGINT, which UNION ALL coerces). A WITH stays at the front of its side.
        first, _ = select(draw, types, extra_column=False)
        second, _ = select(draw, types, extra_column=False)
        if "WITH " in second:
            second = f"SELECT * FROM ({second})"
        return f"{first} UNION ALL {second}"
    sql, names = select(draw, types)
    if draw(_ints(0, 3)) == 0 and "ARRAY" not in types:
        order = ", ".join(f"{n} {draw(_pick('ASC', 'DESC', ''))}"
                          f"{draw(_pick('', ' NULLS FIRST', ' NULLS LAST'))}" for n in names)
        sql += f" ORDER BY {order} LIMIT {draw(_pick('1', '3', '5', '100'))}"
    return sql
