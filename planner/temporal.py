"""Time-centric operators (TiLT): ``RESAMPLE`` and ``ASOF JOIN`` as Spark SQL, batch mode.

Both operators are lowered to plain Spark SQL text over input relations referenced by name
(temp views or CTEs). Nothing here imports Spark: the functions only build text, so the
planner can call them while binding. Times are handled as **integer microseconds since
1970-01-01 UTC** (``unix_micros`` / ``timestamp_micros``), never float seconds
(planner/types.py says why).

RESAMPLE
========

``SELECT * FROM RESAMPLE(trades, ts, INTERVAL 5 MILLISECONDS, 'linear') r`` puts a stream on
a regular time grid. With period ``P`` (microseconds), the grid is aligned to the epoch: the
points are ``t = k·P`` for whole ``k``. The output has one row per grid point ``t`` with
``min(ts) <= t <= max(ts)`` -- per series when the stream has keys (``RESAMPLE(meters, ts,
INTERVAL 1 SECOND, 'prev' PARTITION BY device)``): each key group is its own series with its
own span, and the output keeps the key columns. The
output has the input's columns in the input's order; the time column holds ``t``.

Methods (the value of a column at grid point ``t``):

``'linear'``
    Numeric columns (``tinyint`` ... ``double``, ``decimal``) are interpolated between the
    latest input ``(t0, v0)`` with ``t0 <= t`` and the earliest ``(t1, v1)`` with
    ``t1 >= t``: ``y(t) = v0 + (v1 - v0)·(t - t0)/(t1 - t0)``; an input at exactly ``t``
    gives its own value. Both ends are taken **per column, among that column's non-null
    values**, so a NULL is a hole interpolated across, and a grid point before a column's
    first non-null value or after its last is NULL. Numeric outputs are ``double``.
    Other columns take the value of the latest input row with time ``<= t``, as ``'prev'``.
``'prev'``
    Every column takes the value of the latest input row with time ``<= t`` (sample and
    hold). A row is a row: if that row holds NULL in a column, the output is NULL there
    (to carry the last non-null value instead, drop the NULL rows first).
``'null'``
    Every column takes the value of the input row whose time falls in ``(t - P, t]`` (the
    latest such row when several do), else NULL -- the grid point has no data. This is the
    building block of imputation (TiLT app 4: resample with ``'null'``, then fill the NULLs,
    e.g. from the mean of their bucket).
``'zero'``
    As ``'null'``, but numeric columns of grid points without an input row are ``0`` (of
    the column's own type); non-numeric columns are NULL. A NULL inside an input row that
    exists stays NULL.

``'prev'``, ``'null'`` and ``'zero'`` keep each column's type.

Input rules, the same for every method:

- A row whose time is NULL has no place on the grid and is ignored.
- NULL key values form a series of their own (like ``GROUP BY``).
- **Duplicate times**: rows of one series sharing a timestamp are first collapsed to one:
  the row that sorts *greatest* by its other (non-key, non-time) columns compared left to
  right, NULL lowest (so ``(t, 1.0)`` and ``(t, 3.0)`` become ``(t, 3.0)``, and a value
  beats a NULL). Columns that Spark cannot order (maps) do not take part; rows equal in
  every other column are interchangeable.
- A series whose span contains no grid point (e.g. a single row off the grid) yields no
  rows; an empty input yields no rows.
- ``NaN`` is a value, not a NULL: interpolating next to it gives ``NaN``.

How it runs: consecutive rows of a series are paired with ``lead``, and each row generates
the grid points of its own gap ``[t_i, t_{i+1})`` (the last row: ``[t_n, t_n]``), so the
work is linear in input plus output and no row ever holds the whole grid (a long gap is
generated in chunks of :data:`CHUNK` points). The per-column neighbours of ``'linear'``
are running ``last_value(...) IGNORE NULLS`` and ``lead(...) IGNORE NULLS`` over the same
window as the pairing, so the whole operator is one shuffle and one sort. The window is
partitioned by the keys: **an un-keyed series is processed in a single Spark partition**
(one task) by this SQL. A batch RESAMPLE of a catalog Parquet stream runs instead in
parallel ranges of event time, in numpy, with these semantics (planner/physical/direct_resample.py);
other batch un-keyed inputs in parallel chunks with ``SET wavesql.temporal.parallel =
true`` (planner/physical/chunked_temporal.py, each input read once; off by default: not yet
faster than this SQL on a 2-core machine); this SQL remains for everything else.

ASOF JOIN
=========

``SELECT * FROM trades t ASOF JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts`` pairs every
left row with **the one right row** whose time is the closest on the side the inequality
allows, among right rows with equal keys:

===================  ============================================================
``t.ts >= q.ts``      greatest ``q.ts <= t.ts`` (backward, the usual "latest quote")
``t.ts > q.ts``       greatest ``q.ts < t.ts``
``t.ts <= q.ts``      smallest ``q.ts >= t.ts`` (forward)
``t.ts < q.ts``       smallest ``q.ts > t.ts``
===================  ============================================================

(the sides of the inequality may be written in either order). The ON condition is equality
keys ``AND``-ed with exactly one such inequality, all between plain columns of the two
sides (:func:`parse_asof_condition`). ``ASOF JOIN`` is inner: left rows without a match
are dropped; ``ASOF LEFT JOIN`` (``outer=True``) keeps them with NULLs on the right, as in
DuckDB. Rules:

- **Ties**: when several right rows of one key share the chosen time, the one that sorts
  greatest by its columns (left to right, NULL lowest; maps do not take part) is taken --
  the same rule as RESAMPLE's duplicates.
- A NULL key or time never matches (on either side), as with ``=`` and ``>=``.
- The time columns may be of any ordered type (timestamps, numbers).

How it runs: both sides are tagged and unioned, and one window partitioned by the keys and
ordered by time carries the latest right row forward (``last_value(...) IGNORE NULLS``);
the left rows then read it. One shuffle and one sort, no pairwise comparison. As with
RESAMPLE, **an ASOF JOIN without keys runs in one Spark partition** by this SQL (batch
queries of two catalog Parquet streams: in parallel ranges of time instead,
planner/physical/direct_asof.py; other inputs with ``SET wavesql.temporal.parallel = true``,
planner/physical/chunked_temporal.py).

The joined relation exposes each side as a struct column named after its alias, so
``t.px`` and ``q.*`` resolve as field accesses, plus a top-level copy of every column whose
name belongs to one side only (so unqualified unique names work); ``SELECT *`` is
``t.*, q.*`` (left columns, then right columns, like a Spark or DuckDB join).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from wavesql.sqltext import quote, quote_relation  # noqa: F401 - also imported from here

from sqlglot import exp

from wavesql.errors import Span, WaveSQLError, did_you_mean

#: RESAMPLE methods, in the order hints list them.
METHODS = ("linear", "prev", "zero", "null")

#: Grid points generated per row at most, before a long gap is cut into chunks: keeps the
#: arrays ``sequence`` builds small however long a gap is.
CHUNK = 4096

#: Prefix of the helper columns and CTEs the generated SQL introduces.
_P = "__ws_"

_NUMERIC = re.compile(
    r"^(tinyint|byte|smallint|short|int|integer|bigint|long|float|real|double|"
    r"(decimal|dec|numeric)(\s*\(.*\))?)$")
# Spark cannot order (sort, compare, max) maps or variants, nor anything containing one.
_UNORDERABLE = re.compile(r"\b(map|variant)\b")
_TIMESTAMP = ("timestamp", "timestamp_ltz")

Columns = Sequence["tuple[str, str] | str"]


def is_numeric(spark_type: str) -> bool:
    """Whether a Spark SQL type string is a number (``tinyint`` ... ``double``, ``decimal``)."""
    return bool(_NUMERIC.match(spark_type.strip().lower()))


def is_orderable(spark_type: str | None) -> bool:
    """Whether Spark can sort values of this type (not a map or variant, nor holding one)."""
    return spark_type is None or not _UNORDERABLE.search(spark_type.lower())


# ---------------------------------------------------------------------------------------
# RESAMPLE
# ---------------------------------------------------------------------------------------
def resample_sql(source: str, columns: list[tuple[str, str]], time_col: str, period_us: int,
                 method: str, keys: tuple[str, ...] = ()) -> str:
    """Spark SQL for ``RESAMPLE(source, time_col, period, method)`` (semantics: module doc).

    Parameters
    ----------
    source : str
        Name of the input relation (a temp view or CTE); dotted parts are quoted separately.
    columns : list of (name, spark type)
        The input's columns, ``time_col`` included (it must be a ``timestamp``).
    time_col : str
        The event-time column.
    period_us : int
        Grid period in microseconds (> 0); grid points are multiples of it since the epoch.
    method : str
        ``'linear'``, ``'prev'``, ``'zero'`` or ``'null'`` (case-insensitive).
    keys : tuple of str
        Key columns: each key group is resampled as its own series.

    Returns
    -------
    str
        A query whose columns are ``columns`` in order (numeric ones as ``double`` for
        ``'linear'``), one row per grid point of each series.

    Raises ``INVALID_OPTION`` (method, period), ``UNKNOWN_COLUMN`` (time or key column not in
    ``columns``) and ``TYPE_ERROR`` (time column not a timestamp).
    """
    method = (method or "").lower()
    if method not in METHODS:
        raise WaveSQLError("INVALID_OPTION", f"unknown RESAMPLE method {method!r}",
                           hint="one of " + ", ".join(f"'{m}'" for m in METHODS))
    try:
        whole = int(period_us) == period_us and not isinstance(period_us, bool)
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole or period_us <= 0:
        raise WaveSQLError("INVALID_OPTION", "the RESAMPLE period must be a positive whole "
                           f"number of microseconds, got {period_us!r}",
                           hint="e.g. INTERVAL 5 MILLISECONDS")
    types = {name.lower(): typ for name, typ in columns}
    names = [name for name, _ in columns]
    _check_internal_names(names)
    time_col = _resolve(time_col, names, "time column")
    if types[time_col.lower()].strip().lower() not in _TIMESTAMP:
        raise WaveSQLError("TYPE_ERROR", f"RESAMPLE time column `{time_col}` is "
                           f"{types[time_col.lower()]}, not a timestamp",
                           hint="cast it, e.g. timestamp_micros(us) or CAST(t AS TIMESTAMP)")
    keys = tuple(_resolve(k, names, "key column") for k in keys)
    if time_col.lower() in {k.lower() for k in keys}:
        raise WaveSQLError("INVALID_OPTION", f"`{time_col}` is both the time and a key",
                           hint="partition by other columns")
    special = {time_col.lower()} | {k.lower() for k in keys}
    values = [(n, t) for n, t in columns if n.lower() not in special]

    P = int(period_us)
    t, nxt = f"{_P}t", f"{_P}next"
    over = _window(keys, t)
    running = _window(keys, t, "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    # Duplicate times: sort each time's rows by their other columns (ascending, NULL first)
    # and keep the last, i.e. the greatest. The lead that finds it is also the pairing: on
    # the kept (last) row of a time, the next row is the first of the next time.
    tiebreak = [quote(n) for n, typ in values if is_orderable(typ)]
    dedup_over = _window(keys, ", ".join([t] + tiebreak))
    carried = [quote(k) for k in keys] + [quote(n) for n, _ in values]

    ctes = [
        (f"{_P}in", f"SELECT {_list(carried + [f'unix_micros({quote(time_col)}) AS {t}'])}\n"
                    f"  FROM {quote_relation(source)}\n"
                    f"  WHERE {quote(time_col)} IS NOT NULL"),
        (f"{_P}dedup", f"SELECT {_list(carried + [t, f'lead({t}) OVER {dedup_over} AS {nxt}'])}\n"
                       f"  FROM {_P}in"),
        # the same window prefix as the dedup sort, so Spark re-sorts nothing here
        (f"{_P}rows", f"SELECT {_list(carried + [t, nxt])}\n  FROM {_P}dedup\n"
                      f"  WHERE {nxt} IS NULL OR {nxt} <> {t}"),
    ]

    # 'linear': for each numeric column, its latest non-null (time, value) up to this row and
    # its next non-null after this row. Both are streaming window functions (a growing frame,
    # and lead IGNORE NULLS): first_value over an UNBOUNDED FOLLOWING frame would be
    # quadratic in Spark.
    interp = [n for n, typ in values if is_numeric(typ)] if method == "linear" else []
    neighbours = []
    for i, name in enumerate(interp):
        point = (f"IF({quote(name)} IS NULL, NULL, "
                 f"named_struct('t', {t}, 'v', CAST({quote(name)} AS DOUBLE)))")
        neighbours.append(f"last_value({point}) IGNORE NULLS OVER {running} AS {_P}p{i}")
        neighbours.append(f"lead({point}) IGNORE NULLS OVER {over} AS {_P}n{i}")
    helpers = [f"{_P}p{i}" for i in range(len(interp))] + [f"{_P}n{i}" for i in range(len(interp))]
    if neighbours:
        ctes.append((f"{_P}pairs", f"SELECT {_list(carried + [t, nxt] + neighbours)}\n"
                                   f"  FROM {_P}rows"))
    else:
        ctes.append((f"{_P}pairs", f"SELECT * FROM {_P}rows"))

    # Grid indices k of row i's gap [t_i, t_{i+1}) (the last row: [t_n, t_n]), in integer
    # microseconds: k0 = ceil(t_i / P), k1 = floor(hi / P). pmod is non-negative for P > 0,
    # so both are exact for times before 1970 too.
    hi = f"coalesce({nxt} - 1, {t})"
    k0, k1, c, k = f"{_P}k0", f"{_P}k1", f"{_P}c", f"{_P}k"
    inner = carried + [t] + helpers
    ctes += [
        (f"{_P}span", f"SELECT {_list(inner)},\n"
                      f"    ({t} + pmod(-{t}, {P}L)) div {P}L AS {k0},\n"
                      f"    ({hi} - pmod({hi}, {P}L)) div {P}L AS {k1}\n"
                      f"  FROM {_P}pairs"),
        # a long gap is cut into chunks of CHUNK points, so no row holds a long array
        (f"{_P}chunks", f"SELECT {_list(inner + [k0, k1])},\n"
                        f"    explode(sequence(0L, ({k1} - {k0}) div {CHUNK}L)) AS {c}\n"
                        f"  FROM {_P}span\n  WHERE {k0} <= {k1}"),
        (f"{_P}grid", f"SELECT {_list(inner + [k0])},\n"
                      f"    explode(sequence({k0} + {c} * {CHUNK}L, "
                      f"least({k1}, {k0} + {c} * {CHUNK}L + {CHUNK - 1}L))) AS {k}\n"
                      f"  FROM {_P}chunks"),
    ]

    g = f"{k} * {P}L"  # the grid point, in microseconds
    out = []
    for name, typ in columns:
        q = quote(name)
        if name.lower() == time_col.lower():
            out.append(f"timestamp_micros({g}) AS {q}")
        elif name.lower() in {k_.lower() for k_ in keys} or method == "prev":
            out.append(q)
        elif method == "linear" and name in interp:
            i = interp.index(name)
            p, n = f"{_P}p{i}", f"{_P}n{i}"
            # an exact hit returns v0 itself; NULL neighbours make the whole value NULL
            out.append(f"CASE WHEN {p}.t = {g} THEN {p}.v\n"
                       f"         ELSE {p}.v + ({n}.v - {p}.v) * CAST({g} - {p}.t AS DOUBLE)"
                       f" / CAST({n}.t - {p}.t AS DOUBLE) END AS {q}")
        elif method == "linear":
            out.append(q)
        # 'null' / 'zero': only the first grid point of a gap, k0, has t - P < t_i <= t;
        # every later point of the gap is more than a period after the row.
        elif method == "zero" and is_numeric(typ):
            out.append(f"CASE WHEN {k} = {k0} THEN {q} ELSE CAST(0 AS {typ}) END AS {q}")
        else:
            out.append(f"CASE WHEN {k} = {k0} THEN {q} END AS {q}")

    with_ = ",\n".join(f"{name} AS (\n  {body}\n)" for name, body in ctes)
    return f"WITH {with_}\nSELECT {_list(out)}\nFROM {_P}grid"


# ---------------------------------------------------------------------------------------
# ASOF JOIN
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AsofCondition:
    """The ON condition of an ASOF JOIN, split (see :func:`parse_asof_condition`).

    ``keys`` are (left column, right column) equality pairs; the match is the right row
    with ``right_time <= left_time`` (``direction='backward'``) or ``>=`` (``'forward'``),
    ``<``/``>`` when not ``inclusive``. The fields are :func:`asof_join_sql`'s keywords.
    """

    keys: tuple[tuple[str, str], ...]
    left_time: str
    right_time: str
    direction: str = "backward"
    inclusive: bool = True

    def as_kwargs(self) -> dict:
        return {"keys": list(self.keys), "left_time": self.left_time,
                "right_time": self.right_time, "direction": self.direction,
                "inclusive": self.inclusive}


# left <op> right  ->  (direction, inclusive)
_INEQUALITY = {exp.GTE: ("backward", True), exp.GT: ("backward", False),
               exp.LTE: ("forward", True), exp.LT: ("forward", False)}
_FLIPPED = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}
_ASOF_HINT = ("ASOF JOIN needs ON <equalities between columns of the two sides> AND exactly "
              "one <, <=, >= or > between their time columns, e.g. "
              "ON t.sym = q.sym AND t.ts >= q.ts")


def parse_asof_condition(on: exp.Expression, left_alias: str, right_alias: str,
                         left_columns: Iterable[str] | None = None,
                         right_columns: Iterable[str] | None = None) -> AsofCondition:
    """Split an ASOF JOIN's ON condition into equality keys and its one time inequality.

    Columns are assigned to a side by their qualifier (``left_alias`` / ``right_alias``,
    case-insensitive); an unqualified column is resolved through ``left_columns`` /
    ``right_columns`` when given (and must then belong to exactly one side).

    Raises ``INVALID_OPTION`` (positioned on the offending part) for anything but ``AND``-ed
    column equalities and exactly one inequality between one column of each side: ``OR``,
    ``NOT``, expressions, constants, two inequalities, none, both sides' columns from one
    input. ``UNKNOWN_COLUMN`` / ``AMBIGUOUS_COLUMN`` for a column that resolves to neither
    side / both.
    """
    if on is None:
        raise WaveSQLError("INVALID_OPTION", "ASOF JOIN needs an ON condition", hint=_ASOF_HINT)
    sides = _Sides(left_alias, right_alias, left_columns, right_columns)
    keys: list[tuple[str, str]] = []
    inequality = None
    for part in _conjuncts(on):
        if isinstance(part, exp.EQ):
            keys.append(sides.pair(part)[0])
        elif type(part) in _INEQUALITY:
            if inequality is not None:
                raise WaveSQLError(
                    "INVALID_OPTION", "ASOF JOIN takes exactly one time inequality, this is a "
                    "second one", _span(part),
                    hint=f"the first is `{inequality.sql()}`; put other conditions in WHERE")
            inequality = part
        else:
            raise WaveSQLError("INVALID_OPTION", f"`{part.sql()}` cannot be part of an ASOF "
                               "JOIN condition", _span(part), hint=_ASOF_HINT)
    if inequality is None:
        raise WaveSQLError("INVALID_OPTION", "ASOF JOIN condition has no time inequality",
                           _span(on), hint=_ASOF_HINT)
    (left_time, right_time), swapped = sides.pair(inequality)
    op = _FLIPPED[type(inequality)] if swapped else type(inequality)
    direction, inclusive = _INEQUALITY[op]
    return AsofCondition(tuple(keys), left_time, right_time, direction, inclusive)


class _Sides:
    """Resolves the columns of an ON condition to the left or right input."""

    def __init__(self, left_alias, right_alias, left_columns, right_columns):
        self.aliases = {"left": left_alias, "right": right_alias}
        self.columns = {"left": {c.lower(): c for c in left_columns or ()},
                        "right": {c.lower(): c for c in right_columns or ()}}
        self.known = left_columns is not None and right_columns is not None

    def side(self, col: exp.Column) -> str:
        table = col.table
        if table:
            for side, alias in self.aliases.items():
                if table.lower() == alias.lower():
                    return side
            raise WaveSQLError(
                "UNKNOWN_COLUMN", f"`{col.sql()}`: `{table}` is not a side of this ASOF JOIN",
                _span(col), hint=did_you_mean(table, self.aliases.values(), "aliases"))
        if not self.known:
            raise WaveSQLError("INVALID_OPTION", f"qualify `{col.name}` in the ASOF JOIN "
                               "condition", _span(col),
                               hint=f"write {self.aliases['left']}.{col.name} or "
                                    f"{self.aliases['right']}.{col.name}")
        found = [s for s in ("left", "right") if col.name.lower() in self.columns[s]]
        if len(found) == 2:
            raise WaveSQLError("AMBIGUOUS_COLUMN", f"`{col.name}` is a column of both sides",
                               _span(col), hint=f"write {self.aliases['left']}.{col.name} "
                                                  f"or {self.aliases['right']}.{col.name}")
        if not found:
            raise WaveSQLError("UNKNOWN_COLUMN", f"unknown column `{col.name}`", _span(col),
                               hint=did_you_mean(col.name, [*self.columns["left"].values(),
                                                            *self.columns["right"].values()],
                                                 "columns"))
        return found[0]

    def pair(self, node: exp.Binary):
        """((left column name, right column name), swapped) of ``a <op> b``."""
        a, b = _unparen(node.this), _unparen(node.expression)
        for operand in (a, b):
            if not isinstance(operand, exp.Column) or isinstance(operand.this, exp.Star):
                raise WaveSQLError(
                    "INVALID_OPTION", f"`{operand.sql()}` is not a column: ASOF JOIN compares "
                    "plain columns", _span(operand),
                    hint="compute it in a subquery or view first, or filter in WHERE")
        sa, sb = self.side(a), self.side(b)
        if sa == sb:
            raise WaveSQLError(
                "INVALID_OPTION", f"`{node.sql()}` compares two columns of the "
                f"{'left' if sa == 'left' else 'right'} input", _span(node),
                hint="each comparison in an ASOF JOIN condition takes one column of each side")
        swapped = sa == "right"
        left, right = (b, a) if swapped else (a, b)
        return (left.name, right.name), swapped


def _span(node: exp.Expression) -> Span | None:
    """The whole text of ``node``: from its first positioned token to its last (``Span.of``
    gives only the first, e.g. the ``ts`` of ``t.ts``). Tokens without positions (keywords,
    a closing parenthesis) can fall outside."""
    points = [(meta["start"], meta["end"] + 1) for n in node.walk()
              for meta in [getattr(n, "meta", None) or {}] if "start" in meta and "end" in meta]
    if not points:
        return Span.of(node)
    return Span(min(p[0] for p in points), max(p[1] for p in points))


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _conjuncts(node: exp.Expression):
    node = _unparen(node)
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


def asof_join_sql(left: str, right: str, left_alias: str, right_alias: str,
                  left_columns: Columns, right_columns: Columns, left_time: str,
                  right_time: str, keys: Sequence[tuple[str, str]] = (), inclusive: bool = True,
                  outer: bool = False, direction: str = "backward", select: str = "*") -> str:
    """Spark SQL for ``left ASOF [LEFT] JOIN right`` (semantics: module doc).

    Parameters
    ----------
    left, right : str
        Names of the input relations (temp views or CTEs).
    left_alias, right_alias : str
        The sides' aliases as the query writes them (``t``, ``q``); they name the struct
        columns that ``select`` reads (``t.px``, ``q.*``). They must differ.
    left_columns, right_columns : list of (name, spark type) or of names
        Each side's columns (types only decide which columns can break ties).
    left_time, right_time : str
        The time columns compared.
    keys : list of (left column, right column)
        Equality keys.
    inclusive : bool
        ``<=`` / ``>=`` (True) or ``<`` / ``>`` (False).
    outer : bool
        Keep left rows without a match, with NULL right columns (``ASOF LEFT JOIN``).
    direction : str
        ``'backward'``: the greatest ``right_time`` at or before ``left_time``;
        ``'forward'``: the smallest at or after it.
    select : str
        The select list over the joined relation; ``*`` is every left column, then every
        right column.

    ``parse_asof_condition(...).as_kwargs()`` supplies ``keys`` through ``inclusive``.
    Use :func:`asof_join_relation` to get the joined relation alone.
    """
    relation = asof_join_relation(left, right, left_alias, right_alias, left_columns,
                                  right_columns, left_time, right_time, keys, inclusive,
                                  outer, direction)
    if select.strip() == "*":
        select = f"{quote(left_alias)}.*, {quote(right_alias)}.*"
    return f"SELECT {select}\nFROM (\n{relation}\n) AS {_P}asof"


def asof_join_relation(left: str, right: str, left_alias: str, right_alias: str,
                       left_columns: Columns, right_columns: Columns, left_time: str,
                       right_time: str, keys: Sequence[tuple[str, str]] = (),
                       inclusive: bool = True, outer: bool = False,
                       direction: str = "backward") -> str:
    """The joined relation of :func:`asof_join_sql` (same parameters, no ``select``).

    Its columns: ``<left_alias>`` (struct of the left row), ``<right_alias>`` (struct of the
    matched right row, NULL when none), then one top-level copy of every column whose name
    (case-insensitively) belongs to one side only and is not an alias.
    """
    if direction not in ("backward", "forward"):
        raise WaveSQLError("INVALID_OPTION", f"unknown ASOF direction {direction!r}",
                           hint="'backward' (right time <= left time) or 'forward'")
    if left_alias.lower() == right_alias.lower():
        raise WaveSQLError("INVALID_OPTION", f"both sides of the ASOF JOIN are called "
                           f"`{left_alias}`", hint="give the two sides different aliases")
    lcols, rcols = _typed(left_columns), _typed(right_columns)
    lnames, rnames = [n for n, _ in lcols], [n for n, _ in rcols]
    _check_internal_names(lnames + rnames)
    left_time = _resolve(left_time, lnames, "left time column")
    right_time = _resolve(right_time, rnames, "right time column")
    keys = [(_resolve(lk, lnames, "left key column"), _resolve(rk, rnames, "right key column"))
            for lk, rk in keys]

    # The window order: time (ascending for backward, descending for forward: the match is
    # the last right row before each left row), then which side comes first at equal times
    # (right first when the match may have the left row's time), then, among right rows of
    # one time, ascending by their columns so that the greatest comes last and wins. NULL
    # times sort first, where no right row precedes them (right NULL times are dropped).
    left_first = 0 if not inclusive else 1
    tiebreak = [quote(n) for n, typ in rcols if is_orderable(typ)]
    k = [f"{_P}k{i}" for i in range(len(keys))]
    t, side, o, lrow, rrow = (f"{_P}t", f"{_P}side", f"{_P}o", f"{_P}l", f"{_P}r")
    left_branch = ([f"{quote(lk)} AS {ki}" for (lk, _), ki in zip(keys, k)]
                   + [f"{quote(left_time)} AS {t}", f"{left_first} AS {side}",
                      f"struct({_list(quote(n) for n in lnames)}) AS {lrow}",
                      f"NULL AS {rrow}"]
                   + ([f"NULL AS {o}"] if tiebreak else []))
    right_branch = ([f"{quote(rk)} AS {ki}" for (_, rk), ki in zip(keys, k)]
                    + [f"{quote(right_time)} AS {t}", f"{1 - left_first} AS {side}",
                       f"NULL AS {lrow}", f"struct({_list(quote(n) for n in rnames)}) AS {rrow}"]
                    + ([f"struct({_list(tiebreak)}) AS {o}"] if tiebreak else []))
    # a NULL key or time can never satisfy = or >=: such right rows never match
    never = " OR ".join(f"{quote(c)} IS NULL" for c in [right_time] + [rk for _, rk in keys])
    order = (f"{t} ASC NULLS FIRST" if direction == "backward" else f"{t} DESC NULLS FIRST")
    order = ", ".join([order, side] + ([o] if tiebreak else []))
    partition = f"PARTITION BY {_list(k)} " if k else ""
    match = (f"last_value({rrow}) IGNORE NULLS OVER ({partition}ORDER BY {order} "
             f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")

    shared = {n.lower() for n in lnames} & {n.lower() for n in rnames}
    aliases = {left_alias.lower(), right_alias.lower()}
    copies = [f"{lrow}.{quote(n)} AS {quote(n)}" for n in lnames
              if n.lower() not in shared | aliases]
    copies += [f"{rrow}.{quote(n)} AS {quote(n)}" for n in rnames
               if n.lower() not in shared | aliases]
    where = f"{lrow} IS NOT NULL" + ("" if outer else f" AND {rrow} IS NOT NULL")
    output = [f"{lrow} AS {quote(left_alias)}", f"{rrow} AS {quote(right_alias)}"] + copies
    return (f"WITH {_P}both AS (\n"
            f"  SELECT {_list(left_branch)}\n  FROM {quote_relation(left)}\n"
            f"  UNION ALL\n"
            f"  SELECT {_list(right_branch)}\n  FROM {quote_relation(right)}\n"
            f"  WHERE NOT ({never})\n"
            f"),\n{_P}matched AS (\n"
            f"  SELECT {lrow}, {match} AS {rrow}\n  FROM {_P}both\n)\n"
            f"SELECT {_list(output)}\n"
            f"FROM {_P}matched\nWHERE {where}")


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def _list(items: Iterable[str]) -> str:
    return ", ".join(items)


def _window(keys: Sequence[str], order: str, frame: str = "") -> str:
    partition = f"PARTITION BY {_list(quote(k) for k in keys)} " if keys else ""
    return f"({partition}ORDER BY {order}{' ' + frame if frame else ''})"


def _typed(columns: Columns) -> list[tuple[str, str | None]]:
    return [(c, None) if isinstance(c, str) else (c[0], c[1]) for c in columns]


def _resolve(name: str, names: Sequence[str], what: str) -> str:
    """``name`` as spelled in ``names`` (Spark resolves names case-insensitively)."""
    for candidate in names:
        if candidate.lower() == name.lower():
            return candidate
    raise WaveSQLError("UNKNOWN_COLUMN", f"unknown {what} `{name}`",
                       hint=did_you_mean(name, names, "columns"))


def _check_internal_names(names: Iterable[str]) -> None:
    for name in names:
        if name.lower().startswith(_P):
            raise WaveSQLError("INVALID_OPTION", f"column `{name}` uses the prefix `{_P}` "
                               "WaveSQL reserves for its own helper columns",
                               hint="rename it in a view or subquery")
