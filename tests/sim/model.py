"""An in-memory model of the Kafka behaviour streamrepl relies on, with confluent_kafka's client interface.

Installed with streamrepl.kafka.clients.set_backend (Model.make), so that every client streamrepl makes (the
gateway's, the metadata store's, `replica list`'s) talks to it. Time is the simulation's (clock.SimClock): a call
that would wait advances it instead. Nothing here runs a thread or opens a socket. See docs/simulation.md for what it
models and what it leaves out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streamrepl.kafka import Consumer, Producer
from streamrepl.registry import Cluster

from .clock import SimClock

OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID = -2, -1, -1000, -1001
CREATE_TIME = 1


def _exc(code: int, reason: str = "", fatal: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, reason or None, fatal=fatal))


def report_lost(client: Any) -> None:
    """librdkafka's error_cb for a connection lost: once for each crash of the broker since the client last ran, and
    while the broker is down."""
    b = client.broker
    if client.seen_crashes != b.crashes or not b.up:
        client.seen_crashes = b.crashes
        cb = client.conf.get("error_cb")
        if cb is not None:
            cb(KafkaError(KafkaError._TRANSPORT, f"{b.name}: connection lost"))


class Msg:
    """A record (or an event: error set) as confluent_kafka hands it over."""

    __slots__ = ("_t", "_p", "_o", "_k", "_v", "_h", "_ts", "_err")

    def __init__(self, t: str, p: int, o: int, k: Any, v: Any, h: Any, ts: tuple[int, int], err: Any = None):
        self._t, self._p, self._o, self._k, self._v, self._h, self._ts, self._err = t, p, o, k, v, h, ts, err

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> Any:
        return self._k

    def value(self) -> Any:
        return self._v

    def headers(self) -> Any:
        return list(self._h) if self._h else None

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def error(self) -> Any:
        return self._err

    def __len__(self) -> int:
        return len(self._v or b"")


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    #: the producer (id, epoch, sequence) that wrote it (None: written by the simulation's source writer)
    writer: tuple[int, int, int] | None = None
    #: the gateway whose producer wrote it ("" for source records)
    gateway: str = ""


@dataclass
class Partition:
    log: list[Rec] = field(default_factory=list)
    log_start: int = 0
    #: the offset up to which the log is on disk: a crash loses what is past it
    saved: int = 0
    #: base offset of the last batch appended (Tansu reports it + 1 as its high watermark)
    last_base: int = 0

    @property
    def end(self) -> int:
        return self.log_start + len(self.log)

    def at(self, offset: int) -> Rec:
        return self.log[offset - self.log_start]


@dataclass
class Topic:
    id: int
    partitions: list[Partition]
    configs: dict[str, str]


class Broker:
    """One cluster (a single broker): topics, producer states, groups, and its faults."""

    def __init__(self, model: Model, name: str, exact_watermark: bool, expires_members: bool):
        self.model, self.name = model, name
        self.exact_watermark = exact_watermark
        self.expires_members = expires_members
        self.topics: dict[str, Topic] = {}
        #: (producer id, topic, partition) -> (epoch, next sequence, sequence -> offset)
        self.pstate: dict[tuple[int, str, int], tuple[int, int, dict[int, int]]] = {}
        self.groups: dict[str, Group] = {}
        self.down_until = 0.0
        #: how many times it crashed: a client that had a connection before a crash reports it lost (error_cb)
        self.crashes = 0
        #: probability that a request fails (transport error) while set by a fault
        self.flaky = 0.0
        self.flaky_until = 0.0
        #: a produce request whose answer is lost (appended, but the client hears nothing): its probability
        self.lost_answers = 0.0

    # -- faults ------------------------------------------------------------------------------------
    @property
    def up(self) -> bool:
        return self.model.clock.monotonic() >= self.down_until

    def request(self, what: str = "") -> None:
        """A request reaches the broker, or raises the transport error a client would see."""
        if not self.up:
            raise _exc(KafkaError._TRANSPORT, f"{self.name}: broker down ({what})")
        if self.flaky and self.model.clock.monotonic() < self.flaky_until and self.model.rng.random() < self.flaky:
            raise _exc(KafkaError._TIMED_OUT, f"{self.name}: request timed out ({what})")

    def crash(self, down_for: float) -> None:
        """The broker dies and restarts: what was not saved is lost, producer states are rebuilt from the log."""
        self.down_until = self.model.clock.monotonic() + down_for
        self.crashes += 1
        for tname, t in self.topics.items():
            for p, part in enumerate(t.partitions):
                if part.saved < part.end:
                    del part.log[part.saved - part.log_start :]
                    part.last_base = min(part.last_base, max(part.log_start, part.end - 1))
                for key in [k for k in self.pstate if k[1] == tname and k[2] == p]:
                    del self.pstate[key]
                for o in range(part.log_start, part.end):
                    w = part.at(o).writer
                    if w is not None:
                        pid, epoch, seq = w
                        _, _, seqs = self.pstate.get((pid, tname, p), (epoch, 0, {}))
                        seqs[seq] = o
                        self.pstate[(pid, tname, p)] = (epoch, seq + 1, seqs)
        for g in self.groups.values():
            g.crash()

    def save(self) -> None:
        for t in self.topics.values():
            for part in t.partitions:
                part.saved = part.end

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str, n: int, configs: dict[str, str] | None = None) -> None:
        self.topics[name] = Topic(next(self.model.ids), [Partition() for _ in range(n)], dict(configs or {}))

    def partition(self, topic: str, p: int) -> Partition | None:
        t = self.topics.get(topic)
        return t.partitions[p] if t is not None and 0 <= p < len(t.partitions) else None

    def high_watermark(self, part: Partition) -> int:
        if self.exact_watermark or part.end == part.log_start:
            return part.end
        return part.last_base + 1

    def append(self, topic: str, p: int, recs: list[Rec]) -> int:
        """Append one batch; returns its base offset."""
        part = self.partition(topic, p)
        assert part is not None
        base = part.end
        part.log.extend(recs)
        if self.model.on_append is not None:
            for r in recs:
                self.model.on_append(self, topic, p, r)
        part.last_base = base + len(recs) - 1 if self.model.rng.random() < 0.5 else base
        return base

    def metadata(self, only: str | None = None) -> Any:
        names = [only] if only is not None else list(self.topics)
        topics = {}
        for n in names:
            t = self.topics.get(n)
            if t is None:
                topics[n] = SimpleNamespace(topic=n, partitions={}, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            else:
                parts = {i: SimpleNamespace(id=i, error=None) for i in range(len(t.partitions))}
                topics[n] = SimpleNamespace(topic=n, partitions=parts, error=None, topic_id=t.id)
        return SimpleNamespace(topics=topics, brokers={0: SimpleNamespace(id=0)}, cluster_id=self.name)

    def group(self, gid: str) -> Group:
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = Group(self, gid)
        return g


class Model:
    """Every simulated cluster, by name; `make` is the client factory given to kafka.clients.set_backend."""

    def __init__(self, clock: SimClock, rng: Any):
        self.clock, self.rng = clock, rng
        self.brokers: dict[str, Broker] = {}
        self.ids = itertools.count(1)
        #: producer id -> the gateway it belongs to (the writes' owner, for the checks)
        self.owner_of_pid: dict[int, str] = {}
        #: the gateway whose clients are being made now (set by the harness around a gateway's construction)
        self.current_gateway = ""
        #: every client made, with the gateway it was made for (a killed gateway's are left alone)
        self.clients: list[tuple[str, Any]] = []
        #: called with (broker, topic, partition, record) for every record appended (the harness's write checks)
        self.on_append: Callable[[Broker, str, int, Rec], None] | None = None
        #: the gateways whose process is dead or frozen: their consumers send no heartbeats (librdkafka sends them
        #: from a thread of its own, so a live process's members stay in their group while it waits in a request)
        self.silent: set[str] = set()

    def add(self, name: str, exact_watermark: bool = True, expires_members: bool = True) -> Broker:
        b = self.brokers[name] = Broker(self, name, exact_watermark, expires_members)
        return b

    def broker_of(self, cluster: Cluster) -> Broker:
        return self.brokers[cluster.properties["bootstrap.servers"].removeprefix("sim:")]

    def make(self, kind: type, cluster: Cluster, conf: dict[str, Any]) -> Any:
        broker = self.broker_of(cluster)
        client: Any
        if kind is Consumer:
            client = SimConsumer(broker, conf, self.current_gateway)
        elif kind is Producer:
            client = SimProducer(broker, conf, self.current_gateway)
        elif kind is AdminClient:
            client = SimAdmin(broker)
        else:
            raise TypeError(f"the simulated cluster makes no {kind}")
        self.clients.append((self.current_gateway, client))
        return client


# -- consumer groups ---------------------------------------------------------------------------------
@dataclass
class Member:
    id: str
    consumer: SimConsumer
    instance: str
    session_ms: int
    last_seen: float
    topics: list[str]
    #: the generation it joined (rejoined after a rebalance started); -1: not joined in this generation
    joined: int = -1
    assignment: list[TopicPartition] = field(default_factory=list)
    #: what it must be told at its next poll: "revoke" and/or the new assignment
    revoke: bool = False
    assign: list[TopicPartition] | None = None


class Group:
    """The classic (eager) protocol with the round-robin assignor: a change of members starts a rebalance, every
    member gives up its partitions and joins again, and only then is the group assigned. Static members (an
    instance id) replace whoever held that id, who is fenced. Members expire after their session unless the broker
    never expires them (noida-db)."""

    def __init__(self, broker: Broker, gid: str):
        self.broker, self.id = broker, gid
        self.members: dict[str, Member] = {}
        self.generation = 0
        self.rebalancing = False
        self.ids = itertools.count(1)

    def now(self) -> float:
        return self.broker.model.clock.monotonic()

    def crash(self) -> None:
        # The coordinator's state survives (it is in __consumer_offsets); a rebalance follows the restart.
        self._rebalance()

    def join(self, c: SimConsumer, topics: list[str]) -> Member:
        instance = c.conf.get("group.instance.id", "")
        replaced = [m for m in self.members.values() if instance and m.instance == instance]
        for old in replaced:
            old.consumer.fenced = True
            del self.members[old.id]
        m = Member(
            f"{c.conf.get('client.id', 'c')}-{next(self.ids)}",
            c,
            instance,
            int(c.conf.get("session.timeout.ms", 45000)),
            self.now(),
            topics,
        )
        self.members[m.id] = m
        if replaced and not self.rebalancing and replaced[0].joined == self.generation:
            # A static member's return (KIP-345): it takes the old member's place and assignment, no rebalance (the
            # brokers whose members are static; where a return rebalances, as on Tansu, gateways join dynamically)
            prev = replaced[0].assign if replaced[0].assign is not None else replaced[0].assignment
            m.joined, m.assign = self.generation, list(prev)
        else:
            self._rebalance()
        return m

    def leave(self, m: Member) -> None:
        if self.members.pop(m.id, None) is not None:
            self._rebalance()

    def _rebalance(self) -> None:
        self.generation += 1
        self.rebalancing = True
        for m in self.members.values():
            m.joined = -1
            m.revoke = True
            m.assign = None

    def expire(self) -> None:
        if not self.broker.expires_members:
            return
        now = self.now()
        silent = self.broker.model.silent
        for m in self.members.values():
            if not m.consumer.closed and m.consumer.gateway not in silent and self.broker.up:
                m.last_seen = now  # its background heartbeats
        gone = [m for m in self.members.values() if now - m.last_seen > m.session_ms / 1000]
        for m in gone:
            del self.members[m.id]
        if gone:
            self._rebalance()

    def heartbeat(self, m: Member) -> None:
        """A poll of the member's consumer: its session, its part of a rebalance, and the assignment once everyone
        joined."""
        m.last_seen = self.now()
        self.expire()
        if m.id not in self.members:
            return
        if self.rebalancing and m.joined != self.generation:
            m.joined = self.generation
        if self.rebalancing and all(x.joined == self.generation for x in self.members.values()):
            self.rebalancing = False
            order = sorted(self.members.values(), key=lambda x: x.id)
            for x in order:
                x.assign = []
            parts = [
                TopicPartition(t, p)
                for t in sorted({t for x in order for t in x.topics})
                for p in range(len(self.broker.topics[t].partitions) if t in self.broker.topics else 0)
            ]
            for i, tp in enumerate(parts):
                assign = order[i % len(order)].assign
                assert assign is not None
                assign.append(tp)

    def describe(self) -> Any:
        members = [
            SimpleNamespace(
                member_id=m.id,
                client_id=m.consumer.conf.get("client.id", ""),
                host="/127.0.0.1",
                assignment=SimpleNamespace(topic_partitions=list(m.assignment)),
                group_instance_id=m.instance or None,
            )
            for m in self.members.values()
        ]
        state = (
            ConsumerGroupState.EMPTY
            if not members
            else ConsumerGroupState.PREPARING_REBALANCING
            if self.rebalancing
            else ConsumerGroupState.STABLE
        )
        return SimpleNamespace(group_id=self.id, members=members, state=state)


# -- clients -----------------------------------------------------------------------------------------
class SimConsumer:
    def __init__(self, broker: Broker, conf: dict[str, Any], gateway: str = ""):
        self.broker, self.conf, self.gateway = broker, conf, gateway
        self.clock = broker.model.clock
        self.eof = bool(conf.get("enable.partition.eof", False))
        #: (topic, partition) -> [next offset to fetch, consumed since assigned, EOF reported at this offset]
        self.pos: dict[tuple[str, int], list[Any]] = {}
        self.paused: set[tuple[str, int]] = set()
        self.member: Member | None = None
        self.seen_crashes = broker.crashes
        self.group: Group | None = None
        self.callbacks: dict[str, Callable[..., Any]] = {}
        self.fenced = False
        self.closed = False

    # assignment
    def _resolve(self, tp: TopicPartition) -> int:
        part = self.broker.partition(tp.topic, tp.partition)
        low, end = (part.log_start, part.end) if part is not None else (0, 0)
        if tp.offset == OFFSET_END:
            return end
        if tp.offset >= 0:
            return tp.offset
        return low  # beginning, stored (nothing committed here) or invalid: auto.offset.reset=earliest

    def assign(self, tps: list[TopicPartition]) -> None:
        self.pos = {}
        self.incremental_assign(tps)

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.pos[(tp.topic, tp.partition)] = [self._resolve(tp), False, -1]

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.pos.pop((tp.topic, tp.partition), None)
            self.paused.discard((tp.topic, tp.partition))

    def unassign(self) -> None:
        self.pos = {}
        self.paused = set()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.pos]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def seek(self, tp: TopicPartition) -> None:
        st = self.pos.get((tp.topic, tp.partition))
        if st is not None:
            st[0], st[2] = self._resolve(tp), -1

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for tp in tps:
            st = self.pos.get((tp.topic, tp.partition))
            out.append(TopicPartition(tp.topic, tp.partition, st[0] if st and st[1] else OFFSET_INVALID))
        return out

    # reading
    def _wait(self, timeout: float) -> None:
        self.clock.sleep(max(timeout, 0.001))

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        if self.closed:
            raise RuntimeError("Consumer closed")
        out: list[Msg] = []
        report_lost(self)
        if not self.broker.up:
            self._wait(timeout)
            return out
        keys = list(self.pos)
        for key in keys:
            if len(out) >= num_messages:
                break
            if key in self.paused:
                continue
            st = self.pos[key]
            part = self.broker.partition(*key)
            if part is None:
                continue
            if st[0] < part.log_start or st[0] > part.end:
                st[0] = part.log_start  # out of range: auto.offset.reset=earliest
            while st[0] < part.end and len(out) < num_messages:
                r = part.at(st[0])
                out.append(Msg(key[0], key[1], st[0], r.key, r.value, r.headers, (CREATE_TIME, r.timestamp)))
                st[0] += 1
                st[1] = True
            if st[0] == part.end and self.eof and st[2] != st[0] and len(out) < num_messages:
                st[2] = st[0]
                out.append(Msg(key[0], key[1], st[0], None, None, None, (0, -1), KafkaError(KafkaError._PARTITION_EOF)))
        if not out:
            self._wait(timeout)
        return out

    def poll(self, timeout: float = -1) -> Msg | None:
        if self.group is not None:
            return self._group_poll(timeout)
        got = self.consume(1, timeout)
        return got[0] if got else None

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        try:
            self.broker.request("ListOffsets")
        except KafkaException:
            self._wait(timeout or 1.0)
            raise
        part = self.broker.partition(tp.topic, tp.partition)
        if part is None:
            raise _exc(KafkaError.UNKNOWN_TOPIC_OR_PART)
        return part.log_start, self.broker.high_watermark(part)

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        out = []
        for tp in tps:
            low, high = self.get_watermark_offsets(tp, timeout)
            out.append(TopicPartition(tp.topic, tp.partition, high if tp.offset == OFFSET_END else low))
        return out

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        try:
            self.broker.request("Metadata")
        except KafkaException:
            self._wait(timeout if timeout > 0 else 1.0)
            raise
        return self.broker.metadata(topic)

    # the group
    def subscribe(self, topics: list[str], on_assign: Any = None, on_revoke: Any = None, on_lost: Any = None) -> None:
        self.group = self.broker.group(self.conf["group.id"])
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self.member = self.group.join(self, topics)

    def _group_poll(self, timeout: float) -> Msg | None:
        assert self.group is not None
        if self.fenced:
            self.fenced = False
            self.member = None
            return Msg("", -1, -1, None, None, None, (0, -1), KafkaError(KafkaError._FATAL, "fenced", fatal=False))
        if self.member is None or not self.broker.up:
            self.clock.sleep(max(timeout, 0.0))
            return None
        m = self.member
        if m.id not in self.group.members:
            # Expired: the assignment is lost; join again (librdkafka does it on its own).
            if m.assignment and self.callbacks.get("lost"):
                gone, m.assignment = m.assignment, []
                self.callbacks["lost"](self, gone)
            self.member = self.group.join(self, m.topics)
            return None
        self.group.heartbeat(m)
        if m.revoke:
            m.revoke = False
            if m.assignment and self.callbacks.get("revoke"):
                gone, m.assignment = m.assignment, []
                self.callbacks["revoke"](self, gone)
            m.assignment = []
        if m.assign is not None and not self.group.rebalancing:
            m.assignment, m.assign = m.assign, None
            if self.callbacks.get("assign"):
                self.callbacks["assign"](self, list(m.assignment))
        self.clock.sleep(max(timeout, 0.0))
        return None

    def unsubscribe(self) -> None:
        if self.group is not None and self.member is not None:
            self.group.leave(self.member)
            self.member = None

    def close(self) -> None:
        if self.group is not None and self.member is not None and not self.member.instance:
            self.group.leave(self.member)  # a static member sends no LeaveGroup on close (KIP-345)
        self.member = None
        self.closed = True


@dataclass
class Queued:
    topic: str
    partition: int
    rec: Rec
    seq: int
    epoch: int
    on_delivery: Any
    queued_at: float


class SimProducer:
    """An idempotent producer: sequences per partition under an epoch, records delivered when the producer is
    polled or flushed; a record not delivered within message.timeout.ms expires (the epoch is bumped, the
    sequences start again, as librdkafka does); a broker that lost the producer's state refuses its next sequence
    (a fatal error, raised by poll/flush)."""

    def __init__(self, broker: Broker, conf: dict[str, Any], gateway: str):
        self.broker, self.conf = broker, conf
        self.clock = broker.model.clock
        self.pid = next(broker.model.ids)
        broker.model.owner_of_pid[self.pid] = gateway
        self.gateway = gateway
        self.seen_crashes = broker.crashes
        self.epoch = 0
        self.seqs: dict[tuple[str, int], int] = {}
        self.queue: list[Queued] = []
        self.events: list[tuple[Any, Any, Msg]] = []
        self.fatal: KafkaError | None = None
        self.timeout = int(conf.get("message.timeout.ms", 300000)) / 1000
        self.error_cb = conf.get("error_cb")
        self.max_queue = int(conf.get("queue.buffering.max.messages", 100000))

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
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        if len(self.queue) >= self.max_queue:
            raise BufferError("Local: Queue full")
        if partition < 0:
            partition = 0
        tp = (topic, partition)
        seq = self.seqs.get(tp, 0)
        self.seqs[tp] = seq + 1
        ts = timestamp if timestamp > 0 else int(self.clock.time() * 1000)
        rec = Rec(key, value, tuple(headers or ()), ts, (self.pid, self.epoch, seq), self.gateway)
        self.queue.append(
            Queued(topic, partition, rec, seq, self.epoch, on_delivery or callback, self.clock.monotonic())
        )

    def __len__(self) -> int:
        return len(self.queue) + len(self.events)

    def _send(self) -> None:
        """Send what is queued: each record appended (or refused) in order, its delivery report kept for poll."""
        now = self.clock.monotonic()
        left: list[Queued] = []
        expired = False
        for q in self.queue:
            if self.fatal is not None:
                self.events.append((q.on_delivery, KafkaError(KafkaError._PURGE_QUEUE), self._msg(q, -1)))
                continue
            if now - q.queued_at > self.timeout:
                self.events.append((q.on_delivery, KafkaError(KafkaError._MSG_TIMED_OUT), self._msg(q, -1)))
                expired = True
                continue
            if not self.broker.up:
                left.append(q)
                continue
            if q.epoch != self.epoch:
                # Sent again after the epoch bump, with a new sequence (librdkafka renumbers what it still holds).
                q.epoch, q.seq = self.epoch, self.seqs.get((q.topic, q.partition), 0)
                self.seqs[(q.topic, q.partition)] = q.seq + 1
                q.rec.writer = (self.pid, q.epoch, q.seq)
            err, offset = self._append(q)
            if err is not None and err.fatal():
                self.fatal = err
                self.events.append((q.on_delivery, err, self._msg(q, -1)))
                continue
            if self.broker.lost_answers and self.broker.model.rng.random() < self.broker.lost_answers:
                # Appended, but the answer never came: the record expires (uncertain delivery).
                self.events.append((q.on_delivery, KafkaError(KafkaError._MSG_TIMED_OUT), self._msg(q, -1)))
                expired = True
                continue
            self.events.append((q.on_delivery, err, self._msg(q, offset)))
        self.queue = left
        if expired:
            self.epoch += 1
            self.seqs = {}
        if left or self.seen_crashes != self.broker.crashes:
            report_lost(self)

    def _append(self, q: Queued) -> tuple[KafkaError | None, int]:
        b = self.broker
        part = b.partition(q.topic, q.partition)
        if part is None:
            return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), -1
        key = (self.pid, q.topic, q.partition)
        epoch, nxt, seqs = b.pstate.get(key, (q.epoch, 0, {}))
        if q.epoch > epoch:
            epoch, nxt, seqs = q.epoch, 0, {}
        if q.seq < nxt and q.seq in seqs:
            return None, seqs[q.seq]  # a duplicate: acknowledged with its first offset
        if q.seq != nxt:
            return KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "out of order sequence number", fatal=True), -1
        offset = b.append(q.topic, q.partition, [q.rec])
        seqs[q.seq] = offset
        b.pstate[key] = (epoch, nxt + 1, seqs)
        return None, offset

    def _msg(self, q: Queued, offset: int) -> Msg:
        r = q.rec
        return Msg(q.topic, q.partition, offset, r.key, r.value, r.headers, (CREATE_TIME, r.timestamp))

    def _serve(self) -> int:
        events, self.events = self.events, []
        for cb, err, msg in events:
            if cb is not None:
                cb(err, msg)
        return len(events)

    def poll(self, timeout: float = 0) -> int:
        self._send()
        served = self._serve()
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        if not served:
            self.clock.sleep(max(timeout, 0.0))
        return served

    def flush(self, timeout: float = -1) -> int:
        deadline = self.clock.monotonic() + (timeout if timeout >= 0 else 3600)
        while True:
            self._send()
            self._serve()
            if self.fatal is not None:
                raise KafkaException(self.fatal)
            if not self.queue or self.clock.monotonic() >= deadline:
                return len(self.queue)
            self.clock.sleep(0.1)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        for q in self.queue:
            self.events.append((q.on_delivery, KafkaError(KafkaError._PURGE_QUEUE), self._msg(q, -1)))
        self.queue = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.broker.request("Metadata")
        return self.broker.metadata(topic)


class SimAdmin:
    def __init__(self, broker: Broker):
        self.broker = broker

    def _answer(self, names: list[str], do: Callable[[str], KafkaError | None]) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        try:
            self.broker.request("admin")
            up = True
        except KafkaException:
            up = False
        for n in names:
            f: Future[Any] = Future()
            err = do(n) if up else KafkaError(KafkaError._TRANSPORT)
            if err is None:
                f.set_result(None)
            else:
                f.set_exception(KafkaException(err))
            out[n] = f
        return out

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.broker.request("Metadata")
        return self.broker.metadata(topic)

    def create_topics(self, new_topics: list[Any], **_: Any) -> dict[str, Future[Any]]:
        specs = {t.topic: t for t in new_topics}

        def create(name: str) -> KafkaError | None:
            if name in self.broker.topics:
                return KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)
            self.broker.create_topic(name, specs[name].num_partitions, dict(specs[name].config or {}))
            return None

        return self._answer(list(specs), create)

    def delete_topics(self, names: list[str], **_: Any) -> dict[str, Future[Any]]:
        def delete(name: str) -> KafkaError | None:
            if self.broker.topics.pop(name, None) is None:
                return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            return None

        return self._answer(names, delete)

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        for gid in groups:
            f: Future[Any] = Future()
            try:
                self.broker.request("DescribeGroups")
                g = self.broker.groups.get(gid)
                if g is None:
                    f.set_exception(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND)))
                else:
                    g.expire()
                    f.set_result(g.describe())
            except KafkaException as e:
                f.set_exception(e)
            out[gid] = f
        return out
