"""TiLT benchmark: the eight TiLT applications + YSB on WaveSQL vs Spark SQL, DuckDB, numpy.

    python benchmarks/tilt/run.py [--ticks 3000000] [--ecg-samples 3000000] [--runs 3]
                                  [--only trend,ysb,...]

Every application runs once per system, side by side, over the same data: WaveSQL (batch,
the example file's own query, examples/tilt/<app>.wsql), the same query as plain Spark SQL
window functions over the Parquet files (same Spark session), DuckDB over the same Parquet
and a single-threaded numpy/pandas pass over the data in memory (examples/tilt/reference.py,
the oracle). Each timing is in-process, from issuing the query to having its answer on the
driver, median of ``--runs`` runs after one untimed run that is also the correctness check;
the systems of an app take turns (run 1 of each, then run 2 of each, ...).

The answer of a timed run is a fingerprint computed by the system itself: the number of
result rows and the sums of the result columns (so that no system ships millions of rows to
Python, and no column can be pruned away). It must match the reference's fingerprint, and
the untimed run's full result on the first ``--sample-ticks`` ticks must equal the
reference's rows (same tolerances as tests/test_tilt.py). Mismatches are printed loudly and
marked in the table, which goes to stdout and to results.md beside this file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # examples.tilt, when run as a script

from examples.tilt import generate as gen  # noqa: E402
from examples.tilt import reference as ref  # noqa: E402

APPS = ("trend", "rsi", "normalize", "impute", "resample", "pan_tompkins", "vibration",
        "fraud", "ysb")
DEFAULT_CACHE = HERE / ".data"
_VERSION = 2  # bump when the data changes: old caches are regenerated

# ---------------------------------------------------------------------------- inputs
#: app -> (dataset folder, view name = the example's stream name)
INPUTS = {
    "trend": ("prices", "prices"), "rsi": ("prices", "prices"),
    "normalize": ("sensor", "sensor"), "impute": ("sensor_gaps", "readings"),
    "resample": ("sensor_4ms", "slow_sensor"), "pan_tompkins": ("ecg", "ecg"),
    "vibration": ("vibration", "accel"), "fraud": ("transactions", "payments"),
    "ysb": ("ysb", "ad_events"),
}


def dataset(ticks: int, ecg_samples: int, cache: Path) -> dict:
    """Generate (once) every input and return the meta: paths and input sizes."""
    root = cache / f"t{ticks}_e{ecg_samples}"
    meta_path = root / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("version") == _VERSION:
            return meta
    t0 = time.time()
    meta = {"version": _VERSION, "root": str(root), "ticks": ticks, "events": {}}
    for name, build in gen.DATASETS.items():
        frame = build(ticks)
        parts = max(1, len(frame) // 2_000_000)
        gen.write_stream(frame, root / name, parts=parts)
        if name == "vibration":  # also as a recording, for vibration_signal.wsql
            gen.write_signal(frame, root / "vibration_wav", parts=parts)
        meta["events"][name] = len(frame)
        print(f"   {name}: {len(frame):,} rows", flush=True)
    codes = gen.ecg(ecg_samples / gen.ECG_RATE)
    gen.write_ecg(codes, root / "ecg", parts=max(1, ecg_samples // 2_000_000))
    # the same samples, one row per sample, for the SQL engines
    pd.DataFrame({"n": np.arange(len(codes), dtype=np.int64), "x": gen.ecg_samples(codes)}
                 ).to_parquet(root / "ecg.parquet", index=False, row_group_size=1 << 20)
    meta["events"]["ecg"] = len(codes)
    meta["seconds"] = round(time.time() - t0, 1)
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def load(meta: dict, app: str):
    """The app's input in memory, as the reference takes it (not timed)."""
    folder = INPUTS[app][0]
    if app == "pan_tompkins":
        from wavesql.udfs.wav import read_frames, read_info

        root = Path(meta["root"]) / "ecg"
        return np.concatenate([read_frames(read_info(str(p)))[:, 0]
                               for p in sorted(root.glob("*.wav"))])
    frame = pd.read_parquet(Path(meta["root"]) / folder).drop(columns=["punct"])
    frame["ts"] = frame["ts"].astype("datetime64[us]").astype(np.int64)
    return frame


def events(meta: dict, app: str) -> int:
    return meta["events"][INPUTS[app][0]]


# ---------------------------------------------------------------------------- queries
def example(app: str, root: str) -> tuple[str, str]:
    """The example file's CREATE statement (its paths pointed at ``root``) and its query."""
    from wavesql.dialect import parse_statements

    text = (ROOT / "examples" / "tilt" / f"{app}.wsql").read_text()
    create, query = parse_statements(text)
    return create.text.replace("'data/", f"'{root}/"), query.text


def _end(t: str, width_us: int) -> str:
    """Spark SQL: end (k+1)*w of the tumbling bucket (k*w, (k+1)*w] holding time ``t``."""
    return f"unix_micros({t}) + pmod(-unix_micros({t}), {width_us})"


def _pan_tompkins_sql() -> str:
    """x -> d of Pan-Tompkins collapses to a 46-tap FIR: the low-pass's double pole at 1
    and the high-pass's pole at -1 are cancelled by zeros of the stages after them
    (LP * HP * D = (1 - z^-6)(1 + ... + z^-5)(-1 + 32 z^-16 + z^-32)(2 + z^-1 + 2 z^-2)/8).
    That is the only reason plain SQL can compute it at all: 46 lags, then a 30-row sum."""
    p = np.polynomial.polynomial
    taps = p.polymul(p.polymul(p.polymul([1, 0, 0, 0, 0, 0, -1], [1] * 6), ref.HP_B),
                     [2, 1, 2]) / 8
    terms = " + ".join(f"{float(t)!r} * lag(x, {k}, 0) OVER (ORDER BY n)" if k
                       else f"{float(t)!r} * x" for k, t in enumerate(taps) if t)
    return ("WITH s AS (SELECT n, CAST(x AS DOUBLE) AS x FROM ecg_rows), "
            f"d AS (SELECT n, {terms} AS d FROM s) "
            f"SELECT n, sum(d * d) OVER (ORDER BY n ROWS BETWEEN 29 PRECEDING AND CURRENT ROW)"
            f" / 30 AS mwi FROM d")


def plain_sql(app: str, root: str, duck: bool = False) -> str:
    """The application as plain SQL window functions (Spark SQL; DuckDB with ``duck``)."""
    if app in ("trend", "rsi", "fraud"):
        return example(app, root)[1]  # already plain SQL over OVER windows
    if app == "normalize":
        return (f"WITH b AS (SELECT ts, v, {_end('ts', 10_000_000)} AS bucket FROM sensor) "
                "SELECT timestamp_micros(bucket) AS _time, ts, v, "
                "(v - avg(v) OVER (PARTITION BY bucket)) "
                "/ nullif(stddev_pop(v) OVER (PARTITION BY bucket), 0) AS z FROM b")
    if app == "vibration":
        kurt = "kurtosis_pop(v)" if duck else "kurtosis(v)"
        return ("SELECT timestamp_micros(bucket) AS _time, sqrt(avg(v * v)) AS rms, "
                f"{kurt} + 3 AS kurtosis, max(abs(v)) / sqrt(avg(v * v)) AS crest "
                f"FROM (SELECT v, {_end('ts', 100_000)} AS bucket FROM accel) GROUP BY bucket")
    if app == "ysb":
        return ("SELECT timestamp_micros(bucket) AS _time, campaign, count(*) AS n "
                f"FROM (SELECT campaign, {_end('ts', 100_000)} AS bucket FROM ad_events "
                "WHERE event_type = 1) GROUP BY bucket, campaign")
    explode = ("CROSS JOIN LATERAL generate_series({a}, {b}, {s}) AS gs(g)" if duck
               else "LATERAL VIEW explode(sequence({a}, {b}, {s})) gs AS g")
    if app == "impute":
        # Each reading spreads over the grid points up to the next reading (the inputs lie
        # on the 1 ms grid): itself, then the missing points, which take the bucket mean.
        return ("WITH pairs AS (SELECT unix_micros(ts) AS t, v, "
                "lead(unix_micros(ts)) OVER (ORDER BY ts) AS t_next FROM readings), "
                f"buckets AS (SELECT {_end('ts', 10_000_000)} AS bucket, avg(v) AS mean "
                "FROM readings GROUP BY 1), "
                "grid AS (SELECT g, CASE WHEN g = t THEN v END AS v FROM pairs "
                + explode.format(a="t", b="coalesce(t_next - 1000, t)", s=1000) + ") "
                "SELECT timestamp_micros(g) AS ts, coalesce(grid.v, b.mean) AS v, "
                "grid.v IS NULL AS imputed FROM grid "
                "LEFT JOIN buckets b ON b.bucket = g + pmod(-g, 10000000)")
    if app == "resample":
        # Each pair of consecutive readings (t0, v0), (t1, v1) generates the 5 ms grid
        # points in [t0, t1) (the last reading: t0 itself, if on the grid).
        hi = "coalesce(t1 - 1, t0)"
        return ("WITH pairs AS (SELECT unix_micros(ts) AS t0, v AS v0, "
                "lead(unix_micros(ts)) OVER (ORDER BY ts) AS t1, "
                "lead(v) OVER (ORDER BY ts) AS v1 FROM slow_sensor), "
                f"spans AS (SELECT *, t0 + pmod(-t0, 5000) AS g0, {hi} - pmod({hi}, 5000) AS g1 "
                "FROM pairs), "
                "kept AS (SELECT * FROM spans WHERE g0 <= g1) "
                "SELECT timestamp_micros(g) AS ts, CASE WHEN g = t0 THEN v0 "
                "ELSE v0 + (v1 - v0) * CAST(g - t0 AS DOUBLE) / CAST(t1 - t0 AS DOUBLE) END AS v "
                "FROM kept " + explode.format(a="g0", b="g1", s=5000))
    if app == "pan_tompkins":
        return _pan_tompkins_sql()
    raise KeyError(app)


#: DuckDB spellings of the Spark functions the plain SQL uses (inlined at bind time).
DUCK_MACROS = ("CREATE MACRO unix_micros(t) AS epoch_us(t)",
               "CREATE MACRO timestamp_micros(x) AS make_timestamp(x)",
               "CREATE MACRO pmod(a, b) AS ((a % b) + b) % b")

#: The fingerprint: SQL aggregates over the result's columns, per app (count first).
FINGERPRINT = {
    "trend": ["count(*)", "sum(v)", "sum(CAST(up AS INT))"],
    "rsi": ["count(*)", "sum(rsi)", "count(rsi)"],
    "normalize": ["count(*)", "sum(abs(z))", "sum(v)"],
    "impute": ["count(*)", "sum(v)", "sum(CAST(imputed AS INT))"],
    "resample": ["count(*)", "sum(v)"],
    "pan_tompkins": ["count(*)", "sum(mwi)"],
    "vibration": ["count(*)", "sum(rms)", "sum(kurtosis)", "sum(crest)"],
    "fraud": ["count(*)", "sum(mean)", "sum(std)", "sum(CAST(flag AS INT))"],
    "ysb": ["count(*)", "sum(n)"],
}
#: WaveSQL's Pan-Tompkins returns one segment per window: count and sum its samples.
WAVESQL_PT_FINGERPRINT = ["sum(size(mwi.samples))",
                          "sum(aggregate(mwi.samples, 0D, (a, x) -> a + x))"]


def fingerprint_sql(query: str, exprs: list[str]) -> str:
    """The fingerprint as every system is asked for it: one SQL query around the app's."""
    return f"SELECT {', '.join(exprs)} FROM ({query.strip().rstrip(';')}) q"


def fingerprint_of(app: str, frame) -> tuple:
    """The reference's fingerprint, computed like the SQL aggregates (NULLs skipped)."""
    if app == "pan_tompkins":
        return (len(frame), float(np.sum(frame)))
    f = frame
    sums = {"trend": lambda: [f["v"].sum(), f["up"].sum()],
            "rsi": lambda: [f["rsi"].sum(), f["rsi"].notna().sum()],
            "normalize": lambda: [f["z"].abs().sum(), f["v"].sum()],
            "impute": lambda: [f["v"].sum(), f["imputed"].sum()],
            "resample": lambda: [f["v"].sum()],
            "vibration": lambda: [f["rms"].sum(), f["kurtosis"].sum(), f["crest"].sum()],
            "fraud": lambda: [f["mean"].sum(), f["std"].sum(), f["flag"].sum()],
            "ysb": lambda: [f["n"].sum()]}[app]()
    return (len(f), *[float(s) for s in sums])


def same_fingerprint(got, want) -> bool:
    if got is None or len(got) != len(want) or int(got[0]) != int(want[0]):
        return False
    return all(g is not None and abs(float(g) - float(w)) <= 1e-6 * max(1.0, abs(float(w)))
               for g, w in zip(got[1:], want[1:]))


# ---------------------------------------------------------------------------- samples
#: How the sample is compared: key columns, exact columns, close columns (rtol).
CHECKS = {
    "trend": (["ts"], ["v", "up"], [], 0), "rsi": (["ts"], ["v"], ["rsi"], 1e-9),
    "normalize": (["ts"], ["_time", "v"], ["z"], 1e-9),
    "impute": (["ts"], ["imputed"], ["v"], 1e-9), "resample": (["ts"], [], ["v"], 1e-9),
    "pan_tompkins": (["n"], [], ["mwi"], 1e-6),
    "vibration": (["_time"], [], ["rms", "kurtosis", "crest"], 1e-9),
    "fraud": (["customer", "ts"], ["v", "flag"], ["mean", "std"], 1e-9),
    "ysb": (["_time", "campaign"], ["n"], [], 0),
}


def sample_column(app: str) -> str:
    return {"pan_tompkins": "n", "vibration": "_time", "ysb": "_time"}.get(app, "ts")


def sample_bound(app: str, sample_ticks: int) -> int:
    """Rows with sample_column < bound form the sample (microseconds, or samples)."""
    if app == "pan_tompkins":
        return sample_ticks
    return gen.EPOCH_US + sample_ticks * gen.TICK_US


def reference_sample(app: str, out, bound: int) -> pd.DataFrame:
    if app == "pan_tompkins":
        return pd.DataFrame({"n": np.arange(min(bound, len(out))), "mwi": out[:bound]})
    return out[out[sample_column(app)] < bound].reset_index(drop=True)


def compare_sample(app: str, got: pd.DataFrame, want: pd.DataFrame) -> str | None:
    """None when equal, else what differs."""
    keys, exact, close, rtol = CHECKS[app]
    got = got.copy()
    for c in got.columns:  # any timestamps left: microseconds, as the reference has them
        if np.issubdtype(got[c].dtype, np.datetime64):
            got[c] = got[c].astype("datetime64[us]").astype(np.int64)
    if len(got) != len(want):
        return f"{len(got)} sample rows, reference {len(want)}"
    got = got.sort_values(keys).reset_index(drop=True)
    want = want.sort_values(keys).reset_index(drop=True)
    for c in keys + exact:
        if not np.array_equal(got[c].to_numpy(), want[c].to_numpy()):
            return f"column {c} differs"
    for c in close:
        g, w = got[c].to_numpy(np.float64), want[c].to_numpy(np.float64)
        scale = np.nanmax(np.abs(w)) if app == "pan_tompkins" else 0.0
        if not np.allclose(g, w, rtol=rtol, atol=max(1e-9, rtol * scale), equal_nan=True):
            bad = ~np.isclose(g, w, rtol=rtol, atol=max(1e-9, rtol * scale), equal_nan=True)
            return f"column {c}: {bad.sum()} values differ, e.g. {g[bad][:2]} vs {w[bad][:2]}"
    return None


def spark_pandas(df) -> pd.DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    # Parquet written by pandas holds naive timestamps, which plain Spark reads as
    # TIMESTAMP_NTZ (WaveSQL's declared streams read them as TIMESTAMP); the session is UTC.
    cols = [F.unix_micros(F.col(f.name).cast("timestamp")).alias(f.name)
            if isinstance(f.dataType, (TimestampType, TimestampNTZType)) else F.col(f.name)
            for f in df.schema.fields]
    return df.select(*cols).toPandas()


def duck_pandas(con, sql: str) -> pd.DataFrame:
    out = con.execute(sql).df()
    for c in out.columns:
        if np.issubdtype(out[c].dtype, np.datetime64):
            out[c] = out[c].astype("datetime64[us]").astype(np.int64)
    return out


# ---------------------------------------------------------------------------- systems
class System:
    """One system's way of answering an app: ``answer()`` (timed: the fingerprint) and
    ``sample(bound)`` (untimed: the result's first rows as pandas)."""

    name = layout = ""

    def answer(self, app):
        raise NotImplementedError

    def sample(self, app, bound):
        raise NotImplementedError


class WaveSQL(System):
    name, layout = "WaveSQL local[2]", "Parquet (WAV for the ECG)"

    def __init__(self, ws, root):
        self.ws, self.root = ws, root
        self.queries = {}
        for app in APPS:
            create, query = example(app, root)
            ws.sql(create)
            self.queries[app] = query

    def answer(self, app):
        exprs = WAVESQL_PT_FINGERPRINT if app == "pan_tompkins" else FINGERPRINT[app]
        return tuple(self.ws.sql(fingerprint_sql(self.queries[app], exprs)).collect()[0])

    def sample(self, app, bound):
        df = self.ws.sql(self.queries[app])
        if app == "pan_tompkins":
            rows = df.where(f"mwi.start < {bound}").select("mwi").collect()
            rows.sort(key=lambda r: r.mwi.start)
            y = np.concatenate([np.asarray(r.mwi.samples, np.float64) for r in rows])[:bound]
            return pd.DataFrame({"n": np.arange(len(y)), "mwi": y})
        col = sample_column(app)
        return spark_pandas(df.where(f"unix_micros({col}) < {bound}"))


class WaveSQLSignal(System):
    """Vibration over the accelerometer recorded as a WAV (examples/tilt/vibration_signal.wsql):
    the statistics run in the scan. Its samples are float32, so its reference is the
    reference over the float32-rounded values (generate.as_recorded)."""

    name, layout = "WaveSQL local[2], signal", "float32 WAV"

    def __init__(self, ws, root):
        self.ws = ws
        create, self.query = example("vibration_signal", root)
        ws.sql(create)

    def answer(self, app):
        return tuple(self.ws.sql(fingerprint_sql(self.query, FINGERPRINT[app])).collect()[0])

    def sample(self, app, bound):
        return spark_pandas(self.ws.sql(self.query).where(f"unix_micros(_time) < {bound}"))


class SparkSQL(System):
    name, layout = "Spark SQL local[2]", "Parquet, row per tick"

    def __init__(self, spark, meta):
        # A session of its own (same SparkContext and settings, its own temp views): WaveSQL
        # registers its catalog streams as temp views under the same names, which would
        # otherwise replace these.
        self.spark = spark.newSession()
        assert self.spark.conf.get("spark.sql.session.timeZone") == "UTC"
        for app, (folder, view) in INPUTS.items():
            path = Path(meta["root"]) / (folder + ".parquet" if app == "pan_tompkins" else folder)
            self.spark.read.parquet(str(path)).createOrReplaceTempView(
                "ecg_rows" if app == "pan_tompkins" else view)
        self.queries = {app: plain_sql(app, meta["root"]) for app in APPS}

    def answer(self, app):
        return tuple(self.spark.sql(fingerprint_sql(self.queries[app], FINGERPRINT[app]))
                     .collect()[0])

    def sample(self, app, bound):
        col = sample_column(app)
        cond = f"{col} < {bound}" if app == "pan_tompkins" else f"unix_micros({col}) < {bound}"
        return spark_pandas(self.spark.sql(self.queries[app]).where(cond))


class DuckDB(System):
    name, layout = "DuckDB, 2 threads", "Parquet, row per tick"

    def __init__(self, meta):
        import duckdb

        self.con = duckdb.connect()
        self.con.execute("SET threads = 2")
        for macro in DUCK_MACROS:
            self.con.execute(macro)
        for app, (folder, view) in INPUTS.items():
            path = Path(meta["root"]) / (folder + ".parquet" if app == "pan_tompkins"
                                         else folder + "/*.parquet")
            self.con.execute(f"CREATE OR REPLACE VIEW {'ecg_rows' if app == 'pan_tompkins' else view}"
                             f" AS SELECT * FROM read_parquet('{path}')")
        self.queries = {app: plain_sql(app, meta["root"], duck=True) for app in APPS}

    def answer(self, app):
        return self.con.execute(fingerprint_sql(self.queries[app], FINGERPRINT[app])).fetchone()

    def sample(self, app, bound):
        col = sample_column(app)
        cond = f"{col} < {bound}" if app == "pan_tompkins" else f"epoch_us({col}) < {bound}"
        return duck_pandas(self.con, f"SELECT * FROM ({self.queries[app]}) q WHERE {cond}")


REFERENCE_FN = {"trend": ref.trend, "rsi": ref.rsi, "normalize": ref.normalize,
                "impute": ref.impute, "resample": ref.resample,
                "pan_tompkins": ref.pan_tompkins, "vibration": ref.vibration,
                "fraud": ref.fraud, "ysb": ref.ysb}


# ---------------------------------------------------------------------------- the run
class Bench:
    def __init__(self, runs: int):
        self.runs, self.rows = runs, []

    def record(self, app, system, layout, n, times, got, want, sample_error, error=None):
        row = {"app": app, "system": system, "layout": layout, "events": n, "times": times,
               "median": statistics.median(times) if times else None, "got": got,
               "want": want, "error": error, "sample": sample_error,
               "ok": None if error else (sample_error is None and same_fingerprint(got, want))}
        self.rows.append(row)
        if error:
            print(f"   FAILED: {error}", flush=True)
            return row
        rate = n / row["median"] / 1e6
        print(f"   median {row['median']:.3f} s ({', '.join(f'{t:.3f}' for t in times)}) = "
              f"{rate:.2f} Mevents/s; answer {fmt_answer(got)}", flush=True)
        if not row["ok"]:
            print(f"   !!!!!!!! MISMATCH: {system} {app}: answer {fmt_answer(got)} vs reference "
                  f"{fmt_answer(want)}; sample: {sample_error or 'ok'} !!!!!!!!", flush=True)
        return row

    def run_app(self, app, entries, n, bound):
        """Time the systems of one app in rounds -- the checking run of each, then run 1 of
        each, run 2 of each, ... -- so that a burst of load on this shared machine hits
        every system alike rather than whichever happened to be running.
        ``entries`` are ``(system, reference fingerprint, reference sample)``."""
        state = {}
        for system, want, want_sample in entries:
            print(f"-- {app} | {system.name} | {system.layout}: checking run ...", flush=True)
            try:
                # untimed: warms caches and compares the full rows of the sample
                state[system] = {"sample": compare_sample(app, system.sample(app, bound),
                                                          want_sample), "times": []}
            except Exception as exc:  # noqa: BLE001 - one failing system must not stop the rest
                traceback.print_exc(limit=2)
                self.failed(app, system, n, want, exc)
        for _ in range(self.runs):
            for system, _, _ in entries:
                if system not in state:
                    continue
                try:
                    t0 = time.perf_counter()
                    state[system]["got"] = system.answer(app)
                    state[system]["times"].append(time.perf_counter() - t0)
                except Exception as exc:  # noqa: BLE001
                    traceback.print_exc(limit=2)
                    self.failed(app, system, n, dict((s, w) for s, w, _ in entries)[system], exc)
                    del state[system]
        for system, want, _ in entries:
            if system in state:
                st = state[system]
                print(f"-- {app} | {system.name} | {system.layout}", flush=True)
                self.record(app, system.name, system.layout, n, st["times"], st["got"], want,
                            st["sample"])

    def failed(self, app, system, n, want, exc):
        text = str(exc).strip().splitlines()
        self.record(app, system.name, system.layout, n, [], None, want, None,
                    error=f"{type(exc).__name__}: {' / '.join(text[:2])[:300]}")


def fmt_answer(ans) -> str:
    if ans is None:
        return "—"
    return "(" + ", ".join(f"{int(a):,}" if i == 0 else f"{float(a):.6g}"
                           for i, a in enumerate(ans)) + ")"


def run_numpy(bench: Bench, app: str, data, n: int, bound: int):
    """The reference itself, single-threaded, on the input in memory; returns its output."""
    from threadpoolctl import threadpool_limits

    print(f"-- {app} | numpy, 1 thread | in memory ...", flush=True)
    times, out = [], None
    with threadpool_limits(limits=1):
        for _ in range(bench.runs):
            t0 = time.perf_counter()
            out = REFERENCE_FN[app](data)
            times.append(time.perf_counter() - t0)
    want = fingerprint_of(app, out)
    bench.record(app, "numpy, 1 thread", "pandas/numpy in memory", n, times, want, want, None)
    return out, want, reference_sample(app, out, bound)


def ratio(a, b) -> str:
    if not a or not b or a["median"] is None or b["median"] is None:
        return "—"
    return f"{b['median'] / a['median']:.2f}×"


def table(bench: Bench, notes: dict) -> str:
    mark = {True: "ok", False: "**MISMATCH**", None: "—"}
    out = [f"Run {notes['date']} on {notes['machine']}.", "", notes["data"], "",
           "| app | system | layout | events | median s | Mevents/s | answer (rows, sums) | "
           "check | runs (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in bench.rows:
        med = "—" if r["median"] is None else f"{r['median']:.3f}"
        rate = "—" if r["median"] is None else f"{r['events'] / r['median'] / 1e6:.2f}"
        ans = f"failed: {r['error'][:120]}" if r["error"] else fmt_answer(r["got"])
        out.append(f"| {r['app']} | {r['system']} | {r['layout']} | {r['events']:,} | {med} | "
                   f"{rate} | {ans} | {mark[r['ok']]} | "
                   + " ".join(f"{t:.3f}" for t in r["times"]) + " |")
    out += ["", "Throughput ratios (WaveSQL events/s ÷ the peer's; > 1: WaveSQL is faster). "
            "Targets: ≥ 5× Spark SQL on every app, ahead of DuckDB on at least half.", "",
            "| app | WaveSQL formulation | WaveSQL / Spark SQL | WaveSQL / DuckDB | "
            "WaveSQL / numpy |", "|---|---|---|---|---|"]
    apps = [a for a in APPS if any(r["app"] == a for r in bench.rows)]
    best_spark, best_duck = {}, {}
    for app in apps:
        rows = [r for r in bench.rows if r["app"] == app]
        peer = {k: next((r for r in rows if r["system"].startswith(k) and r["median"]), None)
                for k in ("Spark SQL", "DuckDB", "numpy")}
        for w in (r for r in rows if r["system"].startswith("WaveSQL")):
            kind = ("signal (WAV)" if "signal" in w["system"] or app == "pan_tompkins"
                    else "stream (Parquet)")
            out.append(f"| {app} | {kind} | {ratio(w, peer['Spark SQL'])} | "
                       f"{ratio(w, peer['DuckDB'])} | {ratio(w, peer['numpy'])} |")
            for best, k in ((best_spark, "Spark SQL"), (best_duck, "DuckDB")):
                if w["median"] and peer[k]:
                    best[app] = max(best.get(app, 0.0), peer[k]["median"] / w["median"])
    met_spark = sum(1 for a in apps if best_spark.get(a, 0) >= 5)
    met_duck = sum(1 for a in apps if best_duck.get(a, 0) > 1)
    out += ["", f"With each app's faster WaveSQL formulation: ≥ 5× Spark SQL on {met_spark} of "
            f"{len(apps)} apps; ahead of DuckDB on {met_duck} of {len(apps)}.", "",
            "Notes: " + notes["text"]]
    bad = [r for r in bench.rows if r["ok"] is not True]
    if bad:
        out.append("\n**Anomalies:** " + "; ".join(
            f"{r['app']} {r['system']}: " + (r["error"] or f"answer {fmt_answer(r['got'])} vs "
                                             f"reference {fmt_answer(r['want'])}, sample: "
                                             f"{r['sample'] or 'ok'}") for r in bad))
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=3_000_000,
                    help="1 ms ticks per stream (rows; YSB: events)")
    ap.add_argument("--ecg-samples", type=int, default=3_000_000, help="200 Hz ECG samples")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sample-ticks", type=int, default=25_000,
                    help="ticks (samples) at the start whose full result rows are checked")
    ap.add_argument("--only", default=",".join(APPS))
    ap.add_argument("--cache", default=str(DEFAULT_CACHE))
    ap.add_argument("--out", default=str(HERE / "results.md"))
    args = ap.parse_args()
    only = [a.strip() for a in args.only.split(",") if a.strip()]
    unknown = set(only) - set(APPS)
    if unknown:
        ap.error(f"unknown apps {sorted(unknown)}; choose from {APPS}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load0, started, t_start = os.getloadavg(), dt.datetime.now(dt.timezone.utc), time.time()
    print("-- data ...", flush=True)
    meta = dataset(args.ticks, args.ecg_samples, Path(args.cache))

    import duckdb
    import wavesql

    ws = wavesql.connect(master="local[2]",
                         catalog=tempfile.mkdtemp(prefix="wavesql-tilt-") + "/catalog.db")
    systems = [WaveSQL(ws, meta["root"]), SparkSQL(ws.spark, meta), DuckDB(meta)]
    signal = WaveSQLSignal(ws, meta["root"])
    bench = Bench(args.runs)
    for app in only:
        n = events(meta, app)
        bound = sample_bound(app, args.sample_ticks)
        data = load(meta, app)
        _, want, want_sample = run_numpy(bench, app, data, n, bound)
        entries = [(system, want, want_sample) for system in systems]
        if app == "vibration":
            out = ref.vibration(gen.as_recorded(data))
            entries.append((signal, fingerprint_of(app, out), reference_sample(app, out, bound)))
        del data
        bench.run_app(app, entries, n, bound)

    load1 = os.getloadavg()
    import pyspark

    ev = meta["events"]
    notes = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.describe(load0, load1),
        "data": f"Data: {meta['ticks']:,} ticks of 1 ms per stream (prices, sensor, "
                f"vibration: {ev['prices']:,} rows; sensor with gaps {ev['sensor_gaps']:,}; "
                f"4 ms sensor {ev['sensor_4ms']:,}; transactions {ev['transactions']:,}; YSB "
                f"events {ev['ysb']:,}); ECG {ev['ecg']:,} samples at 200 Hz. Median of "
                f"{args.runs} runs after one untimed checking run; Mevents/s = input rows "
                "(samples) / median time.",
        "text": f"Spark {pyspark.__version__} local[2] (WaveSQL's defaults), DuckDB "
                f"{duckdb.__version__} threads = 2, numpy {np.__version__} under "
                f"threadpoolctl limits 1, Python {platform.python_version()}. Whole run "
                f"{time.time() - t_start:.0f} s.",
    }
    text = table(bench, notes)
    print("\n" + text)
    Path(args.out).write_text("# TiLT benchmark results\n\n" + text)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
