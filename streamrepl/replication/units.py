"""The unit table: the replica partitions this gateway applies now, made to follow each plan.

A replica partition (a Unit) is acquired at its real end (resume_point), fed by one source partition per link
that runs into it (its feeds, feeds.py), dropped when its slot or its links go away, and failed (kept out until the
gateway restarts or the partition leaves the plan; `replica list` says why) on a conflict, a write error, or a
divergence: a source whose history changed under the replica (the guard's verdicts, guard.py), checked when the
partition is acquired, when a link is added to it, and when its source cluster's connection was lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from .. import kafka
from ..applier import OffsetPreservingWriter, ReplicaConflict, origin_of_tail, replica_tail
from ..divergence import tail_of
from ..kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from ..paths import kafka_topic_name
from .feeds import SourceFeeds
from .guard import Clash, Fail, ReplicaGuard
from .links import Link, Plan, Unit
from .state import UnitState
from .stats import GatewayStats
from .topicids import TopicIds

log = logging.getLogger("streamrepl.gateway")

#: A source that did not answer a check is asked again after this long (its feed waits meanwhile).
RETRY_SECONDS = 5.0
#: When a plan makes a gateway take up at least this many partitions at once (it starts, or slots moved to it), their
#: feeds start quiet (quiet.QuietFeeds.hold): nothing fetches them until their end watch's first answer, a round
#: later, wakes those whose source is ahead. Fetched at once, every one was fetched until it went quiet 5 s after the
#: last was taken up: 2,000 partitions a gateway on noida-db, which answers an empty fetch at once, kept 100 consumers
#: fetching for 125 s (load 62 on 2 cores, the source broker 84 % of a core; BENCHMARKS.md). Fewer (a resume, a new
#: topic) are fetched at once: they do not wait for a round.
START_QUIET_AT = 16
#: The reader of the replica partitions, as TopicIds names it
READER = "reader"


def no_report(unit: Unit, error: str) -> None:
    pass


def no_clash_report(unit: Unit, link: Link, error: str) -> None:
    pass


class UnitTable:
    """`reader` reads the replica partitions (their ends, their last records); `feeds` and `guard` are the source
    feeds and the replica guard the units use; `on_fail(unit, error)` reports a failed one."""

    def __init__(
        self,
        reader: Consumer,
        feeds: SourceFeeds,
        guard: ReplicaGuard,
        stats: GatewayStats,
        on_fail: Callable[[Unit, str], None] = no_report,
        on_clash: Callable[[Unit, Link, str], None] = no_clash_report,
    ):
        self.reader, self.feeds, self.guard, self.stats = reader, feeds, guard, stats
        self._on_fail = on_fail
        self._on_clash = on_clash
        #: (unit, link name) -> why that link feeds the unit no more: another upstream's records of the same topic are
        #: in it (forgotten when the link leaves the unit: a topic renamed or deleted, an upstream removed)
        self.clashed: dict[tuple[Unit, str], str] = {}
        self.units: dict[Unit, UnitState] = {}
        #: failed units -> why
        self.errored: dict[Unit, str] = {}
        #: link name, or "link unit" -> when its source, which did not answer a check, is asked again (monotonic)
        self._retry_at: dict[str, float] = {}
        #: (replica topic, partition) -> where this gateway's producer left it, for the partitions it let go
        self._left_at: dict[tuple[str, int], int] = {}
        #: why the producer must be replaced before a partition is taken up again ("" when it need not be)
        self.stale_producer = ""
        #: the topics the reader let go: asked for before it reads them again (topicids.py)
        self._topic_ids = TopicIds()

    def all_quiet(self) -> bool:
        """Whether no source partition is fetched now: every feed is quiet (quiet.py) and none waits for its source."""
        return self.feeds.all_quiet() and not any(state.unverified for state in self.units.values())

    def pending(self) -> dict[str, int]:
        """Source records not applied yet, per link (SourceFeeds.pending); from the metrics thread."""
        return self.feeds.pending(self.units)

    # -- following a plan ------------------------------------------------------------------------
    def follow(
        self, plan: Plan, present: set[str], wanted: dict[Unit, list[tuple[Link, str]]], ready: bool, producer: Producer
    ) -> None:
        """Own exactly the `wanted` units of the plan whose replica topic is `present`: drop the others (their
        queued records delivered first), acquire the new ones when `ready` (through `producer`), follow the feeds
        of the others."""
        for unit in [u for u in self.units if u not in wanted]:
            try:
                producer.flush(30)
            except KafkaException as e:
                # A producer in a fatal state: its records' delivery reports restart the writes (WriteSession.check).
                log.warning("%s: the writes queued before letting it go failed: %s", unit.key, e)
            self.drop(unit)
        # A failed unit that left the plan (a link paused, as resync does) is checked again when it comes back.
        for unit in [u for u in self.errored if u not in wanted]:
            del self.errored[unit]
        for unit, name in list(self.clashed):
            if name not in {link.name for link, _ in wanted.get(unit, [])}:
                del self.clashed[(unit, name)]
        taking_up = sum(
            1
            for unit in wanted
            if unit not in self.units and unit not in self.errored and kafka_topic_name(unit.dst, unit.topic) in present
        )
        start_quiet = ready and taking_up >= START_QUIET_AT
        new: list[tuple[Unit, list[tuple[Link, str]]]] = []
        for unit, feeds in wanted.items():
            if unit in self.errored or kafka_topic_name(unit.dst, unit.topic) not in present:
                continue
            state = self.units.get(unit)
            if state is None:
                if ready:
                    new.append((unit, feeds))
                continue
            self._follow_feeds(state, feeds)
        self._take_up(new, producer, start_quiet)
        self.feeds.recheck_lagging(self.units)
        self.feeds.follow_links(plan.links, self.units)
        self.guard.follow_links(plan.links)

    def _take_up(self, new: list[tuple[Unit, list[tuple[Link, str]]]], producer: Producer, start_quiet: bool) -> None:
        """Acquire the `new` units: every replica's end first, then their sources are read at once (the guard's
        check_ahead), then each starts. A unit that cannot start now is tried again with the next plan."""
        tails = self._tails([unit for unit, _ in new]) if len(new) > 1 else {}
        opened: list[UnitState] = []
        for unit, feeds in new:
            tail = tails.get((kafka_topic_name(unit.dst, unit.topic), unit.partition))
            state = self._attempt(unit, partial(self._open, unit, feeds, producer, tail))
            if state is not None:
                opened.append(state)
        if len(opened) > 1:
            sources: dict[str, tuple[Link, set[tuple[str, int]]]] = {}
            for st in opened:
                for link, src_kt in st.unverified.values():
                    sources.setdefault(link.name, (link, set()))[1].add((src_kt, st.unit.partition))
            self.feeds.ask_ahead(list(sources.values()))
            self.guard.check_ahead(
                [
                    (st, link, TopicPartition(src_kt, st.unit.partition))
                    for st in opened
                    for link, src_kt in st.unverified.values()
                ]
            )
        try:
            for state in opened:
                self._attempt(state.unit, partial(self._start, state, start_quiet))
        finally:
            self.guard.forget_checks()

    def _tails(self, units: list[Unit]) -> dict[tuple[str, int], tuple[int, Message | None]]:
        """The replicas' ends and last records, read at once ({} when they cannot be now: each unit reads its own)."""
        tps = [TopicPartition(kafka_topic_name(u.dst, u.topic), u.partition) for u in units]
        self._topic_ids.ask_ahead(READER, self.reader, {tp.topic for tp in tps})
        if any(self._topic_ids.ready(READER, self.reader, kt) is not True for kt in {tp.topic for tp in tps}):
            return {}
        try:
            return kafka.tails(self.reader, tps)
        except (KafkaException, TimeoutError):
            return {}

    def _attempt(self, unit: Unit, step: Callable[[], UnitState | None]) -> UnitState | None:
        try:
            return step()
        except ReplicaConflict as e:
            self.fail(unit, str(e))
        except Exception as e:  # noqa: BLE001 - retried with the next plan
            log.warning("cannot start %s yet: %s", unit.key, e)
        return None

    def _follow_feeds(self, state: UnitState, feeds: list[tuple[Link, str]]) -> None:
        names = {link.name for link, _ in feeds}
        for name in [n for n in state.feeds if n not in names]:
            self.remove_feed(state, name)
        for name in [n for n in state.unverified if n not in names]:
            del state.unverified[name]
        for link, src_kt in feeds:
            if (state.unit, link.name) in self.clashed:
                continue
            if link.name not in state.feeds:
                # A link added to a running partition: its source is compared with the replica first.
                state.unverified[link.name] = (link, src_kt)
            elif state.feeds[link.name][0] != link:
                # The link's settings changed (`replica edit -throttle ...`): follow them.
                self.feeds.relink(state, link)
        if state.unverified:
            self.verify_feeds(state)

    def acquire(self, unit: Unit, feeds: list[tuple[Link, str]], producer: Producer, start_quiet: bool = False) -> None:
        state = self._open(unit, feeds, producer)
        if state is not None:
            self._start(state, start_quiet)

    def _open(
        self,
        unit: Unit,
        feeds: list[tuple[Link, str]],
        producer: Producer,
        tail: tuple[int, Message | None] | None = None,
    ) -> UnitState | None:
        """The state of `unit` at its replica's real end (`tail`: its end and last record, read already), its feeds
        not verified yet (None: not now)."""
        dst_kt = kafka_topic_name(unit.dst, unit.topic)
        dst_uuid = feeds[0][0].dst_uuid
        if self._topic_ids.ready(READER, self.reader, dst_kt) is not True:
            # Let go before, and its cluster does not say what it is now: tried again with the next plan.
            log.warning("cannot start %s yet: %s does not say what its topic is now", unit.key, unit.dst.cluster)
            return None
        end, last = tail if tail is not None else replica_tail(self.reader, TopicPartition(dst_kt, unit.partition))
        if end < self._left_at.get((dst_kt, unit.partition), 0):
            # Re-created meanwhile (`replica resync`): the producer's sequence would be fatally refused; replace it.
            self.stale_producer = f"{unit.key} ends at {end}, below offset {self._left_at[(dst_kt, unit.partition)]}"
            return None
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
        state.unverified = {
            link.name: (link, src_kt) for link, src_kt in feeds if (unit, link.name) not in self.clashed
        }
        return state

    def _start(self, state: UnitState, start_quiet: bool) -> None:
        if self.verify_feeds(state, start_quiet):
            self.units[state.unit] = state
            log.info("acquired %s at offset %d", state.unit.key, state.writer.next)

    def verify_feeds(self, state: UnitState, start_quiet: bool = False) -> bool:
        """Start the unverified feeds whose source still holds the replica's history (False: it does not, and
        the unit failed). A source that does not answer now is asked again later (retry_unverified)."""
        now = time.monotonic()
        for name, (link, src_kt) in list(state.unverified.items()):
            if max(self._retry_at.get(name, 0.0), self._retry_at.get(f"{name} {state.unit.key}", 0.0)) > now:
                continue
            verdict = self.guard.check_source(state, link, TopicPartition(src_kt, state.unit.partition))
            if verdict is True:
                verdict = self.feeds.ready(link, src_kt, state.unit.partition)
            if isinstance(verdict, Fail):
                self.fail(state.unit, verdict.error)
                return False
            if isinstance(verdict, Clash):
                self.clash(state, link, verdict.error)
                continue
            if verdict is not True:
                # A source cluster that does not answer is asked again for all its partitions at once; a
                # partition that cannot be read (its topic missing) only for itself.
                self._retry_at[name if verdict == "down" else f"{name} {state.unit.key}"] = now + RETRY_SECONDS
                continue
            del state.unverified[name]
            self.feeds.add(state, link, src_kt, start_quiet)
        return True

    def recheck_lost_sources(self) -> None:
        """The feeds of a source cluster whose connection was lost stop and are compared with their replicas again
        before they go on (verify_feeds). A broker that crashed can come back without records it had acknowledged
        and replicated, and take new ones at their offsets; read on from the replica's end, the feed would append
        the new history after the old one and no check would see it. Checked before anything is fetched from the
        broker that came back, the replica's last record differs from the source's there: a divergence."""
        lost = self.feeds.take_lost()
        if not lost:
            return
        for state in self.units.values():
            for name, (link, _) in list(state.feeds.items()):
                if link.src_cluster.name in lost:
                    log.info("%s: lost the connection to source %s; comparing with it again", state.unit.key, link.src)
                    self.reverify_feed(state, name)

    def reverify_feed(self, state: UnitState, name: str) -> None:
        """Stop the feed `name` of `state` until its source was compared with the replica again (verify_feeds, at
        the next sweep)."""
        link, tp = state.feeds[name]
        self.remove_feed(state, name)
        state.unverified[name] = (link, tp.topic)

    def retry_unverified(self) -> None:
        """Called from the loop: the feeds whose source did not answer when their partition was acquired, or
        whose source cluster was lost meanwhile (recheck_lost_sources)."""
        self.recheck_lost_sources()
        for unit, state in list(self.units.items()):
            if state.unverified and unit not in self.errored:
                self.verify_feeds(state)

    def remove_feed(self, state: UnitState, name: str) -> None:
        """Stop the feed `name` of `state` (its link left the unit, or its source must be compared again)."""
        link, tp = self.feeds.remove(state, name)
        self.guard.let_go(link.src_cluster.name, tp.topic)

    # -- letting units go ------------------------------------------------------------------------
    def drop(self, unit: Unit) -> None:
        state = self.units.pop(unit, None)
        if state is None:
            return
        self._left_at[(state.writer.topic, state.writer.partition)] = state.writer.next
        self._topic_ids.let_go(READER, state.writer.topic)
        for name in list(state.feeds):
            self.remove_feed(state, name)

    def drop_all(self) -> None:
        for unit in list(self.units):
            self.drop(unit)

    def producer_replaced(self) -> None:
        """The writes start again with a new producer (WriteSession.restart): it has no sequence to keep."""
        self._left_at.clear()
        self.stale_producer = ""

    def clash(self, state: UnitState, link: Link, error: str) -> None:
        """`link` feeds `state`'s partition no more (another upstream's records of the topic are in it); its other
        feeds go on."""
        log.error("%s", error)
        if link.name in state.feeds:
            self.remove_feed(state, link.name)
        state.unverified.pop(link.name, None)
        self.clashed[(state.unit, link.name)] = error
        self._on_clash(state.unit, link, error)

    def fail(self, unit: Unit, error: str) -> None:
        log.error("%s", error)
        self.stats.failures += 1
        self.errored[unit] = error
        self.drop(unit)
        self._on_fail(unit, error)

    def close(self) -> None:
        """Close the source consumers, the probes and the reader."""
        self.feeds.close()
        self.guard.close()
        self.reader.close()
