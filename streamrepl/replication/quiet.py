"""Quiet feeds: source partitions with no records for a while are read by a second consumer whose fetches wait long.

A broker serves every fetch of a consumer for all its partitions; what an idle partition costs grows with how often
it is fetched. The feeds that carry records stay in the link's consumer, whose short fetch wait keeps latency low
under load; a feed quiet for QUIET_SECONDS moves to the link's quiet consumer (fetch.wait.max.ms from
kafka.idle_fetch_wait_ms: long where the broker makes that cheap without delaying an arriving record), and moves
back as soon as a record comes. Both read from the writer's next offset, so nothing is skipped or read twice by the
move: the records the first consumer had fetched ahead for the partition are dropped with its assignment.

Only a unit fed by one link, not throttled, with every delivery acknowledged, goes quiet: several feeds into one
partition and throttled links keep their one consumer (their pause/seek state lives there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import kafka
from ..kafka import Consumer, TopicPartition
from ..registry import Cluster

#: how long a feed must have brought no record before it moves to the quiet consumer
QUIET_SECONDS = 5.0


def reports_lost_connection(cluster: Cluster, on_lost: Callable[[str], None] | None) -> dict[str, Any]:
    """The consumer setting that calls `on_lost(cluster name)` when the consumer lost its connection to a broker of
    `cluster` (from within its consume), so that the feeds it reads are compared with their replicas again."""
    if on_lost is None:
        return {}
    name = cluster.name

    def error_cb(err: kafka.KafkaError) -> None:
        # Runs inside librdkafka: records the fact, nothing that could raise.
        if err.code() in kafka.TRANSPORT:
            on_lost(name)

    return {"error_cb": error_cb}


def quiet_source_consumer(cluster: Cluster, on_lost: Callable[[str], None] | None = None) -> Consumer:
    """A consumer of quiet source partitions: its fetches wait as long as the broker makes that cheap. It reports a
    lost connection like the busy one (partitions.source_consumer): a quiet feed must not wake up on records that
    a restarted broker took at offsets the replica already holds."""
    extra: dict[str, Any] = {"fetch.wait.max.ms": kafka.idle_fetch_wait_ms(cluster)}
    extra.update(reports_lost_connection(cluster, on_lost))
    return kafka.consumer(cluster, **extra)


class QuietFeeds:
    """The quiet consumers of one gateway (link name -> consumer) and which feeds they hold ((link, topic, partition)).

    `new_consumer` makes a quiet consumer for a source cluster."""

    def __init__(self, new_consumer: Callable[[Cluster], Consumer] = quiet_source_consumer):
        self.consumers: dict[str, Consumer] = {}
        self.held: set[tuple[str, str, int]] = set()
        #: link name -> how many of its feeds are quiet
        self.count: dict[str, int] = {}
        self._new_consumer = new_consumer

    def holds(self, name: str, tp: TopicPartition) -> bool:
        return (name, tp.topic, tp.partition) in self.held

    def consumer_of(self, name: str, tp: TopicPartition, busy: Consumer | None) -> Consumer | None:
        """The consumer that reads the feed now."""
        return self.consumers.get(name) if self.holds(name, tp) else busy

    def quieten(self, name: str, cluster: Cluster, tp: TopicPartition, busy: Consumer, offset: int) -> None:
        """Move a feed from its link's consumer to the quiet one, to read on at `offset`."""
        busy.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
        c = self.consumers.get(name)
        if c is None:
            c = self.consumers[name] = self._new_consumer(cluster)
        c.incremental_assign([TopicPartition(tp.topic, tp.partition, offset)])
        self.held.add((name, tp.topic, tp.partition))
        self.count[name] = self.count.get(name, 0) + 1

    def wake(self, name: str, tp: TopicPartition, busy: Consumer, offset: int) -> None:
        """Move a quiet feed that brought records back to its link's consumer, to read on at `offset`."""
        self.release(name, tp)
        busy.incremental_assign([TopicPartition(tp.topic, tp.partition, offset)])

    def release(self, name: str, tp: TopicPartition) -> None:
        """The quiet consumer stops reading the feed (it wakes, or its partition is let go)."""
        if not self.holds(name, tp):
            return
        self.held.discard((name, tp.topic, tp.partition))
        self.count[name] -= 1
        c = self.consumers.get(name)
        if c is not None:
            try:
                c.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            except Exception:  # noqa: BLE001 - already gone
                pass

    def close_unused(self, live: set[str]) -> None:
        for name in [n for n in self.consumers if n not in live]:
            self.consumers.pop(name).close()
            self.held = {h for h in self.held if h[0] != name}
            self.count.pop(name, None)

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()
        self.consumers.clear()
        self.held.clear()
        self.count.clear()


def due(last_active: float, now: float | None = None) -> bool:
    return (now if now is not None else time.monotonic()) - last_active > QUIET_SECONDS
