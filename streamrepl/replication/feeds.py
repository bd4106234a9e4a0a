"""The source feeds: which consumer reads each source partition that feeds a replica partition, and what those
consumers' last fetches say.

One owner for the consumers of the source partitions: their lanes (lanes.py: a few consumers per source cluster, its
lane's strands, more where links share a source stream), the routing of a strand's records to the link they belong
to, the feeds each link has, the topics new to a consumer (NewTopics), pause/seek/resume of throttled feeds, quiet feeds (quiet.py: not
fetched, their ends watched) and their wake, the source clusters whose connection was lost, and the records not
applied yet (from the cached watermarks of the last fetches: no request).

A feed belongs to a replica partition (a UnitState of the unit table, units.py); the table decides which feeds a unit
has and tells this class to add or remove them. This class never fails or drops a unit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import discovery, kafka
from ..kafka import Consumer, KafkaException, TopicPartition
from ..registry import Cluster
from .lanes import Lanes, lookup_fan, strand_name
from .links import Link, Unit
from .quiet import QuietFeeds, due, reports_lost_connection
from .spares import SpareConsumers
from .state import UnitState
from .topicids import TopicIds

log = logging.getLogger("streamrepl.gateway")

#: How long a source consumer waits before it fetches again for a partition whose prefetched records were over
#: queued.min.messages (or queued.max.messages.kbytes). librdkafka's default, 1 s, starved the loop: it ran through
#: the prefetched records long before and slept until the fetches started again (1 KiB records: 70k/s, the loop
#: idle 30 % of the run; with 10 ms 108-142k/s, same brokers, same minutes; BENCHMARKS.md, issue 15). The wait is
#: a timer inside the client: no request is sent while the prefetch is full.
FETCH_QUEUE_BACKOFF_MS = 10
#: librdkafka's queued.max.messages.kbytes (a consumer's prefetch), shared out among a lane's strands, and the least
#: a strand is given (two fetch answers of Tansu's ~4.2 MB).
QUEUED_KBYTES = 65536
QUEUED_KBYTES_MIN = 8192
#: max.partition.fetch.bytes of a strand (librdkafka's default: 1 MB).
PARTITION_FETCH_BYTES = 4 * 1024 * 1024
#: Up to this many topics new to a source consumer are asked for one by one; more (a gateway starting) in one listing.
INTRODUCE_ONE_BY_ONE = 8
#: How long the loop waits for a source cluster to say where the topics new to its consumer are (seconds).
INTRODUCE_TIMEOUT = 0.5


def source_consumer(cluster: Cluster, on_lost: Callable[[str], None] | None = None, strands: int = 1) -> Consumer:
    """A consumer of the source partitions that carry records (one strand of a lane, lanes.py): long queues, and
    fetches that wait no longer than the broker lets a record that arrives meanwhile wait (kafka.busy_fetch_wait_ms).
    Quiet ones: quiet.py. `on_lost(cluster name)` is called (from within its consume) when it lost its connection to
    a broker. `strands`: how many consumers share the lane's prefetch (a lane's first consumer is made before its
    fan is known when the registry names none: it has a lone consumer's)."""
    discovery.learn_cached(cluster)
    extra: dict[str, Any] = {
        "fetch.wait.max.ms": kafka.busy_fetch_wait_ms(cluster),
        "queued.min.messages": 200000,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    sizes = {
        # A lane's strands share out librdkafka's one-consumer prefetch (64 MB) instead of each holding as much:
        # spreading a lane's feeds over more consumers must not multiply what the gateway holds.
        "queued.max.messages.kbytes": max(QUEUED_KBYTES_MIN, QUEUED_KBYTES // strands),
        # A strand holds a few of its lane's partitions: with librdkafka's 1 MB a partition a fetch, a strand of one
        # partition would bring 1 MB a round trip; the broker caps the whole answer anyway (Tansu ~4.2 MB).
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
    }
    # The registry's own choice stands (a broker that answers larger fetches, a host with less memory).
    extra.update({k: v for k, v in sizes.items() if k not in cluster.client_properties})
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
        #: consumer (its strand, lanes.py) -> the source topics it was told of, and those it must be told of
        self.told: dict[str, set[str]] = {}
        self.pending: dict[str, set[str]] = {}

    def assign(self, consumer: Consumer, strand: str, tp: TopicPartition) -> None:
        """`consumer.incremental_assign([tp])`; its topic, when new to it, is asked for at the next `introduce`."""
        consumer.incremental_assign([tp])
        self.expect(strand, tp)

    def expect(self, strand: str, tp: TopicPartition) -> None:
        """The strand's consumer will be given `tp` (a feed that started quiet, when it wakes): its topic, when new to
        it, is asked for at the next `introduce`, so that the wake does not wait for librdkafka's scan."""
        if tp.topic not in self.told.get(strand, ()):
            self.pending.setdefault(strand, set()).add(tp.topic)

    def knows(self, strand: str, topic: str) -> None:
        """The strand's consumer asked for `topic` itself (SourceFeeds._fan): it needs no telling."""
        self.told.setdefault(strand, set()).add(topic)

    def introduce(self, consumers: dict[str, Consumer]) -> None:
        """Ask each consumer (strand -> consumer) about its new topics (a failure is left to the consumer's own scan).
        A strand whose consumer is gone is forgotten: a new one for it knows nothing. The consumers are asked at
        once, each from a thread of its own: a lane's strands asked one after another cost a round trip to the
        source each (four strands: 0.8 s more to a resume at 100 ms)."""
        self.told = {name: topics for name, topics in self.told.items() if name in consumers}
        pending, self.pending = self.pending, {}
        asks = [(name, consumers[name], topics) for name, topics in pending.items() if name in consumers]
        for name, _, topics in asks:
            self.told.setdefault(name, set()).update(topics)
        if len(asks) == 1:
            _introduce(*asks[0])
            return
        threads = [threading.Thread(target=_introduce, args=ask, name="streamrepl-introduce") for ask in asks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # each ask is bounded by INTRODUCE_TIMEOUT a request


def _introduce(name: str, consumer: Consumer, topics: set[str]) -> None:
    """Ask `consumer` (strand `name`) about `topics`; nothing else uses it meanwhile (the loop waits for the ask)."""
    try:
        if len(topics) <= INTRODUCE_ONE_BY_ONE:
            for topic in topics:
                consumer.list_topics(topic, timeout=INTRODUCE_TIMEOUT)
        else:
            consumer.list_topics(timeout=INTRODUCE_TIMEOUT)
    except Exception as e:  # noqa: BLE001 - only a head start: the consumer's own scan finds them
        log.debug("could not ask for the topics new to %s's consumer: %s", name, e)


class SourceFeeds:
    """`new_source_consumer(cluster)` makes a strand's consumer (lanes.py); `quiet` holds the feeds that brought no records for a
    while (None: every feed stays in its consumer)."""

    def __init__(
        self,
        new_source_consumer: Callable[..., Consumer],
        quiet: QuietFeeds | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._new_source_consumer = new_source_consumer
        self.quiet = quiet
        self._clock = clock
        #: strand (lanes.py) -> its consumer
        self.consumers: dict[str, Consumer] = {}
        self._lanes = Lanes()
        #: (link, src topic, partition) -> the unit it feeds
        self._by_source: dict[tuple[str, str, int], Unit] = {}
        #: link name -> how many feeds its consumer holds (quiet ones included)
        self._feed_count: dict[str, int] = {}
        #: link name -> the link, for the links with feeds (rebuilt with each plan)
        self._links: dict[str, Link] = {}
        self._new_topics = NewTopics()
        #: the topics the strands' consumers let go: asked for before they are read again
        self._topic_ids = TopicIds()
        #: source clusters whose consumer (or quiet end watch) lost its connection since the table last looked
        self._lost: set[str] = set()
        #: a consumer connected ahead for each source cluster no lane reads: a lane's first consumer
        self._spares = SpareConsumers(self._new_source_consumer)

    # -- what the loop reads -------------------------------------------------------------------
    def link(self, name: str) -> Link | None:
        return self._links.get(name)

    def unit_of(self, link_name: str, topic: str, partition: int) -> Unit | None:
        return self._by_source.get((link_name, topic, partition))

    def route(self, strand: str, topic: str) -> str | None:
        """The link whose records of source `topic` the strand's consumer reads."""
        return self._lanes.routes.get(strand, {}).get(topic)

    def consumer_of(self, link_name: str, partition: int) -> Consumer | None:
        """The consumer that reads the link's feeds of source `partition` (None: it has none)."""
        strand = self._lanes.strand_of(link_name, partition)
        return self.consumers.get(strand) if strand is not None else None

    def strand_quiet(self, strand: str) -> bool:
        """Whether every feed the strand's consumer reads is quiet (quiet.py): it holds nothing to read. (Counted by
        link: a strand is skipped only when all of its links' feeds are quiet, in whatever strand they are.)"""
        quiet = self.quiet
        return quiet is not None and all(
            quiet.count.get(name, 0) >= self._feed_count.get(name, 0) for name in self._lanes.links.get(strand, ())
        )

    def all_quiet(self) -> bool:
        """Whether every feed is quiet (quiet.py)."""
        return self.quiet is not None and sum(self.quiet.count.values()) >= sum(self._feed_count.values())

    # -- adding and removing feeds ---------------------------------------------------------------
    def ready(self, link: Link, topic: str, partition: int) -> bool | str:
        """Whether the consumer of the link's source `partition` may read `topic` now (topicids.TopicIds.ready);
        makes the consumer."""
        strand, consumer = self._consumer(link, topic, partition)
        return self._topic_ids.ready(strand, consumer, topic)

    def ask_ahead(self, sources: list[tuple[Link, set[tuple[str, int]]]]) -> None:
        """Before ready() for each of several source partitions (each link's (topic, partition)s): the consumers that
        will read them ask for their topics, all at once, every link's together (topicids.TopicIds.ask_ahead_of)."""
        topics: dict[str, tuple[Consumer, set[str]]] = {}
        for link, parts in sources:
            for topic, partition in sorted(parts):
                strand, consumer = self._consumer(link, topic, partition)
                topics.setdefault(strand, (consumer, set()))[1].add(topic)
        self._topic_ids.ask_ahead_of(topics)

    def _consumer(self, link: Link, topic: str, partition: int) -> tuple[str, Consumer]:
        strand = self._lanes.strand(link, partition, lambda lane: self._fan(link, lane, topic))
        c = self.consumers.get(strand)
        if c is None:
            lane = self._lanes.of[link.name]
            spare = self._spares.take(link.src_cluster) if strand == strand_name(lane, 0) else None
            c = spare[0] if spare is not None else None
            if c is None:
                c = self._new_source_consumer(link.src_cluster, strands=self._lanes.fan[lane])
            self.consumers[strand] = c
            log.info("source consumer %s made (%d in all)", strand, len(self.consumers))
        return strand, c

    def _fan(self, link: Link, lane: str, topic: str) -> int:
        """The fan of a new lane whose registry entry names none (lanes.lookup_fan): its first consumer, made now (or
        the cluster's spare), asks for `topic` (which it must be told of anyway: NewTopics), and how long that took
        says how far the source is. Nothing else waits: the lane's other consumers are made once its fan is known."""
        first = strand_name(lane, 0)
        spare = self._spares.take(link.src_cluster)
        c = spare[0] if spare is not None else self._new_source_consumer(link.src_cluster)
        self.consumers[first] = c
        began = self._clock()
        try:
            c.list_topics(topic, timeout=INTRODUCE_TIMEOUT)
            took: float | None = self._clock() - began
            self._new_topics.knows(first, topic)
        except Exception as e:  # noqa: BLE001 - no answer in time: taken for a long line
            log.debug("%s: the first topic lookup failed: %s", first, e)
            took = None
        if spare is not None:
            # Connected already, the spare's lookup took one round trip, not a new consumer's few: under the mark at
            # 50 ms, which gave a lane across a 50 ms line one consumer. Its own first request says how far it is.
            took = spare[1]
        fan = lookup_fan(took)
        shown = "no answer" if took is None else f"{took * 1000:.0f} ms"
        log.info("source consumer %s made; its first lookup took %s: %d consumer(s) for the lane", first, shown, fan)
        return fan

    def keep_spares(self, clusters: Iterable[Cluster]) -> None:
        """Keep a spare consumer (spares.py) connected to each of `clusters` that no link with feeds reads."""
        self._spares.keep(clusters, {link.src_cluster.name for link in self._links.values()})

    def add(self, state: UnitState, link: Link, src_kt: str, start_quiet: bool) -> None:
        """Feed `state` from the link's source partition, from the writer's next offset. `start_quiet`: many
        partitions are taken up at once (units.START_QUIET_AT), and a feed that is the unit's only one starts quiet."""
        tp = TopicPartition(src_kt, state.unit.partition, state.writer.next)
        strand, consumer = self._consumer(
            link, src_kt, tp.partition
        )  # also for a feed that starts quiet: woken into it
        self._lanes.route(strand, src_kt, link.name)
        alone = not state.feeds and not state.unverified
        if start_quiet and self.quiet is not None and alone and not link.throttle and state.writer.idle():
            self._new_topics.expect(strand, tp)
            self.quiet.hold(link.name, link.src_cluster, tp, state.writer.next)
        else:
            self._new_topics.assign(consumer, strand, tp)
        state.feeds[link.name] = (link, tp)
        self._by_source[(link.name, src_kt, tp.partition)] = state.unit
        self._feed_count[link.name] = self._feed_count.get(link.name, 0) + 1
        self._links[link.name] = link

    def relink(self, state: UnitState, link: Link) -> None:
        """The settings of a link that feeds `state` changed (`replica edit -throttle ...`): its feed follows them."""
        state.feeds[link.name] = (link, state.feeds[link.name][1])

    def remove(self, state: UnitState, name: str) -> tuple[Link, TopicPartition]:
        """Stop the feed `name` of `state`; returns it."""
        link, tp = state.feeds.pop(name)
        c = self.consumer_of(name, tp.partition)
        quiet = self.quiet is not None and self.quiet.holds(name, tp)
        if self.quiet is not None:
            self.quiet.release(name, tp)  # also forgets the end its last wake was for
        if not quiet and c is not None:
            try:
                c.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._by_source.pop((name, tp.topic, tp.partition), None)
        self._feed_count[name] -= 1
        strand = self._lanes.strand_of(name, tp.partition)
        if strand is not None:
            self._topic_ids.let_go(strand, tp.topic)
        return link, tp

    def follow_links(self, links: list[Link], units: dict[Unit, UnitState]) -> None:
        """After a plan was followed: release the lanes of links the plan no longer has and close the consumers that
        read nothing, tell each consumer of its new topics, forget quiet feeds and watches no link needs."""
        live = {link.name for link in links}
        for name in [n for n in self._lanes.of if n not in live]:
            self._lanes.release(name)
        for strand in [n for n in self.consumers if n not in self._lanes.links]:
            self.consumers.pop(strand).close()
            self._topic_ids.closed(strand)
        self._new_topics.introduce(self.consumers)
        if self.quiet is not None:
            self.quiet.close_unused(live, {link.src_cluster.name for link in links})
        # One pass over the units (each plan, every 2 s): a pass per link was 100,000 steps at 50 links and 2,000 units
        # (Every link with a feed has a lane, and so a consumer: a link leaves its lane only when it left the plan.)
        self._links = {}
        for state in units.values():
            for name, (link, _) in state.feeds.items():
                self._links.setdefault(name, link)

    # -- throttled feeds -------------------------------------------------------------------------
    def pause(self, link_name: str, tp: TopicPartition, resume_at: int | None) -> bool:
        """Stop fetching a throttled feed; its records from `resume_at` on (None: none fetched past the slice) are
        fetched again when it resumes. False: the link has no consumer."""
        c = self.consumer_of(link_name, tp.partition)
        if c is None:
            return False
        c.pause([TopicPartition(tp.topic, tp.partition)])
        if resume_at is not None:
            c.seek(TopicPartition(tp.topic, tp.partition, resume_at))
        return True

    def resume(self, link_name: str, tp: TopicPartition) -> None:
        c = self.consumer_of(link_name, tp.partition)
        if c is not None:
            c.resume([TopicPartition(tp.topic, tp.partition)])

    # -- lost sources ----------------------------------------------------------------------------
    def source_lost(self, cluster: str) -> None:
        """A source consumer lost its connection to a broker of `cluster` (called from inside its consume)."""
        self._lost.add(cluster)

    def take_lost(self) -> set[str]:
        """The source clusters whose connection was lost since the last take."""
        if not self._lost:
            return set()
        lost, self._lost = self._lost, set()
        return lost

    # -- quiet feeds -----------------------------------------------------------------------------
    def quieten_idle(self, units: dict[Unit, UnitState]) -> None:
        """Feeds that brought no record for quiet.QUIET_SECONDS stop being fetched; their ends are watched (quiet.py).
        Only a unit fed by one link, not throttled, with every delivery acknowledged and its feed rechecked."""
        quiet = self.quiet
        if quiet is None:
            return
        now = time.monotonic()
        for state in units.values():
            if len(state.feeds) != 1 or state.unverified or state.throttled_until or not state.writer.idle():
                continue
            ((name, (link, tp)),) = state.feeds.items()
            busy = self.consumer_of(name, tp.partition)
            if (
                busy is None
                or link.throttle
                or name not in state.rechecked
                or quiet.holds(name, tp)
                or not due(max(state.last_write, state.active_at), now)
            ):
                continue
            quiet.quieten(name, link.src_cluster, tp, busy, state.writer.next)
            state.active_at = now

    def quiet_news(self) -> list[tuple[str, str, int, int]]:
        """Take the end watches' news: the quiet feeds whose end moved ((link, topic, partition, end)), to be woken
        (wake_moved) once the feeds of source clusters whose connection was lost (noted here, see take_lost) were
        stopped: a restarted broker may have taken new records at offsets the replica already holds."""
        if self.quiet is None:
            return []
        moved, lost = self.quiet.news()
        self._lost |= lost
        return moved

    def wake_moved(self, moved: list[tuple[str, str, int, int]], units: dict[Unit, UnitState]) -> None:
        """The quiet feeds whose end moved go back to their link's consumer, from where their writer is now."""
        quiet = self.quiet
        if quiet is None:
            return
        for name, topic, partition, end in moved:
            unit = self._by_source.get((name, topic, partition))
            state = units.get(unit) if unit else None
            busy = self.consumer_of(name, partition)
            if state is None or busy is None or name not in state.feeds:
                continue
            tp = state.feeds[name][1]
            if quiet.holds(name, tp):
                quiet.wake(name, tp, busy, state.writer.next, end)
                state.active_at = time.monotonic()

    # -- what the last fetches say of the sources' ends (cached watermarks: no request) ---------------
    def recheck_lagging(self, units: dict[Unit, UnitState]) -> None:
        """A feed starts at the replica partition's end. When its source ends before that, the replica's
        records up to the source's end must have come from it (or be the replica's own): read the source's
        last records again so that the writer checks their origin. Otherwise the same topic written in two
        streams goes unnoticed for as long as the source stays behind. Uses the watermark the last fetch
        brought (no request); each feed is looked at once per acquisition."""
        for state in units.values():
            for name, (_, tp) in state.feeds.items():
                c = self.consumer_of(name, tp.partition)
                if name in state.rechecked or c is None:
                    continue
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                except KafkaException:
                    continue
                if high < 0:
                    continue  # no fetch answered yet
                if 0 < high < state.writer.next:
                    try:
                        c.seek(TopicPartition(tp.topic, tp.partition, high - 1))
                    except KafkaException as e:
                        # Its end cached, the partition not fetched yet (its slots just taken up again): _STATE,
                        # "Erroneous state". Tried again at the next pass; raised, it ended the gateway's worker.
                        log.debug("%s[%d]: seek to %d not taken now (%s)", tp.topic, tp.partition, high - 1, e)
                        continue
                state.rechecked.add(name)

    def pending(self, units: dict[Unit, UnitState]) -> dict[str, int]:
        """Source records not applied yet, per link, from the watermarks of the last fetches (no request).
        Called from the metrics thread: works on snapshots, and a consumer closed meanwhile counts nothing."""
        out: dict[str, int] = {}
        for state in list(units.values()):
            for name, (_, tp) in list(state.feeds.items()):
                c = self.consumer_of(name, tp.partition)
                if self.quiet is not None and self.quiet.holds(name, tp):
                    out[name] = out.get(name, 0)  # a quiet feed's end has not passed its writer (quiet.py)
                    continue
                if c is None:
                    continue
                try:
                    _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                except (KafkaException, RuntimeError):
                    continue
                out[name] = out.get(name, 0) + max(0, high - state.writer.next)
        return out

    def caught_up(self, state: UnitState) -> bool:
        """Whether the writer had applied every record its feeds' last fetches showed (the source's end as the last
        fetch saw it, no request; a quiet feed's end has not passed its writer). Reported with the unit
        (StatusReports): promote -consistent lets a partition caught up at its last report not hold its cut back
        (promoteconsistent.py). Only where the source's watermark is exact: Tansu's is the last batch's base offset
        + 1, so a writer at it may still lack the rest of that batch; an unknown broker is taken for such a one."""
        if not state.feeds:
            return False
        for name, (link, tp) in list(state.feeds.items()):
            if not kafka.watermark_is_exact(link.src_cluster):
                return False
            if self.quiet is not None and self.quiet.holds(name, tp):
                continue
            c = self.consumer_of(name, tp.partition)
            if c is None:
                return False
            try:
                _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
            except (KafkaException, RuntimeError):
                return False
            if high < 0 or high > state.writer.next:
                return False
        return True

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()
        self.consumers.clear()
        self._spares.close()
        if self.quiet is not None:
            self.quiet.close()
