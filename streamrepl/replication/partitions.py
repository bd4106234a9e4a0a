"""The partition table: the replica partitions this gateway applies now, and the source partitions feeding them.

A replica partition (a Unit) is acquired at its real end (resume_point), fed by one source partition per link
that runs into it, dropped when its slot or its links go away, and failed (kept out until the gateway restarts,
`replica list` says why) on a conflict or a write error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import kafka
from ..applier import OffsetPreservingWriter, ReplicaConflict, resume_point
from ..kafka import Consumer, KafkaException, Producer, TopicPartition
from ..paths import kafka_topic_name
from ..registry import Cluster
from .links import Link, Plan, Unit
from .stats import GatewayStats

log = logging.getLogger("streamrepl.gateway")

#: how long a source fetch waits for records at the broker (Tansu answers at the deadline, not on arrival)
SOURCE_FETCH_WAIT_MS = 10


def source_consumer(cluster: Cluster) -> Consumer:
    """A consumer of source partitions, tuned for latency (short fetch waits) and long queues."""
    extra: dict[str, Any] = {"fetch.wait.max.ms": SOURCE_FETCH_WAIT_MS, "queued.min.messages": 200000}
    return kafka.consumer(cluster, **extra)


@dataclass
class UnitState:
    unit: Unit
    writer: OffsetPreservingWriter
    feeds: dict[str, tuple[Link, TopicPartition]] = field(default_factory=dict)  # link name -> source tp
    throttled_until: float = 0.0
    reported: tuple[str, int] = ("", -1)
    #: feeds whose source end was compared with the replica's (see recheck_lagging_feeds)
    rechecked: set[str] = field(default_factory=set)
    #: when records were last handed to the writer (monotonic; 0: never, since acquired)
    last_write: float = 0.0


def _no_report(unit: Unit, error: str) -> None:
    pass


class Partitions:
    """`reader` reads the replica partitions (their ends, their last records); `new_source_consumer` makes the
    one consumer per link that reads its source partitions; `on_fail(unit, error)` reports a failed one."""

    def __init__(
        self,
        reader: Consumer,
        stats: GatewayStats,
        new_source_consumer: Callable[[Cluster], Consumer] = source_consumer,
        on_fail: Callable[[Unit, str], None] = _no_report,
    ):
        self.reader = reader
        self.stats = stats
        self.units: dict[Unit, UnitState] = {}
        self.errored: dict[Unit, str] = {}
        self.sources: dict[str, Consumer] = {}  # link name -> consumer of the source partitions
        self.by_source: dict[tuple[str, str, int], Unit] = {}  # (link, src topic, partition) -> unit
        #: source consumer name -> the link it reads (rebuilt with each plan)
        self.links_by_source: dict[str, Link] = {}
        self._new_source_consumer = new_source_consumer
        self.on_fail = on_fail

    def _source_consumer(self, link: Link) -> Consumer:
        c = self.sources.get(link.name)
        if c is None:
            c = self._new_source_consumer(link.src_cluster)
            self.sources[link.name] = c
        return c

    def acquire(self, unit: Unit, feeds: list[tuple[Link, str]], producer: Producer) -> None:
        dst_kt = kafka_topic_name(unit.dst, unit.topic)
        dst_uuid = feeds[0][0].dst_uuid
        end, origin = resume_point(self.reader, TopicPartition(dst_kt, unit.partition), dst_uuid)
        writer = OffsetPreservingWriter(
            producer, dst_kt, unit.partition, end, dst_uuid, feeds[0][0].src_uuid, origin, label=unit.key
        )
        state = UnitState(unit, writer)
        self.units[unit] = state
        for link, src_kt in feeds:
            self._add_feed(state, link, src_kt)
        log.info("acquired %s at offset %d", unit.key, end)

    def _add_feed(self, state: UnitState, link: Link, src_kt: str) -> None:
        tp = TopicPartition(src_kt, state.unit.partition, state.writer.next)
        self._source_consumer(link).incremental_assign([tp])
        state.feeds[link.name] = (link, tp)
        self.by_source[(link.name, src_kt, tp.partition)] = state.unit

    def _remove_feed(self, state: UnitState, name: str) -> None:
        link, tp = state.feeds.pop(name)
        c = self.sources.get(name)
        if c is not None:
            try:
                c.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.by_source.pop((name, tp.topic, tp.partition), None)

    def drop(self, unit: Unit) -> None:
        state = self.units.pop(unit, None)
        if state is None:
            return
        for name in list(state.feeds):
            self._remove_feed(state, name)

    def drop_all(self) -> None:
        for unit in list(self.units):
            self.drop(unit)

    def fail(self, unit: Unit, error: str) -> None:
        log.error("%s", error)
        self.stats.failures += 1
        self.errored[unit] = error
        self.drop(unit)
        self.on_fail(unit, error)

    def follow(
        self, plan: Plan, present: set[str], wanted: dict[Unit, list[tuple[Link, str]]], ready: bool, producer: Producer
    ) -> None:
        """Own exactly the `wanted` units of the plan whose replica topic is `present`: drop the others (their
        queued records delivered first), acquire the new ones when `ready`, follow the feeds of the others."""
        for unit in [u for u in self.units if u not in wanted]:
            producer.flush(30)
            self.drop(unit)
        for unit, feeds in wanted.items():
            if unit in self.errored:
                continue
            if kafka_topic_name(unit.dst, unit.topic) not in present:
                continue
            state = self.units.get(unit)
            if state is None:
                if not ready:
                    continue
                try:
                    self.acquire(unit, feeds, producer)
                except ReplicaConflict as e:
                    self.fail(unit, str(e))
                except Exception as e:  # noqa: BLE001 - retried with the next plan
                    log.warning("cannot start %s yet: %s", unit.key, e)
                continue
            names = {link.name for link, _ in feeds}
            for name in [n for n in state.feeds if n not in names]:
                self._remove_feed(state, name)
            for link, src_kt in feeds:
                if link.name not in state.feeds:
                    self._add_feed(state, link, src_kt)
                elif state.feeds[link.name][0] != link:
                    # The link's settings changed (`replica edit -throttle ...`): follow them.
                    state.feeds[link.name] = (link, state.feeds[link.name][1])
        self.recheck_lagging_feeds()
        live = {link.name for link in plan.links}
        for name in [n for n in self.sources if n not in live]:
            self.sources.pop(name).close()
        self.links_by_source = {
            name: next(state.feeds[name][0] for state in self.units.values() if name in state.feeds)
            for name in self.sources
            if any(name in state.feeds for state in self.units.values())
        }

    def recheck_lagging_feeds(self) -> None:
        """A feed starts at the replica partition's end. When its source ends before that, the replica's
        records up to the source's end must have come from it (or be the replica's own): read the source's
        last records again so that the writer checks their origin. Otherwise the same topic written in two
        streams goes unnoticed for as long as the source stays behind. Uses the watermark the last fetch
        brought (no request); each feed is looked at once per acquisition."""
        for state in self.units.values():
            for name, (_, tp) in state.feeds.items():
                c = self.sources.get(name)
                if name in state.rechecked or c is None:
                    continue
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                except KafkaException:
                    continue
                if high < 0:
                    continue  # no fetch answered yet
                state.rechecked.add(name)
                if 0 < high < state.writer.next:
                    c.seek(TopicPartition(tp.topic, tp.partition, high - 1))

    def pending(self) -> dict[str, int]:
        """Source records not applied yet, per link, from the watermarks of the last fetches (no request).
        Called from the metrics thread: works on snapshots, and a consumer closed meanwhile counts nothing."""
        out: dict[str, int] = {}
        for state in list(self.units.values()):
            for name, (_, tp) in list(state.feeds.items()):
                c = self.sources.get(name)
                if c is None:
                    continue
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                except (KafkaException, RuntimeError):
                    continue
                out[name] = out.get(name, 0) + max(0, high - state.writer.next)
        return out

    def close(self) -> None:
        """Close the source consumers and the reader."""
        for c in self.sources.values():
            c.close()
        self.sources.clear()
        self.reader.close()
