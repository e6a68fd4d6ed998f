"""WaveSQL's own readers for Spark, written in Python (see :mod:`.wav_source`).

The planner reads signal files through these instead of Spark's built-in readers, so that the
signal stage of a query runs next to the decoded samples and raw samples never cross into
the JVM (DESIGN.md §4): batch scans are planned on the driver and run as ``mapInArrow``
tasks (:func:`.wav_source.batch_frame`), streaming reads go through the ``wavesql_wav``
Python data source.
"""

from .wav_source import SHORT_NAME, WavDataSource, batch_frame, load, plan, register

__all__ = ["SHORT_NAME", "WavDataSource", "batch_frame", "load", "plan", "register"]
