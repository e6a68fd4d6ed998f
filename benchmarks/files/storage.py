"""S3 vs local disk: the same WaveSQL queries with their data on local disk and in an S3
bucket served by a real S3-protocol server on loopback (moto, as the tests start it).

    .venv/bin/python benchmarks/files/storage.py [--copies 100] [--ticks 6000000]
                                                 [--repeats 3] [--work DIR] [--out FILE]

Queries: STATFILTER over a float32 WAV (benchmarks/signals: its data generator and query
text) and TiLT trend trading over Parquet (benchmarks/tilt: its generator and the example's
query, asked for as the tilt benchmark's fingerprint). Each is also compared with a plain
Spark read of the same bytes (the storage floor). Timed runs alternate local and S3; the
upload is not timed. See README.md, "S3 vs local disk". A dated section is appended to
``--out`` (default results.md here).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))                        # tests.object_store, examples.tilt
sys.path.insert(0, str(ROOT / "benchmarks"))         # machine
sys.path.insert(0, str(ROOT / "benchmarks" / "signals"))  # data (the signals generator)

import machine  # noqa: E402


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


signals = _load("signals_run", ROOT / "benchmarks" / "signals" / "run.py")
tilt = _load("tilt_run", ROOT / "benchmarks" / "tilt" / "run.py")
sdata = signals.data


# ---------------------------------------------------------------------------- data
def make_wav(work: Path, copies: int) -> tuple[Path, dict]:
    """The signals benchmark's WAV for ``copies`` (generated once in <work>/signals), in a
    folder of its own: <work>/local/wav/signal.wav."""
    meta = sdata.dataset(copies, work / "signals", parts=("wav",))
    folder = work / "local" / "wav"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "signal.wav"
    if not target.exists():
        os.link(meta["wav"], target)
    return folder, meta


def make_prices(work: Path, ticks: int) -> tuple[Path, tuple, int]:
    """TiLT's prices (examples/tilt/generate.py, the tilt benchmark's parts), in
    <work>/local/prices/, and the numpy reference's fingerprint of trend over them."""
    gen, ref = tilt.gen, tilt.ref
    folder = work / "local" / "prices"
    frame = gen.prices(ticks)
    if not folder.exists():
        gen.write_stream(frame, folder, parts=max(1, ticks // 2_000_000))
    frame = frame.copy()
    frame["ts"] = frame["ts"].astype("int64")
    want = tilt.fingerprint_of("trend", ref.trend(frame))
    return folder, want, len(frame)


def upload(s3, folder: Path, prefix: str) -> tuple[str, float, int]:
    """Every file of ``folder`` to the bucket under ``prefix`` (boto3's managed transfer:
    multipart for large files). Returns the URI, seconds and bytes (not part of timings)."""
    client = s3.client()
    t0, size = time.perf_counter(), 0
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), s3.bucket,
                               f"{prefix}/{path.relative_to(folder).as_posix()}")
            size += path.stat().st_size
    return s3.uri(prefix), time.perf_counter() - t0, size


# ---------------------------------------------------------------------------- timing
def fmt(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} [{min(times):.2f}-{max(times):.2f}]"


def run(cases: dict, repeats: int) -> dict:
    """``cases``: name -> (fn, check). One untimed warm-up each, then ``repeats`` rounds;
    every round runs every case once, local and S3 alternating, the order reversed on odd
    rounds (local first, then S3 first, ...)."""
    names = list(cases)
    out = {n: {"times": [], "answers": []} for n in names}
    for name in names:
        print(f"-- warm-up {name} ...", flush=True)
        t0 = time.perf_counter()
        answer = cases[name][0]()
        print(f"   {time.perf_counter() - t0:.2f} s, answer {answer}", flush=True)
        cases[name][1](answer)
    for r in range(repeats):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            t0 = time.perf_counter()
            answer = cases[name][0]()
            seconds = time.perf_counter() - t0
            cases[name][1](answer)
            out[name]["times"].append(seconds)
            out[name]["answers"].append(answer)
            print(f"   round {r + 1} {name}: {seconds:.3f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    return out


def must_equal(want):
    def check(got):
        if tuple(got) != tuple(want) if isinstance(want, tuple) else got != want:
            raise SystemExit(f"!!!!!!!! MISMATCH: got {got}, want {want}")
    return check


def must_match_fingerprint(want):
    def check(got):
        if not tilt.same_fingerprint(got, want):
            raise SystemExit(f"!!!!!!!! MISMATCH: got {got}, the numpy reference is {want}")
    return check


# ---------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=100,
                    help="copies of the 9 s recording in the STATFILTER WAV (default 100)")
    ap.add_argument("--ticks", type=int, default=6_000_000,
                    help="1 ms price ticks for TiLT trend (default 6,000,000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", help="data and logs (default: a temp dir, deleted at the end)")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--title", default="", help="added to the section's title")
    args = ap.parse_args()

    load0 = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wavesql-s3bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work dir {work}; load at start {load0}", flush=True)

    t0 = time.perf_counter()
    wav_dir, smeta = make_wav(work, args.copies)
    prices_dir, trend_want, rows = make_prices(work, args.ticks)
    print(f"data in {time.perf_counter() - t0:.1f} s: {smeta['samples']:,} samples, "
          f"{rows:,} price ticks", flush=True)

    from tests.object_store import S3Server

    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    s3 = S3Server(logs, bucket="wavesql-bench").start()
    ws = None
    try:
        wav_uri, wav_up, wav_bytes = upload(s3, wav_dir, "signals/wav")
        prices_uri, prices_up, prices_bytes = upload(s3, prices_dir, "tilt/prices_s3")
        print(f"uploaded {wav_bytes / 1e6:.0f} MB WAV in {wav_up:.1f} s, "
              f"{prices_bytes / 1e6:.0f} MB Parquet in {prices_up:.1f} s", flush=True)

        import wavesql

        ws = wavesql.connect(master="local[2]", catalog=str(work / "catalog.db"))
        spark = ws.spark
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in s3.hadoop().items():  # as tests/conftest.py's s3 fixture
            conf.set(key, value)

        # STATFILTER: the signals benchmark's query text over the WAV folder
        signals.register(ws, "counting", str(wav_dir) + "/")
        signals.register(ws, "counting_s3", wav_uri + "/")
        sq_local = signals.wavesql_queries(smeta, "counting")["statfilter"]
        sq_s3 = signals.wavesql_queries(smeta, "counting_s3")["statfilter"]
        swant = smeta["ref"]["statfilter"]

        def statfilter(text):
            return lambda: signals.answer("statfilter", ws.sql(text).collect())

        # TiLT trend: the example's CREATE STREAM and query, the tilt benchmark's fingerprint
        create, query = tilt.example("trend", str(work / "local"))
        ws.sql(create)
        create_s3 = create.replace(f"'{work / 'local'}/prices/'", f"'{prices_uri}/'") \
            .replace("STREAM prices ", "STREAM prices_s3 ")
        assert prices_uri in create_s3 and "prices_s3 " in create_s3, create_s3
        ws.sql(create_s3)
        tq_local = tilt.fingerprint_sql(query, tilt.FINGERPRINT["trend"])
        tq_s3 = tq_local.replace("FROM prices", "FROM prices_s3")
        assert tq_s3.count("prices_s3") == tq_local.count("FROM prices"), tq_s3

        def trend(text):
            return lambda: tuple(ws.sql(text).collect()[0])

        # the floors: a plain Spark read of the same bytes (every byte / the columns the
        # query reads: a bare count() reads no WAV content and only Parquet footers)
        def wav_floor(uri):
            return lambda: int(spark.read.format("binaryFile").load(uri)
                               .selectExpr("sum(length(content))").collect()[0][0])

        def parquet_floor(uri):
            return lambda: tuple(spark.read.parquet(uri)
                                 .selectExpr("count(*)", "sum(v)", "max(ts)").collect()[0])

        results = {}
        results["statfilter"] = run({
            "local": (statfilter(sq_local), must_equal(swant)),
            "S3": (statfilter(sq_s3), must_equal(swant)),
        }, args.repeats)
        results["statfilter floor"] = run({
            "local": (wav_floor(str(wav_dir)), must_equal(wav_bytes)),
            "S3": (wav_floor(wav_uri), must_equal(wav_bytes)),
        }, args.repeats)
        results["trend"] = run({
            "local": (trend(tq_local), must_match_fingerprint(trend_want)),
            "S3": (trend(tq_s3), must_match_fingerprint(trend_want)),
        }, args.repeats)
        pf_local = parquet_floor(str(prices_dir))()
        results["trend floor"] = run({
            "local": (parquet_floor(str(prices_dir)), must_equal(pf_local)),
            "S3": (parquet_floor(prices_uri), must_equal(pf_local)),
        }, args.repeats)
    finally:
        if ws is not None:
            ws.spark.stop()
        s3.stop()
    load1 = os.getloadavg()

    # ------------------------------------------------------------------------ the section
    import pyspark

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    moto_version = subprocess.run([sys.executable, "-c", "import moto; print(moto.__version__)"],
                                  capture_output=True, text=True).stdout.strip()
    n_samples = smeta["samples"]
    lines = [
        f"## S3 vs local disk: STATFILTER and TiLT trend, {started:%Y-%m-%d %H:%M} UTC"
        + (f" ({args.title})" if args.title else ""), "",
        f"Run on {machine.describe(load0, load1)}; load average (1/5/15 min) "
        f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} at start, "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at end. Spark {pyspark.__version__} "
        f"local[2], moto {moto_version} (`python -m moto.server` on loopback, one process), "
        f"Python {platform.python_version()}, git {rev}. Command: `{' '.join(sys.argv)}`.", "",
        f"Data: STATFILTER over one float32 WAV of {args.copies} copies of the 9 s recording "
        f"= {n_samples:,} samples ({wav_bytes / 1e6:.0f} MB; uploaded in {wav_up:.1f} s, not "
        f"timed); TiLT trend over {rows:,} price ticks in Parquet ({prices_bytes / 1e6:.0f} MB, "
        f"{len(list(prices_dir.glob('*.parquet')))} files; uploaded in {prices_up:.1f} s). "
        f"Median [min-max] of {args.repeats} timed runs after one warm-up each, local and S3 "
        "alternating (local first in odd rounds, S3 first in even ones); every answer checked "
        "(STATFILTER: the windows of the numpy reference; trend: the tilt benchmark's "
        "fingerprint against the numpy reference; floors: the bytes / the column sums).", "",
        "| query | input | local s | S3 s | local throughput | S3 throughput | S3 / local |",
        "|---|---|---|---|---|---|---|",
    ]
    units = {"statfilter": (n_samples, "Msamples/s", f"{n_samples:,} samples"),
             "statfilter floor": (n_samples, "Msamples/s", f"{wav_bytes / 1e6:.0f} MB WAV"),
             "trend": (rows, "Mrows/s", f"{rows:,} rows"),
             "trend floor": (rows, "Mrows/s", f"{prices_bytes / 1e6:.0f} MB Parquet")}
    label = {"statfilter": "STATFILTER (WaveSQL)",
             "statfilter floor": "floor: Spark `binaryFile`, sum(length(content))",
             "trend": "TiLT trend (WaveSQL, fingerprint)",
             "trend floor": "floor: Spark `read.parquet`, count, sum(v), max(ts)"}
    for name, res in results.items():
        n, unit, what = units[name]
        lo, s3t = res["local"]["times"], res["S3"]["times"]
        ml, ms = statistics.median(lo), statistics.median(s3t)
        lines.append(f"| {label[name]} | {what} | {fmt(lo)} | {fmt(s3t)} | "
                     f"{n / ml / 1e6:.1f} {unit} | {n / ms / 1e6:.1f} {unit} | {ms / ml:.2f}× |")
    share = {q: statistics.median(results[f"{q} floor"]["S3"]["times"])
             / statistics.median(results[q]["S3"]["times"]) for q in ("statfilter", "trend")}
    lines += ["", "Runs (s, in order): " + "; ".join(
        f"{name} local {' '.join(f'{t:.3f}' for t in r['local']['times'])}, S3 "
        f"{' '.join(f'{t:.3f}' for t in r['S3']['times'])}" for name, r in results.items()) + ".",
        "", f"The floor's S3 median is {share['statfilter']:.0%} of STATFILTER's S3 median and "
        f"{share['trend']:.0%} of trend's.", "", ""]
    text = "\n".join(lines)
    print("\n" + text)
    with open(args.out, "a") as f:
        f.write("\n" + text)
    print(f"appended to {args.out}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
