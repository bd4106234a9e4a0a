"""The hot loop's work: records from the source partitions to the same offsets in the replicas.

Each pass consumes what the source consumers hold, hands it to the partitions' writers, throttles the links
that ask for it, checks the writes that were delivered, and starts every partition again from its real end
when writes expired or the producer was fenced. The clients come from outside (Partitions holds the consumers;
`new_producer` makes the producer), so that unit tests can pass fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import cast

from .. import kafka, policy
from ..applier import ReplicaConflict
from ..divergence import filler_tail, misplaced, tail_of
from ..kafka import KafkaException, Message, Producer, TopicPartition
from . import endcheck, quieting
from .endcheck import END_CHECK_IDLE, END_CHECK_TIMEOUT
from .links import Link
from .membership import SLOT_TOPIC
from .partitions import Partitions, UnitState

log = logging.getLogger("streamrepl.gateway")

THROTTLE_SLICE = 0.2  # seconds of records at the capped rate written at once
BATCH = 10000
#: After such a restart, how long the destination must have answered before partitions are taken up again:
#: a produce request sent to a frozen broker before the restart is appended when the broker resumes.
RESTART_GRACE_SECONDS = 2.0
#: How often an idle loop walks every partition for delivery errors and feeds waiting for their source. A pass
#: that served delivery reports checks them at once; errors are only ever set by those reports (also served by
#: flushes and the BufferError wait, which this catches within the period). At 800 partitions and a pass every
#: few ms, walking them on every pass was most of an idle gateway's CPU.
SWEEP_SECONDS = 0.25
#: How long a partition that another writer wrote into waits for this gateway's records in flight, so that its
#: error counts every one that landed at a wrong offset.
CONFLICT_FLUSH_SECONDS = 5.0


def _why(e: Exception) -> str:
    return str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)


class Mover:
    """`throttle_rate`: records/s per partition of a throttled link; the gateway and its cluster name the logs."""

    def __init__(
        self,
        partitions: Partitions,
        new_producer: Callable[[], Producer],
        throttle_rate: float,
        gateway_id: str = "",
        cluster_name: str = "",
    ):
        self.partitions = partitions
        self.stats = partitions.stats
        self.reader = partitions.reader
        self.throttle_rate = throttle_rate
        self.gateway_id = gateway_id
        self.cluster_name = cluster_name
        self._new_producer = new_producer
        self.producer = new_producer()
        #: after a restart of the writes, partitions wait for the destination (see ready_to_acquire)
        self.restart_pending = False
        #: when the destination answered again after the restart (None: not yet)
        self._answering_since: float | None = None
        self._end_checks_off_until = 0.0
        self._observers: dict[str, Callable[[float], None]] = {}
        self._next_sweep = 0.0
        #: replica partition -> its end, asked for ahead for the partitions one batch wakes (_ends_of_waking)
        self._ends_ahead: dict[tuple[str, int], int] = {}
        #: when the first throttled partition is due to resume (inf: none is throttled)
        self._unthrottle_at = float("inf")
        #: why the producer lost its connection to the destination since the loop last looked ("": it did not)
        self._destination_lost = ""

    def move_once(self) -> int:
        """One pass over the source consumers; returns the records seen (0: idle)."""
        busy = 0
        quiet = self.partitions.quiet
        now = time.monotonic()
        for lane, c in list(self.partitions.sources.items()):
            if quiet is not None and self.partitions.lane_quiet(lane):
                continue  # every feed it reads is quiet: the consumer holds nothing to read
            msgs = c.consume(BATCH, timeout=0)
            # A connection lost during this consume stops its feeds before anything they brought is written.
            self.partitions.recheck_lost_sources()
            if msgs:
                busy += self.apply_batch(lane, msgs)
        # Quiet feeds whose end moved (their watch asks from a thread of its own; news taken here costs nothing).
        quieting.wake_moved(self.partitions)
        served = self.poll_producer()
        if self.partitions.stale_producer:
            self.restart_writes(f"a partition it wrote was re-created: {self.partitions.stale_producer}")
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_SECONDS
            self.partitions.retry_unverified()
            quieting.quieten_idle(self.partitions)
        if sweep or served or self._destination_lost:
            self.check_writes()
        if now >= self._unthrottle_at:
            self.unthrottle()
        return busy

    def apply_batch(self, lane: str, msgs: list[Message]) -> int:
        """Hand a batch from one source consumer (`lane`, lanes.py) to the units its links feed; returns records seen."""
        units = self.partitions.units
        by_tp: dict[tuple[str, int], list[Message]] = {}
        eofs: list[Message] = []
        for m in msgs:
            if m.error() is None:
                by_tp.setdefault((m.topic(), m.partition()), []).append(m)  # type: ignore[arg-type]
            elif kafka.is_partition_eof(m.error()):
                eofs.append(m)
            else:
                log.warning("%s: %s", lane, m.error().str())  # type: ignore[union-attr]
        # Each source topic is one link's in a lane: the batch goes link by link.
        routes = self.partitions.lanes.routes.get(lane, {})
        by_link: dict[str, dict[tuple[str, int], list[Message]]] = {}
        for tp, batch in by_tp.items():
            name = routes.get(tp[0])
            if name is not None:
                by_link.setdefault(name, {})[tp] = batch
        for name, batches in by_link.items():
            link = self.partitions.links.get(name)
            if link is not None:
                self._apply_link(link, batches)
        for m in eofs:
            name = routes.get(m.topic())  # type: ignore[arg-type]
            unit = self.partitions.by_source.get((name, m.topic(), m.partition())) if name else None  # type: ignore[arg-type]
            state = units.get(unit) if unit else None
            if state is not None and not state.throttled_until and m.offset() > state.writer.next:  # type: ignore[operator]
                # Offsets at the end of the source with no visible record (a transaction marker).
                # (Not while throttled: the records after the slice written are not applied yet.)
                state.writer.fill_to(m.offset())  # type: ignore[arg-type]
                state.tail = filler_tail(state.writer.origin or state.writer.src_uuid)
        return len(msgs)

    def _apply_link(self, link: Link, by_tp: dict[tuple[str, int], list[Message]]) -> None:
        units = self.partitions.units
        self._ends_ahead = endcheck.ends_of_waking(self, link, by_tp)
        try:
            for (topic, partition), batch in by_tp.items():
                unit = self.partitions.by_source.get((link.name, topic, partition))
                state = units.get(unit) if unit else None
                if state is None:
                    continue
                self._write(state, link, batch)
        finally:
            self._ends_ahead = {}

    def _write(self, state: UnitState, link: Link, batch: list[Message]) -> None:
        w = state.writer
        last = batch[-1]
        if cast(int, batch[0].offset()) < w.next and not self.partitions.check_reread(state, link, batch):
            return
        now = time.monotonic()
        if w.idle() and now - state.last_write > END_CHECK_IDLE and cast(int, last.offset()) >= w.next:
            origin = policy.origin_of(last.headers(), link.src_uuid)
            if origin != w.dst_uuid and not endcheck.end_unchanged(self, state, origin):
                return
        state.last_write = now
        rest: list[Message] = []
        if link.throttle:
            # Write one slice, then pause the partition for as long as the slice takes at the capped
            # rate; the records after the slice are fetched again when it resumes.
            cap = max(1, int(self.throttle_rate * THROTTLE_SLICE))
            batch, rest = batch[:cap], batch[cap:]
        name = link.name
        observe = self._observers.get(name)
        if observe is None:
            latency = self.stats.latency
            observe = self._observers[name] = lambda seconds: latency.observe(name, seconds)
        w.observe = observe
        while True:
            try:
                records, nbytes = w.records, w.bytes
                w.write(batch, link.src_uuid)
                self.stats.applied(name, w.records - records, w.bytes - nbytes)
                if batch and batch[-1].offset() == w.next - 1:
                    state.tail = tail_of(batch[-1], link.src_uuid)
                break
            except BufferError:
                # The destination is behind: let it drain, then go on from where the writer stopped.
                self.poll_producer(0.2)
                if self.partitions.units.get(state.unit) is not state:
                    return  # the writes were restarted meanwhile
                batch = [m for m in batch if m.offset() >= state.writer.next]  # type: ignore[operator]
            except ReplicaConflict as e:
                self.partitions.fail(state.unit, str(e))
                return
            except KafkaException as e:
                # The producer is in a fatal state (fenced): nothing more can be written through it.
                self.restart_writes(_why(e))
                return
        if link.throttle:
            c = self.partitions.consumer_of(link.name)
            tp = state.feeds[link.name][1]
            if c is not None:
                state.throttled_until = time.monotonic() + len(batch) / self.throttle_rate
                self._unthrottle_at = min(self._unthrottle_at, state.throttled_until)
                c.pause([TopicPartition(tp.topic, tp.partition)])
                if rest:
                    c.seek(TopicPartition(tp.topic, tp.partition, cast(int, rest[0].offset())))

    def unthrottle(self) -> None:
        now = time.monotonic()
        self._unthrottle_at = float("inf")
        for state in self.partitions.units.values():
            if state.throttled_until > now:
                self._unthrottle_at = min(self._unthrottle_at, state.throttled_until)
            elif state.throttled_until:
                state.throttled_until = 0.0
                for name, (_, tp) in state.feeds.items():
                    c = self.partitions.consumer_of(name)
                    if c is not None:
                        c.resume([TopicPartition(tp.topic, tp.partition)])

    def poll_producer(self, timeout: float = 0) -> int:
        """Serve the producer's delivery reports; returns how many events were served. A producer in a fatal state
        raises here (an idempotent producer whose destination broker came back without its state: "out of order
        sequence number"): the writes start again with a new one, the gateway goes on."""
        try:
            return cast(int, self.producer.poll(timeout))
        except (KafkaException, SystemError) as e:
            self.restart_writes(_why(e))
            return 0

    def flush(self, timeout: float) -> int:
        """Wait for the queued records to be acknowledged; returns how many were not. A producer in a fatal state
        restarts the writes (its records' fate is unknown: every partition starts again from its real end)."""
        try:
            return cast(int, self.producer.flush(timeout))
        except (KafkaException, SystemError) as e:
            # SystemError: the fatal error raised inside a rebalance callback reaches us mangled (see membership.py).
            self.restart_writes(_why(e))
            return 0

    def destination_lost(self, why: str) -> None:
        """The producer lost its connection to a destination broker (its error_cb, from inside poll)."""
        self._destination_lost = self._destination_lost or why

    def check_writes(self) -> None:
        units = self.partitions.units
        lost, self._destination_lost = self._destination_lost, ""
        if lost and units:
            # A broker that went away may come back without records it had acknowledged. librdkafka would send
            # what it still holds once it is back, and after an epoch bump (a record expired meanwhile) with
            # sequence numbers the broker accepts: at its new end, below their offsets (the chaos suite's
            # destination crashes found such records). Thrown away before the broker is back, they are never
            # sent; every partition starts again from its real end.
            self.restart_writes(f"lost the connection to the destination: {lost}")
            return
        uncertain = next((st.writer.uncertain for st in units.values() if st.writer.uncertain), "")
        if uncertain:
            self.restart_writes(uncertain)
            return
        for unit, state in list(units.items()):
            if state.writer.errors:
                why = f"{state.writer.errors[0]}; replication of this partition stopped"
                self.partitions.fail(unit, self.conflict_error(state, why) if state.writer.shifted else why)

    def conflict_error(self, state: UnitState, fallback: str) -> str:
        """The error of a partition that another writer wrote into: where the replica stops matching its source and
        how many records this gateway sent landed at wrong offsets (divergence.misplaced), read once they have all
        landed; `fallback` when that cannot be known."""
        w = state.writer
        links = [link for link, _ in state.feeds.values()]
        link = next((x for x in links if x.src_uuid == w.origin), links[0] if links else None)
        if link is None:
            return fallback
        # The records it sends are of the partition's origin; a partition of the replica's own takes none.
        origin = link.src_uuid if w.origin in (None, w.dst_uuid) else w.origin
        try:
            if self.producer.flush(CONFLICT_FLUSH_SECONDS) > 0:
                return fallback
            found = misplaced(
                self.reader,
                TopicPartition(w.topic, w.partition),
                w.acked,
                w.next,
                origin,
                w.dst_uuid,
            )
        except (KafkaException, SystemError, TimeoutError):
            return fallback
        return found.describe(w.label, str(link.src), str(link.dst), state.unit.topic)

    def restart_writes(self, why: str) -> None:
        """Records handed to the producer expired, or the producer was fenced: where they are is unknown.
        Let every partition go, throw the producer away with what it still holds, and take the partitions
        up again from their real ends once the destination has answered for RESTART_GRACE_SECONDS."""
        log.warning(
            "gateway %s: writes into %s failed (%s); every partition starts again from its real end",
            self.gateway_id,
            self.cluster_name,
            why,
        )
        self.stats.write_restarts += 1
        self.partitions.drop_all()
        self.partitions.left_at.clear()  # a new producer has no sequence to keep
        self.partitions.stale_producer = ""
        old = self.producer
        try:
            old.purge(in_queue=True, in_flight=True)
            old.poll(0)
        except (KafkaException, RuntimeError, SystemError):  # a producer in a fatal state raises here too
            pass
        self.producer = self._new_producer()
        self.restart_pending = True
        self._answering_since = None
        self._destination_lost = ""  # the old producer's news

    def ready_to_acquire(self) -> bool:
        """False while a restart of the writes waits for the destination (see restart_writes)."""
        if not self.restart_pending:
            return True
        now = time.monotonic()
        if self._answering_since is None:
            try:
                self.reader.list_topics(SLOT_TOPIC, timeout=END_CHECK_TIMEOUT)
            except KafkaException:
                return False
            self._answering_since = now
        if now - self._answering_since < RESTART_GRACE_SECONDS:
            return False
        self.restart_pending = False
        return True
