"""A continuous query's plan, and the streaming rules every shape of query checks.

:class:`Plan` says how the re-evaluating runner (:mod:`.runner`) evaluates a query -- its
mode, its inputs, the result column compared with progress -- and each :class:`Input` what
of its stream's past rows later results can still need (its look-back). They are made by
:func:`.planning.plan_continuous` and the planners of each shape (:mod:`.lookback`,
:mod:`.joins`, :mod:`.resample`, :mod:`.sync`, :mod:`.signals`), which share the checks
here: what runs continuously without a window must be row by row, and progress is kept in
a stream's EVENT TIME.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir


@dataclass(frozen=True)
class KeepTime:
    """Keep the rows whose event time is at least progress - ``us``."""

    us: int

    def __str__(self) -> str:
        return f"{self.us} us of event time before progress"


@dataclass(frozen=True)
class KeepRows:
    """Keep the last ``n`` rows before ``progress - within_us`` per value of the Spark SQL
    expressions ``keys``, counting only rows for which the SQL predicate ``passes`` holds
    (None: all), and every row from ``progress - within_us`` on."""

    keys: tuple[str, ...]
    n: int
    passes: str | None = None
    within_us: int = 0

    def __str__(self) -> str:
        keys = f" per {', '.join(self.keys)}" if self.keys else ""
        where = f" where {self.passes}" if self.passes else ""
        within = f" before the last {self.within_us} us" if self.within_us else ""
        return f"the last {self.n} rows{keys}{where}{within}"


@dataclass(frozen=True)
class KeepMatchable:
    """An interval join's side: keep the rows whose event time is at least the ``other``
    stream's progress + ``offset_us`` (what that side's future rows can still match)."""

    other: str
    offset_us: int

    def __str__(self) -> str:
        return f"the rows {self.other}'s future rows can match ({self.offset_us:+d} us)"


@dataclass
class Input:
    index: int
    stream: cat.StreamDef
    #: What later results can still need of this input's past rows: KeepTime, KeepRows or
    #: KeepMatchable rules, a row kept if any rule keeps it. Empty: keep nothing.
    lookback: tuple = ()

    @property
    def column(self) -> str:
        return f"__in{self.index}"


@dataclass(frozen=True)
class Plan:
    """How a continuous query is evaluated: ``mode`` is ``windowed`` (CQL windows: a row is
    final when its ``_time`` is below progress), ``over`` (OVER windows with bounded
    PRECEDING frames: final when its event time is below progress), ``rows`` (row by row:
    final as it comes) or ``sync`` (row by row over a SYNC JOIN's control stream: a row is
    final once the signal's files cover its range, and waits in the buffer until then)."""

    inputs: tuple
    mode: str
    time_column: str | None  # the result column compared with progress
    signal: object = None  # mode ``signal``: a streaming.signals.SignalPlan
    sync: object = None  # mode ``sync``: the ir.SyncJoin (see streaming.sync.sync_split)
    #: mode ``sync``: every SYNC JOIN of the SELECT, first (``sync``, over the control) to
    #: last -- several signals synced together
    syncs: tuple = ()
    asof: dict | None = None  # mode ``asof``: left/right stream keys, the right key columns
    band: dict | None = None  # mode ``band``: streams a and b (a.t - b.t in [lo, hi]), the
    #: key pairs (a column, b column) the ON clause equates
    resample: dict | None = None  # a RESAMPLE (mode ``resample``, or under windows): its
    #: ``series`` (input, method, interpolated columns) and ``keys``


def parsed(rel: ir.SqlQuery):
    """A copy of ``rel``'s AST (None: it has none and its text does not parse)."""
    try:
        return rel.ast()
    except WaveSQLError:
        return None


def check_row_by_row(tree, stmt) -> None:
    """Outside OVER windows, a continuous query without CQL windows must be row by row."""
    for node in tree.walk():
        if isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Window) is not None:
            continue
        if isinstance(node, (exp.AggFunc, exp.Group, exp.Join, exp.Distinct, exp.Limit)):
            raise WaveSQLError(
                "STREAMING_RULE", f"`{node.sql()[:40]}` over an unbounded stream needs a window",
                Span.of(stmt.node),
                hint="aggregate over a window, e.g. FROM trades [RANGE 1 MINUTE SLIDE 10 "
                     "SECONDS], or an OVER (... RANGE BETWEEN ... PRECEDING AND CURRENT ROW)")


def check_row_by_row_except(trees: list, index: int, stmt) -> None:
    """Every query but the ``index``-th (the operator the mode evaluates) is row by row."""
    for i, tree in enumerate(trees):
        if i != index and tree is not None:
            check_row_by_row(tree, stmt)


def require_event_time(stream: cat.StreamDef, column: str, why: str, stmt) -> None:
    """``column`` must be ``stream``'s EVENT TIME: progress is kept in event time."""
    if stream.event_time is None or stream.event_time.lower() != column.lower():
        raise WaveSQLError("STREAMING_RULE", f"{why}; `{column}` is not `{stream.name}`'s "
                           "EVENT TIME", Span.of(stmt.node),
                           hint=f"declare it: CREATE OR REPLACE STREAM ... EVENT TIME {column} "
                                "WATERMARK ...")


def passes_through(tree: exp.Expression, column: str) -> bool:
    """Every SELECT of ``tree`` that outputs ``column`` outputs it as the bare column."""
    for select in tree.find_all(exp.Select):
        for item in select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                continue
            if item.alias_or_name.lower() != column.lower():
                continue
            inner = item.this if isinstance(item, exp.Alias) else item
            if not (isinstance(inner, exp.Column) and inner.name.lower() == column.lower()):
                return False
    return True
