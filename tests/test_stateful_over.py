"""The incremental OVER-window kernel (streaming/stateful/lookback.py), micro-batch by
micro-batch, against OVER windows computed by plain Python over the whole stream.

No Spark: the kernel hands back, per bucket of keys, the rows over which the query is
evaluated when some became final. Each case cuts a random stream (ties in event time,
rows arriving up to 5 s out of order, NULL keys and values) into micro-batches, advances
progress as a continuous query does (largest event time so far minus the watermark, seen
by the *next* batch), evaluates the query over each bucket's context the way the runner
does (the query's rows with ``previous <= ts < progress``), and checks that (1) the rows
flagged late are exactly those below the progress of their batch, (2) every on-time row
below the final progress is emitted exactly once, with the value the whole-stream
evaluation over the on-time rows gives it, and (3) the state stays bounded by the
look-back.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from wavesql.streaming.stateful import lookback as lb

SECOND = 1_000_000
CODES = {"a": 1, "b": 2, "c": 3, None: 0}


def _stream(seed: int, n: int):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 40 * SECOND, n)) // 250_000 * 250_000  # ties too
    ts = ts[np.argsort(ts + rng.integers(0, 5 * SECOND, n))]  # arrival order: up to 5 s off
    sym = rng.choice(["a", "b", "c", None], n, p=[0.3, 0.3, 0.3, 0.1])
    v = rng.integers(0, 10, n)
    null = rng.random(n) < 0.1
    return [{"seq": i, "sym": s, "v": None if m else int(x), "ts": int(t)}
            for i, (s, x, m, t) in enumerate(zip(sym, v, null, ts))]


def _passes(r) -> bool:  # the WHERE some queries filter by before their window
    return r["v"] is None or r["v"] != 3


# -- the queries, each as plain Python over rows in (ts, arrival) order -------------------
def _by_key(rows, keyed):
    groups: dict = {}
    for r in sorted(rows, key=lambda r: (r["ts"], r["seq"])):
        groups.setdefault(r["sym"] if keyed else None, []).append(r)
    return groups.values()


def _range_sum(rows, keyed, r_us):
    """sum(v) OVER ([PARTITION BY sym] ORDER BY ts RANGE BETWEEN r PRECEDING AND CURRENT
    ROW): NULLs skipped, peers (equal ts) included."""
    out = {}
    for group in _by_key(rows, keyed):
        for row in group:
            vals = [o["v"] for o in group if row["ts"] - r_us <= o["ts"] <= row["ts"]
                    and o["v"] is not None]
            out[row["seq"]] = sum(vals) if vals else None
    return out


def _rows_sum(rows, keyed, n):
    """sum(v) OVER (PARTITION BY sym ORDER BY ts ROWS BETWEEN n PRECEDING AND CURRENT ROW)
    FROM s WHERE <passes>: the frame counts only the rows the WHERE keeps."""
    out = {}
    for group in _by_key([r for r in rows if _passes(r)], keyed):
        for i, row in enumerate(group):
            vals = [o["v"] for o in group[max(0, i - n):i + 1] if o["v"] is not None]
            out[row["seq"]] = sum(vals) if vals else None
    return out


def _rsi_like(rows, keyed, r_us):
    """d = v - lag(v) OVER (PARTITION BY sym ORDER BY ts), then sum(d) OVER (... RANGE r
    PRECEDING): a window over another window's output (TiLT's RSI)."""
    d = {}
    for group in _by_key(rows, keyed):
        for i, row in enumerate(group):
            prev = group[i - 1]["v"] if i else None
            d[row["seq"]] = (row["v"] - prev) if row["v"] is not None and prev is not None \
                else None
    out = {}
    for group in _by_key(rows, keyed):
        for row in group:
            vals = [d[o["seq"]] for o in group if row["ts"] - r_us <= o["ts"] <= row["ts"]
                    and d[o["seq"]] is not None]
            out[row["seq"]] = sum(vals) if vals else None
    return out


CASES = {
    # name: (query, its look-back rules as streaming/lookback.py makes them, counted rows)
    "range": (lambda rows, k: _range_sum(rows, k, 3 * SECOND),
              (lb.KeepTime(3 * SECOND),), None),
    "rows-where": (lambda rows, k: _rows_sum(rows, k, 2), (lb.KeepRows(2),), _passes),
    "lag-then-range": (lambda rows, k: _rsi_like(rows, k, 2 * SECOND),
                       (lb.KeepRows(1, 2 * SECOND),), None),
    "two-rules": (lambda rows, k: _pair(rows, k), (lb.KeepTime(SECOND), lb.KeepRows(3)),
                  _passes),
}


def _pair(rows, keyed):
    """Two windows side by side: a RANGE 1 s sum and a ROWS 3 sum (over the rows the WHERE
    keeps): the look-back is the union of both rules."""
    a = _range_sum([r for r in rows if _passes(r)], keyed, SECOND)
    b = _rows_sum(rows, keyed, 3)
    return {s: (a[s], b[s]) for s in a}


def _op(rules) -> lb.LookbackOperator:
    return lb.LookbackOperator(("bigint", "string", "bigint"), tuple(rules))


def _encode(op, rows, counted, keyed=True) -> pa.Table:
    """Rows as the Spark side hands them over: values + NULL flags, partition hashes."""
    cols = {"ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "cn0": pa.array([False] * len(rows)), "c0": pa.array([r["seq"] for r in rows],
                                                                 pa.int64()),
            "cn1": pa.array([r["sym"] is None for r in rows]),
            "c1": pa.array([r["sym"] or "" for r in rows], pa.string()),
            "cn2": pa.array([r["v"] is None for r in rows]),
            "c2": pa.array([r["v"] or 0 for r in rows], pa.int64())}
    for j, rule in enumerate(op.rules):
        if isinstance(rule, lb.KeepRows):
            cols[f"rk{j}"] = pa.array([CODES[r["sym"]] if keyed else 0 for r in rows],
                                      pa.int64())
            cols[f"rh{j}"] = pa.array([0] * len(rows), pa.int64())
            cols[f"rp{j}"] = pa.array([counted(r) if counted else True for r in rows])
    return pa.table(cols, schema=op.schema())


def _decode(table: pa.Table) -> list[dict]:
    d = table.to_pydict()
    return [{"seq": d["c0"][i], "sym": None if d["cn1"][i] else d["c1"][i],
             "v": None if d["cn2"][i] else d["c2"][i], "ts": d["ts"][i]}
            for i in range(table.num_rows)]


def _bucket(r, keyed, buckets):
    return CODES[r["sym"]] % buckets if keyed else 0


@pytest.mark.parametrize("keyed", [True, False], ids=["per-key", "whole-stream"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed, batches", [(1, 6), (2, 9), (3, 3)])
def test_kernel_equals_the_whole_stream_evaluation(case, keyed, seed, batches):
    query, rules, counted = CASES[case]
    op = _op(rules)
    rows = _stream(seed, 200)
    buckets = 2 if keyed else 1
    edges = np.linspace(0, len(rows), batches + 1).astype(int)
    chunks = [rows[a:b] for a, b in zip(edges[:-1], edges[1:])] + [[], []]
    values: dict = {}
    progress = previous = max_ts = None
    emitted: dict = {}
    on_time, most_kept = [], 0
    for chunk in chunks:
        for b in range(buckets):
            mine = [r for r in chunk if _bucket(r, keyed, buckets) == b]
            if not mine and values.get(b) is None:
                continue  # Spark calls a bucket with rows or a timer; an empty one has neither
            result = lb.step(op, values.get(b), _encode(op, mine, counted, keyed), progress)
            values[b] = result.state
            most_kept = max(most_kept, result.state_rows)
            assert result.late.tolist() == [progress is not None and r["ts"] < progress
                                            for r in mine]
            on_time += [r for r, x in zip(mine, result.late) if not x]
            context = _decode(result.context)
            assert all(r["ts"] < progress for r in context)
            for seq, value in query(context, keyed).items():
                t = next(r["ts"] for r in context if r["seq"] == seq)
                if (previous is None or t >= previous) and t < progress:
                    assert seq not in emitted, "a row emitted twice"
                    emitted[seq] = value
        previous = progress
        if chunk:
            top = max(r["ts"] for r in chunk)
            max_ts = top if max_ts is None else max(max_ts, top)
            progress = max(progress if progress is not None else -10**18, max_ts - 2 * SECOND)
    want = {seq: v for seq, v in query(on_time, keyed).items()
            if next(r["ts"] for r in on_time if r["seq"] == seq) < progress}
    assert emitted == want
    assert len(want) > 50
    assert most_kept < len(rows) // 2  # the look-back (and rows not final yet), not the stream


def test_state_is_the_look_back_and_the_rows_not_final_yet():
    """Hand-computed: RANGE 2 s keeps ts >= progress - 2 s; ROWS 1 per key keeps each key's
    last row before progress; rows at or after progress stay; the timer is the earliest of
    them."""
    op = _op((lb.KeepTime(2 * SECOND),))
    rows = [{"seq": i, "sym": "a", "v": i, "ts": t * SECOND} for i, t in enumerate([1, 4, 5, 7, 9])]
    first = lb.step(op, None, _encode(op, rows, None), None)
    assert first.context.num_rows == 0 and first.timer == SECOND and first.state_rows == 5
    second = lb.step(op, first.state, _encode(op, [], None), 6 * SECOND)
    assert [r["ts"] for r in _decode(second.context)] == [1 * SECOND, 4 * SECOND, 5 * SECOND]
    assert second.state_rows == 4 and second.timer == 7 * SECOND  # 4, 5 (look-back), 7, 9
    third = lb.step(op, second.state, _encode(op, [], None), 6 * SECOND)
    assert third.context.num_rows == 0  # nothing newly final: nothing to evaluate

    op = _op((lb.KeepRows(1),))
    keyed = [{"seq": i, "sym": s, "v": i, "ts": t * SECOND}
             for i, (s, t) in enumerate([("a", 1), ("b", 2), ("a", 3), ("b", 8)])]
    first = lb.step(op, None, _encode(op, keyed, None), None)
    at5 = lb.step(op, first.state, _encode(op, [], None), 5 * SECOND)
    assert sorted(r["ts"] for r in _decode(at5.context)) == [SECOND, 2 * SECOND, 3 * SECOND]
    assert at5.state_rows == 3  # a's last (3 s) and b's last (2 s) before 5 s, and 8 s
    at9 = lb.step(op, at5.state, _encode(op, [], None), 9 * SECOND)
    assert sorted(r["ts"] for r in _decode(at9.context)) == [2 * SECOND, 3 * SECOND, 8 * SECOND]


def test_state_is_arrow_bytes_and_refuses_another_operators():
    from wavesql.streaming.stateful import state as st

    op = _op((lb.KeepTime(SECOND),))
    out = lb.step(op, None, _encode(op, [{"seq": 0, "sym": "a", "v": 1, "ts": 0}], None), None)
    assert out.state.startswith(st.MAGIC) and b"\x80\x04" not in out.state[:16]
    with pytest.raises(st.StateError):
        st.decode("windowed-slide", out.state)
