"""Fault injection: kill this process at a named stage of a micro-batch's commit (for tests).

``WAVESQL_FAULT=<stage>[@n]`` makes the process SIGKILL itself the ``n``-th time (default
the first) any micro-batch reaches ``<stage>`` -- as a power cut or the kernel's OOM killer
would, with no clean-up, no ``finally``, no flush. Crash-safety tests run ``wavesql run`` (or
a continuous query) with it, then run again without it and compare the sinks with an
independent oracle: each stage is a point where a half-done batch must be redone whole or
not seen at all. Unset (always, outside such tests), :func:`point` costs a dictionary
lookup.

The stages, in the order a batch reaches them:

``staged``
    the batch's output is written, under the sink's ``_staging`` folder (or, on an object
    store, its files written but not yet listed in the sink's commit log);
``renamed``
    the batch's output is visible (renamed into place, or listed in the commit log);
``state-written``
    the re-evaluating runner's state for the batch is committed (``state.json``);
``progress-written``
    the batch's ``_progress`` record is written;
``batch-done``
    the batch's work is finished, before Spark writes its commit log.

When this process leads its process group (``wavesql run`` started in a session of its
own, as a scheduler does), the whole group is killed -- the Spark JVM with it; otherwise
only this process (the JVM then ends when its stdin closes).
"""

from __future__ import annotations

import os
import signal

STAGES = ("staged", "renamed", "state-written", "progress-written", "batch-done")

_reached: dict[str, int] = {}


def point(stage: str) -> None:
    """Kill the process here if ``WAVESQL_FAULT`` names ``stage`` (module docstring)."""
    wanted = os.environ.get("WAVESQL_FAULT")
    if not wanted:
        return
    name, _, nth = wanted.partition("@")
    if name not in STAGES:
        raise ValueError(f"WAVESQL_FAULT={wanted!r}: the stages are {', '.join(STAGES)}")
    if name != stage:
        return
    _reached[stage] = _reached.get(stage, 0) + 1
    if _reached[stage] != int(nth or 1):
        return
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
