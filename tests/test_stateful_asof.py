"""Continuous ASOF JOIN on Spark's state store (streaming/stateful/asof*.py), against
pandas' ``merge_asof`` over the rows that are not late -- not against WaveSQL's batch mode,
nor with any helper of the code under test.

The oracle: a left row is final once the query's progress ``W`` (the smaller of the two
streams' promises: largest event time seen minus the WATERMARK) has passed its time
(backward), or has passed the time of its match, the first right row of its key at (or,
strict, after) it (forward; a NULL key is final at once); its match is ``merge_asof``'s
over every right row that is not late. Late rows: below the ``W`` of the micro-batch they
arrive in (Spark's watermark, one batch behind the rows that raise it).

Two levels: the kernel alone, batch by batch with buckets called only for new rows or an
expired timer, as Spark calls them (fast, many seeds); and end to end on Spark, files
arriving into both streams in rounds on one checkpoint (each round a restart).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

SECOND = 1_000_000
WATERMARK = 2 * SECOND
KEYS = ["a", "b", "c", "d", "e"]
EPOCH = dt.datetime(1970, 1, 1)


# -- the oracle ----------------------------------------------------------------------------
def oracle_match(left: pd.DataFrame, right: pd.DataFrame, direction: str, inclusive: bool,
                 keyed: bool) -> dict:
    """``{left id: matched right id or None}`` of every left row (merge_asof)."""
    lk = left.assign(_k=left.k.fillna("\0null-left") if keyed else "")
    rk = right.dropna(subset=["k"]) if keyed else right
    rk = rk.assign(_k=rk.k if keyed else "").rename(columns={"ts": "rts", "id": "rid"})
    got = pd.merge_asof(lk.sort_values("ts"), rk[["rts", "rid", "_k"]].sort_values("rts"),
                        left_on="ts", right_on="rts", by="_k", direction=direction,
                        allow_exact_matches=inclusive)
    return {int(i): (None if pd.isna(r) else int(r)) for i, r in zip(got.id, got.rid)}


def final_ids(left, right, matches, w, direction, keyed) -> set:
    """The left rows final under progress ``w`` (module docstring)."""
    if w is None:
        return set()
    rts = dict(zip(right.id, right.ts))
    out = set()
    for i, ts, k in zip(left.id, left.ts, left.k):
        if direction == "backward":
            ok = ts < w
        else:
            m = matches[int(i)]
            ok = (keyed and k is None) or (m is not None and rts[m] < w)
        if ok:
            out.add(int(i))
    return out


# -- the kernel, batch by batch ------------------------------------------------------------
def _encode(frame: pd.DataFrame, right: bool) -> pd.DataFrame:
    """Rows in the kernel's encoding: ``k`` (string) and ``id`` (bigint) per stream."""
    n = len(frame)
    k = frame.k.to_numpy(object)
    nk = np.array([x is None for x in k], bool)
    code = np.array([KEYS.index(x) if x is not None else -1 for x in k], np.int64)
    cols = {"ts": frame.ts.to_numpy(np.int64), "right": np.full(n, right),
            "sk": code * 7 + 1, "sh": code * 13 + 5, "nk": nk}
    for side in ("l", "r"):
        mine = (side == "r") == right
        cols[f"{side}n0"] = nk if mine else np.ones(n, bool)
        cols[f"{side}0"] = np.where(nk, "", k).astype(object) if mine else np.full(n, "", object)
        cols[f"{side}n1"] = np.zeros(n, bool) if mine else np.ones(n, bool)
        cols[f"{side}1"] = frame.id.to_numpy(np.int64) if mine else np.zeros(n, np.int64)
    return pd.DataFrame(cols)


def _draw(rng, n_left: int, n_right: int, keyed: bool, span_s: int = 60):
    """Left and right rows (ids unique across both), times unique per stream."""
    def rows(n, first_id):
        ts = rng.choice(np.arange(0, span_s * SECOND, 1000), n, replace=False)
        k = rng.choice(KEYS, n).astype(object) if keyed else np.full(n, None, object)
        if keyed:
            k[rng.random(n) < 0.05] = None
        return pd.DataFrame({"id": np.arange(first_id, first_id + n), "k": k, "ts": ts})
    return rows(n_left, 0), rows(n_right, 10_000)


def _arrive(rng, frame: pd.DataFrame, batches: int, spread_us: int) -> list:
    """``frame`` split into ``batches`` parts in rough time order (shuffled by up to
    ``spread_us``, some rows delayed far more: late)."""
    jitter = rng.integers(0, spread_us, len(frame))
    jitter[rng.random(len(frame)) < 0.05] += 15 * SECOND  # stragglers: many come late
    order = np.argsort(frame.ts.to_numpy() + jitter, kind="stable")
    cuts = np.sort(rng.choice(np.arange(1, len(frame)), batches - 1, replace=False))
    return [frame.iloc[part] for part in np.split(order, cuts)]


def run_kernel(left, right, direction, inclusive, keyed, rng, batches=8, buckets=2,
               match=True):
    """Both streams through the kernel, batch by batch as Spark would call it: returns
    (emitted {left id: (matched right id or None, step)}, late ids, W, state rows per step)."""
    from streaming.stateful import asof

    op = asof.AsofOperator(("string", "bigint"), ("string", "bigint"), direction, inclusive,
                           keyed)
    parts_l = _arrive(rng, left, batches, 3 * SECOND)
    parts_r = _arrive(rng, right, batches, 3 * SECOND)
    states, timers = {}, {}
    emitted, late, sizes = {}, set(), []
    seen = {"l": None, "r": None}
    w = None
    b = 0
    while True:
        data = b < batches
        new = pd.concat([_encode(parts_l[b], False), _encode(parts_r[b], True)],
                        ignore_index=True) if data else _encode(left.iloc[:0], False)
        code = np.where(new.nk.to_numpy(bool) & keyed, 0, new.sk.to_numpy() // 7)
        bucket = code % buckets if keyed else np.zeros(len(new), int)
        called = set(np.unique(bucket)) | {k for k, t in timers.items()
                                           if t is not None and w is not None and w > t}
        total = 0
        for bk in sorted(called):
            result = asof.step(op, states.get(bk), new[bucket == bk].reset_index(drop=True),
                               w)
            states[bk], timers[bk] = result.state, result.timer
            mine = new[bucket == bk].reset_index(drop=True)
            late |= set(int(x) for x in np.where(mine.right, mine.r1, mine.l1)[result.late])
            ctx = result.context
            lrows, rrows = ctx[~ctx.right.to_numpy(bool)], ctx[ctx.right.to_numpy(bool)]
            assert len(lrows) == result.ready
            for row in lrows.itertuples():
                assert int(row.l1) not in emitted, "a left row emitted twice"
                emitted[int(row.l1)] = (_match(row, rrows, direction, inclusive, keyed)
                                        if match else None, b)
        for bk, s in states.items():
            if s is not None:
                from streaming.stateful import state as st
                _, tables = st.decode("asof", s)
                total += tables["rows"].num_rows if "rows" in tables else 0
        sizes.append(total)
        # Spark's watermark for the next batch: from this batch's rows on
        if data:
            for side, part in (("l", parts_l[b]), ("r", parts_r[b])):
                if len(part):
                    top = int(part.ts.max()) - WATERMARK
                    seen[side] = top if seen[side] is None else max(seen[side], top)
        nxt = None if None in seen.values() else min(seen.values())
        b += 1
        if not data and nxt == w:
            break
        w = nxt if nxt is not None and (w is None or nxt > w) else w
    return emitted, late, w, sizes


def _match(row, rrows, direction, inclusive, keyed):
    """The match of one handed-back left row among the handed-back right rows, by rule."""
    if keyed and row.nk:
        return None
    cand = rrows[(rrows.sk == row.sk) & (rrows.sh == row.sh)] if keyed else rrows
    t = row.ts
    if direction == "backward":
        cand = cand[cand.ts <= t] if inclusive else cand[cand.ts < t]
        pick = cand.ts.idxmax() if len(cand) else None
    else:
        cand = cand[cand.ts >= t] if inclusive else cand[cand.ts > t]
        pick = cand.ts.idxmin() if len(cand) else None
    return None if pick is None else int(cand.r1[pick])


CASES = [(seed, direction, inclusive, keyed)
         for seed, (direction, inclusive, keyed) in enumerate(
             [(d, i, k) for d in ("backward", "forward") for i in (True, False)
              for k in (True, False)] * 2)]


@pytest.mark.parametrize("seed, direction, inclusive, keyed", CASES)
def test_kernel_batch_by_batch_equals_merge_asof(seed, direction, inclusive, keyed):
    """Random batch splits, rows out of order (some far: late on either side), buckets
    called only with new rows or an expired timer: every left row final by the last
    progress is emitted once, with merge_asof's match over the right rows not late; no
    other row is emitted; late rows are exactly those below the progress of their batch."""
    rng = np.random.default_rng(100 + seed)
    left, right = _draw(rng, int(rng.integers(60, 160)), int(rng.integers(60, 160)), keyed)
    emitted, late, w, _ = run_kernel(left, right, direction, inclusive, keyed, rng,
                                     batches=int(rng.integers(5, 12)))
    left_ok, right_ok = left[~left.id.isin(late)], right[~right.id.isin(late)]
    matches = oracle_match(left_ok, right_ok, direction, inclusive, keyed)
    want = final_ids(left_ok, right_ok, matches, w, direction, keyed)
    assert w is not None and len(want) > 20  # (late rows: in 15 of the 16 cases)
    assert set(emitted) == want
    assert {i: m for i, (m, _) in emitted.items()} == {i: matches[i] for i in want}


def test_kernel_state_is_arrow_bytes():
    """A bucket's state is WaveSQL's Arrow IPC value (streaming/stateful/state.py), never a
    pickle: the waiting left rows and the kept right rows, readable as a table."""
    import pyarrow as pa

    from streaming.stateful import asof
    from streaming.stateful import state as st

    op = asof.AsofOperator(("string", "bigint"), ("string", "bigint"), "backward", True, True)
    left = pd.DataFrame({"id": [1, 2], "k": ["a", "b"], "ts": [5 * SECOND, 9 * SECOND]})
    right = pd.DataFrame({"id": [10, 11], "k": ["a", "a"], "ts": [1 * SECOND, 4 * SECOND]})
    new = pd.concat([_encode(left, False), _encode(right, True)], ignore_index=True)
    first = asof.step(op, None, new, None)  # no progress yet: everything waits
    assert first.ready == 0 and first.state_rows == 4 and first.timer == 5 * SECOND
    result = asof.step(op, first.state, new.iloc[:0], 6 * SECOND)  # the timer's call
    assert result.state.startswith(b"WSQLSTATE") and b"pickle" not in result.state
    meta, tables = st.decode("asof", result.state)
    rows = tables["rows"]
    assert isinstance(rows, pa.Table) and meta["w"] == 6 * SECOND
    # left 1 (at 5 s < 6 s) is final with right 11; left 2 waits; of key a's right rows the
    # last before 6 s stays (11), the older one (10) goes
    assert sorted(rows.column("l1").to_pylist()) == [0, 2]
    assert sorted(zip(rows.column("right").to_pylist(), rows.column("r1").to_pylist())) == \
        [(False, 0), (True, 11)]
    assert result.ready == 1 and result.timer == 9 * SECOND and result.state_rows == 2
    ctx = result.context  # left 1 and key a's right rows, whose last before 5 s matches
    assert sorted(zip(ctx.right, np.where(ctx.right, ctx.r1, ctx.l1))) == [
        (False, 1), (True, 10), (True, 11)]
    with pytest.raises(st.StateError):
        st.decode("resample", result.state)


def test_kernel_late_rows_are_below_the_progress_of_their_batch():
    """The late rows the kernel names are those below the progress their batch saw --
    checked here by replaying the arrival with the oracle's own watermark."""
    rng = np.random.default_rng(7)
    left, right = _draw(rng, 200, 200, True)
    emitted, late, w, _ = run_kernel(left, right, "backward", True, True,
                                     np.random.default_rng(8), batches=6)
    rng2 = np.random.default_rng(8)  # the same arrival as run_kernel drew
    parts = [_arrive(rng2, left, 6, 3 * SECOND), _arrive(rng2, right, 6, 3 * SECOND)]
    want, seen, wm = set(), {"l": None, "r": None}, None
    for b in range(6):
        for side, ps in zip("lr", parts):
            if wm is not None:
                want |= set(ps[b].id[ps[b].ts < wm].astype(int))
        for side, ps in zip("lr", parts):
            if len(ps[b]):
                top = int(ps[b].ts.max()) - WATERMARK
                seen[side] = top if seen[side] is None else max(seen[side], top)
        nxt = None if None in seen.values() else min(seen.values())
        wm = nxt if nxt is not None and (wm is None or nxt > wm) else wm
    assert late == want and len(want) > 3


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_kernel_state_stays_bounded_over_a_long_history(direction):
    """A long history, the same number of keys: the state the buckets keep does not
    grow with it (waiting left rows within the watermark's delay, right rows from the
    progress on and the last ones per key before it)."""
    rng = np.random.default_rng(11)
    left, right = _draw(rng, 1200, 1200, True, span_s=240)
    _, _, _, sizes = run_kernel(left, right, direction, True, True, rng, batches=24,
                                match=False)
    # (a batch's size varies -- random cuts -- and so does what waits for the next one)
    early, late_ = max(sizes[:12]), max(sizes[12:])
    assert late_ <= 2 * early, (early, late_)
    assert max(sizes) < 0.25 * (len(left) + len(right))


# -- end to end on Spark -------------------------------------------------------------------
def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _files(folder, frames: list, timeless: bool = False) -> None:
    """One Parquet file per frame (``k``, ``v``, ``ts``), modification times in order; a
    row without event time in the second file when ``timeless``."""
    folder.mkdir(parents=True)
    for i, part in enumerate(frames):
        out = part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]"),
                          v=part.id.astype(float))[["k", "v", "ts"]]
        if timeless and i == 1:
            out = pd.concat([out, pd.DataFrame({"k": ["a"], "v": [-1.0], "ts": pd.Series(
                [pd.NaT], dtype="datetime64[us]")})], ignore_index=True)
        path = folder / f"part-{i:03d}.parquet"
        out.to_parquet(path)
        stamp = time.time() - 3600 + i
        os.utime(path, (stamp, stamp))


def _in_files(rng, frame: pd.DataFrame, n: int) -> list:
    """``frame`` as ``n`` files in rough time order (out of order within each and by up to
    3 s across), and in the last (the fourth) some rows behind the progress: late."""
    order = np.argsort(frame.ts.to_numpy() + rng.integers(0, 3 * SECOND, len(frame)))
    parts = [frame.iloc[p].sample(frac=1, random_state=i)
             for i, p in enumerate(np.array_split(order, n))]
    old = parts[1].head(4).assign(id=parts[1].head(4).id + 50_000)
    parts[3] = pd.concat([parts[3], old.assign(ts=old.ts - 2 * SECOND)])
    return parts


def _oracle_late(parts_l: list, parts_r: list):
    """(on-time left, on-time right, late ids, final W): file ``i`` of each stream is read
    in micro-batch ``i``, whose watermark is the smaller of the two streams' largest event
    time in the files before it, minus the WATERMARK."""
    top = {"l": None, "r": None}
    w, ok, late = None, {"l": [], "r": []}, set()
    for pl_, pr_ in zip(parts_l, parts_r):
        for side, part in (("l", pl_), ("r", pr_)):
            bad = part.ts < w if w is not None else np.zeros(len(part), bool)
            late |= set(part.id[bad].astype(int))
            ok[side].append(part[~bad])
        for side, part in (("l", pl_), ("r", pr_)):
            top[side] = part.ts.max() if top[side] is None else max(top[side], part.ts.max())
        if None not in top.values():
            w = max(w or -10**18, min(top.values()) - WATERMARK)
    return pd.concat(ok["l"]), pd.concat(ok["r"]), late, w


def _streams(ws, tmp_path):
    for name in ("trades", "quotes"):
        (tmp_path / "in" / name).mkdir(parents=True)
        ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{tmp_path / 'in' / name}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")


def _rounds(ws, tmp_path, sql, rounds) -> list:
    """Move each round's files of both streams in and run the query to the end on one
    checkpoint (a restart each round); every run's reports."""
    staged = {name: sorted((tmp_path / "staging" / name).iterdir())
              for name in ("trades", "quotes")}
    reports, at = [], 0
    for n in rounds:
        for name, files in staged.items():
            for f in files[at:at + n]:
                stamp = f.stat().st_mtime
                target = tmp_path / "in" / name / f.name
                shutil.move(f, target)
                os.utime(target, (stamp, stamp))
        at += n
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        cq.await_termination()
        assert type(cq).__name__ == "StatefulAsofQuery"
        reports += cq.reports
    return reports


E2E = [  # one in CI (about 6 micro-batches, two query starts); the kernel tests above cover
    # every direction and keying batch by batch
    pytest.param("backward", True, id="backward-inclusive"),
       pytest.param("forward", False, id="forward-strict", marks=pytest.mark.slow)]


@pytest.mark.parametrize("direction, inclusive", E2E)
def test_continuous_asof_join_on_the_state_store(ws, spark, tmp_path, direction, inclusive):
    """Files arrive into both streams in two rounds on one checkpoint (state restored at
    the restart), out of order, with late rows on each side and a row without event time:
    every left row final by the last progress is emitted once, with merge_asof's match over
    the rows not late; late rows of each stream are in the late sink; each micro-batch's
    ``_progress/`` record accounts for its rows five ways; the state stays bounded."""
    rng = np.random.default_rng(21 if direction == "backward" else 22)
    left, right = _draw(rng, 240, 300, True, span_s=60)
    parts_l, parts_r = _in_files(rng, left, 4), _in_files(rng, right, 4)
    _files(tmp_path / "staging" / "trades", parts_l)
    _files(tmp_path / "staging" / "quotes", parts_r, timeless=True)
    _streams(ws, tmp_path)
    op = (">=" if inclusive else ">") if direction == "backward" else ("<=" if inclusive
                                                                        else "<")
    sql = (f"SELECT t.k, t.v AS id, t.ts, q.v AS qid FROM trades t ASOF LEFT JOIN quotes q "
           f"ON t.k = q.k AND t.ts {op} q.ts")
    assert "stateful ASOF JOIN on Spark's state store" in ws.explain(sql, "STREAM")
    reports = _rounds(ws, tmp_path, sql, [2, 2])
    ok_l, ok_r, late, w = _oracle_late(parts_l, parts_r)
    assert reports[-1].progress_us == w == reports[-1].inputs["quotes"]
    matches = oracle_match(ok_l, ok_r, direction, inclusive, True)
    want = {i: matches[i] for i in final_ids(ok_l, ok_r, matches, w, direction, True)}
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    ids = Counter(int(r["id"]) for r in rows)
    assert set(ids.values()) == {1}  # no row twice
    got = {int(r["id"]): (None if r["qid"] is None else int(r["qid"])) for r in rows}
    assert got == want and len(want) > 150
    assert all(r["_progress"] is not None for r in rows) and "_final" not in rows[0]
    # late rows of each stream and the row without event time: in the late sink, counted
    sink = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert len(late) >= 4 and sum(r.late for r in reports) == len(late)
    named = Counter((r["_stream"], json.loads(r["_row"]).get("ts") is None) for r in sink)
    assert named[("quotes", True)] == 1
    assert {int(json.loads(r["_row"])["v"]) for r in sink if "ts" in json.loads(r["_row"])} \
        == late
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").glob(
        "*.json")]
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"])
    assert sum(r["rows_in"] for r in records) == sum(map(len, parts_l + parts_r)) + 1
    # bounded: the waiting left rows and the recent right rows, not the history
    buffered = [r.buffered for r in reports if r.rows_in]
    assert 0 < max(buffered) < (len(left) + len(right)) // 3
    assert max(buffered[-2:]) <= 2 * max(buffered[:2]) + 10


def test_checkpoints_of_the_two_runners_are_not_mixed(ws, tmp_path, monkeypatch):
    """A checkpoint the re-evaluating runner wrote is refused by the state-store runner,
    and one the state-store runner wrote by the re-evaluating one (WAVESQL_STATEFUL=0):
    CHECKPOINT_MISMATCH, never results from an empty state."""
    from wavesql.errors import WaveSQLError

    rng = np.random.default_rng(3)
    left, right = _draw(rng, 20, 20, True, span_s=10)
    _files(tmp_path / "in" / "trades", [left])
    _files(tmp_path / "in" / "quotes", [right])
    for name in ("trades", "quotes"):
        ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{tmp_path / 'in' / name}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    sql = "SELECT t.k, t.ts, q.v FROM trades t ASOF JOIN quotes q ON t.k = q.k AND t.ts >= q.ts"
    for first, second, env in ((tmp_path / "a", "ReEvaluatingQuery", "0"),
                               (tmp_path / "b", "StatefulAsofQuery", "1")):
        monkeypatch.setenv("WAVESQL_STATEFUL", env)
        cq = ws.stream(sql, first / "out", first / "ckpt")
        cq.await_termination()
        assert type(cq).__name__ == second
        monkeypatch.setenv("WAVESQL_STATEFUL", "1" if env == "0" else "0")
        with pytest.raises(WaveSQLError) as err:
            ws.stream(sql, first / "out", first / "ckpt").await_termination()
        assert err.value.code == "CHECKPOINT_MISMATCH"
        assert "new checkpoint" in err.value.hint
    # the state-store checkpoint holds its plan's fingerprint: a changed join (strict) on it
    # is refused too, naming both plans
    monkeypatch.setenv("WAVESQL_STATEFUL", "1")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(sql.replace(">=", ">"), tmp_path / "b" / "out", tmp_path / "b" / "ckpt")
    assert err.value.code == "CHECKPOINT_MISMATCH" and "strict" in str(err.value)


def test_what_stays_re_evaluated_says_why(ws, tmp_path):
    """Keys of different kinds (an INT and a STRING: SQL's = casts, the hashes would not)
    stay on the re-evaluating runner, and EXPLAIN STREAM names the reason; an INT and a
    BIGINT key (hashed alike) go to the state store."""
    for name, kt in (("trades", "INT"), ("quotes", "STRING"), ("bids", "BIGINT")):
        (tmp_path / name).mkdir()
        ws.sql(f"CREATE STREAM {name} (k {kt}, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{tmp_path / name}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    shown = ws.explain("SELECT t.k, t.ts, q.v FROM trades t ASOF JOIN quotes q "
                       "ON t.k = q.k AND t.ts >= q.ts", "STREAM")
    assert "continuous asof query" in shown and "not on the state store" in shown
    assert "hold different kinds of values" in shown
    shown = ws.explain("SELECT t.k, t.ts, b.v FROM trades t ASOF JOIN bids b "
                       "ON t.k = b.k AND t.ts <= b.ts", "STREAM")
    assert "stateful ASOF JOIN on Spark's state store (forward, inclusive" in shown
