"""The Spark stateful processors (``transformWithStateInPandas``) around the kernels: the
window kernel (:class:`WindowProcessor`) and the OVER windows' look-back
(:class:`LookbackProcessor`), on what they share (:class:`BucketProcessor`).

Spark calls one once per micro-batch for each bucket of keys that has new rows, and
once for each bucket whose timer expired (a window closed with no new row for its keys);
it keeps the bucket's state -- the kernel's bytes (:mod:`.state`: Arrow, never a pickle)
-- in one ``ValueState`` of Spark's state store, so Spark checkpoints it with the offsets,
restores it on restart and partitions it with the query.

**Progress is Spark's watermark.** Each input row carries ``__wm``, the progress it promises
(event time minus the stream's WATERMARK, or a punctuation's value), and the query has
``withWatermark("__wm", "0 seconds")`` per input: Spark keeps the maximum, takes the
minimum over inputs, passes it to this processor (``getCurrentWatermarkInMs``), fires the
timers it passes and runs a no-data micro-batch when it advanced -- so windows close
without new rows, in the batch right after the one that made them final (after a
restart, each input's own progress comes back through its resume input, :mod:`.resume`:
Spark's checkpoint keeps only the minimum). The ``__wm``
column is dropped before the processor, so Spark drops no row for being late: the kernel
sends late rows to the late sink instead. WaveSQL counts time in microseconds and Spark's
watermark in milliseconds, so ``__wm`` carries microseconds *as* milliseconds, offset by
:data:`OFFSET` so that event times before 1970 work too: Spark's watermark of such a query
reads as a far-future date, and WaveSQL's progress is exact to the microsecond. Event
times from 1934-05 to 2226 advance progress (rows outside still count, never late).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor

from . import lookback
from . import plan as pl
from . import windows as kernel

#: Microseconds added to progress so that it is positive in Spark's watermark (2^50 µs,
#: 35.7 years: progress from 1934-05 on).
OFFSET = 1 << 50
#: The largest progress that fits: ``(p + OFFSET) * 1000`` must be a Spark timestamp.
TOP = (((1 << 63) - 1) // 1000) - OFFSET


def watermark_sql(us_sql: str) -> str:
    """Spark SQL of the ``__wm`` timestamp promising progress ``us_sql`` (microseconds);
    NULL outside the range the encoding holds."""
    return (f"CASE WHEN ({us_sql}) BETWEEN {-OFFSET} AND {TOP} THEN "
            f"timestamp_micros((({us_sql}) + {OFFSET}) * 1000) END")


def tick_filler(data_type, raw: bool = False):
    """The value of a row that is no data (a HEARTBEAT's tick, a view's promise row, a resume
    row) in a column it does not set: 0 / false in an integer or boolean column, else NULL.
    Never NULL there: Spark hands a bucket's rows to the processor as pandas, where one
    NULL turns the whole call's BIGINT column -- the key hashes included -- into floats,
    which round hashes above 2**53, so the bucket's data rows in that call would no longer
    match the keys its state holds. ``raw``: a stream's own columns before a view (which
    then computes on them, and the encoding after it coalesces): NULL, as 0 there could
    make a view's ``a / n`` fail under ANSI (DIVIDE_BY_ZERO)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, IntegralType

    if raw:
        return F.lit(None)
    if isinstance(data_type, IntegralType):
        return F.lit(0)
    if isinstance(data_type, BooleanType):
        return F.lit(False)
    return F.lit(None)


def progress_of(watermark_ms: int | None) -> int | None:
    """WaveSQL's progress (µs) from Spark's watermark (0 or less: none yet)."""
    if watermark_ms is None or watermark_ms <= 0:
        return None
    return int(watermark_ms) - OFFSET


class BucketProcessor(StatefulProcessor):
    """What the stateful processors share: one state value per bucket, called with the
    bucket's new rows or when its timer expired; a kernel step (``_step``) per call."""

    def __init__(self, output_ddl: str, inputs: list[str]):
        #: the input columns in order: PySpark hands them over renamed when a name starts
        #: with an underscore (its rows travel as namedtuples), so they are named here
        self.inputs = list(inputs)
        self.types = dict(c.split(" ") for c in output_ddl.split(", "))
        self.columns = list(self.types)

    def init(self, handle) -> None:
        from pyspark.sql.types import BinaryType, StructField, StructType

        self.handle = handle
        # the schema as a StructType: given as DDL text, PySpark asks the JVM to parse it
        # (a round trip per task); this is the same schema ("value BINARY")
        self.state = handle.getValueState("window", StructType([StructField("value",
                                                                            BinaryType())]))

    def handleInputRows(self, key, rows, timerValues):
        frames = [f for f in rows if len(f)]
        batch = pd.concat(frames, ignore_index=True) if len(frames) > 1 else (
            frames[0] if frames else None)
        if batch is not None:
            batch.columns = self.inputs
        yield self._step(batch, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield self._step(None, timerValues)

    def close(self) -> None:
        pass

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        raise NotImplementedError

    @staticmethod
    def _begin(batch: pd.DataFrame | None, timer_values):
        """``(progress, kinds, data)`` of a call: Spark's watermark as progress (µs; None:
        none yet), each input row's ``__kind``, and the rows to process (kind RESULT;
        None on a timer call)."""
        progress = progress_of(timer_values.getCurrentWatermarkInMs())
        if batch is None:
            return progress, np.zeros(0, np.int8), None
        kinds = batch["__kind"].to_numpy()
        data = kinds == pl.RESULT
        # (every row data, the usual case: the rows as they are, not a copy of them)
        return progress, kinds, (batch if data.all() else batch[data])

    def _stored(self) -> bytes | None:
        stored = self.state.get()  # None when the bucket has none (one state call, not two)
        return bytes(stored[0]) if stored else None

    def _keep(self, value: bytes | None, timer: int | None) -> None:
        """Store the bucket's next state and set its timer (µs; None: none)."""
        if value is None:
            self.state.clear()
        else:
            self.state.update((value,))
        # Spark (4.3) fires a timer once the watermark reaches it: at the instant + 1 it
        # fires once progress is past the instant. (Registered at the instant itself, it
        # would fire with the instant not final yet, be registered again, and Spark's
        # clean-up of the fired timer would delete that new registration.) A timer already
        # where it should be stays: each state call is a round trip to the JVM.
        want = (timer + 1 + OFFSET if timer is not None and -OFFSET <= timer < TOP else None)
        timers = list(self.handle.listTimers())
        for t in timers:
            if t != want:
                self.handle.deleteTimer(t)
        if want is not None and want not in timers:
            self.handle.registerTimer(want)

    def _passed_through(self, batch: pd.DataFrame | None, kinds: np.ndarray, encode) -> list:
        """The call's rows without an event time and its malformed ones, handed back as
        they came (``encode``: the processor's own row form) with their record and file,
        for the late and quarantine sinks."""
        parts = []
        if batch is None:
            return parts
        for kind in (pl.NO_TIME, pl.MALFORMED):
            if (kinds == kind).any():
                rows = batch[kinds == kind]
                extra = {name: rows[name].to_numpy(object)
                         for name in ("__record", "__file") if name in rows}
                parts.append(self._out(encode(rows), kind, extra))
        return parts

    def _stats(self, kinds: np.ndarray, on_time: int, late: int, state_rows: int,
               value: bytes | None, batch: pd.DataFrame | None) -> pd.DataFrame:
        return self._frame(1, pl.STATS, self._stats_columns(kinds, on_time, late, state_rows,
                                                             value, batch))

    def _stats_columns(self, kinds: np.ndarray, on_time: int, late: int, state_rows: int,
                       value: bytes | None, batch: pd.DataFrame | None) -> dict:
        stats = [on_time, late, int((kinds == pl.NO_TIME).sum()),
                 int((kinds == pl.PUNCTUATION).sum()), int((kinds == pl.MALFORMED).sum()),
                 state_rows, len(value) if value is not None else 0]
        cols = {f"__n{i}": np.array([v], np.int64) for i, v in enumerate(stats)}
        if pl.ARRIVED in self.types:  # a Kafka stream: its rows' earliest arrival (0: none)
            cols[pl.ARRIVED] = np.array([_earliest(batch)], np.int64)
        return cols

    def _frame(self, n: int, kind: int, cols: dict) -> pd.DataFrame:
        """``n`` output rows of ``kind``: ``cols`` given, every other column its zero
        (NULL flags set, strings NULL)."""
        return self._frames([(n, kind, cols)])

    def _frames(self, parts: list[tuple[int, int, dict]]) -> pd.DataFrame:
        """The output rows of ``parts``, ``(n, kind, cols)`` each as :meth:`_frame`'s, as one
        frame: each column concatenated once (a frame per part and ``pd.concat`` of them
        cost more than the window kernel itself)."""
        out = {}
        for name, spark_type in self.types.items():
            pieces = [cols[name] if name in cols else self._zeros(name, spark_type, n, kind)
                      for n, kind, cols in parts]
            out[name] = pieces[0] if len(pieces) == 1 else _concatenate(pieces)
        return pd.DataFrame(out, copy=False)

    @staticmethod
    def _zeros(name: str, spark_type: str, n: int, kind: int) -> np.ndarray:
        """``n`` rows of the column ``name`` not given: the kind, NULL flags set, strings
        NULL, numbers 0."""
        if name == "__kind":
            return np.full(n, kind, np.int8)
        if spark_type == "STRING" or spark_type.startswith("ARRAY"):
            return np.full(n, None, object)
        if spark_type == "BOOLEAN":
            return np.full(n, name.startswith(("__kn", "__gn", "__cn", "__wn")), bool)
        return np.zeros(n, {"TINYINT": np.int8, "BIGINT": np.int64,
                            "DOUBLE": np.float64}[spark_type])


def _concatenate(pieces: list) -> np.ndarray:
    """One column's pieces end to end (as objects if any piece is: strings, NULLs)."""
    arrays = [np.asarray(p) for p in pieces]
    if any(a.dtype == object for a in arrays):
        arrays = [a.astype(object, copy=False) for a in arrays]
    return np.concatenate(arrays)


def _earliest(batch: pd.DataFrame | None) -> int:
    """The earliest Kafka timestamp (µs) of a call's input rows; 0 when none has one (no
    rows, or a HEARTBEAT's ticks only)."""
    if batch is None or pl.ARRIVED not in batch:
        return 0
    values = pd.to_numeric(batch[pl.ARRIVED], errors="coerce").to_numpy(np.float64)
    values = values[values > 0]
    return int(values.min()) if len(values) else 0


class WindowProcessor(BucketProcessor):
    """One :class:`~.plan.WindowedPlan`'s kernel per bucket (module docstring)."""

    def __init__(self, windowed: pl.WindowedPlan, inputs: list[str]):
        super().__init__(windowed.output_ddl, inputs)
        self.op = windowed.operator
        self.n_keys = len(windowed.key_types)
        self.n_args = len(windowed.arg_types)
        self.n_order = len(windowed.order_types)

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        progress, kinds, data = self._begin(batch, timer_values)
        rows = self._rows(data)
        result = kernel.step(self.op, self._stored(), rows, progress)
        self._keep(result.state, result.timer)
        parts = [self._results(result.results)]
        if data is not None and result.late.any():
            late = data[result.late]
            parts.append(self._passthrough(late, pl.LATE))
        if batch is not None:
            for kind in (pl.NO_TIME, pl.MALFORMED):
                if (kinds == kind).any():
                    parts.append(self._passthrough(batch[kinds == kind], kind))
        late_n = int(result.late.sum())
        parts.append((1, pl.STATS, self._stats_columns(
            kinds, len(rows) - late_n, late_n, result.state_rows, result.state, batch)))
        return self._frames(parts)

    def _rows(self, data: pd.DataFrame | None) -> kernel.Rows:
        if data is None or not len(data):
            empty = lambda: [(np.zeros(0, object), np.zeros(0, bool))]  # noqa: E731
            return kernel.Rows(np.zeros(0, np.int64), np.zeros(0, bool),
                               empty() * self.n_keys, [(np.zeros(0), np.zeros(0, bool))]
                               * self.n_args, empty() * self.n_order)
        col = lambda name: data[name].to_numpy()  # noqa: E731
        pairs = lambda p, n: [(col(f"__{p}{i}"), col(f"__{p}n{i}").astype(bool))  # noqa
                              for i in range(n)]
        return kernel.Rows(col("__ts").astype(np.int64), col("__pass").astype(bool),
                           pairs("k", self.n_keys), pairs("a", self.n_args),
                           pairs("o", self.n_order))

    def _results(self, res: kernel.Results) -> tuple[int, int, dict]:
        cols = {"__time": res.time.astype(np.int64), "__final": res.final.astype(bool)}
        for i, (v, m) in enumerate(res.keys):
            cols[f"__kn{i}"], cols[f"__k{i}"] = m.astype(bool), v
        for j, (v, m) in enumerate(res.values):
            cols[f"__gn{j}"], cols[f"__g{j}"] = m.astype(bool), v
        return len(res), pl.RESULT, cols

    def _passthrough(self, rows: pd.DataFrame, kind: int) -> tuple[int, int, dict]:
        cols = {"__time": rows["__ts"].to_numpy(np.int64),
                "__row": rows["__row"].to_numpy(object)}
        for name in ("__record", "__file"):
            if name in rows:
                cols[name] = rows[name].to_numpy(object)
        return len(rows), kind, cols


class LookbackProcessor(BucketProcessor):
    """One :class:`~.over_plan.OverPlan`'s look-back kernel per bucket: hands back the
    rows over which the batch plan computes the OVER windows of the rows that became final
    (:mod:`.lookback`), late rows, timeless and malformed ones, and the counts."""

    def __init__(self, over, inputs: list[str]):
        super().__init__(over.output_ddl, inputs)
        self.op = over.operator
        self.schema = self.op.schema()
        #: the kernel's columns the output carries (``__c0`` <- ``c0``, ``__w0`` <- ``w0``)
        self.encoded = [name[2:] for name in self.types if name != "__kind"]

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        progress, kinds, data = self._begin(batch, timer_values)
        new = self._table(data)
        result = lookback.step(self.op, self._stored(), new, progress)
        self._keep(result.state, result.timer)
        if self.op.windows is not None and result.context.num_rows:
            parts = [self._out(lookback.frames(self.op, result), pl.RESULT)]
        else:
            parts = [self._out(result.context, pl.RESULT)]
        late_n = int(result.late.sum())
        if late_n:
            parts.append(self._out(new.filter(pa.array(result.late)), pl.LATE))
        parts += self._passed_through(batch, kinds, self._table)
        parts.append(self._stats(kinds, new.num_rows - late_n, late_n, result.state_rows,
                                 result.state, batch))
        return pd.concat(parts, ignore_index=True)[self.columns]

    def _table(self, rows: pd.DataFrame | None) -> pa.Table:
        """The encoded rows as the kernel's Arrow table (no NULLs: values and flags)."""
        if rows is None:
            return self.schema.empty_table()
        return pa.table([pa.array(rows[f"__{f.name}"].to_numpy(), f.type)
                         for f in self.schema], schema=self.schema)

    def _out(self, table: pa.Table, kind: int, extra: dict | None = None) -> pd.DataFrame:
        cols = {f"__{name}": table.column(name).to_numpy(zero_copy_only=False)
                for name in self.encoded if name in table.column_names}
        return self._frame(table.num_rows, kind, {**cols, **(extra or {})})
