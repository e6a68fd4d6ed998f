"""Run the Spark SQL corpus on plain Spark and through sqlglot's Spark round trip.

Usage (from the repository root)::

    python -m tests.spark_corpus.check_corpus [-k SUBSTRING] [-v] [--execute-all]
                                              [--reshuffle] [--queries FILE]

For every query in ``queries.sql`` it

1. runs the query with ``spark.sql`` -- any error here is a corpus bug (the corpus must
   only contain queries Spark accepts), reported as a "spark error";
2. transpiles it with ``sqlglot.transpile(q, read="spark", write="spark")`` and runs the
   result -- a sqlglot exception, a Spark error on the regenerated SQL, or a different row
   multiset is a "round-trip" failure. Those are findings about sqlglot that WaveSQL has to
   work around, so they are reported, never hidden by dropping the query.

When the regenerated SQL analyses to the same canonical plan as the original
(``DataFrame.sameSemantics``) its rows are the same by construction and it is not executed
a second time; ``--execute-all`` executes it anyway.

``--reshuffle`` adds a determinism audit for the corpus itself: every query is re-run over
the same tables split into 3 hash partitions in a different row order, with a different
shuffle partition count and adaptive execution on, and any result change is reported as a
"nondeterministic" corpus bug (e.g. a window ORDER BY without a tie-breaker).

Result column-name differences are reported (with -v) as notes only: Spark derives names of
unaliased expressions from the SQL text, so a harmless rewrite (``count(*)`` vs
``count(1)``) renames them without changing the result set.

Exit status is 1 if any query failed on plain Spark or was nondeterministic, else 0
(round-trip findings are information, not failures of the corpus).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pathlib
import sys
import tempfile
import time

if __package__ in (None, ""):
    # allow `python tests/spark_corpus/check_corpus.py` as well as `python -m ...`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.spark_corpus.compare import column_names_differ, diff_rows, load_queries  # noqa: E402
from tests.spark_corpus.tables import TableSpec, ddl, write_tables  # noqa: E402

QUERIES = pathlib.Path(__file__).with_name("queries.sql")


def make_spark():
    """One small local session with the settings the corpus results are defined under."""
    # The Python workers (for any Python-side evaluation) must be this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("wavesql-spark-corpus")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Adaptive execution re-plans every tiny query after each shuffle stage; it never
        # changes results, and turning it off saves ~15% of the corpus runtime on 2 cores.
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    _silence_pyspark_error_log()
    return spark


def _silence_pyspark_error_log() -> None:
    """PySpark logs every analysis error as a multi-kilobyte JSON record on stderr; the
    script reports each failure on one line itself, so mute that logger."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # older PySpark: nothing to mute
        return
    # Must be created through PySparkLogger: a plain logging.Logger registered under this
    # name would reject the keyword arguments PySpark passes to it.
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def read_table(spark, spec: TableSpec):
    """Load one generated table with its explicit schema."""
    return spark.read.schema(ddl(spec)).format(spec.format).options(**spec.options).load(spec.path)


def register_tables(spark, directory: pathlib.Path) -> dict[str, TableSpec]:
    """Write the corpus tables and register each as a cached temp view under its name."""
    specs = write_tables(directory)
    for spec in specs.values():
        df = read_table(spark, spec)
        # Cached so that two runs of ~300 queries do not re-parse CSV/JSON each time;
        # caching does not change results (the files are immutable for the session).
        df.cache().count()
        df.createOrReplaceTempView(spec.name)
    return specs


def register_reshuffled(spark, specs: dict[str, TableSpec], partitions: int = 3) -> None:
    """Re-register every view with the same rows in a different partitioning and order.

    The shuffle key is a hash of the whole row (deterministic: a nondeterministic view
    would be rejected by some subqueries), and rows are sorted by it within partitions,
    which scrambles the file order that tie-less-looking queries might silently rely on.
    """
    from pyspark.sql import functions as F

    for spec in specs.values():
        df = read_table(spark, spec)
        key = F.xxhash64(F.to_json(F.struct(*df.columns)))
        df = (
            df.withColumn("_shuffle_key", key)
            .repartition(partitions, "_shuffle_key")
            .sortWithinPartitions(F.col("_shuffle_key").desc())
            .drop("_shuffle_key")
        )
        df.cache().count()
        df.createOrReplaceTempView(spec.name)


@contextlib.contextmanager
def _captured_sqlglot_warnings():
    """Collect sqlglot's logged warnings (it logs, rather than raises, when it drops an
    unsupported argument) so they are attributed to the query that caused them."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("sqlglot")
    handler = _Collect(level=logging.WARNING)
    old_propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}"


def _indent(text: str) -> str:
    return "\n".join("      " + ln for ln in text.splitlines())


class Checker:
    """Runs queries and keeps the counters and the baseline rows for the reshuffle audit."""

    def __init__(self, spark, file_name: str, verbose: bool, execute_all: bool) -> None:
        import sqlglot

        self.spark = spark
        self.sqlglot = sqlglot
        self.file_name = file_name
        self.verbose = verbose
        self.execute_all = execute_all
        self.counts = dict.fromkeys(
            ("queries", "spark_errors", "round_trip", "name_notes", "same_plan", "nondet"), 0
        )
        self.baseline: dict[str, list] = {}
        self.timings: list[tuple[float, str]] = []

    def run(self, queries) -> None:
        for slug, sql, line in queries:
            self.counts["queries"] += 1
            started = time.perf_counter()
            self.check_one(slug, sql, f"{self.file_name}:{line} {slug}")
            self.timings.append((time.perf_counter() - started, slug))
        if self.verbose:
            print("slowest queries (both runs):")
            for seconds, slug in sorted(self.timings, reverse=True)[:10]:
                print(f"  {seconds:6.2f}s {slug}")

    def check_one(self, slug: str, sql: str, where: str) -> None:
        """Run one query both ways; report and count the first problem found."""
        try:
            df = self.spark.sql(sql)
            expected = df.collect()
        except Exception as exc:  # noqa: BLE001 - any failure is a finding to report
            self.counts["spark_errors"] += 1
            print(f"SPARK ERROR      {where}: {_first_line(exc)}")
            return
        self.baseline[slug] = expected

        try:
            with _captured_sqlglot_warnings() as warnings:
                transpiled = self.sqlglot.transpile(sql, read="spark", write="spark")
            for message in warnings:
                # e.g. "Argument 'format' is not supported ...": sqlglot dropped something
                # and went on; the row comparison below shows whether it mattered.
                print(f"SQLGLOT WARNING  {where}: {message}")
            if len(transpiled) != 1:
                raise ValueError(f"sqlglot produced {len(transpiled)} statements")
            rt_sql = transpiled[0]
        except Exception as exc:  # noqa: BLE001
            self.counts["round_trip"] += 1
            print(f"SQLGLOT FAILED   {where}: {_first_line(exc)}")
            return

        try:
            rt_df = self.spark.sql(rt_sql)
            if not self.execute_all and rt_df.sameSemantics(df):
                # Same canonical plan as the original => same rows by construction.
                self.counts["same_plan"] += 1
                actual = None
            else:
                actual = rt_df.collect()
        except Exception as exc:  # noqa: BLE001
            self.counts["round_trip"] += 1
            print(f"ROUND-TRIP ERROR {where}: {_first_line(exc)}")
            if self.verbose:
                print(_indent(rt_sql))
            return

        problem = None if actual is None else diff_rows(actual, expected)
        if problem is not None:
            self.counts["round_trip"] += 1
            print(f"ROUND-TRIP DIFF  {where}: {problem.splitlines()[0]}")
            if self.verbose:
                print(_indent(problem))
                print(_indent(rt_sql))
            return
        rt_types = [f.dataType.simpleString() for f in rt_df.schema.fields]
        types = [f.dataType.simpleString() for f in df.schema.fields]
        if rt_types != types:
            # equal-looking values of a different SQL type are still a different result
            self.counts["round_trip"] += 1
            print(f"ROUND-TRIP TYPES {where}: {rt_types} vs {types}")
            if self.verbose:
                print(_indent(rt_sql))
            return
        note = column_names_differ(rt_df.columns, df.columns)
        if note is not None:
            self.counts["name_notes"] += 1
            if self.verbose:
                print(f"NOTE names       {where}: {note}")

    def reshuffle_audit(self, specs: dict[str, TableSpec], queries) -> None:
        """Re-run every query over reshuffled inputs and compare with the baseline rows."""
        register_reshuffled(self.spark, specs)
        self.spark.conf.set("spark.sql.shuffle.partitions", "5")
        self.spark.conf.set("spark.sql.adaptive.enabled", "true")
        for slug, sql, line in queries:
            if slug not in self.baseline:
                continue  # already reported as a spark error
            where = f"{self.file_name}:{line} {slug}"
            try:
                problem = diff_rows(self.spark.sql(sql).collect(), self.baseline[slug])
            except Exception as exc:  # noqa: BLE001
                problem = f"fails on reshuffled input: {_first_line(exc)}"
            if problem is not None:
                self.counts["nondet"] += 1
                print(f"NONDETERMINISTIC {where}: {problem.splitlines()[0]}")
                if self.verbose:
                    print(_indent(problem))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="keyword", help="only queries whose slug contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="show SQL and diffs")
    parser.add_argument("--queries", type=pathlib.Path, default=QUERIES)
    parser.add_argument(
        "--execute-all",
        action="store_true",
        help="execute the round-tripped SQL even when its plan equals the original's",
    )
    parser.add_argument(
        "--reshuffle",
        action="store_true",
        help="also audit the corpus for partitioning-dependent (nondeterministic) results",
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    queries = load_queries(args.queries)
    if args.keyword:
        queries = [q for q in queries if args.keyword in q[0]]
    spark = make_spark()
    checker = Checker(spark, args.queries.name, args.verbose, args.execute_all)
    try:
        with tempfile.TemporaryDirectory(prefix="wavesql-corpus-") as tmp:
            specs = register_tables(spark, pathlib.Path(tmp))
            checker.run(queries)
            if args.reshuffle:
                checker.reshuffle_audit(specs, queries)
    finally:
        spark.stop()
    elapsed = time.perf_counter() - started
    counts = checker.counts
    print(
        f"{counts['queries']} queries, {counts['spark_errors']} spark errors, "
        f"{counts['round_trip']} round-trip mismatches/parse failures"
        + (f", {counts['nondet']} nondeterministic" if args.reshuffle else "")
        + f" ({counts['same_plan']} round trips planned identically and were not re-executed;"
        f" {counts['name_notes']} column-name-only differences) in {elapsed:.1f}s"
    )
    return 1 if counts["spark_errors"] or counts["nondet"] else 0


if __name__ == "__main__":
    sys.exit(main())
