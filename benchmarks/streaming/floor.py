"""The floor of a state-store design: the sliding count on plain Spark, on a pass-through
``transformWithStateInPandas`` processor, and on WaveSQL, in one run, with each batch's
time broken down.

    python benchmarks/streaming/floor.py [--files 100] [--last 40] [--rounds 2]

Same input as ``run.py``'s sliding part (500 events/s over 20 keys, one Parquet file per
10 s of event time, one file per micro-batch), ``[RANGE 1 MINUTE SLIDE 10 SECONDS]``:

``spark``
    plain Spark Structured Streaming: ``withWatermark`` + ``groupBy(window, k).count()``,
    append mode, Parquet file sink (``run.py``'s).
``floor``
    the least a design on Spark's state store can cost here: the same source and
    watermark, ``groupBy(bucket).transformWithStateInPandas`` (RocksDB, event-time mode,
    as WaveSQL runs it) with a processor that only adds each call's row count to one
    ``ValueState`` and emits it, the same Parquet file sink. ``floor-key`` groups by the
    key itself (20 calls a batch instead of 4 buckets); ``floor-fb`` writes through
    ``foreachBatch`` + ``df.write.parquet`` (WaveSQL's shape of sink) instead.
``wavesql``
    the WaveSQL query (late rows, ``_final``/``_progress``, its batch folders).

Every figure is a median over the last ``--last`` batches with input rows of Spark's own
``durationMs`` parts (``triggerExecution`` and what it is made of); for WaveSQL also the
driver-side parts of its ``foreachBatch`` callback (timed by wrapping the functions it
calls). ``--rounds 2`` runs the systems twice, interleaved, so that a load change on the
shared machine shows.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import machine  # noqa: E402
from run import ROCKSDB, floor_processor, write_events  # noqa: E402

PARTS = ("triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch",
         "walCommit", "commitOffsets")


class Progress:
    """Each query's progress (Spark's ``durationMs`` parts, rows, state metrics), read from
    ``recentProgress`` once the query has ended -- JSON, one call per batch -- and not by a
    Python ``StreamingQueryListener`` (``--listener``): PySpark builds each event's progress
    object field by field over py4j on the driver while the next batch runs, and that
    driver is where WaveSQL's ``foreachBatch`` runs too (``results.md``, 2026-11-29)."""

    def __init__(self, spark, listener: bool = False):
        self.by_query: dict = collections.defaultdict(list)
        self.listener = None
        if listener:
            self._listen(spark)

    def _listen(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        outer = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = event.progress
                outer.by_query[str(p.id)].append(p.batchId)  # (the cost is in event.progress)

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = Listener()
        spark.streams.addListener(self.listener)

    def of(self, query) -> list:
        return sorted(({"batch": p.batchId, "rows": p.numInputRows, "ms": dict(p.durationMs),
                        "ops": [json.loads(o.json) for o in p.stateOperators]}
                       for p in query.recentProgress), key=lambda e: e["batch"])


def tree_cpu(pid: int | None = None) -> float:
    """CPU seconds (user + system, with reaped children) of process ``pid`` and every process
    below it: the driver, Spark's JVM, its Python workers (Linux ``/proc``)."""
    pid = pid or os.getpid()
    parent, times = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo += [c for c, pp in parent.items() if pp == p]
    return total


def run_spark(spark, progress, folder: Path, work: Path, tag: str) -> list:
    from pyspark.sql import functions as F

    out, ck = work / f"out_{tag}", work / f"ck_{tag}"
    for d in (out, ck):
        shutil.rmtree(d, ignore_errors=True)
    src = (spark.readStream.schema("k STRING, v DOUBLE, ts TIMESTAMP")
           .option("maxFilesPerTrigger", 1).parquet(str(folder)))
    agg = (src.withWatermark("ts", "2 seconds")
           .groupBy(F.window("ts", "60 seconds", "10 seconds"), "k").count())
    q = (agg.writeStream.outputMode("append").format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    return progress.of(q)


def run_floor(spark, progress, folder: Path, work: Path, tag: str, by: str,
              sink: str) -> list:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                   "true")
    out, ck = work / f"out_{tag}", work / f"ck_{tag}"
    for d in (out, ck):
        shutil.rmtree(d, ignore_errors=True)
    src = (spark.readStream.schema("k STRING, v DOUBLE, ts TIMESTAMP")
           .option("maxFilesPerTrigger", 1).parquet(str(folder)))
    src = src.withWatermark("ts", "2 seconds")
    group = (F.col("k") if by == "key"
             else F.expr("CAST(pmod(xxhash64(k), 4) AS INT)")).alias("g")
    grouped = src.select(group, "k", "ts").groupBy("g")
    counts = grouped.transformWithStateInPandas(floor_processor(), "g STRING, n LONG", "Append",
                                                "EventTime")
    writer = counts.writeStream.option("checkpointLocation", str(ck))
    if sink == "file":
        writer = writer.outputMode("append").format("parquet").option("path", str(out))
    else:
        def batch(df, batch_id):
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id:09d}"))
        writer = writer.foreachBatch(batch)
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination()
    return progress.of(q)


# -- WaveSQL, with its driver-side parts timed -------------------------------------------
class DriverTimes:
    """Wall time per micro-batch of the functions WaveSQL's ``foreachBatch`` calls."""

    def __init__(self):
        self.batch = threading.local()
        self.times: dict = collections.defaultdict(lambda: collections.defaultdict(float))
        self.patched: list = []

    def wrap(self, owner, name: str, label: str | None = None) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if isinstance(original, property):  # time its getter
            getter = original.fget
            timed_getter = self._timed(getter, label or name)
            setattr(owner, name, property(timed_getter))
            self.patched.append((owner, name, original))
            return
        setattr(owner, name, self._timed(original, label or name))
        self.patched.append((owner, name, original))

    def _timed(self, original, label: str):
        times, local = self.times, self.batch

        @functools.wraps(original)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                b = getattr(local, "id", None)
                if b is not None:
                    times[b][label] += time.perf_counter() - t0

        return timed

    def enter(self, owner, name: str) -> None:
        """``owner.name(self, batch_df, batch_id)``: sets the current batch and is timed."""
        original = getattr(owner, name)
        times, local = self.times, self.batch

        @functools.wraps(original)
        def run(obj, batch_df, batch_id):
            local.id = batch_id
            t0 = time.perf_counter()
            try:
                return original(obj, batch_df, batch_id)
            finally:
                times[batch_id]["callback"] += time.perf_counter() - t0
                local.id = None

        setattr(owner, name, run)
        self.patched.append((owner, name, original))

    def undo(self) -> None:
        for owner, name, original in reversed(self.patched):
            setattr(owner, name, original)
        self.patched.clear()


def instrument() -> DriverTimes:
    from pyspark.sql import Observation

    from wavesql.streaming import files, sinks
    from wavesql.streaming import query as base
    from wavesql.streaming.stateful import query as sq

    t = DriverTimes()
    t.enter(sq.StatefulQuery, "_run_batch")
    for name in ("batch_files", "wait_until_ready", "check_columns", "changed_since_read",
                 "record_read"):
        t.wrap(files, name, f"files.{name}")
    t.wrap(sq, "_unchanged_since_listed")
    t.wrap(sq.StatefulQuery, "_batch_watermark")
    t.wrap(sq.StatefulQuery, "_planned_after")
    t.wrap(sq.StatefulWindowQuery, "_deliver_results", "deliver_results (job)")
    t.wrap(base.ContinuousQuery, "_deliver", "deliver (write + commit)")
    t.wrap(sinks, "parquet_rows")
    t.wrap(sinks, "commit_all", "quarantine commit_all")
    t.wrap(base.ContinuousQuery, "_finish", "finish (_progress record)")
    t.wrap(Observation, "get", "observation.get")
    return t


def run_wavesql(ws, progress, folder: Path, work: Path, tag: str, times: DriverTimes) -> list:
    ws.sql(f"CREATE OR REPLACE STREAM {tag} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    out, ck = work / f"out_{tag}", work / f"ck_{tag}"
    for d in (out, ck):
        shutil.rmtree(d, ignore_errors=True)
    times.times.clear()
    sql = f"SELECT k, count(*) AS n FROM {tag} [RANGE 60 SECONDS SLIDE 10 SECONDS] GROUP BY k"
    cq = ws.stream(sql, out, ck, max_files_per_trigger=1)
    cq.await_termination()
    with_rows = {r.batch for r in cq.reports if r.rows_in}
    events = [e for e in progress.of(cq._query) if e["batch"] in with_rows]
    for e in events:
        e["driver"] = dict(times.times.get(e["batch"], {}))
    return events


def summary(events: list, last: int) -> dict:
    """Median of each part over the last ``last`` batches with rows."""
    data = [e for e in events if e["rows"] > 0 or "driver" in e]
    xs = data[-last:]
    out = {}
    for part in PARTS:
        vals = [e["ms"].get(part, 0) / 1000 for e in xs]
        out[part] = statistics.median(vals)
    out["min"] = min(e["ms"]["triggerExecution"] for e in xs) / 1000
    out["max"] = max(e["ms"]["triggerExecution"] for e in xs) / 1000
    out["n"] = len(xs)
    out["batches"] = len(data)
    out["other"] = out["triggerExecution"] - sum(out[p] for p in PARTS[1:])
    driver = collections.defaultdict(list)
    for e in xs:
        for k, v in e.get("driver", {}).items():
            driver[k].append(v)
    out["driver"] = {k: statistics.median(v + [0.0] * (len(xs) - len(v)))
                     for k, v in driver.items()}
    ops = [o for e in xs for o in e["ops"]]
    if ops:
        keys = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")
        out["state"] = {k: statistics.median(o.get(k, 0) for o in ops) / 1000 for k in keys}
    return out


def table(results: dict) -> list[str]:
    names = list(results)
    lines = ["| part (median s) | " + " | ".join(names) + " |",
             "| --- |" + " --- |" * len(names)]
    for part in PARTS + ("other",):
        lines.append(f"| {part} | " + " | ".join(f"{results[n][part]:.3f}" for n in names)
                     + " |")
    lines.append("| CPU s per batch (whole run, all processes) | " + " | ".join(
        f"{results[n]['cpu']:.3f}" for n in names) + " |")
    lines.append("| min-max triggerExecution | " + " | ".join(
        f"{results[n]['min']:.3f}-{results[n]['max']:.3f}" for n in names) + " |")
    state_keys = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")
    for k in state_keys:
        lines.append(f"| state store {k} | " + " | ".join(
            f"{results[n]['state'][k]:.3f}" if "state" in results[n] else "-" for n in names)
                     + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--last", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="spark,floor,floor-key,floor-fb,wavesql")
    parser.add_argument("--work", default=None)
    parser.add_argument("--json", default=None, help="also write the raw events here")
    parser.add_argument("--listener", action="store_true",
                        help="also run a Python StreamingQueryListener (as run.py did)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import wavesql

    work = Path(args.work or tempfile.mkdtemp(prefix="wavesql-floor-"))
    folder = work / "events"
    if not folder.exists():
        write_events(folder, args.files, 500, 20, 10)
    load0 = os.getloadavg()
    ws = wavesql.connect(master="local[2]", catalog=work / "catalog.db",
                         config={"spark.sql.shuffle.partitions": "2",
                                 "spark.ui.enabled": "false",
                                 "spark.sql.streaming.numRecentProgressUpdates": "100000"})
    progress = Progress(ws.spark, args.listener)
    times = instrument()
    results: dict = {}
    raw: dict = {}
    for r in range(args.rounds):
        for system in args.only.split(","):
            tag = f"{system.replace('-', '_')}_{r}"
            t0, cpu0 = time.time(), tree_cpu()
            if system == "spark":
                ev = run_spark(ws.spark, progress, folder, work, tag)
            elif system.startswith("floor"):
                ev = run_floor(ws.spark, progress, folder, work, tag,
                               "key" if system == "floor-key" else "bucket",
                               "foreachBatch" if system == "floor-fb" else "file")
            else:
                ev = run_wavesql(ws, progress, folder, work, tag, times)
            name = system if args.rounds == 1 else f"{system} #{r + 1}"
            results[name] = summary(ev, args.last)
            results[name]["cpu"] = (tree_cpu() - cpu0) / max(results[name]["batches"], 1)
            raw[name] = ev
            print(f"{name}: {results[name]['triggerExecution']:.3f} s "
                  f"[{results[name]['min']:.3f}-{results[name]['max']:.3f}] over "
                  f"{results[name]['n']} of {results[name]['batches']} batches, wall "
                  f"{time.time() - t0:.0f} s, CPU {results[name]['cpu']:.3f} s per batch "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    times.undo()
    lines = table(results)
    for name, res in results.items():
        if res["driver"]:
            lines += ["", f"{name}, inside foreachBatch (median s per batch):", ""]
            lines += [f"- {k}: {v:.4f}" for k, v in sorted(res["driver"].items(),
                                                            key=lambda kv: -kv[1])]
    lines += ["", f"Machine: {machine.describe(load0, os.getloadavg())}; Spark "
              f"{ws.spark.version}, local[2], 2 shuffle partitions."]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "raw": raw}, default=str))
    if progress.listener is not None:
        ws.spark.streams.removeListener(progress.listener)
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
