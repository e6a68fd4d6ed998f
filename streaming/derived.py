"""Continuous queries over a signal query's rows: the signal part and the rest, run as two.

``WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096])
SELECT _time, max(rms) AS peak FROM f [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time``
does not fit one runner: the CTE is a signal query (:mod:`.signals`: every window's row is
final when the window is) and the rest is a stream query (windows, OVER windows, ASOF
joins: :mod:`.stateful`). So the query is split where the CTE ends (:func:`find_split`),
and each part runs on the runner it fits, both under one handle (:class:`DerivedPipeline`):

- **the signal part** -- the CTE's own text -- runs as a continuous signal query
  (:class:`DerivedSignalQuery`) into an internal sink, ``<checkpoint>/derived/<cte>/rows``,
  each micro-batch one folder committed whole as every WaveSQL sink is
  (:func:`.sinks.commit`); its own checkpoint is ``<checkpoint>/derived/<cte>``. Each
  folder holds the batch's rows and one **punctuation row** carrying the batch's
  ``_progress`` (every other column NULL): so the rest learns that its input is final up to
  there even when the batch emitted no row (a WHERE dropped them all), and its windows close
  without waiting for a later row.
- **the rest** -- the statement with the CTE's text blanked (positions of errors kept; the
  CTE found on the statement's tokens, so comments and literals cannot mislead it) --
  reads that folder as a catalog stream named like the CTE (:func:`derived_stream`):
  Parquet, ``EVENT TIME`` the CTE's ``start_time(...)`` column, ``WATERMARK 0`` (a signal
  query emits its windows in order, each once), ``PROGRESS COLUMN`` the punctuation column.
  Its ``*`` and ``f.*`` over that stream are spelled out as the CTE's own columns
  (:func:`expand_stars`): the punctuation column is not the user's. It is started by
  :func:`.launch.start` like any stream query, so it runs on the runner that query would
  get (the state store for windows, OVER windows, ASOF joins), with its own late rules and
  late sink; its checkpoint is the user's. ``EXPLAIN STREAM`` shows both parts
  (:func:`explain`).

The rest is bound and planned before the signal part starts, so its errors come before
anything runs. With ``availableNow`` the signal part runs to its end before the rest starts
(the rest's trigger would otherwise see only the rows present when it started); with
``every ...`` both run at once. Both are restart-safe: each resumes from its own
checkpoint, and a signal batch re-run after a crash that came after its folder was
committed keeps that folder (the same rows: the batch reads the same samples), so the rest
reads each row once -- locally the folder is there, on an object store the sink log's last
record is the batch's (:func:`_committed`); the checkpoint and output may be in a bucket.
Refused (``NOT_IMPLEMENTED``, before anything runs): several signal CTEs, a signal read
outside its CTE beside one, a signal CTE reading another CTE or with a column list
(``f(a, b) AS``), signals from Kafka or defined by a query, and a CTE without a
``start_time(...)`` column (the error names it).
"""

from __future__ import annotations

import dataclasses
import os

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.sqltext import quote

from .report import FINAL, PROGRESS, timestamp_lit
from .signals import SignalContinuousQuery

#: the punctuation column of a derived stream (a row with a value in it is progress)
PUNCT = "__wavesql_progress"


@dataclasses.dataclass(frozen=True)
class Split:
    """A statement cut into its signal CTE (``inner``: the full text with all but the
    CTE's body blanked) and the rest (``outer``: the full text with the CTE blanked)."""

    name: str
    inner: str
    outer: str
    time_column: str
    text: str  # the whole statement: errors in either part are shown in it


def find_split(stmt: Statement, text: str, catalog) -> Split | None:
    """The split of ``stmt`` (``text``: the full text its positions index) when one of its
    CTEs reads a signal and the rest does not; None when no CTE reads a signal."""
    node = stmt.node
    with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
    if with_ is None:
        return None
    names = {c.alias_or_name.lower() for c in with_.expressions}

    def signals_in(tree) -> list[exp.Table]:
        return [t for t in tree.find_all(exp.Table) if not t.args.get("db")
                and t.name.lower() not in names
                and isinstance(catalog.get(t.name), cat.SignalDef)]

    found = [c for c in with_.expressions if signals_in(c.this)]
    if not found:
        return None

    def refuse(what, where, hint):
        return WaveSQLError("NOT_IMPLEMENTED", what, Span.of(where), hint=hint)

    if len(found) > 1:
        raise refuse("a continuous query over several signal CTEs", found[1],
                     "run each signal query continuously on its own, then join their outputs")
    cte = found[0]
    rest = node.copy()
    rest.set("with_", None)
    others = [c for c in with_.expressions if c is not cte]
    if any(signals_in(rest)) or any(t.name.lower() in names for t in cte.this.find_all(
            exp.Table) if not t.args.get("db")):
        raise refuse("a continuous query reading a signal both in and beside a CTE, or a "
                     "signal CTE reading another CTE", cte,
                     "read the signal in one CTE only, straight from the signal")
    if cte.args["alias"].columns:
        raise refuse("a signal CTE with a column list", cte.args["alias"],
                     f"name the columns in the CTE's SELECT instead: SELECT start_time(ch1) "
                     f"AS t, ... (no `{cte.alias_or_name}(...)` list)")
    time_column = _time_column(cte)
    extent = _cte_extent(text, cte)
    # the body alone, at its place; newlines kept so that line/column positions stay right
    inner = _blank(text[:extent.closed], 0, extent.opened + 1)
    if extent.after is not None:  # blank "f AS (...)," -- the comma after it too
        outer = _blank(text, extent.first, extent.after + 1)
    elif others:  # the last of several: blank the comma before it
        outer = _blank(text, extent.before, extent.closed + 1)
    else:  # the only CTE: blank WITH [RECURSIVE] too
        outer = _blank(text, extent.with_at, extent.closed + 1)
    return Split(cte.alias_or_name, inner, outer, time_column, text)


def _time_column(cte: exp.CTE) -> str:
    """The CTE's column holding ``start_time(...)``, the event time of its rows."""
    for projection in cte.this.selects if isinstance(cte.this, exp.Select) else []:
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(value, exp.Anonymous) and str(value.this).lower() == "start_time":
            return projection.alias_or_name
    raise WaveSQLError(
        "STREAMING_RULE", f"a continuous query over the rows of `{cte.alias_or_name}` needs "
        "their event time: the CTE has no start_time(...) column", Span.of(cte),
        hint=f"name the window's start in `{cte.alias_or_name}`, e.g. SELECT start_time(ch1) "
             "AS t, ...; its rows are then windowed and joined by t")


@dataclasses.dataclass(frozen=True)
class _Extent:
    """Where a CTE lies in the statement's text (offsets), from the tokens: so that a
    comment or a string literal saying ``WITH``, ``(`` or ``,`` cannot mislead the split."""

    with_at: int  # the WITH keyword
    before: int  # the token before the CTE's name: WITH/RECURSIVE or the comma
    first: int  # the CTE's name
    opened: int  # its body's "("
    closed: int  # the body's ")"
    after: int | None  # the comma after it, or None (the last CTE)


def _cte_extent(text: str, cte: exp.CTE) -> _Extent:
    """The extent of ``cte`` in ``text`` (the full text its positions index)."""
    from wavesql.dialect.dialect import WaveSQL

    first = Span.of(cte.args["alias"]).start
    tokens = WaveSQL().tokenizer().tokenize(text)  # (comments are not tokens)
    i = next(k for k, t in enumerate(tokens) if t.start >= first)
    with_at = next(t.start for t in reversed(tokens[:i]) if t.token_type == TokenType.WITH)
    before = tokens[i - 1].start
    while tokens[i].token_type != TokenType.ALIAS:  # (a column list's "(" is not the body's)
        i += 1
    while tokens[i].token_type != TokenType.L_PAREN:  # (AS [NOT] MATERIALIZED)
        i += 1
    opened, depth = tokens[i].start, 0
    for k in range(i, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[k].token_type, 0)
        if depth == 0:
            nxt = tokens[k + 1] if k + 1 < len(tokens) else None
            comma = nxt.start if nxt is not None and nxt.token_type == TokenType.COMMA \
                else None
            return _Extent(with_at, before, first, opened, tokens[k].start, comma)
    raise WaveSQLError("PARSE_ERROR", "unbalanced parentheses", Span.of(cte))


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + "".join(c if c == "\n" else " " for c in text[a:b]) + text[b:]


def derived_stream(name: str, schema: ir.Schema, rows: str, time_column: str) -> cat.StreamDef:
    """The catalog stream the rest of the query reads the signal part's rows as."""
    fields = [f for f in schema.fields if f.name not in (FINAL, PROGRESS)]
    columns = [cat.Column(f.name, f.type) for f in fields] + [cat.Column(PUNCT, "timestamp")]
    # recursiveFileLookup: the batch=N folders are read as folders, not as a partition
    # column -- which Spark would discover only once the first one exists, changing the
    # schema of a query started before it (an "every ..." trigger)
    return cat.StreamDef(name, columns, rows, "parquet", event_time=time_column,
                         watermark_us=0, progress_column=PUNCT,
                         options=(("recursiveFileLookup", "true"),))


def expand_stars(text: str, name: str, columns: list[str]) -> str:
    """``text`` (the rest of the query) with each ``*`` and ``f.*`` over the derived stream
    ``name`` spelled out as the CTE's own ``columns``: the punctuation column is the
    stream's, not the user's. The text is rewritten, not only the AST (a plain query is
    handed to Spark as its text); each spelled-out list takes the place of blanks before it
    (the CTE's, usually: whitespace between tokens), so that what follows a star keeps its
    offset and errors there still point at the right place."""
    from wavesql.dialect.dialect import WaveSQL

    while True:
        (stmt,) = parse_statements(text)
        found = _stars(stmt.node, name, columns)
        if not found:
            return text
        tokens = WaveSQL().tokenizer().tokenize(text)
        star, replacement = max(found, key=lambda f: f[0].meta["start"])
        k = next(i for i, t in enumerate(tokens) if t.start == star.meta["start"])
        if k >= 2 and tokens[k - 1].token_type == TokenType.DOT:  # x.*: from the x
            k -= 2
        a, b = tokens[k].start, star.meta["end"] + 1
        cut = _spaces_before(text, tokens[:k], a, len(replacement) - (b - a))
        text = text[:a] + replacement + text[b:]
        if cut is not None:
            text = text[:cut[0]] + text[cut[1]:]


def _spaces_before(text: str, tokens, limit: int, n: int) -> tuple[int, int] | None:
    """A span of ``n`` spaces before ``limit``, between ``tokens`` (those before it; the
    last such span, keeping a space there): they can go without changing what the text
    says (a comment's spaces may go too, a literal's never: it is a token). None if none."""
    if n <= 0:
        return None
    ends = [-1] + [t.end for t in tokens]
    starts = [t.start for t in tokens] + [limit]
    for end, start in reversed(list(zip(ends, starts))):
        at = text.rfind(" " * (n + 1), end + 1, start)
        if at >= 0:
            return at + 1, at + 1 + n
    return None


def _stars(node: exp.Expression, name: str, columns: list[str]) -> list:
    """(star node, its spelled-out text) of each ``*`` / ``x.*`` over ``name`` in ``node``."""
    found = []
    for select in node.find_all(exp.Select):
        sources = [select.args["from_"].this] if select.args.get("from_") else []
        sources += [j.this for j in select.args.get("joins") or []]
        ours = [t for t in sources if isinstance(t, exp.Table) and not t.args.get("db")
                and t.name.lower() == name.lower()]
        if not ours:
            continue

        def spelled(alias=None):
            prefix = quote(alias) + "." if alias else ""
            return ", ".join(prefix + quote(c) for c in columns)

        aliases = {t.alias_or_name.lower() for t in ours}
        for e in select.expressions:
            if isinstance(e, exp.Star) and len(sources) == 1:
                found.append((e, spelled()))
            elif isinstance(e, exp.Star) and all(s.alias_or_name for s in sources):
                # each input's columns, as a join's star gives them, ours spelled out
                found.append((e, ", ".join(
                    spelled(s.alias_or_name) if s in ours else quote(s.alias_or_name) + ".*"
                    for s in sources)))
            elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star) \
                    and e.table.lower() in aliases:
                found.append((e.this, spelled(e.table)))
    return found


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

    def __init__(self, *args, columns: tuple[ir.Field, ...], **kwargs):
        self.columns = columns  # before the query starts (super().__init__ starts it)
        super().__init__(*args, **kwargs)

    def _deliver_final(self, out, batch_id: int, progress: int | None) -> None:
        from pyspark.sql import functions as F

        from . import sinks

        if _committed(self.output, batch_id):
            # committed whole by an earlier attempt killed before Spark's commit: the same
            # rows (the batch reads the same samples), which new file names would make the
            # rest read twice (as late rows) -- keep the first
            return
        names = [f.name for f in self.columns]
        rows = out.select(*[F.col(f"`{n}`") for n in names]) \
            .withColumn(PUNCT, F.lit(None).cast("timestamp"))
        if progress is not None:
            punct = self.spark.range(1).select(
                *[F.lit(None).cast(f.type).alias(f.name) for f in self.columns],
                timestamp_lit(progress).alias(PUNCT))
            rows = rows.unionByName(punct)
        # one file per batch: the rest's max_files_per_trigger then counts whole batches, so
        # a batch's punctuation never reaches the rest before its rows (which would be late)
        sinks.commit(rows.coalesce(1), self.output, batch_id, "parquet")


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
    """The signal part and the rest of a query, started and stopped together; the public
    API of a continuous query (``await_termination``, ``stop``, ``status``, ``metrics``,
    ``reports``, ``progress_us``) is the rest's, whose rows are the query's."""

    def __init__(self, inner: DerivedSignalQuery, start_outer, trigger: str):
        self.inner = inner
        self.available_now = trigger == "availableNow"
        self.outer = None
        if self.available_now:
            self.inner.await_termination()  # the rest reads what the signal part wrote
        self.outer = start_outer()

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
    def error(self) -> BaseException | None:
        """What stopped either part (the signal part's first), as a query's ``error``."""
        return self.inner.error or (self.outer.error if self.outer is not None else None)

    @property
    def is_active(self) -> bool:
        return self.inner.is_active or self.outer.is_active

    @property
    def busy(self) -> bool:
        return self.inner.busy or self.outer.busy

    def status(self) -> dict:
        figures = self.outer.status()
        figures["derived"] = {"progress_us": self.inner.progress_us,
                              "samples_in": self.inner.metrics.get("samples_in")}
        return figures

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the rest (availableNow: the signal part has ended already); with both
        running, until either stops; re-raises the error that stopped either."""
        try:
            if timeout is None and not self.available_now:
                while self.inner.is_active and self.outer.is_active:
                    self.outer.await_termination(1.0)
                if not self.inner.is_active and self.outer.is_active:
                    self.outer.stop()  # the signal part stopped or failed: nothing more comes
            done = self.outer.await_termination(timeout)
        finally:  # one part stopped (or failed): the other does not run on alone
            if not self.outer.is_active and self.inner.is_active:
                self.inner.stop()
            elif not self.inner.is_active and self.outer.is_active and self.inner.error:
                self.outer.stop()
        self.inner.await_termination(0.01)  # its error, if it failed
        return done

    def stop(self, wait: float = 60.0) -> None:
        """Stop the signal part, then the rest (each after its micro-batch in progress)."""
        self.inner.stop(wait)
        if self.outer is not None:
            self.outer.stop(wait)


def _plan_signal_part(catalog, env, split: Split):
    """(statement, bound, plan, kept columns) of ``split``'s signal part, or its error."""
    from wavesql import planner

    from .planning import plan_continuous

    try:
        (stmt,) = parse_statements(split.inner)
        bound = planner.optimize(planner.bind(stmt, catalog, env.for_text(split.inner)))
        plan = plan_continuous(bound.relation, stmt)
    except WaveSQLError as err:  # (same positions: the other part is only blanked)
        raise err.with_query(split.text) from None
    if plan.mode != "signal" or plan.signal.scan.signal.source in ("kafka", "query"):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous query over the rows of a signal "
                           "query reads a signal of WAV or table files", Span.of(stmt.node),
                           hint="run the signal query continuously on its own (INSERT INTO "
                                "a sink) and query the sink's stream").with_query(split.text)
    kept = tuple(f for f in bound.relation.schema.fields if f.name not in (FINAL, PROGRESS))
    return stmt, bound, plan, kept


def start_pipeline(session, split: Split, start_outer, *, checkpoint: str, trigger: str,
                   max_files: int | None, clock) -> DerivedPipeline:
    """Start ``split``'s signal part under ``<checkpoint>/derived/<name>`` and, through
    ``start_outer(session, text)`` (:func:`.launch.start` with the user's output and
    checkpoint; ``text``: the rest, its stars spelled out: :func:`expand_stars`), the rest
    over its rows."""
    from .planning import plan_continuous

    _, bound, plan, kept = _plan_signal_part(session.catalog, session.env, split)
    home = storage.join(checkpoint, "derived", split.name.lower())
    rows = storage.join(home, "rows")
    stream = derived_stream(split.name, ir.Schema(kept), rows, split.time_column)
    overlay = _Session(session, WithDerived(session.catalog, {split.name: stream}))
    outer = expand_stars(split.outer, split.name, [f.name for f in kept])
    try:  # the rest is checked before the signal part runs: refused before anything runs
        stmt, rest = _bind_rest(overlay.catalog, session.env, outer)
        if isinstance(rest, ir.QueryStatement):
            plan_continuous(rest.relation, stmt)
    except WaveSQLError as err:
        raise err.with_query(split.text) from None
    _make_folder(rows)  # Spark's file source needs the folder at start
    inner = DerivedSignalQuery(session, split.inner, plan.signal.bound, plan, columns=kept,
                               emit_changes=False, output=rows, checkpoint=home,
                               late=storage.join(home, "late"), trigger=trigger,
                               max_files=max_files, clock=clock)

    def rest():
        try:
            return start_outer(overlay, outer)
        except WaveSQLError as err:
            inner.stop()
            raise err.with_query(split.text) from None
        except BaseException:  # (Spark's own errors too: the signal part must not run on)
            inner.stop()
            raise

    return DerivedPipeline(inner, rest, trigger)


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


def explain(spark, catalog, split: Split, explain_plan) -> str:
    """``EXPLAIN STREAM`` of a query over a signal CTE: both parts, each as
    ``explain_plan(spark, statement, bound)`` (:func:`.planning.explain_plan`) puts it."""
    from wavesql.planner.spark_environment import SparkEnvironment

    env = SparkEnvironment(spark)
    stmt, bound, _, kept = _plan_signal_part(catalog, env, split)
    rows = f"<checkpoint>/derived/{split.name.lower()}/rows"
    stream = derived_stream(split.name, ir.Schema(kept), rows, split.time_column)
    try:
        rest_stmt, rest = _bind_rest(WithDerived(catalog, {split.name: stream}), env,
                                     expand_stars(split.outer, split.name,
                                                  [f.name for f in kept]))
        rest_text = explain_plan(spark, rest_stmt, rest)
        inner_text = explain_plan(spark, stmt, bound)
    except WaveSQLError as err:
        raise err.with_query(split.text) from None

    def indented(text):
        return "\n".join("  " + line for line in text.splitlines())

    return "\n".join([
        f"two parts under one handle (a query over the rows of signal CTE `{split.name}`)",
        f"signal part `{split.name}`: rows and one punctuation row per batch to {rows}, "
        f"event time {split.time_column}",
        indented(inner_text),
        f"rest: over `{split.name}`'s rows as a stream (columns "
        f"{', '.join(f.name for f in kept)}; watermark 0, progress from the punctuation)",
        indented(rest_text)])
