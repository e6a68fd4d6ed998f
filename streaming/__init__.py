"""Continuous queries over unbounded streams: progress, final results, late data
(see :mod:`.runner`)."""

from .runner import BatchReport, ContinuousQuery, start

__all__ = ["BatchReport", "ContinuousQuery", "start"]
