"""Inputs of the TiLT examples (TILT_APPS.md): realistic shapes, reproducible from a seed.

    python -m examples.tilt.generate                 # small inputs into examples/tilt/data/
    python -m examples.tilt.generate --ticks 10000000 --out /tmp/tilt --parts 8

One function per dataset returns it in memory (a pandas DataFrame whose ``ts`` is **integer
microseconds since 1970**, or int16 sample codes for the ECG) -- the numpy reference and the
tests work on exactly these values -- and :func:`write_stream` / :func:`write_ecg` store it
as WaveSQL reads it:

- Parquet with ``ts`` a TIMESTAMP at microsecond precision (pandas ``datetime64[us]``: Spark
  cannot read the nanosecond timestamps pandas writes by default), plus a ``punct``
  TIMESTAMP column that is NULL on every data row (the streams declare it as their
  ``PROGRESS COLUMN``; a continuous query is closed by appending one punctuation row);
- a directory of 16-bit mono WAVs at 200 Hz for the ECG (one file, or consecutive pieces),
  and the accelerometer also as a float32 WAV recording (:func:`write_signal`).

Time: ticks of period P = 1 ms unless said, tick ``k`` (k = 1, 2, ...) at ``EPOCH + k * P``.
``EPOCH`` is a multiple of every bucket length used (100 ms, 10 s), so tumbling bucket ``j``
``(j*w, (j+1)*w]`` holds ticks ``j*w/P + 1 .. (j+1)*w/P`` -- full buckets, as TiLT counts them.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

#: 2024-01-01T00:00:00Z in microseconds: a multiple of 10 s, so buckets align with ticks.
EPOCH_US = 1_704_067_200_000_000
TICK_US = 1_000  # P = 1 ms
ECG_RATE = 200  # Hz
#: Punctuation that closes a stream: 2100-01-01T00:00:00Z, after any generated time.
CLOSED_US = 4_102_444_800_000_000
#: Where ``python -m examples.tilt.generate`` writes by default: the examples read data/<name>.
DEFAULT_OUT = Path(__file__).resolve().parent / "data"


def ticks(n: int, period_us: int = TICK_US) -> np.ndarray:
    """Times of ticks 1..n (microseconds)."""
    return EPOCH_US + period_us * np.arange(1, n + 1, dtype=np.int64)


# ---------------------------------------------------------------------------- datasets
def prices(n: int, seed: int = 1) -> pd.DataFrame:
    """A stock price per 1 ms tick: a geometric random walk with volatility clusters.

    Used by trend trading (app 1) and RSI (app 2)."""
    rng = np.random.default_rng(seed)
    # volatility switches between calm and busy regimes every ~2000 ticks
    regime = np.repeat(rng.choice([0.5, 1.0, 3.0], size=n // 2000 + 1), 2000)[:n]
    steps = rng.standard_t(df=4, size=n) * 2e-4 * regime
    v = 100.0 * np.exp(np.cumsum(steps))
    # Quoted in 1/64 increments (a binary fraction): every sum of prices is then exact in
    # float64 whatever the summation order, so "avg20 > avg50" and the RSI are decided
    # identically by every system instead of by rounding when two averages nearly tie.
    return pd.DataFrame({"ts": ticks(n), "v": np.round(v * 64) / 64})


def sensor(n: int, seed: int = 2, period_us: int = TICK_US) -> pd.DataFrame:
    """A temperature-like sensor: a 37 s and an hourly cycle, occasional level shifts, noise.

    Used by normalisation (app 3) and, on other periods, resampling (app 5)."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1) * period_us / 1e6  # seconds
    # the level jumps now and then (a door opens, a heater starts) and stays until the next
    # jump: piecewise constant offsets, not a random walk, so the signal stays plausible
    jumps = np.cumsum(rng.random(n) < 2e-4)
    level = rng.normal(0, 1.5, jumps[-1] + 1)[jumps]
    v = (20.0 + 3.0 * np.sin(2 * np.pi * t / 37.0) + 2.0 * np.sin(2 * np.pi * t / 3600.0)
         + level + rng.normal(0, 0.4, n))
    return pd.DataFrame({"ts": ticks(n, period_us), "v": v})


def sensor_with_gaps(n: int, seed: int = 3) -> pd.DataFrame:
    """:func:`sensor` on the 1 ms grid with ~6 % of the ticks missing (imputation, app 4;
    more on short inputs, which still get one outage):
    many short dropouts (1-20 ticks), a few outages (0.2-2 s), never the first or last
    tick (so the grid spans the whole range)."""
    rng = np.random.default_rng(seed)
    frame = sensor(n, seed)
    keep = np.ones(n, dtype=bool)
    for count, shortest, longest in ((max(1, n // 200), 1, 20),           # dropouts
                                     (max(1, n // 100_000), 200, 2000)):  # outages
        starts = rng.integers(1, max(2, n - 1), count)
        for s, k in zip(starts, rng.integers(shortest, longest + 1, count)):
            keep[s:min(s + k, n - 1)] = False
    return frame[keep].reset_index(drop=True)


def vibration(n: int, seed: int = 5) -> pd.DataFrame:
    """An accelerometer on a machine (1 kHz): shaft harmonics + noise, with impact bursts
    (bearing defects: short decaying 180 Hz rings) in ~4 % of the 100 ms buckets -- the
    buckets whose kurtosis and crest factor stand out. Vibration analysis, app 7."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1) / 1000.0
    v = (0.5 * np.sin(2 * np.pi * 29.5 * t) + 0.2 * np.sin(2 * np.pi * 59.0 * t + 1.0)
         + rng.normal(0, 0.1, n))
    ring = np.exp(-np.arange(60) / 8.0) * np.sin(2 * np.pi * 180.0 * np.arange(60) / 1000.0)
    for start in np.flatnonzero(rng.random(n // 100 + 1) < 0.04) * 100:
        for hit in start + rng.integers(0, 90, rng.integers(1, 4)):
            k = min(len(ring), n - hit)
            if k > 0:
                v[hit:hit + k] += rng.uniform(2.0, 6.0) * ring[:k]
    return pd.DataFrame({"ts": ticks(n), "v": v})


def transactions(n_ticks: int, customers: int = 50, seed: int = 6,
                 rate: float = 0.5) -> pd.DataFrame:
    """Card transactions: each customer pays with probability ``rate`` at each 1 ms tick,
    log-normal amounts around a customer's own level, and rare fraud spikes (x5-x30).
    Fraud detection, app 8 (windows per customer)."""
    rng = np.random.default_rng(seed)
    level = rng.lognormal(3.0, 0.8, customers)
    n = int(n_ticks * customers * rate)
    # independent draws of (tick, customer); duplicates of a pair are dropped so a customer
    # has at most one transaction per tick
    cell = np.unique(rng.integers(0, n_ticks * customers, n))
    tick, cust = cell // customers + 1, cell % customers
    amount = level[cust] * rng.lognormal(0.0, 0.25, len(cell))
    fraud = rng.random(len(cell)) < 1e-3
    amount[fraud] *= rng.uniform(5, 30, fraud.sum())
    frame = pd.DataFrame({"ts": EPOCH_US + tick * TICK_US, "customer": cust.astype(np.int32),
                          "v": np.round(amount, 2)})
    return frame.sort_values(["ts", "customer"], kind="stable").reset_index(drop=True)


def ysb_events(n_events: int, campaigns: int = 100, seed: int = 7,
               per_tick: float = 10.0) -> pd.DataFrame:
    """Yahoo Streaming Benchmark ad events: about ``per_tick`` events per 1 ms tick (Poisson),
    ``event_type`` 0 view / 1 click / 2 purchase (60/30/10 %), each on an ad of one of
    ``campaigns`` campaigns (10 ads each, the join YSB does is folded into the event)."""
    rng = np.random.default_rng(seed)
    n_ticks = max(1, int(np.ceil(n_events / per_tick)))
    tick = np.sort(rng.integers(1, n_ticks + 1, n_events))
    ad = rng.integers(0, campaigns * 10, n_events)
    return pd.DataFrame({"ts": EPOCH_US + tick * TICK_US,
                         "ad_id": ad.astype(np.int32),
                         "campaign": (ad // 10).astype(np.int32),
                         "event_type": rng.choice([0, 1, 2], n_events,
                                                  p=[0.6, 0.3, 0.1]).astype(np.int32)})


def ecg(seconds: float, seed: int = 8, rate: int = ECG_RATE) -> np.ndarray:
    """A synthetic ECG lead as int16 codes (1 mV = 8000 codes) at ``rate`` Hz.

    Beats at 60-90 bpm with beat-to-beat variability, each a sum of Gaussian bumps (P wave,
    Q, a tall narrow R, S, T wave: the QRS complex is what Pan-Tompkins finds), on baseline
    wander (respiration, 0.25 Hz), mains hum (50 Hz) and noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = 0.15 * np.sin(2 * np.pi * 0.25 * t) + 0.02 * np.sin(2 * np.pi * 50.0 * t)
    x += rng.normal(0, 0.015, n)
    # (offset s, amplitude mV, width s) of P, Q, R, S, T relative to the R peak
    waves = ((-0.20, 0.15, 0.025), (-0.03, -0.12, 0.010), (0.0, 1.2, 0.011),
             (0.03, -0.25, 0.010), (0.25, 0.30, 0.050))
    beat, hr = 0.4, 72.0
    while beat < seconds:
        gain = rng.normal(1.0, 0.05)
        for off, amp, width in waves:
            centre = beat + off
            lo, hi = max(0, int((centre - 4 * width) * rate)), min(n, int((centre + 4 * width) * rate) + 1)
            x[lo:hi] += gain * amp * np.exp(-0.5 * ((t[lo:hi] - centre) / width) ** 2)
        hr = float(np.clip(hr + rng.normal(0, 2.0), 60.0, 90.0))
        beat += 60.0 / hr * rng.normal(1.0, 0.02)
    return np.clip(np.round(x * 8000), -32768, 32767).astype(np.int16)


# ---------------------------------------------------------------------------- writing
def write_stream(frame: pd.DataFrame, folder: str | Path, parts: int = 1,
                 row_group: int = 1 << 20) -> Path:
    """``frame`` as ``parts`` Parquet files ``part-00000.parquet``... in time order, ``ts``
    as microsecond timestamps, plus the all-NULL ``punct`` column. Replaces the folder."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    out = frame.copy()
    out["ts"] = pd.to_datetime(out["ts"], unit="us").astype("datetime64[us]")
    out["punct"] = pd.Series(pd.NaT, index=out.index, dtype="datetime64[us]")
    edges = np.linspace(0, len(out), parts + 1).astype(int)
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        out.iloc[a:b].to_parquet(folder / f"part-{i:05d}.parquet", index=False,
                                 row_group_size=row_group)
    return folder


def write_punctuation(folder: str | Path, frame: pd.DataFrame, name: str = "zz-punct.parquet",
                      progress_us: int = CLOSED_US) -> Path:
    """Append one punctuation row to a stream folder: "no row with ``ts`` below
    ``progress_us`` will follow" (default: 2100, i.e. the stream is closed). Its data
    columns copy the last row's (a punctuation row is not data; queries skip it)."""
    row = frame.iloc[[-1]].copy()
    row["ts"] = pd.to_datetime(row["ts"], unit="us").astype("datetime64[us]")
    row["punct"] = np.array([progress_us], dtype="datetime64[us]")
    path = Path(folder) / name
    row.to_parquet(path, index=False)
    return path


def write_ecg(codes: np.ndarray, folder: str | Path, parts: int = 1, seed: int = 9) -> Path:
    """The ECG as a directory of ``parts`` consecutive int16 WAV files ``ecg-000.wav``...
    cut at random places (never on a window boundary on purpose), which WaveSQL reads as
    one timeline in name order. Replaces the folder."""
    from wavesql.udfs.wav import write_wav

    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, len(codes)), parts - 1, replace=False))
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(codes)])):
        write_wav(folder / f"ecg-{i:03d}.wav", codes[a:b], ECG_RATE, "int16")
    return folder


def write_signal(frame: pd.DataFrame, folder: str | Path, rate: int = 1000,
                 parts: int = 1) -> Path:
    """A regularly ticking stream (``ts`` = tick 1, 2, ... at ``rate``) as a float32 mono
    WAV recording (WaveSQL's sample type: values rounded to float32, see
    :func:`as_recorded`): sample ``n`` is tick ``n + 1``, so a signal declared with
    ``EPOCH`` = the first tick puts every sample at its tick's time. ``parts`` files cut
    at random places. Replaces the folder."""
    from wavesql.udfs.wav import write_wav

    ts = frame["ts"].to_numpy(np.int64)
    if not np.array_equal(np.diff(ts), np.full(len(ts) - 1, 1_000_000 // rate)):
        raise ValueError("write_signal needs one value per tick, no gaps")
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    v = frame["v"].to_numpy(np.float64)
    cuts = np.sort(np.random.default_rng(10).choice(np.arange(1, len(v)), parts - 1,
                                                    replace=False))
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(v)])):
        write_wav(folder / f"rec-{i:03d}.wav", v[a:b], rate, "float32")
    return folder


def as_recorded(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``v`` rounded to float32, as :func:`write_signal` stores it."""
    return frame.assign(v=frame["v"].to_numpy(np.float32).astype(np.float64))


def ecg_samples(codes: np.ndarray) -> np.ndarray:
    """The samples as WaveSQL reads an int16 WAV: float32 codes / 32768."""
    return (codes.astype(np.float32) / np.float32(32768.0)).astype(np.float32)


# ---------------------------------------------------------------------------- all of them
#: The inputs of each application: dataset folder under the output root -> builder(n).
#: ``n`` is the number of 1 ms ticks (rows for the signal apps).
DATASETS = {
    "prices": lambda n: prices(n),                          # trend, rsi
    "sensor": lambda n: sensor(n),                          # normalize
    "sensor_gaps": lambda n: sensor_with_gaps(n),           # impute
    "sensor_4ms": lambda n: sensor(n, seed=4, period_us=4 * TICK_US),  # resample 4 -> 5
    "vibration": lambda n: vibration(n),                    # vibration
    "transactions": lambda n: transactions(max(1, n // 25)),  # fraud: 50 customers, p = .5
    "ysb": lambda n: ysb_events(n),                         # ysb
}


def generate(out: str | Path = DEFAULT_OUT, n: int = 30_000, parts: int = 1,
             ecg_seconds: float = 600.0) -> dict:
    """Write every input under ``out`` and return ``{name: path}``. ``n`` ticks per signal
    (about n rows per stream); the ECG lasts ``ecg_seconds`` (200 samples per second)."""
    out = Path(out)
    paths = {}
    for name, build in DATASETS.items():
        frame = build(n)
        paths[name] = write_stream(frame, out / name, parts)
        if name == "vibration":  # also as a recording (examples/tilt/vibration_signal.wsql)
            paths["vibration_wav"] = write_signal(frame, out / "vibration_wav", parts=parts)
    paths["ecg"] = write_ecg(ecg(ecg_seconds), out / "ecg", parts)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    ap.add_argument("--ticks", type=int, default=30_000, help="1 ms ticks per signal")
    ap.add_argument("--parts", type=int, default=1, help="Parquet files per stream")
    ap.add_argument("--ecg-seconds", type=float, default=600.0)
    args = ap.parse_args(argv)
    for name, path in generate(args.out, args.ticks, args.parts, args.ecg_seconds).items():
        print(f"{name:13s} {path}")


if __name__ == "__main__":
    main()
