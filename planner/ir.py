"""The typed logical IR that ``bind`` produces and ``lower`` consumes.

Nodes are frozen dataclasses. A *relation* node derives its :class:`Schema` and knows whether
it is *bounded* (finite: a batch DataFrame) or not (a stream: a streaming query). A
*statement* node is what one WaveSQL statement does (create, drop, show, describe, explain,
run a query). Nothing here imports Spark: types are Spark SQL type strings (``bigint``,
``array<float>``), the lingua franca between the catalog, the binder and Spark.

``explain_ir(node)`` prints the tree, one node per line, with schemas (golden tests, ``EXPLAIN
IR``). Adding an operator (a window, a sync join) means: a node class here with its schema
rule, a ``bind`` case that builds it, and a ``lower`` rule; ``lower`` raises
``NOT_IMPLEMENTED`` for a node without a rule instead of skipping it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import parse_one


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One column: name, Spark SQL type string, nullability."""

    name: str
    type: str
    nullable: bool = True

    def __str__(self) -> str:
        return f"{self.name}: {self.type}{'' if self.nullable else ' not null'}"


@dataclass(frozen=True)
class Schema:
    """An ordered tuple of fields; names are matched case-insensitively, as Spark does."""

    fields: tuple[Field, ...] = ()

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def find(self, name: str) -> Field | None:
        lowered = name.lower()
        for f in self.fields:
            if f.name.lower() == lowered:
                return f
        return None

    def ddl(self) -> str:
        """Spark DDL schema string (``a INT, b STRING``), identifiers back-quoted."""
        return ", ".join(f"`{f.name.replace('`', '``')}` {f.type}" for f in self.fields)

    @staticmethod
    def of_columns(columns) -> "Schema":
        return Schema(tuple(Field(c.name, c.type) for c in columns))

    def __str__(self) -> str:
        return "(" + ", ".join(str(f) for f in self.fields) + ")"


# ---------------------------------------------------------------------------------------
# Relations
# ---------------------------------------------------------------------------------------
class Relation:
    """Base of relation nodes. Subclasses are frozen dataclasses with ``schema``/``bounded``."""

    schema: Schema
    bounded: bool

    def children(self) -> tuple["Relation", ...]:
        return ()

    def label(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class StreamScan(Relation):
    """Read a catalog stream's files (Parquet / CSV / JSON) with its declared schema."""

    stream: cat.StreamDef
    schema: Schema
    bounded: bool = True

    def label(self) -> str:
        s = self.stream
        where = f"kafka topic {s.path}" if s.source == "kafka" else s.path
        return f"StreamScan {s.name} v{s.version} [{s.format} {where}]"


@dataclass(frozen=True)
class SignalScan(Relation):
    """Read a catalog signal's recordings in windows of ``window = (width, slide)`` samples.

    Without a ``program`` each row holds one SigSeg per channel; with one (pushed down by
    ``rewrite``), the scan evaluates it next to the samples and ``schema`` is its output.
    """

    signal: cat.SignalDef
    schema: Schema
    bounded: bool = True
    window: tuple[int, int] | None = None
    program: Any = None  # wavesql.udfs.program.Program

    def label(self) -> str:
        s = self.signal
        width, slide = self.window or (s.segment, s.segment)
        win = f"SAMPLES {width}" + (f" SLIDE {slide}" if slide != width else "")
        text = f"SignalScan {s.name} v{s.version} [{s.format} {s.path} @ {s.rate_hz:g} Hz, {win}]"
        if self.program is not None:
            text += " " + program_label(self.program)
            if self.program.stateful:
                split = row_state_split(s, self.program)
                text += " " + (split.label(s.rate_hz) if split is not None else
                               history_label(self.program, s.rate_hz))
        return text


@dataclass(frozen=True)
class SignalStage(Relation):
    """Signal functions and pushable filters of one query over ``input``'s windows, fused
    into one program (one Python pass)."""

    input: Relation
    program: Any  # wavesql.udfs.program.Program
    schema: Schema
    bounded: bool = True
    passthrough: tuple[str, ...] = ()  # input columns carried through the program's filter
    # How stateful functions see the rows: "carried" -- the segments are one signal, state
    # carried from segment to segment in start-sample order (a view's, a subquery's);
    # "per_row" -- each row's segment is a signal of its own, state from rest at its first
    # sample (a SYNC result's); "per_key" -- a SYNC result's ranges of each key in start
    # order, f(...) OVER (PARTITION BY keys) (planner/segment_stage.py says why).
    state: str = "carried"
    keys: tuple[str, ...] = ()  # "carried"/"per_key" per key: OVER (PARTITION BY keys)

    def children(self):
        return (self.input,)

    def label(self) -> str:
        keep = f" passthrough[{', '.join(self.passthrough)}]" if self.passthrough else ""
        order = ""
        if self.program.stateful and self.keys:
            order = f" state per key ({', '.join(self.keys)}): in start order, keys in parallel"
        elif self.program.stateful:
            order = (" state per row: each segment filtered from rest, rows in parallel"
                     if self.state == "per_row" else
                     " sequential: one ordered pass (state carried from segment to segment)")
        return "SignalStage " + program_label(self.program) + keep + order


def program_label(program) -> str:
    """Compact text of a program: its outputs and filters."""
    outs = ", ".join(f"{o.name}={_tree_text(o.expr)}" for o in program.outputs)
    text = f"program[{outs}]"
    if program.filters:
        text += " filter[" + " AND ".join(_tree_text(f) for f in program.filters) + "]"
    return text


def row_state_split(signal, program):
    """How a WAV scan of ``signal`` runs a program whose only unbounded parts are
    row-state functions (``cfar``): the windows scored in parallel partitions, the
    functions in one ordered pass over the scores (a ``wavesql.udfs.row_state.Split``);
    None where the program cannot be cut so, or the signal is not read from WAV files."""
    from wavesql.udfs import row_state

    if signal.source == "kafka" or signal.format != "wav":
        return None
    return row_state.split(program, signal.rate_hz)


def history_label(program, rate: float) -> str:
    """How a stateful program's scan is cut: parallel partitions that each warm up on the
    look-back before them (exact: udfs/kernels/filters.py), or one ordered pass and why."""
    lookback = program.lookback(rate)
    if isinstance(lookback, str):
        return f"sequential: {lookback}"
    return f"parallel: each partition warms up on the {lookback:,} samples before it"


def _tree_text(tree: dict) -> str:
    if "col" in tree:
        return tree["col"]
    if "lit" in tree:
        return repr(tree["lit"])
    if "call" in tree:
        return f"{tree['call']}({', '.join(_tree_text(a) for a in tree['args'])})"
    args = [_tree_text(a) for a in tree["args"]]
    op = tree["op"]
    return f"{op} {args[0]}" if len(args) == 1 else "(" + f" {op} ".join(args) + ")"


@dataclass(frozen=True)
class WindowScan(Relation):
    """A CQL window over an event stream: the ``(_time, row)`` pairs, one per instant at
    which the row is in the window's relation (``planner/windows.py`` has the semantics)."""

    input: Relation
    stream: str
    time_column: str
    window: Any  # planner.windows.WindowSpec
    schema: Schema
    bounded: bool = True
    #: The windowed tables joined with this one in its SELECT (itself included, each with no
    #: ``joint`` of its own): the pairs are made at the instants of all of them.
    joint: tuple = ()

    def children(self):
        return (self.input,)

    def label(self) -> str:
        joined = (" at the instants of " + ", ".join(f"{w.stream} {w.window}" for w in self.joint)
                  if self.joint else "")
        return f"WindowScan {self.stream} {self.window} on {self.time_column}{joined}"


@dataclass(frozen=True)
class StreamOf(Relation):
    """``ISTREAM``/``DSTREAM``/``RSTREAM`` of a per-instant query over ``window``."""

    operator: str
    input: Relation
    window: WindowScan  # the first of a join's windowed tables (``window.joint`` has all)
    schema: Schema
    bounded: bool = True

    def children(self):
        return (self.input,)

    def label(self) -> str:
        return f"{self.operator} over {self.window.stream} {self.window.window}"


@dataclass(frozen=True)
class SyncJoin(Relation):
    """``control SYNC JOIN signal ON RANGE (start, end)`` (``planner/sync.py``)."""

    control: Relation
    control_alias: str
    signal: SignalScan
    signal_alias: str
    start_sql: str
    end_sql: str
    missing: str
    schema: Schema
    bounded: bool = True
    #: ``(alias, channels)`` of the signals SYNCed before this one in its SELECT: ``control``
    #: is then that SYNC JOIN, and the range is still over the control's columns.
    carried: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def children(self):
        return (self.control, self.signal)

    def label(self) -> str:
        return (f"SyncJoin {self.signal.signal.name} ON RANGE ({self.start_sql}, "
                f"{self.end_sql}) MISSING {self.missing} [binned by SEGMENT "
                f"{self.signal.signal.segment}]")


@dataclass(frozen=True)
class Rewindow(Relation):
    """Segments from ``input`` (any row order) re-cut into exact ``[SAMPLES width SLIDE
    slide]`` windows on the absolute sample grid (``planner/rewindow.py``)."""

    input: Relation
    channels: tuple[str, ...]
    width: int
    slide: int
    schema: Schema
    bounded: bool = True

    def children(self):
        return (self.input,)

    def label(self) -> str:
        slide = f" SLIDE {self.slide}" if self.slide != self.width else ""
        return f"Rewindow [SAMPLES {self.width}{slide}] of {', '.join(self.channels)}"


@dataclass(frozen=True)
class SplitScan(Relation):
    """A stream split into ``n`` sub-streams (splitstream): by ``pmod(hash(by), n)``, rows
    matching ``replicate`` to every sub-stream; the sub-stream number is ``__part``."""

    input: Relation
    stream: str
    n: int
    by_sql: str
    replicate_sql: str | None
    schema: Schema
    bounded: bool = True

    def children(self):
        return (self.input,)

    def label(self) -> str:
        rep = f" REPLICATE WHEN {self.replicate_sql}" if self.replicate_sql else ""
        return f"SplitScan {self.stream} [PARTITION INTO {self.n} BY {self.by_sql}{rep}]"


@dataclass(frozen=True)
class SparkTable(Relation):
    """A table or temporary view that lives in Spark's own catalog, not WaveSQL's."""

    name: str
    schema: Schema
    bounded: bool = True

    def label(self) -> str:
        return f"SparkTable {self.name}"


@dataclass(frozen=True)
class ViewRef(Relation):
    """A catalog view: its stored query, bound, under the view's name."""

    view: cat.ViewDef
    body: Relation
    schema: Schema
    bounded: bool = True

    def children(self):
        return (self.body,)

    def label(self) -> str:
        return f"View {self.view.name} v{self.view.version}"


@dataclass(frozen=True)
class Resample:
    """What a ``RESAMPLE(input, time, period, method [PARTITION BY keys])`` computes, kept
    beside its SQL for the passes that evaluate it another way (the direct pass over the
    files, continuous queries)."""

    input: str  # the input's name (lower case) in the query's inputs
    time_column: str
    period_us: int
    method: str  # linear | prev | null | zero
    numeric: tuple[str, ...]  # the columns the method interpolates
    keys: tuple[str, ...] = ()  # PARTITION BY: one series per key


@dataclass(frozen=True)
class AsofJoin:
    """What an ``ASOF [LEFT] JOIN`` computes, kept beside its SQL for continuous queries:
    the match of a left row is the right row with the same ``keys`` (left, right column
    pairs) nearest in time -- ``right_time <= left_time`` (``direction='backward'``) or
    ``>=`` (``'forward'``), strictly when not ``inclusive``."""

    left: str  # the inputs' names (lower case) in the query's inputs
    right: str
    keys: tuple[tuple[str, str], ...]
    left_time: str
    right_time: str
    direction: str
    inclusive: bool
    outer: bool  # ASOF LEFT JOIN: a left row without a match is kept


@dataclass(frozen=True)
class SqlQuery(Relation):
    """A Spark SQL query over named inputs.

    ``tree`` is the query as the analysis rules left it, an AST with no WaveSQL construct
    left; ``sql`` is its text as handed to Spark: the user's own text when the statement is
    plain Spark SQL (so Spark sees exactly what the user typed and its error positions map
    back one to one), else rendered from ``tree`` once, at binding. The physical rules and
    the continuous planner work on the tree (:meth:`ast`), never on the text. ``inputs``
    maps each relation name the query references to the relation that provides it;
    lowering registers each as a Spark temporary view under that name before running the
    SQL.
    """

    sql: str
    inputs: tuple[tuple[str, Relation], ...]
    schema: Schema
    bounded: bool = True
    # Offset of ``sql`` inside the user's text when it is the user's own text, else None.
    source_offset: int | None = None
    #: When ``sql`` is an ASOF JOIN: what it computes (continuous queries evaluate it
    #: incrementally, streaming/joins.py).
    asof: AsofJoin | None = None
    #: When ``sql`` is a RESAMPLE: what it computes (planner/physical/direct_resample.py,
    #: streaming/resample.py).
    resample: Resample | None = None
    #: the AST whose Spark SQL is ``sql`` (shared: read it, or rewrite a copy from
    #: :meth:`ast`); None only for a query built from text alone
    tree: exp.Expression | None = field(default=None, compare=False, repr=False)

    def ast(self) -> exp.Expression:
        """A copy of the query's AST, for a rule to rewrite."""
        return self.tree.copy() if self.tree is not None else parse_one(self.sql)

    def children(self):
        return tuple(r for _, r in self.inputs)

    def label(self) -> str:
        text = " ".join(self.sql.split())
        return f"SqlQuery {text[:70] + ('...' if len(text) > 70 else '')!r}"


# ---------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------
class Statement:
    """Base of statement nodes."""

    kind: ClassVar[str] = "statement"

    def relations(self) -> tuple[Relation, ...]:
        return ()


@dataclass(frozen=True)
class QueryStatement(Statement):
    """Run a query; the result is its relation as a DataFrame."""

    relation: Relation
    kind: ClassVar[str] = "query"

    def relations(self):
        return (self.relation,)


@dataclass(frozen=True)
class CreateObject(Statement):
    """Register a stream, signal, view or sink in the catalog."""

    definition: Any  # a wavesql.catalog.objects definition
    replace: bool = False
    if_not_exists: bool = False
    kind: ClassVar[str] = "create"


@dataclass(frozen=True)
class DropObject(Statement):
    name: str
    object_kind: str | None  # STREAM / SIGNAL / SINK / VIEW, None = any
    if_exists: bool = False
    kind: ClassVar[str] = "drop"


@dataclass(frozen=True)
class ShowObjects(Statement):
    object_kind: str | None  # None = every kind
    kind: ClassVar[str] = "show"


@dataclass(frozen=True)
class DescribeObject(Statement):
    definition: Any
    schema: Schema
    kind: ClassVar[str] = "describe"


@dataclass(frozen=True)
class TempView(Statement):
    """``CREATE [OR REPLACE] TEMPORARY VIEW`` over catalog objects (``definition``), or its
    ``DROP VIEW`` (``definition`` None): kept for the session, not in the catalog
    (catalog/session_views.py)."""

    name: str
    definition: Any = None
    replace: bool = False
    if_exists: bool = False
    kind: ClassVar[str] = "ddl"


@dataclass(frozen=True)
class ShowFunctions(Statement):
    """``SHOW [USER|SYSTEM|ALL] FUNCTIONS [[LIKE] 'pattern']``: Spark's functions (``sql``)
    and, unless ``USER``, the signal functions matching ``pattern`` (Spark's: ``*`` any
    text, ``|`` alternatives, case-insensitive)."""

    sql: str
    signal_functions: bool
    pattern: str | None = None
    kind: ClassVar[str] = "show"


@dataclass(frozen=True)
class DescribeFunction(Statement):
    """``DESCRIBE FUNCTION [EXTENDED] name`` of a signal function (Spark's own otherwise)."""

    name: str
    extended: bool
    kind: ClassVar[str] = "describe"


@dataclass(frozen=True)
class SparkCommand(Statement):
    """A statement that is Spark's business alone (SET, CACHE TABLE, CREATE TEMP VIEW, ...)."""

    sql: str
    inputs: tuple[tuple[str, Relation], ...] = ()
    kind: ClassVar[str] = "spark"

    def relations(self):
        return tuple(r for _, r in self.inputs)


@dataclass(frozen=True)
class Explain(Statement):
    """``EXPLAIN [AST|IR|...] statement``; ``target`` None for AST, and for STREAM of a query bound
    only in parts (over a signal/SYNC CTE: streaming/derived.py), ``unbound`` its bind error."""

    mode: str  # AST / IR / STAGES / SPARK / EXTENDED / FORMATTED / CODEGEN / COST / STREAM
    ast_text: str
    target: Statement | None = None
    #: ``target`` as the binder left it, before the rewrite rules (EXPLAIN STAGES shows both)
    analyzed: Statement | None = None
    unbound: Exception | None = None
    kind: ClassVar[str] = "explain"


# ---------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------
def walk(rel: Relation) -> Iterator[Relation]:
    """Pre-order walk over a relation tree."""
    yield rel
    for child in rel.children():
        yield from walk(child)


def carried_event_time(relation: Relation) -> str | None:
    """The event-time column of ``relation``: the EVENT TIME of the one event stream below
    it whose column its result keeps by name (a view's ``SELECT ts, v FROM ppg``); None when
    there is none or more than one."""
    found = {}
    for rel in walk(relation):
        if isinstance(rel, StreamScan) and rel.stream.event_time:
            field = relation.schema.find(rel.stream.event_time)
            if field is not None and field.type.lower().startswith("timestamp"):
                found[field.name.lower()] = field.name
    return next(iter(found.values())) if len(found) == 1 else None


def explain_ir(node: Statement | Relation) -> str:
    """Indented tree, one node per line with schema and boundedness."""
    lines: list[str] = []

    def rel(r: Relation, depth: int, name: str | None = None) -> None:
        pad = "  " * depth
        prefix = f"{name} <- " if name else ""
        bound = "bounded" if r.bounded else "unbounded"
        lines.append(f"{pad}{prefix}{r.label()}  {r.schema} {bound}")
        if isinstance(r, (SqlQuery,)):
            for n, child in r.inputs:
                rel(child, depth + 1, n)
        else:
            for child in r.children():
                rel(child, depth + 1)

    if isinstance(node, Relation):
        rel(node, 0)
    elif isinstance(node, QueryStatement):
        lines.append("Query")
        rel(node.relation, 1)
    elif isinstance(node, SparkCommand):
        lines.append(f"SparkCommand {' '.join(node.sql.split())!r}")
        for n, child in node.inputs:
            rel(child, 1, n)
    elif isinstance(node, Explain):
        lines.append(f"Explain {node.mode}")
        if node.target is not None:
            lines.extend("  " + line for line in explain_ir(node.target).splitlines())
    else:
        fields = {k: v for k, v in vars(node).items() if k != "schema"}
        args = ", ".join(f"{k}={_short(v)}" for k, v in fields.items())
        lines.append(f"{type(node).__name__}({args})")
    return "\n".join(lines)


def _short(value: Any) -> str:
    name = getattr(value, "name", None)
    kind = getattr(value, "kind", None)
    if name is not None and isinstance(kind, str):
        return f"{kind} {name}"
    return repr(value)


__all__ = [
    "Field", "Schema", "Relation", "StreamScan", "SignalScan", "SignalStage", "SparkTable",
    "ShowFunctions", "DescribeFunction", "TempView", "carried_event_time",
    "ViewRef", "program_label",
    "SqlQuery", "Resample", "AsofJoin", "Statement", "QueryStatement", "CreateObject",
    "DropObject", "ShowObjects",
    "DescribeObject", "SparkCommand", "Explain", "walk", "explain_ir",
]
