"""WaveSQL's own readers for Spark, written in Python (see :mod:`.wav_source`).

The planner reads signal files through these instead of Spark's built-in readers, so that the
signal stage of a query runs next to the decoded samples and raw samples never cross into
the JVM: batch scans are planned on the driver and run as ``mapInArrow``
tasks (:func:`.wav_source.batch_frame`), streaming reads go through the ``wavesql_wav``
Python data source.
"""

__all__ = ["SHORT_NAME", "WavDataSource", "batch_frame", "load", "plan", "register"]


def __getattr__(name: str):
    """The WAV source's names, imported on first use: importing the package (the planner
    does, for :mod:`.kafka`) must not import PySpark."""
    if name in __all__:
        from . import wav_source

        return getattr(wav_source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
