"""copystream's and diffstreams' per-partition work with fake Kafka clients: no broker, no Spark.

The fakes hold each partition as a list where an offset is a record or None (an offset no reader sees:
a transaction marker, an aborted record), and they answer the few calls the tasks make of a consumer
and a producer.
"""

from __future__ import annotations

from support.bulk import (
    DST_KT,
    SPEC,
    SRC_KT,
    SRC_UUID,
    FakeClusters,
    Rec,
    copy_item,
    diff_item,
    record,
)

from streamrepl import policy
from streamrepl.bulk.copystream import SharedProducer, copy_partition
from streamrepl.bulk.diffstreams import diff_partition
from streamrepl.registry import Cluster


def test_copy_partition_keeps_offsets_and_fills_invisible_ones() -> None:
    fake = FakeClusters()
    src = fake.log("src", SRC_KT)
    src.extend([record(0), record(1), None, record(3), record(4), None])  # None: a marker, an aborted record

    row = copy_partition(SPEC, copy_item(end=6), clients=fake)

    assert row["error"] is None, row
    assert (row["start"], row["records"], row["fillers"], row["stopped"]) == (0, 4, 2, None)
    dst = fake.log("dst", DST_KT)
    assert len(dst) == 6
    for offset in (0, 1, 3, 4):
        copied = dst[offset]
        assert copied is not None and (copied.key, copied.value) == (b"k%d" % offset, b"v%d" % offset)
        assert copied.headers == [("user", b"h"), (policy.ORIGIN, SRC_UUID.encode())]
    assert all(dst[o] is not None and policy.is_filler(dst[o].headers) for o in (2, 5))  # type: ignore[union-attr]
    assert sorted(fake.opened) == ["consumer dst", "consumer src", "producer dst"]


def test_copy_partition_goes_on_where_the_copy_ends() -> None:
    fake = FakeClusters()
    src = fake.log("src", SRC_KT)
    src.extend(record(i) for i in range(3))
    first = copy_partition(SPEC, copy_item(end=3), clients=fake)
    src.extend(record(i) for i in range(3, 5))

    again = copy_partition(SPEC, copy_item(end=5), clients=fake)

    assert (first["records"], again["start"], again["records"], again["fillers"]) == (3, 3, 2, 0), again
    assert [r.key for r in fake.log("dst", DST_KT) if r is not None] == [b"k%d" % i for i in range(5)]


def test_copy_partition_stops_behind_an_open_transaction() -> None:
    fake = FakeClusters()
    fake.log("src", SRC_KT).extend([record(0), None, None])  # not stable: the two offsets are undecided

    row = copy_partition(SPEC, copy_item(end=3, stable=False), clients=fake)

    assert (row["records"], row["fillers"], row["stopped"]) == (1, 0, 1), row
    assert len(fake.log("dst", DST_KT)) == 1


def test_copy_partition_reports_a_foreign_record_in_the_copy() -> None:
    fake = FakeClusters()
    fake.log("src", SRC_KT).extend(record(i) for i in range(3))
    fake.log("dst", DST_KT).append(Rec(b"x", b"x", [(policy.ORIGIN, b"someone-else")], 1))
    shared = SharedProducer(Cluster("dst", SPEC["dst_props"]), fake)  # type: ignore[arg-type]

    row = copy_partition(SPEC, copy_item(end=3), shared, clients=fake)

    assert row["error"] and row["error"].startswith("/dst/s:t[0]: "), row
    assert "someone-else" in row["error"]
    assert shared.producer is None  # discarded: the next partition starts on a fresh producer


def test_diff_partition_matches_a_copy_and_finds_the_first_difference() -> None:
    fake = FakeClusters()
    fake.log("src", SRC_KT).extend([record(0), None, record(2), record(3)])
    assert copy_partition(SPEC, copy_item(end=4), clients=fake)["error"] is None

    same = diff_partition(SPEC, diff_item(4, 4), clients=fake)
    assert same["match"] and same["firstdiff"] == -1, same
    assert (same["srccount"], same["dstcount"]) == (3, 3)  # the filler at offset 1 matches the gap
    assert same["srcdigest"] == same["dstdigest"]

    changed = fake.log("dst", DST_KT)[2]
    assert changed is not None
    changed.value = b"changed"
    differs = diff_partition(SPEC, diff_item(4, 4), clients=fake)
    assert not differs["match"] and differs["firstdiff"] == 2, differs
    assert "error" not in differs


def test_a_partition_one_stream_lacks_differs_even_when_the_other_is_empty() -> None:
    """Two streams of 2 and 3 partitions, all empty: the third partition is missing on one side, which is a
    difference (a replica with the broker's default partition count is not its source), not an empty match."""
    fake = FakeClusters()
    for lacking, absent in (("dst", "/dst/s"), ("src", "/src/s")):
        item = {**diff_item(0, 0), lacking: None}
        row = diff_partition(SPEC, item, clients=fake)
        assert not row["match"] and row["firstdiff"] == 0 and row["absent"] == absent, row
        assert "error" not in row


def test_the_spark_task_finds_a_missing_partition_too() -> None:
    from streamrepl.bulk import diffstreams

    fake = FakeClusters()
    fake.log("src", SRC_KT).extend([record(0)])
    rows = list(diffstreams._diff_task(SPEC, [{**diff_item(1, 0), "dst": None}], clients=fake))
    assert [(r["match"], r["absent"], r["srccount"]) for r in rows] == [(False, "/dst/s", 1)]
