"""WaveSQL: a declarative query language for signals and event streams, on Apache Spark.

>>> import wavesql                                   # doctest: +SKIP
>>> ws = wavesql.connect()                           # local Spark, ./wavesql_catalog.db
>>> ws.sql("CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP) "
...        "FROM 'data/trades/' FORMAT parquet")     # doctest: +SKIP
>>> ws.sql("SELECT sym, avg(px) FROM trades GROUP BY sym").show()   # doctest: +SKIP
"""

from wavesql.errors import WaveSQLError

__version__ = "0.1.0"


def connect(*args, **kwargs):
    """Open a session; see :func:`wavesql.session.connect`."""
    from wavesql.session import connect as _connect

    return _connect(*args, **kwargs)


def __getattr__(name):  # lazy: `import wavesql` must not start a JVM or import pyspark
    if name in ("Session", "Result"):
        from wavesql import session

        return getattr(session, name)
    raise AttributeError(f"module 'wavesql' has no attribute {name!r}")


__all__ = ["connect", "WaveSQLError", "__version__"]
