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

The ordered program need not wait for the ordered task, though: where its row-state
functions have a speculative form (cfar, :mod:`.row_chain`), each scan partition also
scores a look-back of windows before its own and runs the ordered program itself from a
fresh state; the ordered task then only checks the chain of states and re-runs a partition
whose guessed start state is not the true one (:func:`split` sets ``Split.lookback``).

Rows travel to the ordered pass packed (:func:`pack`): a few Spark rows per scan partition,
each an Arrow IPC stream of up to :data:`PACK_ROWS` scan rows keyed by the partition's index
and its sequence number -- partitions are cut in timeline order -- so the single ordered
task sorts a handful of keys, not a million rows (:func:`ordered_pass`), and Spark copies
one binary value per packed row (list columns are converted item by item; either way the
ordered task's JVM side is ~0.13 s of CPU at 1 M windows, its Python side mostly
``cfar_scan`` where the partitions did not run it). Only scalar columns are cut (a segment
column would carry the samples through one task): otherwise :func:`split` says no and the
scan stays sequential.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from . import registry, row_chain
from .program import Output, Program, _tree_lookback

#: Logical types a cut column may have, and the numpy dtype the one-pass evaluator holds
#: them in (``Evaluator._call``: scalar results are float64, int64 or bool).
_CUT_DTYPES = {"double": np.float64, "bigint": np.int64, "int": np.int64, "boolean": np.bool_}

#: The packed scan rows (:func:`pack`): the scan partition's index, the piece's sequence
#: number in it (together: timeline order), the piece's rows as an Arrow IPC stream; where
#: the partition ran the ordered program itself (:mod:`.row_chain`), the piece's output
#: rows as another, and on its last piece the guessed and end states (udfs/states.py
#: bytes, never a pickle).
PACKED = {"__part": "bigint", "__seq": "bigint", "__rows": "binary", "__out": "binary",
          "__state": "binary"}
PART = "__part"
#: Scan rows per packed row: 4 MB of scores and a width; far from Spark's 2 GB per value.
PACK_ROWS = 1 << 18


@dataclass(frozen=True)
class Split:
    """A program cut into a parallel ``scan`` and an ``ordered`` pass over its rows."""

    scan: Program
    ordered: Program
    functions: tuple[str, ...]  # the row-state functions in the ordered pass, by name
    #: windows each scan partition scores before its own to run the ordered program
    #: itself (:mod:`.row_chain`), or why it cannot
    lookback: int | str = "not planned"

    def label(self, rate: float) -> str:
        """EXPLAIN's words for where each part runs."""
        lookback = self.scan.lookback(rate)
        where = (f"each partition warms up on the {lookback:,} samples before it"
                 if self.scan.stateful else "the windows scored in partitions")
        names = ", ".join(self.functions)
        if isinstance(self.lookback, str):
            return (f"parallel: {where}; {names} in one ordered pass over the window "
                    f"scores ({self.lookback})")
        return (f"parallel: {where}; {names} in partitions from a warm-up of "
                f"{self.lookback:,} scores, verified in order (a partition of under "
                f"{row_chain.MIN_OWN}x that many windows: in the ordered pass)")

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
    return Split(scan, ordered, tuple(dict.fromkeys(functions)),
                 row_chain.lookback_rows(ordered))


def _holds_row_state(tree: dict) -> bool:
    if "call" in tree and registry.require(tree["call"]).over_rows:
        return True
    return any(_holds_row_state(a) for a in tree.get("args", ()))


def pack(index: int, batches: Iterable[pa.RecordBatch], split_: Split | None = None,
         head: int | None = None) -> Iterator[pa.RecordBatch]:
    """A scan partition's rows as a few packed rows: ``(partition index, sequence number,
    Arrow IPC stream of about PACK_ROWS scan rows)``. One binary value moves through
    Spark's rows and shuffle as one copy, where a list column is converted item by item.

    With ``head`` (not None) the partition runs ``split_``'s ordered program itself, the
    first ``head`` rows being the look-back before its own (:func:`.row_chain.pack`)."""
    if head is not None:
        dtypes = [_CUT_DTYPES[o.type] for o in split_.scan.outputs]
        yield from row_chain.pack(index, batches, split_.ordered,
                                  lambda b: row_chain.as_arrays(b, dtypes), _packed, head,
                                  PACK_ROWS)
        return
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


def _packed(index: int, seq: int, batches: list, out: pa.RecordBatch | None = None,
            state: bytes | None = None) -> pa.RecordBatch:
    # one batch: the ordered task then makes one evaluator call per piece, not one per
    # scan block (~0.1 s less of its time at 1 M windows)
    rows = _ipc(pa.Table.from_batches(batches).combine_chunks())
    return pa.RecordBatch.from_arrays(
        [pa.array([index], pa.int64()), pa.array([seq], pa.int64()),
         pa.array([rows], pa.binary()),
         pa.array([None if out is None else _ipc(pa.Table.from_batches([out]))], pa.binary()),
         pa.array([state], pa.binary())], names=list(PACKED))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ordered_pass(batches: Iterable[pa.RecordBatch], split_: Split,
                 stats: dict | None = None) -> Iterator[pa.RecordBatch]:
    """Run the ordered program over every packed scan row in timeline order: one task
    holding them all (a few bytes per window) sorts them by their keys. Partitions that
    ran it themselves have their rows passed on if their guess checks out
    (:func:`.row_chain.ordered`; ``stats`` counts them)."""
    pieces = []
    for batch in batches:
        keys = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        pieces.extend(zip(keys, batch.column(2), batch.column(3), batch.column(4)))
    pieces.sort(key=lambda piece: piece[0])
    partitions, current = [], None
    for (part, _), rows, out, state in pieces:
        if current is None or current[0] != part:
            current = (part, [], [None])
            partitions.append(current)
        current[1].append((rows.as_buffer(), None if not out.is_valid else out.as_buffer()))
        if state.is_valid:
            current[2][0] = state.as_py()
    dtypes = [_CUT_DTYPES[o.type] for o in split_.scan.outputs]
    yield from row_chain.ordered(((p, s[0]) for _, p, s in partitions), split_.ordered,
                                 lambda b: row_chain.as_arrays(b, dtypes), stats)


__all__ = ["Split", "split", "pack", "ordered_pass", "PACKED", "PART", "PACK_ROWS"]
