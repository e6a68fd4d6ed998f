"""Continuous outer (LEFT / RIGHT) interval joins on Spark's state store, against pandas.

The oracle, written here: the pairs are the inner join's (tests/test_stateful_interval.py:
the cross join of the rows that are not late, filtered by keys and band, each once); a
row of the preserved stream that is not late and pairs with no row that is not late gets
its NULL-extended row -- once no row of the other stream can still pair it: its key is
NULL, or the other stream's progress has passed its band (``t - lo < R``, ``R`` the other
stream's progress at the end). Rows still inside the band of the other stream's progress
are not final and are not emitted yet. Late rows are never extended (they are in the late
sink).

Two levels, as for the inner join: the kernel alone, batch by batch with buckets called as
Spark calls them (new rows, or an expired timer on the other stream's progress); and end
to end on Spark over files arriving into both streams, for LEFT (the preserved stream is
the band's second side, so the planner turns the band) and RIGHT joins, with a restart.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_stateful_asof import (SECOND, _arrive, _draw, _encode, _files, _in_files,
                                      _rounds, _streams, oracle_late, oracle_progress)
from tests.test_stateful_interval import drive_kernel, oracle_pairs, pairs_of


def oracle_alone(a: pd.DataFrame, b: pd.DataFrame, lo: int, hi: int, keyed: bool,
                 other_progress: int | None) -> set:
    """The ids of the ``a`` rows (not late) emitted NULL-extended: paired with no ``b`` row
    (not late) and final -- a NULL key, or ``ts - lo`` below the other stream's progress."""
    paired = {i for i, _ in oracle_pairs(a, b, lo, hi, keyed)}
    out = set()
    for row in a.itertuples():
        if int(row.id) in paired:
            continue
        null_key = keyed and row.k is None
        if null_key or (other_progress is not None and row.ts - lo < other_progress):
            out.add(int(row.id))
    return out


def run_outer_kernel(a, b, lo, hi, keyed, rng, batches=8, buckets=2):
    """Both streams through the outer kernel, batch by batch as Spark would call it
    (tests/test_stateful_interval.py ``drive_kernel``): (pairs emitted, ids emitted alone
    -- each occurrence --, late ids, progress, parts)."""
    from streaming.stateful import interval

    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), lo, hi, keyed,
                                   outer=True)
    parts = {"l": _arrive(rng, a, batches, 3 * SECOND),
             "r": _arrive(rng, b, batches, 3 * SECOND)}
    progress = oracle_progress(parts)
    emitted, alone = [], []

    def seen(result, wl, wr):
        ctx = result.context
        lone = ctx[ctx.alone.to_numpy(bool)]
        assert not lone.right.to_numpy(bool).any()  # only a rows are preserved
        alone.extend(int(x) for x in lone.l1)
        emitted.extend(pairs_of(ctx[~ctx.alone.to_numpy(bool)].drop(columns="alone"), lo, hi,
                                keyed))

    # (the planner's __alone: false on every input row)
    late, _ = drive_kernel(op, parts, progress, keyed, buckets, seen, {"alone": False})
    return Counter(emitted), alone, late, progress, parts


BANDS = {"around": (-2 * SECOND, 3 * SECOND), "after": (SECOND, 4 * SECOND),
         "before": (-5 * SECOND, -SECOND)}
CASES = [pytest.param(seed, BANDS[band], keyed, ahead,
                      id=f"{seed}-{band}-{'keyed' if keyed else 'no-keys'}-{ahead or 'aligned'}")
         for seed, (band, keyed, ahead) in enumerate(
             [(band, k, ahead) for ahead in (None, "r", "l") for band in BANDS
              for k in (True, False)])]


@pytest.mark.parametrize("seed, band, keyed, ahead", CASES)
def test_outer_kernel_batch_by_batch_equals_pandas(seed, band, keyed, ahead):
    """Random batch splits, rows out of order and late on either side, one stream 20 s
    ahead or neither, bands around, after and before: the pairs are the inner join's,
    each once; every unpaired ``a`` row whose band the other stream's progress passed (or
    whose key is NULL) is emitted alone exactly once, and no other row is."""
    rng = np.random.default_rng(900 + seed)
    lo, hi = band
    a, b = _draw(rng, int(rng.integers(60, 160)), int(rng.integers(60, 160)), keyed,
                 ahead=(ahead, 20 * SECOND) if ahead else None)
    gap = int(b.ts.min()) + int(rng.integers(10, 30)) * SECOND  # 15 s without b rows
    b = b[(b.ts < gap) | (b.ts >= gap + 15 * SECOND)]
    emitted, alone, late, progress, parts = run_outer_kernel(
        a, b, lo, hi, keyed, rng, batches=int(rng.integers(5, 12)))
    assert late == oracle_late(parts, progress)
    a_on, b_on = a[~a.id.isin(late)], b[~b.id.isin(late)]
    assert emitted == oracle_pairs(a_on, b_on, lo, hi, keyed)
    want = oracle_alone(a_on, b_on, lo, hi, keyed, progress[-1]["r"])
    assert Counter(alone) == Counter(want)  # each once
    assert len(want) >= 5


def test_outer_kernel_a_row_waits_until_no_row_can_pair_it_then_goes_once():
    """Band [-2 s, 3 s]: an ``a`` row at 10 s can pair ``b`` rows in [7 s, 12 s]; it is not
    emitted while b's progress is at or below 12 s, goes alone when it passes, once; one
    paired earlier is never extended; a NULL-key ``a`` row goes alone at once; the state
    keeps whether a kept row was paired."""
    from streaming.stateful import interval
    from streaming.stateful import state as st

    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), -2 * SECOND,
                                   3 * SECOND, True, outer=True)

    def rows(a_rows, b_rows):
        a = pd.DataFrame(a_rows, columns=["id", "k", "ts"])
        b = pd.DataFrame(b_rows, columns=["id", "k", "ts"])
        return pd.concat([_encode(a, False), _encode(b, True)],
                         ignore_index=True).assign(alone=False)

    first = interval.step(op, None, rows([(1, "a", 10 * SECOND), (2, "b", 10 * SECOND),
                                          (3, None, 10 * SECOND)],
                                         [(10, "b", 8 * SECOND)]), None, None)
    ctx = first.context
    assert sorted(ctx.l1[ctx.alone]) == [3]  # the NULL key: alone at once
    assert sorted(ctx.l1[~ctx.alone & ~ctx.right]) == [2]  # a2 pairs b10
    kept = st.decode("interval", first.state)[1]["rows"].to_pandas()
    assert dict(zip(kept.l1[~kept.right], kept.matched[~kept.right])) == {1: False, 2: True}
    assert first.timer == 11 * SECOND  # b10 at 8 s + hi (a1 at 10 s - lo: 12 s)
    still = interval.step(op, first.state, rows([], []), None, 12 * SECOND)
    assert not still.context.alone.any() and still.state_rows == 3
    gone = interval.step(op, still.state, rows([], []), None, 12 * SECOND + 1)
    assert gone.context.l1[gone.context.alone].tolist() == [1]  # a2 was paired: not extended
    again = interval.step(op, gone.state, rows([], []), None, 20 * SECOND)
    assert not again.context.alone.any()  # once


def test_inner_kernel_keeps_its_state_and_checkpoint_fingerprint():
    """An inner join's operator is written as before the outer flag (its repr is part of
    the checkpoint's fingerprint) and its state holds no ``matched`` column."""
    from streaming.stateful import interval
    from streaming.stateful import state as st

    op = interval.IntervalOperator(("string",), ("string",), -1, 1, False)
    assert repr(op) == ("IntervalOperator(left=('string',), right=('string',), lo=-1, hi=1, "
                        "keyed=False)")
    new = pd.concat([_encode(pd.DataFrame({"id": [1], "k": [None], "ts": [5]}), False)],
                    ignore_index=True)
    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), -1, 1, False)
    state = interval.step(op, None, new, None, None).state
    assert "matched" not in st.decode("interval", state)[1]["rows"].column_names


# -- end to end on Spark -------------------------------------------------------------------
LEFT = ("SELECT t.k, t.v AS tid, q.v AS qid FROM trades t LEFT JOIN quotes q ON t.k = q.k "
        "AND q.ts BETWEEN t.ts - INTERVAL 2 SECONDS AND t.ts + INTERVAL 3 SECONDS")
RIGHT = ("SELECT q.k, t.v AS tid, q.v AS qid FROM trades t RIGHT OUTER JOIN quotes q ON "
         "q.k = t.k AND q.ts >= t.ts - INTERVAL 2 SECONDS AND q.ts < t.ts + INTERVAL 3 "
         "SECONDS")


@pytest.mark.parametrize("side", ["left", pytest.param("right", marks=pytest.mark.slow)])
def test_continuous_outer_interval_join(ws, spark, tmp_path, side):
    """Files arrive into both streams in two rounds on one checkpoint (a restart), out of
    order, late rows on each side: the sink holds every pair of rows not late once (the
    pandas cross join by keys and band; RIGHT's strict upper bound is one microsecond
    short of 3 s) and each preserved row not late and unpaired whose band the other
    stream's progress passed, once, with NULLs for the other side -- and nothing else."""
    rng = np.random.default_rng(71 if side == "left" else 72)
    trades, quotes = _draw(rng, 160, 200, True, span_s=50)
    parts = {"l": _in_files(rng, trades, 4), "r": _in_files(rng, quotes, 4)}
    _files(tmp_path / "staging" / "trades", parts["l"])
    _files(tmp_path / "staging" / "quotes", parts["r"])
    _streams(ws, tmp_path)
    sql = LEFT if side == "left" else RIGHT
    shown = ws.explain(sql, "STREAM")
    assert "stateful interval join" in shown and "NULL-extended" in shown
    _rounds(ws, tmp_path, sql, [2, 2], engine="StatefulIntervalQuery")
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    every_t, every_q = pd.concat(parts["l"]), pd.concat(parts["r"])
    t_on, q_on = every_t[~every_t.id.isin(late)], every_q[~every_q.id.isin(late)]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got_pairs = Counter((int(r["qid"]), int(r["tid"])) for r in rows
                        if r["qid"] is not None and r["tid"] is not None)
    if side == "left":  # trades preserved: t.ts in [q.ts - 3 s, q.ts + 2 s]
        pairs = oracle_pairs(q_on, t_on, -2 * SECOND, 3 * SECOND, True)
        alone = oracle_alone(t_on, q_on, -3 * SECOND, 2 * SECOND, True, progress[-1]["r"])
        got_alone = Counter(int(r["tid"]) for r in rows if r["qid"] is None)
    else:  # quotes preserved: q.ts in [t.ts - 2 s, t.ts + 3 s - 1 us]
        pairs = oracle_pairs(q_on, t_on, -2 * SECOND, 3 * SECOND - 1, True)
        alone = oracle_alone(q_on, t_on, -2 * SECOND, 3 * SECOND - 1, True, progress[-1]["l"])
        got_alone = Counter(int(r["qid"]) for r in rows if r["tid"] is None)
    assert got_pairs == pairs and sum(pairs.values()) > 40
    assert got_alone == Counter(alone) and len(alone) >= 5
    assert len(rows) == sum(pairs.values()) + len(alone)


def test_outer_interval_joins_it_cannot_run_are_refused(ws, tmp_path, monkeypatch):
    """A FULL interval join, an ON with a condition beyond the band and the keys, and an
    outer join the state store cannot run are NOT_IMPLEMENTED, naming why -- never run
    as an inner join or on the re-evaluating runner (which cannot know a row stays
    unpaired)."""
    from wavesql.errors import WaveSQLError

    _streams(ws, tmp_path)
    cases = {
        LEFT.replace("LEFT JOIN", "FULL OUTER JOIN"): "not FULL",
        LEFT.replace("t.k = q.k", "t.k = q.k AND q.v > t.v"): "only the band",
    }
    for sql, words in cases.items():
        with pytest.raises(WaveSQLError) as err:
            ws.explain(sql, "STREAM")
        assert err.value.code == "NOT_IMPLEMENTED" and words in str(err.value), sql
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(LEFT, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "NOT_IMPLEMENTED" and "state store only" in str(err.value)
