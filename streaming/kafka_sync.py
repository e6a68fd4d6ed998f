"""A continuous SYNC JOIN over a signal read from Kafka (``FORMAT samples``: sample blocks,
sources/kafka_signal.py), its control a catalog stream (files or Kafka), or a view row by
row over one (split as for WAV: streaming/sync.py ``control_ranges``) -- alone, or with other
signals in the same SELECT (files or Kafka: ``SYNC JOIN a ... SYNC JOIN b ...``; a control
row waits until every one covers its range: streaming/sync.py ``split_signals``).

The signal's topic is watched by Spark's Kafka source next to the control stream (so a new
block runs a micro-batch, and its offsets are in the checkpoint); each micro-batch the
re-evaluating runner (:mod:`.runner`) hands the batch's new blocks of each Kafka signal --
their headers, never their samples -- to :func:`advance`, which places them on the
signal's timeline and says how far it is covered. Each Kafka signal keeps its own record
(what follows; under its key among streaming/sync_state.py's per-signal records):

* **Which blocks count.** As for a continuous query over the signal itself
  (:mod:`.kafka_signals`): the blocks are placed on the timeline by their first sample
  numbers; a malformed block, a block overlapping another with other samples, a resent copy
  (read once), a block past the end block and a *late* block -- one reaching below the
  coverage already used to sync rows, so it could change results already delivered -- go
  to the quarantine with their locator, record and reason, and are counted
  (``rows_in = on_time + quarantined``, a block being a row here).
* **When a control row is final.** The signal is *covered* up to ``C``: the least end of
  the last block of each partition that has had blocks (a producer sends each partition's
  blocks in sample order, so no block can still come below it; a gap below ``C`` stays a
  gap), or everywhere once every partition has passed the end block's position. A row whose
  range ends at or before ``C`` -- or is NULL or reversed -- is synced now, the others wait
  in the buffer (the state is the rows the signal has not caught up with, as for WAV).
* **Reading the samples.** Kafka cannot be read by sample number, so the state keeps an
  **index** of the accepted blocks: per partition, entries ``(first offset, last offset,
  first sample, end sample)``, one per micro-batch's blocks merged while their sample span
  stays under :data:`SPAN_SECONDS` and they come in sample order. The rows synced now read,
  with one batch read of Spark's Kafka source, the offsets of the entries overlapping their
  ranges (and nothing else of the topic's history), minus the offsets quarantined there;
  the blocks become stored segments and the batch SYNC's range join
  (planner/sync.py ``sync_frame``) cuts them: each row's segments equal the batch SYNC over
  the same blocks.

Costs: a micro-batch collects its new blocks' headers (about 60 bytes each) to the driver
and reads from the topic only what its final rows ask for, at most one index entry's
span too much per partition and end of the rows' ranges. The index grows by about one entry
per partition per :data:`SPAN_SECONDS` of signal until :data:`MAX_ENTRIES` per partition,
then halves its oldest entries' count by merging neighbours (wider spans read for old
ranges): the state is bounded. A control row asking for samples Kafka no longer keeps (past
the topic's retention) fails the query, as a batch read of them does.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from wavesql.errors import WaveSQLError
from wavesql.sqltext import quote

#: Version of the record this module keeps per Kafka signal (streaming/sync_state.py).
STATE_VERSION = 1
#: An index entry's sample span is kept under this many seconds of signal (how much a read
#: may fetch beyond what a range asks for, per partition).
SPAN_SECONDS = 10
#: Index entries kept per partition before the oldest are merged pairwise.
MAX_ENTRIES = 2048

#: The watch part's struct column (a block header and its record) in the runner's union.
BLOCK = "__block"
BLOCK_TYPE = ("struct<partition:int,offset:bigint,first:bigint,frames:bigint,"
              "problem:string,digest:string,value:binary>")


def watch(spark, signal):
    """The signal's topic as Spark's Kafka source, one row per record: its header (or its
    problem) and its bytes, as struct column :data:`BLOCK`."""
    from pyspark.sql import functions as F

    from wavesql.sources import kafka
    from wavesql.sources import kafka_signal as ks

    raw = kafka.load(spark, signal, streaming=True)
    decoded = ks.headers(raw, len(signal.channels), keep_value=True)
    return decoded.select(F.struct(*[F.col(c) for c in decoded.columns]).alias(BLOCK))


def tag(k: int) -> int:
    """The ``__src`` tag of the ``k``-th Kafka signal's watch rows in the runner's union
    (-1 is the heartbeat ticker's, -2 the file signals' folder watches')."""
    return -3 - k


@dataclass
class Advanced:
    """A Kafka signal of a continuous SYNC after a micro-batch's blocks were placed."""

    timeline: "_Timeline"
    covered: int | str | None  # the sample up to which no block can still come, or "all"
    blocks: int  # the batch's records of the signal's topic
    quarantine: object  # its quarantined blocks (DataFrame), or None
    quarantined: int


def advance(spark, signal, record: dict, blocks) -> Advanced:
    """The signal's ``record`` (its state: :meth:`_Timeline.state`, ``{}`` before the first
    batch) with the micro-batch's new ``blocks`` (its watch rows: columns of
    :data:`BLOCK_TYPE`) placed (module docstring: which blocks count); the ones that cannot
    join the timeline quarantined with the signal's name and their locator."""
    from pyspark.sql import functions as F

    if record and record.get("version") != STATE_VERSION:
        raise WaveSQLError("CHECKPOINT_MISMATCH", "the checkpoint's index of Kafka signal "
                           f"`{signal.name}` was written in format {record.get('version')!r}; "
                           f"this WaveSQL reads {STATE_VERSION}",
                           hint="start the query from a fresh checkpoint")
    mine = _Timeline(record, signal.path, signal.rate_hz)
    records = blocks.select("partition", "offset", "first", "frames", "problem",
                            "digest").collect()
    mine.add(sorted(records, key=lambda r: (r["partition"], r["offset"])))
    covered = mine.covered()
    bad = None
    if mine.bad:
        rows = spark.createDataFrame([(p, o, why) for p, o, why in mine.bad],
                                     "partition INT, offset BIGINT, _reason STRING")
        bad = blocks.join(rows, ["partition", "offset"]).select(
            F.lit(signal.name).alias("_stream"),
            F.concat(F.lit(f"kafka:{signal.path}/"), F.col("partition").cast("string"),
                     F.lit("/"), F.col("offset").cast("string")).alias("_file"),
            F.base64(F.coalesce(F.col("value"), F.lit(b"").cast("binary"))).alias("_record"),
            F.col("_reason"))
    return Advanced(mine, covered, len(records), bad, len(mine.bad))


def unbounded(s0, s1):
    """Whether a range ``[s0, s1)`` (sample-number columns) asks for no sample: NULL or
    empty/reversed -- synced at once (NULL segments), nothing read for it."""
    return s0.isNull() | s1.isNull() | (s1 <= s0)


def covers(covered: int | str | None, s0, s1):
    """Whether the signal, covered up to ``covered`` (:meth:`_Timeline.covered`), covers the
    range ``[s0, s1)``: a row so marked is synced now."""
    from pyspark.sql import functions as F

    ready = unbounded(s0, s1)
    if covered is not None:
        ready = ready | (F.lit(True) if covered == "all" else s1 <= F.lit(covered))
    return ready


def asked(rows, pairs) -> list[tuple[int, int]]:
    """The sample ranges ``[s0, s1)`` the collected ``rows`` ask for, from their columns
    ``pairs`` (``(s0 column, s1 column)``, one per SYNC over the signal); NULL, empty and
    reversed ranges ask for nothing."""
    wanted = set()
    for r in rows:
        for a, b in pairs:
            if r[a] is not None and r[b] is not None and r[b] > r[a]:
                wanted.add((r[a], r[b]))
    return sorted(wanted)


class _Timeline:
    """The Kafka signal as a continuous SYNC knows it: what each partition reached, the end
    block, the blocks not yet below the coverage (to tell an overlap), the index, and the
    offsets inside the index that are not the signal's (quarantined)."""

    def __init__(self, state: dict, topic: str, rate: float):
        self.topic = topic
        self.span = max(1, int(SPAN_SECONDS * rate))
        self.reached: dict[str, int] = dict(state.get("reached") or {})
        self.end_at: int | None = state.get("end_at")
        self.used: int | None = state.get("covered")  # rows were synced up to it
        self.all_used = bool(state.get("all"))  # ... or over the whole signal (its end)
        self.pending: list[list] = [list(b) for b in state.get("pending") or ()]
        self.index: dict[str, list[list[int]]] = {
            k: [list(e) for e in v] for k, v in (state.get("index") or {}).items()}
        self.excluded: dict[str, list[int]] = {
            k: list(v) for k, v in (state.get("excluded") or {}).items()}
        self.bad: list[tuple[int, int, str]] = []

    def add(self, records) -> None:
        """Place the micro-batch's blocks (module docstring: which blocks count)."""
        fresh = []
        for r in records:
            p, o = r["partition"], r["offset"]
            here = f"kafka:{self.topic}/{p}/{o}"
            if r["problem"] is not None:
                self.bad.append((p, o, f"malformed: {r['problem']}"))
                continue
            first, frames = r["first"], r["frames"]
            key = str(p)
            self.reached[key] = max(self.reached.get(key, 0), first + frames)
            if frames == 0 and self.end_at is None:
                self.end_at = first  # the end block
            elif frames == 0:
                self.bad.append((p, o, f"a second end block (the first said the signal ends "
                                       f"at sample {self.end_at})"))
            else:
                fresh.append((first, frames, p, o, r["digest"], here))
        accepted = []
        for first, frames, p, o, digest, here in sorted(fresh):
            if self.end_at is not None and first + frames > self.end_at:
                self.bad.append((p, o, f"after the signal's end (sample {self.end_at}, its end "
                                       "block)"))
                continue
            if self.all_used or (self.used is not None and first < self.used):
                self.bad.append((p, o, f"late: samples {first}..{first + frames - 1} reach "
                                       "ranges already synced (up to sample "
                                       f"{'its end' if self.all_used else self.used})"))
                continue
            clash = next((b for b in self.pending if first < b[0] + b[1] and b[0] < first + frames),
                         None)
            if clash is not None:
                where = f"kafka:{self.topic}/{clash[2]}/{clash[3]}"
                same = (clash[0], clash[1], clash[4]) == (first, frames, digest)
                self.bad.append((p, o, f"a resent copy of {where} (read once)" if same else
                                 f"overlaps {where} (samples {clash[0]}..{clash[0] + clash[1] - 1})"))
                continue
            self.pending.append([first, frames, p, o, digest])
            accepted.append((p, o, first, first + frames))
        self._index(accepted)

    def covered(self) -> int | str | None:
        """The sample up to which no block can still come; "all" once the end block's
        position is passed by every partition, or the blocks up to it are all in."""
        least = min(self.reached.values()) if self.reached else None
        if least is not None:
            self.used = least if self.used is None else max(self.used, least)
        if self.all_used or (self.end_at is not None and self.used is not None and (
                self.used >= self.end_at or self._tiled(self.used, self.end_at))):
            self.used, self.all_used = self.end_at, True
            return "all"
        return self.used

    def _tiled(self, lo: int, hi: int) -> bool:
        """Whether the pending blocks hold every sample of ``[lo, hi)`` (no gap left)."""
        for first, frames, *_ in sorted(self.pending):
            if first + frames <= lo:
                continue
            if first > lo:
                return False
            lo = first + frames
        return lo >= hi

    def state(self) -> dict:
        """JSON-ready: what the next micro-batch starts from."""
        floor = self.used if self.used is not None else None
        pending = [b for b in self.pending if floor is None or b[0] + b[1] > floor]
        return {"version": STATE_VERSION, "kind": "kafka", "reached": self.reached,
                "end_at": self.end_at, "covered": self.used, "all": self.all_used,
                "pending": pending, "index": self.index, "excluded": self.excluded}

    def _index(self, accepted: list) -> None:
        """The batch's accepted blocks into the index; its quarantined offsets inside an
        entry into the excluded list."""
        by_partition: dict[int, list] = {}
        for p, o, lo, hi in accepted:
            by_partition.setdefault(p, []).append((o, lo, hi))
        for p, blocks in by_partition.items():
            entry = [min(b[0] for b in blocks), max(b[0] for b in blocks),
                     min(b[1] for b in blocks), max(b[2] for b in blocks)]
            entries = self.index.setdefault(str(p), [])
            last = entries[-1] if entries else None
            if last is not None and entry[2] >= last[2] and \
                    max(entry[3], last[3]) - last[2] <= self.span:
                last[1], last[3] = max(last[1], entry[1]), max(last[3], entry[3])
            else:
                entries.append(entry)
            if len(entries) > MAX_ENTRIES:
                half = len(entries) // 2
                merged = [[a[0], b[1], min(a[2], b[2]), max(a[3], b[3])]
                          for a, b in zip(entries[:half:2], entries[1:half:2])]
                entries[:half - half % 2] = merged
        for p, o, _ in self.bad:  # (an entry may reach over it later: kept from now on)
            self.excluded.setdefault(str(p), []).append(o)
        for key, offsets in list(self.excluded.items()):
            # an offset below every entry of its partition is never read again
            start = min((e[0] for e in self.index.get(key, ())), default=None)
            kept = sorted({o for o in offsets if start is None or o >= start})
            if kept:
                self.excluded[key] = kept
            else:
                del self.excluded[key]

    def segments(self, spark, signal, wanted: list[tuple[int, int]]):
        """The signal's stored segments (one per block, a struct per channel) over the
        sample ranges ``wanted``: one batch read of the index entries that overlap them."""
        from pyspark.sql import functions as F

        from wavesql.sources import kafka
        from wavesql.sources import kafka_signal as ks
        from wavesql.udfs.program import SPARK_TYPES

        channels = [c.name for c in signal.channels]
        ddl = ", ".join(f"{quote(c)} {SPARK_TYPES['sigseg']}" for c in channels)
        ranges = merged(wanted)
        offsets = offsets_to_read(self.index, ranges)
        if not offsets:
            return spark.createDataFrame([], ddl)
        raw = kafka.load(spark, signal, streaming=False, offsets=offsets)
        found = ks.headers(raw, len(channels), keep_value=True).where(
            "problem IS NULL AND frames > 0")
        excluded = [(int(k), o) for k, v in self.excluded.items() for o in v]
        if excluded:
            found = found.join(spark.createDataFrame(excluded, "partition INT, offset BIGINT"),
                               ["partition", "offset"], "left_anti")
        near = F.lit(False)
        for lo, hi in ranges:
            near = near | ((F.col("first") < F.lit(hi)) & (F.col("first") + F.col("frames")
                                                           > F.lit(lo)))
        rate, width = float(signal.rate_hz), len(channels)

        def to_segments(batches):
            import pyarrow as pa

            from wavesql.sources.kafka_signal import decode_samples

            seg = pa.struct([("start", pa.int64()), ("rate", pa.float64()),
                             ("samples", pa.list_(pa.float32()))])
            for b in batches:
                firsts = b.column("first").to_pylist()
                decoded = [decode_samples(v, width) for v in b.column("value").to_pylist()]
                yield pa.RecordBatch.from_arrays(
                    [pa.array([{"start": f, "rate": rate, "samples": d[c]}
                               for f, d in zip(firsts, decoded)], seg)
                     for c in range(width)], names=channels)

        return found.where(near).select("first", "value").mapInArrow(to_segments, ddl)


def offsets_to_read(index: dict, ranges: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets ``[from, to)`` to read for the sample ranges ``ranges``
    (sorted, merged): from the first to the last index entry that overlaps one of them."""
    offsets: dict[int, tuple[int, int]] = {}
    starts = [lo for lo, _ in ranges]
    for key, entries in index.items():
        for o0, o1, lo, hi in entries:
            j = bisect.bisect_left(starts, hi)  # the ranges starting before the entry ends
            if j and ranges[j - 1][1] > lo:  # (merged: the last of them reaches furthest)
                have = offsets.get(int(key))
                offsets[int(key)] = (o0, o1 + 1) if have is None else (
                    min(have[0], o0), max(have[1], o1 + 1))
    return offsets


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open sample ranges, sorted and merged where they overlap or touch."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]
