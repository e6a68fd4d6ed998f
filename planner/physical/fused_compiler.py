"""Compiling one SELECT of a fused chain into a level of a fused program (udfs/fused/).

planner/physical/fused_pass.py runs :class:`Compiler` over each SELECT of a chain, bottom
up: the SELECT's WHERE, its output expressions and windows become a
:class:`udfs.fused.Level` over the level below's columns (its *scope*). The compiler
follows Spark's analysis -- name resolution, type coercion
(planner/physical/fused_types.py), ``lag`` and RANGE frames ordered by the event time,
aggregates of a tumbling window's instant, a GROUP BY per window, a total's partial
aggregates, a join with a per-window aggregate (planner/physical/fused_joins.py) -- and
raises ``Refuse`` at anything whose numpy result could differ from Spark's, leaving the
SELECT to Spark.

Scalar expressions are compiled by :class:`~.fused_exprs.Expressions`
(planner/physical/fused_exprs.py), which :class:`Compiler` extends.
"""

from __future__ import annotations

import dataclasses
import re

from sqlglot import exp

from wavesql.udfs import fused
from wavesql.udfs.fused import expr as ir

from .fused_exprs import Expressions
from .fused_joins import Right
from .fused_types import KINDS, Refuse
from .sql_shapes import FUNCTIONS, aggregate_call, frame_shape

_MOMENTS = {exp.Kurtosis: "kurtosis", exp.Skewness: "skewness"}
#: The aggregates a total merges from partials, and how.
_TOTALS = {exp.Sum: "sum", exp.Avg: "avg", exp.Count: "count", exp.Min: "min", exp.Max: "max"}
_TOTALS_MERGE = {"sum": exp.Sum, "min": exp.Min, "max": exp.Max}
_AGGREGATES = {**FUNCTIONS, **_MOMENTS}


def is_total(select: exp.Select) -> bool:
    """An aggregate of the whole input: aggregates (outside windows), no GROUP BY."""
    return select.args.get("group") is None and any(
        a.find_ancestor(exp.Window) is None for e in select.expressions
        for a in e.find_all(exp.AggFunc))


class Compiler(Expressions):
    """One SELECT compiled over ``scope`` (its input's columns: ``(name, node, kind)`` in
    order) whose event-time columns are ``times`` and tumbling window instants
    ``buckets`` (lower-case names; ``width`` the window's, None without one)."""

    def __init__(self, scope, times, select: exp.Select, ansi: bool, buckets=frozenset(),
                 width=None, total=False, right: Right | None = None):
        self.scope, self.times, self.select, self.ansi = scope, times, select, ansi
        self.buckets, self.width, self.total = buckets, width, total
        self.right = right  # the relation the FROM joins (its columns beside the input's)
        self.left_only = False  # compiling the join's key: the joined columns are not there
        #: a total's expressions over the merged partials (the top's SELECT list), else None
        self.shells: list | None = None
        self.by_name: dict = {}
        for name, _, kind in scope:
            self.by_name.setdefault(name.lower(), []).append(kind)
        source = select.args["from_"].this
        self.qualifiers = {source.alias_or_name.lower(), source.name.lower()}
        self.windows: list = []
        self.before = 0  # the time the level's frames reach back
        self.lags = 0    # the rows its lags reach back
        self.group: list | None = None  # GROUP BY key nodes (an aggregate level)
        self.in_aggregate = False

    def level(self):
        where = self.select.args.get("where")
        where = where.this if where is not None else None
        if self.right is None:
            return self.unjoined_level(where)
        before, where = self.split_where(where)
        lookup = self.lookup(before)
        level, *rest = self.unjoined_level(where)
        return (dataclasses.replace(level, lookup=lookup), *rest)

    def split_where(self, where):
        """``(node, rest)``: the WHERE's conjuncts that read only the join's left side,
        compiled (None: none), and the others (an expression or None). Spark filters the
        left side by the first before it joins (the key is never evaluated on a row they
        drop: no ANSI error from one), and the joined rows by the rest."""
        if where is None:
            return None, None
        conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
        before, after = None, []
        for conjunct in conjuncts:
            if conjunct.find(exp.Window, exp.AggFunc) is not None:
                after.append(conjunct)
                continue
            self.left_only = True
            try:
                node, kind = self.expr(conjunct)
                node = self.to(node, kind, "boolean")
            except Refuse:  # reads the right side (or is not fusable: refused later)
                after.append(conjunct)
                continue
            finally:
                self.left_only = False
            before = node if before is None else ir.And(before, node)
        rest = None
        for conjunct in after:
            rest = conjunct if rest is None else exp.And(this=rest, expression=conjunct)
        return before, rest

    def lookup(self, before=None) -> fused.Lookup:
        """The FROM's join (:class:`udfs.fused.Lookup`): an integral or timestamp key,
        compared exactly (a BIGINT with an INT widened, as Spark does); ``before`` filters
        the left side first."""
        join = self.right.join
        matches = [c for c in self.right.columns if c[0].lower() == join.key.lower()]
        if len(matches) != 1:
            raise Refuse  # unknown or ambiguous: Spark's error
        key_name, _, right_kind = matches[0]
        self.left_only = True
        try:
            node, kind = self.expr(join.left_key)
        finally:
            self.left_only = False
        integral = ("int", "bigint")
        if kind == right_kind and kind in integral + ("timestamp",):
            key_kind = kind
        elif kind in integral and right_kind in integral:
            key_kind, node = "bigint", self.to(node, kind, "bigint")
        else:
            raise Refuse  # floating keys (NaN, -0.0), strings...: Spark's join
        return fused.Lookup(self.right.table, node, key_kind, key_name,
                            tuple((name, internal, kind)
                                  for name, internal, kind in self.right.columns),
                            self.right.join.inner, before)

    def unjoined_level(self, where):
        cond = None
        if where is not None:
            if where.find(exp.Window) is not None or where.find(exp.AggFunc) is not None:
                raise Refuse
            node, kind = self.expr(where)
            cond = self.to(node, kind, "boolean")
        if self.select.args.get("group") is not None:
            return self.aggregate_level(cond)
        if self.total:
            return self.total_level(cond)
        if self.select.args.get("having") is not None:
            raise Refuse  # HAVING without GROUP BY: an aggregate of the whole input
        outputs, scope, times, buckets = [], [], set(), set()
        for item in self.select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                for name, node, kind, left in self.star(item):
                    self.check_kind(kind)
                    outputs.append((name, node))
                    scope.append((name, ir.Column(name.lower()), kind))
                    if left and name.lower() in self.times:
                        times.add(name.lower())
                    if left and name.lower() in self.buckets:
                        buckets.add(name.lower())
                continue
            expr = item.this if isinstance(item, exp.Alias) else item
            name = item.alias if isinstance(item, exp.Alias) else (
                item.name if isinstance(item, exp.Column) else f"__wavesql_unnamed_{len(outputs)}")
            node, kind = self.expr(expr)
            if kind in ("null", "decimal"):
                raise Refuse  # a bare NULL or DECIMAL literal: Spark's own types
            outputs.append((name, node))
            scope.append((name, ir.Column(name.lower()), kind))
            if isinstance(expr, exp.Column) and self.is_time(expr):
                times.add(name.lower())
            if isinstance(expr, exp.Column) and self.is_time(expr, self.buckets):
                buckets.add(name.lower())
        level = fused.Level(cond, tuple(self.windows), tuple(outputs))
        return level, scope, times, buckets, self.before, self.lags

    def aggregate_level(self, cond):
        """``SELECT <keys, aggregates> ... GROUP BY <the window instant>, ...`` over a
        tumbling window: one row per group, each group within one window (and range)."""
        group = self.select.args["group"]
        if self.width is None or {k for k, v in group.args.items() if v} - {"expressions"}:
            raise Refuse  # no tumbling window below, or ROLLUP / CUBE / GROUPING SETS
        keys, bucket = [], None
        for i, key in enumerate(group.expressions):
            if key.find(exp.AggFunc) is not None or key.find(exp.Window) is not None:
                raise Refuse
            node, kind = self.expr(key)
            if kind not in KINDS:
                raise Refuse
            if bucket is None and self.is_time(key, self.buckets):
                bucket = i
            keys.append(node)
        if bucket is None:
            raise Refuse  # groups could span ranges
        self.group = keys
        outputs, scope = [], []
        for item in self.select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                raise Refuse
            expr = item.this if isinstance(item, exp.Alias) else item
            node, kind = self.expr(expr)
            if kind in ("null", "decimal"):
                raise Refuse
            name = item.alias_or_name or f"__wavesql_unnamed_{len(outputs)}"
            outputs.append((name, node))
            scope.append((name, ir.Column(name.lower()), kind))
        having = None
        if self.select.args.get("having") is not None:
            node, kind = self.expr(self.select.args["having"].this)
            having = self.to(node, kind, "boolean")
        level = fused.Level(cond, tuple(self.windows), tuple(outputs), tuple(keys), bucket,
                            having)
        return level, scope, set(), set(), self.before, self.lags

    def total_level(self, cond):
        """``SELECT <expressions over aggregates>`` without GROUP BY at the top: each range
        computes partial aggregates of its own rows (``sum avg count min max``: a sum and a
        count for ``avg``) and Spark merges them in the expressions kept as ``shells``
        (``sum(x) / count(*)`` becomes ``sum(p0) / coalesce(sum(p1), 0)``, ``p<i>`` the
        partials' columns)."""
        if self.select.args.get("having") is not None:
            raise Refuse
        self.group = []  # columns outside an aggregate are Spark's error
        outputs, scope, self.shells = [], [], []

        def partial(func, node, kind):
            self.windows.append(fused.Window(func, node, kind, whole=True))
            name = f"__wavesql_p{len(outputs)}"
            outputs.append((name, ir.WindowRef(len(self.windows) - 1)))
            scope.append((name, ir.Column(name.lower()), fused.result_type(func, kind)))
            return exp.column(name)

        for item in self.select.expressions:
            shell = (item.this if isinstance(item, exp.Alias) else item).copy()
            if shell.find(exp.Window, exp.Select) is not None or isinstance(shell, exp.Star) \
                    or any(c.find_ancestor(exp.AggFunc) is None
                           for c in shell.find_all(exp.Column)):
                raise Refuse  # a column outside an aggregate (Spark's error), a subquery
            for agg in [a for a in shell.find_all(exp.AggFunc)
                        if a.find_ancestor(exp.AggFunc) is None]:
                name, node, kind = self.aggregate_argument(agg, _TOTALS, True, KINDS)
                if name == "avg":  # Spark: a DOUBLE sum over the count
                    total = partial("sum", self.to(node, kind, "double"), "double")
                    count = partial("count", node, kind)
                    merged = exp.Div(this=exp.Sum(this=total), expression=exp.Nullif(
                        this=exp.Sum(this=count), expression=exp.Literal.number(0)))
                elif name == "count":
                    merged = exp.Coalesce(this=exp.Sum(this=partial(name, node, kind)),
                                          expressions=[exp.Literal.number(0)])
                else:
                    merged = _TOTALS_MERGE[name](this=partial(name, node, kind))
                if agg is shell:
                    shell = merged
                else:
                    agg.replace(merged)
            self.shells.append(shell)
        level = fused.Level(cond, tuple(self.windows), tuple(outputs), total=True)
        return level, scope, set(), set(), self.before, self.lags

    def aggregate(self, e):
        """An aggregate of a GROUP BY level: the whole group's value."""
        if self.group is None or self.in_aggregate:
            raise Refuse  # an aggregate query without GROUP BY, or nested aggregates
        return self.whole_aggregate(e, self.group, in_aggregate=True)

    def whole_aggregate(self, func, keys, in_aggregate=False):
        """The aggregate call ``func`` over the whole partition of ``keys`` (nodes), the
        argument compiled over the level's input (``in_aggregate``: inside a GROUP BY)."""
        name, node, kind = self.aggregate_argument(func, _AGGREGATES, in_aggregate)
        self.windows.append(fused.Window(name, node, kind, before=self.width,
                                         keys=tuple(keys), whole=True))
        return ir.WindowRef(len(self.windows) - 1), fused.result_type(name, kind)

    def aggregate_argument(self, func, functions, in_aggregate, count_kinds=fused.NUMERIC):
        """``(name, argument node or None, its kind)`` of the aggregate call ``func`` (one of
        ``functions``, its argument compiled over the level's input: a number, or one of
        ``count_kinds`` for ``count``); refuses other calls and nested aggregates."""
        call = aggregate_call(func, functions)
        if call is None or (call[1] is not None and call[1].find(exp.AggFunc)):
            raise Refuse
        name, arg = call
        if arg is None:
            return name, None, None
        self.in_aggregate = in_aggregate
        try:
            node, kind = self.expr(arg)
        finally:
            self.in_aggregate = False
        if kind not in (count_kinds if name == "count" else fused.NUMERIC):
            raise Refuse
        return name, node, kind

    # --------------------------------------------------------------------- columns
    def star(self, item):
        """``(name, node, kind, from the left side)`` of the columns ``*`` / ``t.*`` reads:
        the input's, then the joined relation's (SQL's order)."""
        table = (item.table or "").lower() if isinstance(item, exp.Column) else ""
        right = self.right.columns if self.right is not None else ()
        if table and table not in self.qualifiers and not (
                right and table in self.right.join.qualifiers):
            raise Refuse
        if not table or table in self.qualifiers:
            for name, _, kind in self.scope:
                yield name, ir.Column(name.lower()), kind, True
        if right and (not table or table in self.right.join.qualifiers):
            for name, internal, kind in right:
                yield name, ir.Column(internal), kind, False

    def resolve(self, column: exp.Column):
        if column.args.get("db") or column.args.get("catalog"):
            raise Refuse
        table, name = (column.table or "").lower(), column.name.lower()
        right = self.right.join.qualifiers if self.right is not None else frozenset()
        joined = [c for c in (self.right.columns if self.right is not None else ())
                  if c[0].lower() == name]
        kinds = self.by_name.get(name, [])
        if table in right:  # the joined relation's (never in the join's own key)
            if self.left_only or len(joined) != 1:
                raise Refuse  # unknown or ambiguous: Spark's error
            node, kind = ir.Column(joined[0][1]), joined[0][2]
        elif table and table not in self.qualifiers:
            raise Refuse
        elif len(kinds) + (0 if table else len(joined)) != 1:
            raise Refuse  # unknown or ambiguous: Spark's error
        elif kinds:
            node, kind = ir.Column(name), kinds[0]
        elif self.left_only:
            raise Refuse  # the join's key compares the two sides, not one with itself
        else:
            node, kind = ir.Column(joined[0][1]), joined[0][2]
        self.check_kind(kind)
        if self.group is not None and not self.in_aggregate:
            if node not in self.group:
                raise Refuse  # a column neither grouped nor aggregated: Spark's error
            return ir.Column(f"__g{self.group.index(node)}"), kind
        return node, kind

    def is_time(self, column, names=None) -> bool:
        """Whether ``column`` is one of the event-time columns (or of ``names``)."""
        names = self.times if names is None else names
        right = () if self.right is None else self.right.join.qualifiers
        return (isinstance(column, exp.Column) and not isinstance(column.this, exp.Star)
                and (column.table or "").lower() not in right
                and column.name.lower() in names and len(
                    self.by_name.get(column.name.lower(), ())) == 1)

    @staticmethod
    def check_kind(kind):
        if kind == "opaque":
            raise Refuse

    # ------------------------------------------------------------------ windows
    def window(self, w: exp.Window):
        if w.args.get("alias"):
            raise Refuse
        if w.args.get("order") is None and w.args.get("spec") is None:
            return self.whole(w)
        order = w.args.get("order")
        if order is None or len(order.expressions) != 1:
            raise Refuse
        key = order.expressions[0]
        if key.args.get("desc") or not self.is_time(key.this):
            raise Refuse
        func = w.this
        if isinstance(func, exp.Lag):
            if w.args.get("spec") is not None or w.args.get("partition_by"):
                raise Refuse
            arg, kind = self.expr(func.this)
            if kind not in KINDS:
                raise Refuse
            n = 1
            if func.args.get("offset") is not None:
                offset = func.args["offset"]
                if not isinstance(offset, exp.Literal) or offset.is_string \
                        or not re.fullmatch(r"\d+", offset.this) or int(offset.this) < 1:
                    raise Refuse
                n = int(offset.this)
            default = None
            if func.args.get("default") is not None:
                d, kd = self.expr(func.args["default"])
                if not isinstance(d, ir.Literal):
                    raise Refuse
                default = self.to(d, kd, kind)
            self.windows.append(fused.Window("lag", arg, kind, n=n, default=default))
            self.lags = max(self.lags, n)
            return ir.WindowRef(len(self.windows) - 1), kind
        shape = frame_shape(w)
        if shape is None:
            raise Refuse
        _, (name, arg, before, after) = shape
        if after > 0:
            raise Refuse
        keys = []
        for key in w.args.get("partition_by") or []:
            node, kind = self.expr(key)
            if kind not in KINDS:
                raise Refuse
            keys.append(node)
        node, kind = (None, None) if arg is None else self.expr(arg)
        if arg is not None and kind not in fused.NUMERIC:
            raise Refuse
        self.windows.append(fused.Window(name, node, kind, before=before, after=after,
                                         keys=tuple(keys)))
        self.before = max(self.before, before)
        return ir.WindowRef(len(self.windows) - 1), fused.result_type(name, kind)

    def whole(self, w: exp.Window):
        """``agg(x) OVER (PARTITION BY <tumbling window instant>, ...)``: the whole
        partition, which lies within one window (ranges own whole windows)."""
        keys = w.args.get("partition_by") or []
        if self.width is None or not any(self.is_time(k, self.buckets) for k in keys):
            raise Refuse
        if any(isinstance(w.this, t) for t in _MOMENTS):
            raise Refuse  # kurtosis / skewness: aggregates of GROUP BY only
        nodes = []
        for key in keys:
            node, kind = self.expr(key)
            if kind not in KINDS:
                raise Refuse
            nodes.append(node)
        self.before = max(self.before, self.width)
        return self.whole_aggregate(w.this, nodes)
