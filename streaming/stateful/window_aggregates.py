"""The aggregates of a windowed plan (:mod:`.plan`): which calls the window kernel
evaluates, what each keeps per pane, how its argument travels and its result comes back.

Each aggregate call is an *item* ``(function, argument SQL or None, parameter)``: equal
items are computed once. What a SLIDE window's pane keeps (:data:`KEEPS`):

* **algebraic** -- a small partial: ``count(*)``, ``count(x)`` of any type (``1`` where
  ``x`` is not NULL), ``count_if(c)`` (``CASE WHEN c THEN 1 END``), ``sum / avg / min /
  max``, ``bool_and / every`` and ``bool_or / any / some`` (min / max of the booleans as 0 /
  1), the spreads ``stddev / std / stddev_samp / stddev_pop / variance / var_samp /
  var_pop`` (count, mean and M2, merged by Chan et al.'s formula);
* **holistic** -- the values themselves, bounded by the window's rows: ``percentile(x, p)``
  / ``percentile(x, array(p, ...))``, ``median`` and ``percentile_approx`` /
  ``approx_percentile`` (every value: computed exactly, which is Spark's answer below
  ``accuracy`` values and within its documented error above, :mod:`.window_holistic`),
  ``collect_list`` (every value), ``collect_set``, ``count(DISTINCT x)``,
  ``sum(DISTINCT x)`` (each distinct value once).

``agg(x) FILTER (WHERE c)`` is ``agg(CASE WHEN c THEN x END)`` (``count(*)``: of ``CASE
WHEN c THEN 1 END``): every aggregate here ignores NULL arguments, so the two are equal --
over no passing row too (``count`` 0, ``sum`` NULL, ``collect_list`` empty)
(:func:`unfiltered`).

An unslid window keeps its rows whatever its aggregates. Refused, with the reason (the
query stays on the re-evaluating runner): ``first`` / ``last`` (their order is Spark's
partitions', undefined), other DISTINCT aggregates, and any other aggregate.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.dialect import to_spark_sql, unqualified

from .encoding import FLOATING, INTEGRAL, KEY_TYPES, NotIncremental

_FUNCS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
          exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp",
          exp.StddevPop: "stddev_pop", exp.Variance: "var_samp", exp.VariancePop: "var_pop",
          exp.CountIf: "count_if", exp.LogicalAnd: "bool_and", exp.LogicalOr: "bool_or",
          exp.Any: "bool_or", exp.Quantile: "percentile", exp.Median: "median",
          exp.ArrayAgg: "collect_list", exp.ArrayUniqueAgg: "collect_set",
          exp.ApproxQuantile: "percentile_approx"}
#: Spark's aggregates sqlglot leaves as plain function calls (``exp.Anonymous``).
_NAMED = {"every": "bool_and", "some": "bool_or", "std": "stddev_samp"}
#: The aggregates that take DISTINCT, and what they are then.
_DISTINCT = {"count": "count_distinct", "sum": "sum_distinct"}
_REFUSED = {exp.First: "first() (its order is Spark's partitions', undefined)",
            exp.Last: "last() (its order is Spark's partitions', undefined)"}
_SPREAD = "a count, mean and sum of squared deviations"
#: What a pane keeps of each aggregate (holistic ones: of their argument ``{arg}``).
KEEPS = {"count": "a count", "sum": "a sum", "avg": "a count and a DOUBLE sum",
         "min": "a minimum", "max": "a maximum", "count_if": "a count",
         "bool_and": "a minimum", "bool_or": "a maximum",
         **{f: _SPREAD for f in ("stddev_samp", "stddev_pop", "var_samp", "var_pop")},
         **{f: "every value of {arg}"
            for f in ("percentile", "median", "percentile_approx", "collect_list")},
         **{f: "each distinct value of {arg}"
            for f in ("collect_set", "count_distinct", "sum_distinct")}}
#: The aggregates that keep values (the others keep a small partial).
HOLISTIC = tuple(f for f, keeps in KEEPS.items() if keeps.endswith("{arg}"))


def name_of(node: exp.Expression) -> str | None:
    """The aggregate ``node`` calls, as :data:`KEEPS` names it (None: not one it runs)."""
    if isinstance(node, exp.Anonymous):
        return _NAMED.get(str(node.this).lower())
    if isinstance(node, exp.Any) and isinstance(node.this, exp.Subquery):
        return None  # ``= ANY (SELECT ...)``
    func = _FUNCS.get(type(node))
    if func is not None and isinstance(node.this, exp.Distinct):
        return _DISTINCT.get(func)
    return func


def unfiltered(select: exp.Select) -> exp.Select:
    """``select`` (a copy, when it has any) with each ``agg(x) FILTER (WHERE c)`` of an
    aggregate the kernel runs written ``agg(CASE WHEN c THEN x END)`` (module docstring);
    a FILTER on another call is left alone (:func:`find` refuses it)."""
    if not any(True for _ in select.find_all(exp.Filter)):
        return select
    select = select.copy()
    for node in list(select.find_all(exp.Filter)):
        call, where = node.this, node.expression
        if name_of(call) is None or where is None:
            continue
        call = call.copy()
        anonymous = isinstance(call, exp.Anonymous)
        arg = call.expressions[0] if anonymous else call.this
        distinct = isinstance(arg, exp.Distinct)
        inner = arg.expressions[0] if distinct and len(arg.expressions) == 1 else arg
        if distinct and inner is arg:  # several columns: find() refuses it
            continue
        value = exp.Literal.number(1) if isinstance(inner, exp.Star) else inner.copy()
        case = exp.Case(ifs=[exp.If(this=where.this.copy(), true=value)])
        if distinct:
            arg.set("expressions", [case])
        elif anonymous:
            call.set("expressions", [case] + list(call.expressions[1:]))
        else:
            call.set("this", case)
        node.replace(call)
    return select


def item_of(node: exp.Expression) -> tuple:
    """``(function, argument SQL or None, parameter)`` of an aggregate call (``name_of``
    not None); the parameter is percentile's ``(fractions, array or not)``, else None."""
    func = name_of(node)
    arg = node.expressions[0] if isinstance(node, exp.Anonymous) else node.this
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            raise NotIncremental(f"{func}() of several columns")
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star) and func == "count":
        return func, None, None
    while isinstance(arg, exp.Paren):  # ``any(v < 2)`` parses with its parentheses
        arg = arg.this
    param = None
    if func == "median":
        func, param = "percentile", ((0.5,), False)
    elif func in ("percentile", "percentile_approx"):
        param = _fractions(node.args.get("quantile"), func)
    return func, to_spark_sql(unqualified(arg)), param


def _fractions(node, func: str) -> tuple:
    """percentile's fractions: one number, or an array of them (all constants in [0, 1])."""
    many = isinstance(node, exp.Array)
    items = node.expressions if many else [node]
    if not items or not all(isinstance(i, exp.Literal) and not i.is_string for i in items):
        raise NotIncremental(f"{func}() whose fraction is not a number from 0 to 1")
    values = tuple(float(i.this) for i in items)
    if not all(0.0 <= v <= 1.0 for v in values):
        raise NotIncremental(f"{func}() whose fraction is not a number from 0 to 1")
    return values, many


def find(select: exp.Select) -> list[tuple]:
    """The distinct aggregate items of the SELECT list and HAVING, in order of first
    appearance; :class:`NotIncremental` for a call the kernel does not evaluate."""
    found: list[tuple] = []
    for node in select.walk():
        func = name_of(node)
        if func is None:
            if type(node) in _REFUSED:
                raise NotIncremental(_REFUSED[type(node)])
            if isinstance(node, exp.AggFunc):
                distinct = isinstance(node.this, exp.Distinct) or node.args.get("distinct")
                raise NotIncremental("a DISTINCT aggregate other than count / sum" if distinct
                                     else f"the aggregate {node.sql()[:30]}")
            if isinstance(node, exp.Anonymous) and str(node.this).lower() in KEEPS:
                # a form the dialect leaves to Spark: percentile(v, p, frequency)
                raise NotIncremental(f"{str(node.this).lower()}() with "
                                     f"{len(node.expressions)} arguments")
            continue
        arg = node.expressions[0] if isinstance(node, exp.Anonymous) else node.this
        args = (node.expressions if isinstance(node, exp.Anonymous) else
                [a for k, a in node.args.items() if isinstance(a, exp.Expression)
                 and k not in ("quantile", "accuracy")])
        if len(args) > 1:
            raise NotIncremental(f"{func}() with more than one argument")
        if arg is None or (not isinstance(arg, exp.Star) and any(
                name_of(n) or isinstance(n, exp.AggFunc) for n in arg.walk())):
            raise NotIncremental(f"the aggregate {node.sql()[:30]}")
        if isinstance(arg, exp.Star) and func != "count":
            raise NotIncremental(f"the aggregate {node.sql()[:30]}")
        item = item_of(node)
        if item not in found:
            found.append(item)
    return found


def explained(aggs: list[tuple], window: str) -> str:
    """The aggregates for EXPLAIN, each with what it keeps: per pane (SLIDE), and for a
    holistic one its values in the window (an unslid window keeps its rows anyway)."""
    def one(func, arg, param):
        shown = "" if param is None else ", " + ", ".join(f"{p:g}" for p in param[0])
        call = f"{func.upper()}({arg or '*'}{shown})"
        keeps = KEEPS[func].format(arg=arg)
        if func in HOLISTIC:
            where = " per pane" if window == "SLIDE" else ""
            return f"{call} [holistic: keeps {keeps} in the window{where}]"
        return f"{call} [{keeps} per pane]" if window == "SLIDE" else call
    return ", ".join(one(*item) for item in aggs)


def argument(func: str, arg: str, t: str) -> tuple[str, str, str, str]:
    """``(kernel function, argument SQL, its Spark type, encoded type)`` of ``func(arg)``,
    ``arg`` of Spark type ``t`` (module docstring)."""
    if func == "count" and t not in INTEGRAL + FLOATING:  # any type: 1 where not NULL
        return "count", f"CASE WHEN ({arg}) IS NOT NULL THEN 1L END", "bigint", "bigint"
    if func in ("collect_list", "collect_set", "count_distinct"):
        if t not in KEY_TYPES:
            raise NotIncremental(f"{func}() of type {t}")
        encode, enc, _ = KEY_TYPES[t]
        return func, encode.format(v=f"({arg})"), t, enc
    if func in ("count_if", "bool_and", "bool_or"):
        if t != "boolean":
            raise NotIncremental(f"{func}() of type {t}")
        if func == "count_if":
            return "count", f"CASE WHEN ({arg}) THEN 1L END", "bigint", "bigint"
        return {"bool_and": "min", "bool_or": "max"}[func], arg, t, "bigint"
    if t not in INTEGRAL + FLOATING:
        raise NotIncremental(f"{func}() of type {t}")
    return func, arg, t, "double" if t in FLOATING else "bigint"


def value_type(func: str, integral: bool, many: bool, enc: str | None) -> str:
    """The Spark type of the kernel's value of a kernel function."""
    if func in ("count", "count_distinct"):
        return "bigint"
    if func == "percentile":
        return "array<double>" if many else "double"
    if func == "percentile_approx":  # the argument's own type
        return f"array<{enc}>" if many else enc
    if func in ("collect_list", "collect_set"):
        return f"array<{enc}>"
    return "bigint" if integral and func in ("sum", "min", "max", "sum_distinct") else "double"


def decoded(func: str, value: str, t: str | None, many: bool = False) -> str:
    """Spark SQL of an aggregate's result from the kernel's ``value`` (NULL already
    decoded): a min / max / bool back in its argument's type ``t``, a list's elements
    decoded as keys are."""
    if func in ("min", "max", "bool_and", "bool_or") and t is not None:
        return f"CAST({value} AS {t.upper()})"
    if func == "percentile_approx":
        return f"CAST({value} AS {f'ARRAY<{t.upper()}>' if many else t.upper()})"
    if func in ("collect_list", "collect_set"):
        decode = KEY_TYPES[t][2]
        return value if decode == "{v}" else (
            f"transform({value}, __e -> {decode.format(v='__e')})")
    return value
