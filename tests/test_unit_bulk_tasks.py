"""copystream's and diffstreams' per-partition work with fake Kafka clients: no broker, no Spark.

The fakes hold each partition as a list where an offset is a record or None (an offset no reader sees:
a transaction marker, an aborted record), and they answer the few calls the tasks make of a consumer
and a producer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from streamrepl import policy
from streamrepl.bulk.copystream import SharedProducer, copy_partition
from streamrepl.bulk.diffstreams import diff_partition
from streamrepl.registry import Cluster

SRC_UUID, DST_UUID = "src-uuid", "dst-uuid"
SRC_KT, DST_KT = "src.t", "dst.t"


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, Any]] | None
    timestamp: int


def message(topic: str, partition: int, offset: int, rec: Rec | None = None, eof: bool = False) -> Message:
    """A real confluent-kafka Message (the reader calls Message.error unbound, for speed)."""
    if eof:
        return Message(topic=topic, partition=partition, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))
    assert rec is not None
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=rec.key,
        value=rec.value,
        headers=rec.headers,
        timestamp=(1, rec.timestamp),  # CreateTime
    )


@dataclass
class FakeClusters:
    """Every partition of every cluster, and what the tasks opened."""

    logs: dict[tuple[str, str, int], list[Rec | None]] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)

    def log(self, cluster: str, topic: str, partition: int = 0) -> list[Rec | None]:
        return self.logs.setdefault((cluster, topic, partition), [])

    def consumer(self, cluster: Cluster, group: str | None = None, **extra: Any) -> FakeConsumer:
        self.opened.append(f"consumer {cluster.name}")
        return FakeConsumer(self, cluster.name)

    def producer(self, cluster: Cluster, **extra: Any) -> FakeProducer:
        self.opened.append(f"producer {cluster.name}")
        return FakeProducer(self, cluster.name)


class FakeConsumer:
    def __init__(self, clusters: FakeClusters, cluster: str):
        self.clusters, self.cluster = clusters, cluster
        self.positions: dict[tuple[str, int], int] = {}
        self.closed = False

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        return 0, len(self.clusters.log(self.cluster, tp.topic, tp.partition))

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = {(tp.topic, tp.partition): 0 if tp.offset == OFFSET_BEGINNING else tp.offset for tp in tps}

    def unassign(self) -> None:
        self.positions = {}

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Message]:
        out: list[Message] = []
        for (topic, partition), at in list(self.positions.items()):
            log = self.clusters.log(self.cluster, topic, partition)
            if at >= len(log):
                continue
            while at < len(log) and len(out) < num_messages:
                if log[at] is not None:
                    out.append(message(topic, partition, at, log[at]))
                at += 1
            self.positions[(topic, partition)] = at
            if at >= len(log):
                out.append(message(topic, partition, at, eof=True))
        return out

    def poll(self, timeout: float = 0) -> Message | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    """Writes at once; acknowledges (runs the delivery callbacks) on poll and flush."""

    def __init__(self, clusters: FakeClusters, cluster: str):
        self.clusters, self.cluster = clusters, cluster
        self.pending: list[tuple[Any, Message]] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = 0,
        on_delivery: Any = None,
        callback: Any = None,  # confluent-kafka's positional order: the writer passes its arguments positionally
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        on_delivery = on_delivery or callback
        log = self.clusters.log(self.cluster, topic, partition)
        log.append(Rec(key, value, list(headers) if headers else None, timestamp))
        if on_delivery is not None:
            self.pending.append((on_delivery, message(topic, partition, len(log) - 1, log[-1])))

    def __len__(self) -> int:
        return len(self.pending)

    def poll(self, timeout: float = 0) -> int:
        done, self.pending = self.pending, []
        for callback, msg in done:
            callback(None, msg)
        return len(done)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


SPEC = {
    "src_cluster": "src",
    "src_props": {"bootstrap.servers": "src:9092"},
    "dst_cluster": "dst",
    "dst_props": {"bootstrap.servers": "dst:9092"},
    "src_uuid": SRC_UUID,
    "dst_uuid": DST_UUID,
    "dst_path": "/dst/s",
    "src_path": "/src/s",
    "first_exit": False,
}


def record(i: int) -> Rec:
    return Rec(b"k%d" % i, b"v%d" % i, [("user", b"h")], 1_700_000_000_000 + i)


def copy_item(end: int, stable: bool = True) -> dict[str, Any]:
    return {"topic": "t", "partition": 0, "src": SRC_KT, "dst": DST_KT, "end": end, "stable": stable}


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


def diff_item(src_end: int, dst_end: int) -> dict[str, Any]:
    return {"topic": "t", "partition": 0, "src": SRC_KT, "dst": DST_KT, "src_end": src_end, "dst_end": dst_end}


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
