"""Continuous windowed aggregates: micro-batch time vs state size, vs plain Spark.

    python benchmarks/streaming/run.py [--only sliding,istream,flat] [--hour-files 380]

Three experiments, every figure a median over the steady-state micro-batches of one run,
in one process and one Spark session (``local[2]``), and written to results.md:

``sliding``
    500 events/s over 20 keys, one Parquet file per 10 s of event time (5,000 rows), one
    file per micro-batch (``maxFilesPerTrigger 1``). A sliding count per key,
    ``[RANGE r SLIDE 10 SECONDS]`` with r = 1 minute and r = 1 hour (60x the state), on
    WaveSQL (late rows captured, ``_final``/``_progress`` on every row, the results written
    as Parquet) and on plain Spark Structured Streaming in its idiomatic form
    (``withWatermark`` + ``groupBy(window(...), key).count()``, append mode, Parquet file
    sink). The runs see 380 files (63 minutes of event time) so that the hour's window is
    full for the last 20 batches, which are the ones measured. Targets (issue 26): WaveSQL
    1 hour / 1 minute <= 1.5; WaveSQL / Spark <= 1.2.
``istream``
    ``ISTREAM (SELECT k, avg(v) AS a FROM kv [PARTITION BY k ROWS 10] GROUP BY k)`` with
    1,000, 10,000 and 100,000 keys: a first file of 10 rows per key fills the state, then
    micro-batches of 10,000 new rows (random keys). Target: <= 2 s per micro-batch.
``flat``
    the 1-minute sliding count over 30 minutes of event time (180 micro-batches): state rows
    and bytes per batch (they must stay flat).
``over``
    an OVER window per key, ``avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN
    INTERVAL r PRECEDING AND CURRENT ROW)`` with r = 10 seconds and r = 5 minutes (30x the
    look-back), over 500 events/s and 20 keys (90 files of 10 s: 15 min), on both runners:
    Spark's state store (each bucket keeps its rows' look-back, the batch plan runs over the
    buckets with rows due) and the re-evaluating runner (``WAVESQL_STATEFUL=0``: the whole
    buffer evaluated and rewritten every batch). Plain Spark Structured Streaming has no
    OVER windows over a stream, so it is not in this table. Written to ``over_results.md``
    (``--only over``).
``resample``
    a per-key 'linear' RESAMPLE, ``RESAMPLE(s, ts, INTERVAL 1 SECOND, 'linear' PARTITION
    BY k)``, over 500 events/s and 20 keys (90 files of 10 s: 15 min), on both runners:
    the median micro-batch time early in the run (batches 6-20, a short history) and at
    its end (the last 15 of 90, a long one), and the state rows then. Written to
    ``resample_results.md`` (``--only resample``).

A micro-batch's time is Spark's own ``triggerExecution`` duration of that batch (listing,
planning, the stateful operator, the sink, the offset and commit logs): the same clock for
both systems.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
SECOND = 1_000_000
EPOCH = dt.datetime(2026, 1, 1)


def write_events(folder: Path, files: int, rate: int, keys: int, seconds: int, seed: int = 0):
    """``files`` Parquet files of ``seconds`` of event time each at ``rate`` events/s over
    ``keys`` keys (up to 2 s out of order), modification times in order."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = int((EPOCH - dt.datetime(1970, 1, 1)).total_seconds()) * SECOND
    n = rate * seconds
    for i in range(files):
        ts = base + i * seconds * SECOND + np.sort(rng.integers(0, seconds * SECOND, n))
        ts = ts - rng.integers(0, 2 * SECOND, n)
        frame = pd.DataFrame({"k": rng.integers(0, keys, n).astype(str), "v": rng.random(n),
                              "ts": pd.to_datetime(ts, unit="us").astype("datetime64[us]")})
        path = folder / f"part-{i:05d}.parquet"
        frame.to_parquet(path)
        stamp = time.time() - 86400 + i * 0.01
        os.utime(path, (stamp, stamp))


class Durations:
    """Spark's triggerExecution per batch of a query, from its ``recentProgress`` (JSON, read
    once the query has ended; the session keeps every batch's: ``main`` sets
    ``spark.sql.streaming.numRecentProgressUpdates``). Not a Python
    ``StreamingQueryListener``: PySpark builds each event's progress object field by field
    over py4j on the driver while the next batch runs -- where WaveSQL's ``foreachBatch``
    runs too -- which slowed WaveSQL's batches and not plain Spark's (results.md,
    2026-11-29)."""

    def __init__(self, spark):
        self.spark = spark

    def of(self, query) -> list:
        return sorted((p.batchId, p.durationMs.get("triggerExecution", 0) / 1000.0,
                       p.numInputRows) for p in query.recentProgress)


def run_wavesql(ws, durations, folder: Path, work: Path, sql: str, name: str) -> dict:
    ws.sql(f"CREATE OR REPLACE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    out, ck = work / f"out_{name}", work / f"ck_{name}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    t0 = time.time()
    cq = ws.stream(sql.format(s=name), out, ck, max_files_per_trigger=1)
    cq.await_termination()
    wall = time.time() - t0
    # the batches with input rows (the re-evaluating runner reads its files itself, so
    # Spark's numInputRows of its batches is 0: WaveSQL's own count says which had rows)
    with_rows = {r.batch for r in cq.reports if r.rows_in}
    batches = [b for b in durations.of(cq._query) if b[0] in with_rows]
    return {"wall": wall, "batches": batches, "reports": cq.reports,
            "engine": type(cq).__name__}


def run_spark(spark, durations, folder: Path, work: Path, range_s: int, slide_s: int) -> dict:
    from pyspark.sql import functions as F

    out, ck = work / f"spark_out_{range_s}", work / f"spark_ck_{range_s}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    src = (spark.readStream.schema("k STRING, v DOUBLE, ts TIMESTAMP")
           .option("maxFilesPerTrigger", 1).parquet(str(folder)))
    agg = (src.withWatermark("ts", "2 seconds")
           .groupBy(F.window("ts", f"{range_s} seconds", f"{slide_s} seconds"), "k").count())
    t0 = time.time()
    q = (agg.writeStream.outputMode("append").format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.time() - t0
    return {"wall": wall, "batches": [b for b in durations.of(q) if b[2] > 0]}


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def floor_processor():
    """A ``transformWithStateInPandas`` processor that only adds each call's row count to one
    ``ValueState`` and emits it: the least a design on Spark's state store does per call."""
    from pyspark.sql.streaming import StatefulProcessor

    class PassCounts(StatefulProcessor):
        def init(self, handle):
            self.state = handle.getValueState("n", "n LONG")

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(f) for f in rows)
            stored = self.state.get()
            total = (stored[0] if stored else 0) + n
            self.state.update((total,))
            yield pd.DataFrame({"g": [str(key[0])], "n": [total]})

        def close(self):
            pass

    return PassCounts()


def run_floor(spark, durations, folder: Path, work: Path, tag: str, by: str = "bucket",
              sink: str = "foreachBatch") -> dict:
    """The floor of a state-store design on the same files: the same source and watermark,
    ``groupBy(bucket of k).transformWithStateInPandas`` of :func:`floor_processor` (RocksDB,
    event-time mode, 4 buckets: as WaveSQL runs it), each batch written as a Parquet folder
    by ``foreachBatch`` (``sink="file"``: Spark's file sink; ``by="key"``: a group per key)."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                   "true")
    out, ck = work / f"floor_out_{tag}", work / f"floor_ck_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    src = (spark.readStream.schema("k STRING, v DOUBLE, ts TIMESTAMP")
           .option("maxFilesPerTrigger", 1).parquet(str(folder)).withWatermark("ts", "2 seconds"))
    group = (F.col("k") if by == "key"
             else F.expr("CAST(pmod(xxhash64(k), 4) AS INT)")).alias("g")
    counts = src.select(group, "k", "ts").groupBy("g").transformWithStateInPandas(
        floor_processor(), "g STRING, n LONG", "Append", "EventTime")
    writer = counts.writeStream.option("checkpointLocation", str(ck))
    if sink == "file":
        writer = writer.outputMode("append").format("parquet").option("path", str(out))
    else:
        def batch(df, batch_id):
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id:09d}"))
        writer = writer.foreachBatch(batch)
    t0 = time.time()
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination()
    return {"wall": time.time() - t0, "batches": [b for b in durations.of(q) if b[2] > 0]}


def steady(batches: list, last: int) -> tuple[float, float, float]:
    """(median, min, max) of the last ``last`` batches' durations."""
    xs = [d for _, d, _ in batches[-last:]]
    return statistics.median(xs), min(xs), max(xs)


def sliding(ws, durations, work: Path, files: int, last: int,
            windows: tuple = (60, 3600)) -> list[str]:
    folder = work / "events"
    if not folder.exists():
        write_events(folder, files, 500, 20, 10)
    lines = ["## Sliding count: micro-batch time vs window length, vs plain Spark", "",
             f"500 events/s, 20 keys, {files} files of 10 s ({files * 10 / 60:.0f} min of "
             f"event time), one file per micro-batch; median [min-max] of the last {last} "
             "batches (Spark's triggerExecution).", "",
             "| window | WaveSQL | state-store floor | plain Spark SS | WaveSQL / Spark | "
             "floor / Spark | WaveSQL / floor | WaveSQL state rows |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    meds = {}
    for range_s in windows:
        sql = (f"SELECT k, count(*) AS n FROM {{s}} [RANGE {range_s} SECONDS SLIDE 10 SECONDS] "
               "GROUP BY k")
        ours = run_wavesql(ws, durations, folder, work, sql, f"ev{range_s}")
        floor = run_floor(ws.spark, durations, folder, work, str(range_s))
        theirs = run_spark(ws.spark, durations, folder, work, range_s, 10)
        m, lo, hi = steady(ours["batches"], last)
        fm, flo, fhi = steady(floor["batches"], last)
        sm, slo, shi = steady(theirs["batches"], last)
        meds[range_s] = m
        state = ours["reports"][-2].buffered if len(ours["reports"]) > 1 else None
        lines.append(f"| RANGE {range_s // 60} MIN SLIDE 10 S | {m:.3f} s [{lo:.3f}-{hi:.3f}] "
                     f"| {fm:.3f} s [{flo:.3f}-{fhi:.3f}] | {sm:.3f} s [{slo:.3f}-{shi:.3f}] "
                     f"| {m / sm:.2f}x | {fm / sm:.2f}x | {m / fm:.2f}x | {state} |")
        print(lines[-1], f"(engine {ours['engine']}, walls {ours['wall']:.0f} s / "
              f"{floor['wall']:.0f} s / {theirs['wall']:.0f} s)", flush=True)
    ratio = (f"WaveSQL 1 hour / 1 minute: **{meds[3600] / meds[60]:.2f}x** (target <= 1.5). "
             if 3600 in meds and 60 in meds else "")
    lines += ["", ratio + "The floor: the same files through a "
              "transformWithStateInPandas processor that only counts rows per bucket "
              "(run_floor), the least a design on Spark's state store costs here; its "
              "work does not depend on the window, so its two rows are two measurements "
              "of one thing.", ""]
    return lines


def istream(ws, durations, work: Path, batches: int, last: int) -> list[str]:
    lines = ["## ISTREAM over [PARTITION BY k ROWS 10]: micro-batch time vs keys", "",
             "`ISTREAM (SELECT k, avg(v) AS a FROM kv [PARTITION BY k ROWS 10] GROUP BY k)`; "
             "a first file of 10 rows per key, then micro-batches of 10,000 new rows; median "
             f"[min-max] of the last {last}.", "",
             "| keys | micro-batch of 10,000 rows | rows out per batch | state rows | "
             "state bytes |", "| --- | --- | --- | --- | --- |"]
    for keys in (1_000, 10_000, 100_000):
        folder = work / f"kv{keys}"
        if not folder.exists():
            folder.mkdir(parents=True)
            rng = np.random.default_rng(keys)
            base = int((EPOCH - dt.datetime(1970, 1, 1)).total_seconds()) * SECOND
            fill = 10 * keys
            ts = base + np.arange(fill) * (10 * SECOND // fill)
            frames = [pd.DataFrame({"k": np.tile(np.arange(keys), 10).astype(str),
                                    "v": rng.random(fill), "ts": ts})]
            for b in range(batches):
                t0 = base + (b + 1) * 10 * SECOND
                frames.append(pd.DataFrame({
                    "k": rng.integers(0, keys, 10_000).astype(str), "v": rng.random(10_000),
                    "ts": t0 + np.sort(rng.integers(0, 10 * SECOND, 10_000))}))
            for i, f in enumerate(frames):
                f["ts"] = pd.to_datetime(f["ts"], unit="us").astype("datetime64[us]")
                path = folder / f"part-{i:05d}.parquet"
                f.to_parquet(path)
                stamp = time.time() - 86400 + i * 0.01
                os.utime(path, (stamp, stamp))
        sql = "ISTREAM (SELECT k, avg(v) AS a FROM {s} [PARTITION BY k ROWS 10] GROUP BY k)"
        ours = run_wavesql(ws, durations, folder, work, sql, f"kv{keys}")
        m, lo, hi = steady(ours["batches"], last)
        reps = [r for r in ours["reports"] if r.rows_in][-last:]
        out = statistics.median(r.rows_out for r in reps)
        lines.append(f"| {keys:,} | {m:.3f} s [{lo:.3f}-{hi:.3f}] | {out:.0f} | "
                     f"{reps[-1].buffered:,} | {reps[-1].state_bytes:,} |")
        print(lines[-1], f"(engine {ours['engine']})", flush=True)
    return lines + [""]


def flat(ws, durations, work: Path, files: int) -> list[str]:
    folder = work / "events"
    if not folder.exists():
        write_events(folder, files, 500, 20, 10)
    sql = "SELECT k, count(*) AS n FROM {s} [RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY k"
    ws.sql(f"CREATE OR REPLACE STREAM flat30 (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    for old in (work / "out_flat", work / "ck_flat"):
        shutil.rmtree(old, ignore_errors=True)
    cq = ws.stream(sql.format(s="flat30"), work / "out_flat", work / "ck_flat",
                   max_files_per_trigger=1)
    # 180 files = 30 minutes of event time: stop after them (the folder may hold more)
    while len(cq.reports) < 180 and cq.is_active:
        time.sleep(0.5)
    cq.stop()
    reps = cq.reports[:180]
    rows = [r.buffered for r in reps]
    size = [r.state_bytes for r in reps]
    pick = lambda xs: ", ".join(f"{xs[i]}" for i in (9, 44, 89, 134, 179) if i < len(xs))  # noqa
    return ["## State over 30 minutes of event time (RANGE 1 MIN SLIDE 10 S)", "",
            "| batch | 10 | 45 | 90 | 135 | 180 |", "| --- | --- | --- | --- | --- | --- |",
            f"| state rows (panes) | {pick(rows).replace(', ', ' | ')} |",
            f"| state bytes | {pick(size).replace(', ', ' | ')} |", ""]


def over(ws, durations, work: Path, last: int) -> list[str]:
    folder = work / "events_over"
    if not folder.exists():
        write_events(folder, 90, 500, 20, 10, seed=7)
    lines = ["## OVER window per key: micro-batch time vs look-back, state store vs "
             "re-evaluation", "",
             "500 events/s, 20 keys, 90 files of 10 s (15 min of event time), one file per "
             f"micro-batch; median [min-max] of the last {last} batches with rows (Spark's "
             "triggerExecution).", "",
             "| look-back | state store | re-evaluating | state store / re-evaluating | "
             "state rows (state store / re-evaluating) |", "| --- | --- | --- | --- | --- |"]
    meds: dict = {}
    for range_s in (10, 300):
        sql = ("SELECT ts, k, v, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
               f"INTERVAL {range_s} SECONDS PRECEDING AND CURRENT ROW) AS m FROM {{s}}")
        got = {}
        for runner, flag in (("stateful", "1"), ("reeval", "0")):
            os.environ["WAVESQL_STATEFUL"] = flag
            try:
                got[runner] = run_wavesql(ws, durations, folder, work, sql,
                                          f"over{range_s}{runner}")
            finally:
                os.environ.pop("WAVESQL_STATEFUL", None)
        (m, lo, hi), (rm, rlo, rhi) = (steady(got[r]["batches"], last)
                                       for r in ("stateful", "reeval"))
        meds[range_s] = (m, rm)
        states = [got[r]["reports"][-2].buffered for r in ("stateful", "reeval")]
        lines.append(f"| {range_s} s | {m:.3f} s [{lo:.3f}-{hi:.3f}] | {rm:.3f} s "
                     f"[{rlo:.3f}-{rhi:.3f}] | {m / rm:.2f}x | {states[0]:,} / "
                     f"{states[1]:,} |")
        print(lines[-1], f"(engines {got['stateful']['engine']}, {got['reeval']['engine']})",
              flush=True)
    lines += ["", f"5 min / 10 s: state store **{meds[300][0] / meds[10][0]:.2f}x**, "
              f"re-evaluating **{meds[300][1] / meds[10][1]:.2f}x**.", ""]
    return lines


def resample(ws, durations, work: Path, last: int, files: int = 90) -> list[str]:
    folder = work / "events_resample"
    if not folder.exists():
        write_events(folder, files, 500, 20, 10, seed=11)
    sql = "SELECT k, ts, v FROM RESAMPLE({s}, ts, INTERVAL 1 SECOND, 'linear' PARTITION BY k) r"
    lines = ["## RESAMPLE per key: micro-batch time early vs late in the run, state store vs "
             "re-evaluation", "",
             "`RESAMPLE(s, ts, INTERVAL 1 SECOND, 'linear' PARTITION BY k)`; 500 events/s, 20 "
             f"keys, {files} files of 10 s ({files / 6:.0f} min of event time), one file per "
             f"micro-batch; median [min-max] of batches 6-{5 + last} (short history) and of "
             f"the last {last} "
             "(long history), batches with rows (Spark's triggerExecution).", "",
             "| runner | short history | long history | long / short | state rows (short / "
             "long) |", "| --- | --- | --- | --- | --- |"]
    for runner, flag in (("state store", "1"), ("re-evaluating", "0")):
        os.environ["WAVESQL_STATEFUL"] = flag
        try:
            got = run_wavesql(ws, durations, folder, work, sql, f"rs{flag}")
        finally:
            os.environ.pop("WAVESQL_STATEFUL", None)
        b = got["batches"]
        (em, elo, ehi), (lm, llo, lhi) = steady(b[5:5 + last], last), steady(b, last)
        states = [r.buffered for r in got["reports"] if r.rows_in]
        lines.append(f"| {runner} ({got['engine']}) | {em:.3f} s [{elo:.3f}-{ehi:.3f}] | "
                     f"{lm:.3f} s [{llo:.3f}-{lhi:.3f}] | {lm / em:.2f}x | "
                     f"{states[5 + last // 2]:,} / {states[-1]:,} |")
        print(lines[-1], flush=True)
    return lines + [""]


def connect(work: Path):
    """The benchmarks' session: local[2], 2 shuffle partitions, every batch's progress kept
    (Durations reads them at the end)."""
    import wavesql

    return wavesql.connect(master="local[2]", catalog=work / "catalog.db",
                           config={"spark.sql.shuffle.partitions": "2",
                                   "spark.ui.enabled": "false",
                                   "spark.sql.streaming.numRecentProgressUpdates": "100000"})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="sliding,istream,flat")
    parser.add_argument("--hour-files", type=int, default=380)
    parser.add_argument("--windows", default="60,3600",
                        help="the sliding windows' ranges in seconds (3600 needs 380 files)")
    parser.add_argument("--last", type=int, default=20)
    parser.add_argument("--istream-batches", type=int, default=12)
    parser.add_argument("--resample-files", type=int, default=90)
    parser.add_argument("--work", default=None, help="data and checkpoints (default: a temp dir)")
    parser.add_argument("--out", default=None,
                        help="results file (default: results.md, or over_results.md with "
                             "--only over)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.work or tempfile.mkdtemp(prefix="wavesql-streaming-bench-"))
    load0 = os.getloadavg()
    ws = connect(work)
    durations = Durations(ws.spark)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Streaming benchmark, {started}", ""]
    only = args.only.split(",")
    if "sliding" in only:
        lines += sliding(ws, durations, work, args.hour_files, args.last,
                         tuple(int(w) for w in args.windows.split(",")))
    if "istream" in only:
        lines += istream(ws, durations, work, args.istream_batches, min(args.last, 8))
    if "flat" in only:
        lines += flat(ws, durations, work, max(args.hour_files, 180))
    if "over" in only:
        lines += over(ws, durations, work, args.last)
    if "resample" in only:
        lines += resample(ws, durations, work, min(args.last, 15), args.resample_files)
    lines += [f"Machine: {machine.describe(load0, os.getloadavg())}; Spark "
              f"{ws.spark.version}, local[2], 2 shuffle partitions.", ""]
    text = "\n".join(lines)
    print(text)
    default = {"over": "over_results.md", "resample": "resample_results.md"}.get(
        only[0], "results.md") if len(only) == 1 else "results.md"
    Path(args.out or HERE / default).write_text(text)
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
