"""Benchmark data: the counting recording tiled N times with a random gain per copy.

One stream of float32 samples is generated once and written, in the same pass, as

- ``signal.wav``   one float32 mono WAV file (what WaveSQL reads; numpy memory-maps it too),
- ``rows.parquet`` one row per sample ``(t BIGINT, v FLOAT)``, row groups of 2**20 rows,
- ``lists.parquet`` one row per 4096-sample window ``(w BIGINT, samples LIST<FLOAT>)``,
  row groups of 256 windows (the same 2**20 samples),

plus ``meta.json`` with the thresholds (medians of the per-window std and mean, computed here
with numpy in float64) and the reference answers every system is checked against.

Windows are tumbling 4096-sample windows from sample 0; the last one is partial (N * 396900
is never a multiple of 4096) and is *included* everywhere, as WaveSQL does.

Run alone: ``python benchmarks/signals/data.py --copies 10``.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import time
from pathlib import Path

import numpy as np

RECORDING = str(Path(__file__).resolve().parents[2] / "examples" / "data" / "counting_44k1.wav")
RATE = 44100
W = 4096  # window width in samples
CHUNK = 1 << 20  # samples per write = one Parquet row group; a multiple of W, so windows align
SEED = 2008  # gains are drawn from this seed: the same copies give the same data
DEFAULT_CACHE = Path(__file__).resolve().parent / ".data"
PARTS = ("wav", "rows", "lists")
_VERSION = 1  # bump when the layout changes: old caches are regenerated


def recording() -> np.ndarray:
    """The recording as WaveSQL reads it: float32 = int16 / 32768."""
    from wavesql.udfs.wav import read_frames, read_info

    return read_frames(read_info(RECORDING))[:, 0]


def window_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-window sample std (ddof=1) and mean in float64, the partial tail included.

    This is also the numpy system being timed: blocks of 256 windows keep the float64
    temporaries (8 MB) in cache instead of materialising a 3 GB deviation array.
    """
    n = len(x)
    full = n // W * W
    rows = x[:full].reshape(-1, W)
    sd = np.empty(len(rows) + (full < n))
    mean = np.empty_like(sd)
    step = 256
    for i in range(0, len(rows), step):
        b = rows[i:i + step]
        m = b.mean(axis=1, dtype=np.float64)
        d = b - m[:, None]  # float64 (float32 - float64 upcasts)
        sd[i:i + len(b)] = np.sqrt(np.einsum("ij,ij->i", d, d) / (W - 1))
        mean[i:i + len(b)] = m
    if full < n:  # the partial last window (never a single sample here, so std is defined)
        t = x[full:].astype(np.float64)
        sd[-1], mean[-1] = t.std(ddof=1), t.mean()
    return sd, mean


def threshold(v: np.ndarray) -> float:
    """The median of ``v``, made tie-free: with an odd count the median is itself a window,
    which float rounding in another system could put on either side of a strict ``>``, so
    we take the midpoint between it and the next value up instead."""
    s = np.sort(v)
    k = len(s) // 2
    return float((s[k - 1] + s[k]) / 2 if len(s) % 2 == 0 else (s[k] + s[k + 1]) / 2)


def _wav_header(frames: int) -> bytes:
    """Header of a float32 mono WAVE_FORMAT_EXTENSIBLE file, as udfs.wav.write_wav writes it
    (we stream the data ourselves so that the 1.6 GB never sits in memory)."""
    block, bits, tag = 4, 32, 3
    fmt = struct.pack("<HHIIHH", 0xFFFE, 1, RATE, RATE * block, block, bits)
    fmt += struct.pack("<HHIH", 22, bits, 0x4, tag)
    fmt += b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"  # KSDATAFORMAT tail
    data_bytes = frames * block
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"fact" + struct.pack("<II", 4, frames)
    riff_size = 4 + len(chunks) + 8 + data_bytes
    if riff_size > 0xFFFFFFFF:
        raise ValueError("more than 4 GiB: use fewer copies (RF64 is not written here)")
    return b"RIFF" + struct.pack("<I", riff_size) + b"WAVE" + chunks + b"data" + struct.pack(
        "<I", data_bytes)


def _chunks(base: np.ndarray, gains: np.ndarray):
    """Yield the tiled stream in CHUNK-sample float32 blocks (the last one shorter)."""
    buf = np.empty(CHUNK, np.float32)
    fill = 0
    for g in gains:
        copy = (base * np.float32(g)).astype(np.float32)
        pos = 0
        while pos < len(copy):
            k = min(CHUNK - fill, len(copy) - pos)
            buf[fill:fill + k] = copy[pos:pos + k]
            fill, pos = fill + k, pos + k
            if fill == CHUNK:
                yield buf
                fill = 0
    if fill:
        yield buf[:fill]


def dataset(copies: int, cache: str | os.PathLike = DEFAULT_CACHE, parts=PARTS,
            quiet: bool = False) -> dict:
    """Generate (once) the data for ``copies`` and return its meta (paths, thresholds, refs)."""
    root = Path(cache) / f"x{copies}"
    meta_path = root / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("version") == _VERSION and all(p in meta.get("parts", []) for p in parts):
        return meta
    parts = sorted(set(parts) | set(meta.get("parts", [])) if meta.get("version") == _VERSION
                   else set(parts))
    root.mkdir(parents=True, exist_ok=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    base = recording()
    gains = np.random.default_rng(SEED).uniform(0.5, 1.5, copies)
    n = len(base) * copies
    paths = {p: str(root / f) for p, f in
             (("wav", "signal.wav"), ("rows", "rows.parquet"), ("lists", "lists.parquet"))}
    wav = open(paths["wav"] + ".tmp", "wb") if "wav" in parts else None
    rows = lists = None
    if "rows" in parts:  # plain encoding, snappy: Parquet as an ordinary writer leaves it
        rows = pq.ParquetWriter(paths["rows"] + ".tmp", pa.schema([("t", pa.int64()),
                                ("v", pa.float32())]), compression="snappy",
                                use_dictionary=False)
    if "lists" in parts:
        lists = pq.ParquetWriter(paths["lists"] + ".tmp", pa.schema(
            [("w", pa.int64()), ("samples", pa.list_(pa.float32()))]),
            compression="snappy", use_dictionary=False)
    if wav:
        wav.write(_wav_header(n))
    sds, means = [], []
    start = 0
    for chunk in _chunks(base, gains):
        k = len(chunk)
        if wav:
            wav.write(memoryview(chunk).cast("B"))
        if rows:
            rows.write_table(pa.table({"t": np.arange(start, start + k, dtype=np.int64),
                                       "v": chunk}), row_group_size=CHUNK)
        if lists:
            offsets = np.append(np.arange(0, k, W, dtype=np.int32), np.int32(k))
            lists.write_table(pa.table({
                "w": np.arange(start // W, start // W + len(offsets) - 1, dtype=np.int64),
                "samples": pa.ListArray.from_arrays(offsets, chunk)}), row_group_size=CHUNK)
        sd, m = window_stats(chunk)  # chunks are window-aligned, so this is exact
        sds.append(sd)
        means.append(m)
        start += k
    for writer in (wav, rows, lists):
        if writer:
            writer.close()
    for p in parts:
        os.replace(paths[p] + ".tmp", paths[p])
    if "wav" in parts:  # check the hand-written header with the project's own reader
        from wavesql.udfs.wav import read_info

        info = read_info(paths["wav"], strict=True)
        assert (info.sample_format, info.channels, info.rate, info.frames) == \
            ("float32", 1, RATE, n), info
    sd, mean = np.concatenate(sds), np.concatenate(means)
    alpha, beta = threshold(sd), threshold(mean)
    gamma = alpha  # SILENCEFILTER threshold: half the windows are "voiced"
    voiced = sd > gamma
    win_len = np.full(len(sd), W)
    win_len[-1] = n - (len(sd) - 1) * W
    meta = {
        "version": _VERSION, "copies": copies, "seed": SEED, "parts": list(parts),
        "samples": n, "windows": len(sd), "tail": int(win_len[-1]), **paths,
        "alpha": alpha, "beta": beta, "gamma": gamma,
        "ref": {"statfilter": int(np.count_nonzero((sd > alpha) & (mean < beta))),
                "silence_windows": int(np.count_nonzero(voiced)),
                "silence_samples": int(win_len[voiced].sum()), "passchain": n},
        # How close the nearest window is to each threshold: a tiny margin means a system
        # summing in another order could legitimately land on the other side. Windows
        # exactly on it are all-zero (digital silence: mean exactly 0 in any system).
        "margin": {k: {"nearest": float(np.min(np.abs(v[v != thr] - thr))),
                       "on_threshold": int(np.count_nonzero(v == thr))}
                   for k, v, thr in (("alpha", sd, alpha), ("beta", mean, beta))},
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    if not quiet:
        print(f"data x{copies}: {n:,} samples, {len(sd):,} windows, parts {parts}, "
              f"generated in {time.perf_counter() - t0:.1f} s in {root}")
    return meta


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1000)
    ap.add_argument("--cache", default=str(DEFAULT_CACHE))
    ap.add_argument("--parts", default=",".join(PARTS))
    a = ap.parse_args()
    print(json.dumps(dataset(a.copies, a.cache, a.parts.split(",")), indent=1))
