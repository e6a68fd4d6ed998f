"""Kafka in, continuously: a windowed query at a fixed input rate, WaveSQL vs plain Spark,
and a threshold alarm in Spark's real-time mode.

    python benchmarks/kafka/run.py [--rate 20000] [--seconds 300] [--only windowed,realtime]

A real broker (tests/kafka_broker.py: Kafka's own jars, one KRaft node) on loopback, a
4-partition topic, and a producer in a process of its own sending JSON events
``{k, v, ts}`` at ``--rate`` per second (100 keys, ``ts`` = the wall clock at sending, so
event time is arrival time). Every figure is from one run, both peers in one process and
one Spark session (``local[2]``), one after the other on fresh topics, written to
results.md.

``windowed``
    ``SELECT k, count(*), avg(v) FROM ev [RANGE 10 SECONDS SLIDE 1 SECOND] GROUP BY k`` with
    ``WATERMARK 1 SECOND`` and a 1-second trigger, for ``--seconds``: on WaveSQL (``ws.stream``
    to a Parquet folder: late rows captured, ``_final``/``_progress`` on every row) and on
    plain Spark Structured Streaming in its idiomatic form (``withWatermark`` +
    ``groupBy(window(ts, '10 seconds', '1 second'), k).agg(count, avg)``, append mode, each
    micro-batch written as Parquet by ``foreachBatch``, which notes when). A result row's
    **arrival-to-sink latency** is the wall time its batch was written minus the time its
    window could first be closed -- the window's end plus the watermark, when the event
    that closes it arrives (event time is arrival time here). Reported: input rows/s over
    the run, latency p50/p99/max over the result rows of the second half of the run, and
    the state (bytes, as each system reports it) at the quarter marks.
``realtime``
    ``SELECT k, v, ts FROM ev WHERE v >= 99`` (1% of the events) from the topic to a Kafka
    sink in Spark's real-time mode (``trigger='real-time 5 seconds'``) for ``--rt-seconds``;
    a record's latency is its Kafka timestamp in the alarm topic (set by Spark's producer
    when it sent it) minus the input record's (set by ours when it sent it), over the
    alarms of the second half. Target (issue 24): p99 under 100 ms.

``signal``
    A 48 kHz x 4-channel signal published in real time as 0.1-s sample blocks (4,800
    frames, the README's wire format) over 4 partitions for ``--signal-seconds``, the
    signal's EPOCH set so that a sample's time is the wall clock when its block leaves; a
    continuous ``SELECT start_time(c1), seg_rms(c1), seg_rms(c4), lowpass(c2, 1000.0) FROM
    mic [SAMPLES 4800]`` (trigger every second, the filter's state carried). Reported:
    samples/s, windows, latency from a window's last sample to its row in the sink (second
    half), state bytes. WaveSQL only: plain Spark has no sample-block reader or carried
    filter state to compare with.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import machine  # noqa: E402

from tests.kafka_broker import KafkaBroker  # noqa: E402

HERE = Path(__file__).resolve().parent
WATERMARK_S = 1


def produce(bootstrap: str, topic: str, rate: int, seconds: float, ready, stop) -> None:
    """Send ``rate`` events per second for ``seconds`` (in 10 ms slices), ``ts`` = now."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0,
                         "queue.buffering.max.messages": 2_000_000})
    rng = np.random.default_rng(0)
    ready.set()
    began = time.time()
    sent = 0
    while time.time() - began < seconds and not stop.is_set():
        due = int((time.time() - began) * rate)
        while sent < due:
            now = time.time()
            k = int(rng.integers(0, 100))
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now)) + \
                f".{int(now * 1e6) % 1_000_000:06d}"
            value = json.dumps({"k": f"k{k}", "v": int(rng.integers(0, 100)), "ts": stamp})
            try:
                producer.produce(topic, key=f"k{k}", value=value, partition=sent % 4)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)
        time.sleep(0.01)
    producer.flush(60)


def _producing(broker, topic, rate, seconds):
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=produce, args=(broker.bootstrap, topic, rate, seconds, ready,
                                             stop), daemon=True)
    proc.start()
    ready.wait(60)
    return proc, stop


def _percentiles(values) -> str:
    v = np.asarray(values, dtype=float)
    if not len(v):
        return "n/a"
    return (f"p50 {np.percentile(v, 50):.2f} s, p99 {np.percentile(v, 99):.2f} s, "
            f"max {v.max():.2f} s")


def windowed_wavesql(ws, broker, rate, seconds, work: Path) -> dict:
    from wavesql.streaming.metrics import read_reports

    topic = broker.create_topic(f"ev_ws_{int(time.time())}", 4)
    ws.sql(f"CREATE OR REPLACE STREAM ev (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{broker.bootstrap}', starting = 'earliest') FORMAT json "
           f"EVENT TIME ts WATERMARK {WATERMARK_S} SECOND")
    sql = ("SELECT k, count(*) AS n, avg(v) AS a FROM ev [RANGE 10 SECONDS SLIDE 1 SECOND] "
           "GROUP BY k")
    out = work / "ws_out"
    proc, stop = _producing(broker, topic, rate, seconds)
    began = time.time()
    cq = ws.stream(sql, out, work / "ws_ckpt", trigger="every 1 second")
    proc.join(seconds + 120)
    time.sleep(5)  # the last records through
    cq.stop()
    elapsed = time.time() - began
    reports = sorted(read_reports(out), key=lambda r: r["batch"])
    finished = {r["batch"]: r["finished_at"] for r in reports}
    spark = ws.spark
    rows = spark.read.parquet(str(out)).select("_time", "batch").collect()
    half = began + seconds / 2
    latency = [finished[r.batch] - (r._time.replace(tzinfo=dt.timezone.utc).timestamp()
                                    + WATERMARK_S)
               for r in rows if r.batch in finished and finished[r.batch] > half]
    rows_in = sum(r["rows_in"] for r in reports)
    states = [r["state_bytes"] for r in reports]
    marks = [states[int(len(states) * q) - 1] for q in (0.25, 0.5, 0.75, 1.0)] if states else []
    return {"rows_in": rows_in, "rate": rows_in / elapsed, "latency": latency,
            "state": marks, "batches": len(reports), "late": sum(r["late"] for r in reports)}


def windowed_spark(spark, broker, rate, seconds, work: Path) -> dict:
    from pyspark.sql import functions as F

    topic = broker.create_topic(f"ev_sp_{int(time.time())}", 4)
    written: dict[int, float] = {}

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(str(work / "sp_out" / f"batch={batch_id}"))
        written[batch_id] = time.time()

    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers",
                                                      broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "k STRING, v INT, ts TIMESTAMP").alias("e")).select("e.*"))
    counts = (events.withWatermark("ts", f"{WATERMARK_S} second")
              .groupBy(F.window("ts", "10 seconds", "1 second"), "k")
              .agg(F.count(F.lit(1)).alias("n"), F.avg("v").alias("a")))
    proc, stop = _producing(broker, topic, rate, seconds)
    began = time.time()
    query = (counts.writeStream.outputMode("append").foreachBatch(sink)
             .option("checkpointLocation", str(work / "sp_ckpt"))
             .trigger(processingTime="1 second").start())
    proc.join(seconds + 120)
    time.sleep(5)
    progress = list(query.recentProgress)
    query.stop()
    elapsed = time.time() - began
    half = began + seconds / 2
    latency = []
    for batch_id, at in written.items():
        if at <= half:
            continue
        path = work / "sp_out" / f"batch={batch_id}"
        if not path.exists():
            continue
        for r in spark.read.parquet(str(path)).select("window.end").collect():
            end = r.end.replace(tzinfo=dt.timezone.utc).timestamp()
            latency.append(at - (end + WATERMARK_S))
    rows_in = sum(p["numInputRows"] for p in progress)
    states = [sum(op.get("memoryUsedBytes", 0) for op in p.get("stateOperators", []))
              for p in progress]
    marks = [states[int(len(states) * q) - 1] for q in (0.25, 0.5, 0.75, 1.0)] if states else []
    return {"rows_in": rows_in, "rate": rows_in / elapsed, "latency": latency,
            "state": marks, "batches": len(progress)}


def realtime(ws, broker, rate, seconds, work: Path) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    topic = broker.create_topic(f"ev_rt_{int(time.time())}", 4)
    alarms = broker.create_topic(f"alarm_rt_{int(time.time())}", 1)
    ws.sql(f"CREATE OR REPLACE STREAM ev (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{broker.bootstrap}', starting = 'latest') FORMAT json "
           f"EVENT TIME ts WATERMARK {WATERMARK_S} SECOND")
    ws.sql(f"CREATE OR REPLACE SINK alarms TO KAFKA '{alarms}' OPTIONS (bootstrap = "
           f"'{broker.bootstrap}') FORMAT json")
    cq = ws.stream("SELECT k, v, ts, _timestamp AS sent FROM ev WHERE v >= 99", "alarms",
                   work / "rt_ckpt", trigger="real-time 5 seconds")
    time.sleep(10)  # the real-time query is reading before the first record
    proc, stop = _producing(broker, topic, rate, seconds)
    began = time.time()
    proc.join(seconds + 120)
    time.sleep(10)
    cq.stop()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                         "auto.offset.reset": "earliest", "log_level": 0})
    consumer.assign([TopicPartition(alarms, 0, 0)])
    latency, idle = [], time.time()
    while time.time() - idle < 5:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        idle = time.time()
        sent = json.loads(msg.value())["sent"]
        sent_s = dt.datetime.fromisoformat(sent.rstrip("Z")).replace(
            tzinfo=dt.timezone.utc).timestamp()
        if sent_s > began + seconds / 2:
            latency.append(msg.timestamp()[1] / 1000.0 - sent_s)
    consumer.close()
    return {"latency": latency, "alarms": len(latency)}


SIGNAL_RATE, SIGNAL_CHANNELS, BLOCK = 48_000, 4, 4_800


def produce_signal(bootstrap: str, topic: str, epoch: float, seconds: float, ready) -> None:
    """Send a 48 kHz x 4-channel signal as 0.1-s blocks in real time: block i (samples
    i*4800 ..) leaves when the wall clock reaches ``epoch`` + its end, in partition i % 4."""
    import struct

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "log_level": 0})
    rng = np.random.default_rng(1)
    t = np.arange(BLOCK) / SIGNAL_RATE
    ready.set()
    for i in range(int(seconds * SIGNAL_RATE / BLOCK)):
        due = epoch + (i + 1) * BLOCK / SIGNAL_RATE
        time.sleep(max(0.0, due - time.time()))
        x = np.vstack([np.sin(2 * np.pi * (100 + 400 * c) * (t + i * BLOCK / SIGNAL_RATE))
                       + 0.1 * rng.standard_normal(BLOCK) for c in range(SIGNAL_CHANNELS)])
        head = struct.pack("<4sHHqII", b"WSB1", SIGNAL_CHANNELS, 0, i * BLOCK, BLOCK, 0)
        producer.produce(topic, value=head + x.T.astype("<f4").tobytes(), partition=i % 4)
        producer.poll(0)
    producer.produce(topic, value=struct.pack("<4sHHqII", b"WSB1", SIGNAL_CHANNELS, 0,
                                              int(seconds * SIGNAL_RATE), 0, 0), partition=0)
    producer.flush(60)


def signal(ws, broker, seconds, work: Path) -> dict:
    """The signal topic under a continuous window query with a stateful filter."""
    from wavesql.streaming.metrics import read_reports

    topic = broker.create_topic(f"mic_{int(time.time())}", 4)
    epoch = float(int(time.time()) + 20)  # a whole second, after the query has started
    stamp = dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    channels = ", ".join(f"c{i + 1} FLOAT" for i in range(SIGNAL_CHANNELS))
    ws.sql(f"CREATE OR REPLACE SIGNAL mic ({channels}) RATE {SIGNAL_RATE} HZ FROM KAFKA "
           f"'{topic}' OPTIONS (bootstrap = '{broker.bootstrap}') FORMAT samples "
           f"EPOCH '{stamp}'")
    sql = ("SELECT start_time(c1) AS t, seg_rms(c1) AS r1, seg_rms(c4) AS r4, "
           "lowpass(c2, 1000.0) AS lp FROM mic [SAMPLES 4800]")
    out = work / "sig_out"
    cq = ws.stream(sql, out, work / "sig_ckpt", trigger="every 1 second")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=produce_signal, args=(broker.bootstrap, topic, epoch, seconds,
                                                    ready), daemon=True)
    proc.start()
    proc.join(seconds + 120)
    time.sleep(5)
    cq.stop()
    if cq.error is not None:
        raise cq.error
    reports = sorted(read_reports(out), key=lambda r: r["batch"])
    finished = {r["batch"]: r["finished_at"] for r in reports}
    rows = ws.spark.read.parquet(str(out)).select("t", "batch").collect()
    half = epoch + seconds / 2
    latency = [finished[r.batch] - (r.t.replace(tzinfo=dt.timezone.utc).timestamp()
                                    + BLOCK / SIGNAL_RATE)
               for r in rows if r.batch in finished
               and r.t.replace(tzinfo=dt.timezone.utc).timestamp() > half]
    samples = sum(r["samples_in"] for r in reports)
    states = [r["state_bytes"] for r in reports]
    marks = [states[int(len(states) * q) - 1] for q in (0.25, 0.5, 0.75, 1.0)] if states else []
    return {"samples": samples, "rate": samples / seconds, "windows": len(rows),
            "latency": latency, "state": marks, "batches": len(reports),
            "quarantined": sum(r["quarantined"] for r in reports)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--rt-seconds", type=int, default=120)
    parser.add_argument("--signal-seconds", type=int, default=120)
    parser.add_argument("--only", default="windowed,realtime,signal")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import wavesql

    work = Path(tempfile.mkdtemp(prefix="wavesql-bench-kafka-"))
    load0 = os.getloadavg()
    lines = [f"# Kafka benchmark ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/kafka/run.py --rate {args.rate} --seconds {args.seconds} "
             f"--rt-seconds {args.rt_seconds} --signal-seconds {args.signal_seconds} "
             f"--only {args.only}`; one run.", ""]
    with KafkaBroker(work / "broker") as broker:
        ws = wavesql.connect(master="local[2]", catalog=str(work / "catalog.db"), config={
            "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
            # every batch's progress kept (Spark's default: the last 100), for its rows/s
            "spark.sql.streaming.numRecentProgressUpdates": "100000"})
        only = args.only.split(",")
        if "windowed" in only:
            w = windowed_wavesql(ws, broker, args.rate, args.seconds, work)
            s = windowed_spark(ws.spark, broker, args.rate, args.seconds, work)
            p99 = [np.percentile(r["latency"], 99) if r["latency"] else float("nan")
                   for r in (w, s)]
            lines += [
                f"## Windowed aggregate, {args.rate:,} events/s for {args.seconds} s, "
                "1-second trigger", "",
                "| | input rows/s | micro-batches | latency (2nd half) | state bytes at "
                "25/50/75/100% |", "|---|---|---|---|---|",
                f"| WaveSQL | {w['rate']:,.0f} | {w['batches']} | {_percentiles(w['latency'])} "
                f"| {' / '.join(f'{b:,}' for b in w['state'])} |",
                f"| Spark | {s['rate']:,.0f} | {s['batches']} | {_percentiles(s['latency'])} "
                f"| {' / '.join(f'{b:,}' for b in s['state'])} |", "",
                f"p99 latency WaveSQL / Spark: **{p99[0] / p99[1]:.2f}x** (target <= 1.5x); "
                f"WaveSQL late rows: {w['late']}. Input rows/s: the rows each system "
                f"reports it read over the run's wall time (WaveSQL's `_progress` records, "
                f"Spark's progress of every batch).", ""]
        if "realtime" in only:
            r = realtime(ws, broker, args.rate, args.rt_seconds, work)
            v = np.asarray(r["latency"]) * 1000
            figures = (f"p50 {np.percentile(v, 50):.1f} ms, p99 {np.percentile(v, 99):.1f} ms, "
                       f"max {v.max():.1f} ms" if len(v) else "n/a")
            lines += [f"## Real-time mode: threshold alarm, {args.rate:,} events/s for "
                      f"{args.rt_seconds} s", "",
                      f"{r['alarms']:,} alarms in the second half; arrival-to-sink latency "
                      f"{figures} (target: p99 < 100 ms).", ""]
        if "signal" in only:
            g = signal(ws, broker, args.signal_seconds, work)
            lines += [f"## Signal topic: 48 kHz x 4 channels in 0.1-s blocks, real time, "
                      f"{args.signal_seconds} s, 1-second trigger", "",
                      f"`seg_rms` of two channels and a `lowpass` (state carried) per "
                      f"4,800-sample window: {g['samples']:,} samples per channel in "
                      f"{g['batches']} micro-batches ({g['rate']:,.0f} samples/s per channel, "
                      f"{g['rate'] * SIGNAL_CHANNELS:,.0f} in all), {g['windows']:,} windows; "
                      f"latency from a window's last sample to its row in the sink "
                      f"(second half): {_percentiles(g['latency'])}; state bytes at "
                      f"25/50/75/100%: {' / '.join(f'{b:,}' for b in g['state'])}; "
                      f"quarantined blocks: {g['quarantined']}. WaveSQL only: plain Spark "
                      f"has no sample-block reader or carried filter state to compare with.",
                      ""]
        ws.close()
    lines += [f"Machine: {machine.describe(load0, os.getloadavg())}.", ""]
    text = "\n".join(lines)
    (HERE / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
