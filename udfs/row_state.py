"""Row-state functions split off a scan: window scores in parallel, the recursion in order.

A *row-state* function (``cfar``) carries its state from row to row -- one score per
window -- and needs the whole past (no finite warm-up is exact), so a program holding one
used to run its whole scan as one ordered pass. But its arguments usually have a finite
look-back (``seg_rms(ch1)``, ``seg_rms(lowpass(ch1, ...))``): reading the samples and
scoring the windows -- most of the work -- can run in parallel partitions like any bounded
program, and only the recursion over the scores needs the windows in order.

:func:`split` cuts a :class:`~wavesql.udfs.program.Program` in two:

- the **scan** program: every maximal sub-expression free of row-state calls that the rest
  needs (a call or a channel; operators stay above the cut), one narrow scalar column each
  (``__rs0``, ...), no filter -- every window's score must reach the recursion;
- the **ordered** program: the original outputs and filters with those sub-expressions
  replaced by the columns, run by one :class:`~wavesql.udfs.program.Evaluator` over the
  scan's rows in window order (:meth:`~wavesql.udfs.program.Evaluator.run_columns`).

The values crossing the cut are the very float64/int64/bool arrays the one-pass evaluator
would have handed on (Arrow carries them bit for bit), operators are elementwise numpy on
both sides, and ``cfar_scan`` gives the same bits for any split of its scores -- so the
flags are the sequential pass's exactly. Like the sequential pass, the recursion runs over
every window of the signal in start order, across file boundaries and gaps (a gap cuts
windows; it does not reset the estimate).

Rows travel to the ordered pass packed (:func:`pack`): a few Spark rows per scan partition,
each an Arrow IPC stream of up to :data:`PACK_ROWS` scan rows keyed by the partition's index
and its sequence number -- partitions are cut in timeline order -- so the single ordered
task sorts a handful of keys, not a million rows (:func:`ordered_pass`), and Spark copies
one binary value per packed row (list columns are converted item by item; either way the
ordered task's JVM side is ~0.13 s of CPU at 1 M windows, its Python side mostly
``cfar_scan``). Only scalar columns are cut (a segment column would carry the samples through one task):
otherwise :func:`split` says no and the scan stays sequential.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from . import registry
from .program import Evaluator, Output, Program, _tree_lookback

#: Logical types a cut column may have, and the numpy dtype the one-pass evaluator holds
#: them in (``Evaluator._call``: scalar results are float64, int64 or bool).
_CUT_DTYPES = {"double": np.float64, "bigint": np.int64, "int": np.int64, "boolean": np.bool_}

#: The packed scan rows (:func:`pack`): the scan partition's index, the piece's sequence
#: number in it (together: timeline order), the piece's rows as an Arrow IPC stream.
PACKED = {"__part": "bigint", "__seq": "bigint", "__rows": "binary"}
PART = "__part"
#: Scan rows per packed row: 4 MB of scores and a width; far from Spark's 2 GB per value.
PACK_ROWS = 1 << 18


@dataclass(frozen=True)
class Split:
    """A program cut into a parallel ``scan`` and an ``ordered`` pass over its rows."""

    scan: Program
    ordered: Program
    functions: tuple[str, ...]  # the row-state functions in the ordered pass, by name

    def label(self, rate: float) -> str:
        """EXPLAIN's words for where each part runs."""
        lookback = self.scan.lookback(rate)
        where = (f"each partition warms up on the {lookback:,} samples before it"
                 if self.scan.stateful else "the windows scored in partitions")
        return (f"parallel: {where}; {', '.join(self.functions)} in one ordered pass over "
                f"the window scores")

    @staticmethod
    def packed_ddl() -> str:
        """The Spark schema of the packed scan rows (:func:`pack`)."""
        return ", ".join(f"`{name}` {typ}" for name, typ in PACKED.items())


def split(program: Program, rate: float) -> Split | None:
    """The program cut at its row-state calls, or None where it cannot be: nothing
    unbounded, an unbounded part that is not a row-state call's, a row-state call inside
    another, or a value crossing the cut that is not a scalar."""
    if not program.stateful or not isinstance(program.lookback(rate), str):
        return None
    cuts: dict[str, Output] = {}
    functions: list[str] = []

    def cut(tree: dict) -> dict | None:
        """``tree`` for the ordered program (None: no split)."""
        if "lit" in tree:
            return tree
        if "op" in tree:
            args = [cut(a) for a in tree["args"]]
            return None if None in args else {"op": tree["op"], "args": args}
        fn = registry.require(tree["call"]) if "call" in tree else None
        if fn is not None and fn.over_rows:
            if any(_holds_row_state(a) for a in tree["args"]):
                return None
            args = [cut(tree["args"][0])] + tree["args"][1:]
            if args[0] is None or any("lit" not in a for a in args[1:]):
                return None
            functions.append(fn.name)
            return {"call": fn.name, "args": args}
        if _holds_row_state(tree):  # a function of a row-state call's result
            return None
        typ = "sigseg" if fn is None else fn.returns
        if typ not in _CUT_DTYPES or isinstance(_tree_lookback(tree, rate), str):
            return None
        key = json.dumps(tree, sort_keys=True)
        if key not in cuts:
            cuts[key] = Output(f"__rs{len(cuts)}", tree, typ)
        return {"col": cuts[key].name}

    outputs = [cut(o.expr) for o in program.outputs]
    filters = [cut(f) for f in program.filters]
    if None in outputs or None in filters or not cuts or not functions:
        return None
    scan = Program(program.channels, tuple(cuts.values()))
    ordered = Program(tuple(o.name for o in cuts.values()),
                      tuple(Output(o.name, e, o.type, o.epoch_us)
                            for o, e in zip(program.outputs, outputs)), tuple(filters))
    return Split(scan, ordered, tuple(dict.fromkeys(functions)))


def _holds_row_state(tree: dict) -> bool:
    if "call" in tree and registry.require(tree["call"]).over_rows:
        return True
    return any(_holds_row_state(a) for a in tree.get("args", ()))


def pack(index: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A scan partition's rows as a few packed rows: ``(partition index, sequence number,
    Arrow IPC stream of about PACK_ROWS scan rows)``. One binary value moves through
    Spark's rows and shuffle as one copy, where a list column is converted item by item."""
    pending: list[pa.RecordBatch] = []
    seq = held = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            held += batch.num_rows
        if held >= PACK_ROWS:
            yield _packed(index, seq, pending)
            pending, seq, held = [], seq + 1, 0
    if pending:
        yield _packed(index, seq, pending)


def _packed(index: int, seq: int, batches: list) -> pa.RecordBatch:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        # one batch: the ordered task then makes one evaluator call per piece, not one per
        # scan block (~0.1 s less of its time at 1 M windows)
        writer.write_table(pa.Table.from_batches(batches).combine_chunks())
    return pa.RecordBatch.from_arrays(
        [pa.array([index], pa.int64()), pa.array([seq], pa.int64()),
         pa.array([sink.getvalue().to_pybytes()], pa.binary())], names=list(PACKED))


def ordered_pass(batches: Iterable[pa.RecordBatch], split_: Split
                 ) -> Iterator[pa.RecordBatch]:
    """Run the ordered program over every packed scan row in timeline order: one task
    holding them all (a few bytes per window) sorts them by their keys."""
    pieces = []
    for batch in batches:
        keys = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        pieces.extend(zip(keys, batch.column(2)))
    pieces.sort(key=lambda piece: piece[0])
    evaluator = Evaluator(split_.ordered)
    dtypes = [_CUT_DTYPES[o.type] for o in split_.scan.outputs]
    for _, rows in pieces:
        for scored in pa.ipc.open_stream(rows.as_buffer()):
            out = evaluator.run_columns([c.to_numpy(zero_copy_only=False).astype(t, copy=False)
                                         for c, t in zip(scored.columns, dtypes)])
            if out.num_rows:
                yield out
    tail = evaluator.finish()
    if tail is not None and tail.num_rows:
        yield tail


__all__ = ["Split", "split", "pack", "ordered_pass", "PACKED", "PART", "PACK_ROWS"]
