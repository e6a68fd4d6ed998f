"""A continuous SYNC JOIN: a control stream's rows, each synced with a signal's samples
once the recording covers its range.

The control is a catalog stream read row by row. A signal read from Kafka is handled by
:mod:`.kafka_sync`; for a WAV signal, its folder is watched too
(Spark's binaryFile source over :func:`watch_path`, so that a new file runs a micro-batch).
Each micro-batch the re-evaluating runner (:mod:`.runner`) splits the control rows it keeps
with :func:`sync_split`: those the signal's complete files now cover are synced and final,
the others wait in its buffer. The state records how far the files went and what they
were (a digest), so that a file arriving out of timeline order fails the query rather than
changing results already delivered.
"""

from __future__ import annotations

import json
import os

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir

from .plan import Input, Plan, check_row_by_row, parsed


def plan_sync(root: ir.Relation, syncs: list, stmt) -> Plan:
    """A continuous SYNC JOIN: its control is a catalog stream read row by row; the signal's
    WAV folder is watched, and each control row is synced once the recording covers its
    range (:func:`sync_split`)."""
    if len(syncs) > 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "several SYNC JOINs in one continuous query",
                           Span.of(stmt.node),
                           hint="run one continuous query per signal, over the same control")
    sync = syncs[0]
    if not isinstance(sync.control, ir.StreamScan):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN reads its ranges from a "
                           "catalog stream (not a view or a signal's results)",
                           Span.of(stmt.node), hint="write the control rows to a stream's "
                           "folder (INSERT INTO a sink it reads), then SYNC over that stream")
    signal = sync.signal.signal
    if not ((signal.source == "files" and signal.format == "wav")
            or (signal.source == "kafka" and signal.format == "samples")):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN watches a signal's WAV "
                           f"folder or Kafka topic of sample blocks; `{signal.name}` is "
                           f"{signal.format}", Span.of(stmt.node),
                           hint="run the SYNC as a batch query (or a scheduled query file)")
    if sync.signal.program is not None:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN over a signal's "
                           "processed segments", Span.of(stmt.node),
                           hint="SYNC over the signal itself; apply signal functions to "
                                "the synced segments in a query over the results")
    stream = sync.control.stream
    if stream.event_time is None:
        raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` has no EVENT TIME",
                           Span.of(stmt.node), hint="a continuous query needs event time to "
                           "know which rows are late: CREATE OR REPLACE STREAM ... EVENT TIME "
                           "ts WATERMARK 5 SECONDS")
    for rel in ir.walk(root):
        if isinstance(rel, (ir.WindowScan, ir.StreamOf, ir.SignalStage, ir.Rewindow)):
            raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN with windows or "
                               "signal functions around it", Span.of(stmt.node),
                               hint="SYNC in one continuous query; process its results in a "
                                    "query over them")
        if isinstance(rel, ir.SqlQuery):
            tree = parsed(rel)
            if tree is not None:
                check_row_by_row(tree, stmt)
    return Plan((Input(0, stream),), "sync", None, sync=sync)


def sync_split(plan: Plan, candidates, state: dict, at: float):
    """(rows to sync now, rows that keep waiting, the signal's state, its complete files
    placed) for a continuous SYNC JOIN, its files judged complete at wall-clock time ``at``.

    A control row is final once the recording covers its range: its end sample is at
    or before the end of the signal's complete files (files still being written do not
    count), or its range is NULL or reversed (NULL either way). The others wait in the
    buffer -- so state is the control rows the signal has not caught up with, however
    long the streams run. Files must arrive in timeline order: one that lands before
    the end already used would change results already delivered (``OUT_OF_ORDER_FILE``).
    """
    from pyspark.sql import functions as F

    from wavesql.planner.sync import sample_number

    sync = plan.sync
    s = sync.signal.signal
    placements = _complete_placements(s, at)
    before = state.get("signal") or {"end": None, "files": None}
    end = max((p.end_sample for p in placements), default=None)
    if before["end"] is not None:
        if (end is None or end < before["end"]
                or _fingerprint(placements, before["end"]) != before["files"]):
            raise WaveSQLError(
                "OUT_OF_ORDER_FILE", f"signal `{s.name}`: the files up to sample "
                f"{before['end']} changed after results over them were delivered (a file "
                "arrived out of timeline order, or one was removed)",
                hint="add a signal's files in time order; to redo the results, start the "
                     "query again with a new checkpoint")
    if end is None:
        signal_state = before
    else:
        signal_state = {"end": end, "files": _fingerprint(placements, end)}
    ranged = candidates.alias(sync.control_alias).select(
        "*", F.expr(sync.start_sql).alias("__a"), F.expr(sync.end_sql).alias("__b"))
    types = {f.name: f.dataType for f in ranged.schema.fields}
    s0 = sample_number(F.col("__a"), types["__a"], s.rate_hz, s.epoch_us)
    s1 = sample_number(F.col("__b"), types["__b"], s.rate_hz, s.epoch_us)
    ready = s0.isNull() | s1.isNull() | (s1 < s0)
    if end is not None:
        ready = ready | (s1 <= F.lit(end))
    marked = ranged.withColumn("__ready", ready).drop("__a", "__b")
    now = marked.where("__ready").drop("__ready")
    waiting = marked.where("NOT __ready").drop("__ready")
    return now, waiting, signal_state, placements


def watch_path(path: str) -> str:
    """What Spark's file source lists for a signal's FROM path: its folder (a single file's
    folder, filtered to .wav files) or its glob."""
    if storage.is_dir(path) or storage.has_magic(path):
        return path
    return storage.dirname(path) or "."


def _complete_placements(signal: cat.SignalDef, now: float) -> list:
    """The signal's files that are complete now, placed on its timeline (wav_plan.plan).
    A file is complete when its header declares exactly the data present, or -- a header
    that cannot say (streamed WAV) -- when it has not been modified for the settle time."""
    from wavesql.planner.lower import signal_placements
    from wavesql.sources.wav_plan import list_wav_files
    from wavesql.udfs.wav import WavError, read_info

    from . import files

    complete = []
    for path in list_wav_files(signal.path):
        try:
            info = read_info(path)
        except (OSError, WavError):
            info = None  # a header still being written: wait for it to settle
        if (info is not None and not info.truncated and not info.open_ended) or \
                files.why_not_ready(path, "wav", files.SETTLE_SECONDS, now) is None:
            complete.append(path)
    return signal_placements(signal, complete) if complete else []


def _fingerprint(placements, end: int) -> str:
    """What identifies the files placed before ``end`` (names, places, lengths): a digest,
    so the state stays one line however many files the signal has."""
    import hashlib

    used = sorted((os.path.basename(p.path), p.start_sample, p.info.frames)
                  for p in placements if p.start_sample < end)
    return hashlib.sha256(json.dumps(used).encode()).hexdigest()
