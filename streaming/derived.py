"""Continuous queries over signal queries' rows: the signal parts and the rest, run together.

``WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096])
SELECT _time, max(rms) AS peak FROM f [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time``
does not fit one runner: the CTE is a signal query (:mod:`.signals`: every window's row is
final when the window is) and the rest is a stream query (windows, OVER windows, ASOF
joins: :mod:`.stateful`). So the query is cut into its signal CTEs and the rest
(:mod:`.derived_split`: on the statement's tokens, every offset kept), and each part runs
on the runner it fits, all under one handle (:class:`DerivedPipeline`):

- **each signal part** -- a signal CTE's own text -- runs as a continuous signal query
  (:class:`DerivedSignalQuery`) into an internal sink, ``<checkpoint>/derived/<cte>/rows``,
  each micro-batch one folder committed whole as every WaveSQL sink is
  (:func:`.sinks.commit`); its own checkpoint is ``<checkpoint>/derived/<cte>``. Each
  folder holds the batch's rows and one **punctuation row** carrying the batch's
  ``_progress`` (every other column NULL): so the rest learns that its input is final up to
  there even when the batch emitted no row (a WHERE dropped them all), and its windows close
  without waiting for a later row.
- **a SYNC part** -- a CTE with a SYNC JOIN over a catalog stream whose EVENT TIME
  column it passes through (``WITH s AS (SELECT c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c
  SYNC JOIN mic m ON RANGE (c.t0, c.t1))``) -- runs as a continuous SYNC on the
  re-evaluating runner (:class:`DerivedSyncQuery`) into its rows folder the same way. Its
  rows come in no time order (a row waits for the recording while later ones are
  synced), so its punctuation is the SYNC's ``_progress``, held back to the earliest
  control row still waiting (runner.py), and the rest's stream of it takes its progress
  from the punctuation alone (:data:`SYNC_WATERMARK_US`). A SYNC CTE that does not pass
  the event time through, or beside a signal read in the rest, is planned whole
  (streaming/sync.py refuses windows around it, naming the column). Its batch re-run
  after a crash keeps the folder committed, as below, and adds to it the rows the re-run
  released beyond it (its split judges the signal's files anew: a file completed in
  between releases rows the first attempt kept waiting; :func:`_add_released`).
- **a stream part** -- a CTE computing across a catalog stream's rows (CQL windows,
  aggregates, OVER windows, RESAMPLE) that the rest joins (ASOF, interval) or RESAMPLEs,
  which it could not follow whole -- runs as its own continuous stream query into its
  rows folder the same way, its punctuation the batch's ``_progress``; the rest's stream
  of it has ``WATERMARK 0`` (:mod:`.stream_parts` says why, and what is refused).
- **the rest** -- the statement with the signal CTEs blanked -- reads each folder as a
  catalog stream named like its CTE (:func:`derived_stream`): Parquet, ``EVENT TIME`` the
  CTE's ``start_time(...)`` column, ``WATERMARK 0`` (a signal query emits its windows in
  order, each once), ``PROGRESS COLUMN`` the punctuation column. Its ``*`` and ``f.*``
  over such a stream are spelled out as the CTE's own columns
  (:func:`.derived_split.expand_stars`): the punctuation column is not the user's. It is
  started by :func:`.launch.start` like any stream query, so it runs on the runner that
  query would get (the state store for windows, OVER windows, ASOF joins -- of two signal
  CTEs too), with its own late rules and late sink; its checkpoint is the user's.
  ``EXPLAIN STREAM`` shows every part (:func:`explain`).

The rest is bound and planned before any signal part starts, so its errors come before
anything runs; so does every part's checkpoint marker check and the rest's
(:func:`_check_markers`: a part must not run a batch under a query the rest refuses).
With ``availableNow`` the signal parts run to their end before the rest starts (the
rest's trigger would otherwise see only the rows present when it started);
with ``every ...`` all run at once, and when one stops the others are stopped. All are
restart-safe: each resumes from its own checkpoint, and a signal batch re-run after a
crash that came after its folder was committed keeps that folder (the same rows: the batch
reads the same samples), so the rest reads each row once -- locally the folder is there, on
an object store the sink log's last record is the batch's (:func:`_committed`); the
checkpoint and output may be in a bucket. Refused (``NOT_IMPLEMENTED``, before anything
runs): a signal read outside the CTEs beside one, a signal CTE reading another CTE or with
a column list (``f(a, b) AS``), signals from Kafka or defined by a query, and a CTE without
a ``start_time(...)`` column (the error names it).
"""

from __future__ import annotations

import dataclasses
import os

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir

from . import derived_chain, stream_parts
from .derived_chain import home_name  # noqa: F401 (API)
from .derived_split import Part, Split, described, expand_stars, find_split  # noqa: F401 (API)
from .plan import _volatile, carries_state
from .report import FINAL, PROGRESS, timestamp_lit
from .runner import ReEvaluatingQuery
from .signals import SignalContinuousQuery

#: the punctuation column of a derived stream (a row with a value in it is progress)
PUNCT = "__wavesql_progress"

#: A SYNC part's rows come in no time order (a row waits for the recording while later
#: ones are synced), so its stream's progress is its punctuation alone: a watermark no row
#: can be late by (100 years) makes the rows promise nothing themselves.
SYNC_WATERMARK_US = 100 * 365 * 86_400 * 1_000_000


def derived_stream(name: str, schema: ir.Schema, rows: str, time_column: str,
                   sync: bool = False) -> cat.StreamDef:
    """The catalog stream the rest of the query reads the signal part's rows as (``sync``:
    a SYNC part's, progress from its punctuation only)."""
    fields = [f for f in schema.fields if f.name not in (FINAL, PROGRESS)]
    columns = [cat.Column(f.name, f.type) for f in fields] + [cat.Column(PUNCT, "timestamp")]
    # recursiveFileLookup: the batch=N folders are read as folders, not as a partition
    # column -- which Spark would discover only once the first one exists, changing the
    # schema of a query started before it (an "every ..." trigger)
    return cat.StreamDef(name, columns, rows, "parquet", event_time=time_column,
                         watermark_us=SYNC_WATERMARK_US if sync else 0,
                         progress_column=PUNCT,
                         options=(("recursiveFileLookup", "true"),))


class WithDerived:
    """The catalog with the derived streams laid over it (as catalog/session_views.py's
    ``WithTempViews`` lays temporary views): the rest of the query reads the CTE's name as
    the stream of the signal part's rows."""

    def __init__(self, catalog, streams: dict[str, cat.StreamDef]):
        self.catalog = catalog
        self.streams = {k.lower(): v for k, v in streams.items()}

    def __getattr__(self, attr):
        return getattr(self.catalog, attr)

    def get(self, name: str):
        found = self.streams.get(name.lower())
        return found if found is not None else self.catalog.get(name)

    def require(self, name: str, kind=None):
        found = self.streams.get(name.lower())
        if found is not None and (kind is None or cat.normalize_kind(kind) == "STREAM"):
            return found
        return self.catalog.require(name, kind)

    def names(self, kind=None) -> list[str]:
        own = [v.name for v in self.streams.values()] \
            if kind is None or cat.normalize_kind(kind) == "STREAM" else []
        return sorted(set(self.catalog.names(kind)) | set(own))

    def __contains__(self, name: object) -> bool:
        return (isinstance(name, str) and name.lower() in self.streams) \
            or name in self.catalog


class _Session:
    """The session, with the catalog the rest of the query binds against."""

    def __init__(self, session, catalog):
        self._session = session
        self.catalog = catalog

    def __getattr__(self, attr):
        return getattr(self._session, attr)


class DerivedSignalQuery(SignalContinuousQuery):
    """A signal query writing its rows, and one punctuation row per batch, to the internal
    sink the rest of the query reads (module docstring)."""

    def __init__(self, *args, columns: tuple[ir.Field, ...], name: str, **kwargs):
        self.columns = columns  # before the query starts (super().__init__ starts it)
        self.derived_name = name
        super().__init__(*args, **kwargs)

    def _deliver_final(self, out, batch_id: int, progress: int | None) -> None:
        _write_part(self, out, batch_id, progress)


class DerivedSyncQuery(ReEvaluatingQuery):
    """A continuous SYNC (a CTE with a SYNC JOIN) on the re-evaluating runner, writing its
    rows and one punctuation row per batch -- the batch's ``_progress``, held back to the
    control rows still waiting (runner.py ``_sync_progress``), so no later row is below
    it -- to the internal sink the rest of the query reads (module docstring)."""

    def __init__(self, *args, columns: tuple[ir.Field, ...], name: str,
                 in_order: bool = False, **kwargs):
        self.columns = columns
        self.derived_name = name
        # the rest carries a signal function's state along its segments: each control row
        # is synced only once the control's progress passed it, so the rows come in range
        # order as in batch (runner.py, sync.hold_for_keys), not as the recording covers them
        self.in_order = in_order
        super().__init__(*args, **kwargs)

    def _deliver_counted(self, out, batch_id: int, report, by_final: bool) -> None:
        out = out.persist()
        report.rows_out = report.final_out = out.count()
        _write_part(self, out, batch_id, report.progress_us)
        out.unpersist()


def _write_part(query, out, batch_id: int, progress: int | None) -> None:
    """A part's batch ``out`` and its punctuation row (``progress``) committed to its rows
    folder, unless an earlier attempt of the batch committed it."""
    from pyspark.sql import functions as F

    from . import sinks

    names = [f.name for f in query.columns]
    rows = out.select(*[F.col(f"`{n}`") for n in names]) \
        .withColumn(PUNCT, F.lit(None).cast("timestamp"))
    if _committed(query.output, batch_id):
        # committed whole by an earlier attempt killed before Spark's commit. A signal
        # part's re-run has the same rows (the batch reads the same samples), which new
        # file names would make the rest read twice (as late rows): keep the first. A
        # SYNC part's re-run judges the recording's files anew: a file completed since
        # releases control rows the first attempt kept waiting -- the same rows and more,
        # never fewer (a file once there stays). Those more are added beside the first
        # attempt's files with this attempt's punctuation; they are not late for the rest:
        # each waited, so its time is at or above the first attempt's punctuation. (Not
        # with per-key state, whose rows' values depend on the rows before them: such a
        # re-run releases what the first attempt did, from its clock and the files it
        # found complete, kept in the checkpoint -- runner.py _batch_pin. A HEARTBEAT's
        # progress is the first attempt's too -- the same pin; on the state store, ticker
        # rows of the batch's input -- so a re-run makes no more windows final.)
        if isinstance(query, DerivedSyncQuery):
            _add_released(query, rows, batch_id, progress)
        return
    if progress is not None:
        rows = rows.unionByName(_punctuation(query, progress))
    # one file per batch: the rest's max_files_per_trigger then counts whole batches, so
    # a batch's punctuation never reaches the rest before its rows (which would be late)
    sinks.commit(rows.coalesce(1), query.output, batch_id, "parquet")


def _punctuation(query, progress: int):
    """The punctuation row of a part's batch: ``progress``, every other column NULL."""
    from pyspark.sql import functions as F

    return query.spark.range(1).select(
        *[F.lit(None).cast(f.type).alias(f.name) for f in query.columns],
        timestamp_lit(progress).alias(PUNCT))


def _add_released(query, rows, batch_id: int, progress: int | None) -> None:
    """A SYNC part's re-run of a committed batch: its rows the committed folder lacks
    (a multiset difference) and its punctuation, added to the folder in one file."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from . import sinks

    folder = sinks.batch_folder(query.output, batch_id)
    done = query.spark.read.schema(rows.schema).parquet(folder) \
        .where(F.col(PUNCT).isNull())
    # a multiset difference by each row's JSON (exceptAll refuses MAP columns): the n-th
    # copy of a row is new when the first attempt had fewer than n
    names = [f"`{f.name}`" for f in query.columns]
    numbered = Window.partitionBy("__row").orderBy("__row")
    rows, done = [frame.withColumn("__row", F.to_json(F.struct(*names)))
                  .withColumn("__copy", F.row_number().over(numbered)) for frame in (rows, done)]
    extra = rows.join(done.select("__row", "__copy"), ["__row", "__copy"], "left_anti") \
        .drop("__row", "__copy").persist()
    try:
        if extra.isEmpty():
            return
        if progress is not None:
            extra = extra.unionByName(_punctuation(query, progress))
        sinks.add_to_committed(extra.coalesce(1), query.output, batch_id, "rerun")
    finally:
        extra.unpersist()


def _committed(root: str, batch_id: int) -> bool:
    """Whether batch ``batch_id``'s folder under ``root`` was committed (:func:`.sinks.commit`):
    locally the folder is there (renamed into place whole); on an object store the sink
    log's last record is the batch's (a batch commits in order, so a re-run is the last's;
    an attempt killed before its record left files that no reader lists, and the re-run's
    commit deletes them)."""
    from . import sinks

    folder = sinks.batch_folder(root, batch_id)
    if not storage.is_remote(folder):
        return os.path.isdir(folder)
    log = sinks.SinkLog(root)
    latest = log.latest()
    mine = "/" + storage.basename(folder) + "/"
    return latest >= 0 and any(mine in e["path"] for e in log.entries(latest))


def _make_folder(location: str) -> None:
    """Create the rows folder: Spark's file source needs it at start (on an object store,
    a folder marker: an empty object named ``<folder>/``)."""
    if not storage.is_remote(location):
        os.makedirs(location, exist_ok=True)
        return
    fs, path = storage.resolve(location)
    try:
        fs.create_dir(path, recursive=True)
    except Exception as e:  # noqa: BLE001 - storage.translate names what to configure
        raise storage.translate(e, location, "creating it") from None


class DerivedPipeline:
    """The signal parts and the rest of a query, started and stopped together; the public
    API of a continuous query (``await_termination``, ``stop``, ``status``, ``metrics``,
    ``reports``, ``progress_us``) is the rest's, whose rows are the query's."""

    def __init__(self, inners: list[DerivedSignalQuery], start_outer, trigger: str):
        self.inners = inners
        self.available_now = trigger == "availableNow"
        self.outer = None
        if self.available_now:
            try:
                for inner in inners:  # the rest reads what the signal parts wrote
                    inner.await_termination()
            except BaseException:  # one failed: the others must not run on, unowned
                for inner in inners:
                    inner.stop()
                raise
        self.outer = start_outer()

    @property
    def inner(self) -> DerivedSignalQuery:
        """The (first) signal part."""
        return self.inners[0]

    @property
    def reports(self):
        return self.outer.reports

    @property
    def metrics(self) -> dict:
        return self.outer.metrics

    @property
    def progress_us(self):
        return self.outer.progress_us

    @property
    def _inner_error(self) -> BaseException | None:
        return next((q.error for q in self.inners if q.error is not None), None)

    @property
    def error(self) -> BaseException | None:
        """What stopped a part (a signal part's first), as a query's ``error``."""
        return self._inner_error or (self.outer.error if self.outer is not None else None)

    @property
    def is_active(self) -> bool:
        return any(q.is_active for q in self.inners) or self.outer.is_active

    @property
    def busy(self) -> bool:
        return any(q.busy for q in self.inners) or self.outer.busy

    def status(self) -> dict:
        """The rest's figures; ``derived``: each signal part's progress and samples read
        (by CTE name when there are several)."""
        figures = self.outer.status()
        own = {q.derived_name: {"progress_us": q.progress_us,
                                "samples_in": q.metrics.get("samples_in")}
               for q in self.inners}
        figures["derived"] = next(iter(own.values())) if len(own) == 1 else own
        return figures

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the rest (availableNow: the signal parts have ended already); with all
        running, until one stops; re-raises the error that stopped any."""
        try:
            if timeout is None and not self.available_now:
                while all(q.is_active for q in self.inners) and self.outer.is_active:
                    self.outer.await_termination(1.0)
                if self.outer.is_active:
                    self.outer.stop()  # a signal part stopped or failed: its rows end
            done = self.outer.await_termination(timeout)
        finally:  # one part stopped (or failed): the others do not run on alone
            if not self.outer.is_active:
                for q in self.inners:
                    if q.is_active:
                        q.stop()
            elif self._inner_error is not None:
                self.outer.stop()
                for q in self.inners:
                    if q.is_active:
                        q.stop()
        for q in self.inners:
            q.await_termination(0.01)  # its error, if it failed
        return done

    def stop(self, wait: float = 60.0) -> None:
        """Stop the signal parts, then the rest (each after its micro-batch in progress)."""
        for q in self.inners:
            q.stop(wait)
        if self.outer is not None:
            self.outer.stop(wait)


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A signal part planned: its statement, bound query, plan and the columns of its rows."""

    part: Part
    stmt: Statement
    bound: ir.Statement
    plan: object
    kept: tuple[ir.Field, ...]

    def stream(self, rows: str) -> cat.StreamDef:
        return derived_stream(self.part.name, ir.Schema(self.kept), rows,
                              self.part.time_column, sync=self.part.sync)


def _plan_signal_part(catalog, env, part: Part, text: str, plan_continuous) -> _Planned:
    """``part`` planned as a continuous signal query, or its error (shown in ``text``)."""
    from wavesql import planner

    try:
        (stmt,) = parse_statements(part.inner)
        bound = planner.optimize(planner.bind(stmt, catalog, env.for_text(part.inner)))
        plan = plan_continuous(bound.relation, stmt)
        if part.stream:  # a CTE across a stream's rows (streaming/stream_parts.py)
            stream_parts.check_mode(plan, stmt, part.name)
            kept = stream_parts.columns(bound, stmt.node)
            return _Planned(part, stmt, bound, plan, kept)
    except WaveSQLError as err:  # (same positions: the other part is only blanked)
        raise err.with_query(text) from None
    if part.sync and plan.mode == "sync":  # (streaming/sync.py refuses what cannot run)
        volatile = _volatile(stmt.node)
        if volatile is not None:  # (its re-run adds the rows the first lacks: _add_released)
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"a SYNC CTE under windows calls `{volatile}`, which gives "
                "another value each time: a batch re-run after a crash must give the first "
                "attempt's rows again", Span.of(stmt.node),
                hint="compute it in the rest of the query, over the CTE's rows").with_query(text)
    elif plan.mode != "signal" or plan.signal.scan.signal.source in ("kafka", "query"):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous query over the rows of a signal "
                           "query reads a signal of WAV or table files", Span.of(stmt.node),
                           hint="run the signal query continuously on its own (INSERT INTO "
                                "a sink) and query the sink's stream").with_query(text)
    kept = tuple(f for f in bound.relation.schema.fields if f.name not in (FINAL, PROGRESS))
    return _Planned(part, stmt, bound, plan, kept)


def _plan_parts(catalog, env, split: Split, plan_continuous, rows_of) -> list[_Planned]:
    """Each part planned over the rows of the parts it reads (a chain; ``rows_of``: folder)."""
    planned = []
    for part in split.parts:
        over = WithDerived(catalog, {p.part.name: p.stream(rows_of(p.part.name)) for p in
                                     planned if p.part.name.lower() in part.reads}) \
            if part.reads else catalog
        planned.append(_plan_signal_part(over, env, part, split.text, plan_continuous))
    return planned


def _the_rest(split: Split, planned: list[_Planned]) -> str:
    """The rest's text, each signal CTE's stars spelled out (:func:`expand_stars`)."""
    outer = split.outer
    for p in planned:
        outer = expand_stars(outer, p.part.name, [f.name for f in p.kept])
    return outer


def start_pipeline(session, split: Split, start_outer, *, checkpoint: str, trigger: str,
                   max_files: int | None, clock, plan_continuous,
                   start_query=None) -> DerivedPipeline:
    """Start each of ``split``'s signal parts under ``<checkpoint>/derived/<name>`` and,
    through ``start_outer(session, text)`` (:func:`.launch.start` with the user's output and
    checkpoint; ``text``: the rest, its stars spelled out), the rest over their rows.
    ``plan_continuous``: :func:`.planning.plan_continuous`, handed in (planning imports
    this module for ``EXPLAIN STREAM``); ``start_query``: :func:`.launch.start`, which
    starts a stream part (launch imports this module)."""
    planned = _plan_parts(session.catalog, session.env, split, plan_continuous,
                          lambda name: storage.join(checkpoint, "derived", home_name(name),
                                                    "rows"))
    homes = [storage.join(checkpoint, "derived", home_name(p.part.name)) for p in planned]
    rows = [storage.join(home, "rows") for home in homes]
    overlay = _Session(session, WithDerived(session.catalog, {
        p.part.name: p.stream(r) for p, r in zip(planned, rows)}))
    reading = {p.part.name: _Session(session, WithDerived(session.catalog, {  # (a chain)
        n: s for n, s in overlay.catalog.streams.items() if n in p.part.reads}))
        if p.part.reads else session for p in planned}
    outer = _the_rest(split, planned)
    try:  # the rest is checked before the signal parts run: refused before anything runs
        stmt, rest = _bind_rest(overlay.catalog, session.env, outer)
        if isinstance(rest, ir.QueryStatement):
            plan_continuous(rest.relation, stmt)
    except WaveSQLError as err:
        raise err.with_query(split.text) from None
    in_order = carries_state(rest)

    def start_part(p, home, folder):
        if p.part.stream:  # on its own runner, over the rows of the parts it reads
            return stream_parts.start_part(start_query, _write_part, reading[p.part.name], p,
                                           home=home, folder=folder, trigger=trigger,
                                           max_files=max_files, clock=clock)
        cls, bound = (DerivedSyncQuery, p.bound) if p.part.sync \
            else (DerivedSignalQuery, p.plan.signal.bound)
        more = {"in_order": in_order} if p.part.sync else {}
        return cls(session, p.part.inner, bound, p.plan, columns=p.kept, name=p.part.name,
                   emit_changes=False, output=folder, checkpoint=home,
                   late=storage.join(home, "late"), trigger=trigger, max_files=max_files,
                   clock=clock, **more)

    for folder in rows:
        _make_folder(folder)  # Spark's file source needs the folder at start
    _check_markers(checkpoint, split.text, lambda: start_outer(overlay, outer),
                   [(home, lambda p=p, h=home, f=folder: start_part(p, h, f))
                    for p, home, folder in zip(planned, homes, rows)])
    inners = []
    try:
        for p, home, folder in zip(planned, homes, rows):
            derived_chain.await_read(p.part.reads, inners, trigger)
            inners.append(start_part(p, home, folder))
    except BaseException:  # (one did not start: the others must not run on)
        for inner in inners:
            inner.stop()
        raise

    def start_rest():
        try:
            return start_outer(overlay, outer)
        except WaveSQLError as err:
            for inner in inners:
                inner.stop()
            raise err.with_query(split.text) from None
        except BaseException:  # (Spark's own errors too: the signal parts must not run on)
            for inner in inners:
                inner.stop()
            raise

    return DerivedPipeline(inners, start_rest, trigger)


def _check_markers(checkpoint: str, text: str, start_rest, parts) -> None:
    """Every part's checkpoint marker and the rest's checked before any part runs a batch
    (a part run, then the rest refused, would have advanced under a query the user must
    change back): each is started under :func:`.checkpoint_plan.probing`, which stops it
    at its check; the markers are written once all accept. ``parts``: (checkpoint, start)."""
    from . import checkpoint_plan

    with checkpoint_plan.probing() as writes:
        for home, start in [(checkpoint, start_rest)] + list(parts):
            try:
                started = start()
            except checkpoint_plan.Accepted:
                continue
            except WaveSQLError as err:
                if err.code == "CHECKPOINT_MISMATCH" and home != checkpoint:
                    # a part's own folder deleted alone would replay its rows into the rest
                    raise WaveSQLError(err.code, err.message, hint=(
                        f"give the changed query a new checkpoint (and output) folder, or "
                        f"delete the query's whole checkpoint {checkpoint} to start from the "
                        f"beginning of the input (not {home} alone: the rest would read the "
                        f"part's rows again); or run the query as it was")) from None
                raise err.with_query(text) from None
            started.stop()  # (every runner checks its marker before it runs anything)
            raise RuntimeError(f"{type(started).__name__} started without its marker check")
    for write in writes:
        write()


def _bind_rest(catalog, env, text: str) -> tuple[Statement, ir.Statement]:
    """The rest of the query (``text``) parsed and bound as :func:`.launch.start` will
    (raising its error now)."""
    from wavesql import planner
    from wavesql.dialect import nodes as wn
    from wavesql.planner.bind import without_emit

    (stmt,) = parse_statements(text)
    node = stmt.node.copy()
    for clause in list(node.find_all(wn.LateInto)):  # where late rows go: not the plan's
        clause.pop()
    stmt = Statement(node, stmt.text, stmt.start, stmt.end)
    return stmt, planner.optimize(planner.bind(without_emit(stmt), catalog,
                                               env.for_text(text)))


def explain(spark, catalog, split: Split, explain_plan, plan_continuous) -> str:
    """``EXPLAIN STREAM`` of a query over signal CTEs: each part, each as
    ``explain_plan(spark, statement, bound)`` (:func:`.planning.explain_plan`) puts it
    (``plan_continuous``: :func:`.planning.plan_continuous`)."""
    from wavesql.planner.spark_environment import SparkEnvironment

    env = SparkEnvironment(spark)
    planned = _plan_parts(catalog, env, split, plan_continuous,
                          lambda name: f"<checkpoint>/derived/{home_name(name)}/rows")
    rows = {p.part.name: f"<checkpoint>/derived/{home_name(p.part.name)}/rows"
            for p in planned}
    try:
        rest_stmt, rest = _bind_rest(
            WithDerived(catalog, {p.part.name: p.stream(rows[p.part.name]) for p in planned}),
            env, _the_rest(split, planned))
        rest_text = explain_plan(spark, rest_stmt, rest)
        inner_texts = [explain_plan(spark, p.stmt, p.bound) for p in planned]
    except WaveSQLError as err:
        raise err.with_query(split.text) from None

    def indented(text):
        return "\n".join("  " + line for line in text.splitlines())

    lines = [f"{len(planned) + 1} parts under one handle (a query over the rows of "
             f"{described([p.part for p in planned])})"]
    for p, inner_text in zip(planned, inner_texts):
        kind = "SYNC part" if p.part.sync else "stream part" if p.part.stream \
            else "signal part"
        lines += [f"{kind} `{p.part.name}`: rows and one punctuation row per batch to "
                  f"{rows[p.part.name]}, event time {p.part.time_column}", indented(inner_text)]
    over = ", ".join(f"`{p.part.name}`'s rows (columns {', '.join(f.name for f in p.kept)})"
                     for p in planned)
    lines.append(f"rest: over {over} as {'streams' if len(planned) > 1 else 'a stream'} "
                 f"({'progress' if any(p.part.sync for p in planned) else 'watermark 0, progress'}"
                 " from the punctuation)")
    return "\n".join(lines + [indented(rest_text)])
