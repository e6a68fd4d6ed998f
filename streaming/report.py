"""What every continuous query adds to its output and records per micro-batch.

Whatever runner evaluates a query (re-evaluating, state store, signal, Kafka signal), its
result rows carry the same two columns -- :data:`FINAL` (the row will not change) and
:data:`PROGRESS` (no later row has an instant below it) -- its late and quarantined rows
the same :data:`REASON` column, and each micro-batch leaves the same
:class:`BatchReport`, which :mod:`.metrics` summarizes. They live here, below the runners,
so that each runner and the metrics read one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FINAL = "_final"
PROGRESS = "_progress"
REASON = "_reason"


@dataclass
class BatchReport:
    """What one micro-batch did.
    ``rows_in = on_time + late + no_time + punctuation + quarantined``."""

    batch: int
    progress_us: int | None
    rows_in: int = 0
    on_time: int = 0
    late: int = 0
    no_time: int = 0
    punctuation: int = 0
    quarantined: int = 0  # malformed CSV/JSON rows, written to <checkpoint>/quarantine
    rows_out: int = 0
    final_out: int = 0
    buffered: int = 0  # rows kept as state after the batch
    seconds: float = 0.0
    inputs: dict = field(default_factory=dict)  # stream -> its progress (microseconds)
    # Live metrics (ContinuousQuery.status / metrics, `wavesql status`):
    samples_in: int = 0  # signal queries: new samples the batch covered
    started_at: float | None = None  # wall clock (s since 1970) when the batch began
    finished_at: float | None = None  # ... when its results were delivered
    #: result latency: finished_at minus the earliest time an input of this batch became
    #: available (its file's modification time); None when no file was new
    latency_s: float | None = None
    state_bytes: int = 0  # bytes of state kept after the batch (buffers, signal state)
    #: the state-store runner over Kafka: the earliest Kafka timestamp of the batch's
    #: records (s since 1970), kept here because the *next* batch's latency is measured
    #: from it (that batch emits what this one made final); None: no record had one
    arrived_s: float | None = None


def timestamp_lit(us: int | None):
    """A Spark timestamp literal for ``us`` (microseconds since 1970; None: NULL), as the
    ``_progress`` column is written."""
    from pyspark.sql import functions as F

    if us is None:
        return F.lit(None).cast("timestamp")
    return F.timestamp_micros(F.lit(us))


def format_us(us: int | None) -> str:
    """``us`` (microseconds since 1970) as ISO text, for messages and ``wavesql status``."""
    if us is None:
        return "none"
    import datetime as dt

    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat()
