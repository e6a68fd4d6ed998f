"""Load (issue 7, part 6): a continuous signal query at a fixed input rate keeps bounded
memory and latency. The full run (minutes) is ``python benchmarks/load/run.py``; this is a
shorter one (``pytest -m slow tests/test_load.py``), on the shared Spark session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "load" / "run.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("wavesql_load_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_sustained_signal_stream_keeps_memory_and_latency_bounded(spark, tmp_path):
    load = _load_module()
    # 150 s of 48 kHz audio written in real time, 0.5 s per file
    figures = load.run(150, workdir=str(tmp_path / "load"), spark=spark, warmup=0.2)
    assert figures["exactly_once"], figures  # every window once, the tail flushed
    assert figures["writer_lag_max_s"] < 5
    first, second = figures["latency_first_half"], figures["latency_second_half"]
    assert first["batches"] >= 10 and second["batches"] >= 10
    # latency does not creep up: the second half's p99 stays near the first half's
    assert second["p99_s"] <= max(2.0 * first["p99_s"], first["p99_s"] + 5.0), figures
    assert figures["latency"]["p50_s"] < 20
    # memory does not grow with the stream: the last third of the steady state holds about
    # what the first third held (the JVM's heap settles), not a third more again
    rss = [b for t, b in figures["rss_samples"] if t >= 0.2 * figures["seconds"]]
    third = len(rss) // 3
    assert third >= 10
    first_rss, last_rss = sorted(rss[:third]), sorted(rss[-third:])
    assert last_rss[third // 2] <= 1.25 * first_rss[third // 2], figures["rss_samples"]
    assert figures["state_bytes_max"] < 1 << 20  # the filter's and detector's state only
