"""The gateway: a worker on the destination side that applies source records to replicas.

Gateways of one destination cluster share the work through Kafka's own consumer-group
protocol. Each joins the group `streamrepl-gateways-<cluster>` on a slot topic of
SLOTS partitions in the destination cluster; the round-robin assignor spreads the
slots over the live gateways, and each destination partition hashes to one slot, so
exactly one live gateway owns it. When a gateway dies or stops (SIGTERM drains its
writes, then it leaves like a crashed one: see shutdown()) its slots move to the others
once its session expires (6 s); when all are down, the sources keep the data and the
first gateway back carries on from each replica partition's real end.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from . import broker, links, policy, status, topics
from .applier import OffsetPreservingWriter, ReplicaConflict, resume_point
from .errors import StreamreplError
from .metrics import LatencyHistogram, MetricsServer
from .paths import METADATA_TOPIC, kafka_topic_name
from .registry import Cluster, Registry
from .streams import Resolved, kafka_configs

log = logging.getLogger("streamrepl.gateway")

SLOT_TOPIC = "__streamrepl_gateway_slots"
SLOTS = 64
REFRESH_SECONDS = 2.0
#: how often the plan watcher asks whether any stream record changed (a change is applied at once)
CHANGE_POLL_SECONDS = 0.2
REPORT_SECONDS = 5.0
#: What is wrong with the tuning variables below; check_settings() turns it into a one-line error at start.
_BAD_SETTINGS: list[str] = []


def _setting(name: str, default: float, kind: type = int, minimum: float = 0) -> Any:
    raw = os.environ.get(name)
    if raw is None:
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        _BAD_SETTINGS.append(f"{name}={raw!r} is not a {'whole number' if kind is int else 'number'}")
        return kind(default)
    if value < minimum:
        _BAD_SETTINGS.append(f"{name}={raw} must be {minimum:g} or more")
        return kind(default)
    return value


THROTTLE_RATE: float = _setting("STREAMREPL_THROTTLE_RATE", 1000, float, minimum=1)  # records/s per partition
#: how long the group waits for a silent gateway before its slots move (heartbeats come from librdkafka's
#: own thread every second, so only a frozen process or a cut network misses them)
#: Tansu takes about half the session again to finish the rebalance that follows (BENCHMARKS.md: failover).
#: A gateway frozen past its session cannot write after the one that takes over, whatever the session, since
#: its records expire first (MESSAGE_TIMEOUT_MS); 10 s was the default while they did not (RELIABILITY.md).
SESSION_TIMEOUT_MS: int = _setting("STREAMREPL_GATEWAY_SESSION_MS", 6000, minimum=1000)
THROTTLE_SLICE = 0.2  # seconds of records at the capped rate written at once
BATCH = 10000
END_CHECK_TIMEOUT = 1.0  # seconds
#: A partition quiet for longer than this has its end checked before it is written again (_end_unchanged).
#: Not after every short gap: at a few thousand records/s each partition goes idle between batches, and a
#: request on the loop before each batch doubled the p99 latency (BENCHMARKS.md). A stray write in a gap
#: shorter than this is still caught, by the delivery check, after the batch that follows it.
END_CHECK_IDLE = 0.5
#: how long the loop sleeps when no source had records (the source fetch waits are short too: latency)
IDLE_SLEEP = 0.002
#: How long a record may wait in the producer before it expires instead of being sent. It must be shorter
#: than the session: a gateway frozen (a VM pause, SIGSTOP) past its session while records were queued would
#: otherwise send them when it resumes, after the gateway that took its partitions over wrote there (doubled
#: records, and the source's records at those offsets lost). Expired, they are never sent (librdkafka drops
#: them before sending on resume, and the epoch bump that follows fences the producer), and the gateway
#: starts its partitions again from their real ends with a new producer (_restart_writes).
MESSAGE_TIMEOUT_MS: int = _setting("STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS", SESSION_TIMEOUT_MS // 2, minimum=1)
#: After such a restart, how long the destination must have answered before partitions are taken up again:
#: a produce request sent to a frozen broker before the restart is appended when the broker resumes.
RESTART_GRACE_SECONDS = 2.0
#: how long the producer gathers records into a batch (tests raise it so that records stay queued longer)
LINGER_MS: int = _setting("STREAMREPL_GATEWAY_LINGER_MS", 2)
#: how long a source fetch waits for records at the broker (Tansu answers at the deadline, not on arrival)
SOURCE_FETCH_WAIT_MS = 10


def slot_of(unit: links.Unit) -> int:
    return zlib.crc32(unit.key.encode()) % SLOTS


@dataclass
class UnitState:
    unit: links.Unit
    writer: OffsetPreservingWriter
    feeds: dict[str, tuple[links.Link, TopicPartition]] = field(default_factory=dict)  # link name -> source tp
    throttled_until: float = 0.0
    reported: tuple[str, int] = ("", -1)
    #: feeds whose source end was compared with the replica's (see _recheck_lagging_feeds)
    rechecked: set[str] = field(default_factory=set)
    #: when records were last handed to the writer (monotonic; 0: never, since acquired)
    last_write: float = 0.0


class Gateway:
    def __init__(self, reg: Registry, cluster: str, gateway_id: str | None = None):
        self.reg = reg
        self.cluster = reg.get(cluster)
        self.id = gateway_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stopping = False
        self.slots: set[int] = set()
        self.units: dict[links.Unit, UnitState] = {}
        self.errored: dict[links.Unit, str] = {}
        self.sources: dict[str, Consumer] = {}  # link name -> consumer of the source partitions
        self.by_source: dict[tuple[str, str, int], links.Unit] = {}  # (link, src topic, partition) -> unit
        self.plan: links.Plan | None = None
        self.applied = 0
        self.bytes = 0
        self.rebalances = 0
        self.failures = 0
        #: per link name: records and value bytes applied, and the replication latency (see metrics.py)
        self.records_by_link: dict[str, int] = {}
        self.bytes_by_link: dict[str, int] = {}
        self.latency = LatencyHistogram()
        self._observers: dict[str, Callable[[float], None]] = {}
        self.producer = self._new_producer()
        self.write_restarts = 0
        #: after a restart of the writes, partitions wait for the destination (see _ready_to_acquire)
        self._restart_pending = False
        #: when the destination answered again after the restart (None: not yet)
        self._answering_since: float | None = None
        self.reader = broker.consumer(self.cluster)
        self.group: Consumer | None = None
        #: leave the group on stop (LeaveGroup); run_foreground() exits the process instead (see shutdown())
        self.leave_group = True
        self._end_checks_off_until = 0.0
        self._plan_lock = threading.Lock()
        self._published: tuple[links.Plan, set[str]] | None = None
        self._refresh_now = threading.Event()
        #: cluster name -> the watcher's consumer that asks for the end of its metadata topic
        self._meta_watch: dict[str, Consumer] = {}
        #: source consumer name -> the link it reads (rebuilt with each plan)
        self._links_by_source: dict[str, links.Link] = {}
        self.metrics: MetricsServer | None = None

    # -- set-up ---------------------------------------------------------------------------
    def _new_producer(self) -> Producer:
        return broker.producer(
            self.cluster,
            **{
                "linger.ms": LINGER_MS,
                "batch.num.messages": 10000,
                # A queue of a second or two of records: what waits longer than MESSAGE_TIMEOUT_MS expires.
                "queue.buffering.max.messages": 200000,
                "queue.buffering.max.kbytes": 65536,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "client.id": f"streamrepl-gateway-{self.id}",
            },
        )

    def _ensure_internal_topics(self) -> None:
        existing = broker.topics(self.cluster)
        if SLOT_TOPIC not in existing:
            try:
                broker.create_topics(self.cluster, [(SLOT_TOPIC, SLOTS, {})])
            except StreamreplError:
                if SLOT_TOPIC not in broker.topics(self.cluster):
                    raise
        status.ensure_topic(self.cluster)

    def _join(self) -> None:
        self.group = broker.consumer(
            self.cluster,
            group=f"streamrepl-gateways-{self.cluster.name}",
            **{
                "client.id": self.id,
                "partition.assignment.strategy": "roundrobin",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 1000,
                "enable.partition.eof": False,
            },
        )
        self.group.subscribe(
            [SLOT_TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    def _on_assign(self, _: Consumer, parts: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.slots = {tp.partition for tp in parts}
        log.info("gateway %s owns %d slots", self.id, len(self.slots))
        self._reapply = True

    def _on_revoke(self, _: Consumer, parts: list[TopicPartition]) -> None:
        self.rebalances += 1
        lost = {tp.partition for tp in parts}
        # Everything queued for the partitions we give up must land before another gateway starts on them.
        self.producer.flush(30)
        for unit in [u for u in self.units if slot_of(u) in lost]:
            self._drop(unit)
        self.slots -= lost
        log.info("gateway %s gave up %d slots", self.id, len(lost))

    # -- units --------------------------------------------------------------------------------
    def _source_consumer(self, link: links.Link) -> Consumer:
        c = self.sources.get(link.name)
        if c is None:
            extra: dict[str, Any] = {"fetch.wait.max.ms": SOURCE_FETCH_WAIT_MS, "queued.min.messages": 200000}
            c = broker.consumer(link.src_cluster, **extra)
            self.sources[link.name] = c
        return c

    def _ensure_topics(self, plan: links.Plan) -> None:
        present = broker.topics(self.cluster)
        for (dst, topic), n in plan.topics.items():
            kt = kafka_topic_name(dst, topic)
            if kt in present:
                continue
            r = Resolved(dst, self.cluster)
            rec = r.store.get(dst.path)
            if rec is None:
                continue
            try:
                # Replica topics stamp CreateTime so that the source's timestamps survive the copy.
                broker.create_topics(self.cluster, [(kt, n, kafka_configs(rec, "createtime"))])
            except StreamreplError as e:
                if kt not in broker.topics(self.cluster):
                    log.error("cannot create %s: %s", kt, e)
                    continue
            topics.register_existing(r, topic, n)
            log.info("created topic %s:%s (%d partitions)", dst, topic, n)

    def _acquire(self, unit: links.Unit, feeds: list[tuple[links.Link, str]]) -> None:
        dst_kt = kafka_topic_name(unit.dst, unit.topic)
        dst_uuid = feeds[0][0].dst_uuid
        end, origin = resume_point(self.reader, TopicPartition(dst_kt, unit.partition), dst_uuid)
        writer = OffsetPreservingWriter(
            self.producer, dst_kt, unit.partition, end, dst_uuid, feeds[0][0].src_uuid, origin, label=unit.key
        )
        state = UnitState(unit, writer)
        self.units[unit] = state
        for link, src_kt in feeds:
            self._add_feed(state, link, src_kt)
        log.info("acquired %s at offset %d", unit.key, end)

    def _add_feed(self, state: UnitState, link: links.Link, src_kt: str) -> None:
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

    def _drop(self, unit: links.Unit) -> None:
        state = self.units.pop(unit, None)
        if state is None:
            return
        for name in list(state.feeds):
            self._remove_feed(state, name)

    def _fail(self, unit: links.Unit, error: str) -> None:
        log.error("%s", error)
        self.failures += 1
        self.errored[unit] = error
        self._drop(unit)
        self._report(unit, "error", error)

    # -- refresh: follow the metadata -----------------------------------------------------------
    # Reading the metadata (every stream record of every cluster involved, topic lists, topic creation)
    # takes tens to hundreds of milliseconds: it runs in a thread of its own, so that the hot loop never
    # waits for it; the loop only applies each new plan, which costs nothing when nothing changed.
    def _watch_plan(self) -> None:
        logged: list[str] = []
        plan: links.Plan | None = None
        while not self.stopping:
            try:
                plan = links.discover(self.reg, self.cluster.name)
                if plan.problems != logged:
                    for p in plan.problems:
                        log.warning("%s", p)
                    logged = plan.problems
                self._ensure_topics(plan)
                present = set(broker.topics(self.cluster))
                with self._plan_lock:
                    self._published = (plan, present)
            except StreamreplError as e:
                log.warning("cannot read replication metadata: %s", e)
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad read
                log.exception("reading replication metadata failed")
            self._wait_for_metadata_change(plan.clusters if plan is not None else [])
            self._refresh_now.clear()
        for c in self._meta_watch.values():
            c.close()

    def _wait_for_metadata_change(self, clusters: list[Cluster]) -> None:
        """Wait until REFRESH_SECONDS pass, or sooner when a stream record was written in one of the clusters
        the plan was read from (`replica resume`, `topic create`...): asking for the end of each metadata
        topic every CHANGE_POLL_SECONDS costs one small request per cluster, a full read costs far more."""
        ends = self._metadata_ends(clusters)
        deadline = time.monotonic() + REFRESH_SECONDS
        while not self.stopping and time.monotonic() < deadline:
            if self._refresh_now.wait(CHANGE_POLL_SECONDS):
                return
            now = self._metadata_ends(clusters)
            if any(now.get(name, -1) != end for name, end in ends.items() if end >= 0):
                return

    def _metadata_ends(self, clusters: list[Cluster]) -> dict[str, int]:
        """The end of each cluster's metadata topic (-1 when it cannot be read now)."""
        ends: dict[str, int] = {}
        for cluster in clusters:
            c = self._meta_watch.get(cluster.name)
            if c is None:
                c = self._meta_watch[cluster.name] = broker.consumer(cluster)
            try:
                ends[cluster.name] = c.get_watermark_offsets(
                    TopicPartition(METADATA_TOPIC, 0), timeout=END_CHECK_TIMEOUT, cached=False
                )[1]
            except KafkaException:
                ends[cluster.name] = -1
        return ends

    def refresh(self) -> None:
        """Read the metadata and apply it now (the loop does this through the watcher thread)."""
        plan = links.discover(self.reg, self.cluster.name)
        self._ensure_topics(plan)
        self.apply_plan(plan, set(broker.topics(self.cluster)))

    def apply_plan(self, plan: links.Plan, present: set[str]) -> None:
        self.plan = plan
        wanted = {u: f for u, f in plan.units.items() if slot_of(u) in self.slots}
        ready = self._ready_to_acquire()
        for unit in [u for u in self.units if u not in wanted]:
            self.producer.flush(30)
            self._drop(unit)
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
                    self._acquire(unit, feeds)
                except ReplicaConflict as e:
                    self._fail(unit, str(e))
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
        self._recheck_lagging_feeds()
        live = {link.name for link in plan.links}
        for name in [n for n in self.sources if n not in live]:
            self.sources.pop(name).close()
        self._links_by_source = {
            name: next(state.feeds[name][0] for state in self.units.values() if name in state.feeds)
            for name in self.sources
            if any(name in state.feeds for state in self.units.values())
        }

    # -- the hot path ---------------------------------------------------------------------------
    def _apply(self, link: links.Link, msgs: list[Message]) -> int:
        """Hand a batch from one source consumer to the units it feeds; returns records seen."""
        by_tp: dict[tuple[str, int], list[Message]] = {}
        eofs: list[Message] = []
        for m in msgs:
            if m.error() is None:
                by_tp.setdefault((m.topic(), m.partition()), []).append(m)  # type: ignore[arg-type]
            elif m.error().code() == KafkaError._PARTITION_EOF:  # type: ignore[union-attr]
                eofs.append(m)
            else:
                log.warning("%s: %s", link.name, m.error().str())  # type: ignore[union-attr]
        for (topic, partition), batch in by_tp.items():
            unit = self.by_source.get((link.name, topic, partition))
            state = self.units.get(unit) if unit else None
            if state is None:
                continue
            self._write(state, link, batch)
        for m in eofs:
            unit = self.by_source.get((link.name, m.topic(), m.partition()))  # type: ignore[arg-type]
            state = self.units.get(unit) if unit else None
            if state is not None and not state.throttled_until and m.offset() > state.writer.next:  # type: ignore[operator]
                # Offsets at the end of the source with no visible record (a transaction marker).
                # (Not while throttled: the records after the slice written are not applied yet.)
                state.writer.fill_to(m.offset())  # type: ignore[arg-type]
        return len(msgs)

    def _recheck_lagging_feeds(self) -> None:
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

    def _end_unchanged(self, state: UnitState, origin: str) -> bool:
        """Before writing into a partition whose writes are all acknowledged and that was quiet for
        END_CHECK_IDLE, check that nothing else wrote into it meanwhile (a stray producer): its record would
        shift every record written after it. This costs a request only when a partition wakes up.

        When the records written meanwhile are copies of the same origin, another gateway took the
        partition over (this one was stalled past its session, and has not heard yet): the partition
        is let go, not failed; it is acquired again from its real end if this gateway still owns it."""
        now = time.monotonic()
        if now < self._end_checks_off_until:
            return True
        w = state.writer
        try:
            _, high = self.reader.get_watermark_offsets(
                TopicPartition(w.topic, w.partition), timeout=END_CHECK_TIMEOUT, cached=False
            )
        except KafkaException:
            # The destination does not answer: do not stall every partition on it; writes are checked on delivery.
            self._end_checks_off_until = now + 10
            return True
        if high > w.next:
            try:
                rec = broker.last_record(self.reader, TopicPartition(w.topic, w.partition), high)
            except KafkaException:
                rec = None
            if rec is not None and origin != w.dst_uuid and policy.origin_of(rec.headers(), w.dst_uuid) == origin:
                log.warning(
                    "%s: another gateway wrote up to offset %d meanwhile (this one left it at %d); letting it go",
                    w.label,
                    high,
                    w.next,
                )
                self._drop(state.unit)
                return False
            self._fail(
                state.unit,
                f"{w.label}: the replica partition ends at offset {high}, past offset {w.next} where this gateway"
                " left it; something else writes into this replica; replication of this partition stopped",
            )
            return False
        return True

    def _write(self, state: UnitState, link: links.Link, batch: list[Message]) -> None:
        w = state.writer
        last = batch[-1]
        now = time.monotonic()
        if w.idle() and now - state.last_write > END_CHECK_IDLE and cast(int, last.offset()) >= w.next:
            origin = policy.origin_of(last.headers(), link.src_uuid)
            if origin != w.dst_uuid and not self._end_unchanged(state, origin):
                return
        state.last_write = now
        rest: list[Message] = []
        if link.throttle:
            # Write one slice, then pause the partition for as long as the slice takes at the capped
            # rate; the records after the slice are fetched again when it resumes.
            cap = max(1, int(THROTTLE_RATE * THROTTLE_SLICE))
            batch, rest = batch[:cap], batch[cap:]
        name = link.name
        observe = self._observers.get(name)
        if observe is None:
            observe = self._observers[name] = lambda seconds: self.latency.observe(name, seconds)
        w.observe = observe
        while True:
            try:
                records, nbytes = w.records, w.bytes
                w.write(batch, link.src_uuid)
                self.applied += w.records - records
                self.records_by_link[name] = self.records_by_link.get(name, 0) + w.records - records
                self.bytes_by_link[name] = self.bytes_by_link.get(name, 0) + w.bytes - nbytes
                break
            except BufferError:
                # The destination is behind: let it drain, then go on from where the writer stopped.
                self.producer.poll(0.2)
                batch = [m for m in batch if m.offset() >= state.writer.next]  # type: ignore[operator]
            except ReplicaConflict as e:
                self._fail(state.unit, str(e))
                return
            except KafkaException as e:
                # The producer is in a fatal state (fenced): nothing more can be written through it.
                self._restart_writes(str(e.args[0].str() if e.args else e))
                return
        if link.throttle:
            c = self.sources.get(link.name)
            tp = state.feeds[link.name][1]
            if c is not None:
                state.throttled_until = time.monotonic() + len(batch) / THROTTLE_RATE
                c.pause([TopicPartition(tp.topic, tp.partition)])
                if rest:
                    c.seek(TopicPartition(tp.topic, tp.partition, cast(int, rest[0].offset())))

    def _unthrottle(self) -> None:
        now = time.monotonic()
        for state in self.units.values():
            if state.throttled_until and state.throttled_until <= now:
                state.throttled_until = 0.0
                for name, (_, tp) in state.feeds.items():
                    c = self.sources.get(name)
                    if c is not None:
                        c.resume([TopicPartition(tp.topic, tp.partition)])

    def _check_writes(self) -> None:
        uncertain = next((st.writer.uncertain for st in self.units.values() if st.writer.uncertain), "")
        if uncertain:
            self._restart_writes(uncertain)
            return
        for unit, state in list(self.units.items()):
            if state.writer.errors:
                self._fail(
                    unit, f"{state.writer.label}: {state.writer.errors[0]}; replication of this partition stopped"
                )

    def _restart_writes(self, why: str) -> None:
        """Records handed to the producer expired, or the producer was fenced: where they are is unknown.
        Let every partition go, throw the producer away with what it still holds, and take the partitions
        up again from their real ends once the destination has answered for RESTART_GRACE_SECONDS."""
        log.warning(
            "gateway %s: writes into %s failed (%s); every partition starts again from its real end",
            self.id,
            self.cluster.name,
            why,
        )
        self.write_restarts += 1
        for unit in list(self.units):
            self._drop(unit)
        old = self.producer
        try:
            old.purge(in_queue=True, in_flight=True)
            old.poll(0)
        except (KafkaException, RuntimeError):
            pass
        self.producer = self._new_producer()
        self._restart_pending = True
        self._answering_since = None

    def _ready_to_acquire(self) -> bool:
        """False while a restart of the writes waits for the destination (see _restart_writes)."""
        if not self._restart_pending:
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
        self._restart_pending = False
        return True

    # -- reporting ----------------------------------------------------------------------------
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

    def cursor_stat(self, name: str) -> int:
        """A counter of the cursor replication thread (0 when it does not run)."""
        return int(getattr(getattr(self, "cursor_sync", None), name, 0) or 0)

    def _report(self, unit: links.Unit, state: str, error: str = "") -> None:
        feeds = self.units[unit].feeds if unit in self.units else {}
        names = [link.src for link, _ in feeds.values()] or [
            link.src for link, _ in (self.plan.units.get(unit, []) if self.plan else [])
        ]
        nxt = self.units[unit].writer.next if unit in self.units else -1
        for src in names:
            body = {"state": state, "error": error, "gateway": self.id, "next": nxt, "updated": int(time.time() * 1000)}
            self.producer.produce(
                status.STATUS_TOPIC,
                key=status.unit_key(str(unit.dst), str(src), unit.topic, unit.partition).encode(),
                value=json.dumps(body).encode(),
            )

    def report(self) -> None:
        for unit, st in self.units.items():
            mark = ("ok", st.writer.next)
            if st.reported != mark:
                self._report(unit, "ok")
                st.reported = mark
        body = {
            "gateway": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slots": sorted(self.slots),
            "units": sorted(u.key for u in self.units),
            "applied": self.applied,
            "errors": len(self.errored),
            "updated": int(time.time() * 1000),
        }
        self.producer.produce(
            status.STATUS_TOPIC, key=status.gateway_key(self.id).encode(), value=json.dumps(body).encode()
        )

    def serve_metrics(self, addr: str, port: int) -> int:
        """Serve Prometheus metrics (see metrics.py); returns the port. A port in use is a clear error."""
        from .errors import InvalidArgument
        from .metrics import MetricsServer

        try:
            self.metrics = MetricsServer(self, port, addr)
        except OSError as e:
            raise InvalidArgument(
                f"cannot serve metrics on {addr}:{port}: {e.strerror or e}; pick another -metricsport or -metricsaddr"
            ) from None
        return self.metrics.port

    # -- main loop ----------------------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        self.stopping = True
        self._refresh_now.set()

    def _wait_for_destination(self) -> None:
        """A gateway is a long-running worker: a destination that does not answer yet is waited for
        (with backoff), not a reason to exit."""
        delay = 0.5
        while not self.stopping:
            try:
                self._ensure_internal_topics()
                return
            except StreamreplError as e:
                log.warning("%s; retrying in %.0f s", e, delay)
                until = time.monotonic() + delay
                while not self.stopping and time.monotonic() < until:
                    time.sleep(0.1)
                delay = min(delay * 2, 10.0)

    def run(self, max_seconds: float | None = None) -> None:
        self._wait_for_destination()
        if self.stopping:
            return
        self._join()
        # Committed cursors to the replicas: a thread feeding a worker process (see checkpoints.py for why).
        from .checkpoints import CursorSyncProcess

        self.cursor_sync = CursorSyncProcess(self).start()
        assert self.group is not None
        self._reapply = True
        watcher = threading.Thread(target=self._watch_plan, name="plan-watcher", daemon=True)
        watcher.start()
        applied: tuple[links.Plan, set[str]] | None = None
        next_report = next_gate_check = 0.0
        started = time.monotonic()
        log.info("gateway %s started for cluster %s", self.id, self.cluster.name)
        try:
            while not self.stopping:
                now = time.monotonic()
                if max_seconds is not None and now - started > max_seconds:
                    break
                self.group.poll(0)  # drives heartbeats and rebalances
                if self._restart_pending and now >= next_gate_check:
                    next_gate_check = now + 0.5
                    self._reapply = True  # take the partitions up again once the destination is back
                published = self._published
                if published is not None and (published is not applied or self._reapply):
                    applied, self._reapply = published, False
                    self.apply_plan(*published)
                busy = 0
                for name, c in list(self.sources.items()):
                    link = self._links_by_source.get(name)
                    if link is None:
                        continue
                    msgs = c.consume(BATCH, timeout=0)
                    if msgs:
                        busy += self._apply(link, msgs)
                self.producer.poll(0)
                self._check_writes()
                self._unthrottle()
                if now >= next_report:
                    next_report = now + REPORT_SECONDS
                    self.report()
                if not busy:
                    time.sleep(IDLE_SLEEP)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if getattr(self, "cursor_sync", None) is not None:
            self.cursor_sync.stop(timeout=5)
        log.info("gateway %s stopping", self.id)
        body = {"gateway": self.id, "stopped": True, "updated": int(time.time() * 1000)}
        self.producer.produce(
            status.STATUS_TOPIC, key=status.gateway_key(self.id).encode(), value=json.dumps(body).encode()
        )
        left = self.producer.flush(30)
        if left:
            log.error("%d records were not acknowledged before shutdown", left)
        if self.group is not None and self.leave_group:
            self.group.close()
            self.group = None
        elif self.group is not None:
            # No group.close(): it would send LeaveGroup, and a LeaveGroup that reaches Tansu while the
            # group is rebalancing leaves the group with a departed leader for good (every gateway stalls).
            # Everything is drained, so leaving like a crashed gateway is safe: the slots move when the
            # session expires. run_foreground() then exits without destroying the consumer (which would
            # leave); a consumer left open in a process that goes on would keep its slots.
            for unit in list(self.units):
                self._drop(unit)
            self._left_open = self.group
            self.group = None
        for c in self.sources.values():
            c.close()
        self.sources.clear()
        self.reader.close()
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


def check_settings() -> None:
    """The tuning variables make sense together, or a one-line error says which to fix."""
    from .errors import InvalidArgument

    if _BAD_SETTINGS:
        raise InvalidArgument(f"{_BAD_SETTINGS[0]}; fix it or unset it")
    if MESSAGE_TIMEOUT_MS >= SESSION_TIMEOUT_MS:
        raise InvalidArgument(
            f"STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS ({MESSAGE_TIMEOUT_MS}) must be shorter than the session"
            f" STREAMREPL_GATEWAY_SESSION_MS ({SESSION_TIMEOUT_MS}), or a gateway frozen past its session could"
            " write after the one that took over; leave it unset (half the session)"
        )


def run_foreground(
    reg: Registry, cluster: str, gateway_id: str | None = None, metrics: tuple[str, int] | None = None
) -> None:
    check_settings()
    gw = Gateway(reg, cluster, gateway_id)
    gw.leave_group = False
    if metrics is not None:
        gw.serve_metrics(*metrics)
    signal.signal(signal.SIGTERM, gw.stop)
    signal.signal(signal.SIGINT, gw.stop)
    gw.run()
    # Drained and stopped: exit without destroying the group consumer, which would send LeaveGroup.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
