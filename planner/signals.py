"""Binding queries over signals: sample windows and signal functions become a signal stage.

A SELECT whose FROM is a catalog signal is split in two:

- a **signal stage** (``ir.SignalStage``): the signal scanned in windows
  (``[SAMPLES n SLIDE m]``, ``[RANGE 100 MILLISECONDS]``, or its stored segments), and a
  :class:`~wavesql.udfs.program.Program` computing every signal-function call of the query and
  every WHERE conjunct that needs nothing else -- all in one Python pass over the windows;
- the **rest of the query**, plain Spark SQL over the stage's output, where each signal call
  has been replaced by a column of the stage (``_sig0``, ``_sig1``...).

So ``SELECT start_time(ch1) AS t, seg_std(ch1) AS sd FROM mic [SAMPLES 4096]
WHERE seg_std(ch1) > 0.05 AND seg_avg(ch1) < 0.001`` runs its statistics and both filters
next to the samples, and Spark receives only the passing windows' two numbers. The optimize
stage then pushes the program into the WAV scan (``optimize.push_program_into_scan``).
"""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import WaveSQL, deep, to_spark_sql
from wavesql.errors import Span, WaveSQLError, did_you_mean
from wavesql.udfs import registry
from wavesql.udfs.program import SPARK_TYPES, Output, Program
from wavesql.udfs.sigseg import SignalError

from . import ir
from .segment_stage import kept_before_keys, refuse_pending_per_key, refuse_row_order
from .types import interval_us

_COMPARE = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.EQ: "=", exp.NEQ: "!="}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_TIME_FUNCTIONS = ("start_time", "end_time")
#: Fields of a channel's segments that signal functions read (``ch1.start``).
_FIELD_FUNCTIONS = {"start": "start_sample", "rate": "sample_rate"}


def signal_window(signal: cat.SignalDef, window: exp.Expression | None) -> tuple[int, int]:
    """(width, slide) in samples of the window written after a signal (default: SEGMENT)."""
    if window is None:
        return signal.segment, signal.segment
    kind = window.args.get("kind", "").upper()
    if kind == "SAMPLES":
        size = _count(window.args.get("size"), "SAMPLES")
        slide = window.args.get("slide")
        return size, (_count(slide, "SLIDE") if slide is not None else size)
    if kind == "RANGE" and window.args.get("size") is not None:
        size = _samples_in(window.args["size"], signal)
        slide = window.args.get("slide")
        return size, (_samples_in(slide, signal) if slide is not None else size)
    raise WaveSQLError(
        "NOT_IMPLEMENTED", f"a [{kind}] window over signal `{signal.name}` is not supported",
        Span.of(window), hint="signals take [SAMPLES n], [SAMPLES n SLIDE m] or [RANGE <time>]")


def _count(node: exp.Expression, what: str) -> int:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        value = int(node.this)
        if value > 0:
            return value
    raise WaveSQLError("INVALID_OPTION", f"{what} needs a positive whole number of samples",
                       Span.of(node), hint="e.g. [SAMPLES 4096 SLIDE 2048]")


def _samples_in(interval: exp.Expression, signal: cat.SignalDef) -> int:
    micros = interval_us(interval)
    exact = micros * signal.rate_hz / 1_000_000
    samples = round(exact)
    if samples <= 0 or abs(exact - samples) > 1e-6:
        raise WaveSQLError(
            "INVALID_OPTION",
            f"{interval.sql()} is {exact:g} samples at {signal.rate_hz:g} Hz, not a whole number",
            Span.of(interval), hint=f"use [SAMPLES {max(1, samples)}] for an exact window")
    return samples


class _StageBuilder:
    """Collects the program of one signal SELECT while rewriting that SELECT in place."""

    def __init__(self, signal: cat.SignalDef, names: set[str], fold=None):
        self.signal = signal
        #: ``fold(spark_sql) -> value``: a constant Spark expression's value (None: no
        #: folding, only literals are constants)
        self.fold = fold
        self.qualifiers = names  # table name and alias, lower case
        self.channels = {c.name.lower(): c.name for c in signal.channels}
        self.outputs: dict[str, Output] = {}  # tree key -> output
        self.spans: dict[str, Span | None] = {}  # tree key -> where the user wrote it

    # -- compiling expressions to program trees ---------------------------------------------
    def channel_of(self, node: exp.Expression) -> str | None:
        if isinstance(node, exp.Column) and node.name.lower() in self.channels:
            table = node.table.lower() if node.table else None
            if table is None or table in self.qualifiers:
                return self.channels[node.name.lower()]
        return None

    def field_of(self, node: exp.Expression) -> str | None:
        """The channel whose field ``node`` reads (``ch1.samples``, ``mic.ch1.start``)."""
        if isinstance(node, exp.Column) and node.table.lower() in self.channels:
            db = node.args.get("db")
            if db is None or (db.name.lower() in self.qualifiers
                              and not node.args.get("catalog")):
                return self.channels[node.table.lower()]
        return None

    def size_of(self, node: exp.Expression) -> str | None:
        """The channel whose sample count ``node`` is: ``size(ch1.samples)`` (also
        ``array_size``, ``cardinality``) is ``width(ch1)``, computed next to the samples so
        that they need not cross into Spark to be counted."""
        if isinstance(node, exp.ArraySize) or (isinstance(node, exp.Anonymous)
                                               and node.name.lower() == "cardinality"):
            arg = node.this if isinstance(node, exp.ArraySize) else (
                node.expressions[0] if len(node.expressions) == 1 else None)
            if arg is not None and arg.name.lower() == "samples":
                return self.field_of(arg)
        return None

    def field_call(self, node: exp.Expression) -> dict | None:
        """``ch1.start`` / ``ch1.rate`` as the signal function reading that field, so the
        scan outputs the number, not the segment it belongs to."""
        channel = self.field_of(node)
        name = _FIELD_FUNCTIONS.get(node.name.lower()) if channel is not None else None
        return None if name is None else {"call": name, "args": [{"col": channel}]}

    def compile(self, node: exp.Expression) -> dict | None:
        """The program tree of ``node``, or None when it needs anything but channels,
        literals, signal functions and operators."""
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        channel = self.channel_of(node)
        if channel is not None:
            return {"col": channel}
        sized = self.size_of(node)
        if sized is not None:
            return {"call": "width", "args": [{"col": sized}]}
        field = self.field_call(node)
        if field is not None:
            return field
        if isinstance(node, exp.Literal):
            if node.is_string:
                return {"lit": node.this}
            text = node.this
            return {"lit": int(text) if text.lstrip("-").isdigit() else float(text)}
        if isinstance(node, exp.Boolean):
            return {"lit": bool(node.this)}
        if isinstance(node, exp.Null):
            return {"lit": None}
        if isinstance(node, exp.Array):
            # array(1, -2, 1): filter coefficients and taps are numeric constants, kept as a
            # list literal (array<double>) so they are checked and baked in at planning time
            items = [self.compile(e) for e in node.expressions]
            if items and all(t is not None and isinstance(t.get("lit"), (int, float))
                             and not isinstance(t["lit"], bool) for t in items):
                return {"lit": [float(t["lit"]) for t in items]}
            return None
        if isinstance(node, exp.Neg):
            inner = self.compile(node.this)
            if inner is not None and isinstance(inner.get("lit"), (int, float)):
                return {"lit": -inner["lit"]}
            return None if inner is None else {"op": "neg", "args": [inner]}
        if isinstance(node, exp.Anonymous) and registry.lookup(node.name) is not None:
            args = []
            for arg in node.expressions:
                tree = self.compile(arg)
                if tree is None or ("lit" not in tree and not _reads_data(tree)):
                    tree = self.constant(arg) or tree  # 2 + 2, pi() / 4: one literal
                if tree is None and isinstance(arg, exp.Column) and not arg.table:
                    raise WaveSQLError(
                        "UNKNOWN_COLUMN", f"`{arg.name}` is not a channel of signal "
                        f"`{self.signal.name}`", Span.of(arg),
                        hint=did_you_mean(arg.name, self.channels.values(), "channels"))
                if tree is None:
                    raise WaveSQLError(
                        "TYPE_ERROR", f"`{arg.sql()}` cannot be an argument of signal function "
                        f"`{node.name}`", Span.of(arg),
                        hint="signal functions take channels of the signal in FROM, constants, "
                             "and other signal functions")
                args.append(tree)
            tree = {"call": node.name.lower(), "args": args}
            self.type_of(tree, node)
            return tree
        if isinstance(node, (exp.And, exp.Or)):
            a, b = self.compile(node.this), self.compile(node.expression)
            return None if a is None or b is None else {
                "op": "and" if isinstance(node, exp.And) else "or", "args": [a, b]}
        if isinstance(node, exp.Not):
            inner = self.compile(node.this)
            return None if inner is None else {"op": "not", "args": [inner]}
        op = _COMPARE.get(type(node)) or _ARITH.get(type(node))
        if op is not None:
            a, b = self.compile(node.this), self.compile(node.expression)
            return None if a is None or b is None else {"op": op, "args": [a, b]}
        return None

    def constant(self, node: exp.Expression) -> dict | None:
        """A constant argument written as any Spark expression without columns
        (``array_repeat(1.0D / 30, 30)``, ``concat(array(-1), array_repeat(0, 15))``,
        ``pi() / 4``): folded into a literal by Spark when the query is planned; None when
        it reads a column or a signal function, or its value is not a literal kind."""
        if self.fold is None or any(True for _ in node.find_all(
                exp.Column, exp.Subquery, exp.Select, exp.Star)):
            return None
        if any(isinstance(n, exp.Anonymous) and registry.lookup(n.name) is not None
               for n in node.walk()):
            return None
        value = self.fold(to_spark_sql(node))
        if isinstance(value, decimal.Decimal):
            value = float(value)
        if isinstance(value, (list, tuple)):
            value = [float(v) if isinstance(v, decimal.Decimal) else v for v in value]
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return {"lit": value}
        if isinstance(value, (int, float)):
            return {"lit": value}
        if isinstance(value, (list, tuple)) and value and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return {"lit": [float(v) for v in value]}
        return None

    def type_of(self, tree: dict, where: exp.Expression | None = None) -> str:
        if "col" in tree:
            return "sigseg"
        if "lit" in tree:
            v = tree["lit"]
            return ("boolean" if isinstance(v, bool) else "bigint" if isinstance(v, int)
                    else "double" if isinstance(v, float)
                    else "array<double>" if isinstance(v, list) else "string")
        if "call" in tree:
            fn = registry.require(tree["call"])
            types = [self.type_of(a) for a in tree["args"]]
            literals = ["lit" in a for a in tree["args"]]
            try:
                result = fn.result_type(types, literals)
                if fn.stateful and all(literals[1:]):
                    fn.init_state(*(a["lit"] for a in tree["args"][1:]))  # check literals now
            except SignalError as err:
                raise WaveSQLError(err.code, err.message, Span.of(where),
                                   hint=err.hint or f"signature: {fn.signature()}") from None
            return result
        if tree["op"] in ("and", "or", "not") or tree["op"] in _COMPARE.values():
            return "boolean"
        return "double"

    # -- outputs -------------------------------------------------------------------------
    def output_for(self, tree: dict, where: exp.Expression) -> str:
        """Name of the stage column computing ``tree`` (added on first use)."""
        key = json.dumps(tree, sort_keys=True)
        self.spans.setdefault(key, Span.of(where))
        if key not in self.outputs:
            if "col" in tree:
                name, typ, epoch = tree["col"], "sigseg", None
            else:
                name = f"_sig{sum(1 for o in self.outputs.values() if 'col' not in o.expr)}"
                typ, epoch = self.type_of(tree, where), None
                if tree.get("call") in _TIME_FUNCTIONS:
                    typ, epoch = "timestamp", self.signal.epoch_us
            if typ not in SPARK_TYPES:
                raise WaveSQLError("TYPE_ERROR", f"a {typ} cannot be a query result",
                                   Span.of(where), hint="reduce it with a signal function, e.g. "
                                   "magnitude(fft(seg)) or band_energy(...)")
            self.outputs[key] = Output(name, tree, typ, epoch)
        return self.outputs[key].name


def _reads_data(tree: dict) -> bool:
    """Whether a program tree reads a channel or calls a signal function."""
    return "col" in tree or "call" in tree or any(_reads_data(a) for a in tree.get("args", ()))


def bind_signal_select(select: exp.Select, table: exp.Table, signal: cat.SignalDef,
                       view_name: str, fold=None) -> ir.SignalStage:
    """Rewrite ``select`` (in place) to read ``view_name``; return the stage computing it.
    ``fold``: evaluates a constant Spark expression (constant arguments, _StageBuilder)."""
    alias = table.alias_or_name
    builder = _StageBuilder(signal, {table.name.lower(), alias.lower()}, fold)
    window = signal_window(signal, table.args.get("window"))
    program = _build_program(select, table, builder)
    _probe(program, signal, window, builder.spans)
    if program.stateful and window[1] < window[0]:
        raise WaveSQLError(
            "STREAMING_RULE", "stateful signal functions (filters, detectors) need "
            "non-overlapping windows: overlapping ones would feed them samples twice",
            Span.of(table.args.get("window")),
            hint=f"use [SAMPLES {window[0]}], or filter in a subquery and window its result")
    _retarget(table, view_name, alias)
    scan = ir.SignalScan(signal, ir.Schema.of_columns(signal.channels), True, window)
    schema = ir.Schema(tuple(ir.Field(o.name, SPARK_TYPES[o.type]) for o in program.outputs))
    return ir.SignalStage(scan, program, schema, True)


@dataclass(frozen=True)
class _SegmentSource:
    """What the stage builder needs of a relation with SigSeg columns (not a signal)."""

    name: str
    channels: tuple
    epoch_us: int = 0


def bind_segment_select(select: exp.Select, table: exp.Table, source: ir.Relation,
                        name: str, view_name: str, fold=None,
                        qualifiers: tuple[str, ...] = ()) -> ir.SignalStage:
    """Like :func:`bind_signal_select` for a relation whose SigSeg columns come from
    elsewhere (a catalog view): the stage runs as a ``mapInArrow`` over its rows and carries
    the relation's other columns the query uses through the same row filter."""
    sigseg = SPARK_TYPES["sigseg"].replace(" ", "")
    channels = tuple(cat.Column(f.name, f.type) for f in source.schema.fields
                     if f.type.lower().replace(" ", "") == sigseg)
    alias = table.alias_or_name
    window = table.args.get("window")
    if window is not None:
        if window.kind != "SAMPLES":
            raise WaveSQLError("NOT_IMPLEMENTED", f"only [SAMPLES n [SLIDE m]] windows re-cut "
                               f"the segments of `{name}` (not a signal)", Span.of(window),
                               hint="time windows need the rate: window the signal itself")
        width = _count(window.args["size"], "SAMPLES")
        slide_node = window.args.get("slide")
        slide = _count(slide_node, "SLIDE") if slide_node is not None else width
        # Rewindow: the view's segments re-cut into exact windows; its other columns
        # described the old segments, so they do not carry over.
        schema = ir.Schema(tuple(ir.Field(c.name, c.type) for c in channels))
        source = ir.Rewindow(source, tuple(c.name for c in channels), width, slide, schema,
                             source.bounded)
    # ``qualifiers``: other names the channels go by (a SYNC's signal aliases: s.ch1)
    builder = _StageBuilder(_SegmentSource(name, channels),
                            {table.name.lower(), alias.lower()}
                            | {q.lower() for q in qualifiers}, fold)
    synced = name == "SYNC JOIN"
    keys = _state_keys(select, source)
    if synced and not keys:
        refuse_row_order(select)
    elif synced and not source.bounded:  # batch: a key's end flushes (segment_stage.py)
        refuse_pending_per_key(select, keys)
    program = _build_program(select, table, builder)
    outputs = {o.name.lower() for o in program.outputs}
    wanted = {c.name.lower() for c in select.find_all(exp.Column)
              if (not c.table or c.table.lower() == alias.lower())}
    # ``c.id`` over a SYNC result reads field ``id`` of its struct column ``c``
    wanted |= {c.table.lower() for c in select.find_all(exp.Column)
               if c.table and source.schema.find(c.table) is not None}
    star = any(isinstance(e, exp.Star) for e in select.expressions)
    passthrough = tuple(f.name for f in source.schema.fields
                        if f.name.lower() not in outputs
                        and (star or f.name.lower() in wanted))
    _retarget(table, view_name, alias)
    fields = [ir.Field(o.name, SPARK_TYPES[o.type]) for o in program.outputs]
    fields += [source.schema.find(n) for n in passthrough]
    # over a SYNC result: each row from rest, or with OVER (PARTITION BY k) each key's
    # ranges in start order (segment_stage.py says why both)
    state = ("per_key" if keys else "per_row") if synced else "carried"
    if state == "per_key":  # the WHERE on the control first, as SQL has it before windows
        source = kept_before_keys(select, source, view_name)
    return ir.SignalStage(source, program, ir.Schema(tuple(fields)), source.bounded, passthrough,
                          state=state, keys=keys)


def _state_keys(select: exp.Select, source: ir.Relation) -> tuple[str, ...]:
    """The keys of ``f(...) OVER (PARTITION BY k, ...)`` around the stateful signal
    functions of ``select`` (the ``OVER`` removed from the tree), or ``()``.

    The rows of a view or subquery may hold several series -- one per sensor, site,
    recording -- whose segments overlap in sample numbers. A stateful function carries
    its state from segment to segment in start-sample order, which is only one signal's
    order: SQL's spelling for "along the rows of each key, in order" is a window, so
    ``lowpass(ch, 100.0) OVER (PARTITION BY sensor)`` runs the filter along each sensor's
    segments in start-sample order, the sensors in parallel. Every stateful call of the
    SELECT then names the same keys (they run as one program), no ORDER BY or frame (the
    order is the segments' own), and no stateless function takes an OVER (it has no state
    to order). Over a SYNC result the rows of a key are its control rows' ranges, taken
    in range-start order (planner/segment_stage.py)."""
    from wavesql.udfs import registry

    windows = [w for w in select.find_all(exp.Window) if isinstance(w.this, exp.Anonymous)
               and registry.lookup(w.this.name) is not None]
    if not windows:
        return ()
    found = None
    for w in windows:
        fn = registry.lookup(w.this.name)
        if not any(registry.lookup(c.name) is not None and registry.lookup(c.name).stateful
                   for c in w.this.find_all(exp.Anonymous)):
            raise WaveSQLError("INVALID_OPTION", f"`{fn.name}` keeps no state from segment to "
                               "segment (nor does any function in it): OVER (PARTITION BY "
                               "...) orders a stateful function's state", Span.of(w), hint=f"drop the OVER around {fn.name}")
        if w.args.get("order") is not None or w.args.get("spec") is not None:
            raise WaveSQLError("INVALID_OPTION", f"`{fn.name}` runs along each key's segments "
                               "in start-sample order: its OVER takes PARTITION BY only",
                               Span.of(w), hint="drop the ORDER BY / frame")
        names = []
        for key in w.args.get("partition_by") or []:
            field = source.schema.find(key.name) if isinstance(key, exp.Column) else None
            if field is None or field.type.lower().replace(" ", "") == \
                    SPARK_TYPES["sigseg"].replace(" ", ""):
                raise WaveSQLError("UNKNOWN_COLUMN", f"`{key.sql()}` is not a column of the "
                                   "segments' relation a signal function's state can be "
                                   "kept by", Span.of(key),
                                   hint=did_you_mean(key.sql(), source.schema.names,
                                                     "columns"))
            names.append(field.name)
        if not names:
            raise WaveSQLError("INVALID_OPTION", f"OVER () around `{fn.name}`: name the key "
                               "whose segments make one signal", Span.of(w),
                               hint="OVER (PARTITION BY sensor), or drop the OVER when the "
                                    "rows are one signal")
        if found is not None and [n.lower() for n in names] != [n.lower() for n in found]:
            raise WaveSQLError("INVALID_OPTION", "the stateful signal functions of one SELECT "
                               "run as one program: their OVER names the same keys",
                               Span.of(w), hint=f"PARTITION BY {', '.join(found)} on each")
        found = names
        w.replace(w.this)
    over = [w.this for w in windows]  # (in the tree now, in place of their windows)
    for call in select.find_all(exp.Anonymous):
        fn = registry.lookup(call.name)
        if fn is not None and fn.stateful and not any(
                node is o for node in (call, *_ancestors(call)) for o in over):
            raise WaveSQLError("INVALID_OPTION", f"`{fn.name}` has no OVER while other "
                               f"stateful functions run per {', '.join(found)}",
                               Span.of(call), hint=f"{fn.name}(...) OVER (PARTITION BY "
                                                   f"{', '.join(found)})")
    return tuple(found)


def _ancestors(node: exp.Expression):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _retarget(table: exp.Table, view_name: str, alias: str) -> None:
    table.set("window", None)
    table.set("this", exp.to_identifier(view_name))
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))


def _build_program(select: exp.Select, table: exp.Table, builder: "_StageBuilder") -> Program:
    """Move the signal work of ``select`` into a program, rewriting ``select`` in place."""
    alias = table.alias_or_name

    # WHERE: conjuncts computable next to the samples go into the program.
    filters = []
    where = select.args.get("where")
    if where is not None:
        kept = []
        for conjunct in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
            tree = builder.compile(conjunct)
            if tree is not None and builder.type_of(tree, conjunct) == "boolean":
                filters.append(tree)
                builder.spans[json.dumps(tree, sort_keys=True)] = Span.of(conjunct)
            else:
                kept.append(conjunct)
        select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)

    # SELECT *: every channel.
    if any(isinstance(e, exp.Star) for e in select.expressions):
        for name in builder.channels.values():
            builder.output_for({"col": name}, table)

    # Every maximal signal-function call becomes a stage column; bare channels pass through,
    # and so do channels whose fields the query reads (ch1.start).
    def replace(node: exp.Expression):
        if isinstance(node, exp.Anonymous) and registry.lookup(node.name) is not None:
            tree = builder.compile(node)
            return exp.column(builder.output_for(tree, node), table=alias)
        sized, field = builder.size_of(node), builder.field_call(node)
        if (sized or field) and not _in_nested_query(node, select):
            if sized is not None:  # Spark's size() is an INT
                tree = {"call": "width", "args": [{"col": sized}]}
                return exp.cast(exp.column(builder.output_for(tree, node), table=alias), "INT")
            return exp.column(builder.output_for(field, node), table=alias)
        channel = builder.channel_of(node) or builder.field_of(node)
        if channel is not None:
            builder.output_for({"col": channel}, node)
        return node

    def computed_here(e: exp.Expression) -> bool:
        return any(registry.lookup(a.name) is not None for a in e.find_all(exp.Anonymous)) \
            or any(builder.size_of(a) for a in e.find_all(exp.ArraySize, exp.Anonymous))

    new_expressions = []
    for e in select.expressions:
        if isinstance(e, exp.Column) and builder.field_call(e) is not None:
            e = exp.alias_(e, e.name)  # Spark names voice.start `start`
        if not isinstance(e, (exp.Alias, exp.Star, exp.Column)) and computed_here(e):
            # name the column by its text, not by `_sig0` (function names in lower case,
            # as Spark names size(voice.samples))
            e = exp.alias_(e, deep(WaveSQL().generate, e, normalize_functions="lower"))
        new_expressions.append(e.transform(replace, copy=False) if not isinstance(e, exp.Star)
                               else e)
    select.set("expressions", new_expressions)
    for arg in ("where", "group", "having", "order", "qualify"):
        part = select.args.get(arg)
        if part is not None:
            select.set(arg, part.transform(replace, copy=False))
    if not builder.outputs:  # e.g. SELECT count(*) FROM mic: still one row per window
        builder.output_for({"call": "width", "args": [{"col": next(iter(
            builder.channels.values()))}]}, table)

    trees = [o.expr for o in builder.outputs.values()] + filters
    order = [c.name for c in builder.signal.channels]
    used = sorted({t["col"] for tree in trees for t in _cols(tree)}, key=order.index)
    return Program(tuple(used), tuple(builder.outputs.values()), tuple(filters))


def _probe(program: Program, signal: cat.SignalDef, window: tuple[int, int],
           spans: dict[str, Span | None]) -> None:
    """Run each output and filter once over a window of zeros at the signal's rate.

    Argument errors that depend on the rate or the window width (a cutoff above Nyquist, a
    wavelet level too deep for the window) then surface here, at bind time, instead of as
    a failed Spark task.
    """
    from wavesql.udfs.program import Evaluator

    zeros = np.zeros((1, window[0]), dtype=np.float32)
    starts = np.zeros(1, dtype=np.int64)
    for tree in [o.expr for o in program.outputs] + list(program.filters):
        if "col" in tree:
            continue
        probe = Program(program.channels, (Output("p", tree, "boolean"),) if "op" in tree
                        else (Output("p", tree, "double"),))
        try:
            Evaluator(probe)._eval(tree, _probe_rows(probe, starts, signal.rate_hz, zeros), {})
        except SignalError as err:
            raise WaveSQLError(err.code, err.message, spans.get(json.dumps(tree, sort_keys=True)),
                               hint=err.hint) from None


def _probe_rows(program: Program, starts, rate, zeros):
    from wavesql.udfs.program import _Rows
    from wavesql.udfs.sigseg import SegBlock

    return _Rows(starts, rate, {c: SegBlock(starts, rate, zeros) for c in program.channels})


def _in_nested_query(node: exp.Expression, select: exp.Select) -> bool:
    """Whether ``node`` sits in a query nested inside ``select`` (its names are that
    query's: ``voice`` there may be another relation's column)."""
    node = node.parent
    while node is not None and node is not select:
        if isinstance(node, exp.Query):
            return True
        node = node.parent
    return False


def _cols(tree: dict):
    if "col" in tree:
        yield tree
    for a in tree.get("args", ()):
        yield from _cols(a)

