"""CQL windows and ISTREAM/DSTREAM/RSTREAM, checked against the brute-force reference
evaluator (tests/cql_reference.py) on generated streams, plus hand-computed cases."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import cql_reference as ref
from wavesql.errors import WaveSQLError

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)
COLUMNS = ("sym", "px", "ts")


def _write_stream(ws, tmp_path, name, rows):
    folder = tmp_path / name
    folder.mkdir()
    frame = pd.DataFrame(rows, columns=list(COLUMNS)) if rows else pd.DataFrame(
        {"sym": pd.Series([], dtype="object"), "px": pd.Series([], dtype="float64"),
         "ts": pd.Series([], dtype="int64")})
    frame["ts"] = pd.to_datetime(frame["ts"], unit="us").astype("datetime64[us]")
    frame.to_parquet(folder / "part.parquet")
    ws.sql(f"CREATE STREAM {name} (sym STRING, px DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")


def _micros(value: dt.datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _spark_rows(ws, sql) -> Counter:
    out = Counter()
    for row in ws.sql(sql).collect():
        values = list(row)
        values[0] = _micros(values[0])
        out[tuple(values)] += 1
    return out


# -- the queries, in WaveSQL and as Python over one instant's rows ----------------------------
def _sum(values):
    values = [v for v in values if v is not None]
    return float(sum(values)) if values else None


def _extreme(fn, values):
    values = [v for v in values if v is not None]
    return fn(values) if values else None


QUERIES = {
    "filter": ("SELECT sym, px FROM {s} {w} WHERE px > 1",
               lambda rows: [(r["sym"], r["px"]) for r in rows
                             if r["px"] is not None and r["px"] > 1]),
    "group": ("SELECT sym, count(*) AS n, sum(px) AS total, max(px) AS top FROM {s} {w} "
              "GROUP BY sym",
              lambda rows: [(k, len(g), _sum([r["px"] for r in g]),
                             _extreme(max, [r["px"] for r in g]))
                            for k, g in _groups(rows, "sym").items()]),
    "global": ("SELECT count(*) AS n, min(px) AS low FROM {s} {w}",
               lambda rows: [(len(rows), _extreme(min, [r["px"] for r in rows]))]),
    "distinct": ("SELECT DISTINCT sym FROM {s} {w}",
                 lambda rows: sorted({(r["sym"],) for r in rows}, key=str)),
    "star": ("SELECT * FROM {s} {w}",
             lambda rows: [(r["sym"], r["px"], r["ts"]) for r in rows]),
}


def _groups(rows, key):
    out: dict = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


WINDOWS = st.one_of(
    st.builds(lambda r: (f"[RANGE {r} SECONDS]", ref.Window("RANGE", r * SECOND)),
              st.integers(1, 4)),
    st.builds(lambda r, s: (f"[RANGE {r} SECONDS SLIDE {s} SECONDS]",
                            ref.Window("SLIDE", r * SECOND, s * SECOND)),
              st.integers(1, 4), st.integers(1, 3)),
    st.just(("[NOW]", ref.Window("NOW"))),
    st.just(("[RANGE UNBOUNDED]", ref.Window("UNBOUNDED"))),
    st.builds(lambda n: (f"[ROWS {n}]", ref.Window("ROWS", n)), st.integers(1, 3)),
    st.builds(lambda n: (f"[PARTITION BY sym ROWS {n}]",
                         ref.Window("PARTITION_ROWS", n, partition_by=("sym",))),
              st.integers(1, 2)),
)

ROWS = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.one_of(st.none(), st.integers(0, 4).map(float)),
                          st.integers(0, 9).map(lambda s: s * SECOND)),
                max_size=10)


def _examples(n: int):
    """Hypothesis settings for ``n`` generated cases, the same ones on every run. Each case
    is a Spark query: CI runs a share of them, the ``slow`` twin of each test the whole
    count (every example CI runs is generated the same way, fewer of them)."""
    return settings(max_examples=n, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


_WINDOW_CASES = given(rows=ROWS, window=WINDOWS, query=st.sampled_from(sorted(QUERIES)),
                      operator=st.sampled_from(["", "RSTREAM", "ISTREAM", "DSTREAM"]))


@_examples(30)
@_WINDOW_CASES
def test_windows_match_the_reference_evaluator(ws, tmp_path_factory, rows, window, query,
                                               operator):
    _check_windows(ws, tmp_path_factory, rows, window, query, operator)


@pytest.mark.slow
@_examples(60)
@_WINDOW_CASES
def test_windows_match_the_reference_evaluator_at_full_count(ws, tmp_path_factory, rows,
                                                             window, query, operator):
    _check_windows(ws, tmp_path_factory, rows, window, query, operator)


def _check_windows(ws, tmp_path_factory, rows, window, query, operator):
    tmp = tmp_path_factory.mktemp("stream")
    _write_stream(ws, tmp, "s", rows)
    text, win = window
    template, fn = QUERIES[query]
    sql = template.format(s="s", w=text)
    if operator:
        sql = f"{operator} ({sql})"
    dicts = [dict(zip(COLUMNS, r)) for r in rows]
    expected = ref.evaluate(dicts, "ts", win, ("sym", "px", "ts"), fn,
                            operator or "RSTREAM")
    got = _spark_rows(ws, sql)
    if query == "star":  # Spark returns the event time as a datetime
        got = Counter({k[:3] + (_micros(k[3]),): n for k, n in got.items()})
    assert got == expected, sql
    ws.sql("DROP STREAM s")




# -- hand-computed cases ------------------------------------------------------------------
TRADES = [("a", 1.0, 0), ("b", 2.0, 1), ("a", 3.0, 1), ("b", 4.0, 3), ("a", 5.0, 7)]


@pytest.fixture
def trades(ws, tmp_path):
    _write_stream(ws, tmp_path, "trades", [(s, p, t * SECOND) for s, p, t in TRADES])
    return ws


def _at(ws, sql):
    return sorted((r[0].second, *r[1:]) for r in ws.sql(sql).collect())


def test_range_window_is_the_last_r_seconds_including_now(trades):
    rows = _at(trades, "SELECT sym, sum(px) FROM trades [RANGE 2 SECONDS] GROUP BY sym")
    # instants: arrivals 0,1,3,7 and expiries 2,3,5,9; a@0 lives [0,2), a@1 [1,3) ...
    assert rows == [(0, "a", 1.0), (1, "a", 4.0), (1, "b", 2.0), (2, "a", 3.0), (2, "b", 2.0),
                    (3, "b", 4.0), (7, "a", 5.0)]


def test_tumbling_window_reports_each_window_at_its_end(trades):
    rows = _at(trades, "SELECT count(*) n FROM trades [RANGE 2 SECONDS SLIDE 2 SECONDS]")
    # windows (-2,0] (0,2] (2,4] (6,8]: ends 0, 2, 4, 8
    assert rows == [(0, 1), (2, 2), (4, 1), (8, 1)]


def test_istream_and_dstream_are_the_changes(trades):
    ins = _at(trades, "ISTREAM (SELECT sym, count(*) n FROM trades [RANGE 2 SECONDS] GROUP BY sym)")
    dels = _at(trades, "DSTREAM (SELECT sym, count(*) n FROM trades [RANGE 2 SECONDS] GROUP BY sym)")
    assert ins == [(0, "a", 1), (1, "a", 2), (1, "b", 1), (2, "a", 1), (7, "a", 1)]
    assert dels == [(1, "a", 1), (2, "a", 2), (3, "a", 1), (5, "b", 1), (9, "a", 1)]


def test_istream_of_a_now_window_is_the_stream_itself(trades):
    rows = _at(trades, "ISTREAM (SELECT sym, px FROM trades [NOW])")
    assert rows == sorted((t, s, p) for s, p, t in TRADES)


def test_relation_to_stream_as_a_table(trades):
    rows = _at(trades, "SELECT _time, sym FROM (ISTREAM (SELECT * FROM trades "
                       "[PARTITION BY sym ROWS 1])) x WHERE px > 2")
    assert rows == [(1, "a"), (3, "b"), (7, "a")]


def test_window_errors_are_positioned(trades, tmp_path):
    with pytest.raises(WaveSQLError) as err:
        trades.sql("SELECT * FROM trades [SAMPLES 10]")
    assert err.value.code == "INVALID_OPTION" and err.value.span is not None
    with pytest.raises(WaveSQLError) as err:
        trades.sql("SELECT * FROM trades [RANGE 0 SECONDS]")
    assert err.value.code == "INVALID_OPTION"
    with pytest.raises(WaveSQLError) as err:
        trades.sql("SELECT * FROM trades [ROWS 2] LIMIT 3")
    assert err.value.code == "NOT_IMPLEMENTED"
    with pytest.raises(WaveSQLError) as err:
        trades.sql("ISTREAM (SELECT * FROM trades)")
    assert err.value.code == "STREAMING_RULE"
    folder = tmp_path / "plain"
    folder.mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(folder / "p.parquet")
    trades.sql(f"CREATE STREAM plain (x BIGINT) FROM '{folder}' FORMAT parquet")
    with pytest.raises(WaveSQLError) as err:
        trades.sql("SELECT * FROM plain [RANGE 1 SECONDS]")
    assert err.value.code == "STREAMING_RULE" and "EVENT TIME" in err.value.message


# -- windowed streams joined per instant -------------------------------------------------------
def _left(a_rows, b_rows, match):
    """A LEFT JOIN's pairs (``None`` for the missing right row)."""
    out = []
    for ra in a_rows:
        found = [rb for rb in b_rows if match(ra, rb)]
        out += [(ra, rb) for rb in found] or [(ra, None)]
    return out


def _full(a_rows, b_rows, match):
    pairs = _left(a_rows, b_rows, match)
    return pairs + [(None, rb) for rb in b_rows if not any(match(ra, rb) for ra in a_rows)]


def _px(row):
    return None if row is None else row["px"]


def _left_counts(a_rows, b_rows):
    groups: dict = {}
    for ra, rb in _left(a_rows, b_rows, lambda x, y: x["sym"] == y["sym"]):
        groups.setdefault(ra["sym"], []).append(_px(rb))
    return [(k, sum(v is not None for v in g), _sum(g)) for k, g in groups.items()]


def _comma_count(a_rows, b_rows):
    n = sum(1 for ra in a_rows for rb in b_rows
            if ra["px"] is not None and rb["px"] is not None and ra["px"] < rb["px"])
    return [(n,)] if n else []  # an empty join has no instant to group


JOIN_QUERIES = {
    "inner": ("SELECT a.sym, a.px, b.px AS bpx FROM a {wa} a JOIN b {wb} b ON a.sym = b.sym",
              lambda A, B: [(ra["sym"], ra["px"], rb["px"]) for ra in A for rb in B
                            if ra["sym"] == rb["sym"]]),
    "left_group": ("SELECT a.sym, count(b.px) AS n, sum(b.px) AS total FROM a {wa} a "
                   "LEFT JOIN b {wb} b ON a.sym = b.sym GROUP BY a.sym", _left_counts),
    "comma_global": ("SELECT count(*) AS n FROM a {wa} a, b {wb} b WHERE a.px < b.px",
                     _comma_count),
    "full": ("SELECT a.px AS apx, b.px AS bpx FROM a {wa} a FULL JOIN b {wb} b "
             "ON a.sym = b.sym AND a.px = b.px",
             lambda A, B: [(_px(ra), _px(rb)) for ra, rb in _full(
                 A, B, lambda x, y: x["sym"] == y["sym"] and x["px"] is not None
                 and x["px"] == y["px"])]),
    "anti": ("SELECT a.sym, a.px FROM a {wa} a LEFT ANTI JOIN b {wb} b ON a.sym = b.sym",
             lambda A, B: [(ra["sym"], ra["px"]) for ra in A
                           if not any(rb["sym"] == ra["sym"] for rb in B)]),
    "star": ("SELECT * FROM a {wa} a FULL JOIN b {wb} b USING (sym)",  # sym once, either's
             lambda A, B: [((ra or rb)["sym"], _px(ra), ra and ra["ts"], _px(rb), rb and rb["ts"])
                           for ra, rb in _full(A, B, lambda x, y: x["sym"] == y["sym"])]),
}


_JOIN_CASES = given(a_rows=ROWS, b_rows=ROWS, wa=WINDOWS, wb=WINDOWS,
                    query=st.sampled_from(sorted(JOIN_QUERIES)),
                    operator=st.sampled_from(["", "ISTREAM", "DSTREAM"]))


@_examples(15)
@_JOIN_CASES
def test_joined_windows_match_the_reference_evaluator(ws, tmp_path_factory, a_rows, b_rows,
                                                      wa, wb, query, operator):
    _check_joined_windows(ws, tmp_path_factory, a_rows, b_rows, wa, wb, query, operator)


@pytest.mark.slow
@_examples(30)
@_JOIN_CASES
def test_joined_windows_match_the_reference_evaluator_at_full_count(
        ws, tmp_path_factory, a_rows, b_rows, wa, wb, query, operator):
    _check_joined_windows(ws, tmp_path_factory, a_rows, b_rows, wa, wb, query, operator)


def _check_joined_windows(ws, tmp_path_factory, a_rows, b_rows, wa, wb, query, operator):
    tmp = tmp_path_factory.mktemp("streams")
    _write_stream(ws, tmp, "a", a_rows)
    _write_stream(ws, tmp, "b", b_rows)
    template, fn = JOIN_QUERIES[query]
    sql = template.format(wa=wa[0], wb=wb[0])
    if operator:
        sql = f"{operator} ({sql})"
    streams = [([dict(zip(COLUMNS, r)) for r in rows], "ts", w[1], COLUMNS)
               for rows, w in ((a_rows, wa), (b_rows, wb))]
    expected = ref.evaluate_join(streams, fn, operator or "RSTREAM")
    try:
        got = _spark_rows(ws, sql)
    finally:
        ws.sql("DROP STREAM a")
        ws.sql("DROP STREAM b")
    if query == "star":  # ts columns come back as datetimes
        got = Counter({(k[0], k[1], k[2], k[3] and _micros(k[3]), k[4],
                        k[5] and _micros(k[5])): n for k, n in got.items()})
    assert got == expected, sql


def test_joined_windows_by_hand(ws, tmp_path):
    _write_stream(ws, tmp_path, "a", [("x", 1.0, 0), ("y", 2.0, 1 * SECOND), ("x", 3.0, 4 * SECOND)])
    _write_stream(ws, tmp_path, "b", [("x", 10.0, 2 * SECOND), ("y", 20.0, 3 * SECOND),
                                      ("x", 30.0, 5 * SECOND)])
    # a [RANGE 3 s]: x1 in [0,3), y2 [1,4), x3 [4,7). b [ROWS 1]: x10 [2,3), y20 [3,5), x30
    # [5,...). Instants 0..7; matches at 2 (x1-x10), 3 (y2-y20), 5 (x3-x30) and nowhere else
    rows = _at(ws, "SELECT a.sym, a.px, b.px FROM a [RANGE 3 SECONDS] JOIN b [ROWS 1] "
                   "ON a.sym = b.sym")
    assert rows == [(2, "x", 1.0, 10.0), (3, "y", 2.0, 20.0), (5, "x", 3.0, 30.0)]
    # a [RANGE 4 s SLIDE 2 s] holds its windows' rows from one multiple of 2 s to the next:
    # x1 [0,4), y2 [2,6), x3 [4,8); b [NOW] at 2, 3, 5 sees x1, y2 (and x1 at 3), x3
    rows = _at(ws, "SELECT a.px, b.px FROM a [RANGE 4 SECONDS SLIDE 2 SECONDS] a, b [NOW] b "
                   "WHERE a.sym = b.sym")
    assert rows == [(2, 1.0, 10.0), (3, 2.0, 20.0), (5, 3.0, 30.0)]
    # three ways, by USING: c [ROWS 1] holds x1 [0,1), y2 [1,4), x3 [4,...); at 2 a's x1
    # meets b's x10 but c holds y2 only
    rows = _at(ws, "SELECT a.px, b.px, c.px FROM a [RANGE 3 SECONDS] a JOIN b [NOW] b "
                   "USING (sym) JOIN a [ROWS 1] c USING (sym)")
    assert rows == [(3, 2.0, 20.0, 2.0), (5, 3.0, 30.0, 3.0)]
    # a bare _time is the instant (either side's in an outer join); * lists a subquery's
    # columns and a later ON join's own sym (not USING's coalesce)
    rows = _at(ws, "SELECT _time, b.px FROM a [NOW] a RIGHT JOIN b [NOW] b ON a.sym = b.sym "
                   "WHERE _time >= TIMESTAMP '1970-01-01 00:00:03'")
    assert rows == [(3, 20.0), (5, 30.0)]
    star = ws.sql("SELECT * FROM a [RANGE 3 SECONDS] a JOIN b [NOW] b USING (sym) JOIN "
                  "(SELECT 'x' AS sym, 7 AS w) d ON d.sym = a.sym "
                  "LEFT JOIN a [RANGE 1 SECONDS] c ON c.px > 99")
    assert star.columns == ["_time", "sym", "px", "ts", "px", "ts", "sym", "w", "sym", "px", "ts"]
    assert sorted((r[0].second, r[1], r[2], r[4], r[7], r[8]) for r in star.collect()) == [
        (2, "x", 1.0, 10.0, 7, None), (5, "x", 3.0, 30.0, 7, None)]
    with pytest.raises(WaveSQLError) as err:  # after ON, two _time columns: which one?
        ws.sql("SELECT * FROM a [NOW] a JOIN b [NOW] b ON a.sym = b.sym "
               "JOIN a [ROWS 1] c USING (sym)")
    assert err.value.code == "NOT_IMPLEMENTED" and err.value.span is not None


def test_star_over_windowed_streams_and_a_table_joined_by_using(ws, tmp_path):
    """``*`` lists a USING key once also when a source that is not windowed (a catalog
    stream read whole, its columns declared) joins by it -- it was listed again from that
    source; a source whose columns only Spark knows (a subquery) is a clear error."""
    _write_stream(ws, tmp_path, "a", [("x", 1.0, 0), ("y", 2.0, 1 * SECOND)])
    _write_stream(ws, tmp_path, "b", [("x", 10.0, 0), ("y", 20.0, 1 * SECOND)])
    _write_stream(ws, tmp_path, "t", [("x", 100.0, 0), ("z", 300.0, 0)])
    star = ws.sql("SELECT * FROM a [RANGE 3 SECONDS] a JOIN b [NOW] b USING (sym) "
                  "JOIN t USING (sym)")
    assert star.columns == ["_time", "sym", "px", "ts", "px", "ts", "px", "ts"]
    rows = sorted((r[0].second, r[1], r[2], r[4], r[6]) for r in star.collect())
    assert rows == [(0, "x", 1.0, 10.0, 100.0)]
    # the table first: it shows the key (the coalesce of every source joined by it), then
    # its own columns, as SQL's * does; a FULL join's rows from one side keep their key
    star = ws.sql("SELECT * FROM t FULL JOIN a [NOW] a USING (sym) "
                  "FULL JOIN b [NOW] b USING (sym)")
    assert star.columns == ["_time", "sym", "px", "ts", "px", "ts", "px", "ts"]
    keys = sorted((r[1], r[2], r[4], r[6]) for r in star.collect())
    assert ("z", 300.0, None, None) in keys and ("y", None, 2.0, 20.0) in keys
    assert all(k[0] is not None for k in keys)
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM a [NOW] a JOIN b [NOW] b USING (sym) "
               "JOIN (SELECT 'x' AS sym, 7 AS w) d USING (sym)")
    assert err.value.code == "NOT_IMPLEMENTED" and err.value.span is not None
    assert "list the columns" in err.value.hint
    # a table renaming its columns: its own names (it fell to ``d.*`` before, and then
    # failed on the catalog's names)
    star = ws.sql("SELECT * FROM a [NOW] a JOIN b [NOW] b USING (sym) "
                  "FULL JOIN t AS d(sym, p2, t2) USING (sym)")
    assert star.columns == ["_time", "sym", "px", "ts", "px", "ts", "p2", "t2"]
    assert ("z", 300.0) in {(r[1], r[6]) for r in star.collect()}
    # a subquery first: it has the key (Spark finds it there); with INNER joins its own
    # ``*`` shows it, with a FULL join the rows only the streams have would show NULL
    star = ws.sql("SELECT * FROM (SELECT sym, px AS p FROM t) d JOIN a [NOW] a USING (sym) "
                  "JOIN b [NOW] b USING (sym)")
    assert star.columns == ["_time", "sym", "p", "px", "ts", "px", "ts"]
    assert sorted((r[1], r[2], r[3]) for r in star.collect()) == [("x", 100.0, 1.0)]
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM (SELECT sym, px FROM t) d FULL JOIN a [NOW] a USING (sym) "
               "FULL JOIN b [NOW] b USING (sym)")
    assert err.value.code == "NOT_IMPLEMENTED" and "FULL or RIGHT" in err.value.message


def test_joined_window_errors(ws, tmp_path):
    _write_stream(ws, tmp_path, "a", [("x", 1.0, 0)])
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM a [NOW] JOIN a [ROWS 1] ON a.sym = a.sym")
    assert err.value.code == "DUPLICATE_COLUMN" and err.value.span is not None
    # the same stream twice under two names is a self-join per instant
    rows = _at(ws, "SELECT x.px, y.px FROM a [NOW] x JOIN a [ROWS 1] y ON x.sym = y.sym")
    assert rows == [(0, 1.0, 1.0)]
