"""A stream part with the query's checkpoint and output in a bucket (tests/object_store.py,
a real S3-protocol server on loopback): the ASOF JOIN of tests/test_stream_parts.py over a
windowed-average CTE, run twice on one checkpoint, the streams' files local. The part's
rows, its punctuation and its sink log live under ``<checkpoint>/derived/m/`` in the
bucket, where the rest's file source reads them on the second run too. Oracles: pandas
(tumbling windows per key, then ``merge_asof``) over the rows written, as in
tests/test_stream_parts.py; boto3's listing of the bucket for where the part's rows are."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.test_stream_parts import ASOF, _asof, _ms, _samples, _windows, _write, first_inputs


@pytest.mark.spark
@pytest.mark.slow
def test_asof_join_over_a_stream_part_with_checkpoint_and_output_in_a_bucket(s3, ws, spark,
                                                                             tmp_path):
    """Each event with the latest final 10-second average of its key at or before it,
    over two runs: after the first, the events the windows' progress has passed; after
    the second, every event below the final progress, each once."""
    from tests.store_cases import unique_prefix

    p = unique_prefix(tmp_path)
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    rng = np.random.default_rng(17)
    first, events = first_inputs(ws, tmp_path, rng)

    def run():
        q = ws.stream(ASOF, out, ckpt)
        q.await_termination()
        assert q.error is None, q.error
        return q

    def read() -> pd.DataFrame:
        got = spark.read.parquet(out).toPandas()
        for c in ("ts", "t"):
            got[c] = [_ms(v) for v in got[c]]
        return got.sort_values("id").reset_index(drop=True)

    run()
    got, want = read(), _asof(events, _windows(first, 24_000), 24_000)
    assert list(got["id"]) == list(want["id"]) and len(want) > 10
    assert 24_050 not in list(got["ts"])  # after the windows' progress: it waits
    assert [k for k in s3.keys(f"{p}/ckpt/derived/m/rows/") if k.endswith(".parquet")]

    second = _samples(rng, 24_001, 47_001)
    more = [{"ts": t, "k": "xy"[i % 2], "id": 100 + i} for i, t in
            enumerate(range(25_150, 49_000, 1_700))]
    _write(tmp_path / "s", "s2", second)
    _write(tmp_path / "ev", "e2", more)
    q = run()
    progress = max(r["ts"] for r in first + second)
    got = read()
    want = _asof(events + more, _windows(first + second, progress), progress)
    assert list(got["id"]) == list(want["id"])  # each once: none lost, none twice
    assert list(got["t"]) == list(want["t"]) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)
    assert 24_050 in list(got["ts"]) and got["ts"].max() < progress
    assert q.status()["late"] == 0
    assert not [k for k in s3.keys(f"{p}/ckpt/late/") if k.endswith(".parquet")]
