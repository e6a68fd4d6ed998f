"""CQL windows and aggregates around a SYNC JOIN in its own SELECT, run continuously: ``SELECT
count(*) AS n, avg(seg_rms(m.ch1)) AS r FROM ctl c [RANGE 2 SECONDS SLIDE 2 SECONDS] SYNC
JOIN mic m ON RANGE (c.t0, c.t1)`` is cut into a SYNC part (the per-row expressions, the
control's EVENT TIME passed through) and the rest (the window, aggregates, GROUP BY and
HAVING over the part's columns): streaming/derived_over.py.

Oracles: numpy's RMS over each control row's range of the samples written, then pandas
(groupby per window instant) -- nothing from WaveSQL. The rewrite's texts are checked
without Spark: exact text, every offset kept, what is not cut.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.test_sync_feature_streams import (FIRST, SECOND_RUN, _arrive, _control,
                                             _first_files_and_rows, _got, _ms, _want)

ONE_SELECT = ("SELECT count(*) AS n, avg(seg_rms(m.ch1)) AS r FROM ctl c "
              "[RANGE 2 SECONDS SLIDE 2 SECONDS] SYNC JOIN mic m ON RANGE (c.t0, c.t1)")


class _Catalog(dict):
    def get(self, name):
        return super().get(name.lower())


def _split(text, **views):
    from wavesql.catalog import SignalDef, StreamDef, ViewDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    columns = [("id", "BIGINT"), ("t0", "TIMESTAMP"), ("t1", "TIMESTAMP")]
    catalog = _Catalog(mic=SignalDef("mic", [("ch1", "FLOAT")], 1000.0, "/nowhere"), **{
        name: StreamDef(name, columns, "/nowhere", "json", event_time="t0")
        for name in ("ctl", "annotations")}, **{n: ViewDef(n, q) for n, q in views.items()})
    (stmt,) = parse_statements(text)
    return find_split(stmt, text, catalog)


# -- the rewrite's texts (no Spark) ----------------------------------------------------------

def test_windowed_aggregates_around_a_sync_are_cut_into_a_sync_part():
    """The per-row expressions in the SYNC part with the control's EVENT TIME added
    (``c.t0 AS _wt``), the control's window blanked there; the rest reads the part by its
    name with the window after it at the window's own offset, every other offset kept."""
    split = _split(ONE_SELECT)
    (part,) = split.parts
    assert (part.name, part.time_column, part.sync) == ("c_synced", "_wt", True)
    assert part.inner == ("SELECT seg_rms(m.ch1) AS _w1, c.t0 AS _wt".ljust(
        ONE_SELECT.index("FROM")) + "FROM ctl c " + " " * 34 + "SYNC JOIN mic m ON RANGE "
        "(c.t0, c.t1)")  # (the list in the room the user's had: FROM at its place)
    assert split.outer == ("SELECT count(*) AS n, avg(_w1           ) AS r FROM c_synced "
                           "[RANGE 2 SECONDS SLIDE 2 SECONDS]").ljust(len(ONE_SELECT))
    assert len(split.outer) == len(ONE_SELECT)
    assert split.outer.index(") AS r") == ONE_SELECT.index(") AS r")


def test_group_by_where_and_having_read_the_parts_columns():
    """GROUP BY's expression is one column of the part (``c.id % 2``, named as the SELECT
    names it), an expression around it stays in the rest (``... + 1`` over the group's
    column: Spark would refuse ``_w2 + 1`` grouped by ``_w1`` otherwise); WHERE's condition
    and HAVING's signal function are the part's columns; ``c.t0`` selected is the event
    time as it is."""
    text = ("SELECT c.t0, c.id % 2 AS k, c.id % 2 + 1 AS k1, avg(seg_rms(m.ch1)) AS r "
            "FROM ctl c [RANGE 4 SECONDS SLIDE 2 SECONDS] SYNC JOIN mic m ON RANGE (c.t0, c.t1) "
            "WHERE c.id > 1 GROUP BY c.t0, c.id % 2 HAVING max(seg_rms(m.ch1)) > 0.5")
    split = _split(text)
    (part,) = split.parts
    assert part.time_column == "t0"
    # (blanks squeezed: the part, the rest)
    assert [" ".join(t.split()) for t in (part.inner, split.outer)] == [
        "SELECT c.t0 AS t0, c.id % 2 AS k, seg_rms(m.ch1) AS _w1, c.id > 1 AS _w2 "
        "FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)",
        "SELECT t0 , k AS k, k + 1 AS k1, avg(_w1 ) AS r FROM c_synced [RANGE 4 SECONDS "
        "SLIDE 2 SECONDS] WHERE _w2 GROUP BY t0 , k HAVING max(_w1 ) > 0.5"]
    for word in ("WHERE", "GROUP BY", "HAVING"):  # ([RANGE: after c_synced, below)
        assert split.outer.index(word) == text.index(word)


def test_an_aggregate_sqlglot_does_not_know_stays_in_the_rest():
    """``try_avg`` is an aggregate sqlglot leaves Anonymous: it stays in the rest over the
    part's column (in the part it would aggregate the SYNC's rows with no window)."""
    split = _split(ONE_SELECT.replace("avg(", "try_avg("))
    assert "try_avg" not in split.parts[0].inner and "try_avg(_w1" in split.outer


def test_a_name_that_does_not_fit_before_the_window_moves_it():
    """``ctl`` without an alias: ``ctl_synced`` is longer than ``ctl ``, so the window
    follows the name in the rest (offsets after the FROM item kept); a longer stream's
    name leaves room for the part's name before the window, which keeps its offset."""
    text = ("SELECT avg(seg_rms(m.ch1)) AS r FROM ctl [RANGE 2 SECONDS] SYNC JOIN mic m "
            "ON RANGE (ctl.t0, ctl.t1) WHERE ctl.id > 0")
    split = _split(text)
    assert split.parts[0].name == "ctl_synced"
    assert "FROM ctl_synced [RANGE 2 SECONDS] " in split.outer
    assert split.outer.index("WHERE") == text.index("WHERE")
    text = ONE_SELECT.replace("FROM ctl c", "FROM annotations c")
    split = _split(text)
    assert split.outer.index("[RANGE") == text.index("[RANGE")
    assert "FROM c_synced      [RANGE 2 SECONDS SLIDE 2 SECONDS] " in split.outer


@pytest.mark.parametrize("control", ["(SELECT t0, t1, id FROM ctl WHERE id <> 3) c",
                                     "(SELECT * FROM ctl) c", "cv c", "cte c"])
def test_a_view_cte_or_subquery_control_row_by_row_over_a_stream_is_cut(control):
    """A control that filters or projects a catalog stream, passing its EVENT TIME through
    (a subquery, a catalog view, a CTE -- kept in the part's text, blanked in the rest's):
    the SYNC part reads it as a continuous SYNC reads such a control, whole, the rest as
    over a catalog stream. Before: not cut (NOT_IMPLEMENTED)."""
    head = "WITH cte AS (SELECT t0, t1, id FROM ctl WHERE id <> 3)\n" \
        if control.startswith("cte") else ""
    text = head + ONE_SELECT.replace("ctl c", control)
    split = _split(text, cv="SELECT t0, t1, id FROM ctl WHERE id <> 3")
    (part,) = split.parts
    assert (part.name, part.time_column, part.sync) == ("c_synced", "_wt", True)
    assert " ".join(part.inner.split()) == head.strip() * bool(head) + " " * bool(head) + (
        f"SELECT seg_rms(m.ch1) AS _w1, c.t0 AS _wt FROM {control} SYNC JOIN mic m ON RANGE "
        "(c.t0, c.t1)")
    assert " ".join(split.outer.split()) == (
        "SELECT count(*) AS n, avg(_w1 ) AS r FROM c_synced [RANGE 2 SECONDS SLIDE 2 SECONDS]")
    assert len(split.outer) == len(text) and split.outer.count("\n") == text.count("\n")
    assert split.outer.index(") AS r") == text.index(") AS r")
    assert part.inner.index("FROM " + control) == text.index("FROM " + control)


@pytest.mark.parametrize("text", [
    # unnamed: Spark names the column after its text, which the rewrite would change
    ONE_SELECT.replace(" AS r", ""),
    # a * (the inputs' columns and segments)
    ONE_SELECT.replace("count(*) AS n", "*"),
    # no window on the control, no OVER: an aggregate over the unbounded SYNC (refused as
    # over any stream) is not cut
    ONE_SELECT.replace("[RANGE 2 SECONDS SLIDE 2 SECONDS] ", ""),
    # a window of rows in the control's order: the part's rows come in the recording's
    ONE_SELECT.replace("[RANGE 2 SECONDS SLIDE 2 SECONDS]", "[ROWS 3]"),
    ONE_SELECT.replace("[RANGE 2 SECONDS SLIDE 2 SECONDS]", "[PARTITION BY c.id ROWS 3]"),
    # a column no input has: planned whole, its error naming the inputs' columns
    ONE_SELECT.replace("count(*) AS n", "nosuch AS n"),
    # a control that is not row by row over a catalog stream, or renames its EVENT TIME
    ONE_SELECT.replace("FROM ctl c", "FROM (SELECT id, max(t0) AS t0, max(t1) AS t1 FROM ctl "
                                     "GROUP BY id) c"),
    ONE_SELECT.replace("FROM ctl c", "FROM (SELECT id, t0 AS a, t1 FROM ctl) c"),
    ONE_SELECT.replace("FROM ctl c", "FROM (SELECT * FROM ctl c JOIN annotations a "
                                     "ON c.id = a.id) c"),
    # a control subquery without an alias (the binder says it needs one)
    ONE_SELECT.replace("FROM ctl c", "FROM (SELECT t0, t1, id FROM ctl)").replace("c.", ""),
    # the window on a signal query's own windows: not a SYNC
    "SELECT max(seg_rms(ch1)) AS m FROM mic [SAMPLES 4096]",
])
def test_other_shapes_are_not_cut(text):
    assert _split(text) is None


# -- end to end (Spark) ----------------------------------------------------------------------

def _two_runs(ws, spark, tmp_path, sql, view=None):
    """``sql`` run over the first two recording files and the FIRST control rows, then
    again (a restart) with the third file and the SECOND_RUN rows: (the samples, the
    output after each run -- by window instant --, the first run's derived progress).
    ``view``: a CREATE VIEW run once the streams are there."""
    data = _first_files_and_rows(ws, tmp_path)
    if view is not None:
        ws.sql(view)
    runs = []
    for more in (False, True):
        if more:
            _arrive(tmp_path, "mic_002.wav")  # .. 6000 ms; row 99 waits: progress 6500 ms
            _control(tmp_path, "c2", SECOND_RUN)
        q = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        runs.append((_got(spark, tmp_path), q.status()["derived"]["progress_us"]))
    return data, runs[0][0], runs[1][0], runs[0][1]


@pytest.mark.spark
def test_windowed_aggregates_around_a_sync_across_runs(ws, spark, tmp_path):
    """One SELECT, two runs (the second adds control rows and a recording file): each
    2-second window once, final, equal to pandas over numpy's RMS per range; a window
    closes only once no waiting row can fall in it (row 6 at 3800 ms waits for the third
    file: the first run's progress is 3800 ms). The batch query over everything gives the
    same windows. Unnamed, the column is refused, with the hint to name it."""
    from wavesql.errors import WaveSQLError

    data, first, got, progress = _two_runs(ws, spark, tmp_path, ONE_SELECT)
    want = _want(data, FIRST, 3800)
    assert first["instant"].tolist() == want["instant"].tolist() == [2000]
    assert first["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(first["r"], want["r"], rtol=1e-6)
    assert progress == 3800 * 1000
    assert (tmp_path / "ckpt" / "derived" / "c_synced" / "rows").is_dir()

    want = _want(data, FIRST + SECOND_RUN[:1], 6500)
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000, 6000]
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    assert got["_final"].all()

    batch = ws.sql(ONE_SELECT).toPandas()  # row 99 is past the recording: NULL segment
    batch["instant"] = [_ms(v) for v in batch["_time"]]
    batch = batch[batch["instant"] < 6500].sort_values("instant")
    assert batch["instant"].tolist() == want["instant"].tolist()
    np.testing.assert_allclose(batch["r"], want["r"], rtol=1e-6)
    unnamed = ONE_SELECT.replace(" AS r", "")  # refused before anything runs
    with pytest.raises(WaveSQLError) as err:
        ws.stream(unnamed, tmp_path / "out2", tmp_path / "ckpt2")
    assert err.value.code == "NOT_IMPLEMENTED" and "AS r" in err.value.hint


@pytest.mark.spark
@pytest.mark.slow
def test_sliding_windows_per_key_with_where_and_having(ws, spark, tmp_path):
    """GROUP BY a computed key over sliding windows (4 s, every 2 s: a row in two
    windows), a WHERE on the control and a HAVING on the synced RMS, two runs: equal to
    pandas over numpy's RMS per range, and to the batch query."""
    sql = ("SELECT c.id % 2 AS k, count(*) AS n, max(seg_rms(m.ch1)) AS top FROM ctl c "
           "[RANGE 4 SECONDS SLIDE 2 SECONDS] SYNC JOIN mic m ON RANGE (c.t0, c.t1) "
           "WHERE c.id <> 3 GROUP BY c.id % 2 HAVING count(*) >= 1 AND max(seg_rms(m.ch1)) "
           "> 0.96")
    data, _, got, _ = _two_runs(ws, spark, tmp_path, sql)
    got = got.sort_values(["instant", "k"]).reset_index(drop=True)

    rows = pd.DataFrame([{"id": i, "t": a, "rms": float(np.sqrt(np.mean(
        data[a:b].astype(np.float64) ** 2)))} for i, a, b in FIRST + SECOND_RUN[:1]
        if i != 3])
    rows["k"] = rows["id"] % 2
    # [RANGE 4 s SLIDE 2 s] at instant i holds t in (i - 4 s, i]: two instants a row
    frames = [rows.assign(instant=(np.ceil(rows["t"] / 2000.0).astype(int) + j) * 2000)
              for j in (0, 1)]
    want = pd.concat(frames).groupby(["instant", "k"]).agg(
        n=("rms", "size"), top=("rms", "max")).reset_index()
    want = want[(want["top"] > 0.96) & (want["instant"] < 6500)]
    want = want.sort_values(["instant", "k"]).reset_index(drop=True)
    assert len(want) == 4  # (HAVING drops two of the six windows' groups)
    assert list(zip(got["instant"], got["k"])) == list(zip(want["instant"], want["k"]))
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["top"], want["top"], rtol=1e-6)

    batch = ws.sql(sql).toPandas()
    batch["instant"] = [_ms(v) for v in batch["_time"]]
    batch = batch[batch["instant"] < 6500].sort_values(["instant", "k"])
    assert list(zip(batch["instant"], batch["k"])) == list(zip(want["instant"], want["k"]))
    np.testing.assert_allclose(batch["top"], want["top"], rtol=1e-6)


def test_a_column_spelled_two_ways_is_one_column_of_the_part():
    """``id`` in the SELECT and ``c.id`` in GROUP BY are one control column: one column of
    the part, read by both in the rest (review finding: they were two, and the rest's
    GROUP BY named another column than its SELECT -- a Spark error where batch answers)."""
    text = ("SELECT id, avg(seg_rms(m.ch1)) AS r FROM ctl c [RANGE 4 SECONDS] "
            "SYNC JOIN mic m ON RANGE (c.t0, c.t1) GROUP BY c.id")
    split = _split(text)
    (part,) = split.parts
    inner, outer = (" ".join(t.split()) for t in (part.inner, split.outer))
    assert inner == ("SELECT id AS id, seg_rms(m.ch1) AS _w1, c.t0 AS _wt FROM ctl c "
                     "SYNC JOIN mic m ON RANGE (c.t0, c.t1)")
    assert outer == ("SELECT id, avg(_w1 ) AS r FROM c_synced [RANGE 4 SECONDS] "
                     "GROUP BY id")


@pytest.mark.spark
@pytest.mark.parametrize("control", ["(SELECT t0, t1, id FROM ctl WHERE id <> 3) c",
                                     pytest.param("cv c", marks=pytest.mark.slow),
                                     pytest.param("cte c", marks=pytest.mark.slow)])
def test_windows_around_a_sync_of_a_filtered_control(ws, spark, tmp_path, control):
    """The control a subquery (or a catalog view, a CTE) filtering the control stream: the same
    two runs as over the stream, each 2-second window once, equal to pandas over numpy's
    RMS per range of the rows the filter keeps -- and to the batch query. Before:
    NOT_IMPLEMENTED ("the control is a catalog stream")."""
    sql = ("WITH cte AS (SELECT t0, t1, id FROM ctl WHERE id <> 3) " if control == "cte c"
           else "") + ONE_SELECT.replace("ctl c", control)
    data, first, got, _ = _two_runs(ws, spark, tmp_path, sql,
                                    view="CREATE VIEW cv AS SELECT t0, t1, id FROM ctl "
                                         "WHERE id <> 3")
    kept = [r for r in FIRST + SECOND_RUN[:1] if r[0] != 3]
    want = _want(data, [r for r in kept if r in FIRST], 3800)
    assert first["instant"].tolist() == want["instant"].tolist() == [2000]
    assert first["n"].tolist() == want["n"].tolist() == [2]
    np.testing.assert_allclose(first["r"], want["r"], rtol=1e-6)
    want = _want(data, kept, 6500)
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000, 6000]
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    batch = ws.sql(sql).toPandas()
    batch["instant"] = [_ms(v) for v in batch["_time"]]
    batch = batch[batch["instant"] < 6500].sort_values("instant")
    assert batch["instant"].tolist() == want["instant"].tolist()
    np.testing.assert_allclose(batch["r"], want["r"], rtol=1e-6)
