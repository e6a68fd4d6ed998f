"""The record a continuous SYNC keeps of a signal defined by a query (streaming/query_sync.py,
*A bounded record*): old files' entries merged while they are neighbours in name order
and had no late rows, merged entries merged pairwise beyond a bound; format 3 records
(no merged entries) still load. No Spark: the records are built by hand here and the
expected merged entries computed by hand (sample spans, counts, bytes, and the digest
from hashlib)."""

from __future__ import annotations

import hashlib

import pytest

from wavesql.errors import WaveSQLError


def _names(paths) -> str:
    total = sum(int(hashlib.sha256(p.encode()).hexdigest(), 16) for p in paths)
    return f"{total % 2 ** 256:064x}"


def _files(n: int, late: dict | None = None) -> list:
    """``n`` entries ``f00``... of 100 bytes and 20 samples each, in order; ``late``:
    a floor per index."""
    late = late or {}
    return [[f"/s/f{i:02d}.parquet", 100, late.get(i), [[20 * i, 20]]] for i in range(n)]


def test_old_neighbours_merge_into_one_entry_the_newest_stay():
    from wavesql.streaming.query_sync import compact

    files = _files(10)
    listing = [f[0] for f in files]
    kept, merged = compact(files, [], listing, keep=3, most=4)
    assert kept == files[7:]
    assert merged == [{"first": listing[0], "last": listing[6], "n": 7,
                       "names": _names(listing[:7]), "bytes": 700, "lo": 0, "hi": 140}]
    # the next batch: its old entries join the merged entry before them
    files = _files(14)
    listing = [f[0] for f in files]
    kept, merged = compact(kept + files[10:], merged, listing, keep=3, most=4)
    assert kept == files[11:]
    assert merged == [{"first": listing[0], "last": listing[10], "n": 11,
                       "names": _names(listing[:11]), "bytes": 1100, "lo": 0, "hi": 220}]


def test_a_file_with_late_rows_or_a_file_between_keeps_entries_apart():
    """f03 had late rows (its own floor): it keeps its entry, and f02 and f04 are not
    neighbours through it. g.parquet (listed, not indexed: it sorts between f05 and f06)
    keeps f05 and f06 apart too."""
    from wavesql.streaming.query_sync import compact

    files = _files(9, late={3: 55})
    listing = sorted([f[0] for f in files] + ["/s/f05a.parquet"])
    kept, merged = compact(files, [], listing, keep=2, most=8)
    assert kept == [files[3]] + files[7:]
    assert [(m["first"][3:6], m["last"][3:6], m["n"], m["lo"], m["hi"]) for m in merged] == [
        ("f00", "f02", 3, 0, 60), ("f04", "f05", 2, 80, 120), ("f06", "f06", 1, 120, 140)]


def test_merged_entries_beyond_the_bound_merge_pairwise():
    """Five merged entries (neighbours), at most two: pairwise twice -- 5 -> 3 -> 2."""
    from wavesql.streaming.query_sync import compact

    listing = [f"/s/f{i:02d}.parquet" for i in range(5)]
    merged = [{"first": p, "last": p, "n": 1, "names": _names([p]), "bytes": 100,
               "lo": 20 * i, "hi": 20 * i + 20} for i, p in enumerate(listing)]
    kept, out = compact([], merged, listing, keep=3, most=2)
    assert kept == []
    assert [(m["first"][3:6], m["last"][3:6], m["n"], m["bytes"], m["lo"], m["hi"])
            for m in out] == [("f00", "f03", 4, 400, 0, 80), ("f04", "f04", 1, 100, 80, 100)]
    assert out[0]["names"] == _names(listing[:4])


def test_a_file_arriving_inside_a_merged_range_is_out_of_order():
    from wavesql.streaming.query_sync import _merged_files

    class Signal:
        name = "acc"

    listing = [f"/s/f{i:02d}.parquet" for i in range(4)]
    merged = [{"first": listing[0], "last": listing[3], "n": 4, "names": _names(listing),
               "bytes": 400, "lo": 0, "hi": 80}]
    assert _merged_files(Signal, merged, listing + ["/s/g.parquet"]) == set(listing)
    with pytest.raises(WaveSQLError) as err:
        _merged_files(Signal, merged, sorted(listing + ["/s/f01a.parquet"]))
    assert err.value.code == "OUT_OF_ORDER_FILE" and "`acc`" in err.value.message
    # a merged file removed (retention) is no error until a read needs it
    assert _merged_files(Signal, merged, listing[:1] + listing[2:]) == set(listing) - {
        listing[1]}


def test_a_merged_entry_takes_at_most_width_files():
    """Ten old neighbours, four files per merged entry at most: 4 + 4 + 3."""
    from wavesql.streaming.query_sync import compact

    files = _files(13)
    listing = [f[0] for f in files]
    kept, merged = compact(files, [], listing, keep=2, most=8, width=4)
    assert kept == files[11:]
    assert [(m["first"][3:6], m["last"][3:6], m["n"], m["lo"], m["hi"]) for m in merged] == [
        ("f00", "f03", 4, 0, 80), ("f04", "f07", 4, 80, 160), ("f08", "f10", 3, 160, 220)]


def test_a_format_3_query_record_still_loads_and_a_newer_format_is_refused():
    from wavesql.catalog import objects as cat
    from wavesql.streaming import sync_state

    acc = cat.SignalDef("acc", [("x", "FLOAT")], 100, "SELECT n, x FROM readings",
                        format="query", source="query")
    record = {"end": 300, "files": _files(3)}
    got = sync_state.records({"signal": {"version": 3, "signals": {
        acc.key: {"kind": "query", **record}}}}, [acc])
    assert got == {acc.key: {"kind": "query", **record}}
    with pytest.raises(WaveSQLError) as err:
        sync_state.records({"signal": {"version": 5, "signals": {}}}, [acc])
    assert err.value.code == "CHECKPOINT_MISMATCH" and "format 5" in err.value.message
