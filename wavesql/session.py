"""The Python API: ``wavesql.connect()`` and :class:`Session`.

A session owns a catalog (an SQLite file, or Spark's Hive metastore) and a SparkSession, and
runs WaveSQL text through the planner: ``parse -> bind -> rewrite -> lower``, binding against
Spark itself (``planner.spark_environment``: which tables and functions exist, and the schema
of a Spark SQL fragment -- analysis only, no job).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from wavesql.catalog import HIVE_CONFIG, Catalog, SparkCatalog, shared_database
from wavesql.catalog.session_views import WithTempViews
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import WaveSQLError

from wavesql import planner, storage
from wavesql.planner import ir
from wavesql.planner.lower import Runtime, explain_text
from wavesql.planner.spark_environment import SparkEnvironment
from wavesql.spark import start_spark


@dataclass
class Result:
    """One executed statement: its text, its bound IR and its result DataFrame."""

    statement: Statement
    ir: ir.Statement
    dataframe: object
    #: For ``INSERT INTO`` a sink: the job's figures (``wavesql.jobs.InsertReport``).
    report: object = None

    @property
    def kind(self) -> str:
        return self.ir.kind


def connect(master: str | None = None, catalog: str | os.PathLike | None = None, *,
            spark=None, config: dict[str, str] | None = None) -> "Session":
    """Open a WaveSQL session.

    Parameters
    ----------
    master : str, optional
        Spark master URL (``local[*]`` by default, or ``$WAVESQL_MASTER``); any master works,
        e.g. ``spark://host:7077``.
    catalog : path or str, optional
        The catalog's SQLite file; ``./wavesql_catalog.db`` by default (or ``$WAVESQL_CATALOG``).
        ``"spark"`` (or ``"spark:<database>"``) keeps it in Spark's Hive metastore instead,
        shared by every host that uses that metastore (catalog/spark_catalog.py): Spark is
        started Hive-enabled, and ``config`` (or a hive-site.xml) must name the metastore,
        e.g. ``{"spark.hadoop.hive.metastore.uris": "thrift://host:9083"}``.
    spark : SparkSession, optional
        Use an existing session instead of starting one (``master``/``config`` are ignored).
    config : dict, optional
        Spark settings overriding WaveSQL's local defaults.

    Examples
    --------
    >>> import wavesql                                      # doctest: +SKIP
    >>> ws = wavesql.connect()                              # doctest: +SKIP
    >>> ws.sql("SELECT 1 AS one").collect()                 # doctest: +SKIP
    [Row(one=1)]
    """
    if catalog is None:
        catalog = os.environ.get("WAVESQL_CATALOG", "wavesql_catalog.db")
    database = shared_database(catalog)
    if database is None:
        cat = Catalog(catalog)
        if spark is None:
            spark = start_spark(master, config)
        return Session(spark, cat)
    # The shared catalog (catalog/spark_catalog.py): Spark's Hive metastore.
    if spark is None:
        spark = start_spark(master, {**HIVE_CONFIG, **(config or {})})
    return Session(spark, SparkCatalog(spark, database))


class Session:
    """A connection: catalog + Spark. Create with :func:`connect`."""

    def __init__(self, spark, catalog: "Catalog | SparkCatalog"):
        self.spark = spark
        #: the catalog with this session's temporary views over it (catalog/session_views.py)
        self.catalog = WithTempViews(catalog)
        #: what the binder asks Spark (planner/spark_environment.py)
        self.env = SparkEnvironment(spark)
        #: Keyword arguments for ``INSERT INTO`` jobs (``wavesql.jobs.run_insert``), e.g.
        #: ``{"max_files_per_trigger": 1}``; ``wavesql run`` sets them from its options.
        self.job_options: dict = {}
        #: let a query file's relative paths lead out of its folder and of the folder it
        #: is run from (``..``; ``wavesql run --allow-parent-paths``)
        self.allow_parent_paths = False

    # -- public API ---------------------------------------------------------------------
    def sql(self, text: str, *, base_dir: str | os.PathLike = "."):
        """Run WaveSQL text (one or more statements) and return the last result's DataFrame.

        Raises
        ------
        WaveSQLError
            For any problem in the text, before Spark runs a job.
        """
        results = self.execute(text, base_dir=base_dir)
        if not results:
            raise WaveSQLError("EMPTY_QUERY", "no statement to run", hint="the text is empty "
                               "or only comments")
        return results[-1].dataframe

    def execute(self, text: str, *, source: str | None = None,
                base_dir: str | os.PathLike = ".") -> list[Result]:
        """Run every statement in ``text`` in order; returns one :class:`Result` each."""
        try:
            statements = parse_statements(text, lenient=True)
            results = []
            for stmt in statements:
                results.append(self._run(stmt, text, str(base_dir), source))
            return results
        except WaveSQLError as err:
            if err.query is None or source:
                raise err.with_query(err.query or text, source=source) from None
            raise

    def execute_file(self, path: str | os.PathLike) -> list[Result]:
        """Run a ``.wsql`` file; relative paths inside it resolve against its folder."""
        p = Path(path)
        if not p.is_file():
            raise WaveSQLError("FILE_NOT_FOUND", f"query file `{path}` does not exist",
                               hint="check the path (relative to the current directory)")
        return self.execute(p.read_text(), source=str(path), base_dir=p.resolve().parent)

    def bind(self, text: str, base_dir: str = ".") -> list[ir.Statement]:
        """Parse, bind and rewrite ``text`` without running it (``wavesql check``).

        DDL in the text is applied to a scratch copy of the catalog, so a file that creates a
        stream and then queries it checks cleanly while the real catalog stays untouched.
        """
        scratch = WithTempViews(Catalog(":memory:"))
        for defn in self.catalog.list():
            scratch.create(defn)
        scratch.temp_views.update(self.catalog.temp_views)
        out = []
        try:
            for stmt in parse_statements(text, lenient=True):
                out.append(self.bind_into(stmt, text, scratch, base_dir))
        finally:
            scratch.close()
        return out

    def path_roots(self, source: str | None, base_dir: str) -> tuple[str, ...]:
        """The folders a query file's relative paths may not lead out of: its own and the
        one it is run from; none for statements typed or passed as text (``source`` None),
        or when :attr:`allow_parent_paths` is set."""
        if source is None or self.allow_parent_paths:
            return ()
        return (os.path.abspath(base_dir), os.getcwd())

    def bind_into(self, stmt: Statement, text: str, scratch, base_dir: str = ".",
                  source: str | None = None) -> ir.Statement:
        """Bind one statement against the catalog ``scratch`` and apply its DDL there, so
        that later statements of the same text see what it creates or drops."""
        self._use_storage_settings()
        bound = planner.optimize(planner.bind(stmt, scratch, self.env.for_text(text), base_dir,
                                              self.path_roots(source, base_dir)))
        if isinstance(bound, ir.CreateObject):
            scratch.create(bound.definition, replace=bound.replace,
                           if_not_exists=bound.if_not_exists)
        elif isinstance(bound, ir.DropObject):
            scratch.drop(bound.name, bound.object_kind, if_exists=bound.if_exists)
        elif isinstance(bound, ir.TempView) and hasattr(scratch, "temp_views"):
            if bound.definition is None:
                scratch.temp_views.pop(bound.name.lower(), None)
            else:
                scratch.temp_views[bound.name.lower()] = bound.definition
        return bound

    def explain(self, text: str, mode: str = "IR") -> str:
        """``EXPLAIN <mode>`` of one statement, as text (modes: AST, IR, SPARK, ...)."""
        stmts = parse_statements(text)
        if len(stmts) != 1:
            raise WaveSQLError("PARSE_ERROR", f"explain() takes one statement, got {len(stmts)}")
        stmt = stmts[0]
        self._use_storage_settings()
        if mode.upper() == "AST":
            return repr(stmt.node)
        from wavesql.planner.bind import without_emit  # (EXPLAIN STREAM reads EMIT itself)

        if mode.upper() == "STREAM":
            try:
                analyzed = planner.bind(without_emit(stmt), self.catalog,
                                        self.env.for_text(text))
            except WaveSQLError as err:  # it may run in parts (ir.Explain.unbound)
                explain = ir.Explain("STREAM", stmt.text, None, unbound=err)
                return explain_text(explain, self._runtime(text), stmt.start)
        else:
            analyzed = planner.bind(stmt, self.catalog, self.env.for_text(text))
        explain = ir.Explain(mode.upper(), stmt.text, planner.optimize(analyzed), analyzed)
        return explain_text(explain, self._runtime(text), stmt.start)

    def stream(self, text: str, output, checkpoint: str | os.PathLike, *,
               trigger: str = "availableNow", late: str | os.PathLike | None = None,
               max_files_per_trigger: int | None = None, clock=None,
               output_format: str = "parquet"):
        """Start ``text`` as a continuous query over the streams' directories (or, for a
        query over a SIGNAL, over its directory of arriving WAV files or table files:
        streaming/signals.py).

        Parameters
        ----------
        output : path or callable
            A directory (one Parquet folder per micro-batch plus ``_progress/`` records), or
            ``f(dataframe, batch_id)``.
        checkpoint : path
            Where the query keeps its offsets and state; restarting with the same
            checkpoint continues exactly where it stopped.
        trigger : str
            ``"availableNow"`` (process what is there, then stop) or ``"every 10 seconds"``.
        late : path, optional
            Late-row sink (``LATE INTO`` in the query also sets it); default
            ``<checkpoint>/late``.
        output_format : str
            ``parquet`` (default), ``csv`` (with a header line) or ``json``: the format of
            each micro-batch's folder under ``output``.

        Returns
        -------
        wavesql.streaming.ContinuousQuery
        """
        import time

        from wavesql.streaming import start

        self._use_storage_settings()
        return start(self, text, output, checkpoint, trigger=trigger, late=late,
                     max_files_per_trigger=max_files_per_trigger, clock=clock or time.time,
                     output_format=output_format)

    def close(self) -> None:
        """Close the catalog (the SparkSession is left to its owner)."""
        self.catalog.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- planner plumbing ---------------------------------------------------------------
    def _runtime(self, text: str) -> Runtime:
        from wavesql.streaming.planning import explain_stream

        return Runtime(self.spark, self.catalog, text, explain_stream=explain_stream)

    def _use_storage_settings(self) -> None:
        """Reach object stores with the Spark session's Hadoop settings as they are now (a
        user may set ``fs.s3a.*`` between statements): WaveSQL's own I/O (wavesql.storage)
        and Spark's connectors are configured once, in one place."""
        storage.use(storage.Settings.from_spark(self.spark))

    def _run(self, stmt: Statement, text: str, base_dir: str,
             source: str | None = None) -> Result:
        self._use_storage_settings()
        if stmt.error is not None:
            _refuse_stream_prefix(stmt)
        bound = planner.bind(stmt, self.catalog, self.env.for_text(text), base_dir,
                             self.path_roots(source, base_dir))
        bound = planner.optimize(bound)
        from wavesql.planner.insert import InsertInto

        if isinstance(bound, InsertInto):  # a job: incremental and exactly once (wavesql.jobs)
            from wavesql.jobs import run_insert
            from wavesql.sqltext import status_frame

            report = run_insert(self, bound, text, source, base_dir, **self.job_options)
            status = status_frame(self.spark, report.summary())
            return Result(stmt, bound, status, report)
        df = planner.lower(bound, self._runtime(text), stmt.start)
        if isinstance(bound, (ir.CreateObject, ir.DropObject)) or (
                isinstance(bound, ir.SparkCommand)):
            self.env.forget_functions()  # CREATE FUNCTION and friends change what exists
        return Result(stmt, bound, df)


def _refuse_stream_prefix(stmt: Statement) -> None:
    """``STREAM ...`` (the REPL's statement, and query files' real-time one) run here:
    ``UNSUPPORTED_STATEMENT`` saying where it runs, rather than Spark's syntax error."""
    from wavesql.dialect.stream_prefix import stream_prefix

    prefix = stream_prefix(stmt.text)
    if prefix is None:
        return
    span = prefix.span
    raise WaveSQLError(
        "UNSUPPORTED_STATEMENT", f"`{prefix.spelling}` runs in the REPL"
        + (" and in query files run by `wavesql run`" if prefix.real_time else ""),
        span.__class__(stmt.start + span.start, stmt.start + span.end),
        hint="from Python: ws.stream(query, output, checkpoint"
             + (", trigger='real-time')" if prefix.real_time else ")"))
