"""Spark data sources WaveSQL implements in Python (see :mod:`.wav_source`).

The planner reads signal files through these instead of Spark's built-in readers, so that the
signal stage of a query runs next to the decoded samples and raw samples never cross into
the JVM (DESIGN.md §4).
"""

from .wav_source import SHORT_NAME, WavDataSource, load, plan, register

__all__ = ["SHORT_NAME", "WavDataSource", "load", "plan", "register"]
