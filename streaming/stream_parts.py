"""Stream parts: a CTE computing across a stream's rows, run on its own under a join or RESAMPLE.

``WITH m AS (SELECT _time AS t, k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS]
GROUP BY _time, k) SELECT e.id, m.a FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.t``:
a continuous ASOF or interval join follows a side, and RESAMPLE its input, only when it is
a catalog stream or a view row by row over one (streaming/joins.py, resample.py). A CTE
that windows, aggregates or computes OVER windows across a stream's rows is not -- but its
final rows are a stream of their own. So such a CTE, used as a join's side or RESAMPLE's
input, is a **stream part** of the derived pipeline (:mod:`.derived`): it runs as its own
continuous stream query (:func:`start_part`, through :func:`.launch.start`: on the runner
that query gets alone, the state store where it can) into ``<checkpoint>/derived/<cte>/
rows``, each batch's final rows and one punctuation row carrying its ``_progress``
committed whole, and the rest reads that folder as a catalog stream.

Guarantees:

- **event time**: the CTE's column that is the window's ``_time`` (``_time AS t``), else
  the column passing its stream's EVENT TIME through (an OVER window's rows, a RESAMPLE's
  grid); a CTE without either is refused, naming what to select (:func:`time_column`).
- **WATERMARK 0, progress from the punctuation**: a windowed (OVER, RESAMPLE) stream query
  delivers a row once its time is below the batch's ``_progress``, and only then; so a
  later batch's rows are at or above every ``_progress`` delivered before, and the
  largest row time of a batch is at most its punctuation -- the rest's progress over the
  part's rows never passes a row still to come. A part on another runner (an ASOF or
  interval join, row by row) gives no such order: refused (:func:`check_mode`).
- **final rows only**: a part with ``EMIT CHANGES`` is refused -- the rest reads each row
  of the folder once, as a fact; an early window row refined later would be two facts.
- **restart-safe**: each part resumes from ``<checkpoint>/derived/<cte>``; a batch re-run
  after a crash that followed its folder's commit keeps that folder (a stream query's
  batch re-run from its checkpoint gives the same rows), so the rest reads each row once.

Which CTEs are stream parts is decided on the AST here (:func:`is_stream_part`,
called by :func:`.derived_split.find_split`); the statement is cut only when it does not
plan whole (:func:`.planning.runs_whole`). A FROM/JOIN subquery, RESAMPLE's subquery input
or a view (catalog or temporary) is a stream part by the same rules
(:func:`is_stream_query`, :func:`is_side`, :func:`query_time_column`, :func:`check_query`,
called by :mod:`.derived_hoist`, which cuts it as a CTE, named after its alias or view).
What a part reads is followed through the statement's CTEs and views to the catalog
objects at the chain's end (:mod:`.derived_chain`): ``m`` windowing CTE ``a``, which filters
stream ``s``, reads ``s`` -- a stream part, its text carrying ``WITH a AS (...)``.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.errors import Span, WaveSQLError

from . import derived_chain

#: the plan modes whose rows come out at or above every ``_progress`` delivered before
ORDERED_MODES = ("windowed", "over", "resample")


def _streams_read(body: exp.Expression, names: set[str], catalog,
                  ctes: dict | None = None) -> list | None:
    """The catalog streams at the end of ``body``'s chain -- through the CTEs ``ctes``
    (name -> CTE) and the views it reads that are row by row (:func:`.derived_chain.resolve`:
    then the part's own query is what computes across rows, and the planner follows the
    steps under it) --, or None when it reads anything else (a CTE of ``names`` not in
    ``ctes``, a table, a signal, a qualified name, a CTE or view computing across rows: a
    part over another part's rows is not run)."""
    ctes = ctes or {}
    found = derived_chain.resolve(body, catalog, ctes, set(names) - set(ctes),
                                  follow=lambda query: not _across_rows(query))
    if not found or not all(isinstance(o, cat.StreamDef) for o in found):
        return None
    return found


def _across_rows(body: exp.Expression) -> bool:
    """Whether ``body`` computes across rows: CQL windows, aggregates, OVER windows,
    GROUP BY, DISTINCT, a join, a RESAMPLE (not row by row over its stream)."""
    return any(isinstance(n, (wn.StreamWindow, wn.Resample, exp.AggFunc, exp.Window,
                              exp.Group, exp.Distinct, exp.Join)) for n in body.walk())


def is_side(node: exp.Expression) -> bool:
    """Whether ``node`` (a table or subquery of a query) is a join's side or RESAMPLE's
    input there, or computed across again: under a CQL window of its own (``FROM m [RANGE
    1 MINUTE]``: windows over a windowed aggregate's rows) or with OVER windows in the
    SELECT reading it -- which follow only streams and views row by row over one, as a
    join does."""
    if isinstance(node.parent, wn.Resample):
        return True
    select = node.find_ancestor(exp.Select)
    if select is None:
        return False
    joins = select.args.get("joins") or []
    # (not a SYNC JOIN's control: the continuous SYNC reads its control row by row from a
    # catalog stream, and a part's punctuation rows would be control rows to it)
    if any(j.args.get("sync") for j in joins):
        return False
    over = any(w.find_ancestor(exp.Select) is select for w in select.find_all(exp.Window))
    if joins or node.args.get("window") is not None or over:
        return True
    # through a filter: ``FROM (SELECT t, k, a FROM m WHERE a > 0.3) x [RANGE ...]`` --
    # a row-by-row subquery over it that is a side itself (windows over a filter of it)
    outer = select.parent
    return (isinstance(outer, exp.Subquery) and isinstance(outer.parent, (exp.From, exp.Join))
            and _filters(select, node) and is_side(outer))


def _filters(select: exp.Select, node: exp.Expression) -> bool:
    """Whether ``select`` reads ``node`` (its FROM) row by row: filters and projections."""
    source = select.args.get("from_")
    return source is not None and source.this is node and not _across_rows(select)


def _joined_or_resampled(rest: exp.Expression, name: str, seen: frozenset = frozenset()
                         ) -> bool:
    """Whether the rest reads CTE ``name`` as a join's side or a RESAMPLE's input (or
    computed across again: :func:`is_side`) -- directly, or through CTEs that filter it
    (``f AS (SELECT ... FROM m WHERE ...)``, ``f`` windowed: ``rest`` then holds the
    statement's other CTEs, as :class:`exp.CTE` nodes)."""
    for t in rest.find_all(exp.Table):
        if t.args.get("db") or t.name.lower() != name:
            continue
        if is_side(t):
            return True
        select = t.find_ancestor(exp.Select)
        cte = select.parent if select is not None else None
        if isinstance(cte, exp.CTE) and _filters(select, t) and \
                cte.alias_or_name.lower() not in seen | {name}:
            if _joined_or_resampled(rest, cte.alias_or_name.lower(), seen | {name}):
                return True
    return False


def is_stream_query(body: exp.Expression, names: set[str], catalog,
                    ctes: dict | None = None) -> bool:
    """Whether ``body`` (a CTE's, a subquery's or a view's query; ``names``: the CTE names
    it may not read, ``ctes``: those it reads through) would run as a stream part: it
    reads catalog streams only -- directly or through CTEs and views -- and computes
    across their rows. Whether it is one depends on its use (:func:`is_side`)."""
    return _streams_read(body, names, catalog, ctes) is not None and _across_rows(body)


def is_stream_part(cte: exp.CTE, names: set[str], rest: exp.Expression, catalog,
                   ctes: dict | None = None) -> bool:
    """Whether ``cte`` (of a WITH whose CTE names are ``names``, ``ctes`` those it may
    read through; ``rest``: the statement without its WITH) is a stream part: it reads
    catalog streams only, computes across their rows, and the rest joins it or RESAMPLEs
    it."""
    return (is_stream_query(cte.this, names, catalog, ctes)
            and _joined_or_resampled(rest, cte.alias_or_name.lower()))


def time_column(cte: exp.CTE, catalog, ctes: dict | None = None) -> str:
    """:func:`query_time_column` of a CTE."""
    return query_time_column(cte.this, cte.alias_or_name, catalog, cte, "the CTE", ctes)


def query_time_column(body: exp.Expression, name: str, catalog, where: exp.Expression,
                      what: str, ctes: dict | None = None) -> str:
    """A stream part's event-time column (``body``: the query of the part named ``name``,
    ``what`` it is -- "the CTE", "the subquery", ...): its column that is the window's
    ``_time``, else the one passing its stream's EVENT TIME through (an OVER window's
    rows, a RESAMPLE's grid time); refused (``STREAMING_RULE`` at ``where``, naming what
    to select) when there is none."""
    select = body if isinstance(body, exp.Select) else None
    projections = select.selects if select is not None else []
    streams = _streams_read(body, set(), catalog, ctes) or []
    events = {s.event_time.lower() for s in streams if s.event_time}

    def passed(column: str):
        for projection in projections:
            value = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(value, exp.Column) and value.name.lower() == column:
                return projection.alias_or_name
        return None

    found = passed("_time")
    for event in sorted(events):
        found = found or passed(event)
    if found is None and select is not None and select.is_star and len(events) == 1:
        found = next(s.event_time for s in streams)
    if found is not None:  # (a `*` passes the stream's event time through)
        return found
    raise WaveSQLError(
        "STREAMING_RULE", f"a continuous join or RESAMPLE of `{name}`'s rows needs their event "
        f"time: {what} selects neither the window's _time nor its stream's event time "
        f"({', '.join(sorted(events)) or 'none declared'})", Span.of(where),
        hint=f"select the window's time in `{name}`, e.g. SELECT _time AS t, ...; its rows "
             "are then joined (or resampled) by t")


def check_part(cte: exp.CTE) -> None:
    """:func:`check_query` of a CTE, and no column list (``m(t, a) AS``: refused, as a
    signal CTE's)."""
    name = cte.alias_or_name
    check_query(cte.this, name)
    if cte.args["alias"].columns:
        raise WaveSQLError("NOT_IMPLEMENTED", f"a CTE with a column list run as a stream of "
                           "its own under a continuous join or RESAMPLE", Span.of(cte.args["alias"]),
                           hint=f"name the columns in the CTE's SELECT instead: SELECT _time "
                                f"AS t, ... (no `{name}(...)` list)")


def check_query(body: exp.Expression, name: str) -> None:
    """A stream part (``body``: its query, named ``name``) emits final rows only: ``EMIT
    CHANGES`` in it is refused."""
    for emit in body.find_all(wn.Emit):
        if emit.kind == "CHANGES":
            raise WaveSQLError(
                "STREAMING_RULE", f"`{name}` runs as a stream of its own under a continuous "
                "join or RESAMPLE, and only final rows may flow into it: the rest reads each "
                "of its rows once, as a fact, so an early window row refined later would be "
                "two different rows for one window", Span.of(emit),
                hint=f"drop EMIT CHANGES from `{name}` (its windows come once, final); "
                     "EMIT CHANGES may end the whole query")


def check_mode(plan, stmt, name: str) -> None:
    """A stream part's rows must come at or above every punctuation delivered before:
    windows, OVER windows and RESAMPLE do (module docstring); other modes are refused."""
    if plan.mode not in ORDERED_MODES:
        raise WaveSQLError(
            "NOT_IMPLEMENTED", f"`{name}` is a continuous {plan.mode} query, whose rows do "
            "not come in the order of its progress; a join or RESAMPLE over a relation's rows "
            "follows one of CQL windows, aggregates over them, OVER windows or RESAMPLE",
            Span.of(stmt.node),
            hint=f"run `{name}` continuously on its own (INSERT INTO a sink) and query the "
                 "sink's stream")


def columns(bound, node: exp.Expression) -> tuple:
    """The part's columns: the CTE's own select names, in order, typed as bound (a windowed
    query adds ``_time``, ``_final``, ``_progress``: kept only when selected); with a
    ``*``, the bound result's columns but ``_final`` and ``_progress``."""
    from .report import FINAL, PROGRESS

    fields = bound.relation.schema.fields
    if not isinstance(node, exp.Select) or node.is_star:
        return tuple(f for f in fields if f.name not in (FINAL, PROGRESS))
    by_name = {f.name.lower(): f for f in fields}
    return tuple(by_name[n.lower()] for n in node.named_selects if n.lower() in by_name)


class StreamPartRows:
    """Mixed into the runner :func:`.launch.start` picks for a stream part: each batch's
    rows (final ones: EMIT CHANGES is refused) and its punctuation to the part's rows folder
    (``write_part``: :func:`.derived._write_part`), not to a user's sink."""

    columns: tuple = ()
    derived_name: str = ""
    write_part = None

    def _deliver_counted(self, out, batch_id: int, report, by_final: bool) -> None:
        from pyspark.sql import functions as F

        from .report import FINAL

        if FINAL in out.columns:
            out = out.where(F.col(FINAL))
        out = out.persist()
        try:
            report.rows_out = report.final_out = out.count()
            self.write_part(self, out, batch_id, report.progress_us)
        finally:
            out.unpersist()


def start_part(start, write_part, session, planned, *, home: str, folder: str, trigger: str,
               max_files: int | None, clock):
    """Start the stream part ``planned`` (a :class:`.derived._Planned`) as a continuous
    stream query over its own checkpoint ``home``, its rows to ``folder`` by ``write_part``
    (:func:`.derived._write_part`), through ``start`` (:func:`.launch.start`; both handed
    in: launch imports the derived pipeline, which imports this module)."""
    from wavesql import storage

    from . import realtime

    if realtime.parse_trigger(trigger) is not None:
        raise WaveSQLError("NOT_IMPLEMENTED", f"`{planned.part.name}` runs as a stream part "
                           "with micro-batches only: real-time mode writes no punctuation",
                           Span.of(planned.stmt.node),
                           hint="use an availableNow or 'every ...' trigger")

    def wrap(cls):
        return type(f"StreamPart{cls.__name__}", (StreamPartRows, cls),
                    {"columns": planned.kept, "derived_name": planned.part.name,
                     "write_part": staticmethod(write_part)})

    return start(session, planned.part.inner, folder, home, trigger=trigger,
                 late=storage.join(home, "late"), max_files_per_trigger=max_files,
                 clock=clock, wrap_runner=wrap)
