"""Continuous queries over a signal read from Kafka (``FORMAT samples``: sample blocks,
sources/kafka_signal.py), with the guarantees of continuous WAV signal queries
(:mod:`.signals`): windows on the same absolute grid, every emitted row final, stateful
signal functions carried exactly from batch to batch, and the union of all micro-batches
equal to the batch query over the same blocks.

Spark's Kafka source delivers each micro-batch's new records (offsets in the checkpoint);
the batch's blocks are placed on the timeline with the ones still **pending** -- blocks
holding samples of windows not yet complete -- and the windows whose samples are all there
-- up to the first gap a partition may still fill -- are evaluated. A program of finite
look-back (stateless, FIR, every stable IIR filter: :meth:`Program.lookback`) runs them in
parallel partitions (about two per core, at least :data:`MIN_PARTITION_SAMPLES` each), each
warmed up on the samples before it, as a WAV micro-batch does: the batch keeps the blocks
holding the last ``lookback + window`` samples before its end (in ``pending.npz``), so the
next batch's first partition warms up on them. A program of unbounded look-back (a
detector, ``degap``...) runs in order, in one task that starts from the signal functions'
states the previous batch saved (``<checkpoint>/signal_state``, as for WAV). A checkpoint
written before look-back blocks were kept (no ``lookback`` in its state) runs its next
batch in order from the saved states, then in parallel. A window is complete when
a later block exists after its run (a gap ends a run: the partial window before it is
emitted, as between WAV files, once the gap is settled: every partition that has had
blocks has moved past it, a producer sending each partition's blocks in sample order) or
its last sample has arrived; the partial tail of the
recording is emitted after an **end block** -- a block of 0 frames whose first sample number
is the recording's length, the Kafka counterpart of the ``*.eof`` marker -- once the samples
up to it are in, together with detectors' pending output.

What a micro-batch keeps: the pending blocks' samples and the look-back blocks
(``pending.npz`` in the batch's state folder: numpy arrays, loaded without pickles) and
the grid position up to which windows were emitted, committed with the batch's
``state.json`` (written last). A re-run of a batch after a crash starts from the previous batch's committed state and gets the same records,
so its output is the same: exactly once into a file sink.

Records that cannot join the timeline go to the quarantine with their locator
(``kafka:<topic>/<partition>/<offset>``), the record (base64) and the reason, and are
counted (``rows_in = on_time + quarantined``, a record being a block here): a malformed
block; a *late* block, holding samples of windows already emitted (it would change them);
a block overlapping a pending one with other samples; a block beyond the end block's
position (or after the tail was flushed), a second end block; and a resent copy of a block
already placed (its samples are read once; the copy is recorded so that nothing is counted
silently).

How a micro-batch's input becomes placed blocks is :meth:`KafkaSignalQuery._arrivals_placed`
(:class:`Arrivals`); everything after it -- settling, evaluating, state -- is shared with a
signal defined by a query (:mod:`.query_signals`), whose rows arrive per micro-batch too.
"""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass, field

import numpy as np

from wavesql import storage
from wavesql.planner.lower import Runtime, lower
from wavesql.streaming import sinks

from . import checkpoint_plan
from .report import FINAL, PROGRESS, REASON, BatchReport, timestamp_lit
from .signals import SignalContinuousQuery, signal_key

#: Version of the pending-blocks state this module writes (``state["signal"]``).
STATE_VERSION = 1
#: Fewest samples a parallel partition of a micro-batch holds: Spark charges tens of
#: milliseconds per Python task, so a small batch runs in one.
MIN_PARTITION_SAMPLES = 1 << 20


class KafkaSignalQuery(SignalContinuousQuery):
    """A continuous query over a Kafka signal (module docstring)."""

    def _start(self, trigger: str, max_files: int | None):
        from wavesql.sources import kafka

        checkpoint_plan.check_query(self, "kafka-signal")
        signal = self.plan.signal.scan.signal
        raw = kafka.load(self.spark, signal, streaming=True)
        return self._start_writer(raw.select("partition", "offset", "value", "timestamp"),
                                  trigger)

    def _run_batch(self, batch_df, batch_id: int) -> None:
        from wavesql.sources.wav_plan import k_range, runs_of

        began, wall = time.monotonic(), self.clock()
        spark = batch_df.sparkSession
        scan = self.plan.signal.scan
        s = scan.signal
        n, m = scan.window or (s.segment, s.segment)
        state = self._load_state(batch_id) or {}
        mine = state.get("signal") or {"end": None, "final": False, "pending": []}
        pending = _load_pending(state, mine)
        report = BatchReport(batch_id, None, started_at=wall)
        got = self._arrivals_placed(spark, batch_df, batch_id, mine, pending, report)
        placed, reached, end_at, closed = got.placed, got.reached, got.end_at, got.closed
        end_sample = mine["end"]  # windows starting below it were emitted
        report.samples_in = sum(p.info.frames for p in placed) - sum(
            p.info.frames for p in pending)

        every = runs_of(placed)
        least = min(reached.values()) if reached else None
        runs = _settled(every, least)  # up to the first gap a partition may still fill
        # the tail is complete once the samples up to the end block's position are in (or
        # no partition can still send any below it)
        final = closed or (end_at is not None and len(runs) == len(every) and (
            not runs or runs[-1].end == end_at or (least is not None and least >= end_at)))
        if not runs:
            k_end = None
        elif final:
            k_end = k_range(runs[-1], n, m)[1]
        else:  # the first window of the open last run that is not complete yet
            k_end = (runs[-1].end - n) // m + 1
        k_from = None if end_sample is None else end_sample // m
        if k_from is not None:
            k_end = k_from if k_end is None else max(k_end, k_from)
        lookback = scan.program.lookback(s.rate_hz) if scan.program.stateful else 0
        finite = not isinstance(lookback, str)
        # parallel when the previous batch kept the look-back blocks (or nothing came before)
        parallel = finite and (k_from is None or mine.get("lookback") == lookback)
        out = self._evaluate(spark, runs, n, m, k_from, k_end, flush=final and not closed,
                             lookback=lookback if parallel else None)
        samples, progress = self._progress_of({"end": None if k_end is None else k_end * m})
        report.progress_us = progress
        out = out.withColumn(FINAL, _lit(True)).withColumn(PROGRESS, timestamp_lit(progress))
        out = out.persist()
        report.rows_out = report.final_out = out.count()
        self._deliver(out, batch_id)
        out.unpersist()
        sinks.commit_all(got.quarantine, self.quarantine_path, batch_id)
        sinks.commit_all(got.late, self.late_path, batch_id, self.late_format)

        keep_from = None if k_end is None else k_end * m
        # the blocks of windows not emitted yet, and of the look-back before them: the
        # warm-up of the next batch's first window reads the windows ending after
        # keep_from - lookback (sources/wav_plan.py: _warmup)
        reach = n + lookback if finite else 0
        left = [p for p in placed if keep_from is None or p.end_sample > keep_from - reach]
        report.state_bytes = self._keep_signal_state(
            None if k_from is None else k_from * m, None if k_end is None else k_end * m, m)
        report.state_bytes += _save_pending(self._state_dir(batch_id), left)
        report.buffered = len(left)
        self._commit_state(batch_id, {
            "batch": batch_id, "progress": progress,
            "inputs": {s.key: {"progress": progress, "samples": samples, "final": final}},
            "signal": {"version": STATE_VERSION, "end": keep_from, "final": final,
                       "end_at": end_at, "pending": [p.meta() for p in left],
                       "partitions": reached, "lookback": lookback if finite else None}})
        report.inputs = {s.key: progress}
        self._finish(report, began, got.arrived)

    def _timeline(self) -> str:
        """What the signal's samples are called in the scan's messages."""
        return f"kafka:{self.plan.signal.scan.signal.path}"

    def _arrivals_placed(self, spark, batch_df, batch_id: int, mine: dict, pending: list,
                         report: BatchReport) -> "Arrivals":
        """The batch's records decoded and placed with the ``pending`` blocks (module
        docstring: what is quarantined and why); fills the report's record counts."""
        from wavesql.sources import kafka_signal as ks

        s = self.plan.signal.scan.signal
        channels = tuple(c.name for c in s.channels)
        records = sorted(batch_df.collect(), key=lambda r: (r["partition"], r["offset"]))
        report.rows_in = len(records)
        arrived = [r["timestamp"].timestamp() for r in records if r["timestamp"] is not None]

        bad, fresh = [], []
        closed = bool(mine["final"])  # the tail was flushed by an earlier batch
        end_at = mine.get("end_at")  # the end block's position: the recording's length
        reached = dict(mine.get("partitions") or {})  # partition -> end of its last block
        decoded = []
        for r in records:
            here = f"kafka:{s.path}/{r['partition']}/{r['offset']}"
            got = ks.decode_header(r["value"], len(channels))
            if isinstance(got, str):
                bad.append((here, r["value"], f"malformed: {got}"))
                continue
            key = str(r["partition"])
            reached[key] = max(reached.get(key, 0), got[0] + got[1])
            if got[1] == 0 and end_at is None:
                end_at = got[0]  # the end block
            elif got[1] == 0:
                bad.append((here, r["value"], f"a second end block (the first said the "
                            f"signal ends at sample {end_at})"))
            else:
                decoded.append((got[0], got[1], r, here))
        for first, frames, r, here in decoded:
            if closed or (end_at is not None and first + frames > end_at):
                bad.append((here, r["value"], f"after the signal's end (sample {end_at}, "
                            "its end block)"))
            else:
                fresh.append((first, frames, r, here))
        placed = list(pending)
        end_sample = mine["end"]  # windows starting below it were emitted
        for first, frames, r, here in sorted(fresh, key=lambda f: f[0]):
            if end_sample is not None and first < end_sample:
                bad.append((here, r["value"], f"late: samples {first}..{first + frames - 1} "
                            f"reach windows already emitted (up to sample {end_sample})"))
                continue
            digest = ks.digest(r["value"])
            clash = next((p for p in placed if first < p.end_sample
                          and p.start_sample < first + frames), None)
            if clash is not None:
                same = (clash.start_sample, clash.info.frames, clash.digest) == (
                    first, frames, digest)
                bad.append((here, r["value"], f"a resent copy of {clash.path} (read once)"
                            if same else f"overlaps {clash.path} (samples "
                            f"{clash.start_sample}..{clash.end_sample - 1})"))
                continue
            placed.append(ks.BlockPlacement(
                here, ks.BlockInfo(frames), first, r["partition"], r["offset"],
                ks.decode_samples(r["value"], len(channels)), digest))
        placed.sort(key=lambda p: p.start_sample)
        report.quarantined = len(bad)
        report.on_time = report.rows_in - len(bad)
        quarantine = []
        if bad:
            rows = [(s.name, here, base64.b64encode(value or b"").decode(), reason)
                    for here, value, reason in bad]
            quarantine.append(spark.createDataFrame(
                rows, f"_stream string, _file string, _record string, {REASON} string"))
        return Arrivals(placed, reached, end_at, closed, arrived, quarantine)

    def _evaluate(self, spark, runs, n: int, m: int, k_from, k_to, *, flush: bool,
                  lookback: int | None):
        """The program over windows ``k_from <= k < k_to`` of ``runs``, then the query: in
        parallel partitions warmed up on ``lookback`` samples, or (``lookback`` None) in
        order, in one task carrying the signal functions' states through the checkpoint."""
        from pyspark.sql.types import _parse_datatype_string

        from wavesql.sources.arrow import conform
        from wavesql.planner.lower import TASKS_PER_CORE
        from wavesql.sources.wav_plan import (WavOptions, WavPartition, WavPlan, k_range,
                                              plan_partitions)
        from wavesql.sources.wav_scan import read_partition, state_file, target_schema

        scan = self.plan.signal.scan
        s = scan.signal
        program = scan.program
        channels = tuple(c.name for c in s.channels)
        struct = _parse_datatype_string(program.spark_ddl())
        stateful = program.stateful
        parts = []
        if lookback is not None and runs and k_to is not None:
            cores = spark.sparkContext.defaultParallelism
            first = k_from if k_from is not None else k_range(runs[0], n, m)[0]
            size = max(MIN_PARTITION_SAMPLES, -(-max(0, k_to - first) * m
                                                 // (TASKS_PER_CORE * cores)))
            parts = plan_partitions(runs, n, m, size, s.rate_hz, k_from=k_from, k_to=k_to,
                                    lookback=lookback, flush=flush)
        elif lookback is None:
            tasks = ()
            if runs and k_to is not None:
                found = plan_partitions(runs, n, m, 1 << 62, s.rate_hz, k_from=k_from,
                                        k_to=k_to, sequential=True, flush=flush)
                tasks = tuple(t for part in found for t in part.tasks)
            if tasks or flush:  # a flush alone emits detectors' pending output
                folder = storage.join(self.checkpoint, "signal_state")
                state_in = (None if not stateful or k_from is None
                            else state_file(folder, k_from))
                state_out = state_file(folder, k_to) if stateful and k_to is not None else None
                parts = [WavPartition(0, s.rate_hz, tasks, (), None, flush, state_in,
                                      state_out)]
        if not parts:
            frame = spark.createDataFrame([], struct)
        else:
            options = WavOptions.parse({
                "path": self._timeline(), "rate": repr(s.rate_hz),
                "channels": json.dumps(list(channels)), "window": str(n), "slide": str(m),
                "program": program.to_json()})
            plan = WavPlan(options, [], list(runs), float(s.rate_hz), channels,
                           program.to_json(), stateful, 0, True, [])
            target = target_schema(plan, struct)
            program_json, settings = program.to_json(), storage.current()

            def kafka_signal_scan(batches):
                storage.use(settings)
                for b in batches:
                    for i in b.column(0).to_pylist():
                        for batch in read_partition(parts[i], options, program_json,
                                                    channels, stateful):
                            yield conform(batch, target)

            count = len(parts)
            frame = spark.range(0, count, 1, count).mapInArrow(kafka_signal_scan, struct)
        rt = Runtime(spark, self.session.catalog, self.text,
                     streams={signal_key(s): frame})
        return lower(self.bound, rt)


@dataclass
class Arrivals:
    """What a micro-batch brought, placed on the timeline (``_arrivals_placed``)."""

    placed: list  # the pending blocks and the batch's new ones, in timeline order
    reached: dict  # per producer (a Kafka partition), the end of its last block
    end_at: int | None  # the recording's length, once an end block said it
    closed: bool  # the tail was flushed by an earlier batch
    arrived: list  # when the batch's inputs arrived (s since 1970), for its latency
    quarantine: list = field(default_factory=list)  # DataFrames of quarantine records
    late: list = field(default_factory=list)  # DataFrames of late-sink records


def _settled(runs: list, reached: int | None) -> list:
    """The runs up to the first gap that may still be filled -- its end is at or after
    ``reached``, the least end of the last block of each partition that has had blocks (a
    partition's blocks come in sample order, so no block starting below it can still come)
    -- whose last run is then open: its windows are emitted as they complete, the
    partial one before the gap only once the gap is settled."""
    for j in range(len(runs) - 1):
        if reached is None or runs[j + 1].start > reached:
            return runs[:j + 1]
    return runs


def _lit(value):
    from pyspark.sql import functions as F

    return F.lit(value)


def _save_pending(folder: str, blocks: list) -> int:
    """The pending blocks' samples as ``pending.npz`` (arrays only: loaded without
    pickles); its size in bytes."""
    buffer = io.BytesIO()
    np.savez(buffer, **{f"b{i}": p.samples for i, p in enumerate(blocks)})
    data = buffer.getvalue()
    storage.write_bytes(storage.join(folder, "pending.npz"), data)
    return len(data)


def _load_pending(state: dict, mine: dict) -> list:
    """The pending blocks the previous batch committed."""
    from wavesql.errors import WaveSQLError
    from wavesql.sources.kafka_signal import BlockPlacement

    if not mine.get("pending"):
        return []
    if mine.get("version") != STATE_VERSION:
        raise WaveSQLError("CHECKPOINT_MISMATCH", "the checkpoint's pending sample blocks were "
                           f"written in format {mine.get('version')!r}; this WaveSQL reads "
                           f"{STATE_VERSION}", hint="start the query from a fresh checkpoint")
    data = np.load(io.BytesIO(storage.read_bytes(storage.join(state["dir"], "pending.npz"))),
                   allow_pickle=False)
    return [BlockPlacement.of_meta(b, data[f"b{i}"]) for i, b in enumerate(mine["pending"])]
