"""The binder's environment over a Spark session: what exists, and what a Spark SQL fragment
means, answered by Spark itself.

Spark's analyzer is the authority on plain Spark SQL, so the binder asks it for the result
schema of every fragment it hands Spark (analysis only: no job runs) and translates its
errors into WaveSQL errors positioned in the user's text. ``planner.dict_environment``
answers the same questions without Spark, for tests and offline inspection.
"""

from __future__ import annotations

from wavesql.errors import WaveSQLError
from wavesql.spark_errors import translate_spark_error

from . import ir
from .spark_sql import temp_views


class SparkEnvironment:
    """An :class:`~wavesql.planner.bind.Environment` over ``spark``.

    ``user_text`` is the text of the statement being bound (errors point into it): set it
    with :meth:`for_text` before binding."""

    def __init__(self, spark):
        self.spark = spark
        self.user_text = ""
        self._functions: frozenset[str] | None = None
        self._stand_ins: dict = {}  # schema DDL -> empty DataFrame (analysis stand-ins)

    def for_text(self, text: str) -> "SparkEnvironment":
        """This environment, binding a statement of ``text``."""
        self.user_text = text
        return self

    def forget_functions(self) -> None:
        """After CREATE FUNCTION and friends: list Spark's functions again when asked."""
        self._functions = None

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
            raise translate_spark_error(err, sql, self.user_text or sql, None) from None

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

        from wavesql.spark_errors import java_message

        # Analysis needs only the inputs' schemas, which the IR already knows: stand-in empty
        # DataFrames avoid listing files or planning scans at bind time.
        # They are dropped again right after (and a user's own view of that name put back):
        # a stand-in left behind would answer for a later statement's name.
        try:
            with temp_views(self.spark, [(name, self._stand_in(rel.schema.ddl()))
                                         for name, rel in inputs]):
                schema = self.spark.sql(sql).schema
        except PySparkException as err:
            raise translate_spark_error(err, sql, self.user_text or sql, source_offset) from None
        except Py4JJavaError as err:  # Spark's own failure (INTERNAL_ERROR), not one PySpark
            # converts: reported with Spark's message instead of a Java stack trace
            raise WaveSQLError("SPARK_ERROR", java_message(err), hint="Spark could not "
                               "analyse this query (an internal error of Spark's)",
                               query=self.user_text or sql) from None
        return _schema_of(schema)


def _schema_of(struct) -> ir.Schema:
    return ir.Schema(tuple(ir.Field(f.name, f.dataType.simpleString(), f.nullable)
                           for f in struct.fields))
