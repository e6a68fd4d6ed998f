"""Signal functions are discoverable from SQL, and docs/functions.md is the registry's.

Oracles: Spark's own SHOW/DESCRIBE FUNCTION output for Spark's functions, hand-written
lists of the signal functions.
"""

from __future__ import annotations

from pathlib import Path

from wavesql.udfs import registry

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_is_generated_from_the_registry():
    text = (ROOT / "docs" / "functions.md").read_text()
    assert text == registry.reference_markdown(), \
        "docs/functions.md is stale: run `python -m wavesql.udfs.reference`"
    for name in ("lowpass", "cfar", "seg_rms", "fft", "degap"):
        assert f"### `{name}`" in text


def test_show_functions_lists_signal_functions_beside_sparks(ws, spark):
    got = [r.function for r in ws.sql("SHOW FUNCTIONS LIKE 'seg*'").collect()]
    spark_own = [r.function for r in spark.sql("SHOW FUNCTIONS LIKE 'seg*'").collect()]
    assert got == sorted(set(spark_own) | {"seg_avg", "seg_kurtosis", "seg_max", "seg_min",
                                           "seg_rms", "seg_std"})
    got = [r.function for r in ws.sql("SHOW FUNCTIONS 'low*|FFT'").collect()]
    assert got == ["fft", "lower", "lowpass"]  # Spark's lower, two signal functions
    everything = {r.function for r in ws.sql("SHOW FUNCTIONS").collect()}
    assert everything == {r.function for r in spark.sql("SHOW FUNCTIONS").collect()} \
        | set(registry.names())
    assert {"lowpass", "cfar", "threshold_ranges", "degap", "resample"} <= everything
    assert not {r.function for r in ws.sql("SHOW USER FUNCTIONS").collect()} \
        & set(registry.names())


def test_describe_function_shows_signature_semantics_and_example(ws, spark):
    rows = [r.function_desc for r in ws.sql("DESCRIBE FUNCTION lowpass").collect()]
    assert rows[0] == "Function: lowpass"
    assert rows[2].startswith("Usage: lowpass(seg sigseg, cutoff_hz double literal, "
                              "order int literal = 4) -> sigseg - Butterworth low-pass")
    extended = [r.function_desc for r in ws.sql("DESC FUNCTION EXTENDED cfar").collect()]
    assert "stateful" in extended[4] and "unbounded" in extended[4]
    assert extended[-1].startswith("      > SELECT") and "cfar(" in extended[-1]
    assert [r.function_desc for r in ws.sql("DESCRIBE FUNCTION upper").collect()] == \
        [r.function_desc for r in spark.sql("DESCRIBE FUNCTION upper").collect()]
