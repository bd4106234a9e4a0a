"""The gateway's mover (replication/mover.py) with fake clients: the fake producer and consumer, the fake watch
of the source ends, and a rig holding a mover over them. Shared by the unit tests of the mover, quiet feeds and the gateway."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication.links import Link, Plan, Unit
from streamrepl.replication.mover import Mover
from streamrepl.replication.quiet import EndWatch, QuietFeeds
from streamrepl.replication.stats import GatewayStats
from support.fakes import Message

SRC, DST = StreamPath("sf", "/s"), StreamPath("ny", "/s")


def msg(topic: str, partition: int, offset: int, key: bytes | None, headers: Any = None) -> Message:
    """A record as the mover reads it; its value is its key."""
    return Message(offset, key, key=key, topic=topic, partition=partition, headers=headers)


class FakeProducer:
    """Appends each record to its partition at the next offset; deliveries are reported on poll/flush."""

    def __init__(self) -> None:
        self.log: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._deliveries: list[tuple[Callable[..., None], Message]] = []
        #: records produced and not acknowledged yet (what len() of a producer counts)
        self._unacked = 0

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        # confluent-kafka's positional order: the writer passes its arguments positionally (a cost per record)
        records = self.log.setdefault((topic, partition), [])
        records.append({"key": key, "headers": headers})
        self._unacked += 1
        if on_delivery or callback:
            self._deliveries.append((on_delivery or callback, msg(topic, partition, len(records) - 1, key)))

    def __len__(self) -> int:
        return self._unacked

    def poll(self, timeout: float = 0) -> int:
        done, self._deliveries, self._unacked = self._deliveries, [], 0
        for cb, msg in done:
            cb(None, msg)
        return len(done)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        self._deliveries.clear()
        self._unacked = 0


class FakeConsumer:
    """A source consumer (records queued by the test) or the replica reader (empty replicas)."""

    def __init__(self) -> None:
        self.queued: list[Message] = []
        self.assigned: list[tuple[str, int, int]] = []
        self.paused: set[tuple[str, int]] = set()
        self.seeks: list[tuple[str, int, int]] = []
        #: the end requests made of it (the replica reader's end checks)
        self.asked: list[tuple[str, list[tuple[str, int]]]] = []
        #: librdkafka's position of each partition: the offset after the last record consumed, OFFSET_INVALID
        #: (-1001) while nothing was consumed since its assignment
        self.positions: dict[tuple[str, int], int] = {}

    def consume(self, n: int, timeout: float = 0) -> list[Message]:
        out = [m for m in self.queued if (m.topic(), m.partition()) not in self.paused][:n]
        self.queued = [m for m in self.queued if m not in out]
        for m in out:
            self.positions[(m.topic(), m.partition())] = m.offset() + 1
        return out

    def incremental_assign(self, tps: list[Any]) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in tps]
        for tp in tps:
            self.positions[(tp.topic, tp.partition)] = -1001

    def position(self, tps: list[Any]) -> list[Any]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001)) for tp in tps
        ]

    def incremental_unassign(self, tps: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in tps}
        self.assigned = [a for a in self.assigned if (a[0], a[1]) not in gone]
        self.queued = [m for m in self.queued if (m.topic(), m.partition()) not in gone]

    def pause(self, tps: list[Any]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[Any]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        self.asked.append(("watermarks", [(tp.topic, tp.partition)]))
        return (0, 0)

    def offsets_for_times(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        self.asked.append(("ends", [(tp.topic, tp.partition) for tp in tps]))
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in tps]

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        self.asked.append(("topics", [] if topic is None else [(topic, -1)]))
        # Every topic asked for exists, with one partition.
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})} if topic else {})

    def close(self) -> None:
        pass


class FakeEnds:
    """The client of an EndWatch (quiet.py): answers each partition's end from `ends` (0 when not set); `lose`
    reports a lost connection during the next request, as librdkafka's error_cb would."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.asked: list[list[tuple[str, int]]] = []
        self.on_lost: Callable[[str], None] = lambda cluster: None
        self.lose = False

    def offsets_for_times(self, tps: list[Any], timeout: float = 0) -> list[Any]:
        self.asked.append([(tp.topic, tp.partition) for tp in tps])
        if self.lose:
            self.lose = False
            self.on_lost("sf")
        return [TopicPartition(tp.topic, tp.partition, self.ends.get((tp.topic, tp.partition), 0)) for tp in tps]

    def poll(self, timeout: float = 0) -> None:
        return None

    def close(self) -> None:
        pass


def link(src: StreamPath = SRC, uuid: str = "SRC", throttle: bool = False) -> Link:
    return Link(src, Cluster(src.cluster, {"bootstrap.servers": "127.0.0.1:1"}), uuid, DST, "DST", throttle, "lz4", 0)


class Rig:
    """One replica partition ny:/s:t[0], fed by the given links, applied by a Mover on fakes."""

    def __init__(self, *links: Link, throttle_rate: float = 1000):
        #: one consumer per source cluster (a Kafka topic name does not say its cluster)
        self.sources = {lk.src.cluster: FakeConsumer() for lk in links}
        #: what the watches of quiet feeds' ends are told (quiet.py): one client for every source cluster
        self.ends = FakeEnds()
        self.source = self.sources[links[0].src.cluster]
        self.producer = FakeProducer()
        self.stats = GatewayStats("test")
        self.failed: list[tuple[Unit, str]] = []
        #: (unit, source of the link whose feed stopped, why) as the table reports them (UnitTable.clash)
        self.clashed: list[tuple[Unit, str, str]] = []
        self.mover = Mover.assemble(
            FakeConsumer(),  # type: ignore[arg-type]
            self.stats,
            lambda cluster, **_: self.sources[cluster.name],
            lambda: self.producer,  # type: ignore[arg-type,return-value]
            throttle_rate,
            lambda u, e: self.failed.append((u, e)),
            QuietFeeds(lambda cluster: EndWatch(self._ends_client, 0.1, start=False)),
            on_clash=lambda u, lk, e: self.clashed.append((u, str(lk.src), e)),
        )
        self.table, self.session = self.mover.table, self.mover.session
        self.unit = Unit(DST, "t", 0)
        plan = Plan(list(links), {self.unit: [(lk, kafka_topic_name(lk.src, "t")) for lk in links]}, {}, [])
        present = {kafka_topic_name(DST, "t")}
        self.table.follow(plan, present, plan.units, True, self.producer)  # type: ignore[arg-type]

    def _ends_client(self, on_lost: Callable[[str], None]) -> Any:
        self.ends.on_lost = on_lost
        return self.ends

    def look(self) -> None:
        """Two passes of the loop around one round of every end watch: the first tells them what to watch."""
        self.mover.move_once()
        for w in self.quiet.watches.values():
            w.round()
        self.mover.move_once()

    @property
    def quiet(self) -> QuietFeeds:
        assert self.mover.feeds.quiet is not None
        return self.mover.feeds.quiet

    def feed(self, src: StreamPath, offsets: list[int], headers: Any = None) -> None:
        kt = kafka_topic_name(src, "t")
        self.sources[src.cluster].queued += [msg(kt, 0, o, f"k{o}".encode(), headers) for o in offsets]

    def replica(self) -> list[dict[str, Any]]:
        return self.producer.log.get((kafka_topic_name(DST, "t"), 0), [])
