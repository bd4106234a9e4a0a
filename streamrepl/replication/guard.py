"""The replica guard: does a replica partition still match its source, and its own end where this gateway left it?

Each check returns a verdict and changes nothing outside the guard: the unit table fails or drops the partition, the
write session restarts the writes (the mover acts on what the guard says). The checks:

- on acquire, and when a source cluster's connection was lost, the source is compared with the replica
  (divergence.check: the record at the replica's last offset, the source's end), through a probe consumer per source
  cluster that never feeds a writer;
- source records read below the replica's end again are compared with what it holds (check_reread);
- before writing into a replica partition that was quiet, its end is read (end_unchanged): a stray producer's record
  would shift every record written after it; a broker that lost acknowledged records would take the next write below
  its offset; another gateway that took the partition over has written on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import kafka, policy
from ..divergence import Divergence, check, clash, compare, read_sources, reads_source, resync_hint, tail_of
from ..kafka import Consumer, KafkaException, Message, TopicPartition
from .links import Link
from .state import UnitState
from .stats import GatewayStats
from .topicids import TopicIds

log = logging.getLogger("streamrepl.gateway")

#: A partition whose source is read below the replica's end again is checked for divergence at most this often.
REREAD_CHECK_SECONDS = 5.0
#: How long a divergence check waits for a source; one that does not answer is asked again later (its feed waits
#: meanwhile: the loop must not stall on a source that is down).
CHECK_TIMEOUT = 2.0
END_CHECK_TIMEOUT = 1.0  # seconds
#: A partition quiet for longer than this has its end checked before it is written again (end_unchanged).
#: Not after every short gap: at a few thousand records/s each partition goes idle between batches, and a
#: request on the loop before each batch doubled the p99 latency (BENCHMARKS.md). A stray write in a gap
#: shorter than this is still caught, by the delivery check, after the batch that follows it.
END_CHECK_IDLE = 0.5
#: After the destination did not answer an end check, the checks are off for this long (writes are checked on delivery).
END_CHECKS_OFF_SECONDS = 10.0


@dataclass(frozen=True)
class Fail:
    """The partition must stop in ERROR with this error (a divergence, something else wrote into it)."""

    error: str


@dataclass(frozen=True)
class Conflict:
    """Something else wrote into the replica partition: it stops; `why` is the error unless the records this gateway
    sent that landed at wrong offsets can be counted (WriteSession.conflict_error)."""

    why: str


@dataclass(frozen=True)
class Clash:
    """The replica partition holds another upstream's records of the same topic: this link's feed of it stops
    (UnitTable.clash); the partition goes on with the records it keeps."""

    error: str


def upstream_of(state: UnitState, origin: str) -> Link | None:
    """The link of another upstream feeding `state`'s partition whose stream is `origin`, if any."""
    others = [lk for lk, _ in [*state.feeds.values(), *state.unverified.values()] if lk.src_uuid == origin]
    return others[0] if others else None


def clashes(state: UnitState, link: Link, held: str) -> bool:
    """Records of origin `held` in `state`'s partition make a clash for `link` (two upstreams writing one topic)
    only when `held` is another upstream's stream that feeds it now. An origin no upstream has is a history the
    source no longer holds (its stream deleted and created again under the same path): a divergence."""
    return held not in ("", link.src_uuid, state.writer.dst_uuid) and upstream_of(state, held) is not None


def clash_error(state: UnitState, link: Link, held: str) -> str:
    """The clash message for `link`'s feed into `state`'s partition, whose records are of origin `held`."""
    other = upstream_of(state, held)
    kept = str(other.src) if other else f"another stream (origin {held}, not an upstream of it now)"
    unit = state.unit
    return clash(str(link.dst), unit.topic, unit.partition, kept, str(link.src))


@dataclass(frozen=True)
class Restart:
    """The replica partition ends below where this gateway left it: every partition starts again from its real end."""

    why: str


@dataclass(frozen=True)
class Reverify:
    """The feed must stop until its source was compared with the replica again (UnitTable.reverify_feed): the source
    reads below the replica's end and could not be compared now."""


@dataclass(frozen=True)
class LetGo:
    """Another gateway wrote on after this one: let the partition go (taken up again from its real end if owned)."""


def probe_name(cluster: str) -> str:
    """The divergence probe of a source cluster, as TopicIds names it."""
    return f"probe {cluster}"


def quiet_for_long(state: UnitState, now: float, last_offset: int) -> bool:
    """Whether writing a batch up to `last_offset` into the unit needs its end checked first (end_unchanged): its
    writes are all acknowledged, it was quiet for END_CHECK_IDLE, and the batch brings records past its end."""
    w = state.writer
    return w.idle() and now - state.last_write > END_CHECK_IDLE and last_offset >= w.next


class ReplicaGuard:
    """`reader` reads the replica partitions (their ends, their last records); `new_probe(cluster)` makes the
    consumer that reads single source records; `stats` counts the divergences found."""

    def __init__(self, reader: Consumer, new_probe: Callable[..., Consumer], stats: GatewayStats):
        self.reader = reader
        self.stats = stats
        self._new_probe = new_probe
        #: source cluster name -> its probe
        self._probes: dict[str, Consumer] = {}
        #: the topics the probes let go: asked for before they are read again (topicids.py)
        self._topic_ids = TopicIds()
        #: the end checks are off until then (monotonic): the destination did not answer one
        self._end_checks_off_until = 0.0
        #: replica partition -> its end, asked for ahead for the partitions one batch wakes (look_ahead)
        self._ends_ahead: dict[tuple[str, int], int] = {}
        #: (source cluster, topic, partition, replica end) -> the source's end and its record at the replica's
        #: end - 1, read ahead for the partitions one plan takes up (check_ahead)
        self._checks_ahead: dict[tuple[str, str, int, int], tuple[int, Message | None]] = {}

    # -- the source against the replica ------------------------------------------------------------
    def _probe(self, link: Link) -> Consumer:
        # One per source cluster, not per link: it reads one record at a time, from the loop's own thread, and every
        # librdkafka client costs CPU while idle (a gateway had three clients a link: 60 at 20 links).
        c = self._probes.get(link.src_cluster.name)
        if c is None:
            c = self._new_probe(link.src_cluster)
            self._probes[link.src_cluster.name] = c
        return c

    def check_source(self, state: UnitState, link: Link, tp: TopicPartition) -> bool | str | Fail | Clash:
        """Does the source still hold what the replica holds (divergence.check)? True: yes; Fail: it diverged.
        When the source cannot be read now: "down" (its cluster does not answer) or "unread"."""
        state.checked_at = time.monotonic()
        w = state.writer
        probe = self._probe(link)
        if reads_source(w.next, state.tail, w.dst_uuid):
            ready = self._topic_ids.ready(probe_name(link.src_cluster.name), probe, tp.topic)
            if ready is not True:
                return ready
        ahead = self._checks_ahead.pop((link.src_cluster.name, tp.topic, tp.partition, w.next), None)
        try:
            if ahead is not None:
                end, last = ahead
                source = tail_of(last, link.src_uuid) if last is not None else None
                div = compare(state.tail, w.next, source, end, link.src_uuid, w.dst_uuid, state.sole_feed)
            else:
                div = check(probe, tp, w.next, state.tail, link.src_uuid, w.dst_uuid, state.sole_feed, CHECK_TIMEOUT)
        except (KafkaException, TimeoutError) as e:
            log.warning("%s: cannot compare with its source %s now: %s", state.unit.key, link.src, e)
            # A probe that saw its source broker restart may keep the partition unknown for minutes: make a new one.
            self.close_probe(link.src_cluster.name)
            return "down" if isinstance(e, TimeoutError) or kafka.is_transport(e) else "unread"
        if div is None:
            return True
        return self._diverged(state, link, div)

    def check_ahead(self, checks: list[tuple[UnitState, Link, TopicPartition]]) -> None:
        """Read what check_source needs for the source partitions of the units one plan takes up (a start, slots
        moved here), all at once per source cluster: one at a time, each check cost 4-6 round trips to its source,
        in series (a takeover of 4 partitions across a 50 ms line waited 0.25 s for each, issue 28). A source not
        read here is read by check_source itself. Kept until forget_checks()."""
        self._checks_ahead = {}
        wanted: dict[str, tuple[Link, dict[tuple[str, int], int]]] = {}
        for state, link, tp in checks:
            w = state.writer
            if reads_source(w.next, state.tail, w.dst_uuid):
                wanted.setdefault(link.src_cluster.name, (link, {}))[1][(tp.topic, tp.partition)] = w.next
        for cluster, (link, replica_ends) in wanted.items():
            if len(replica_ends) < 2:
                continue
            probe = self._probe(link)
            topics = {topic for topic, _ in replica_ends}
            self._topic_ids.ask_ahead(probe_name(cluster), probe, topics)
            if any(self._topic_ids.ready(probe_name(cluster), probe, t) is not True for t in topics):
                continue
            try:
                read = read_sources(probe, replica_ends, CHECK_TIMEOUT)
            except (KafkaException, TimeoutError):
                continue  # each is asked for alone, which says what went wrong
            for (topic, partition), got in read.items():
                self._checks_ahead[(cluster, topic, partition, replica_ends[(topic, partition)])] = got

    def forget_checks(self) -> None:
        self._checks_ahead = {}

    def check_reread(self, state: UnitState, link: Link, batch: list[Message]) -> bool | Fail | Clash | Reverify:
        """Source records below the replica's end arrived (a feed seeks back, or the source reset the feed's
        position because the offset it asked for is out of range): compare them with what the replica holds.
        The record at the replica's last offset, when it is among them, is compared here; without it, the
        source's end is checked (a request; at most every REREAD_CHECK_SECONDS per partition, while nothing is
        in flight); a check not made now is made before the feed goes on (Reverify)."""
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
            return True if div is None else self._diverged(state, link, div)
        # With several feeds, a source behind the replica's end is common (a second path): not checked here.
        if last < want and state.sole_feed:
            if w.idle() and time.monotonic() - state.checked_at > REREAD_CHECK_SECONDS:
                verdict = self.check_source(state, link, state.feeds[link.name][1])
                return verdict if isinstance(verdict, (Fail, Clash)) else True
            # Checked a moment ago, or writes in flight. Let go on unchecked, a source that shrank below the replica
            # and then went quiet was never compared again: no ERROR, and `replica list` said up to date (tests/sim,
            # seed 940).
            return Reverify()
        return True

    def _diverged(self, state: UnitState, link: Link, div: Divergence) -> Fail | Clash:
        unit = state.unit
        tail = state.tail
        if tail is not None and clashes(state, link, tail.origin):
            # Not this source's record that differs: another upstream's, of the same topic (many-to-one).
            return Clash(clash_error(state, link, tail.origin))
        self.stats.divergences += 1
        source = f"source {link.src}:{unit.topic} partition {unit.partition}"
        hint = f"streamrepl diffstreams -src {link.src} -dst {link.dst}"
        return Fail(div.describe(source, hint, resync_hint(str(link.src), str(link.dst), unit.topic)))

    def let_go(self, cluster: str, topic: str) -> None:
        """The probe of `cluster` may not read `topic` as it knew it (a feed of it stopped: topicids.py)."""
        self._topic_ids.let_go(probe_name(cluster), topic)

    def close_probe(self, cluster: str) -> None:
        probe = self._probes.pop(cluster, None)
        if probe is not None:
            probe.close()
            self._topic_ids.closed(probe_name(cluster))

    def follow_links(self, links: list[Link]) -> None:
        """A probe for each source cluster the links read, made before it is needed: a new client's first request
        waits for its connections (about three round trips: 0.15 s of a takeover across a 50 ms line, issue 28).
        The probes of source clusters no link reads any more are closed."""
        live = {link.src_cluster.name: link for link in links}
        for name in [n for n in self._probes if n not in live]:
            self.close_probe(name)
        for link in live.values():
            self._probe(link)

    # -- the replica's end -----------------------------------------------------------------------
    def look_ahead(self, states: list[tuple[UnitState, int]]) -> None:
        """The ends of the replica partitions a batch wakes ((state, last offset of its records): see
        end_unchanged), asked for in one request when there are several: after a quiet spell a burst into 800
        partitions woke them all, one request each, on the loop. Kept until forget_ahead()."""
        self._ends_ahead = {}
        now = time.monotonic()
        if now < self._end_checks_off_until or len(states) < 2:
            return
        tps = [
            TopicPartition(st.writer.topic, st.writer.partition, kafka.LATEST)
            for st, last in states
            if quiet_for_long(st, now, last)
        ]
        if len(tps) < 2:
            return
        try:
            got = self.reader.offsets_for_times(tps, timeout=END_CHECK_TIMEOUT)
        except KafkaException:
            return  # each is asked for alone, as before
        self._ends_ahead = {(tp.topic, tp.partition): tp.offset for tp in got if tp.error is None and tp.offset >= 0}

    def forget_ahead(self) -> None:
        self._ends_ahead = {}

    def end_unchanged(self, state: UnitState, origin: str) -> bool | Restart | LetGo | Conflict:
        """Before writing into a partition whose writes are all acknowledged and that was quiet for
        END_CHECK_IDLE, check that nothing else wrote into it meanwhile (a stray producer): its record would
        shift every record written after it. This costs a request only when a partition wakes up.

        When the records written meanwhile are copies of the same origin, another gateway took the
        partition over (this one was stalled past its session, and has not heard yet): LetGo, not a
        conflict; it is acquired again from its real end if this gateway still owns it."""
        now = time.monotonic()
        if now < self._end_checks_off_until:
            return True
        w = state.writer
        tp = TopicPartition(w.topic, w.partition)
        try:
            high = self._ends_ahead.get((w.topic, w.partition), -1)
            if high < 0:
                _, high = self.reader.get_watermark_offsets(tp, timeout=END_CHECK_TIMEOUT, cached=False)
        except KafkaException:
            # The destination does not answer: do not stall every partition on it; writes are checked on delivery.
            self._end_checks_off_until = now + END_CHECKS_OFF_SECONDS
            return True
        if high < w.next:
            # The watermark can under-count (Tansu: the last batch's base offset + 1): read the real end.
            try:
                high = kafka.true_end(self.reader, tp, END_CHECK_TIMEOUT)
            except (KafkaException, TimeoutError):
                return True  # the destination does not answer now: writes are checked on delivery
        if high < w.next:
            # The destination broker came back without records it had acknowledged (a crash between its saves,
            # an unclean leader election): a write now would land below its offset. Start again from the real end.
            return Restart(
                f"{w.label}: the replica partition ends at offset {high}, below offset {w.next} where this gateway"
                " left it (its broker lost acknowledged records)"
            )
        if high > w.next:
            try:
                rec = kafka.last_record(self.reader, tp, high)
            except KafkaException:
                rec = None
            if rec is not None and origin != w.dst_uuid and policy.origin_of(rec.headers(), w.dst_uuid) == origin:
                log.warning(
                    "%s: another gateway wrote up to offset %d meanwhile (this one left it at %d); letting it go",
                    w.label,
                    high,
                    w.next,
                )
                return LetGo()
            return Conflict(
                f"{w.label}: the replica partition ends at offset {high}, past offset {w.next} where this gateway"
                " left it; something else writes into this replica; replication of this partition stopped"
            )
        return True

    def close(self) -> None:
        for c in self._probes.values():
            c.close()
        self._probes.clear()
