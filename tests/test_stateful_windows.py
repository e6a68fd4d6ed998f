"""The incremental window kernel (streaming/stateful/windows.py), micro-batch by micro-batch,
against the brute-force CQL reference (tests/cql_reference.py) over the same rows.

No Spark: the kernel is numpy. Each case cuts a random stream into micro-batches, advances
progress as a continuous query does (largest event time so far minus the watermark, seen
by the *next* batch), and checks that (1) the rows flagged late are exactly those below the
progress of their batch, and (2) the results emitted -- all final -- equal the reference's
over the on-time rows, for every instant below the final progress, with no duplicates.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests import cql_reference as cql
from wavesql.streaming.stateful import state as st
from wavesql.streaming.stateful import windows as w

SECOND = 1_000_000


def _stream(seed: int, n: int, keys="abc"):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 40 * SECOND, n)) // 250_000 * 250_000  # ties too
    ts = ts[np.argsort(ts + rng.integers(0, 5 * SECOND, n))]  # arrival order: up to 5 s off
    sym = rng.choice(list(keys) + [None], n, p=[0.9 / len(keys)] * len(keys) + [0.1])
    v = rng.integers(0, 10, n).astype(float)
    v[rng.random(n) < 0.1] = np.nan  # NULL values
    return [{"sym": s, "v": (None if np.isnan(x) else int(x)), "ts": int(t)}
            for s, x, t in zip(sym, v, ts)]


def _encode(rows, where, keyed: bool, order: bool) -> w.Rows:
    """Rows as the Spark side hands them to the kernel: values + NULL masks."""
    sym = np.array([r["sym"] or "" for r in rows], dtype=object)
    sym_null = np.array([r["sym"] is None for r in rows], bool)
    v = np.array([r["v"] or 0 for r in rows], np.int64)
    v_null = np.array([r["v"] is None for r in rows], bool)
    passes = np.array([where(r) for r in rows], bool)
    arg_null = v_null | ~passes  # the argument is NULL where the WHERE fails (CASE WHEN)
    keys = [(sym, sym_null)] if keyed else []
    return w.Rows(np.array([r["ts"] for r in rows], np.int64), passes, keys,
                  [(v, arg_null)], [(sym, sym_null), (v, v_null)] if order else [])


AGGS = (w.Aggregate("count"), w.Aggregate("count", 0), w.Aggregate("sum", 0, True),
        w.Aggregate("min", 0, True), w.Aggregate("max", 0, True), w.Aggregate("avg", 0, True))


def _query(keyed: bool, where):
    def q(rel):
        groups: dict = {}
        for r in rel:
            if where(r):
                groups.setdefault(r["sym"] if keyed else None, []).append(r["v"])
        out = []
        for key, vs in groups.items():
            vals = [x for x in vs if x is not None]
            row = (len(vs), len(vals), sum(vals) if vals else None, min(vals) if vals else None,
                   max(vals) if vals else None, sum(vals) / len(vals) if vals else None)
            out.append(((key,) if keyed else ()) + row)
        return out
    return q


def _run(op: w.Operator, rows, batches: int, watermark_us: int, where, keyed, order):
    """Feed the kernel batch by batch; return (results Counter, late rows, final progress)."""
    edges = np.linspace(0, len(rows), batches + 1).astype(int)
    value, progress, max_ts = None, None, None
    out, late, on_time = Counter(), [], []
    chunks = [rows[a:b] for a, b in zip(edges[:-1], edges[1:])] + [[]]
    for chunk in chunks:
        enc = _encode(chunk, where, keyed, order)
        result = w.step(op, value, enc, progress)
        value = result.state
        late += [r for r, x in zip(chunk, result.late) if x]
        on_time += [r for r, x in zip(chunk, result.late) if not x]
        assert result.late.tolist() == [progress is not None and r["ts"] < progress
                                        for r in chunk]
        res = result.results
        for i in range(len(res)):
            assert res.final[i]
            key = (None if res.keys[0][1][i] else res.keys[0][0][i],) if keyed else ()
            vals = tuple(None if m[i] else _python(v[i]) for v, m in res.values)
            out[(int(res.time[i]),) + key + vals] += 1
        # the next batch sees the progress this one made (Spark's watermark)
        if chunk:
            top = max(r["ts"] for r in chunk)
            max_ts = top if max_ts is None else max(max_ts, top)
            progress = max(progress or -10**18, max_ts - watermark_us)
    return out, late, progress


def _python(value):
    """A kernel's result value as the oracle writes it (int, float, str, or a tuple)."""
    if isinstance(value, (np.ndarray, list)):
        return tuple(_python(x) for x in value)
    if isinstance(value, (np.floating, float)):
        return float(value)
    return value if isinstance(value, str) else int(value)


def _expected(rows, window, kind, keyed, where, progress):
    want = cql.evaluate(rows, "ts", window, ["sym", "v"], _query(keyed, where), kind)
    return Counter({k: n for k, n in want.items() if k[0] < progress})


def _norm(counter):
    return Counter({tuple(round(x, 9) if isinstance(x, float) else x for x in k): n
                    for k, n in counter.items()})


CASES = [
    ("SLIDE", 4 * SECOND, 2 * SECOND, "RSTREAM"),
    ("SLIDE", 3 * SECOND, 3 * SECOND, "RSTREAM"),          # tumbling
    ("SLIDE", 5 * SECOND, 2 * SECOND, "ISTREAM"),          # panes of 1 s
    ("SLIDE", 4 * SECOND, 1 * SECOND, "DSTREAM"),
    ("RANGE", 3 * SECOND, 0, "ISTREAM"),
    ("RANGE", 2 * SECOND, 0, "DSTREAM"),
    ("RANGE", 1, 0, "ISTREAM"),                            # [NOW]
    ("ROWS", 3, 0, "ISTREAM"),
    ("ROWS", 2, 0, "DSTREAM"),
]


@pytest.mark.parametrize("keyed", [True, False], ids=["group-by", "global"])
@pytest.mark.parametrize("kind, size, slide, output", CASES)
@pytest.mark.parametrize("seed, split", [(1, False), (2, False), (3, True)],
                         ids=["1", "2", "touched-keys-only"])
def test_kernel_equals_the_cql_reference(kind, size, slide, output, keyed, seed, split,
                                         monkeypatch):
    if split:  # large buckets evaluate only the keys something happens to: force it here
        monkeypatch.setattr(w, "SPLIT_ROWS", 0)
    rows = _stream(seed, 160)
    where = lambda r: r["v"] is None or r["v"] != 3  # noqa: E731 - a WHERE some rows fail
    op = w.Operator(kind, size, slide, output, keys=1 if keyed else 0, aggregates=AGGS,
                    order=2 if kind == "ROWS" else 0)
    if kind == "ROWS" and keyed:
        window = cql.Window("PARTITION_ROWS", size, partition_by=("sym",))
    elif kind == "RANGE" and size == 1:
        window = cql.Window("NOW")
    else:
        window = cql.Window(kind, size, slide)
    got, late, progress = _run(op, rows, 6, 2 * SECOND, where, keyed, kind == "ROWS")
    assert late, "the stream should have late rows"
    on_time = [r for r in rows if r not in late]
    want = _expected(on_time, window, output, keyed, where, progress)
    assert sum(want.values()) > 10
    assert _norm(got) == _norm(want)


def test_state_of_a_slid_window_is_its_panes_not_its_rows():
    """RANGE 60 s SLIDE 10 s at 100 rows/s: the state holds <= 7 panes per key (the window's
    6 and the one filling), not 6,000 rows."""
    op = w.Operator("SLIDE", 60 * SECOND, 10 * SECOND, "RSTREAM", keys=1,
                    aggregates=(w.Aggregate("count"),))
    value, progress = None, None
    rng = np.random.default_rng(0)
    for b in range(30):
        ts = np.sort(rng.integers(b * 10 * SECOND, (b + 1) * 10 * SECOND, 1000))
        keys = [(rng.choice(np.array(list("ab"), dtype=object), 1000), np.zeros(1000, bool))]
        out = w.step(op, value, w.Rows(ts, np.ones(1000, bool), keys, [], []), progress)
        # the next window to close: the first not final at the progress the step was given
        assert progress is None or out.timer >= progress
        value, progress = out.state, int(ts.max()) - SECOND
        assert out.state_rows <= 2 * 8


def test_state_values_are_versioned_arrow_not_pickle():
    op = w.Operator("RANGE", SECOND, 0, "ISTREAM", keys=1, aggregates=(w.Aggregate("count"),))
    rows = w.Rows(np.array([5, 7], np.int64), np.ones(2, bool),
                  [(np.array(["a", "b"], dtype=object), np.zeros(2, bool))], [], [])
    value = w.step(op, None, rows, None).state
    assert value.startswith(st.MAGIC) and b"pickle" not in value
    meta, tables = st.decode(op.kind, value)
    assert tables["kept"].num_rows == 2
    with pytest.raises(st.StateError):
        st.decode("windowed-slide", value)  # another operator's state
    with pytest.raises(st.StateError):
        st.decode(op.kind, value[:40])  # damaged
    with pytest.raises(st.StateError):
        st.decode(op.kind, b"\x80\x04\x95pickled")


@pytest.mark.parametrize("kind", ["ROWS", "RANGE"])
def test_a_step_with_rows_but_no_instant_due(kind):
    """Kept rows all before the last progress and new rows all after the new one: nothing
    to evaluate (a no-op step, not an error)."""
    op = w.Operator(kind, 3 if kind == "ROWS" else 5, 0, "ISTREAM", keys=1,
                    aggregates=(w.Aggregate("count"),), order=0)

    def rows(ts):
        ts = np.array(ts, np.int64)
        return w.Rows(ts, np.ones(len(ts), bool),
                      [(np.array(["a"] * len(ts), dtype=object), np.zeros(len(ts), bool))], [], [])

    value = w.step(op, None, rows([0, 1, 2]), None).state
    first = w.step(op, value, rows([]), 100)
    # ISTREAM of the count: up at each arrival; a RANGE also changes as rows leave (5, 6;
    # at 7 the key is gone, which ISTREAM does not emit)
    assert sorted(first.results.time.tolist()) == ([0, 1, 2] if kind == "ROWS"
                                                   else [0, 1, 2, 5, 6])
    second = w.step(op, first.state, rows([200, 201]), 150)
    assert len(second.results) == 0 and second.timer == 200
