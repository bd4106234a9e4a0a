"""The hot loop's work (MirrorMaker 2's MirrorSourceTask): records from the source partitions to the same offsets in
the replicas.

Each pass consumes what the source consumers hold (feeds.py), routes each batch to the replica partition its link
feeds (units.py), asks the guard (guard.py) about records read again and about partitions that were quiet, hands the
records to the partition's writer, throttles the links that ask for it, and has the write session (writes.py) serve
and check the deliveries. The pieces are passed in (assemble() makes them from client factories), so that unit tests
run it on fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import cast

from .. import kafka, policy
from ..applier import OriginClash, ReplicaConflict
from ..divergence import filler_tail, tail_of
from ..kafka import Consumer, KafkaException, Message, Producer
from .feeds import SourceFeeds
from .guard import Clash, Conflict, Fail, LetGo, ReplicaGuard, Restart, Reverify, clash_error, clashes, quiet_for_long
from .links import Link, Unit
from .quiet import QuietFeeds
from .state import UnitState
from .stats import GatewayStats
from .units import UnitTable, no_clash_report, no_report
from .writes import QUEUE_AGE, WriteSession, why_of

log = logging.getLogger("streamrepl.gateway")

THROTTLE_SLICE = 0.2  # seconds of records at the capped rate written at once
BATCH = 10000
#: How often an idle loop walks every partition for delivery errors and feeds waiting for their source. A pass
#: that served delivery reports checks them at once; errors are only ever set by those reports (also served by
#: flushes and the BufferError wait, which this catches within the period). At 800 partitions and a pass every
#: few ms, walking them on every pass was most of an idle gateway's CPU.
SWEEP_SECONDS = 0.25
#: How long each wait for room in the write window serves the destination's acknowledgements (seconds).
QUEUE_WAIT_SLICE = 0.05


class Mover:
    """`throttle_rate`: records/s per partition of a throttled link."""

    def __init__(
        self,
        table: UnitTable,
        feeds: SourceFeeds,
        guard: ReplicaGuard,
        session: WriteSession,
        stats: GatewayStats,
        throttle_rate: float,
    ):
        self.table, self.feeds, self.guard, self.session, self.stats = table, feeds, guard, session, stats
        self.throttle_rate = throttle_rate
        self._observers: dict[str, Callable[[float], None]] = {}
        self._next_sweep = 0.0
        #: when the first throttled partition is due to resume (inf: none is throttled)
        self._unthrottle_at = float("inf")

    @classmethod
    def assemble(
        cls,
        reader: Consumer,
        stats: GatewayStats,
        new_source_consumer: Callable[..., Consumer],
        new_producer: Callable[[], Producer],
        throttle_rate: float,
        on_fail: Callable[[Unit, str], None] | None = None,
        quiet: QuietFeeds | None = None,
        on_clash: Callable[[Unit, Link, str], None] | None = None,
        new_probe: Callable[..., Consumer] | None = None,
        gateway_id: str = "",
        cluster_name: str = "",
        queue_age: float = QUEUE_AGE,
    ) -> Mover:
        """The pieces of one gateway's loop, on one replica `reader`: the source feeds (`new_source_consumer`, the
        quiet feeds), the guard (its probes by `new_probe`, by default as the feeds' consumers), the unit table
        (`on_fail(unit, error)` reports a failed unit) and the write session (`new_producer`)."""
        feeds = SourceFeeds(new_source_consumer, quiet)
        guard = ReplicaGuard(reader, new_probe or new_source_consumer, stats)
        table = UnitTable(reader, feeds, guard, stats, on_fail or no_report, on_clash or no_clash_report)
        session = WriteSession(new_producer, reader, table, stats, gateway_id, cluster_name, queue_age)
        return cls(table, feeds, guard, session, stats, throttle_rate)

    def move_once(self) -> int:
        """One pass over the source consumers; returns the records seen (0: idle)."""
        busy = 0
        for strand, c in list(self.feeds.consumers.items()):
            if self.feeds.strand_quiet(strand):
                continue  # every feed it reads is quiet: the consumer holds nothing to read
            msgs = c.consume(BATCH, timeout=0)
            # A connection lost during this consume stops its feeds before anything they brought is written.
            self.table.recheck_lost_sources()
            if msgs:
                busy += self.apply_batch(strand, msgs)
        # Quiet feeds whose end moved (their watch asks from a thread of its own; news taken here costs nothing).
        # A source cluster whose connection was lost first has its feeds stopped and compared again.
        moved = self.feeds.quiet_news()
        self.table.recheck_lost_sources()
        self.feeds.wake_moved(moved, self.table.units)
        served = self.session.poll()
        if self.table.stale_producer:
            self.session.restart(f"a partition it wrote was re-created: {self.table.stale_producer}")
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_SECONDS
            self.table.retry_unverified()
            self.feeds.quieten_idle(self.table.units)
        if sweep or served or self.session.destination_was_lost:
            self.session.check()
        if now >= self._unthrottle_at:
            self.unthrottle()
        return busy

    def apply_batch(self, strand: str, msgs: list[Message]) -> int:
        """Hand a batch from one source consumer (`strand`, lanes.py) to the units its links feed; returns records
        seen."""
        units = self.table.units
        by_tp: dict[tuple[str, int], list[Message]] = {}
        eofs: list[Message] = []
        for m in msgs:
            if m.error() is None:
                by_tp.setdefault((m.topic(), m.partition()), []).append(m)  # type: ignore[arg-type]
            elif kafka.is_partition_eof(m.error()):
                eofs.append(m)
            else:
                log.warning("%s: %s", strand, m.error().str())  # type: ignore[union-attr]
        # Each source topic is one link's in a strand: the batch goes link by link.
        by_link: dict[str, dict[tuple[str, int], list[Message]]] = {}
        for tp, batch in by_tp.items():
            name = self.feeds.route(strand, tp[0])
            if name is not None:
                by_link.setdefault(name, {})[tp] = batch
        for name, batches in by_link.items():
            link = self.feeds.link(name)
            if link is not None:
                self._apply_link(link, batches)
        for m in eofs:
            name = self.feeds.route(strand, m.topic())  # type: ignore[arg-type]
            unit = self.feeds.unit_of(name, m.topic(), m.partition()) if name else None  # type: ignore[arg-type]
            state = units.get(unit) if unit else None
            if state is not None and not state.throttled_until and m.offset() > state.writer.next:  # type: ignore[operator]
                # Offsets at the end of the source with no visible record (a transaction marker).
                # (Not while throttled: the records after the slice written are not applied yet.)
                state.writer.fill_to(m.offset())  # type: ignore[arg-type]
                state.tail = filler_tail(state.writer.origin or state.writer.src_uuid)
        return len(msgs)

    def _apply_link(self, link: Link, by_tp: dict[tuple[str, int], list[Message]]) -> None:
        units = self.table.units
        batches: list[tuple[UnitState, list[Message]]] = []
        for (topic, partition), batch in by_tp.items():
            unit = self.feeds.unit_of(link.name, topic, partition)
            state = units.get(unit) if unit else None
            if state is not None:
                batches.append((state, batch))
        self.guard.look_ahead([(state, cast(int, batch[-1].offset())) for state, batch in batches])
        try:
            for state, batch in batches:
                if units.get(state.unit) is state:  # not let go by a batch before it (a restart of the writes)
                    self._write(state, link, batch)
        finally:
            self.guard.forget_ahead()

    def _write(self, state: UnitState, link: Link, batch: list[Message]) -> None:
        w = state.writer
        last = batch[-1]
        if cast(int, batch[0].offset()) < w.next:
            verdict = self.guard.check_reread(state, link, batch)
            if isinstance(verdict, Fail):
                self.table.fail(state.unit, verdict.error)
                return
            if isinstance(verdict, Clash):
                self.table.clash(state, link, verdict.error)
                return
            if isinstance(verdict, Reverify):
                self.table.reverify_feed(state, link.name)
                return
        now = time.monotonic()
        if quiet_for_long(state, now, cast(int, last.offset())):
            origin = policy.origin_of(last.headers(), link.src_uuid)
            if origin != w.dst_uuid and not self._end_unchanged(state, origin):
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
        w.on_ack = self.session.acked_after
        written = len(batch)
        while True:
            room = self.session.room()
            if room <= 0 and not w.errors:
                # The destination is behind (the write window is full: WriteSession): let it acknowledge some.
                self.stats.destination_waits += 1
                self.session.poll(QUEUE_WAIT_SLICE)
                if self.table.units.get(state.unit) is not state:
                    return  # the writes were restarted meanwhile
                continue
            part = batch if room >= len(batch) or w.errors else batch[:room]
            try:
                records, nbytes = w.records, w.bytes
                w.write(part, link.src_uuid)
                self.stats.applied(name, w.records - records, w.bytes - nbytes)
                if part[-1].offset() == w.next - 1:
                    state.tail = tail_of(part[-1], link.src_uuid)
                if part is batch:
                    break
                batch = batch[len(part) :]
            except BufferError:
                # The destination is behind: let it drain, then go on from where the writer stopped.
                self.session.poll(0.2)
                if self.table.units.get(state.unit) is not state:
                    return  # the writes were restarted meanwhile
                batch = [m for m in batch if m.offset() >= state.writer.next]  # type: ignore[operator]
            except OriginClash as e:
                if clashes(state, link, e.held):
                    # Another upstream's records of the same topic are in it: this feed stops, the partition goes on.
                    self.table.clash(state, link, clash_error(state, link, e.held))
                else:
                    self.table.fail(state.unit, str(e))
                return
            except ReplicaConflict as e:
                self.table.fail(state.unit, str(e))
                return
            except KafkaException as e:
                # The producer is in a fatal state (fenced): nothing more can be written through it.
                self.session.restart(why_of(e))
                return
        if link.throttle:
            tp = state.feeds[link.name][1]
            resume_at = cast(int, rest[0].offset()) if rest else None
            if self.feeds.pause(link.name, tp, resume_at):
                state.throttled_until = time.monotonic() + written / self.throttle_rate
                self._unthrottle_at = min(self._unthrottle_at, state.throttled_until)

    def _end_unchanged(self, state: UnitState, origin: str) -> bool:
        """The guard's end check before writing into a partition that was quiet (guard.end_unchanged), acted on."""
        verdict = self.guard.end_unchanged(state, origin)
        if isinstance(verdict, Restart):
            self.session.restart(verdict.why)
        elif isinstance(verdict, LetGo):
            self.table.drop(state.unit)
        elif isinstance(verdict, Conflict):
            self.table.fail(state.unit, self.session.conflict_error(state, verdict.why))
        return verdict is True

    def unthrottle(self) -> None:
        now = time.monotonic()
        self._unthrottle_at = float("inf")
        for state in self.table.units.values():
            if state.throttled_until > now:
                self._unthrottle_at = min(self._unthrottle_at, state.throttled_until)
            elif state.throttled_until:
                state.throttled_until = 0.0
                for name, (_, tp) in state.feeds.items():
                    self.feeds.resume(name, tp)
