"""A SYNC part's batch re-run after a crash, with its checkpoint and the query's output in a
bucket (tests/object_store.py): the rows a recording file completed since released are
added to the committed batch folder, and the part's sink log (the record Spark's reader
and the rest's file source read on an object store) lists them beside the first attempt's
file (streaming/sinks.py ``add_to_committed``). Oracles: pandas over numpy's RMS per range
for the windows, boto3's view of the bucket for the folder and its record."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from tests.test_sync_feature_streams import FIRST, WINDOWED, _arrive, _first_files_and_rows, \
    _ms, _want


@pytest.mark.spark
@pytest.mark.slow
def test_a_sync_batch_rerun_in_a_bucket_adds_the_released_rows(s3, ws, spark, tmp_path):
    """As test_sync_feature_streams' local re-run test, the checkpoint and output in the
    bucket: the SYNC part's last batch committed its folder, Spark's commit entry is lost
    (the kill), a recording file completes, the batch runs again and adds rows 6 and 7
    (the first attempt kept them waiting) -- no row lost, none twice, none late."""
    from tests.store_cases import unique_prefix

    p = unique_prefix(tmp_path)
    data = _first_files_and_rows(ws, tmp_path)  # the recording and control rows: local
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")

    def run():
        q = ws.stream(WINDOWED, out, ckpt)
        q.await_termination()
        assert q.error is None, q.error
        return q

    run()
    commits = f"{p}/ckpt/derived/s/offsets/commits/"
    last = max(int(k.rsplit("/", 1)[1]) for k in s3.keys(commits)
               if k.rsplit("/", 1)[1].isdigit())
    for key in (f"{commits}{last}", f"{commits}.{last}.crc"):  # killed before Spark's commit
        s3.client().delete_object(Bucket=s3.bucket, Key=key)
    _arrive(tmp_path, "mic_002.wav")  # .. 6000 ms: rows 6 and 7 are covered now
    q = run()
    assert q.inners[0].reports[0].batch == last  # the batch ran again

    # the windows: pandas over numpy's RMS per range (progress 4200 ms, none waiting)
    got = spark.read.parquet(out).toPandas()
    got = got.assign(instant=[_ms(v) for v in got["_time"]]).sort_values("instant")
    want = _want(data, FIRST, 4200)
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000]
    assert got["n"].tolist() == want["n"].tolist() == [3, 3]
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    assert q.status()["late"] == 0
    assert not [k for k in s3.keys(f"{p}/ckpt/late/") if k.endswith(".parquet")]

    # the part's rows in the bucket (boto3, pandas): every control row once; the re-run
    # batch's folder holds the first attempt's file and the added one, its record both
    rows = f"{p}/ckpt/derived/s/rows/"
    ids, files = [], {}
    for key in s3.keys(rows):
        if "/batch=" in key and key.endswith(".parquet"):
            frame = pd.read_parquet(io.BytesIO(s3.get(key)))
            ids += frame["id"].dropna().astype(int).tolist()
            files.setdefault(int(key.split("/batch=")[1].split("/")[0]), []).append(key)
    assert sorted(ids) == [1, 2, 3, 4, 5, 6, 7]
    assert len(files[last]) == 2, files
    # (each batch's record; fewer than ten: no compaction, Spark's reader reads them all)
    records = [k for k in s3.keys(f"{rows}_spark_metadata/") if k.rsplit("/", 1)[1].isdigit()]
    listed = {json.loads(line)["path"].split(f"{s3.bucket}/", 1)[1]
              for key in records for line in s3.get(key).decode().splitlines()[1:]
              if line.strip()}
    assert set(files[last]) <= listed, (files[last], listed)
