"""copystream's and diffstreams' per-partition work with fake Kafka clients: each partition a list where an offset is a
record or None (an offset no reader sees: a transaction marker, an aborted record); the fakes answer the few calls the
tasks make of a consumer and a producer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

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


def diff_item(src_end: int, dst_end: int) -> dict[str, Any]:
    return {"topic": "t", "partition": 0, "src": SRC_KT, "dst": DST_KT, "src_end": src_end, "dst_end": dst_end}
