"""The divergence tests' fakes: a source and a replica partition as lists of records, read by LogConsumer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streamrepl import policy
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication.links import Link

from .fakes import Message, RecordingProducer

SRC, DST = StreamPath("sf", "/s"), StreamPath("ny", "/r")
SKT, DKT = kafka_topic_name(SRC, "t"), kafka_topic_name(DST, "t")
ORIGIN_SRC = [(policy.ORIGIN, b"SRC")]


def msg(
    offset: int,
    value: bytes | None,
    ts: int = 1_700_000_000_000,
    headers: Any = None,
    topic: str = SKT,
    error: KafkaError | None = None,
) -> Message:
    """A record of `topic` (partition 0) whose key is its value."""
    return Message(offset, value, key=value, topic=topic, headers=headers, timestamp=ts, error=error)


def history(n: int, tag: str = "v", ts: int = 1_700_000_000_000, **kw: Any) -> list[Message]:
    return [msg(o, f"{tag}{o}".encode(), ts + o, **kw) for o in range(n)]


class LogConsumer:
    """A consumer over fixed partitions: reads (assign/consume/poll, watermarks) and feeds (incremental_assign)."""

    def __init__(self, logs: dict[str, list[Message]]):
        self.logs = logs
        self.pos: dict[str, int] = {}
        self.queued: list[Message] = []
        self.assigned: list[tuple[str, int, int]] = []

    down = False
    #: the requests that would each cost a round trip to the broker: watermark queries, ListOffsets, assignments
    #: (each brings a fetch)
    requests = 0

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        self.requests += 1
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        log = self.logs.get(tp.topic, [])
        return (0, log[-1].offset() + 1 if log else 0)

    def offsets_for_times(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        """ListOffsets' earliest (-2) and latest (-1) only."""
        self.requests += 1
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        out = []
        for tp in tps:
            log = self.logs.get(tp.topic, [])
            end = log[-1].offset() + 1 if log else 0
            out.append(
                SimpleNamespace(
                    topic=tp.topic, partition=tp.partition, offset=0 if tp.offset == -2 else end, error=None
                )
            )
        return out

    def assign(self, tps: list[Any]) -> None:
        self.requests += 1
        self.pos = {tp.topic: tp.offset for tp in tps}

    def unassign(self) -> None:
        self.pos = {}

    def consume(self, n: int = 1, timeout: float = 0) -> list[Message]:
        if self.queued:
            out, self.queued = self.queued[:n], self.queued[n:]
            return out
        out: list[Message] = []
        for topic, at in self.pos.items():
            recs = [m for m in self.logs.get(topic, []) if m.offset() >= at][:n]
            end = recs[-1].offset() + 1 if recs else at
            self.pos[topic] = end
            out += recs + [msg(end, None, topic=topic, error=KafkaError(KafkaError._PARTITION_EOF))]
        return out

    def poll(self, timeout: float = 0) -> Message | None:
        got = self.consume(1)
        return got[0] if got else None

    def incremental_assign(self, tps: list[Any]) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def incremental_unassign(self, tps: list[Any]) -> None:
        pass

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        """The topics of `logs`, with one partition each (a topic read again after its feed stopped is asked for)."""
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        found = {t: SimpleNamespace(error=None, partitions={0: None}) for t in self.logs if topic in (None, t)}
        return SimpleNamespace(topics=found)

    def seek(self, tp: Any) -> None:
        pass

    def close(self) -> None:
        pass


class Producer(RecordingProducer):
    @property
    def written(self) -> list[dict[str, Any]]:
        return self.sent


def link() -> Link:
    return Link(SRC, Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"}), "SRC", DST, "DST", False, "lz4", 0)


def replicated(n: int) -> list[Message]:
    return history(n, topic=DKT, headers=ORIGIN_SRC)
