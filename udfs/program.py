"""Programs: every signal-function expression of one query stage, fused into one Python pass.

The planner compiles the signal part of a query -- the signal-function calls in the SELECT
list and the WHERE conjuncts that only need them -- into a :class:`Program`. An
:class:`Evaluator` runs it over blocks of windows wherever the samples are in Python: inside
the WAV scan (so raw samples never cross into the JVM) or in a ``mapInArrow`` over segment
rows. One pass computes each distinct sub-expression once, filters, and builds only the
surviving rows' outputs as Arrow columns.

Expressions are JSON-able trees, so a program travels to Spark workers as a string option:

``{"col": "ch1"}``                      an input SigSeg channel
``{"lit": 0.05}``                       a literal (number, string, bool, null, list of numbers)
``{"call": "seg_std", "args": [...]}``  a signal function (the registry's)
``{"op": ">", "args": [a, b]}``         ``+ - * / % = != < <= > >= and or not neg``

Vectorisation: a block of equal-width windows is a :class:`~wavesql.udfs.sigseg.SegBlock`
(a ``(k, n)`` matrix, often a view of the file buffer); functions with a ``batch`` kernel
process it in one numpy call, others run per window. Stateful functions (filters,
detectors) see every window in order, so a program that has one evaluates all rows before
filtering; otherwise the filters run first and outputs are built for passing rows only.

Comparisons follow Spark's semantics, where NaN equals NaN and is larger than any number,
so a pushed-down filter keeps exactly the rows Spark would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from . import registry, spark_order
from .sigseg import SegBlock, SigSeg, SignalError

#: Logical type -> Spark SQL type of a program output column.
SPARK_TYPES = {
    "sigseg": "struct<start:bigint,rate:double,samples:array<float>>",
    "spectrum": "struct<start:bigint,rate:double,n:int,re:array<double>,im:array<double>>",
    "ranges": "array<struct<start:bigint,end:bigint,value:double>>",
    "array<double>": "array<double>",
    "double": "double",
    "bigint": "bigint",
    "int": "int",
    "boolean": "boolean",
    "string": "string",
    "timestamp": "timestamp",
}

_ARROW_TYPES = {
    "sigseg": pa.struct([("start", pa.int64()), ("rate", pa.float64()),
                         ("samples", pa.list_(pa.float32()))]),
    "spectrum": pa.struct([("start", pa.int64()), ("rate", pa.float64()), ("n", pa.int32()),
                           ("re", pa.list_(pa.float64())), ("im", pa.list_(pa.float64()))]),
    "ranges": pa.list_(pa.struct([("start", pa.int64()), ("end", pa.int64()),
                                  ("value", pa.float64())])),
    "array<double>": pa.list_(pa.float64()),
    "double": pa.float64(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True)
class Output:
    """One output column: ``name``, the expression, its logical type.

    ``epoch_us`` turns a bigint of microseconds (``start_time``/``end_time``) into a
    timestamp by adding the signal's epoch; the type is then ``timestamp``.
    """

    name: str
    expr: dict
    type: str
    epoch_us: int | None = None


@dataclass(frozen=True)
class Program:
    """The signal stage of a query: input channels, outputs, pushed-down filters."""

    channels: tuple[str, ...]
    outputs: tuple[Output, ...]
    filters: tuple[dict, ...] = ()

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def identity(channels: Sequence[str]) -> "Program":
        """Output each channel as a SigSeg column (``SELECT * FROM sig``)."""
        return Program(tuple(channels),
                       tuple(Output(c, {"col": c}, "sigseg") for c in channels))

    def to_json(self) -> str:
        return json.dumps({
            "channels": list(self.channels),
            "outputs": [{"name": o.name, "expr": o.expr, "type": o.type, "epoch_us": o.epoch_us}
                        for o in self.outputs],
            "filters": list(self.filters),
        }, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "Program":
        d = json.loads(text)
        return Program(tuple(d["channels"]),
                       tuple(Output(o["name"], o["expr"], o["type"], o.get("epoch_us"))
                             for o in d["outputs"]),
                       tuple(d.get("filters", ())))

    # -- facts the planner needs ----------------------------------------------------------
    def calls(self) -> list[dict]:
        """Every call node, outputs and filters, depth first."""
        found: list[dict] = []
        for tree in [o.expr for o in self.outputs] + list(self.filters):
            _collect_calls(tree, found)
        return found

    @property
    def stateful(self) -> bool:
        return any(registry.require(c["call"]).stateful for c in self.calls())

    def lookback(self, rate: float) -> int | str:
        """Samples of history the program needs at ``rate`` Hz to run in parallel
        partitions (each warmed up on that many samples before it), or the reason it must
        run in one ordered pass (the first unbounded function's). Look-backs add up along a
        chain (``lowpass(highpass(x))``) and the longest chain counts."""
        needs = [_tree_lookback(t, rate) for t in [o.expr for o in self.outputs]
                 + list(self.filters)]
        reasons = [n for n in needs if isinstance(n, str)]
        return reasons[0] if reasons else max(needs, default=0)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(o.name, _ARROW_TYPES[o.type]) for o in self.outputs])

    def spark_ddl(self) -> str:
        return ", ".join(f"`{o.name}` {SPARK_TYPES[o.type]}" for o in self.outputs)


def _tree_lookback(tree: dict, rate: float) -> int | str:
    total = 0
    for arg in tree.get("args", ()):
        n = _tree_lookback(arg, rate)
        if isinstance(n, str):
            return n
        total = max(total, n)
    if "call" in tree:
        fn = registry.require(tree["call"])
        if fn.stateful:
            own = fn.lookback_of(rate, *[a.get("lit") for a in tree["args"][1:]])
            return own if isinstance(own, str) else total + own
    return total


def _collect_calls(tree: dict, out: list[dict]) -> None:
    for arg in tree.get("args", ()):
        _collect_calls(arg, out)
    if "call" in tree:
        out.append(tree)


# ---------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------
@dataclass
class _Rows:
    """The windows one evaluation runs over."""

    starts: np.ndarray          # int64 (k,)
    rate: float
    channels: dict[str, Any]    # name -> SegBlock or list of SigSeg

    @property
    def k(self) -> int:
        return int(self.starts.shape[0])

    def take(self, idx: np.ndarray) -> "_Rows":
        return _Rows(self.starts[idx], self.rate,
                     {n: _take(v, idx) for n, v in self.channels.items()})


@dataclass
class Evaluator:
    """Runs a :class:`Program` over blocks of windows, carrying state between calls.

    One evaluator per input partition (or per micro-batch stream): stateful functions keep
    their state here across ``run_windows`` calls, which must come in sample order.
    """

    program: Program
    states: dict[str, Any] = field(default_factory=dict)
    # per_row: each row of ``run_batch`` is a signal of its own (a SYNC result's excerpts):
    # stateful functions start from rest at every row, and a detector's output still
    # pending at the row's end (threshold_ranges' open range) is the row's, not held over.
    per_row: bool = False
    # null_rows: a row whose segment is NULL (a SYNC range the recording does not cover)
    # gets NULL outputs and leaves the state alone, also when state is carried from row to
    # row (a SYNC result's ranges per key: planner/segment_stage.py ``refuse_pending_per_key``)
    null_rows: bool = False

    def __post_init__(self):
        self._stateful = self.program.stateful
        self._schema = self.program.arrow_schema()

    def run_windows(self, starts, rate: float, channels: Sequence,
                    discard_before: int | None = None) -> pa.RecordBatch:
        """Evaluate the program over ``k`` windows; returns the surviving rows' outputs.

        Parameters
        ----------
        starts : array of int64, shape (k,)
            Absolute start sample number of each window, ascending.
        rate : float
            Sample rate shared by the windows.
        channels : sequence
            One entry per ``program.channels``: a 2-D array ``(k, n)`` (equal widths) or a
            list of ``k`` 1-D arrays.
        discard_before : int, optional
            Windows starting before this sample are evaluated (their state matters) but
            not emitted: the look-back warm-up of a partition.
        """
        starts = np.asarray(starts, dtype=np.int64)
        chans = {}
        for name, data in zip(self.program.channels, channels):
            if isinstance(data, np.ndarray) and data.ndim == 2:
                chans[name] = SegBlock(starts, float(rate), data)
            else:
                chans[name] = [SigSeg(int(s), float(rate), np.asarray(x))
                               for s, x in zip(starts, data)]
        rows = _Rows(starts, float(rate), chans)
        columns, idx = self._run(rows, discard_before)
        return self._batch(columns, len(idx))

    def run_columns(self, columns: Sequence[np.ndarray]) -> pa.RecordBatch:
        """Evaluate the program over rows whose inputs are value columns, one array per
        ``program.channels`` (the ordered pass over window scores: udfs/row_state.py);
        calls come in row order, as for ``run_windows``."""
        k = len(columns[0]) if columns else 0
        rows = _Rows(np.zeros(k, dtype=np.int64), 1.0, dict(zip(self.program.channels, columns)))
        out, idx = self._run(rows, None)
        return self._batch(out, len(idx))

    def run_batch(self, batch: pa.RecordBatch, passthrough: Sequence[str] = ()
                  ) -> pa.RecordBatch:
        """Evaluate the program over rows of SigSeg columns (an Arrow batch of a DataFrame).

        Each ``program.channels`` column holds ``struct<start, rate, samples>``; rows of one
        width and rate become one ``SegBlock`` (vectorised), others are taken one by one.
        The ``passthrough`` columns are copied for the rows the filters keep, after the
        program's outputs.
        """
        k = batch.num_rows
        if self.per_row and self._stateful and k > 1:
            parts = [self.run_batch(batch.slice(i, 1), passthrough) for i in range(k)]
            kept = [p for p in parts if p.num_rows]
            if not kept:
                return parts[0]
            return pa.Table.from_batches(kept).combine_chunks().to_batches()[0]
        if self.per_row:
            self.states = {}  # one row: a signal of its own, from rest
        missing = np.zeros(k, dtype=bool)
        for name in self.program.channels:
            if batch.column(name).null_count:
                missing |= batch.column(name).is_null().to_numpy(zero_copy_only=False)
        if missing.any():
            return self._with_null_rows(batch, missing, passthrough)
        chans: dict[str, Any] = {}
        starts = np.zeros(k, dtype=np.int64)
        rate = 1.0
        for name in self.program.channels:
            column = batch.column(name)
            starts_i, rates, segs = _decode_segments(column)
            starts = starts_i
            rate = float(rates[0]) if k else 1.0
            chans[name] = segs
        columns, idx = self._run(_Rows(starts, rate, chans), None)
        out = self._batch(columns, len(idx))
        if not passthrough:
            return out
        kept = pa.array(idx, type=pa.int64())
        arrays = list(out.columns) + [batch.column(c).take(kept) for c in passthrough]
        names = list(out.schema.names) + list(passthrough)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _with_null_rows(self, batch: pa.RecordBatch, missing: np.ndarray,
                        passthrough: Sequence[str]) -> pa.RecordBatch:
        """SQL's rule for a row whose segment is NULL (a SYNC range the recording does not
        cover): every output of the program is NULL there, and a pushed-down filter, NULL
        too, drops the row. The other rows are evaluated as usual."""
        if self._stateful and not (self.per_row or self.null_rows):
            raise SignalError("TYPE_ERROR", "a stateful signal function got NULL segments",
                              hint="filter them out first: WHERE <segment> IS NOT NULL")
        good = self.run_batch(batch.take(pa.array(np.flatnonzero(~missing))), passthrough)
        if self.program.filters:
            return good
        holes = np.flatnonzero(missing)
        arrays = [pa.nulls(len(holes), type=f.type) for f in self._schema]
        arrays += [batch.column(c).take(pa.array(holes)) for c in passthrough]
        nulls = pa.RecordBatch.from_arrays(arrays, schema=good.schema)
        return pa.Table.from_batches([good, nulls]).combine_chunks().to_batches()[0] \
            if good.num_rows + nulls.num_rows else good

    def _run(self, rows: "_Rows", discard_before: int | None):
        """(output columns, indices of the kept rows) for ``rows``; NaN and Inf samples
        propagate quietly (no floating-point warnings: ``registry``'s non-finite policy)."""
        with np.errstate(all="ignore"):
            return self._run_rows(rows, discard_before)

    def _run_rows(self, rows: "_Rows", discard_before: int | None):
        keep = np.ones(rows.k, dtype=bool)
        if discard_before is not None:
            keep &= rows.starts >= discard_before
        if self._stateful:
            memo: dict[str, Any] = {}
            for f in self.program.filters:
                keep &= _truth(self._eval(f, rows, memo), rows.k)
            columns = [self._eval(o.expr, rows, memo) for o in self.program.outputs]
            idx = np.flatnonzero(keep)
            return [_take(c, idx) for c in columns], idx
        base = np.arange(rows.k)
        if not keep.all():
            base = np.flatnonzero(keep)
            rows = rows.take(base)
        memo = {}
        mask = np.ones(rows.k, dtype=bool)
        for f in self.program.filters:
            mask &= _truth(self._eval(f, rows, memo), rows.k)
        if not mask.all():
            idx = np.flatnonzero(mask)
            memo = {key: _take(v, idx) for key, v in memo.items()}
            rows = rows.take(idx)
            base = base[idx]
        columns = [self._eval(o.expr, rows, memo) for o in self.program.outputs]
        return columns, base

    def finish(self) -> pa.RecordBatch | None:
        """Output still pending at the end of the data (detectors' open ranges), if any."""
        pending = []
        for key, state in self.states.items():
            name = json.loads(key)["call"]
            if registry.require(name).flush is not None:
                value = registry.flush(name, state)
                if value is not None:
                    pending.append((key, value))
        if not pending:
            return None
        by_key = dict(pending)
        columns = []
        for o in self.program.outputs:
            key = json.dumps(o.expr, sort_keys=True)
            columns.append([by_key.get(key)])
        return self._batch(columns, 1)

    # -- expression evaluation ------------------------------------------------------------
    def _eval(self, tree: dict, rows: _Rows, memo: dict) -> Any:
        if "lit" in tree:
            return _Lit(tree["lit"])
        key = json.dumps(tree, sort_keys=True)
        if key in memo:
            return memo[key]
        if "col" in tree:
            value = rows.channels[tree["col"]]
        elif "call" in tree:
            value = self._call(tree, key, rows, memo)
        else:
            value = _op(tree["op"], [self._eval(a, rows, memo) for a in tree["args"]], rows.k)
        memo[key] = value
        return value

    def _call(self, tree: dict, key: str, rows: _Rows, memo: dict) -> Any:
        name = tree["call"]
        fn = registry.require(name)
        args = [self._eval(a, rows, memo) for a in tree["args"]]
        first, rest = args[0], args[1:]
        if (fn.batch is not None and isinstance(first, SegBlock)
                and all(isinstance(a, _Lit) for a in rest)):
            return fn.batch(first, *(a.value for a in rest))
        state = self.states.get(key)
        if fn.scan is not None and not isinstance(first, (SegBlock, _Lit)) \
                and all(isinstance(a, _Lit) for a in rest):
            lits = fn.bind_args([None] + [a.value for a in rest])[1:]
            with np.errstate(all="ignore"):  # IEEE propagation, as registry.call
                out, self.states[key] = fn.scan(
                    first, *lits, fn.init_state(*lits) if state is None else state)
            return out
        results = []
        for i in range(rows.k):
            call_args = [_row(a, i) for a in args]
            if fn.stateful:
                result, state = registry.call(name, *call_args, state=state)
            else:
                result = fn.kernel(*call_args)
            results.append(result)
        if fn.stateful:
            self.states[key] = state
            if self.per_row and fn.flush is not None and results:
                results[-1] = _with_pending(results[-1], registry.flush(name, state))
        if fn.output == "scalar":
            return np.asarray(results, dtype=np.bool_ if fn.returns == "boolean"
                              else np.int64 if fn.returns in ("bigint", "int") else np.float64)
        return results

    # -- Arrow output ---------------------------------------------------------------------
    def _batch(self, columns: list, k: int) -> pa.RecordBatch:
        arrays = [_to_arrow(c, o, k) for c, o in zip(columns, self.program.outputs)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def _with_pending(result: Any, pending: Any) -> Any:
    """A row's detector output plus what it still held open at the row's end (per-row
    evaluation: the row's segment ends its signal). Only ``Ranges`` are flushed today."""
    from .kernels.values import Ranges

    if pending is None:
        return result
    if not isinstance(result, Ranges) or not isinstance(pending, Ranges):
        raise SignalError("NOT_IMPLEMENTED", f"no per-row end of stream for a "
                          f"{type(result).__name__} output")
    values = None if result.values is None and pending.values is None else \
        tuple(result.values or ()) + tuple(pending.values or ())
    return Ranges(tuple(result.spans) + tuple(pending.spans), values)


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Lit:
    value: Any


def _take(value: Any, idx: np.ndarray) -> Any:
    if isinstance(value, _Lit):
        return value
    if isinstance(value, SegBlock):
        return SegBlock(value.starts[idx], value.rate, value.data[idx])
    if isinstance(value, np.ndarray):
        return value[idx]
    return [value[i] for i in idx]


def _row(value: Any, i: int) -> Any:
    if isinstance(value, _Lit):
        return value.value
    if isinstance(value, SegBlock):
        return SigSeg(int(value.starts[i]), value.rate, value.data[i])
    if isinstance(value, np.ndarray):
        return value[i].item()
    return value[i]


def _vector(value: Any, k: int) -> np.ndarray:
    if isinstance(value, _Lit):
        v = value.value
        return np.full(k, np.nan if v is None else v)
    if isinstance(value, np.ndarray):
        return value
    raise SignalError("TYPE_ERROR", "a signal segment cannot be used as a number here",
                      hint="apply a statistic such as seg_avg() to it")


def _truth(value: Any, k: int) -> np.ndarray:
    v = _vector(value, k)
    if v.dtype != np.bool_:
        raise SignalError("TYPE_ERROR", "a WHERE condition must be true or false")
    return v


_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "%": np.fmod}


def _op(op: str, args: list, k: int) -> np.ndarray:
    if op in ("and", "or"):
        a, b = (_truth(x, k) for x in args)
        return a & b if op == "and" else a | b
    if op == "not":
        return ~_truth(args[0], k)
    if op == "neg":
        return -_vector(args[0], k)
    a, b = (_vector(x, k) for x in args)
    with np.errstate(all="ignore"):
        if op in _ARITH:
            return _ARITH[op](a, b)
        if op == "/":  # Spark: x / 0 is NULL; NaN is the closest a double column has
            out = np.true_divide(a.astype(np.float64), b)
            out[b == 0] = np.nan
            return out
        return _compare(op, a.astype(np.float64), b.astype(np.float64))


#: A signal expression's comparison operators, as udfs/spark_order.py names them.
_COMPARE = {"=": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


def _compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Spark's order (udfs/spark_order.py): NaN equals NaN and is above every number
    if op not in _COMPARE:
        raise SignalError("NOT_IMPLEMENTED", f"operator {op} in a signal expression")
    return spark_order.compare(_COMPARE[op], a, b)


def _to_arrow(value: Any, out: Output, k: int) -> pa.Array:
    t = out.type
    if isinstance(value, _Lit):
        return pa.array([value.value] * k, type=_ARROW_TYPES[t])
    if t == "sigseg":
        return _segments_to_arrow(value, k)
    if t in ("double", "bigint", "int", "boolean"):
        arr = np.asarray(value)
        return pa.array(arr, type=_ARROW_TYPES[t], from_pandas=False) if k else pa.array(
            [], type=_ARROW_TYPES[t])
    if t == "timestamp":
        micros = np.asarray(value, dtype=np.int64) + (out.epoch_us or 0)
        return pa.array(micros, type=pa.int64()).cast(_ARROW_TYPES[t])
    if t == "array<double>":
        return pa.array([None if v is None else np.asarray(v, dtype=np.float64) for v in value],
                        type=_ARROW_TYPES[t])
    if t == "spectrum":
        return pa.array([None if s is None else {
            "start": s.start, "rate": s.rate, "n": s.n,
            "re": s.bins.real, "im": s.bins.imag} for s in value], type=_ARROW_TYPES[t])
    if t == "ranges":
        return pa.array([None if r is None else [
            {"start": a, "end": b, "value": (r.values[i] if r.values else None)}
            for i, (a, b) in enumerate(r.spans)] for r in value], type=_ARROW_TYPES[t])
    if t == "string":
        return pa.array(list(value), type=pa.string())
    raise SignalError("NOT_IMPLEMENTED", f"no Arrow form for a {t} output")


def _decode_segments(column) -> tuple[np.ndarray, np.ndarray, Any]:
    """(starts, rates, SegBlock or list of SigSeg) of an Arrow column of SigSeg structs."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    starts = column.field("start").to_numpy(zero_copy_only=False).astype(np.int64)
    rates = column.field("rate").to_numpy(zero_copy_only=False).astype(np.float64)
    samples = column.field("samples")
    offsets = samples.offsets.to_numpy()
    values = samples.values.to_numpy(zero_copy_only=False)
    widths = np.diff(offsets)
    k = len(starts)
    if k and (widths == widths[0]).all() and (rates == rates[0]).all():
        data = values[offsets[0]:offsets[-1]].reshape(k, int(widths[0]))
        return starts, rates, SegBlock(starts, float(rates[0]), data)
    return starts, rates, [SigSeg(int(starts[i]), float(rates[i]),
                                  values[offsets[i]:offsets[i + 1]]) for i in range(k)]


def _segments_to_arrow(value: Any, k: int) -> pa.Array:
    if isinstance(value, SegBlock):
        data = np.ascontiguousarray(value.data, dtype=np.float32).reshape(-1)
        width = value.data.shape[1] if value.data.ndim == 2 else 0
        offsets = np.arange(k + 1, dtype=np.int32) * width
        starts, rates = value.starts, np.full(k, value.rate)
    else:
        segs = list(value)
        widths = np.array([s.width for s in segs], dtype=np.int64)
        offsets = np.zeros(len(segs) + 1, dtype=np.int32)
        np.cumsum(widths, out=offsets[1:])
        data = (np.concatenate([np.asarray(s.samples, dtype=np.float32) for s in segs])
                if segs else np.zeros(0, np.float32))
        starts = np.array([s.start for s in segs], dtype=np.int64)
        rates = np.array([s.rate for s in segs], dtype=np.float64)
    samples = pa.ListArray.from_arrays(pa.array(offsets), pa.array(data))
    return pa.StructArray.from_arrays(
        [pa.array(starts, pa.int64()), pa.array(rates, pa.float64()), samples],
        fields=list(_ARROW_TYPES["sigseg"]))
