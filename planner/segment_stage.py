"""Signal functions over segments that are values: a view's, a subquery's, a SYNC result's.

planner/signals.py binds them into an :class:`~.ir.SignalStage`; :func:`stage_frame` runs its
program over the input's rows in a ``mapInArrow`` -- in parallel where no state crosses
rows, in one ordered pass where it does, per key with ``f(...) OVER (PARTITION BY k)``.
"""

from __future__ import annotations

from wavesql.sqltext import quote

from . import ir


def stage_frame(rel: ir.SignalStage, df):
    """The program as a ``mapInArrow`` over the rows of ``df`` (``rel.input`` lowered) (segments not read straight
    from a WAV signal: a view's, a subquery's): one Python pass per Arrow batch.

    A stateful program (a filter, a detector) carries its state from segment to segment,
    which is only right over the samples in order: its rows are then read in one ordered
    pass -- one task, sorted by the first channel's start sample. The kernels reset the
    state at a gap and refuse overlapping segments (``[SAMPLES n SLIDE m]`` windows with
    m < n, or two sources' segments in one column), so no order is made up. Over a SYNC
    result (``per_row``) each row is a signal of its own, from rest (signals.py says why):
    rows are independent, so they run in parallel, in any order."""
    program_json = rel.program.to_json()
    passthrough = tuple(rel.passthrough)
    per_row = rel.state == "per_row"
    keys = tuple(rel.keys) if rel.program.stateful else ()

    def run(batches):
        from wavesql.udfs.program import Evaluator, Program

        program = Program.from_json(program_json)
        evaluator = Evaluator(program, per_row=per_row)
        current = None
        for batch in batches:
            # per key: the rows come sorted by key, then start; a new key, a new signal
            for key, piece in _key_runs(batch, keys):
                if keys and key != current:
                    evaluator, current = Evaluator(program), key
                out = evaluator.run_batch(piece, passthrough)
                if out.num_rows:
                    yield out

    # a channel may pass too; keys travel to the task to cut its rows by
    columns = dict.fromkeys(rel.program.channels + passthrough + keys)
    df = df.select(*[quote(c) for c in columns])
    start = f"{quote(rel.program.channels[0])}.start" if rel.program.channels else None
    if keys:
        df = df.repartition(*[quote(k) for k in keys]).sortWithinPartitions(
            *[quote(k) for k in keys], start)
    elif rel.program.stateful and not per_row:
        df = df.repartition(1).sortWithinPartitions(start)
    return df.mapInArrow(run, rel.schema.ddl())


def _key_runs(batch, keys: tuple[str, ...]):
    """``(key, rows)`` of each run of equal ``keys`` in ``batch`` (the whole batch, key
    None, without keys). NULLs are one key, NaNs one key, as Spark's PARTITION BY has it."""
    if not keys or not batch.num_rows:
        yield None, batch
        return
    values = list(zip(*[[("NaN",) if v != v else v for v in batch.column(k).to_pylist()]
                        for k in keys]))
    begin = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[begin]:
            yield values[begin], batch.slice(begin, i - begin)
            begin = i
