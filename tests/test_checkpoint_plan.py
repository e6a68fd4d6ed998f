"""The plan marker of every continuous query's checkpoint (streaming/checkpoint_plan.py):
restarting a changed query on an old checkpoint is CHECKPOINT_MISMATCH naming what
changed; a compatible change (whitespace, comments, keyword case, trigger, heartbeat,
watermark) runs on, and its results equal an independent oracle (pandas / numpy over the
files written); a checkpoint from before markers is adopted.

The first tests need no Spark (the binder's dictionary environment); the end-to-end ones
run each runner kind twice on one checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from wavesql import planner
from wavesql.catalog import Catalog
from wavesql.dialect import parse_statements
from wavesql.errors import WaveSQLError
from wavesql.planner import ir
from wavesql.planner.dict_environment import DictEnvironment
from wavesql.streaming import checkpoint_plan as cp

STREAM = ("CREATE OR REPLACE STREAM ev (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{path}' "
          "FORMAT parquet EVENT TIME ts WATERMARK {wm} {hb}")
WINDOWED = "SELECT k, count(*) AS n FROM ev [RANGE 10 SECONDS] GROUP BY k"


class _Binder:
    """Bind queries against a catalog without Spark (planner/dict_environment.py)."""

    def __init__(self, root):
        self.root = root
        self.catalog = Catalog(":memory:")
        self.env = DictEnvironment()
        (root / "ev").mkdir(exist_ok=True)
        (root / "other").mkdir(exist_ok=True)

    def ddl(self, text):
        (stmt,) = parse_statements(text)
        bound = planner.optimize(planner.bind(stmt, self.catalog, self.env, str(self.root)))
        self.catalog.create(bound.definition, replace=bound.replace)

    def mark(self, text, engine="re-evaluating", emit_changes=False):
        from wavesql.streaming.planning import plan_continuous

        (stmt,) = parse_statements(text)
        bound = planner.optimize(planner.bind(stmt, self.catalog, self.env, str(self.root)))
        assert isinstance(bound, ir.QueryStatement)
        return cp.mark_of(engine, bound, plan_continuous(bound.relation, stmt),
                          emit_changes=emit_changes, catalog=self.catalog)


@pytest.fixture
def binder(tmp_path):
    b = _Binder(tmp_path)
    b.ddl(STREAM.format(path="ev", wm="1 SECOND", hb=""))
    return b


def test_whitespace_comments_and_keyword_case_do_not_count(binder):
    base = binder.mark(WINDOWED)
    same = binder.mark("select k,\n  COUNT(*)   as n -- per key\n from ev [range 10 seconds] "
                       "/* tumbling? no */ group  by k")
    assert same.plan == base.plan and same.facts == base.facts
    # a filter, a window, an output column, EMIT: each changes the fingerprint
    for other in (binder.mark(WINDOWED.replace("GROUP", "WHERE v > 0 GROUP")),
                  binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS")),
                  binder.mark(WINDOWED.replace("AS n", "AS m")),
                  binder.mark(WINDOWED, emit_changes=True)):
        assert other.plan != base.plan


def test_the_refusal_names_the_window_that_changed(binder):
    old = binder.mark(WINDOWED)
    new = binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS"))
    why = cp.mismatch(json.loads(old.to_json()), new)
    assert "changed from [RANGE 10 SECONDS] to [RANGE 20 SECONDS]" in why
    assert "re-evaluating runner" in why
    # the look-back follows the window: named too, in microseconds
    assert "10000000 us" in why and "20000000 us" in why


def test_heartbeat_and_watermark_are_compatible_the_input_is_not(binder):
    base = binder.mark(WINDOWED)
    binder.ddl(STREAM.format(path="ev", wm="5 SECONDS", hb="HEARTBEAT 2 SECONDS"))
    assert binder.mark(WINDOWED).plan == base.plan  # (the stream's catalog version moved)
    # credentials rotate: not in the fingerprint, never in the (plain-text) marker
    binder.ddl(STREAM.format(path="ev", wm="1 SECOND", hb="").replace(
        "FORMAT", "OPTIONS (mergeSchema = 'false', `fs.s3a.secret.key` = 'hunter2') FORMAT"))
    keyed = binder.mark(WINDOWED)
    binder.ddl(STREAM.format(path="ev", wm="1 SECOND", hb="").replace(
        "FORMAT", "OPTIONS (mergeSchema = 'false', `fs.s3a.secret.key` = 'rotated') FORMAT"))
    assert binder.mark(WINDOWED).plan == keyed.plan != base.plan  # (mergeSchema counts)
    assert "hunter2" not in keyed.to_json() and "mergeSchema" in keyed.to_json()
    binder.ddl(STREAM.format(path="other", wm="1 SECOND", hb=""))
    moved = binder.mark(WINDOWED)
    why = cp.mismatch(json.loads(base.to_json()), moved)
    assert moved.plan != base.plan and "StreamScan ev path changed from" in why
    assert why.rstrip().endswith("other") or "other" in why


def test_check_writes_compares_and_refuses(binder, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    mine = binder.mark(WINDOWED)
    assert cp.check(ckpt, mine) is None  # a new checkpoint: marked
    marker = json.loads((tmp_path / "ckpt" / "wavesql.json").read_text())
    assert marker["engine"] == "re-evaluating" and marker["plan"] == mine.plan
    assert marker["format"] == cp.FORMAT and marker["facts"]
    _commit(tmp_path / "ckpt", 0)  # a batch ran: the checkpoint holds its state
    assert cp.check(ckpt, binder.mark(WINDOWED.lower()))["plan"] == mine.plan  # compatible
    with pytest.raises(WaveSQLError) as err:
        cp.check(ckpt, binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS")))
    assert err.value.code == "CHECKPOINT_MISMATCH"
    assert "[RANGE 20 SECONDS]" in err.value.message and "new checkpoint" in err.value.hint
    with pytest.raises(WaveSQLError) as err:  # another runner's checkpoint: both named
        cp.check(ckpt, binder.mark(WINDOWED, engine="signal"))
    assert err.value.code == "CHECKPOINT_MISMATCH"
    assert "re-evaluating runner" in err.value.message and "signal runner" in err.value.message
    # a marker from a newer WaveSQL, a damaged one
    (tmp_path / "ckpt" / "wavesql.json").write_text(json.dumps({**marker, "format": 99}))
    with pytest.raises(WaveSQLError) as err:
        cp.check(ckpt, mine)
    assert err.value.code == "CHECKPOINT_MISMATCH" and "format 99" in err.value.message
    (tmp_path / "ckpt" / "wavesql.json").write_text('{"engine": "re-eva')
    with pytest.raises(WaveSQLError) as err:
        cp.check(ckpt, mine)
    assert err.value.code == "CHECKPOINT_CORRUPT"


def test_a_checkpoint_without_a_marker_is_adopted_or_refused(binder, tmp_path):
    mine = binder.mark(WINDOWED)
    old = tmp_path / "old"
    _commit(old, 3)  # written before markers
    assert cp.check(str(old), mine) is None  # adopted: marked from now on
    assert json.loads((old / "wavesql.json").read_text())["plan"] == mine.plan
    with pytest.raises(WaveSQLError) as err:  # ... and checked
        cp.check(str(old), binder.mark(WINDOWED.replace("count", "sum(v) AS s, count")))
    assert err.value.code == "CHECKPOINT_MISMATCH"
    assert ("output columns changed from _time timestamp, k string, n bigint to _time "
            "timestamp, k string, s double, n bigint") in err.value.message
    other = tmp_path / "stateful"
    (other / "state").mkdir(parents=True)
    with pytest.raises(WaveSQLError) as err:  # the state store's rule: it always marked
        cp.check(str(other), cp.Mark("stateful-window", "x", "y"), legacy="refuse")
    assert err.value.code == "CHECKPOINT_MISMATCH" and "earlier" in err.value.message
    assert not (other / "wavesql.json").exists()


def _commit(ckpt, batch):
    """Spark's commit log entry of ``batch`` in checkpoint folder ``ckpt`` (as Spark
    writes it: ``<checkpoint>/offsets/commits/<batch>``, streaming/query.py's location)."""
    (ckpt / "offsets" / "commits").mkdir(parents=True, exist_ok=True)
    (ckpt / "offsets" / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_changes_are_named_gone_new_changed_and_counted():
    old = [["a", "1"], ["b", "2"], ["c", "3"]]
    assert cp.describe_changes(old, (("a", "1"), ("b", "5"), ("d", "4"))) == [
        "b changed from 2 to 5", "c (3) is gone", "d (4) is new"]
    many = tuple((n, "x") for n, _ in old) + (("e", "x"),)
    assert cp.describe_changes(old, many, most=2)[-1] == "and 2 more"
    assert cp.describe_changes(None, many) == []  # a marker without facts


def test_the_state_store_marker_keeps_its_keys():
    """The state-store runner's marker: the keys it always wrote, in order, and an old
    marker without ``format`` reads as format 1."""
    mark = cp.Mark("stateful-window", "abc", "stateful window", extra=(("buckets", 4),
                                                                      ("resume", 1)))
    data = json.loads(mark.to_json())
    assert list(data)[:5] == ["engine", "plan", "explain", "buckets", "resume"]
    assert "facts" not in data
    old = {"engine": "stateful-window", "plan": "abc", "explain": "e", "buckets": 4}
    assert cp.mismatch(old, mark) is None
    why = cp.mismatch({**old, "plan": "def", "explain": "stateful window of 10 s"}, mark)
    assert "stateful window of 10 s" in why and "this one is: stateful window" in why
    # a key added later: compared where the marker has it, not where it does not
    ticking = cp.Mark("stateful-window", "abc", "e", extra=(("tickers", 1),),
                      checked=("tickers",))
    assert cp.mismatch(old, ticking) is None
    assert "tickers changed from 0 to 1" in cp.mismatch({**old, "tickers": 0}, ticking)


# -- each runner, end to end ----------------------------------------------------------------
def _parquet(folder, name, frame):
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / f"{name}.parquet")


def _rows(seed, start_s, n=12):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.choice(["a", "b"], n), "v": rng.normal(0, 1, n).round(3),
                         "ts": pd.to_datetime(start_s + np.arange(n), unit="s")
                         .astype("datetime64[us]")})


def _rows_stream(ws, root, seed, name="ev"):
    """Stream ``name`` over ``root/in``, holding ``_rows(seed, 0)`` in one Parquet file."""
    _parquet(root / "in", "p0", _rows(seed, 0))
    ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{root / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    return root


def _mismatch(ws, sql, out, ckpt, *needles):
    with pytest.raises(WaveSQLError) as err:
        ws.stream(sql, out, ckpt).await_termination()
    assert err.value.code == "CHECKPOINT_MISMATCH", err.value
    for needle in needles:
        assert needle in err.value.message, err.value.message
    return err.value


def _run(ws, sql, out, ckpt, **kw):
    cq = ws.stream(sql, out, ckpt, **kw)
    cq.await_termination()
    assert cq.error is None, cq.error
    return cq


def _reevaluating(ws, spark, tmp_path):
    """Row by row over a stream of Parquet files (the re-evaluating runner)."""
    root = _rows_stream(ws, tmp_path / "rows", 1)
    sql = "SELECT k, v * 2 AS w, ts FROM ev WHERE v > 0"
    out, ckpt = root / "out", root / "ckpt"
    cq = _run(ws, sql, out, ckpt)
    assert type(cq).__name__ == "ReEvaluatingQuery"
    _mismatch(ws, sql.replace("v > 0", "v > 1"), out, ckpt, "v > 0", "v > 1")
    _parquet(root / "in", "p1", _rows(2, 100))
    # compatible: case, whitespace, a comment, the trigger's files per batch
    _run(ws, "select k, v*2 as w, ts -- doubled\nFROM ev   where v > 0", out, ckpt,
         max_files_per_trigger=1)
    frame = pd.concat([_rows(1, 0), _rows(2, 100)])
    want = sorted((r.k, round(2 * r.v, 6), r.ts) for r in frame.itertuples() if r.v > 0)
    got = sorted((r.k, round(r.w, 6), pd.Timestamp(r.ts)) for r in
                 spark.read.parquet(str(out)).collect())
    assert got == want and len(got) > 4


RATE = 1000


def _wav(folder, name, x):
    from wavesql.udfs.wav import write_wav

    folder.mkdir(parents=True, exist_ok=True)
    write_wav(folder / f"{name}.wav", x, RATE, "float32")


def _signal_files(ws, spark, tmp_path):
    """A query over a signal's WAV files (the signal runner)."""
    root = tmp_path / "sig"
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    _wav(root / "rec", "r0", x[:2048])
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{root / 'rec'}' FORMAT wav")
    sql = "SELECT start_sample(ch1) AS s, seg_rms(ch1) AS rms FROM mic [SAMPLES 256]"
    out, ckpt = root / "out", root / "ckpt"
    cq = _run(ws, sql, out, ckpt)
    assert type(cq).__name__ == "SignalContinuousQuery"
    _mismatch(ws, sql.replace("256", "512"), out, ckpt, "(256, 256)", "(512, 512)")
    _wav(root / "rec", "r1", x[2048:])
    (root / "rec" / "done.eof").write_text("")
    _run(ws, sql.replace("SELECT", "select  /* windows */").replace("FROM", "from"), out, ckpt)
    got = spark.read.parquet(str(out)).toPandas().sort_values("s")
    starts = np.arange(0, 4096, 256)
    rms = [np.sqrt(np.mean(x[s:s + 256].astype(np.float64) ** 2)) for s in starts]
    assert got["s"].tolist() == starts.tolist()
    np.testing.assert_allclose(got["rms"], rms, rtol=1e-6)


def _derived(ws, spark, tmp_path):
    """A CTE over a signal, the rest over its rows: the signal part's checkpoint covers the
    CTE's body (a changed CTE is refused, though the rest's text is the same)."""
    root = tmp_path / "derived"
    x = np.random.default_rng(4).standard_normal(4096).astype(np.float32)
    _wav(root / "rec", "r0", x[:2048])
    ws.sql(f"CREATE OR REPLACE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{root / 'rec'}' "
           "FORMAT wav")
    cte = ("WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic "
           "[SAMPLES 256]) ")
    rest = "SELECT t, rms FROM f WHERE rms > 0.9"
    out, ckpt = root / "out", root / "ckpt"
    _run(ws, cte + rest, out, ckpt)
    _wav(root / "rec", "r1", x[2048:])
    (root / "rec" / "done.eof").write_text("")
    part = sorted(str(p) for p in (ckpt / "derived" / "f").rglob("*"))
    err = _mismatch(ws, cte.replace("seg_rms(ch1) AS", "seg_max(ch1) AS") + rest, out, ckpt,
                    "seg_rms", "seg_max", "derived")
    # the folder to delete is the query's whole checkpoint, not the part's alone
    assert f"delete the query's whole checkpoint {ckpt} " in err.hint, err.hint
    # the rest changed, the CTE not: the rest's own checkpoint refuses it -- before the
    # signal part runs a batch over the new file (it would advance under the refused query)
    _mismatch(ws, cte + rest.replace("0.9", "0.8"), out, ckpt, "rms > 0.9", "rms > 0.8")
    assert sorted(str(p) for p in (ckpt / "derived" / "f").rglob("*")) == part
    _run(ws, cte.replace("SELECT", "select") + "\n" + rest.replace("WHERE", "where"), out, ckpt)
    got = spark.read.parquet(str(out)).toPandas()
    starts = np.arange(0, 4096, 256)
    rms = np.array([np.sqrt(np.mean(x[s:s + 256].astype(np.float64) ** 2)) for s in starts])
    got = got.assign(s=[round((t - pd.Timestamp(0)).total_seconds() * RATE)
                        for t in got["t"]]).sort_values("s")
    assert got["s"].tolist() == starts[rms > 0.9].tolist() and len(got) > 3
    np.testing.assert_allclose(got["rms"], rms[rms > 0.9], rtol=1e-6)


def _sync(ws, spark, tmp_path):
    """A continuous SYNC of a control stream with a signal (the re-evaluating runner)."""
    root = tmp_path / "sync"
    x = np.random.default_rng(5).standard_normal(4000).astype(np.float32)
    (root / "ctl").mkdir(parents=True)
    _wav(root / "sig", "m0", x[:2000])
    ws.sql(f"CREATE OR REPLACE SIGNAL mic2 (ch1 FLOAT) RATE {RATE} HZ FROM '{root / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP) FROM '{root / 'ctl'}' FORMAT json "
           "EVENT TIME t0 WATERMARK 1 SECOND")

    def marks(name, rows):
        (root / "ctl" / f"{name}.json").write_text("".join(
            json.dumps({"id": i, "t0": f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"})
            + "\n" for i, ms in rows))

    sql = ("SELECT r.id, seg_rms(s.ch1) AS rms FROM marks r SYNC JOIN mic2 s "
           "ON RANGE (r.t0, r.t0 + INTERVAL 500 MILLISECONDS)")
    out, ckpt = root / "out", root / "ckpt"
    marks("c0", [(1, 300), (2, 1200)])
    _run(ws, sql, out, ckpt)
    _mismatch(ws, sql.replace("500", "400"), out, ckpt, "500", "400")
    _wav(root / "sig", "m1", x[2000:])
    marks("c1", [(3, 2600), (4, 3100)])
    _run(ws, sql.replace(" ON RANGE", "\n  on range"), out, ckpt)
    got = {r.id: r.rms for r in spark.read.parquet(str(out)).collect()}
    starts = {1: 300, 2: 1200, 3: 2600, 4: 3100}
    assert sorted(got) == sorted(starts)  # each once
    for i, a in starts.items():
        want = np.sqrt(np.mean(x[a:a + 500].astype(np.float64) ** 2))
        assert got[i] == pytest.approx(want, rel=1e-6)


def test_each_runner_refuses_a_changed_query_and_runs_a_compatible_one(ws, spark, tmp_path):
    """The cheap runners in one test (one Spark session): re-evaluating rows, signal
    files, a derived query's signal part, a continuous SYNC."""
    _reevaluating(ws, spark, tmp_path)
    _signal_files(ws, spark, tmp_path)
    _derived(ws, spark, tmp_path)
    _sync(ws, spark, tmp_path)


def test_an_unmarked_checkpoint_of_the_rows_runner_is_adopted(ws, spark, tmp_path):
    """A checkpoint written before markers (the marker deleted): the query runs on it --
    no row twice, none lost -- and it is marked from then on."""
    root = _rows_stream(ws, tmp_path / "rows", 7)
    sql = "SELECT k, v FROM ev"
    out, ckpt = root / "out", root / "ckpt"
    _run(ws, sql, out, ckpt)
    (ckpt / "wavesql.json").unlink()
    _parquet(root / "in", "p1", _rows(8, 50))
    _run(ws, sql, out, ckpt)
    assert json.loads((ckpt / "wavesql.json").read_text())["engine"] == "re-evaluating"
    want = sorted(zip(*[pd.concat([_rows(7, 0), _rows(8, 50)])[c] for c in ("k", "v")]))
    assert sorted((r.k, r.v) for r in spark.read.parquet(str(out)).collect()) == want
    shutil.rmtree(ckpt)


def test_a_signal_programs_parameters_count(binder, tmp_path):
    """A signal function's parameter (lowpass's cutoff) is named in the refusal; the
    signal's segment counts, its catalog version does not."""
    from scipy.io import wavfile

    (tmp_path / "rec").mkdir()
    wavfile.write(tmp_path / "rec" / "r.wav", 8000, np.zeros(4096, np.float32))
    signal = ("CREATE OR REPLACE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM 'rec' FORMAT wav "
              "SEGMENT {}")
    binder.ddl(signal.format(4096))
    sql = "SELECT start_time(ch1) AS t, seg_rms(lowpass(ch1, {}, 4)) AS lp FROM mic [SAMPLES 512]"
    base = binder.mark(sql.format("600.0"), engine="signal")
    why = cp.mismatch(json.loads(base.to_json()), binder.mark(sql.format("700.0"), "signal"))
    assert "lowpass(ch1, 600.0, 4)" in why and "lowpass(ch1, 700.0, 4)" in why, why
    assert "(column lp) changed" in why, why  # the user's column, not only the program's
    binder.ddl(signal.format(4096))
    assert binder.mark(sql.format("600.0"), engine="signal").plan == base.plan
    binder.ddl(signal.format(1024))
    why = cp.mismatch(json.loads(base.to_json()), binder.mark(sql.format("600.0"), "signal"))
    assert "SignalScan mic segment changed from 4096 to 1024" in why, why


@pytest.mark.slow
def test_a_kafka_signal_query_refuses_a_changed_window(ws, spark, kafka, tmp_path):
    """The Kafka-signal runner: sample blocks in two rounds on one checkpoint; a changed
    window between them is refused, a change of keyword case runs on; every window's RMS
    equals numpy's over the samples sent."""
    import uuid

    from tests.test_kafka import _block

    topic = kafka.create_topic(f"t{uuid.uuid4().hex[:10]}", 1)
    x = np.random.default_rng(9).standard_normal((1, 4000)).astype(np.float32)
    ws.sql(f"CREATE SIGNAL kmic (a FLOAT) RATE 8000 HZ FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples")
    sql = "SELECT start_sample(a) AS s, seg_rms(a) AS r FROM kmic [SAMPLES 1000]"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    kafka.produce(topic, [(None, _block(i, x[:, i:i + 1000]), 0) for i in (0, 1000)])
    cq = _run(ws, sql, out, ckpt)
    assert type(cq).__name__ == "KafkaSignalQuery"
    _mismatch(ws, sql.replace("1000", "500"), out, ckpt, "kafka-signal", "(500, 500)")
    kafka.produce(topic, [(None, _block(i, x[:, i:i + 1000]), 0) for i in (2000, 3000)]
                  + [(None, _block(4000, x[:, :0]), 0)])  # the end block
    _run(ws, sql.replace("SELECT", "select").replace("FROM", "from"), out, ckpt)
    got = sorted((r.s, r.r) for r in spark.read.parquet(str(out)).collect())
    assert [s for s, _ in got] == [0, 1000, 2000, 3000]
    for s, r in got:
        assert r == pytest.approx(np.sqrt(np.mean(x[0, s:s + 1000].astype(np.float64) ** 2)),
                                  rel=1e-6)


# -- review of issue 26 item 3 --------------------------------------------------------------
JAAS = ("kafka.sasl.jaas.config", 'PlainLoginModule required username="u" password="hunter2";')


def _with_options(binder, *options):
    """Stream ``ev`` re-created with these reader options (as a Kafka stream holds them;
    the catalog directly: a Kafka stream's DDL asks the broker for its topic)."""
    import dataclasses

    ev = binder.catalog.get("ev")
    binder.catalog.create(dataclasses.replace(ev, options=tuple(options), version=0,
                                              created_at="", updated_at=""), replace=True)

Q2 = ("CREATE OR REPLACE STREAM q2 (k STRING, v DOUBLE, ts TIMESTAMP) FROM 'other' "
      "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
JOINED = ("RSTREAM (SELECT t.k, t.v AS id, q.v AS qid FROM ev [RANGE 3 SECONDS] t JOIN q2 "
          "[RANGE 2 SECONDS] q ON t.k = q.k)")


def test_no_fact_writes_a_definition_field_by_field(binder, tmp_path):
    """Relations and catalog objects held in another node's fields (a windowed join's
    ``joint``, ``StreamOf.window``, a SYNC JOIN's signal, a view) are named, never written
    field by field: no catalog version or times, no credential, in any fact."""
    from scipy.io import wavfile

    (tmp_path / "rec").mkdir()
    wavfile.write(tmp_path / "rec" / "r.wav", 1000, np.zeros(4096, np.float32))
    _with_options(binder, JAAS, ("maxOffsetsPerTrigger", "10"))
    binder.ddl(Q2)
    binder.ddl("CREATE OR REPLACE SIGNAL mic (ch1 FLOAT) RATE 1000 HZ FROM 'rec' FORMAT wav "
               "SEGMENT 512")
    binder.ddl("CREATE OR REPLACE STREAM ctl (id BIGINT, a TIMESTAMP, b TIMESTAMP) FROM "
               "'other' FORMAT parquet EVENT TIME a WATERMARK 1 SECOND")
    binder.ddl("CREATE OR REPLACE VIEW hot AS SELECT k, v, ts FROM ev WHERE v > 1")
    queries = [JOINED, JOINED.replace("RSTREAM", "ISTREAM"), WINDOWED,
               "SELECT c.id, seg_rms(s.ch1) AS r FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)",
               "SELECT k, count(*) AS n FROM hot [RANGE 5 SECONDS] GROUP BY k"]
    kinds = set()
    for sql in queries:
        mark = binder.mark(sql)
        text = mark.to_json()
        for needle in ("version=", "created_at", "updated_at", "hunter2", "jaas",
                       "maxOffsetsPerTrigger"):
            assert needle not in text, (sql, needle, text)
        kinds |= {name.split(".")[0].split(" ")[0] for name, _ in mark.facts}
    assert {"WindowScan", "StreamOf", "SyncJoin", "SignalScan"} <= kinds, kinds
    joint = dict(binder.mark(JOINED).facts)["WindowScan ev.joint"]
    assert joint == "(ev [RANGE 3 SECONDS] on ts, q2 [RANGE 2 SECONDS] on ts)", joint


def test_recreating_a_joined_stream_or_its_watermark_keeps_the_fingerprint(binder):
    binder.ddl(Q2)
    base = binder.mark(JOINED)
    binder.ddl(STREAM.format(path="ev", wm="1 SECOND", hb=""))  # the same definition again
    assert binder.mark(JOINED).plan == base.plan
    binder.ddl(STREAM.format(path="ev", wm="5 SECONDS", hb="HEARTBEAT 2 SECONDS"))
    assert binder.mark(JOINED).plan == base.plan
    binder.ddl(STREAM.format(path="other", wm="1 SECOND", hb=""))  # another input: counts
    assert binder.mark(JOINED).plan != base.plan


def test_operational_reader_options_do_not_count(binder):
    """How much a batch reads and where a new query starts are not what the state means."""
    _with_options(binder, JAAS, ("maxOffsetsPerTrigger", "10"),
                  ("startingOffsets", "earliest"))
    base = binder.mark(WINDOWED)
    _with_options(binder, JAAS, ("maxOffsetsPerTrigger", "5000"), ("failOnDataLoss", "false"),
                  ("minPartitions", "4"), ("startingOffsets", "latest"))
    assert binder.mark(WINDOWED).plan == base.plan
    _with_options(binder, JAAS, ("includeHeaders", "true"))
    assert binder.mark(WINDOWED).plan != base.plan  # (it changes the rows' columns)
    files = STREAM.format(path="ev", wm="1 SECOND", hb="").replace("FORMAT", "OPTIONS ({}) FORMAT")
    binder.ddl(files.format("maxFilesPerTrigger = '1', latestFirst = 'true'"))
    plain = binder.mark(WINDOWED)
    binder.ddl(files.format("maxFilesPerTrigger = '50'"))
    assert binder.mark(WINDOWED).plan == plain.plan
    binder.ddl(files.format("fileNameOnly = 'true'"))
    assert binder.mark(WINDOWED).plan != plain.plan


def test_a_checkpoint_without_a_committed_batch_takes_the_changed_query(binder, tmp_path):
    """The first start marks the checkpoint before any batch commits; a query that failed
    in batch 0 and was fixed runs on it. One with a committed batch or WaveSQL state is
    still refused."""
    old, new = binder.mark(WINDOWED), binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS"))
    ckpt = tmp_path / "ckpt"
    cp.check(str(ckpt), old)
    (ckpt / "offsets" / "offsets").mkdir(parents=True)  # batch 0 planned, never committed
    (ckpt / "offsets" / "offsets" / "0").write_text("v1")
    (ckpt / "offsets" / "commits").mkdir()
    (ckpt / "files").mkdir()  # the file list fixed for it (streaming/files.py)
    (ckpt / "files" / "000000000.json").write_text("[]")
    assert cp.check(str(ckpt), new) is None
    assert json.loads((ckpt / "wavesql.json").read_text())["plan"] == new.plan
    assert not (ckpt / "offsets").exists()  # its offset log named the old plan's sources
    assert not (ckpt / "files").exists()
    _commit(ckpt, 0)
    with pytest.raises(WaveSQLError) as err:
        cp.check(str(ckpt), old)
    assert err.value.code == "CHECKPOINT_MISMATCH"
    state = tmp_path / "state"
    cp.check(str(state), old)
    (state / "state" / "000000000").mkdir(parents=True)  # WaveSQL state, Spark commit lost
    (state / "state" / "000000000" / "state.json").write_text("{}")
    with pytest.raises(WaveSQLError) as err:
        cp.check(str(state), new)
    assert err.value.code == "CHECKPOINT_MISMATCH"


def test_a_marker_of_another_fingerprint_scheme_is_re_marked(binder, tmp_path):
    """After an upgrade that fingerprints otherwise, a running query is not refused: its
    checkpoint is re-marked (as a marker-less one is adopted), then checked again."""
    mine = binder.mark(WINDOWED)
    assert json.loads(mine.to_json())["scheme"] == cp.SCHEME
    ckpt = tmp_path / "ckpt"
    _commit(ckpt, 4)
    older = {**json.loads(mine.to_json()), "plan": "0123456789abcdef"}
    del older["scheme"]  # written before schemes: scheme 1
    (ckpt / "wavesql.json").write_text(json.dumps(older))
    assert cp.check(str(ckpt), mine)["plan"] == "0123456789abcdef"
    assert json.loads((ckpt / "wavesql.json").read_text())["plan"] == mine.plan
    with pytest.raises(WaveSQLError):  # checked from now on
        cp.check(str(ckpt), binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS")))
    (ckpt / "wavesql.json").write_text(json.dumps({**older, "engine": "signal"}))
    with pytest.raises(WaveSQLError):  # another runner's state is still another runner's
        cp.check(str(ckpt), mine)
    stateful = cp.Mark("stateful-window", "abc", "stateful window")
    assert "scheme" not in json.loads(stateful.to_json())


def test_a_field_at_its_default_is_not_hashed():
    """A defaulted field a release adds to an IR node keeps old fingerprints; set, it
    counts."""
    import dataclasses

    schema = ir.Schema((ir.Field("x", "int"),))
    later = dataclasses.make_dataclass("SparkTable", [("added", int, 0)],
                                       bases=(ir.SparkTable,), frozen=True)
    base = cp.mark_of("re-evaluating", ir.SparkTable("t", schema, True))
    assert cp.mark_of("re-evaluating", later("t", schema, True)).plan == base.plan
    assert cp.mark_of("re-evaluating", later("t", schema, True, 3)).plan != base.plan


def test_a_changed_sql_is_shown_with_the_users_window(binder):
    """The refusal shows a generated window view as the user wrote the window."""
    why = cp.mismatch(json.loads(binder.mark(WINDOWED).to_json()),
                      binder.mark(WINDOWED.replace("count(*)", "count(v)")))
    assert "COUNT(v) AS n FROM ev [RANGE 10 SECONDS] AS ev" in why, why
    assert "__wavesql" not in why, why


def test_a_query_that_failed_in_its_first_batch_runs_fixed_on_its_checkpoint(ws, spark,
                                                                            tmp_path):
    """Marked at its start, failed before any batch committed: the fixed query takes the
    checkpoint (nothing in it to misread) and reads the input from the beginning."""
    root = _rows_stream(ws, tmp_path / "fix", 3, "fx")
    out, ckpt = root / "out", root / "ckpt"
    try:
        cq = ws.stream("SELECT k, assert_true(v < -100) AS bad FROM fx", out, ckpt)
        cq.await_termination()
        failed = cq.error
    except Exception as e:  # noqa: BLE001 - how the failure surfaces does not matter here
        failed = e
    assert failed is not None and (ckpt / "wavesql.json").exists()
    _run(ws, "SELECT k, v FROM fx", out, ckpt)
    want = sorted(zip(_rows(3, 0)["k"], _rows(3, 0)["v"]))
    assert sorted((r.k, r.v) for r in spark.read.parquet(str(out)).collect()) == want


# -- review leftovers (issue 21/26 follow-up) -------------------------------------------------
READINGS = ("CREATE OR REPLACE STREAM readings (n BIGINT, ax DOUBLE, ts TIMESTAMP) FROM '{path}' "
            "FORMAT {fmt} EVENT TIME {time} WATERMARK {wm}")
ACC = ("CREATE OR REPLACE SIGNAL acc (x FLOAT) RATE 64 HZ OPTIONS (sample_column = 'n') "
       "AS SELECT n, ax AS x FROM {source}")
ACC_QUERY = "SELECT start_sample(x) AS s, seg_rms(x) AS r FROM acc [SAMPLES 64]"


@pytest.mark.parametrize("through_view", [False, True])
def test_a_query_signals_stream_definition_counts(binder, through_view):
    """A signal defined by a query: the stream its query reads (also through a view) is in
    the fingerprint, under the rules of any input -- re-created alike, with another
    WATERMARK or HEARTBEAT: compatible; another path, format, event time or columns:
    refused, named."""
    binder.ddl(READINGS.format(path="ev", fmt="json", time="ts", wm="1 SECOND"))
    if through_view:
        binder.ddl("CREATE OR REPLACE VIEW near AS SELECT n, ax, ts FROM readings WHERE n >= 0")
    binder.ddl(ACC.format(source="near" if through_view else "readings"))
    base = binder.mark(ACC_QUERY, engine="query-signal")
    binder.ddl(READINGS.format(path="ev", fmt="json", time="ts", wm="1 SECOND"))
    assert binder.mark(ACC_QUERY, engine="query-signal").plan == base.plan
    binder.ddl(READINGS.format(path="ev", fmt="json", time="ts", wm="9 SECONDS HEARTBEAT 1 "
                               "SECOND"))
    assert binder.mark(ACC_QUERY, engine="query-signal").plan == base.plan
    changes = {"path changed": READINGS.format(path="other", fmt="json", time="ts",
                                               wm="1 SECOND"),
               "format changed from json to csv": READINGS.format(
                   path="ev", fmt="csv", time="ts", wm="1 SECOND"),
               "columns changed": READINGS.format(path="ev", fmt="json", time="ts",
                                                  wm="1 SECOND").replace("ax DOUBLE",
                                                                         "ax FLOAT"),
               "event_time": READINGS.format(path="ev", fmt="json", time="ts", wm="1 SECOND")
               .replace("ts TIMESTAMP)", "ts TIMESTAMP, t2 TIMESTAMP)")
               .replace("EVENT TIME ts", "EVENT TIME t2")}
    for needle, ddl in changes.items():
        binder.ddl(ddl)
        other = binder.mark(ACC_QUERY, engine="query-signal")
        why = cp.mismatch(json.loads(base.to_json()), other)
        assert other.plan != base.plan and "SignalScan acc query's stream readings" in why, why
        assert needle in why, why


def test_probing_checks_without_writing(binder, tmp_path):
    """Under probing, check raises the refusal or Accepted and writes nothing; the writes
    it would make run when the caller runs them (a derived query: once all parts accept)."""
    old, new = binder.mark(WINDOWED), binder.mark(WINDOWED.replace("10 SECONDS", "20 SECONDS"))
    fresh, empty, used = (tmp_path / name for name in ("fresh", "empty", "used"))
    cp.check(str(empty), old)
    (empty / "offsets" / "offsets").mkdir(parents=True)  # a batch 0 never committed
    cp.check(str(used), old)
    _commit(used, 0)
    with cp.probing() as writes:
        for ckpt in (fresh, empty):
            with pytest.raises(cp.Accepted):
                cp.check(str(ckpt), new)
        with pytest.raises(WaveSQLError) as err:
            cp.check(str(used), new)
        assert err.value.code == "CHECKPOINT_MISMATCH"
    assert not fresh.exists() and (empty / "offsets").exists()  # nothing written yet
    assert json.loads((empty / "wavesql.json").read_text())["plan"] == old.plan
    for write in writes:
        write()
    for ckpt in (fresh, empty):
        assert json.loads((ckpt / "wavesql.json").read_text())["plan"] == new.plan
    assert not (empty / "offsets").exists()
    assert cp.check(str(empty), new)["plan"] == new.plan  # not probing: checks as before


def test_a_signal_query_that_failed_in_its_first_batch_runs_fixed(ws, spark, tmp_path):
    """The signal-files runner's checkpoint after a failed batch 0 holds nothing: the fixed
    query takes it and reads the recording from its first sample."""
    root = tmp_path / "sigfix"
    x = np.random.default_rng(11).standard_normal(2048).astype(np.float32)
    _wav(root / "rec", "r0", x)
    (root / "rec" / "done.eof").write_text("")
    ws.sql(f"CREATE SIGNAL fmic (ch1 FLOAT) RATE {RATE} HZ FROM '{root / 'rec'}' FORMAT wav")
    out, ckpt = root / "out", root / "ckpt"
    windows = "FROM fmic [SAMPLES 256]"
    try:
        cq = ws.stream(f"SELECT start_sample(ch1) AS s, assert_true(seg_rms(ch1) < 0) AS bad "
                       f"{windows}", out, ckpt)
        cq.await_termination()
        failed = cq.error
    except Exception as e:  # noqa: BLE001 - how the failure surfaces does not matter here
        failed = e
    assert failed is not None and (ckpt / "wavesql.json").exists()
    assert "bad" in (ckpt / "wavesql.json").read_text()
    _run(ws, f"SELECT start_sample(ch1) AS s, seg_rms(ch1) AS rms {windows}", out, ckpt)
    got = spark.read.parquet(str(out)).toPandas().sort_values("s")
    starts = np.arange(0, 2048, 256)
    assert got["s"].tolist() == starts.tolist()
    np.testing.assert_allclose(got["rms"], [np.sqrt(np.mean(x[s:s + 256].astype(np.float64)
                                                            ** 2)) for s in starts], rtol=1e-6)


def test_a_query_signal_refuses_its_stream_defined_anew(ws, spark, tmp_path):
    """A signal defined by a query over stream ``readings``: the stream re-created over
    another folder is refused by name (the state is of the old folder's samples); with the
    same folder and another WATERMARK and HEARTBEAT the query runs on, every window once,
    its RMS numpy's."""
    root = tmp_path / "qsig"
    x = np.random.default_rng(13).standard_normal(512).astype(np.float32)

    def put(name, a, b):
        (root / "readings").mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"n": np.arange(a, b, dtype=np.int64), "ax": x[a:b],
                      "ts": pd.to_datetime(np.arange(a, b) * (1e6 / 64), unit="us")
                      .astype("datetime64[us]")}).to_parquet(root / "readings" / f"{name}.parquet")

    stream = ("CREATE OR REPLACE STREAM readings (n BIGINT, ax FLOAT, ts TIMESTAMP) FROM '{}' "
              "FORMAT parquet EVENT TIME ts WATERMARK {}")
    put("r0", 0, 256)
    ws.sql(stream.format(root / "readings", "1 SECOND"))
    ws.sql(ACC.format(source="readings"))
    out, ckpt = root / "out", root / "ckpt"
    cq = _run(ws, ACC_QUERY, out, ckpt)
    assert type(cq).__name__ == "QuerySignalQuery"
    (root / "moved").mkdir()
    ws.sql(stream.format(root / "moved", "1 SECOND"))
    _mismatch(ws, ACC_QUERY, out, ckpt, "query's stream readings path changed")
    ws.sql(stream.format(root / "readings", "5 SECONDS HEARTBEAT 1 SECOND"))
    put("r1", 256, 512)
    _run(ws, ACC_QUERY, out, ckpt)
    got = spark.read.parquet(str(out)).toPandas().sort_values("s")
    starts = np.arange(0, 512, 64)
    assert got["s"].tolist() == starts.tolist()
    np.testing.assert_allclose(got["r"], [np.sqrt(np.mean(x[s:s + 64].astype(np.float64) ** 2))
                                          for s in starts], rtol=1e-6)
