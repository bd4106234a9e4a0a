"""The partition table: the replica partitions this gateway applies now, and the source partitions feeding them.

A replica partition (a Unit) is acquired at its real end (resume_point), fed by one source partition per link
that runs into it, dropped when its slot or its links go away, and failed (kept out until the gateway restarts,
`replica list` says why) on a conflict, a write error, or a divergence: a source whose history changed under the
replica (divergence.py), checked when the partition is acquired and when a source is read below its end again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import discovery, kafka
from ..applier import OffsetPreservingWriter, origin_of_tail, replica_tail
from ..divergence import Divergence, Tail, check, compare, reads_source, resync_hint, tail_of
from ..kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from ..paths import kafka_topic_name
from ..registry import Cluster
from . import following
from .lanes import Lanes
from .links import Link, Plan, Unit
from .quiet import QuietFeeds, reports_lost_connection
from .stats import GatewayStats
from .topicids import TopicIds

log = logging.getLogger("streamrepl.gateway")

#: A partition whose source is read below the replica's end again is checked for divergence at most this often.
REREAD_CHECK_SECONDS = 5.0
#: How long a divergence check waits for a source; one that does not answer is asked again after RETRY_SECONDS
#: (its feed waits meanwhile: the loop must not stall on a source that is down).
CHECK_TIMEOUT = 2.0
RETRY_SECONDS = 5.0
#: How long a source consumer waits before it fetches again for a partition whose prefetched records were over
#: queued.min.messages (or queued.max.messages.kbytes). librdkafka's default, 1 s, starved the loop: it ran through
#: the prefetched records long before and slept until the fetches started again (1 KiB records: 70k/s, the loop
#: idle 30 % of the run; with 10 ms 108-142k/s, same brokers, same minutes; BENCHMARKS.md, issue 15). The wait is
#: a timer inside the client: no request is sent while the prefetch is full.
FETCH_QUEUE_BACKOFF_MS = 10
#: Up to this many topics new to a source consumer are asked for one by one; more (a gateway starting) in one listing.
INTRODUCE_ONE_BY_ONE = 8
#: How long the loop waits for a source cluster to say where the topics new to its consumer are (seconds).
INTRODUCE_TIMEOUT = 0.5
#: The reader of the replica partitions, as TopicIds names it (the source consumers go by their lanes, "cluster#k")
READER = "reader"


def probe_name(cluster: str) -> str:
    """The divergence probe of a source cluster, as TopicIds names it."""
    return f"probe {cluster}"


def source_consumer(cluster: Cluster, on_lost: Callable[[str], None] | None = None) -> Consumer:
    """A consumer of the source partitions that carry records: long queues, and fetches that wait no longer than
    the broker lets a record that arrives meanwhile wait (kafka.busy_fetch_wait_ms). Quiet ones: quiet.py.
    `on_lost(cluster name)` is called (from within its consume) when it lost its connection to a broker."""
    discovery.learn_cached(cluster)
    extra: dict[str, Any] = {
        "fetch.wait.max.ms": kafka.busy_fetch_wait_ms(cluster),
        "queued.min.messages": 200000,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    extra.update(reports_lost_connection(cluster, on_lost))
    return kafka.consumer(cluster, **extra)


class NewTopics:
    """Source consumers are asked about the topics assigned to them for the first time. librdkafka fetches a
    partition only once it knows its topic's leader, and asks for a topic that was assigned without being known
    only at its next scan of unknown topics, once a second: a new topic's first record reached the replica 0.65-0.77
    s after its partition was assigned (librdkafka 2.16 debug log: 'metadata information unknown' 0.70 s after the
    assignment, fetched 11 ms after the answer). The answer to the application's own request tells the consumer the
    leader at once."""

    def __init__(self) -> None:
        #: consumer (its lane) -> the source topics it was told of, and those it must be told of
        self.told: dict[str, set[str]] = {}
        self.pending: dict[str, set[str]] = {}

    def assign(self, consumer: Consumer, lane: str, tp: TopicPartition) -> None:
        """`consumer.incremental_assign([tp])`; its topic, when new to it, is asked for at the next `introduce`."""
        consumer.incremental_assign([tp])
        self.expect(lane, tp)

    def expect(self, lane: str, tp: TopicPartition) -> None:
        """The lane's consumer will be given `tp` (a feed that started quiet, when it wakes): its topic, when new to
        it, is asked for at the next `introduce`, so that the wake does not wait for librdkafka's scan."""
        if tp.topic not in self.told.get(lane, ()):
            self.pending.setdefault(lane, set()).add(tp.topic)

    def introduce(self, consumers: dict[str, Consumer]) -> None:
        """Ask each consumer (lane -> consumer) about its new topics (a failure is left to the consumer's own scan).
        A lane whose consumer is gone is forgotten: a new one for it knows nothing."""
        self.told = {name: topics for name, topics in self.told.items() if name in consumers}
        pending, self.pending = self.pending, {}
        for name, topics in pending.items():
            c = consumers.get(name)
            if c is None:
                continue
            self.told.setdefault(name, set()).update(topics)
            try:
                if len(topics) <= INTRODUCE_ONE_BY_ONE:
                    for topic in topics:
                        c.list_topics(topic, timeout=INTRODUCE_TIMEOUT)
                else:
                    c.list_topics(timeout=INTRODUCE_TIMEOUT)
            except Exception as e:  # noqa: BLE001 - only a head start: the consumer's own scan finds them
                log.debug("could not ask for the topics new to %s's consumer: %s", name, e)


@dataclass
class UnitState:
    unit: Unit
    writer: OffsetPreservingWriter
    feeds: dict[str, tuple[Link, TopicPartition]] = field(default_factory=dict)  # link name -> source tp
    throttled_until: float = 0.0
    reported: tuple[str, int] = ("", -1)
    #: feeds whose source end was compared with the replica's (see watermarks.recheck_lagging_feeds)
    rechecked: set[str] = field(default_factory=set)
    #: when records were last handed to the writer (monotonic; 0: never, since acquired)
    last_write: float = 0.0
    #: the record at writer.next - 1 as replication sees it (None: not known), for the divergence checks
    tail: Tail | None = None
    #: when the source was last checked for divergence (monotonic)
    checked_at: float = 0.0
    #: feeds not started yet because their source could not be compared with the replica (link name -> feed)
    unverified: dict[str, tuple[Link, str]] = field(default_factory=dict)
    #: when the unit was acquired or its feed last moved between consumers (monotonic; see quiet.py)
    active_at: float = field(default_factory=time.monotonic)

    @property
    def sole_feed(self) -> bool:
        return len(self.feeds) + len(self.unverified) == 1


def _no_report(unit: Unit, error: str) -> None:
    pass


class Partitions:
    """`reader` reads the replica partitions (their ends, their last records); `new_source_consumer` makes the
    consumers that read the source partitions, one per source cluster (lanes.py); `on_fail(unit, error)` reports a
    failed one."""

    def __init__(
        self,
        reader: Consumer,
        stats: GatewayStats,
        new_source_consumer: Callable[..., Consumer] = source_consumer,
        on_fail: Callable[[Unit, str], None] = _no_report,
        quiet: QuietFeeds | None = None,
        new_probe: Callable[..., Consumer] | None = None,
    ):
        self.reader, self.stats, self.on_fail = reader, stats, on_fail
        #: makes the consumers that read single source records for the divergence checks (default: as the feeds)
        self._new_probe = new_probe or new_source_consumer
        self.units: dict[Unit, UnitState] = {}
        self.errored: dict[Unit, str] = {}
        #: lane (lanes.py: one per source cluster, more where links share a source stream) -> its consumer
        self.sources: dict[str, Consumer] = {}
        self.lanes = Lanes()
        #: source cluster name -> a consumer that reads single source records (divergence checks); never feeds a writer
        self.probes: dict[str, Consumer] = {}
        #: link name -> when its source, which did not answer a check, is asked again (monotonic)
        self._retry_at: dict[str, float] = {}
        self.by_source: dict[tuple[str, str, int], Unit] = {}  # (link, src topic, partition) -> unit
        #: link name -> how many feeds its consumer holds (quiet ones included: quiet.py)
        self.feed_count: dict[str, int] = {}
        #: link name -> the link, for the links with feeds (rebuilt with each plan)
        self.links: dict[str, Link] = {}
        self._new_source_consumer = new_source_consumer
        #: (replica topic, partition) -> where this gateway's producer left it, for the partitions it let go
        self.left_at: dict[tuple[str, int], int] = {}
        #: why the producer must be replaced before a partition is taken up again ("" when it need not be)
        self.stale_producer = ""
        #: the feeds that brought no records for a while, read with long fetch waits (None: every feed stays put)
        self.quiet = quiet
        #: source clusters whose consumer lost its connection since the loop last looked (see source_lost)
        self._lost_sources: set[str] = set()
        self.new_topics = NewTopics()
        #: whether the feeds started now start quiet (many partitions taken up at once: following.START_QUIET_AT)
        self.start_quiet = False
        #: the topics the reader, the lanes' consumers and the probes let go: asked for before they are read again
        self.topic_ids = TopicIds()

    def all_quiet(self) -> bool:
        """Whether no source partition is fetched now: every feed is quiet (quiet.py) and none waits for its source."""
        return (
            self.quiet is not None
            and sum(self.quiet.count.values()) >= sum(self.feed_count.values())
            and not any(state.unverified for state in self.units.values())
        )

    def lane_quiet(self, lane: str) -> bool:
        """Whether every feed the lane's consumer reads is quiet (quiet.py): it holds nothing to read."""
        quiet = self.quiet
        return quiet is not None and all(
            quiet.count.get(name, 0) >= self.feed_count.get(name, 0) for name in self.lanes.links.get(lane, ())
        )

    def consumer_of(self, link_name: str) -> Consumer | None:
        """The consumer that reads the link's feeds (None: it has none)."""
        lane = self.lanes.of.get(link_name)
        return self.sources.get(lane) if lane is not None else None

    def _source_consumer(self, link: Link) -> tuple[str, Consumer]:
        lane = self.lanes.lane(link)
        c = self.sources.get(lane)
        if c is None:
            c = self._new_source_consumer(link.src_cluster)
            self.sources[lane] = c
        return lane, c

    def _probe(self, link: Link) -> Consumer:
        # One per source cluster, not per link: it reads one record at a time, from the loop's own thread, and every
        # librdkafka client costs CPU while idle (a gateway had three clients a link: 60 at 20 links).
        c = self.probes.get(link.src_cluster.name)
        if c is None:
            c = self._new_probe(link.src_cluster)
            self.probes[link.src_cluster.name] = c
        return c

    def acquire(self, unit: Unit, feeds: list[tuple[Link, str]], producer: Producer) -> None:
        dst_kt = kafka_topic_name(unit.dst, unit.topic)
        dst_uuid = feeds[0][0].dst_uuid
        if self.topic_ids.ready(READER, self.reader, dst_kt) is not True:
            # Let go before, and its cluster does not say what it is now: tried again with the next plan.
            log.warning("cannot start %s yet: %s does not say what its topic is now", unit.key, unit.dst.cluster)
            return
        end, last = replica_tail(self.reader, TopicPartition(dst_kt, unit.partition))
        if end < self.left_at.get((dst_kt, unit.partition), 0):
            # Re-created meanwhile (`replica resync`): the producer's sequence would be fatally refused; replace it.
            self.stale_producer = f"{unit.key} ends at {end}, below offset {self.left_at[(dst_kt, unit.partition)]}"
            return
        writer = OffsetPreservingWriter(
            producer,
            dst_kt,
            unit.partition,
            end,
            dst_uuid,
            feeds[0][0].src_uuid,
            origin_of_tail(last, dst_uuid),
            label=unit.key,
        )
        state = UnitState(unit, writer, tail=tail_of(last, dst_uuid) if last is not None else None)
        state.unverified = {link.name: (link, src_kt) for link, src_kt in feeds}
        if self.verify_feeds(state):
            self.units[unit] = state
            log.info("acquired %s at offset %d", unit.key, end)

    def verify_feeds(self, state: UnitState) -> bool:
        """Start the unverified feeds whose source still holds the replica's history (False: it does not, and
        the unit failed). A source that does not answer now is asked again later (retry_unverified)."""
        now = time.monotonic()
        for name, (link, src_kt) in list(state.unverified.items()):
            if max(self._retry_at.get(name, 0.0), self._retry_at.get(f"{name} {state.unit.key}", 0.0)) > now:
                continue
            verdict = self.check_source(state, link, TopicPartition(src_kt, state.unit.partition))
            if verdict is True:
                lane, consumer = self._source_consumer(link)
                verdict = self.topic_ids.ready(lane, consumer, src_kt)
            if verdict is False:
                return False
            if verdict is not True:
                # A source cluster that does not answer is asked again for all its partitions at once; a
                # partition that cannot be read (its topic missing) only for itself.
                self._retry_at[name if verdict == "down" else f"{name} {state.unit.key}"] = now + RETRY_SECONDS
                continue
            del state.unverified[name]
            self._add_feed(state, link, src_kt)
            self.links[name] = link
        return True

    def source_lost(self, cluster: str) -> None:
        """A source consumer lost its connection to a broker of `cluster` (called from inside its consume)."""
        self._lost_sources.add(cluster)

    def recheck_lost_sources(self) -> None:
        """The feeds of a source cluster whose connection was lost stop and are compared with their replicas again
        before they go on (verify_feeds). A broker that crashed can come back without records it had acknowledged
        and replicated, and take new ones at their offsets; read on from the replica's end, the feed would append
        the new history after the old one and no check would see it. Checked before anything is fetched from the
        broker that came back, the replica's last record differs from the source's there: a divergence."""
        if not self._lost_sources:
            return
        lost, self._lost_sources = self._lost_sources, set()
        for state in self.units.values():
            for name, (link, tp) in list(state.feeds.items()):
                if link.src_cluster.name in lost:
                    log.info("%s: lost the connection to source %s; comparing with it again", state.unit.key, link.src)
                    self.remove_feed(state, name)
                    state.unverified[name] = (link, tp.topic)

    def retry_unverified(self) -> None:
        """Called from the loop: the feeds whose source did not answer when their partition was acquired, or
        whose source cluster was lost meanwhile (recheck_lost_sources)."""
        self.recheck_lost_sources()
        for unit, state in list(self.units.items()):
            if state.unverified and unit not in self.errored:
                self.verify_feeds(state)

    def _add_feed(self, state: UnitState, link: Link, src_kt: str) -> None:
        tp = TopicPartition(src_kt, state.unit.partition, state.writer.next)
        lane, consumer = self._source_consumer(link)  # also for a feed that starts quiet: it is woken into it
        self.lanes.route(lane, src_kt, link.name)
        alone = not state.feeds and not state.unverified
        if self.start_quiet and self.quiet is not None and alone and not link.throttle and state.writer.idle():
            self.new_topics.expect(lane, tp)
            self.quiet.hold(link.name, link.src_cluster, tp, state.writer.next)
        else:
            self.new_topics.assign(consumer, lane, tp)
        state.feeds[link.name] = (link, tp)
        self.by_source[(link.name, src_kt, tp.partition)] = state.unit
        self.feed_count[link.name] = self.feed_count.get(link.name, 0) + 1

    def remove_feed(self, state: UnitState, name: str) -> None:
        link, tp = state.feeds.pop(name)
        c = self.consumer_of(name)
        quiet = self.quiet is not None and self.quiet.holds(name, tp)
        if self.quiet is not None:
            self.quiet.release(name, tp)  # also forgets the end its last wake was for
        if not quiet and c is not None:
            try:
                c.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.by_source.pop((name, tp.topic, tp.partition), None)
        self.feed_count[name] -= 1
        lane = self.lanes.of.get(name)
        if lane is not None:
            self.topic_ids.let_go(lane, tp.topic)
        self.topic_ids.let_go(probe_name(link.src_cluster.name), tp.topic)

    def drop(self, unit: Unit) -> None:
        state = self.units.pop(unit, None)
        if state is None:
            return
        self.left_at[(state.writer.topic, state.writer.partition)] = state.writer.next
        self.topic_ids.let_go(READER, state.writer.topic)
        for name in list(state.feeds):
            self.remove_feed(state, name)

    def drop_all(self) -> None:
        for unit in list(self.units):
            self.drop(unit)

    def check_source(self, state: UnitState, link: Link, tp: TopicPartition) -> bool | str:
        """Does the source still hold what the replica holds (divergence.check)? On a divergence the unit fails
        (False). When the source cannot be read now: "down" (its cluster does not answer) or "unread"."""
        state.checked_at = time.monotonic()
        w = state.writer
        probe = self._probe(link)
        if reads_source(w.next, state.tail, w.dst_uuid):
            ready = self.topic_ids.ready(probe_name(link.src_cluster.name), probe, tp.topic)
            if ready is not True:
                return ready
        try:
            div = check(probe, tp, w.next, state.tail, link.src_uuid, w.dst_uuid, state.sole_feed, CHECK_TIMEOUT)
        except (KafkaException, TimeoutError) as e:
            log.warning("%s: cannot compare with its source %s now: %s", state.unit.key, link.src, e)
            # A probe that saw its source broker restart may keep the partition unknown for minutes: make a new one.
            self.close_probe(link.src_cluster.name)
            return "down" if isinstance(e, TimeoutError) or kafka.is_transport(e) else "unread"
        if div is None:
            return True
        self.diverged(state.unit, link, div)
        return False

    def close_probe(self, cluster: str) -> None:
        probe = self.probes.pop(cluster, None)
        if probe is not None:
            probe.close()
            self.topic_ids.closed(probe_name(cluster))

    def close_lane(self, lane: str) -> None:
        """Close the consumer of a lane that reads no link any more."""
        self.sources.pop(lane).close()
        self.topic_ids.closed(lane)

    def check_reread(self, state: UnitState, link: Link, batch: list[Message]) -> bool:
        """Source records below the replica's end arrived (a feed seeks back, or the source reset the feed's
        position because the offset it asked for is out of range): compare them with what the replica holds.
        The record at the replica's last offset, when it is among them, is compared here; without it, the
        source's end is checked (a request; at most every REREAD_CHECK_SECONDS per partition, while nothing is
        in flight; a check not made now is made before the feed goes on). False when the batch must not be written
        (the partition failed, or its feed waits for that check)."""
        w = state.writer
        want = w.next - 1
        if state.tail is None or state.tail.origin == w.dst_uuid:
            return True
        first, last = batch[0].offset() or 0, batch[-1].offset() or 0
        if first <= want <= last:
            rec = next((m for m in batch if m.offset() == want), None)
            if rec is None:
                return True  # no visible record there (a marker, compacted away): nothing to compare
            source = tail_of(rec, link.src_uuid)
            # The source's end is not known here: it is at least past this batch.
            div = compare(state.tail, w.next, source, last + 1, link.src_uuid, w.dst_uuid, state.sole_feed)
            if div is not None:
                self.diverged(state.unit, link, div)
                return False
            return True
        # With several feeds, a source behind the replica's end is common (a second path): not checked here.
        if last < want and state.sole_feed:
            if w.idle() and time.monotonic() - state.checked_at > REREAD_CHECK_SECONDS:
                return self.check_source(state, link, state.feeds[link.name][1]) is not False
            # Checked a moment ago, or writes in flight: the feed stops and is compared with its source before it goes
            # on (verify_feeds, at the next sweep), as after a lost connection. Let go on unchecked, a source that
            # shrank below the replica and then went quiet was never compared again: no ERROR, and `replica list`
            # said up to date (tests/sim, seed 940).
            src_kt = state.feeds[link.name][1].topic
            self.remove_feed(state, link.name)
            state.unverified[link.name] = (link, src_kt)
            return False
        return True

    def diverged(self, unit: Unit, link: Link, div: Divergence) -> None:
        self.stats.divergences += 1
        source = f"source {link.src}:{unit.topic} partition {unit.partition}"
        hint = f"streamrepl diffstreams -src {link.src} -dst {link.dst}"
        self.fail(unit, div.describe(source, hint, resync_hint(str(link.src), str(link.dst), unit.topic)))

    def fail(self, unit: Unit, error: str) -> None:
        log.error("%s", error)
        self.stats.failures += 1
        self.errored[unit] = error
        self.drop(unit)
        self.on_fail(unit, error)

    def follow(
        self, plan: Plan, present: set[str], wanted: dict[Unit, list[tuple[Link, str]]], ready: bool, producer: Producer
    ) -> None:
        """Own exactly the `wanted` units of the plan whose replica topic is `present` (following.follow)."""
        following.follow(self, plan, present, wanted, ready, producer)

    def close(self) -> None:
        """Close the source consumers and the reader."""
        for c in [*self.sources.values(), *self.probes.values()]:
            c.close()
        self.sources.clear()
        self.probes.clear()
        if self.quiet is not None:
            self.quiet.close()
        self.reader.close()
