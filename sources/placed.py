"""Signals whose samples the planner places on the timeline itself: Kafka sample blocks
(sources/kafka_signal.py) and table rows (sources/table_signal.py).

A WAV signal's files carry their own place on the timeline (the WAV scan plans them,
sources/wav_plan.py). These sources first learn where their samples are -- the blocks'
headers, the rows' sample numbers -- as a list of *placements* (``path``, ``info.frames``,
``start_sample``, and ``samples`` filled in the task that reads them). From there the plan
is the WAV scan's own: the same runs, windows, partitions and warm-ups
(:class:`~wavesql.sources.wav_plan.WavPlan`), and each partition runs the same window and
signal-function code (:func:`~wavesql.sources.wav_scan.read_partition`) once its
placements hold their samples. :func:`placed_plan` builds that plan; :func:`scan_part` runs
one partition (:func:`filled` gives a partition's placements their samples; the streaming
reader of table signals, sources/table_stream.py, uses it on its own partitions).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Frames:
    """The part of a WAV header the WAV planner reads of a placement: its sample count."""

    frames: int
    truncated: bool = False


@dataclass(frozen=True)
class PlacedPlan:
    """The WAV scan's plan over placed samples, and the schema its rows have."""

    plan: object  # wav_plan.WavPlan
    parts: list  # wav_plan.WavPartition, in order
    options: object  # wav_plan.WavOptions
    struct_type: object  # pyspark StructType of the program's output
    target: object  # its Arrow schema

    def needed(self) -> list[tuple[int, object]]:
        """``(partition index, placement)`` of every placement a partition reads (its
        warm-up included)."""
        return [(i, f) for i, p in enumerate(self.parts)
                for t in p.warmup + p.tasks for f in t.files]


def placed_plan(signal, program, placements, width: int, slide: int, *, path: str,
                lookback: int | None, sequential: bool, tasks: int) -> PlacedPlan:
    """The plan of reading ``placements`` (in timeline order, non-overlapping) of
    ``signal`` through ``program`` in ``[SAMPLES width SLIDE slide]`` windows, in about
    ``tasks`` partitions of at least 1 M samples (as WAV scans are cut)."""
    from pyspark.sql.types import _parse_datatype_string

    from wavesql.sources.wav_plan import WavOptions, WavPlan, runs_of
    from wavesql.sources.wav_scan import target_schema

    channels = tuple(c.name for c in signal.channels)
    total = sum(p.info.frames for p in placements)
    partition_samples = max(1 << 20, -(-(-(-total // tasks)) // width) * width)
    options = WavOptions.parse({
        "path": path, "rate": repr(signal.rate_hz),
        "channels": json.dumps(list(channels)), "window": str(width),
        "slide": str(slide), "program": program.to_json(),
        "partition_samples": str(partition_samples),
        **({"lookback": str(lookback)} if lookback is not None else {}),
        **({"sequential": "true"} if sequential else {})})
    stateful = program.stateful
    plan = WavPlan(options, list(placements), runs_of(placements), float(signal.rate_hz),
                   channels, program.to_json(), stateful, lookback if stateful else 0,
                   sequential, [])
    struct_type = _parse_datatype_string(program.spark_ddl())
    return PlacedPlan(plan, plan.partitions(), options, struct_type,
                      target_schema(plan, struct_type))


def scan_part(placed: PlacedPlan, index: int, samples_of):
    """Partition ``index`` of ``placed`` run over its samples: an Arrow table of the
    program's rows. ``samples_of(placement, lo, hi)``: samples ``[lo, hi)`` of the
    timeline, inside the placement, as ``(channels, hi - lo)`` float32 -- each window task
    asks only for the samples its windows read, so a long placement is not read whole by
    every partition that reads part of it."""
    import pyarrow as pa

    from wavesql.sources.arrow import conform
    from wavesql.sources.wav_scan import read_partition

    part = filled(placed.parts[index], placed.options.window, placed.options.slide,
                  samples_of)
    plan = placed.plan
    out = [conform(b, placed.target) for b in read_partition(
        part, placed.options, plan.program_json, plan.channels, plan.stateful)]
    return (pa.Table.from_batches(out, schema=placed.target) if out
            else placed.target.empty_table())


def filled(part, n: int, m: int, samples_of):
    """Partition ``part`` (of ``[SAMPLES n SLIDE m]`` windows) with each of its placements
    cut to the samples its windows read and holding them (``samples_of``: :func:`scan_part`)."""
    def task_filled(task):
        lo = max(task.k0 * m, task.run_start)
        hi = min((task.k1 - 1) * m + n, task.run_end)
        files = []
        for f in task.files:
            a, b = max(lo, f.start_sample), min(hi, f.end_sample)
            files.append(dataclasses.replace(
                f, start_sample=a, info=dataclasses.replace(f.info, frames=b - a),
                samples=samples_of(f, a, b)))
        return dataclasses.replace(task, files=tuple(files))

    return dataclasses.replace(part, tasks=tuple(task_filled(t) for t in part.tasks),
                               warmup=tuple(task_filled(t) for t in part.warmup))
