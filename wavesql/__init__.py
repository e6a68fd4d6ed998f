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


def load_ipython_extension(ip):
    """``%load_ext wavesql``: the ``%wavesql``/``%%wavesql`` magic (wavesql.notebook)."""
    from wavesql.notebook import load_ipython_extension as _load

    _load(ip)


def __getattr__(name):  # lazy: `import wavesql` must not start a JVM or import pyspark
    if name in ("Session", "Result"):
        from wavesql import session

        return getattr(session, name)
    if name == "plot":  # wavesql.plot.waveform(...): matplotlib only when asked for
        from wavesql import display

        return display
    raise AttributeError(f"module 'wavesql' has no attribute {name!r}")


__all__ = ["connect", "WaveSQLError", "__version__"]
