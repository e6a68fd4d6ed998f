"""The Python API: ``wavesql.connect()`` and :class:`Session`.

A session owns a catalog (SQLite file) and a SparkSession, and runs WaveSQL text through the
planner: ``parse -> bind -> rewrite -> lower``. It also implements the binder's
:class:`~wavesql.planner.Environment` over Spark (which tables and functions exist, and the
schema of a Spark SQL fragment -- analysis only, no job).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from wavesql.catalog import Catalog
from wavesql.catalog.session_views import WithTempViews
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import WaveSQLError

from wavesql import planner, storage
from wavesql.planner import ir
from wavesql.planner.lower import Runtime, explain_text
from wavesql.planner.spark_sql import temp_views
from wavesql.spark import start_spark
from wavesql.spark_errors import translate_spark_error


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
    catalog : path, optional
        The catalog's SQLite file; ``./wavesql_catalog.db`` by default (or ``$WAVESQL_CATALOG``).
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
    cat = Catalog(catalog)
    if spark is None:
        spark = start_spark(master, config)
    return Session(spark, cat)


class Session:
    """A connection: catalog + Spark. Create with :func:`connect`."""

    def __init__(self, spark, catalog: Catalog):
        self.spark = spark
        #: the catalog with this session's temporary views over it (catalog/session_views.py)
        self.catalog = WithTempViews(catalog)
        self._functions: frozenset[str] | None = None
        self._stand_ins: dict = {}  # schema DDL -> empty DataFrame (analysis stand-ins)
        self._user_text = ""
        #: Keyword arguments for ``INSERT INTO`` jobs (``wavesql.jobs.run_insert``), e.g.
        #: ``{"max_files_per_trigger": 1}``; ``wavesql run`` sets them from its options.
        self.job_options: dict = {}

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

    def bind_into(self, stmt: Statement, text: str, scratch, base_dir: str = "."
                  ) -> ir.Statement:
        """Bind one statement against the catalog ``scratch`` and apply its DDL there, so
        that later statements of the same text see what it creates or drops."""
        self._user_text = text
        self._use_storage_settings()
        bound = planner.rewrite(planner.bind(stmt, scratch, self, base_dir))
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
        self._user_text = text
        self._use_storage_settings()
        if mode.upper() == "AST":
            return repr(stmt.node)
        analyzed = planner.bind(stmt, self.catalog, self)
        explain = ir.Explain(mode.upper(), stmt.text, planner.rewrite(analyzed), analyzed)
        return explain_text(explain, self._runtime(text), stmt.start)

    def stream(self, text: str, output, checkpoint: str | os.PathLike, *,
               trigger: str = "availableNow", late: str | os.PathLike | None = None,
               max_files_per_trigger: int | None = None, clock=None,
               output_format: str = "parquet"):
        """Start ``text`` as a continuous query over the streams' directories (or, for a
        query over a SIGNAL, over its directory of arriving WAV files: streaming/signals.py).

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
        self._user_text = text
        self._use_storage_settings()
        bound = planner.bind(stmt, self.catalog, self, base_dir)
        bound = planner.rewrite(bound)
        from wavesql.planner.insert import InsertInto

        if isinstance(bound, InsertInto):  # a job: incremental and exactly once (wavesql.jobs)
            from wavesql.jobs import run_insert

            report = run_insert(self, bound, text, source, base_dir, **self.job_options)
            status = self.spark.createDataFrame([(report.summary(),)], "status string")
            return Result(stmt, bound, status, report)
        df = planner.lower(bound, self._runtime(text), stmt.start)
        if isinstance(bound, (ir.CreateObject, ir.DropObject)) or (
                isinstance(bound, ir.SparkCommand)):
            self._functions = None  # CREATE FUNCTION and friends change what exists
        return Result(stmt, bound, df)

    # -- Environment (for the binder) ----------------------------------------------------
    def spark_table_schema(self, name: str) -> ir.Schema | None:
        try:
            if not self.spark.catalog.tableExists(name):
                return None
            schema = self.spark.table(name).schema
        except Exception:  # noqa: BLE001 - an unreadable table is "not there" for binding
            return None
        return _schema_of(schema)

    def spark_table_names(self) -> list[str]:
        try:
            # SHOW TABLES is a driver-side command; catalog.listTables() would run a job.
            return [r.tableName for r in self.spark.sql("SHOW TABLES").collect()]
        except Exception:  # noqa: BLE001
            return []

    def function_names(self) -> frozenset[str]:
        if self._functions is None:
            rows = self.spark.sql("SHOW FUNCTIONS").collect()
            self._functions = frozenset(r[0].lower() for r in rows)
        return self._functions

    def constant(self, sql: str):
        from pyspark.errors import PySparkException

        try:  # no FROM: Spark folds it to a local relation, no job runs
            return self.spark.sql(f"SELECT {sql} AS v").first()[0]
        except PySparkException as err:
            raise translate_spark_error(err, sql, self._user_text or sql, None) from None

    def kafka_partitions(self, options, topic: str) -> int:
        from wavesql.sources import kafka

        return kafka.describe_topic(self.spark, options, topic)

    def spark_parses(self, sql: str) -> bool:
        """Whether Spark's own SQL parser accepts ``sql`` (parsing only: no analysis)."""
        from pyspark.errors import PySparkException

        try:
            self.spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
        except PySparkException:
            return False
        except Exception as err:  # noqa: BLE001 - Py4J wraps the JVM's ParseException
            if "ParseException" in type(err).__name__ or "ParseException" in str(err):
                return False
            raise
        return True

    def _stand_in(self, ddl: str):
        """An empty DataFrame of schema ``ddl``, made once per schema (building one costs
        ~10 ms of Python -> JVM calls, paid per input of every query otherwise)."""
        df = self._stand_ins.get(ddl)
        if df is None:
            if len(self._stand_ins) >= 256:
                self._stand_ins.clear()
            df = self._stand_ins[ddl] = self.spark.createDataFrame([], ddl)
        return df

    def analyze(self, sql: str, inputs, source_offset: int | None) -> ir.Schema:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        from .spark_errors import java_message

        # Analysis needs only the inputs' schemas, which the IR already knows: stand-in empty
        # DataFrames avoid listing files or planning scans at bind time.
        # They are dropped again right after (and a user's own view of that name put back):
        # a stand-in left behind would answer for a later statement's name.
        try:
            with temp_views(self.spark, [(name, self._stand_in(rel.schema.ddl()))
                                         for name, rel in inputs]):
                schema = self.spark.sql(sql).schema
        except PySparkException as err:
            raise translate_spark_error(err, sql, self._user_text or sql, source_offset) from None
        except Py4JJavaError as err:  # Spark's own failure (INTERNAL_ERROR), not one PySpark
            # converts: reported with Spark's message instead of a Java stack trace
            raise WaveSQLError("SPARK_ERROR", java_message(err), hint="Spark could not "
                               "analyse this query (an internal error of Spark's)",
                               query=self._user_text or sql) from None
        return _schema_of(schema)


def _schema_of(struct) -> ir.Schema:
    return ir.Schema(tuple(ir.Field(f.name, f.dataType.simpleString(), f.nullable)
                           for f in struct.fields))
