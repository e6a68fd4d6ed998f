"""Live metrics of continuous queries, from their per-batch reports.

Each micro-batch leaves a :class:`~wavesql.streaming.report.BatchReport` (in
``ContinuousQuery.reports`` and, for a directory output, ``<output>/_progress/batch=N.json``).
:func:`summarize` turns the recent ones into the figures ``ContinuousQuery.status()``,
the REPL's ``\\status`` and ``wavesql status OUTPUT_DIR`` show:

- **input rate**: rows (signal queries: samples) taken in per second of wall-clock time,
  over the recent batches (first batch's start to last batch's end, idle time included);
- **processing rate**: the same rows per second of batch processing time (busy time only):
  the rate the query could sustain;
- **progress** (the watermark: results before it are final) and the last batch's;
- **state**: rows kept as state and bytes of state on disk after the last batch;
- **result latency**: per batch, the wall-clock time from the earliest of its input files
  becoming available (the file's modification time; a Kafka record's: its Kafka timestamp)
  to the batch's results being delivered (final); the last, p50, p99 and max over the
  recent batches. On the state store a batch emits what the batch before it made final, so
  it is measured from that batch's inputs (``BatchReport.arrived_s`` keeps a Kafka batch's
  figure for the next).
"""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from pathlib import Path

from .report import format_us

#: How many of the latest batches the rates and latency percentiles cover.
RECENT = 100


def _get(report, key, default=None):
    if is_dataclass(report):
        report = asdict(report)
    return report.get(key, default)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    # nearest rank: p99 of a few batches is their max, never an interpolated figure
    rank = max(1, -(-len(values) * q // 100))
    return values[int(rank) - 1]


def summarize(reports, recent: int = RECENT) -> dict:
    """The live figures of a continuous query from its batch reports (dataclasses or the
    dicts of ``_progress/*.json``), oldest first."""
    reports = [asdict(r) if is_dataclass(r) else dict(r) for r in reports]
    last = reports[-1] if reports else {}
    window = reports[-recent:]
    rows = sum(r.get("rows_in", 0) for r in window)
    samples = sum(r.get("samples_in", 0) or 0 for r in window)
    busy = sum(r.get("seconds", 0.0) for r in window)
    starts = [r["started_at"] for r in window if r.get("started_at") is not None]
    ends = [r["finished_at"] for r in window if r.get("finished_at") is not None]
    span = (max(ends) - min(starts)) if starts and ends else None
    latencies = [r["latency_s"] for r in window if r.get("latency_s") is not None]

    def rate(amount, seconds):
        return amount / seconds if seconds and seconds > 0 else None

    totals = {k: sum(r.get(k, 0) or 0 for r in reports)
              for k in ("rows_in", "on_time", "late", "no_time", "punctuation", "quarantined",
                        "rows_out", "samples_in")}
    return {
        "batches": len(reports),
        "progress_us": last.get("progress_us"),
        "input_rows_per_second": rate(rows, span),
        "processed_rows_per_second": rate(rows, busy),
        "input_samples_per_second": rate(samples, span) if samples else None,
        "processed_samples_per_second": rate(samples, busy) if samples else None,
        "buffered": last.get("buffered", 0),
        "state_bytes": last.get("state_bytes", 0),
        "last_batch_seconds": last.get("seconds"),
        "latency_s": last.get("latency_s"),
        "latency_p50_s": _percentile(latencies, 50),
        "latency_p99_s": _percentile(latencies, 99),
        "latency_max_s": max(latencies) if latencies else None,
        **totals,
    }


def read_reports(output: str | Path) -> list[dict]:
    """The batch reports a continuous query wrote next to its output (a folder or an
    object store's location), oldest first."""
    from wavesql import storage

    found = []
    for entry in storage.list_files(storage.join(str(output), "_progress")):
        name = storage.basename(entry.location)
        if not (name.startswith("batch=") and name.endswith(".json")):
            continue
        try:
            found.append(json.loads(storage.read_text(entry.location)))
        except (OSError, ValueError):
            continue  # being replaced right now
    return found


def format_status(figures: dict) -> str:
    """One block of text for a human (``wavesql status``)."""
    def num(v, unit="", digits=1):
        return "-" if v is None else f"{v:,.{digits}f}{unit}"

    lines = [f"batches        {figures['batches']}",
             f"progress       {format_us(figures['progress_us'])}",
             f"input rate     {num(figures['input_rows_per_second'], ' rows/s')}"
             + (f" · {num(figures['input_samples_per_second'], ' samples/s', 0)}"
                if figures.get("input_samples_per_second") else ""),
             f"processing     {num(figures['processed_rows_per_second'], ' rows/s')}"
             + (f" · {num(figures['processed_samples_per_second'], ' samples/s', 0)}"
                if figures.get("processed_samples_per_second") else ""),
             f"state          {figures['buffered']} rows · {figures['state_bytes']:,} bytes",
             f"latency        last {num(figures['latency_s'], ' s', 2)} · p50 "
             f"{num(figures['latency_p50_s'], ' s', 2)} · p99 "
             f"{num(figures['latency_p99_s'], ' s', 2)} · max "
             f"{num(figures['latency_max_s'], ' s', 2)}",
             f"rows           in {figures['rows_in']} (late {figures['late']}) · out "
             f"{figures['rows_out']}"]
    return "\n".join(lines)
