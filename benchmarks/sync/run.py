"""WaveSQL SYNC benchmark (issue 5): DETECTAUDIO with SYNC vs a per-sample interval join.

    python benchmarks/sync/run.py [--seconds 120] [--reps 3] [--only a,b,c,d,e,scan,plan]

One 4-channel 48 kHz recording (``wavesql.datasets.array_recording``, tone bursts at known
times in noise and hum) is written once as WAV files (what WaveSQL reads) and as Parquet
with one row per sample ``(n BIGINT, t TIMESTAMP, ch1..ch4 FLOAT)`` (what the peers read).
Every variant answers the same question -- for every event, the samples of ch1..ch4 in
``[t_from - 5 ms, t_to + 5 ms)`` -- and hands the driver, per event and channel, the first
sample number, the number of samples, their sum and their position-weighted sum
(``sum((i + 1) * x[i])``, which also checks the order). Each variant's answer (of its last
run) is checked against a numpy oracle over the WAV samples; a disagreement is printed
loudly, marked in the table, and makes the script exit with status 1.

Variants (README.md says which comparisons are fair):

  a        WaveSQL: examples/detectaudio.wsql as shipped (detector + SYNC), end to end
  b        WaveSQL: the ``events`` view alone (detector, no SYNC)
  c        WaveSQL: SYNC alone over the events precomputed into Parquet
  d        Spark SQL: the precomputed events joined to the per-sample Parquet with
           ``s.t >= e.t_from - INTERVAL 5 ms AND s.t < e.t_to + INTERVAL 5 ms``, lists per event
  e        DuckDB: the same interval join and lists over the same Parquet files
  scan     WaveSQL: the 4 channels' stored segments into the JVM, nothing else (part of c)
  plan     WaveSQL: ``ws.sql`` of c's text alone -- parse, bind, lower, no Spark job (part of c)

Each variant runs once as a warm-up, then ``--reps`` timed runs; medians are reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RATE = 48_000
CHANNELS = ("ch1", "ch2", "ch3", "ch4")
PAD_US = 5_000  # the query's 5 ms either side of an event
ROW_GROUP = 1 << 20
_VERSION = 1  # bump when the data layout changes: old caches are regenerated
VARIANTS = ("a", "b", "c", "d", "d2", "e", "scan", "plan")
STAGES = ("scan", "plan")  # parts of c, not answers: no samples/s
TITLES = {
    "a": ("WaveSQL local[2]", "detector + SYNC (examples/detectaudio.wsql, as shipped)",
          "WAV files"),
    "b": ("WaveSQL local[2]", "detector only (the `events` view, no SYNC)", "WAV files"),
    "c": ("WaveSQL local[2]", "SYNC only, events precomputed", "WAV files + events Parquet"),
    "d": ("Spark SQL local[2]", "per-sample interval join, events precomputed",
          "Parquet, row per sample"),
    "d2": ("Spark SQL local[2]", "per-sample interval join binned: equi-join on 100 ms bins "
           "plus the range, events precomputed", "Parquet, row per sample"),
    "e": ("DuckDB, 2 threads", "per-sample interval join, events precomputed",
          "Parquet, row per sample"),
    "scan": ("WaveSQL local[2]", "part of c: 4 channels' segments into the JVM, no join",
             "WAV files"),
    "plan": ("WaveSQL", "part of c: `ws.sql(text)` alone (parse, bind, lower; no job)", "—"),
}


# ---------------------------------------------------------------------------- data
def dataset(seconds: float, per_minute: float, cache: Path) -> dict:
    """Write (once) the WAV files and the per-sample Parquet; returns the meta."""
    root = cache / f"s{seconds:g}"
    meta_path = root / "meta.json"
    events = max(1, round(seconds * per_minute / 60))
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("version") == _VERSION and meta.get("true_events") == events:
            return meta
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wavesql.datasets import array_recording

    t0 = time.perf_counter()
    truth = array_recording(root / "wav", seconds=seconds, rate=RATE, events=events,
                            file_seconds=60.0)
    x = truth.samples
    writer = pq.ParquetWriter(root / "samples.parquet", pa.schema(
        [("n", pa.int64()), ("t", pa.timestamp("us", tz="UTC"))]
        + [(c, pa.float32()) for c in CHANNELS]), compression="snappy", use_dictionary=False)
    for lo in range(0, truth.frames, ROW_GROUP):
        n = np.arange(lo, min(lo + ROW_GROUP, truth.frames), dtype=np.int64)
        # t rounded *down* to the microsecond (exact in integers): then t >= a is
        # n >= ceil(a * rate), WaveSQL's sample_at rule, for any microsecond bound a.
        t = (n * 1_000_000) // RATE
        writer.write_table(pa.table({"n": n, "t": pa.array(t, pa.timestamp("us", tz="UTC")),
                                     **{c: x[lo:lo + len(n), i] for i, c in
                                        enumerate(CHANNELS)}}), row_group_size=ROW_GROUP)
    writer.close()
    meta = {"version": _VERSION, "seconds": seconds, "rate": RATE, "frames": truth.frames,
            "true_events": events, "event_starts": truth.event_starts,
            "event_length": truth.event_length, "delays": list(truth.delays),
            "wav": str(root / "wav") + "/", "files": len(truth.files),
            "samples": str(root / "samples.parquet"), "events": str(root / "events"),
            "generated_s": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"data: {seconds:g} s = {truth.frames:,} frames x 4 channels, {events} bursts, "
          f"{len(truth.files)} WAV files + per-sample Parquet in {meta['generated_s']} s "
          f"({root})", flush=True)
    return meta


def recorded_samples(meta: dict) -> np.ndarray:
    """The samples exactly as stored in the WAV files, ``(frames, 4)`` float32."""
    from wavesql.udfs.wav import read_frames, read_info

    files = sorted(Path(meta["wav"]).glob("array_*.wav"))
    return np.concatenate([read_frames(read_info(f)) for f in files])


def write_events(rows, path: str) -> None:
    """The detected events (event, t_from, t_to) as one Parquet file in folder ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    rows = sorted(rows)
    pq.write_table(pa.table({
        "event": pa.array([r[0] for r in rows], pa.int64()),
        "t_from": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
        "t_to": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC"))}),
        os.path.join(path, "events.parquet"))


def micros(t) -> int:
    """A timestamp from Spark (naive, UTC session) or DuckDB/pyarrow (aware) in microseconds."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def sample_at(us: int) -> int:
    return -((-us * RATE) // 1_000_000)  # wavesql.udfs.sigseg.sample_at, integer rate


def oracle(events: list[tuple], x: np.ndarray) -> dict:
    """numpy's answer: per event, per channel (first sample, count, sum, weighted sum)."""
    out = {}
    for event, t_from, t_to in events:
        s0, s1 = sample_at(micros(t_from) - PAD_US), sample_at(micros(t_to) + PAD_US)
        block = x[s0:s1].astype(np.float64)
        w = np.arange(1, s1 - s0 + 1, dtype=np.float64)
        out[int(event)] = tuple((s0, s1 - s0, float(block[:, i].sum()), float(w @ block[:, i]))
                                for i in range(len(CHANNELS)))
    return out


def detection_quality(events: list[tuple], meta: dict) -> dict:
    """How the detector's events line up with the bursts written (channel 1's time)."""
    spans = [(sample_at(micros(a)), sample_at(micros(b))) for _, a, b in events]
    length = meta["event_length"]
    found = sum(any(s0 < b + length and s1 > b for s0, s1 in spans)
                for b in meta["event_starts"])
    false = sum(not any(s0 < b + length and s1 > b for b in meta["event_starts"])
                for s0, s1 in spans)
    return {"bursts": len(meta["event_starts"]), "found": found, "events": len(events),
            "false_alarms": false}


# ---------------------------------------------------------------------------- answers
def spark_reductions(first: str, lists: dict[str, str]) -> list[str]:
    """Spark SQL expressions of the answer over per-channel ``array<float>`` expressions."""
    out = [f"{first} AS first"]
    for c, arr in lists.items():
        out += [f"size({arr}) AS {c}_n",
                f"aggregate({arr}, 0D, (a, x) -> a + x) AS {c}_sum",
                f"aggregate({arr}, named_struct('i', 0D, 's', 0D), (a, x) -> named_struct("
                f"'i', a.i + 1, 's', a.s + (a.i + 1) * x), a -> a.s) AS {c}_wsum"]
    return out


def to_answer(rows) -> dict:
    """Rows ``(event, first, ch1_n, ch1_sum, ch1_wsum, ch2_n, ...)`` -> the oracle's form."""
    out = {}
    for r in rows:
        r = tuple(r)
        event, first, rest = int(r[0]), int(r[1]), r[2:]
        out[event] = tuple((first, int(rest[3 * i]), float(rest[3 * i + 1]),
                            float(rest[3 * i + 2])) for i in range(len(CHANNELS)))
    return out


def compare(got: dict, want: dict, rel: float = 1e-7) -> str | None:
    """None when ``got`` equals the oracle (sums to float tolerance), else the first
    difference in words."""
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return (f"{len(got)} events vs {len(want)} in the oracle; missing {missing[:5]}, "
                f"extra {extra[:5]}")
    for ev in sorted(want):
        for c, g, w in zip(CHANNELS, got[ev], want[ev]):
            if g[:2] != w[:2]:
                return (f"event {ev} {c}: samples [{g[0]}, {g[0] + g[1]}) vs "
                        f"[{w[0]}, {w[0] + w[1]}) in the oracle")
            for name, a, b in (("sum", g[2], w[2]), ("weighted sum", g[3], w[3])):
                if not abs(a - b) <= rel * max(1.0, abs(b)):
                    return f"event {ev} {c}: {name} {a!r} vs {b!r} in the oracle"
    return None


# ---------------------------------------------------------------------------- the queries
def detectaudio_text(wav_dir: str) -> tuple[list[str], str]:
    """examples/detectaudio.wsql split into its setup statements and its final SELECT, the
    signal pointed at ``wav_dir``."""
    text = (ROOT / "examples" / "detectaudio.wsql").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    stmts = [s.strip() for s in body.split(";") if s.strip()]
    assert "'data/array/'" in stmts[0], stmts[0]
    stmts[0] = stmts[0].replace("'data/array/'", f"'{wav_dir}'")
    assert stmts[-1].upper().startswith("SELECT"), stmts[-1]
    return stmts[:-1], stmts[-1]


def sync_only_text(full: str) -> str:
    """The example's SYNC SELECT over the precomputed events instead of the detector's."""
    assert "FROM events e" in full
    return full.replace("FROM events e", "FROM events_fixed e")


def spark_sql_text() -> str:
    """What a Spark SQL user writes: the interval join, each event's rows in sample order."""
    lists = {c: f"transform(r, x -> x.{c})" for c in CHANNELS}
    return (f"SELECT event, {', '.join(spark_reductions('r[0].n', lists))} FROM ("
            "SELECT e.event, array_sort(collect_list(struct(s.n, s.ch1, s.ch2, s.ch3, s.ch4))) "
            "AS r FROM ev e JOIN samples s "
            "ON s.t >= e.t_from - INTERVAL 5 MILLISECONDS AND s.t < e.t_to + INTERVAL 5 "
            "MILLISECONDS GROUP BY e.event) q")


#: d2's bins (microseconds): an event's padded range (30 ms) spans one or two of them.
BIN_US = 100_000


def spark_binned_text() -> str:
    """The interval join in Spark's idiomatic form for a range join: each event exploded to
    the bins its range overlaps, equi-joined with the samples' bin (a broadcast hash join:
    the events are few), the range predicate on top. Each sample is in one bin, so no
    sample meets an event twice."""
    lists = {c: f"transform(r, x -> x.{c})" for c in CHANNELS}
    lo = "unix_micros(t_from - INTERVAL 5 MILLISECONDS)"
    hi = "unix_micros(t_to + INTERVAL 5 MILLISECONDS) - 1"
    return (f"SELECT event, {', '.join(spark_reductions('r[0].n', lists))} FROM ("
            "SELECT e.event, array_sort(collect_list(struct(s.n, s.ch1, s.ch2, s.ch3, s.ch4))) "
            "AS r FROM (SELECT event, t_from, t_to, explode(sequence("
            f"floor({lo} / {BIN_US}), floor(({hi}) / {BIN_US}))) AS bin FROM ev) e "
            f"JOIN (SELECT *, floor(unix_micros(t) / {BIN_US}) AS bin FROM samples) s "
            "ON s.bin = e.bin AND s.t >= e.t_from - INTERVAL 5 MILLISECONDS "
            "AND s.t < e.t_to + INTERVAL 5 MILLISECONDS GROUP BY e.event) q")


def duckdb_text() -> str:
    red = []
    for c in CHANNELS:
        red += [f"len({c}) AS {c}_n", f"list_sum({c}::DOUBLE[]) AS {c}_sum",
                f"list_sum(list_transform({c}, lambda x, i: x::DOUBLE * i)) AS {c}_wsum"]
    lists = ", ".join(f"list(s.{c} ORDER BY s.n) AS {c}" for c in CHANNELS)
    return (f"SELECT event, first, {', '.join(red)} FROM ("
            f"SELECT e.event, min(s.n) AS first, {lists} FROM ev e JOIN samples s "
            "ON s.t >= e.t_from - INTERVAL 5 MILLISECOND AND s.t < e.t_to + INTERVAL 5 "
            "MILLISECOND GROUP BY e.event) q")


# ---------------------------------------------------------------------------- timing
class Bench:
    def __init__(self, reps: int, warmup: int, want: dict, scanned: int, spark=None):
        self.reps, self.warmup, self.want, self.scanned = reps, warmup, want, scanned
        self.rows: dict[str, dict] = {}
        self.spark = spark  # Spark jobs are labelled "<variant>#<rep>" for the event log

    def _label(self, text: str) -> None:
        if self.spark is not None:
            self.spark.sparkContext.setJobDescription(text)

    def run(self, key: str, fn, check: bool = True) -> dict:
        system, what, layout = TITLES[key]
        row = {"key": key, "system": system, "what": what, "layout": layout, "times": [],
               "median": None, "events": None, "check": None, "error": None}
        print(f"-- {key}: {system} | {what} | {layout} ...", flush=True)
        try:
            for i in range(self.warmup):
                self._label(f"{key}#warmup{i}")
                got = fn()
            for i in range(self.reps):
                self._label(f"{key}#{i}")
                t0 = time.perf_counter()
                got = fn()
                row["times"].append(time.perf_counter() - t0)
            row["median"] = statistics.median(row["times"])
            if check:
                row["events"] = len(got)
                row["check"] = compare(got, self.want) or "ok"
        except Exception as err:  # noqa: BLE001 - one failing variant must not stop the rest
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            traceback.print_exc(limit=4)
        self._label(None)
        self.rows[key] = row
        if row["error"]:
            print(f"   FAILED: {row['error']}", flush=True)
        else:
            times = ", ".join(f"{t:.2f}" for t in row["times"])
            print(f"   median {row['median']:.3f} s ({times}) = "
                  f"{self.scanned / row['median'] / 1e6:.1f} Msamples/s; check: "
                  f"{row['check']}", flush=True)
            if row["check"] not in (None, "ok"):
                print(f"   !!!!!!!! MISMATCH: {key} ({what}) disagrees with the oracle: "
                      f"{row['check']} !!!!!!!!", flush=True)
        return row


# ---------------------------------------------------------------------------- stages
def stage_log(logdir: str) -> dict[str, list[dict]]:
    """Spark's event log (written once the session stops) -> the stages each labelled run
    ("<variant>#<rep>") ran: what they do (their operators), tasks, wall time, shuffle."""
    files = [p for p in Path(logdir).iterdir() if p.is_file()]
    if not files:
        return {}
    jobs, stages = {}, {}
    with open(max(files, key=lambda p: p.stat().st_mtime)) as fh:
        for line in fh:
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                label = (ev.get("Properties") or {}).get("spark.job.description")
                if label:
                    for sid in ev["Stage IDs"]:
                        jobs[sid] = label
            elif kind == "SparkListenerStageCompleted":
                info = ev["Stage Info"]
                acc = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}
                ops = []
                for rdd in info.get("RDD Info", []):
                    try:
                        scope = json.loads(rdd.get("Scope") or "{}").get("name", "")
                    except ValueError:
                        scope = ""
                    scope = scope.split(" (")[0]
                    if scope and scope not in ops and not scope.startswith(
                            ("WholeStageCodegen", "mapPartitions", "map", "Scan")):
                        ops.append(scope)
                stages[info["Stage ID"]] = {
                    "id": info["Stage ID"], "tasks": info["Number of Tasks"],
                    "ms": (info.get("Completion Time") or 0) - (info.get("Submission Time") or 0),
                    "start": info.get("Submission Time") or 0,
                    "run_ms": int(acc.get("internal.metrics.executorRunTime") or 0),
                    "shuffle_write": int(acc.get("internal.metrics.shuffle.write.bytesWritten")
                                         or 0),
                    "ops": ops}
    out: dict[str, list[dict]] = {}
    for sid, st in sorted(stages.items()):
        if sid in jobs:
            out.setdefault(jobs[sid], []).append(st)
    return out


def stage_table(bench: "Bench", log: dict[str, list[dict]]) -> str:
    """Where the time of the median run of each Spark variant goes, stage by stage."""
    out = ["| variant | run s | stage | operators | tasks | stage wall s | task time s | "
           "shuffle written |", "|---|---|---|---|---|---|---|---|"]
    for key in VARIANTS:
        r = bench.rows.get(key)
        if not r or r["median"] is None or key == "e":
            continue
        rep = r["times"].index(sorted(r["times"])[(len(r["times"]) - 1) // 2])
        for st in sorted(log.get(f"{key}#{rep}", []), key=lambda s: s["start"]):
            out.append(f"| {key} | {r['times'][rep]:.2f} | {st['id']} | "
                       f"{', '.join(st['ops'][:6]) or '—'} | {st['tasks']} | "
                       f"{st['ms'] / 1000:.2f} | {st['run_ms'] / 1000:.2f} | "
                       f"{st['shuffle_write'] / 2**20:.1f} MB |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- report
def fmt(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def ratio(rows: dict, fast: str, slow: str) -> float | None:
    a, b = rows.get(fast), rows.get(slow)
    if not a or not b or a["median"] is None or b["median"] is None:
        return None
    return b["median"] / a["median"]


def table(bench: Bench, meta: dict, notes: dict) -> str:
    rows = bench.rows
    q = notes["quality"]
    out = [f"Run {notes['date']} on {notes['machine']}.", "",
           f"Data: {meta['seconds']:g} s of 4-channel 48 kHz audio = {meta['frames']:,} samples "
           f"per channel, {bench.scanned:,} samples in all ({meta['files']} float32 WAV files; "
           f"the same samples as Parquet, one row per sample); {q['bursts']} bursts written, "
           f"the detector finds {q['events']} events ({q['found']} of the bursts, "
           f"{q['false_alarms']} false alarms). Median of {bench.reps} runs after "
           f"{bench.warmup} warm-up; Msamples/s = {bench.scanned:,} samples (4 channels) / "
           "median time.", "",
           "| variant | system | what | input | median s | Msamples/s | events | check | "
           "runs (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for key in VARIANTS:
        r = rows.get(key)
        if r is None:
            continue
        if r["error"]:
            out.append(f"| {key} | {r['system']} | {r['what']} | {r['layout']} | — | — | — | "
                       f"failed: {r['error'][:100]} | |")
            continue
        check = {"ok": "ok", None: "—"}.get(r["check"], f"**MISMATCH**: {r['check']}")
        rate = "—" if key in STAGES else f"{bench.scanned / r['median'] / 1e6:.1f}"
        out.append(f"| {key} | {r['system']} | {r['what']} | {r['layout']} | "
                   f"{r['median']:.3f} | {rate} | "
                   f"{r['events'] if r['events'] is not None else '—'} | {check} | "
                   + " ".join(f"{t:.2f}" for t in r["times"]) + " |")
    full = "a"
    out += ["", "Ratios (time of the slower ÷ time of the faster; > 1 means the first is "
            "faster):", "", "| comparison | ratio | target |", "|---|---|---|",
            f"| WaveSQL SYNC only (c) vs Spark SQL per-sample join (d) | "
            f"{fmt(ratio(rows, 'c', 'd'))}× | ≥ 10× |",
            f"| WaveSQL SYNC only (c) vs Spark SQL binned equi-join (d2, Spark's fair form) | "
            f"{fmt(ratio(rows, 'c', 'd2'))}× | ≥ 10× |",
            f"| WaveSQL SYNC only (c) vs DuckDB (e) | {fmt(ratio(rows, 'c', 'e'))}× | > 1× |",
            f"| WaveSQL end to end ({full}: detector + SYNC) vs Spark SQL (d, events given) | "
            f"{fmt(ratio(rows, full, 'd'))}× | — |",
            f"| WaveSQL end to end ({full}) vs DuckDB (e, events given) | "
            f"{fmt(ratio(rows, full, 'e'))}× | — |",
            f"| cost of SYNC: time without SYNC (b) ÷ time with ({full}) | "
            f"{fmt(_inv(ratio(rows, 'b', full)))}× | paper: 0.9× |"]
    out += ["", "Notes: " + notes["text"]]
    bad = [r for r in rows.values() if r["error"] or r["check"] not in (None, "ok")]
    if bad:
        out += ["", "**Disagreements / failures:** " + "; ".join(
            f"{r['key']}: {r['error'] or r['check']}" for r in bad)]
    return "\n".join(out) + "\n"


def _inv(x: float | None) -> float | None:
    return None if x is None else 1 / x


# ---------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="length of the recording")
    ap.add_argument("--per-minute", type=float, default=45.0,
                    help="bursts per minute of audio (the example: 6 in 8 s = 45)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--only", default=",".join(VARIANTS), help="comma list of " +
                    ",".join(VARIANTS))
    ap.add_argument("--cache", default=str(HERE / ".data"))
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--explain", action="store_true", help="print the Spark plans of c and d")
    args = ap.parse_args()
    only = [v.strip() for v in args.only.split(",") if v.strip()]
    if set(only) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(set(only) - set(VARIANTS))}")
    load0 = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    meta = dataset(args.seconds, args.per_minute, Path(args.cache))

    import duckdb
    import pyarrow
    import pyspark

    import wavesql

    scratch = tempfile.mkdtemp(prefix="wavesql-sync-")
    logdir = os.path.join(scratch, "eventlog")
    os.makedirs(logdir)
    # The event log (Spark's own record of every stage) says where each run's time went.
    ws = wavesql.connect(master="local[2]", catalog=os.path.join(scratch, "catalog.db"),
                         config={"spark.eventLog.enabled": "true",
                                 "spark.eventLog.rolling.enabled": "false",
                                 "spark.eventLog.compress": "false",
                                 "spark.eventLog.dir": "file://" + logdir})
    spark = ws.spark
    setup, full = detectaudio_text(meta["wav"])
    for stmt in setup:
        ws.sql(stmt)

    # The events: the detector's (the `events` view alone, run once here, untimed), kept in
    # Parquet for the variants that get them precomputed.
    t0 = time.perf_counter()
    events = sorted(tuple(r) for r in ws.sql("SELECT event, t_from, t_to FROM events").collect())
    print(f"events view: {len(events)} events in {time.perf_counter() - t0:.1f} s (untimed)",
          flush=True)
    write_events(events, meta["events"])
    x = recorded_samples(meta)
    want = oracle(events, x)
    del x
    quality = detection_quality(events, meta)
    print(f"detector vs the bursts written: {quality}", flush=True)
    scanned = meta["frames"] * len(CHANNELS)
    bench = Bench(args.reps, args.warmup, want, scanned, spark)

    ws.sql(f"CREATE OR REPLACE STREAM events_fixed (event BIGINT, t_from TIMESTAMP, "
           f"t_to TIMESTAMP) FROM '{meta['events']}' FORMAT parquet")
    spark.read.parquet(meta["samples"]).createOrReplaceTempView("samples")
    spark.read.parquet(meta["events"]).createOrReplaceTempView("ev")
    duck = duckdb.connect()
    duck.execute("SET threads = 2")
    duck.execute(f"CREATE VIEW samples AS SELECT * FROM read_parquet('{meta['samples']}')")
    duck.execute(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{meta['events']}/*.parquet')")

    lists = {c: f"{c}.samples" for c in CHANNELS}
    reduce_ws = ["event"] + spark_reductions("ch1.start", lists)

    def wavesql_full():
        return to_answer(ws.sql(full).selectExpr(*reduce_ws).collect())

    def wavesql_events():
        got = sorted(tuple(r) for r in ws.sql("SELECT event, t_from, t_to FROM events")
                     .collect())
        if got != events:
            raise AssertionError("the events view gave other events than its first run")
        return got

    sync_only = sync_only_text(full)

    def wavesql_sync_only():
        return to_answer(ws.sql(sync_only).selectExpr(*reduce_ws).collect())

    def wavesql_scan():
        df = ws.sql("SELECT ch1, ch2, ch3, ch4 FROM array4")
        return df.selectExpr(*[f"sum(size({c}.samples))" for c in CHANNELS]).collect()

    ssql, bsql, dsql = spark_sql_text(), spark_binned_text(), duckdb_text()
    if args.explain:
        ws.sql(sync_only).selectExpr(*reduce_ws).explain()
        spark.sql(ssql).explain()
        print(duck.execute("EXPLAIN " + dsql).fetchall()[0][1])

    plan = {"a": (wavesql_full, True), "b": (wavesql_events, False), "c": (wavesql_sync_only, True),
            "d": (lambda: to_answer(spark.sql(ssql).collect()), True),
            "d2": (lambda: to_answer(spark.sql(bsql).collect()), True),
            "e": (lambda: to_answer(duck.execute(dsql).fetchall()), True),
            "scan": (wavesql_scan, False), "plan": (lambda: ws.sql(sync_only), False)}
    for key in VARIANTS:
        if key in only:
            fn, check = plan[key]
            bench.run(key, fn, check)

    load1 = os.getloadavg()
    spark.stop()  # flushes the event log
    stages = stage_table(bench, stage_log(logdir))
    shutil.rmtree(scratch, ignore_errors=True)
    notes = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.describe(load0, load1), "quality": quality,
        "text": f"Spark {pyspark.__version__} (local[2], as `wavesql.connect` sets it up), "
                f"DuckDB {duckdb.__version__} (threads = 2), pyarrow {pyarrow.__version__}, "
                f"numpy {np.__version__}, Python {platform.python_version()}. Timed from "
                "issuing the query (WaveSQL: `ws.sql(text)`, i.e. parse, bind, plan) to the "
                "answer on the driver; files in the page cache after the warm-up.",
    }
    text = table(bench, meta, notes)
    text += ("\nStages of the median run of each Spark variant (Spark's event log; stage wall "
             "time from submission to completion, task time summed over its tasks; stages of "
             "one run can overlap):\n\n" + stages)
    print("\n" + text)
    Path(args.out).write_text("# SYNC benchmark results\n\n"
                              f"Command: `{' '.join([Path(sys.executable).name] + sys.argv)}`"
                              "\n\n" + text)
    print(f"written to {args.out}")
    bad = [r for r in bench.rows.values() if r["error"] or r["check"] not in (None, "ok")]
    if bad:
        print("!!!!!!!! " + "; ".join(f"{r['key']}: {r['error'] or r['check']}" for r in bad)
              + " !!!!!!!!", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
