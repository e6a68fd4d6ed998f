"""``EXPLAIN STAGES``: the statement after each stage of the planner (parse, analyze,
optimize, physical), so a reader can see which stage did what."""

import numpy as np
import pytest
import scipy.io.wavfile

pytestmark = pytest.mark.spark


def test_each_stage_in_order_and_what_each_changed(ws, tmp_path):
    (tmp_path / "mic").mkdir()
    scipy.io.wavfile.write(tmp_path / "mic" / "a.wav", 8000, np.zeros(4000, np.float32))
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{tmp_path}/mic/' FORMAT wav")
    query = "SELECT seg_rms(lowpass(ch1, 1000.0)) AS rms FROM mic [SAMPLES 400]"
    for text in (ws.sql("EXPLAIN STAGES " + query).first()[0], ws.explain(query, "stages")):
        titles = [line for line in text.splitlines() if line.startswith("== ")
                  and not line.startswith("== Physical Plan")]
        assert [t.split()[1] for t in titles] == ["parse", "analyze", "optimize", "physical"]
        parse, analyze, optimize, physical = text.split("\n\n== ")
        assert "Select(" in parse and "lowpass" in parse
        # the binder makes a signal stage over the scan; the rewrite rule pushes its program
        # into the scan, so the optimized plan has no SignalStage left
        assert "SignalStage" in analyze and "push_program_into_scan" in optimize
        assert "SignalStage" not in optimize.split("==\n", 1)[1]
        assert "program[" in optimize.split("==\n", 1)[1]
        assert "Physical Plan" in physical and "MapInArrow" in physical.replace(
            "mapInArrow", "MapInArrow")


def test_stages_of_a_statement_that_is_not_a_query_stop_before_physical(ws):
    text = ws.sql("EXPLAIN STAGES SET wavesql.fused = false").first()[0]
    assert "== optimize" in text and "== physical" not in text
