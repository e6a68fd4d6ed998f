"""cfar's recursion in every scan partition, from a look-back, verified in window order.

:mod:`.row_state` cuts a program into a parallel *scan* (the window scores) and an
*ordered* program (``cfar`` over them). This module runs the ordered program in the scan
tasks too -- speculatively -- so the one ordered task only checks a chain of states:

1. Each scan partition also scores the :func:`lookback_rows` windows before its first one
   (the look-back, read like a stateful filter's warm-up) and runs the ordered program over
   them from a fresh state (cfar's own warm-up seeded by the look-back's first scores),
   keeping the state it reached at its first own window -- its *guess* --, then over its
   own windows: their output rows and its end state (:func:`pack`).
2. cfar forgets at ``1 - alpha`` per score, so two runs of it from different states meet
   bit for bit after enough scores and stay equal from then on (same operations on the
   same bits; ``detect.cfar_lookback`` says how many, measured). The ordered task
   (:func:`ordered`) walks the partitions in window order: a partition whose guess
   agrees with the true state -- the exact end state of the one before -- bit for bit
   (``detect.cfar_agrees``: mean and variance, both past the warm-up) has exact rows,
   passed on as they are, and its exact end state follows (``detect.cfar_rebase``: the
   true count of scores). Any other is re-run from the true state over its scores, which
   travel with it (the look-back too short for the data -- NaN scores are not absorbed,
   so a run of them does not contract --, or a gap wider than the look-back before it).

So the flags are the sequential pass's exactly, for any split, across files and gaps (a
gap cuts windows, not the estimate). The first partition starts at the stream's start with
the true (fresh) state; so does any partition whose look-back reaches the stream's start.
Partitions with fewer than ``MIN_OWN`` look-backs' worth of own windows do not speculate
(the look-back would cost more than it saves): the ordered task runs them from the true
state, as it runs everything when the look-back is over ``CAP`` windows (a tiny alpha) or
the ordered program holds a row-state function other than cfar.
"""

from __future__ import annotations

import copy
import json
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from . import registry, states
from .kernels import detect
from .program import Evaluator, Program

#: Row-state functions that can run speculatively: name -> (look-back in rows for the
#: call's literal arguments, does a guessed state agree with the true one, the true end
#: state of an agreeing run).
CHAINS = {"cfar": (detect.cfar_lookback, detect.cfar_agrees, detect.cfar_rebase)}

#: Look-backs over this many windows are not run (cfar with alpha under ~0.0008 at its
#: defaults): each partition would score that many windows twice.
CAP = 1 << 17
#: A partition speculates only with at least this many look-backs of own windows.
MIN_OWN = 4


def lookback_rows(ordered: Program) -> int | str:
    """The look-back, in windows, of the ordered program's row-state calls (the largest),
    or why they cannot run speculatively."""
    rows = 0
    for tree in ordered.calls():
        fn = registry.require(tree["call"])
        if not fn.over_rows:
            continue
        if fn.name not in CHAINS:
            return f"{fn.name} has no speculative form"
        lits = fn.bind_args([None] + [a["lit"] for a in tree["args"][1:]])[1:]
        need = CHAINS[fn.name][0](*lits)
        if need > CAP:
            return f"{fn.name} would need a look-back of {need:,} scores, over {CAP:,}"
        rows = max(rows, need)
    return rows


def heads(lookback: int, own: list[int], behind: list[int]) -> list[int | None]:
    """Per partition: how many look-back windows it scores before its own (0: it starts
    the stream, from the true state), or None where it does not speculate. ``own``: its
    windows; ``behind``: the look-back windows planned before it."""
    out: list[int | None] = []
    for i, (mine, back) in enumerate(zip(own, behind)):
        if i == 0 and back == 0:
            out.append(0)
        elif back == 0 or mine < MIN_OWN * lookback:
            out.append(None)
        else:
            out.append(back)
    return out


def pack(index: int, batches: Iterable[pa.RecordBatch], ordered: Program, columns,
         packed, head: int, pack_rows: int) -> Iterator[pa.RecordBatch]:
    """A scan partition's packed rows (``row_state.pack``) with the ordered program run
    over them: ``batches`` are the scan's rows, the first ``head`` of them the look-back's.
    Every packed row carries its own rows' scores and outputs; the last one also the
    partition's guessed and end states. ``columns(batch)`` gives a batch's value arrays,
    ``packed(index, seq, batches, out, state)`` one packed row."""
    evaluator = Evaluator(ordered)
    left, guess = head, (copy.deepcopy(evaluator.states) if head == 0 else None)
    pending: list[pa.RecordBatch] = []
    seq = held = 0
    schema = None
    for batch in batches:
        schema = batch.schema
        if left:
            look = batch.slice(0, min(left, batch.num_rows))
            evaluator.run_columns(columns(look))  # the look-back's rows are not output
            left -= look.num_rows
            if not left:
                guess = copy.deepcopy(evaluator.states)
            batch = batch.slice(look.num_rows)
        if batch.num_rows:
            pending.append(batch)
            held += batch.num_rows
        if held >= pack_rows:
            yield packed(index, seq, pending, _outputs(evaluator, pending, columns), None)
            pending, seq, held = [], seq + 1, 0
    if left:
        raise RuntimeError(f"scan partition {index} had {head - left} of the {head} look-back "
                           "rows planned")
    if not pending and schema is not None:
        pending = [pa.RecordBatch.from_pylist([], schema=schema)]
    if pending:
        out = _outputs(evaluator, pending, columns)
        # as JSON with exact floats (udfs/states.py), not a pickle: these bytes travel
        # through Spark like the scores, and a pickle would run what it names when loaded
        state = states.dumps({"guess": guess, "end": evaluator.states})
        yield packed(index, seq, pending, out, state)


def _outputs(evaluator: Evaluator, batches: list, columns) -> pa.RecordBatch:
    return evaluator.run_columns(columns(pa.Table.from_batches(batches).combine_chunks()
                                         .to_batches()[0] if len(batches) > 1 else
                                         batches[0]))


def ordered(partitions: Iterable[tuple[list, bytes | None]], ordered_program: Program,
            columns, stats: dict | None = None) -> Iterator[pa.RecordBatch]:
    """The ordered program's rows over ``partitions`` in window order, each given as
    (its pieces -- ``(scores, outputs)`` as Arrow IPC buffers, outputs None where it did not
    speculate --, its guessed and end states (udfs/states.py bytes) or None): a partition whose guess
    agrees with the true state passes its outputs on, any other is run here from the true
    state. ``stats`` (if given) counts ``accepted`` and ``rerun`` partitions."""
    evaluator = Evaluator(ordered_program)  # the true run, for the partitions re-run
    true: dict = {}  # the exact states before the next partition (fresh at the start)
    for pieces, state in partitions:
        spec = states.loads(state) if state is not None else None
        if spec is not None and _agrees(spec["guess"], true):
            for _, out in pieces:
                for batch in pa.ipc.open_stream(out):
                    if batch.num_rows:
                        yield batch
            true = _rebase(spec["end"], spec["guess"], true)
            what = "accepted"
        else:
            evaluator.states = copy.deepcopy(true)
            for scores, _ in pieces:
                for scored in pa.ipc.open_stream(scores):
                    out = evaluator.run_columns(columns(scored))
                    if out.num_rows:
                        yield out
            true = copy.deepcopy(evaluator.states)
            what = "rerun"
        if stats is not None:
            stats[what] = stats.get(what, 0) + 1
    evaluator.states = true
    tail = evaluator.finish()
    if tail is not None and tail.num_rows:
        yield tail


def _agrees(guess: dict, true: dict) -> bool:
    """Every call's guessed state agrees with its true one (a call with no state yet on
    one side only does not)."""
    if guess.keys() != true.keys():
        return False
    return all(CHAINS[json.loads(key)["call"]][1](guess[key], true[key]) for key in guess)


def _rebase(end: dict, guess: dict, true: dict) -> dict:
    """The true end states (a call with no state at the guess had none at the true start
    either -- they agree --: its end state is exact as it is)."""
    return {key: CHAINS[json.loads(key)["call"]][2](state, guess[key], true[key])
            if key in guess else state for key, state in end.items()}


def as_arrays(batch: pa.RecordBatch, dtypes) -> list[np.ndarray]:
    """A scan batch's columns as the numpy arrays the one-pass evaluator holds."""
    return [c.to_numpy(zero_copy_only=False).astype(t, copy=False)
            for c, t in zip(batch.columns, dtypes)]


__all__ = ["CHAINS", "CAP", "MIN_OWN", "lookback_rows", "heads", "pack", "ordered",
           "as_arrays"]
