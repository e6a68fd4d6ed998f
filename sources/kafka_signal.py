"""Signals from Kafka: sample blocks in a topic, read as a WaveSQL signal.

``CREATE SIGNAL mic (ch1 FLOAT, ch2 FLOAT) RATE 48000 HZ FROM KAFKA 'mic' OPTIONS
(bootstrap = 'host:9092') FORMAT samples``: each record's value is one **block** of
consecutive samples of every channel, in this wire format (all little-endian)::

    offset  size  field
    0       4     magic  b"WSB1"
    4       2     channels (uint16): the signal's channel count
    6       2     reserved, 0
    8       8     first sample number (int64): the block's first frame on the signal's
                  timeline -- sample n is at EPOCH + n / RATE
    16      4     frames (uint32)
    20      4     reserved, 0
    24      ...   frames x channels float32, frame by frame (interleaved: frame 0 of ch1,
                  ch2, ..., then frame 1, ...)

so a record is ``24 + 4 * frames * channels`` bytes; the key is free (a device id, say). A
block of 0 frames is the **end block**: its first sample number is the recording's length
(a continuous query then flushes the partial tail window: streaming/kafka_signals.py).
Blocks may arrive in any order and in any partition: the signal is the blocks placed on
the timeline by their first sample numbers, exactly as timestamped WAV files are
(``sources/wav_plan.py``): consecutive blocks form one gap-free *run*, a gap between
blocks is a gap (never bridged; windows next to it are partial, a stateful filter starts
again after it), and a block that claims samples another already holds is an
``OVERLAPPING_BLOCKS`` error -- unless it is the very same block sent twice (same first
sample and bytes: a producer's retry, delivery being at least once), which is read once.

A batch query reads the topic up to the offsets current at its start: the blocks' headers
(not their samples) are collected to plan the windows and partitions as for WAV files, and
each partition's tasks receive the blocks they read (a join on the blocks' Kafka
coordinates) and run the same window and signal-function code as WAV scans
(:func:`wavesql.sources.wav_scan.read_partition`). A malformed record (wrong magic,
channel count or size) fails the query with ``MALFORMED_ROW`` naming
``kafka:<topic>/<partition>/<offset>``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from wavesql.errors import WaveSQLError
from wavesql.sources.placed import Frames
from wavesql.sqltext import quote

MAGIC = b"WSB1"
HEADER = struct.Struct("<4sHHqII")  # magic, channels, reserved, first sample, frames, reserved
FORMATS = ("samples",)


#: a block's sample count, as the WAV planner reads it (sources/placed.py)
BlockInfo = Frames


@dataclass(frozen=True)
class BlockPlacement:
    """One Kafka block on the signal's timeline (a ``FilePlacement`` for the WAV scan's
    planner and reader): ``samples`` is filled in the task that reads it."""

    path: str  # kafka:<topic>/<partition>/<offset>
    info: BlockInfo
    start_sample: int
    partition: int
    offset: int
    samples: np.ndarray | None = None  # (channels, frames) float32, in the task
    digest: str | None = None  # of the record's bytes: a resent block has the same

    @property
    def end_sample(self) -> int:
        return self.start_sample + self.info.frames

    def meta(self) -> dict:
        """The block without its samples, JSON-ready (a continuous query's state)."""
        return {"path": self.path, "first": self.start_sample, "frames": self.info.frames,
                "partition": self.partition, "offset": self.offset, "digest": self.digest}

    @classmethod
    def of_meta(cls, meta: dict, samples: np.ndarray) -> "BlockPlacement":
        return cls(meta["path"], BlockInfo(meta["frames"]), meta["first"], meta["partition"],
                   meta["offset"], samples, meta["digest"])


def digest(value: bytes) -> str:
    """What tells a resent block (the very same bytes) from an overlapping one."""
    import hashlib

    return hashlib.blake2b(value, digest_size=16).hexdigest()


def decode_header(value: bytes | None, channels: int) -> tuple[int, int] | str:
    """``(first sample, frames)`` of a block, or the reason it is not a block of a
    ``channels``-channel signal."""
    if value is None:
        return "no payload (the record's value is NULL)"
    if len(value) < HEADER.size:
        return f"{len(value)} bytes: shorter than the {HEADER.size}-byte block header"
    magic, chans, _, first, frames, _ = HEADER.unpack_from(value)
    if magic != MAGIC:
        return f"not a sample block (magic {magic!r}, expected {MAGIC!r})"
    if chans != channels:
        return f"a block of {chans} channel(s); the signal has {channels}"
    want = HEADER.size + 4 * frames * chans
    if len(value) != want:
        return (f"{len(value)} bytes: a block of {frames} frame(s) x {chans} channel(s) is "
                f"{want}")
    if first < 0:
        return f"first sample number {first} is negative"
    return first, frames


def decode_samples(value: bytes, channels: int) -> np.ndarray:
    """A block's samples as ``(channels, frames)`` float32 (channel-major, as the WAV
    reader gives them)."""
    data = np.frombuffer(value, dtype="<f4", offset=HEADER.size)
    return np.ascontiguousarray(data.reshape(-1, channels).T)


# -- planning ---------------------------------------------------------------------------

_HEADER_SCHEMA = ("partition INT, offset BIGINT, first BIGINT, frames BIGINT, "
                  "problem STRING, digest STRING")


def headers(raw, channels: int, *, keep_value: bool = False):
    """Per record of ``raw`` (Spark's Kafka columns): its block header, or its problem, and
    a digest of its bytes (to tell a resent block from an overlapping one); with
    ``keep_value``, the record's bytes too (column ``value``)."""
    import pyarrow as pa

    def decode(batches):
        for b in batches:
            parts, offs, values = (b.column(i).to_pylist() for i in range(3))
            firsts, frames, problems, digests = [], [], [], []
            for value in values:
                got = decode_header(value, channels)
                if isinstance(got, str):
                    firsts.append(None), frames.append(None), problems.append(got)
                    digests.append(None)
                else:
                    firsts.append(got[0]), frames.append(got[1]), problems.append(None)
                    digests.append(digest(value))
            arrays = [pa.array(parts, pa.int32()), pa.array(offs, pa.int64()),
                      pa.array(firsts, pa.int64()), pa.array(frames, pa.int64()),
                      pa.array(problems, pa.string()), pa.array(digests, pa.string())]
            names = ["partition", "offset", "first", "frames", "problem", "digest"]
            if keep_value:
                arrays.append(b.column(2))
                names.append("value")
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    schema = _HEADER_SCHEMA + (", value BINARY" if keep_value else "")
    return raw.select("partition", "offset", "value").mapInArrow(decode, schema)


def place(rows, topic: str) -> tuple[list[BlockPlacement], int]:
    """The blocks (header rows) on the timeline, in order, each resent copy dropped (their
    count is returned); a non-identical overlap is ``OVERLAPPING_BLOCKS``."""
    ordered = sorted(rows, key=lambda r: (r["first"], r["partition"], r["offset"]))
    placed: list[BlockPlacement] = []
    repeats = 0
    for r in ordered:
        if r["frames"] == 0:
            continue
        here = f"kafka:{topic}/{r['partition']}/{r['offset']}"
        if placed and r["first"] < placed[-1].end_sample:
            last = placed[-1]
            if (r["first"], r["frames"], r["digest"]) == (
                    last.start_sample, last.info.frames, last.digest):
                repeats += 1  # the same block again (a producer's retry): read once
                continue
            last_sample = r["first"] + r["frames"] - 1
            raise WaveSQLError(
                "OVERLAPPING_BLOCKS", f"{here} (samples {r['first']}..{last_sample}) "
                f"overlaps {last.path} (samples {last.start_sample}..{last.end_sample - 1})",
                hint="every sample must be in one block; a block sent again must be the same "
                     "bytes")
        placed.append(BlockPlacement(here, BlockInfo(int(r["frames"])), int(r["first"]),
                                     int(r["partition"]), int(r["offset"]),
                                     digest=r["digest"]))
    return placed, repeats


def batch_frame(spark, signal, program, width: int, slide: int, *, lookback: int | None,
                sequential: bool, tasks: int):
    """A batch read of Kafka signal ``signal`` through ``program`` in ``[SAMPLES width
    SLIDE slide]`` windows: a DataFrame of the program's output (module docstring)."""
    from pyspark.sql import functions as F

    from wavesql.sources import kafka
    from wavesql.sources.placed import placed_plan, scan_part

    channels = tuple(c.name for c in signal.channels)
    raw = kafka.load(spark, signal, streaming=False)
    rows = headers(raw, len(channels)).collect()
    bad = next((r for r in rows if r["problem"] is not None), None)
    if bad is not None:
        raise WaveSQLError("MALFORMED_ROW", f"malformed row in kafka:{signal.path}/"
                           f"{bad['partition']}/{bad['offset']}: {bad['problem']}",
                           hint="records of a FORMAT samples signal are sample blocks "
                                "(sources/kafka_signal.py: the wire format)")
    placements, _ = place(rows, signal.path)
    placed = placed_plan(signal, program, placements, width, slide,
                         path=f"kafka:{signal.path}", lookback=lookback,
                         sequential=sequential, tasks=tasks)
    struct_type = placed.struct_type
    needed = sorted({(i, f.partition, f.offset) for i, f in placed.needed()})
    if not needed:
        return spark.createDataFrame([], struct_type)
    wanted = spark.createDataFrame(needed, "__part INT, partition INT, offset BIGINT")
    blocks = wanted.join(raw.select("partition", "offset", "value"),
                         ["partition", "offset"])
    width_ch = len(channels)

    def scan(table):
        index = table.column("__part")[0].as_py()
        samples = {(p, o): decode_samples(v, width_ch) for p, o, v in zip(
            table.column("partition").to_pylist(), table.column("offset").to_pylist(),
            table.column("value").to_pylist())}
        return scan_part(placed, index, lambda f, lo, hi: samples[(f.partition, f.offset)][
            :, lo - f.start_sample:hi - f.start_sample])

    frame = blocks.groupBy("__part").applyInArrow(scan, struct_type)
    return frame.select(*[F.col(quote(f.name)) for f in struct_type.fields])
