"""The bookkeeping of a continuous SYNC over a Kafka signal (streaming/kafka_sync.py),
without Spark: which blocks count, how far the signal is covered, and the index that says
which offsets to read for a range -- each against hand-computed cases."""

from __future__ import annotations

from wavesql.streaming import kafka_sync as ks

RATE = 1_000.0  # an index entry spans at most SPAN_SECONDS * 1,000 samples


def block(p, o, first, frames, digest=None, problem=None):
    return {"partition": p, "offset": o, "first": first, "frames": frames,
            "problem": problem, "digest": digest or f"d{p}.{o}"}


def timeline(state=None):
    return ks._Timeline(state or {}, "mic", RATE)


def test_coverage_is_the_least_partition_and_bad_blocks_say_why():
    t = timeline()
    t.add([block(0, 0, 0, 100), block(0, 1, 200, 100), block(1, 0, 100, 100),
           block(1, 1, 150, 10), block(1, 2, 0, 100, digest="d0.0"),
           block(1, 3, 0, 0, problem="not a sample block")])
    reasons = {(p, o): why.split(" (")[0].split(":")[0] for p, o, why in t.bad}
    # (1, 1) overlaps block (1, 0); (1, 2) is block (0, 0) sent again
    assert reasons == {(1, 1): "overlaps kafka", (1, 2): "a resent copy of kafka",
                       (1, 3): "malformed"}
    assert t.covered() == 200  # partition 0 reached 300, partition 1 only 200
    state = t.state()
    assert [b[:2] for b in state["pending"]] == [[200, 100]]  # ends past the coverage
    t2 = timeline(state)
    t2.add([block(1, 4, 199, 2), block(1, 5, 200, 100, digest="d0.1"),
            block(1, 6, 300, 50)])
    reasons = [why.split(":")[0].split(" (")[0] for _, _, why in t2.bad]
    assert reasons == ["late", "a resent copy of kafka"]
    assert t2.covered() == 300


def test_the_end_block_releases_everything_once_no_sample_below_it_can_come():
    t = timeline()
    # the end block's position counts as partition 0's reach (nothing more below it there)
    t.add([block(0, 0, 0, 100), block(1, 0, 100, 100), block(0, 1, 400, 0)])
    assert t.covered() == 200
    t = timeline(t.state())
    t.add([block(1, 1, 250, 50)])  # every partition is past [200, 250): a real gap
    assert t.covered() == 300
    t = timeline(t.state())
    t.add([block(0, 2, 300, 50), block(0, 3, 500, 0), block(1, 2, 350, 50),
           block(1, 3, 400, 10)])
    assert t.covered() == "all"
    reasons = sorted(why.split(" (")[0] for _, _, why in t.bad)
    assert reasons == ["a second end block", "after the signal's end"]
    t = timeline(t.state())
    t.add([block(1, 4, 10, 10)])
    assert t.covered() == "all" and t.bad[0][2].startswith("late")


def test_the_end_block_releases_everything_once_the_samples_up_to_it_are_in():
    t = timeline()
    t.add([block(1, 0, 0, 50), block(0, 0, 50, 50), block(0, 1, 100, 50),
           block(0, 2, 150, 0)])
    assert t.covered() == "all"  # partition 1 reached only 50, but [50, 150) is all there
    t = timeline()
    t.add([block(1, 0, 0, 50), block(0, 0, 60, 40), block(0, 1, 150, 0)])
    assert t.covered() == 50  # [50, 60) may still come from partition 1


def test_index_entries_merge_in_sample_order_within_the_span():
    span = int(ks.SPAN_SECONDS * RATE)
    t = timeline()
    t.add([block(0, 0, 0, 100), block(0, 1, 100, 100)])
    t = timeline(t.state())
    t.add([block(0, 2, 200, 100)])  # same entry: in order, within the span
    t = timeline(t.state())
    t.add([block(0, 3, span - 50, 100)])  # would make the entry wider than the span
    t = timeline(t.state())
    t.add([block(0, 4, span + 50, 10), block(1, 0, span + 100, 10)])
    assert t.index == {"0": [[0, 2, 0, 300], [3, 4, span - 50, span + 60]],
                       "1": [[0, 0, span + 100, span + 110]]}
    assert ks.offsets_to_read(t.index, [(250, 260)]) == {0: (0, 3)}
    assert ks.offsets_to_read(t.index, [(span + 105, span + 106)]) == {1: (0, 1)}
    assert ks.offsets_to_read(t.index, ks.merged([(span, span + 1), (250, 260)])) == {
        0: (0, 5)}
    assert ks.offsets_to_read(t.index, [(300, span - 50)]) == {}


def test_the_index_stays_bounded_and_still_covers_every_block(monkeypatch):
    monkeypatch.setattr(ks, "MAX_ENTRIES", 64)  # (the rule, at a size that runs fast)
    t = timeline()
    blocks = []
    for i in range(ks.MAX_ENTRIES * 3 + 5):  # each batch's block past the span: an entry each
        b = block(0, i, i * 20_000, 100)
        blocks.append(b)
        t.add([b])
        t = timeline(t.state())
    entries = t.index["0"]
    assert len(entries) <= ks.MAX_ENTRIES
    for b in blocks:  # each block is inside an entry: its offset and its samples
        assert any(e[0] <= b["offset"] <= e[1] and e[2] <= b["first"]
                   and b["first"] + b["frames"] <= e[3] for e in entries), b


def test_quarantined_offsets_inside_the_index_are_remembered_until_passed():
    t = timeline()
    t.add([block(0, 5, 0, 100), block(0, 6, 0, 0, problem="bad"), block(0, 7, 100, 100)])
    assert t.state()["excluded"] == {"0": [6]}
    t = timeline()
    t.add([block(0, 1, 0, 0, problem="bad")])  # no entry yet: kept (one may reach over it)
    assert t.state()["excluded"] == {"0": [1]}
    t = timeline(t.state())
    t.add([block(0, 2, 0, 100)])  # the first entry starts past it: never read
    assert t.state()["excluded"] == {}
