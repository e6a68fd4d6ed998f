"""Continuous ASOF JOIN on Spark's state store (streaming/stateful/asof*.py), against
pandas' ``merge_asof`` over the rows that are not late -- not against WaveSQL's batch mode,
nor with any helper of the code under test.

The oracle, the re-evaluating runner's definition: each stream has its own progress (its
largest event time seen minus the WATERMARK), and a row is late below its own stream's
progress of the micro-batch it arrives in (one batch behind the rows that raise it, as
Spark's watermark is). A left row is final once the right stream's progress ``R`` has
passed its time (backward), or has passed the time of its match, the first right row of
its key at (or, strict, after) it (forward; a NULL key is final at once); its match is
``merge_asof``'s over every right row that is not late. ``_progress`` is the smaller of
the two progresses.

Two levels: the kernel alone, batch by batch with buckets called only for new rows or an
expired timer (as Spark calls them, its watermark being ``R``) -- fast, many seeds, one
stream far ahead of the other; and end to end on Spark, files arriving into both streams
in rounds on one checkpoint (each round a restart), the right stream ahead.
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


def _draw(rng, n_left: int, n_right: int, keyed: bool, span_s: int = 60,
          ahead: tuple[str, int] | None = None):
    """Left and right rows (ids unique across both), times unique per stream; ``ahead``
    ``("l" | "r", µs)``: that stream's times that much later (it runs ahead)."""
    def rows(n, first_id, shift):
        ts = rng.choice(np.arange(0, span_s * SECOND, 1000), n, replace=False) + shift
        k = rng.choice(KEYS, n).astype(object) if keyed else np.full(n, None, object)
        if keyed:
            k[rng.random(n) < 0.05] = None
        return pd.DataFrame({"id": np.arange(first_id, first_id + n), "k": k, "ts": ts})
    side, by = ahead or ("", 0)
    return rows(n_left, 0, by if side == "l" else 0), rows(n_right, 10_000,
                                                           by if side == "r" else 0)


def _arrive(rng, frame: pd.DataFrame, batches: int, spread_us: int) -> list:
    """``frame`` split into ``batches`` parts in rough time order (shuffled by up to
    ``spread_us``, some rows delayed far more: late)."""
    jitter = rng.integers(0, spread_us, len(frame))
    jitter[rng.random(len(frame)) < 0.05] += 15 * SECOND  # stragglers: many come late
    order = np.argsort(frame.ts.to_numpy() + jitter, kind="stable")
    cuts = np.sort(rng.choice(np.arange(1, len(frame)), batches - 1, replace=False))
    return [frame.iloc[part] for part in np.split(order, cuts)]


def oracle_progress(parts: dict) -> list[dict]:
    """Each stream's progress each micro-batch runs with (None: none yet), from the rows
    of the batches before it: ``parts`` ``{"l": [...], "r": [...]}``, batch ``b`` reading
    part ``b`` of each; one more entry than batches (the progress after the last)."""
    seen, out = {"l": None, "r": None}, [{"l": None, "r": None}]
    for b in range(max(len(v) for v in parts.values())):
        for side, ps in parts.items():
            if b < len(ps) and len(ps[b]):  # (a late row's time minus WATERMARK: lower)
                top = int(ps[b].ts.max()) - WATERMARK
                seen[side] = top if seen[side] is None else max(seen[side], top)
        out.append(dict(seen))
    return out


def oracle_late(parts: dict, progress: list[dict]) -> set:
    """The ids of the rows below their own stream's progress of their batch."""
    late = set()
    for side, ps in parts.items():
        for b, part in enumerate(ps):
            p = progress[b][side]
            if p is not None:
                late |= set(part.id[part.ts < p].astype(int))
    return late


def late_by_own_progress_only(parts: dict, progress: list[dict], side: str) -> set:
    """The ids of ``side``'s rows below its own progress of their batch but at or above
    the other stream's -- late here, not with one progress for both (the smaller)."""
    other = "l" if side == "r" else "r"
    out = set()
    for b, part in enumerate(parts[side]):
        mine, theirs = progress[b][side], progress[b][other]
        if mine is not None and theirs is not None:
            out |= set(part.id[(part.ts >= theirs) & (part.ts < mine)].astype(int))
    return out


def run_kernel(left, right, direction, inclusive, keyed, rng, batches=8, buckets=2,
               match=True):
    """Both streams through the kernel, batch by batch as Spark would call it -- each
    bucket with new rows, or whose timer the right stream's progress (Spark's watermark)
    passed -- with each stream's progress from the oracle: returns (emitted {left id:
    (matched right id or None, step)}, late ids, each step's progress, state rows per
    step, the parts each batch read)."""
    from streaming.stateful import asof

    op = asof.AsofOperator(("string", "bigint"), ("string", "bigint"), direction, inclusive,
                           keyed)
    parts = {"l": _arrive(rng, left, batches, 3 * SECOND),
             "r": _arrive(rng, right, batches, 3 * SECOND)}
    progress = oracle_progress(parts)
    states, timers = {}, {}
    emitted, late, sizes = {}, set(), []
    b = 0
    while True:
        data = b < batches
        p = progress[min(b, batches)]
        wr = p["r"]
        new = pd.concat([_encode(parts["l"][b], False), _encode(parts["r"][b], True)],
                        ignore_index=True) if data else _encode(left.iloc[:0], False)
        code = np.where(new.nk.to_numpy(bool) & keyed, 0, new.sk.to_numpy() // 7)
        bucket = code % buckets if keyed else np.zeros(len(new), int)
        called = set(np.unique(bucket)) | {k for k, t in timers.items()
                                           if t is not None and wr is not None and wr > t}
        total = 0
        for bk in sorted(called):
            mine = new[bucket == bk].reset_index(drop=True)
            result = asof.step(op, states.get(bk), mine, p["l"], wr)
            states[bk], timers[bk] = result.state, result.timer
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
        b += 1
        # a batch without new rows runs while the right progress (Spark's watermark) moved
        if not data and progress[min(b, batches)]["r"] == wr:
            break
    return emitted, late, progress, sizes, parts


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


AHEAD = {"aligned": None, "right-ahead": ("r", 20 * SECOND), "left-ahead": ("l", 20 * SECOND)}
CASES = [pytest.param(seed, d, i, k, AHEAD[a], id=f"{seed}-{d}-{i}-{k}-{a}")
         for seed, (d, i, k, a) in enumerate(
             [(d, i, k, a) for a in AHEAD for d in ("backward", "forward")
              for i in (True, False) for k in (True, False)])]


@pytest.mark.parametrize("seed, direction, inclusive, keyed, ahead", CASES)
def test_kernel_batch_by_batch_equals_merge_asof(seed, direction, inclusive, keyed, ahead):
    """Random batch splits, rows out of order (some far: late on either side), one stream
    20 s ahead of the other or neither, buckets called only with new rows or an expired
    timer: late rows are exactly those below their own stream's progress of their batch;
    every left row final by the last right progress is emitted once, with merge_asof's
    match over the right rows not late; no other row is emitted."""
    rng = np.random.default_rng(100 + seed)
    left, right = _draw(rng, int(rng.integers(60, 160)), int(rng.integers(60, 160)), keyed,
                        ahead=ahead)
    emitted, late, progress, _, parts = run_kernel(left, right, direction, inclusive, keyed,
                                                   rng, batches=int(rng.integers(5, 12)))
    assert late == oracle_late(parts, progress)
    left_ok, right_ok = left[~left.id.isin(late)], right[~right.id.isin(late)]
    matches = oracle_match(left_ok, right_ok, direction, inclusive, keyed)
    want = final_ids(left_ok, right_ok, matches, progress[-1]["r"], direction, keyed)
    assert len(want) > 20
    assert set(emitted) == want
    assert {i: m for i, (m, _) in emitted.items()} == {i: matches[i] for i in want}


@pytest.mark.parametrize("ahead", ["r", "l"])
def test_kernel_a_stream_far_ahead_keeps_its_own_progress(ahead):
    """One stream 30 s ahead: its rows between the other stream's progress and its own
    are late (one progress for both, the smaller, would have joined them); a left row
    whose time the right progress passed is final in the batch it arrives in, however far
    behind the left stream is; and the results are merge_asof's over the rows not late."""
    rng = np.random.default_rng(40 if ahead == "r" else 41)
    left, right = _draw(rng, 300, 300, True, ahead=(ahead, 30 * SECOND))
    emitted, late, progress, _, parts = run_kernel(left, right, "backward", True, True, rng,
                                                   batches=8)
    assert late == oracle_late(parts, progress)
    # late by the ahead stream's own progress, not by the smaller one
    only_own = late_by_own_progress_only(parts, progress, ahead)
    assert len(only_own) >= 3 and only_own <= late
    left_ok, right_ok = left[~left.id.isin(late)], right[~right.id.isin(late)]
    matches = oracle_match(left_ok, right_ok, "backward", True, True)
    want = final_ids(left_ok, right_ok, matches, progress[-1]["r"], "backward", True)
    assert set(emitted) == want and len(want) > 100
    assert {i: m for i, (m, _) in emitted.items()} == {i: matches[i] for i in want}
    if ahead == "r":  # a left row the right progress has passed is final as it arrives
        arrived = {int(i): b for b, part in enumerate(parts["l"]) for i in part.id}
        behind = [i for i, b in arrived.items() if i in want
                  and int(left.ts[left.id == i].iloc[0]) < (progress[b]["r"] or -1)]
        assert len(behind) > 100 and all(emitted[i][1] == arrived[i] for i in behind)


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
    first = asof.step(op, None, new, None, None)  # no progress yet: everything waits
    assert first.ready == 0 and first.state_rows == 4 and first.timer == 5 * SECOND
    result = asof.step(op, first.state, new.iloc[:0], 6 * SECOND, 6 * SECOND)  # a timer
    assert result.state.startswith(b"WSQLSTATE") and b"pickle" not in result.state
    meta, tables = st.decode("asof", result.state)
    rows = tables["rows"]
    assert isinstance(rows, pa.Table) and meta == {"wl": 6 * SECOND, "wr": 6 * SECOND}
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


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_kernel_late_rows_are_below_their_own_streams_progress(direction):
    """Left progress 10 s, right 30 s: a left row at 9 s is late, one at 12 s is not (and,
    backward, final at once: the right progress passed it); a right row at 20 s is late
    (one progress for both, 10 s, would have joined it), one at 31 s is not. The state
    keeps each stream's progress; a later call with an older one keeps the newer."""
    from streaming.stateful import asof
    from streaming.stateful import state as st

    op = asof.AsofOperator(("string", "bigint"), ("string", "bigint"), direction, True, True)
    left = pd.DataFrame({"id": [1, 2], "k": ["a", "a"], "ts": [9 * SECOND, 12 * SECOND]})
    right = pd.DataFrame({"id": [10, 11], "k": ["a", "a"], "ts": [20 * SECOND, 31 * SECOND]})
    new = pd.concat([_encode(left, False), _encode(right, True)], ignore_index=True)
    result = asof.step(op, None, new, 10 * SECOND, 30 * SECOND)
    assert result.late.tolist() == [True, False, True, False]
    ctx = result.context
    if direction == "backward":  # left 2 final, matching nothing (right 10 was late)
        assert result.ready == 1 and ctx.right.tolist() == [False, True]
        assert ctx.l1.tolist()[0] == 2 and ctx.r1.tolist()[1] == 11
    else:  # left 2 waits: its match (right 11, at 31 s) is not below the right progress
        assert result.ready == 0 and result.timer == 31 * SECOND
    meta, _ = st.decode("asof", result.state)
    assert meta == {"wl": 10 * SECOND, "wr": 30 * SECOND}
    again = asof.step(op, result.state, _encode(left.iloc[:0], False), 5 * SECOND, None)
    meta, _ = st.decode("asof", again.state)
    assert meta == {"wl": 10 * SECOND, "wr": 30 * SECOND}


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_kernel_state_stays_bounded_over_a_long_history(direction):
    """A long history, the same number of keys: the state the buckets keep does not
    grow with it (waiting left rows within the watermark's delay, right rows from the
    progress on and the last ones per key before it)."""
    rng = np.random.default_rng(11)
    left, right = _draw(rng, 1200, 1200, True, span_s=240)
    _, _, _, sizes, _ = run_kernel(left, right, direction, True, True, rng, batches=24,
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
    3 s across), and in the last some rows behind the progress: late."""
    order = np.argsort(frame.ts.to_numpy() + rng.integers(0, 3 * SECOND, len(frame)))
    parts = [frame.iloc[p].sample(frac=1, random_state=i)
             for i, p in enumerate(np.array_split(order, n))]
    old = parts[1].head(4).assign(id=parts[1].head(4).id + 50_000)
    parts[-1] = pd.concat([parts[-1], old.assign(ts=old.ts - 2 * SECOND)])
    return parts


def _streams(ws, tmp_path):
    for name in ("trades", "quotes"):
        (tmp_path / "in" / name).mkdir(parents=True)
        ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{tmp_path / 'in' / name}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")


def _rounds(ws, tmp_path, sql, rounds, engine: str = "StatefulAsofQuery") -> list:
    """Move each round's files of both streams in and run the query to the end on one
    checkpoint (a restart each round) on the runner ``engine``; every run's reports."""
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
        assert type(cq).__name__ == engine
        reports += cq.reports
    return reports


E2E = [  # one in CI (about 6 micro-batches, two query starts); the kernel tests above cover
    # every direction and keying batch by batch, with either stream ahead
    pytest.param("backward", True, "r", id="backward-inclusive-quotes-ahead"),
    pytest.param("forward", False, "l", id="forward-strict-trades-ahead",
                 marks=pytest.mark.slow)]


@pytest.mark.parametrize("direction, inclusive, ahead", E2E)
def test_continuous_asof_join_on_the_state_store(ws, spark, tmp_path, direction, inclusive,
                                                 ahead):
    """Files arrive into both streams in two rounds on one checkpoint (state and the left
    stream's progress restored at the restart), out of order, one stream 10 s ahead of the
    other, with late rows on each side and a row without event time: every left row final
    by the last right progress is emitted once, with merge_asof's match over the rows not
    late; the rows below their own stream's progress -- each stream's computed here per
    micro-batch from the files -- are in the late sink, those of the stream ahead too when
    above the other's, and nothing else is; each micro-batch reports each stream's
    progress and the smaller as ``_progress``, and accounts for its rows five ways; the
    state stays bounded."""
    rng = np.random.default_rng(21 if direction == "backward" else 22)
    left, right = _draw(rng, 240, 300, True, span_s=60, ahead=(ahead, 10 * SECOND))
    parts = {"l": _in_files(rng, left, 4), "r": _in_files(rng, right, 4)}
    # and in the last file of the stream ahead, rows below its own progress but above the
    # other stream's (late all the same)
    last = oracle_progress(parts)[3]
    extra = parts[ahead][1].head(4)
    parts[ahead][3] = pd.concat([parts[ahead][3], extra.assign(
        id=extra.id + 60_000, ts=last[ahead] - 3 * SECOND - np.arange(4) * 1000)])
    _files(tmp_path / "staging" / "trades", parts["l"])
    _files(tmp_path / "staging" / "quotes", parts["r"], timeless=True)
    _streams(ws, tmp_path)
    op = (">=" if inclusive else ">") if direction == "backward" else ("<=" if inclusive
                                                                        else "<")
    sql = (f"SELECT t.k, t.v AS id, t.ts, q.v AS qid FROM trades t ASOF LEFT JOIN quotes q "
           f"ON t.k = q.k AND t.ts {op} q.ts")
    assert "stateful ASOF JOIN on Spark's state store" in ws.explain(sql, "STREAM")
    reports = _rounds(ws, tmp_path, sql, [2, 2])
    # the oracle: file i of each stream is read in the i-th micro-batch with rows
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    names = {"l": "trades", "r": "quotes"}
    assert reports[-1].inputs == {names[k]: v for k, v in progress[-1].items()}
    assert reports[-1].progress_us == min(progress[-1].values())
    with_rows = [r for r in reports if r.rows_in]
    assert [r.inputs for r in with_rows] == [{names[k]: v for k, v in p.items()}
                                             for p in progress[:4]]
    ok_l, ok_r = left[~left.id.isin(late)], right[~right.id.isin(late)]
    matches = oracle_match(ok_l, ok_r, direction, inclusive, True)
    want = {i: matches[i] for i in final_ids(ok_l, ok_r, matches, progress[-1]["r"],
                                             direction, True)}
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    ids = Counter(int(r["id"]) for r in rows)
    assert set(ids.values()) == {1}  # no row twice
    got = {int(r["id"]): (None if r["qid"] is None else int(r["qid"])) for r in rows}
    assert got == want and len(want) > 150
    shown = {_micros(r["_progress"]) for r in rows}
    assert shown <= {min(p.values()) for p in progress if None not in p.values()}
    assert "_final" not in rows[0]
    # late rows of each stream and the row without event time: in the late sink, counted,
    # each with its own stream's progress; of the stream ahead, some that the other
    # stream's progress alone would have let in
    only_own = late_by_own_progress_only(parts, progress, ahead)
    assert len(only_own) >= 3 and only_own <= late
    sink = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert len(late) >= 8 and sum(r.late for r in reports) == len(late)
    named = Counter((r["_stream"], json.loads(r["_row"]).get("ts") is None) for r in sink)
    assert named[("quotes", True)] == 1
    timed = [r for r in sink if json.loads(r["_row"]).get("ts") is not None]
    assert {int(json.loads(r["_row"])["v"]) for r in timed} == late
    for r in timed:
        side = "l" if r["_stream"] == "trades" else "r"
        said = r["_reason"].rsplit("(", 1)[1].rstrip(")")
        assert _micros(dt.datetime.fromisoformat(said)) in {p[side] for p in progress}
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").glob(
        "*.json")]
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"])
    assert sum(r["rows_in"] for r in records) == sum(map(len, parts["l"] + parts["r"])) + 1
    # bounded: the waiting left rows and the recent right rows, not the history (and the
    # lead of the stream ahead: 10 s of its 60)
    buffered = [r.buffered for r in reports if r.rows_in]
    lead = len(left if ahead == "l" else right) // 6
    assert 0 < max(buffered) < (len(left) + len(right)) // 3 + lead
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


# -- the left stream's progress across restarts and kills -------------------------------
def test_the_left_progress_record_a_rerun_reads_is_its_first_runs(tmp_path):
    """The driver's per-batch record of the left stream's progress: each source's largest
    promise, the stream's the smallest once every source promised (as Spark's watermark
    over one source per Kafka partition), never going back; a micro-batch reads the record
    of the batch before it -- a batch re-run after a kill reads what its first run read,
    although that run wrote its own record since; versioned JSON, older records removed."""
    from streaming.stateful import asof_query as aq
    from wavesql.errors import WaveSQLError

    folder = str(tmp_path / "asof")
    assert aq.record_before(folder, 0) == {}
    first = aq.next_record({}, [5 * SECOND, None])  # partition 1 promised nothing yet
    assert first == {"sources": [5 * SECOND, None], "progress": None}
    aq.write_record(folder, 0, first)
    second = aq.next_record(aq.record_before(folder, 1), [3 * SECOND, 8 * SECOND])
    assert second == {"sources": [5 * SECOND, 8 * SECOND], "progress": 5 * SECOND}
    aq.write_record(folder, 1, second)
    # batch 2 writes its record and is killed before Spark commits it: its re-run reads
    # batch 1's, as the first run did
    seen = aq.record_before(folder, 2)
    aq.write_record(folder, 2, aq.next_record(seen, [20 * SECOND, 30 * SECOND]))
    assert aq.record_before(folder, 2) == seen and seen["progress"] == 5 * SECOND
    # a later batch with older promises: nothing goes back
    aq.write_record(folder, 3, aq.next_record(aq.record_before(folder, 3), [SECOND, None]))
    assert aq.record_before(folder, 4)["progress"] == 20 * SECOND
    assert sorted(os.listdir(folder)) == ["000000002.json", "000000003.json"]
    stored = json.loads((tmp_path / "asof" / "000000003.json").read_text())
    assert stored == {"version": 1, "sources": [20 * SECOND, 30 * SECOND],
                      "progress": 20 * SECOND}
    (tmp_path / "asof" / "000000003.json").write_text(json.dumps({**stored, "version": 2}))
    with pytest.raises(WaveSQLError) as err:
        aq.record_before(folder, 4)
    assert err.value.code == "CHECKPOINT_MISMATCH"


KILL_JOB = """\
CREATE STREAM IF NOT EXISTS trades (k STRING, v DOUBLE, ts TIMESTAMP) FROM 'in/trades/'
  FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS;
CREATE STREAM IF NOT EXISTS quotes (k STRING, v DOUBLE, ts TIMESTAMP) FROM 'in/quotes/'
  FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS;
CREATE SINK IF NOT EXISTS joined TO 'out/joined/' FORMAT parquet;
INSERT INTO joined
  SELECT t.k, t.v AS id, t.ts, q.v AS qid FROM trades t ASOF LEFT JOIN quotes q
  ON t.k = q.k AND t.ts >= q.ts;
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_job_killed_after_its_batch_wrote_the_left_progress_is_exactly_once(ws, tmp_path):
    """``wavesql run`` of a continuous ASOF JOIN (the right stream 10 s ahead, three files
    a stream, one per micro-batch) is SIGKILLed the second time a batch is done -- its
    results, late rows and left-progress record written, Spark's commit not -- and run
    again to its end: the re-run of that batch sees the left progress its first run saw,
    so every left row final by the last right progress is in the sink once, with
    merge_asof's match over the rows not late, and the late rows are those below their own
    stream's progress."""
    from tests.test_run_files import run_in_process, run_killed_at

    rng = np.random.default_rng(31)
    left, right = _draw(rng, 120, 140, True, span_s=45, ahead=("r", 10 * SECOND))
    parts = {"l": _in_files(rng, left, 3), "r": _in_files(rng, right, 3)}
    left, right = pd.concat(parts["l"]), pd.concat(parts["r"])  # (with the late copies)
    _files(tmp_path / "in" / "trades", parts["l"])
    _files(tmp_path / "in" / "quotes", parts["r"])
    (tmp_path / "job.wsql").write_text(KILL_JOB)
    run_killed_at(tmp_path, "batch-done")
    assert (tmp_path / "out" / "joined").exists()
    run_in_process(ws, tmp_path)
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    # the rows a re-run reading its own batch's record would have called late: some
    second = parts["l"][1]
    wrong = set(second.id[second.ts < progress[2]["l"]].astype(int))
    assert len(wrong - late) >= 3
    ok_l, ok_r = left[~left.id.isin(late)], right[~right.id.isin(late)]
    matches = oracle_match(ok_l, ok_r, "backward", True, True)
    want = {i: matches[i] for i in final_ids(ok_l, ok_r, matches, progress[-1]["r"],
                                             "backward", True)}
    rows = pd.concat([pd.read_parquet(f) for f in
                      (tmp_path / "out" / "joined").glob("job=*/batch=*/*.parquet")])
    assert Counter(rows.id.astype(int)).most_common(1)[0][1] == 1  # no row twice
    got = {int(i): (None if pd.isna(q) else int(q)) for i, q in zip(rows.id, rows.qid)}
    assert got == want and len(want) > 60 and len(late) >= 4
    sink = pd.concat([pd.read_parquet(f) for f in
                      (tmp_path / "out" / "joined").glob("_wavesql/*/late/**/*.parquet")])
    assert {int(json.loads(r)["v"]) for r in sink._row} == late
