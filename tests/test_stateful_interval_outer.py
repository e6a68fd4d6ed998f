"""Continuous outer (LEFT / RIGHT / FULL) interval joins on Spark's state store, against
pandas.

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
the band's second side, so the planner turns the band), RIGHT and FULL joins, with a
restart. A FULL join preserves ``b`` too: an unpaired ``b`` row goes by ``a``'s progress
(``t + hi < L``), which reaches a bucket only when it is called -- for new rows, or a timer
on ``b``'s progress -- so the oracle has a must-set (``t + hi`` below both progresses at the
end, the last batch moving ``b``'s) and a may-set (below ``a``'s).
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


def run_outer_join(ws, spark, tmp_path, sql: str, seed: int):
    """Trades and quotes arriving in 4 files each (out of order, late rows in the last),
    the continuous ``sql`` run over them in two rounds on one checkpoint: (each stream's
    progress per batch, the trades and quotes not late, the sink's rows, EXPLAIN STREAM)."""
    rng = np.random.default_rng(seed)
    trades, quotes = _draw(rng, 160, 200, True, span_s=50)
    parts = {"l": _in_files(rng, trades, 4), "r": _in_files(rng, quotes, 4)}
    _files(tmp_path / "staging" / "trades", parts["l"])
    _files(tmp_path / "staging" / "quotes", parts["r"])
    _streams(ws, tmp_path)
    shown = ws.explain(sql, "STREAM")
    assert "stateful interval join" in shown and "NULL-extended" in shown
    _rounds(ws, tmp_path, sql, [2, 2], engine="StatefulIntervalQuery")
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    every_t, every_q = pd.concat(parts["l"]), pd.concat(parts["r"])
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    return (progress, every_t[~every_t.id.isin(late)], every_q[~every_q.id.isin(late)], rows,
            shown)


@pytest.mark.parametrize("side", ["left", pytest.param("right", marks=pytest.mark.slow)])
def test_continuous_outer_interval_join(ws, spark, tmp_path, side):
    """Files arrive into both streams in two rounds on one checkpoint (a restart), out of
    order, late rows on each side: the sink holds every pair of rows not late once (the
    pandas cross join by keys and band; RIGHT's strict upper bound is one microsecond
    short of 3 s) and each preserved row not late and unpaired whose band the other
    stream's progress passed, once, with NULLs for the other side -- and nothing else."""
    sql = LEFT if side == "left" else RIGHT
    progress, t_on, q_on, rows, _ = run_outer_join(ws, spark, tmp_path, sql,
                                                   71 if side == "left" else 72)
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
    """A SEMI interval join, an ON with a condition beyond the band and the keys, and an
    outer join the state store cannot run are NOT_IMPLEMENTED, naming why -- never run
    as an inner join or on the re-evaluating runner (which cannot know a row stays
    unpaired)."""
    from wavesql.errors import WaveSQLError

    _streams(ws, tmp_path)
    cases = {
        LEFT.replace("LEFT JOIN", "LEFT SEMI JOIN").replace(", q.v AS qid", ""):
            "LEFT SEMI interval join",
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


# -- FULL joins ----------------------------------------------------------------------------
def full_passes(ctx: pd.DataFrame, lo: int, hi: int, keyed: bool):
    """What the micro-batch's FULL-join passes make of a bucket's handed-back rows, written
    here with pandas: the pairs of (first a x first b) and (second a x second b), and the
    ids handed back alone; asserting that no row is in a pass without a partner there
    (the batch plan's FULL JOIN would NULL-extend it)."""
    is_b = ctx.right.to_numpy(bool)

    def side(mask, prefix):
        part = ctx[mask]
        return pd.DataFrame({"id": part[f"{prefix}1"].to_numpy(), "ts": part.ts.to_numpy(),
                             "k": np.where(part[f"{prefix}n0"], None, part[f"{prefix}0"])})
    pairs = []
    for flag in ("first", "second"):
        on = ctx[flag].to_numpy(bool)
        a, b = side(~is_b & on, "l"), side(is_b & on, "r")
        found = oracle_pairs(a, b, lo, hi, keyed)
        assert {i for i, _ in found} == set(a.id) and {j for _, j in found} == set(b.id)
        pairs += list(found.elements())
    lone = ctx.alone.to_numpy(bool)
    assert not (lone & (ctx["first"].to_numpy(bool) | ctx["second"].to_numpy(bool))).any()
    return pairs, [int(x) for x in ctx.l1[lone & ~is_b]], [int(x) for x in ctx.r1[lone & is_b]]


def oracle_full_b_alone(a, b, lo, hi, keyed, until: int | None) -> set:
    """The ids of the ``b`` rows (not late) paired with no ``a`` row (not late) whose key is
    NULL or whose band ``until`` has passed (``t + hi < until``)."""
    paired = {j for _, j in oracle_pairs(a, b, lo, hi, keyed)}
    return {int(r.id) for r in b.itertuples() if int(r.id) not in paired and (
        (keyed and r.k is None) or (until is not None and r.ts + hi < until))}


FULL_CASES = [pytest.param(seed, BANDS[band], keyed, ahead,
                           id=f"{seed}-{band}-{'keyed' if keyed else 'no-keys'}-"
                              f"{ahead or 'aligned'}")
              for seed, (band, keyed, ahead) in enumerate(
                  [(band, k, ahead) for ahead in (None, "r", "l") for band in BANDS
                   for k in (True, False)])]


@pytest.mark.parametrize("seed, band, keyed, ahead", FULL_CASES)
def test_full_kernel_batch_by_batch_equals_pandas(seed, band, keyed, ahead):
    """As the LEFT kernel test, both sides preserved: the pairs are the inner join's, each
    once; each pass holds only rows with a partner in it; the unpaired ``a`` rows go as for
    LEFT; the unpaired ``b`` rows whose band both progresses passed all go, once, and no
    ``b`` row goes whose band ``a``'s progress has not passed. A last batch of one row per
    stream 60 s on moves both progresses, as a stream that goes on would."""
    from streaming.stateful import interval

    rng = np.random.default_rng(1900 + seed)
    lo, hi = band
    a, b = _draw(rng, int(rng.integers(60, 160)), int(rng.integers(60, 160)), keyed,
                 ahead=(ahead, 20 * SECOND) if ahead else None)
    start = int(min(a.ts.min(), b.ts.min()))
    gap = start + int(rng.integers(5, 15)) * SECOND  # 12 s without b rows, later without a
    b = b[(b.ts < gap) | (b.ts >= gap + 12 * SECOND)]
    gap = start + int(rng.integers(32, 42)) * SECOND
    a = a[(a.ts < gap) | (a.ts >= gap + 12 * SECOND)]
    batches = int(rng.integers(5, 12))
    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), lo, hi, keyed,
                                   outer=True, full=True)
    parts = {"l": _arrive(rng, a, batches, 3 * SECOND),
             "r": _arrive(rng, b, batches, 3 * SECOND)}
    end = int(max(a.ts.max(), b.ts.max())) + 60 * SECOND
    for name, first_id in (("l", 90_000), ("r", 95_000)):
        parts[name].append(pd.DataFrame({"id": [first_id], "k": [None], "ts": [end]}))
    progress = oracle_progress(parts)
    emitted, a_alone, b_alone = [], [], []

    def seen(result, wl, wr):
        pairs, lone_a, lone_b = full_passes(result.context, lo, hi, keyed)
        emitted.extend(pairs)
        a_alone.extend(lone_a)
        b_alone.extend(lone_b)

    late, _ = drive_kernel(op, parts, progress, keyed, 2, seen,
                           {"alone": False, "first": False, "second": False})
    assert late == oracle_late(parts, progress)
    every_a, every_b = pd.concat(parts["l"]), pd.concat(parts["r"])
    a_on, b_on = every_a[~every_a.id.isin(late)], every_b[~every_b.id.isin(late)]
    assert Counter(emitted) == oracle_pairs(a_on, b_on, lo, hi, keyed)
    final = progress[-1]
    want_a = oracle_alone(a_on, b_on, lo, hi, keyed, final["r"])
    assert Counter(a_alone) == Counter(want_a) and len(want_a) >= 5
    got_b = Counter(b_alone)
    assert max(got_b.values(), default=1) == 1  # each once
    must = oracle_full_b_alone(a_on, b_on, lo, hi, keyed, min(final["l"], final["r"]))
    may = oracle_full_b_alone(a_on, b_on, lo, hi, keyed, final["l"])
    assert must <= set(got_b) <= may and len(must) >= 5


def test_full_kernel_b_row_goes_when_a_progress_passes_its_band_called_as_b_moves():
    """Band [-2 s, 3 s]: a ``b`` row at 10 s can pair ``a`` rows in [8 s, 13 s]; with
    ``b``'s progress already past 13 s it waits for ``a``'s, its bucket called each time
    ``b``'s progress moves (its timer at that progress); it goes alone once ``a``'s
    progress passes 13 s, once; a NULL-key ``b`` row goes at once."""
    from streaming.stateful import interval

    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), -2 * SECOND,
                                   3 * SECOND, True, outer=True, full=True)

    def rows(a_rows, b_rows):
        a = pd.DataFrame(a_rows, columns=["id", "k", "ts"])
        b = pd.DataFrame(b_rows, columns=["id", "k", "ts"])
        return pd.concat([_encode(a, False), _encode(b, True)], ignore_index=True).assign(
            alone=False, first=False, second=False)

    first = interval.step(op, None, rows([], [(10, "b", 10 * SECOND), (11, None, 30 * SECOND)]),
                          5 * SECOND, 5 * SECOND)
    ctx = first.context
    assert sorted(ctx.r1[ctx.alone]) == [11] and first.timer == 13 * SECOND
    waiting = interval.step(op, first.state, rows([], []), 12 * SECOND, 20 * SECOND)
    assert not waiting.context.alone.any() and waiting.timer == 20 * SECOND  # R moves: called
    gone = interval.step(op, waiting.state, rows([], []), 13 * SECOND + 1, 21 * SECOND)
    assert gone.context.r1[gone.context.alone].tolist() == [10] and gone.state is None
    paired = interval.step(op, None, rows([(1, "b", 11 * SECOND)], [(12, "b", 10 * SECOND)]),
                           None, None)
    ctx = paired.context  # a new pair: both in the first pass (the a row new), neither alone
    assert sorted(ctx["first"]) == [True, True] and not ctx.alone.any()
    assert not interval.step(op, paired.state, rows([], []), 30 * SECOND,
                             30 * SECOND).context.alone.any()  # paired: never extended


FULL = ("SELECT coalesce(t.k, q.k) AS k, t.v AS tid, q.v AS qid FROM trades t FULL OUTER "
        "JOIN quotes q ON t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 2 SECONDS AND t.ts + "
        "INTERVAL 3 SECONDS")


def test_continuous_full_interval_join(ws, spark, tmp_path):
    """Files arrive into both streams in two rounds on one checkpoint (a restart), out of
    order, late rows on each side: the sink holds every pair of rows not late once, each
    unpaired quote (the band's first side: ``q.ts`` in ``[t.ts - 2 s, t.ts + 3 s]``) whose
    band the trades' progress passed, once, and the unpaired trades whose band both
    progresses passed -- at most those whose band the quotes' progress passed --, once,
    with NULLs for the other side; nothing else."""
    progress, t_on, q_on, rows, shown = run_outer_join(ws, spark, tmp_path, FULL, 73)
    assert "FULL: so is a trades row" in shown
    lo, hi = -2 * SECOND, 3 * SECOND
    pairs = oracle_pairs(q_on, t_on, lo, hi, True)
    got_pairs = Counter((int(r["qid"]), int(r["tid"])) for r in rows
                        if r["qid"] is not None and r["tid"] is not None)
    assert got_pairs == pairs and sum(pairs.values()) > 40
    final = progress[-1]  # "l": the trades' (Spark's watermark), "r": the quotes'
    quotes_alone = oracle_alone(q_on, t_on, lo, hi, True, final["l"])
    assert Counter(int(r["qid"]) for r in rows if r["tid"] is None) == Counter(quotes_alone)
    got_trades = Counter(int(r["tid"]) for r in rows if r["qid"] is None)
    must = oracle_full_b_alone(q_on, t_on, lo, hi, True, min(final["l"], final["r"]))
    may = oracle_full_b_alone(q_on, t_on, lo, hi, True, final["r"])
    assert max(got_trades.values(), default=1) == 1
    assert must <= set(got_trades) <= may and len(must) >= 5 and len(quotes_alone) >= 5
    keys = dict(zip(t_on.id.astype(int), t_on.k)) | dict(zip(q_on.id.astype(int), q_on.k))
    assert all(r["k"] == keys[int(r["tid"] if r["tid"] is not None else r["qid"])]
               for r in rows)  # coalesce(t.k, q.k) over the NULL-extended side
    assert len(rows) == sum(pairs.values()) + len(quotes_alone) + len(got_trades)
