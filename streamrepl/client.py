"""The Python API for applications: a stream producer and a stream consumer that fails over.

    from streamrepl.client import StreamProducer, StreamConsumer

    with StreamProducer("/sanfrancisco/activity") as p:
        p.produce("clicks", b"hello", key=b"user-1", headers={"source": b"web"})
        p.flush()

    c = StreamConsumer(["/sanfrancisco/activity", "/newyork/activity"], group="billing", topics=["clicks"])
    for rec in c:                          # StreamRecord: topic, partition, offset, key, value, headers, timestamp
        handle(rec)
        c.commit()

Topics are named by their stream topic name (`clicks`), never by the Kafka topic behind it.

Consumer failover
    A StreamConsumer reads one copy of a stream at a time: the first copy in its list that
    answers. It counts the copy as alive while fetches return records or a metadata request
    (sent at most every `probe_interval` seconds while no record arrives, and at once after a
    transport error) succeeds. When neither happened for `failover_after` seconds, it leaves
    that copy and continues on the next one that answers, in list order, cycling; it does not
    go back on its own while the current copy works.

    On the new copy a consumer group resumes from its committed offsets there (which the
    gateways replicate, see streamrepl.cursors), or from the offsets this consumer itself
    committed on the copy it left, whichever is further: offsets are preserved between
    copies, so both name the same records. Nothing is lost; the records delivered after the
    last commit are delivered again. Without a group, the consumer resumes right after the
    last record it delivered. Filler records (see streamrepl.policy) are never delivered.

Synchronous replication
    For every replica that the stream's metadata lists with `synchronous: true` (and not
    paused), a StreamProducer acknowledges a record (its delivery callback, `flush()`,
    `send()`) only once the record's offset is in the replica's partition. When that takes
    longer than `sync_timeout` seconds, or the replica's partition makes no progress for
    `sync_stall` seconds (no gateway alive), the producer falls back to asynchronous
    acknowledgement for that replica, logs a warning and counts it in `stats["fallbacks"]`.
    It checks every `sync_recheck` seconds whether the replica has caught up with everything
    it wrote, and then returns to synchronous (`stats["recoveries"]`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from . import broker, policy
from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError, Unreachable
from .metastore import Record
from .paths import StreamPath, kafka_topic_name, split_topic, validate_topic
from .registry import Cluster, Registry
from .streams import Resolved, check_perm, kafka_configs, load, resolve

log = logging.getLogger("streamrepl.client")

_TRANSPORT_ERRORS = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
}

HeadersIn = dict[str, Any] | list[tuple[str, Any]] | None


def _registry(reg: Registry | None) -> Registry:
    if reg is not None:
        return reg
    from .registry import load as load_registry

    return load_registry()


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidArgument(f"keys, values and header values must be bytes or str, not {type(v).__name__}")


def _headers(headers: HeadersIn) -> list[tuple[str, bytes | None]]:
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    out = []
    for k, v in items:
        if k in policy.OWN_HEADERS:
            raise InvalidArgument(f"header '{k}' is reserved for replication; use another name")
        out.append((str(k), _bytes(v)))
    return out


# ==================================================================================================
# Consumer
# ==================================================================================================
@dataclass(frozen=True)
class StreamRecord:
    topic: str  #: the stream topic name
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]  #: the producer's headers (replication's own removed)
    timestamp: int  #: milliseconds since the epoch
    timestamp_type: int
    stream: str  #: the copy it was read from, e.g. /newyork/activity


@dataclass
class _Copy:
    text: str
    r: Resolved
    topics: list[str]  # topics named in the copy's path (`/c/stream:topic`)


class StreamConsumer:
    """Reads a stream's topics from the first reachable of several copies, failing over between them.

    copies: stream paths (or `<stream>:<topic>` paths) of copies of one stream, primary first.
    group: the consumer group; None reads without a group (nothing is committed).
    topics: stream topic names (default: those named in the copies' paths, else every topic).
    partitions, start, start_timestamp: read given partitions and/or start at `earliest`,
        `latest`, an offset (a negative one counts back from the end) or a timestamp (ms)
        instead of at the group's committed offsets. Any of them means manual assignment
        (no group rebalancing); commits still go to `group`.
    failover_after: seconds without a successful fetch or metadata answer before failing over.
    conf: further librdkafka consumer properties (e.g. **{"session.timeout.ms": 6000}).
    """

    def __init__(
        self,
        copies: list[str] | str,
        group: str | None = None,
        topics: list[str] | None = None,
        registry: Registry | None = None,
        *,
        partitions: list[int] | None = None,
        start: str | int | None = None,
        start_timestamp: int | None = None,
        failover_after: float = 10.0,
        probe_interval: float = 1.0,
        probe_timeout: float = 2.0,
        commit_timeout: float = 10.0,
        batch: int = 500,
        **conf: Any,
    ):
        self.reg = _registry(registry)
        texts = [copies] if isinstance(copies, str) else list(copies)
        if not texts:
            raise InvalidArgument("give at least one copy of the stream to read")
        self._copies: list[_Copy] = []
        named: list[str] = []
        for text in texts:
            stream_text, topic = split_topic(text)
            r = resolve(self.reg, stream_text)
            self._copies.append(_Copy(text, r, [topic] if topic else []))
            if topic and topic not in named:
                named.append(topic)
        for t in (topics or []) + named:
            validate_topic(t)
        self.topics: list[str] | None = list(topics) if topics else (named or None)
        self.group = group
        if isinstance(start, str) and start not in ("earliest", "latest"):
            try:
                start = int(start)
            except ValueError:
                raise InvalidArgument(f"start '{start}' must be earliest, latest or an offset") from None
        self.partitions = partitions
        self.start = start
        self.start_timestamp = start_timestamp
        self.manual = group is None or partitions is not None or start is not None or start_timestamp is not None
        self.failover_after = failover_after
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.commit_timeout = commit_timeout
        self.batch = batch
        self.conf = conf
        self.failovers = 0

        self._c: Consumer | None = None
        self._reader: Consumer | None = None
        self._idx = -1
        self._kt: dict[str, str] = {}  # Kafka topic -> stream topic, for the current copy
        self._buf: deque[Message] = deque()
        self._owned: set[tuple[str, int]] = set()
        self._positions: dict[tuple[str, int], int] = {}  # next offset after what was delivered
        self._committed: dict[tuple[str, int], int] = {}  # what this consumer committed (any copy)
        self._committed_here: dict[tuple[str, int], int] = {}  # ... on the copy being read
        self._resume: dict[tuple[str, int], int] = {}  # positions on the copy left last
        self._not_before: dict[tuple[str, int], int] = {}  # timestamp to reach before delivering
        self._commits_done: list[KafkaError | None] = []
        self._suspect = False
        self._last_ok = time.monotonic()
        self._last_probe = 0.0
        self._retry_at = 0.0
        self._closing: list[threading.Thread] = []
        self._closed = False
        if not self._connect(range(len(self._copies))):
            raise Unreachable("no copy of the stream answers: " + ", ".join(str(c.r.path) for c in self._copies))

    # -- properties --------------------------------------------------------------------------------
    @property
    def current(self) -> str | None:
        """The path of the copy being read, or None between copies."""
        return str(self._copies[self._idx].r.path) if self._c is not None else None

    @property
    def ready(self) -> bool:
        """True once the consumer reads partitions (a group join takes a few seconds)."""
        return self._c is not None and bool(self._owned)

    # -- connecting -------------------------------------------------------------------------------
    def _connect(self, order: Any) -> bool:
        for i in order:
            copy = self._copies[i]
            if not broker.ping(copy.r.cluster, timeout=self.probe_timeout):
                log.warning("copy %s does not answer", copy.r.path)
                continue
            try:
                self._open(i)
                return True
            except (Unreachable, KafkaException) as e:
                log.warning("cannot read copy %s: %s", copy.r.path, e)
                self._drop_consumer()
        return False

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in _TRANSPORT_ERRORS:
            self._suspect = True

    def _on_commit(self, err: KafkaError | None, _: list[TopicPartition]) -> None:
        self._commits_done.append(err)

    def _open(self, i: int) -> None:
        copy = self._copies[i]
        r, rec = load(self.reg, str(copy.r.path))
        check_perm(rec, "consumeperm", r.path, "consume from it")
        names = self.topics or sorted(rec.get("topics", {}))
        if self.topics:
            missing = [t for t in self.topics if t not in rec.get("topics", {})]
            if missing:
                raise NotFound(f"topic '{missing[0]}' does not exist in stream {r.path}")
        self._kt = {kafka_topic_name(r.path, t): t for t in names}
        conf: dict[str, Any] = {
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "error_cb": self._on_error,
            "on_commit": self._on_commit,
        }
        conf.update(self.conf)
        c = broker.consumer(r.cluster, group=self.group, **conf)
        self._c, self._idx = c, i
        self._owned.clear()
        self._committed_here.clear()
        self._not_before.clear()
        self._positions.clear()
        self._buf.clear()
        self._last_ok = time.monotonic()
        self._suspect = False
        if self.manual:
            try:
                parts = self._start_offsets(c, r, names)
            finally:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
            c.assign(parts)
            self._owned = {(self._kt[tp.topic], tp.partition) for tp in parts}
        elif self.topics:
            c.subscribe(list(self._kt), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        else:
            # The whole stream, including topics created later: the escaped path holds no regex characters.
            pattern = "^" + kafka_topic_name(r.path, "x")[:-1].replace(".", "\\.") + ".*"
            c.subscribe([pattern], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        log.info("reading %s%s", r.path, f" as group {self.group}" if self.group else "")

    def _stream_topic(self, kt: str) -> str:
        t = self._kt.get(kt)
        if t is None:
            prefix = kafka_topic_name(self._copies[self._idx].r.path, "x")[:-1]
            t = kt[len(prefix) :] if kt.startswith(prefix) else kt
            self._kt[kt] = t
        return t

    def _start_offsets(self, c: Consumer, r: Resolved, names: list[str]) -> list[TopicPartition]:
        md = c.list_topics(timeout=broker.REQUEST_TIMEOUT)
        parts: list[TopicPartition] = []
        for t in names:
            kt = kafka_topic_name(r.path, t)
            meta = md.topics.get(kt)
            if meta is None or meta.error is not None:
                continue
            for p in sorted(meta.partitions):
                if self.partitions is not None and p not in self.partitions:
                    continue
                parts.append(TopicPartition(kt, p, OFFSET_STORED if self.group else OFFSET_INVALID))
        if self.partitions is not None and not parts:
            raise NotFound(f"no partition {self.partitions} in the topics {names} of stream {r.path}")
        resumed = self.failovers > 0
        stored = c.committed(parts, timeout=broker.REQUEST_TIMEOUT) if (self.group and resumed) else []
        stored_at = {(tp.topic, tp.partition): tp.offset for tp in stored}
        todo_ts = []
        for tp in parts:
            key = (self._kt[tp.topic], tp.partition)
            mine = self._committed.get(key) if self.group else self._resume.get(key)
            if resumed and mine is not None:
                theirs = stored_at.get((tp.topic, tp.partition), -1)
                tp.offset = max(mine, theirs)
                continue
            if resumed and self.group and stored_at.get((tp.topic, tp.partition), -1) >= 0:
                tp.offset = stored_at[(tp.topic, tp.partition)]
                continue
            if self.start_timestamp is not None:
                tp.offset = self.start_timestamp
                todo_ts.append(tp)
            elif self.start == "earliest":
                tp.offset = OFFSET_BEGINNING
            elif self.start == "latest":
                tp.offset = OFFSET_END
            elif isinstance(self.start, int):
                tp.offset = self.start if self.start >= 0 else max(0, self._end_of(r, tp) + self.start)
            elif not self.group:
                tp.offset = OFFSET_BEGINNING if self._reset() == "earliest" else OFFSET_END
        if todo_ts:
            found = c.offsets_for_times(todo_ts, timeout=broker.REQUEST_TIMEOUT)
            at = {(tp.topic, tp.partition): tp.offset for tp in found}
            for tp in todo_ts:
                off = at.get((tp.topic, tp.partition), -1)
                tp.offset = off if off >= 0 else OFFSET_END
                # Some brokers (Tansu) answer with the start of the batch holding the time: records
                # before the first one at or after it are skipped here.
                self._not_before[(self._kt[tp.topic], tp.partition)] = cast(int, self.start_timestamp)
        return parts

    def _end_of(self, r: Resolved, tp: TopicPartition) -> int:
        """The real end of a partition (the reported high watermark can under-count)."""
        if self._reader is None:
            self._reader = broker.consumer(r.cluster)
        return broker.true_end(self._reader, TopicPartition(tp.topic, tp.partition))

    def _reset(self) -> str:
        return str(self.conf.get("auto.offset.reset", "earliest"))

    def _on_assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        keys = [(self._stream_topic(tp.topic), tp.partition) for tp in parts]
        if self.failovers and any(k in self._committed for k in keys):
            # Resume at the further of the group's offsets here and what we committed on the copy we left.
            stored = {(tp.topic, tp.partition): tp.offset for tp in c.committed(parts, timeout=broker.REQUEST_TIMEOUT)}
            for tp, k in zip(parts, keys, strict=True):
                mine = self._committed.get(k)
                if mine is not None and mine > stored.get((tp.topic, tp.partition), -1):
                    tp.offset = mine
            if "cooperative" in str(self.conf.get("partition.assignment.strategy", "")):
                c.incremental_assign(parts)
            else:
                c.assign(parts)
        self._owned.update(keys)

    def _on_revoke(self, _: Consumer, parts: list[TopicPartition]) -> None:
        gone = {(self._stream_topic(tp.topic), tp.partition) for tp in parts}
        self._owned -= gone
        for k in gone:
            self._positions.pop(k, None)
        self._buf = deque(m for m in self._buf if (self._stream_topic(cast(str, m.topic())), m.partition()) not in gone)

    def _drop_consumer(self) -> None:
        old, self._c = self._c, None
        if old is None:
            return
        # Closing a consumer whose broker stalls blocks for seconds: do it aside.
        t = threading.Thread(target=_close_quietly, args=(old,), daemon=True, name="streamrepl-close")
        t.start()
        self._closing.append(t)

    def _failover(self) -> None:
        left = self._copies[self._idx].r.path
        self._resume = dict(self._positions)
        self._drop_consumer()
        self._buf.clear()
        self.failovers += 1
        n = len(self._copies)
        order = [(self._idx + k) % n for k in range(1, n + 1)]
        log.warning(
            "copy %s has not answered for %.0f s; failing over (%d copies to try)", left, self.failover_after, n
        )
        if not self._connect(order):
            log.warning("no copy of the stream answers; retrying")
            self._retry_at = time.monotonic() + 1.0
        else:
            log.warning("now reading %s", self.current)

    # -- liveness ---------------------------------------------------------------------------------
    def _probe(self) -> None:
        assert self._c is not None
        self._last_probe = time.monotonic()
        topic = next(iter(self._kt), None)
        try:
            if topic:
                self._c.list_topics(topic=topic, timeout=self.probe_timeout)
            else:
                self._c.list_topics(timeout=self.probe_timeout)
            self._last_ok = time.monotonic()
            self._suspect = False
        except KafkaException:
            pass

    def _check_alive(self) -> None:
        now = time.monotonic()
        if self._suspect or now - self._last_probe >= self.probe_interval:
            self._probe()
        if time.monotonic() - self._last_ok > self.failover_after:
            self._failover()

    # -- reading ----------------------------------------------------------------------------------
    def _fetch(self, timeout: float) -> None:
        if self._closed:
            raise StreamreplError("the consumer is closed")
        if self._c is None:
            if time.monotonic() < self._retry_at:
                time.sleep(min(timeout, self._retry_at - time.monotonic()))
                return
            n = len(self._copies)
            if not self._connect([(self._idx + k) % n for k in range(1, n + 1)]):
                self._retry_at = time.monotonic() + 1.0
                return
        assert self._c is not None
        msgs = self._c.consume(self.batch, timeout=max(0.0, timeout))
        got = False
        for m in msgs:
            err = m.error()
            if err is None:
                self._buf.append(m)
                got = True
            elif err.code() == KafkaError._PARTITION_EOF:
                got = True
            elif err.fatal():
                raise KafkaException(err)
            else:
                if err.code() in _TRANSPORT_ERRORS:
                    self._suspect = True
                log.warning("%s: %s", self.current, err.str())
        if got:
            self._last_ok = time.monotonic()
        else:
            self._check_alive()

    def _deliver(self, m: Message) -> StreamRecord | None:
        kt = cast(str, m.topic())
        topic, p, o = self._stream_topic(kt), cast(int, m.partition()), cast(int, m.offset())
        if not self.manual and (topic, p) not in self._owned:
            return None  # revoked meanwhile
        self._positions[(topic, p)] = o + 1
        headers = m.headers()
        if policy.is_filler(headers):
            return None
        ts_type, ts = m.timestamp()
        if self._not_before:
            floor = self._not_before.get((topic, p))
            if floor is not None:
                if ts < floor:
                    return None
                del self._not_before[(topic, p)]
        return StreamRecord(
            topic=topic,
            partition=p,
            offset=o,
            key=m.key(),
            value=m.value(),
            headers=policy.user_headers(headers),
            timestamp=ts,
            timestamp_type=ts_type,
            stream=str(self._copies[self._idx].r.path),
        )

    def consume(self, num: int = 500, timeout: float = 1.0) -> list[StreamRecord]:
        """Up to `num` records, waiting at most `timeout` seconds for the first one."""
        deadline = time.monotonic() + timeout
        out: list[StreamRecord] = []
        while True:
            while self._buf and len(out) < num:
                rec = self._deliver(self._buf.popleft())
                if rec is not None:
                    out.append(rec)
            if out or len(out) >= num:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            self._fetch(min(left, 0.5))

    def poll(self, timeout: float = 1.0) -> StreamRecord | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def __iter__(self) -> Iterator[StreamRecord]:
        while not self._closed:
            yield from self.consume(self.batch, 1.0)

    # -- committing ---------------------------------------------------------------------------------
    def commit(self) -> bool:
        """Commit the offsets after the records delivered so far; False when the copy did not confirm.

        A failed commit loses nothing: after a failover those records are delivered again.
        """
        if self.group is None or self._c is None:
            return False
        r = self._copies[self._idx].r
        todo = {k: off for k, off in self._positions.items() if self._committed_here.get(k) != off}
        if not todo:
            return True
        tps = [TopicPartition(kafka_topic_name(r.path, t), p, off) for (t, p), off in todo.items()]
        c = self._c
        self._commits_done.clear()
        try:
            c.commit(offsets=tps, asynchronous=True)
        except KafkaException as e:
            log.warning("commit on %s failed: %s", r.path, e)
            return False
        deadline = time.monotonic() + self.commit_timeout
        while not self._commits_done and time.monotonic() < deadline:
            m = c.poll(0.05)  # serves the commit callback; a record it returns is kept for later
            if m is not None and m.error() is None:
                self._buf.append(m)
        if not self._commits_done:
            self._suspect = True
            log.warning("commit on %s was not confirmed within %.0f s", r.path, self.commit_timeout)
            return False
        err = self._commits_done[-1]
        if err is not None:
            log.warning("commit on %s failed: %s", r.path, err.str())
            return False
        self._committed.update(todo)
        self._committed_here.update(todo)
        self._last_ok = time.monotonic()
        return True

    def positions(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offset after the last record delivered (fillers included)."""
        return dict(self._positions)

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._drop_consumer()
        for t in self._closing:
            t.join(10)

    def __enter__(self) -> StreamConsumer:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def _close_quietly(c: Consumer) -> None:
    try:
        c.close()
    except Exception:  # noqa: BLE001 - the copy is being abandoned
        pass


# ==================================================================================================
# Producer
# ==================================================================================================
@dataclass
class Delivery:
    """What a producer's delivery callback receives, once the record is acknowledged."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    error: KafkaError | None = None
    #: True when the record was confirmed on every synchronous replica before this acknowledgement
    synchronous: bool = False


@dataclass
class _SyncReplica:
    path: str
    stream: StreamPath
    cluster: Cluster
    mode: str = "sync"
    since: float = 0.0
    last_check: float = 0.0
    reader: Any = None
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    tailing: set[tuple[str, int]] = field(default_factory=set)

    def end(self, topic: str, p: int, needed: int) -> int:
        """What the replica partition holds: at least its end as far as needed to say whether `needed` is there.

        The reported high watermark settles it when it is past `needed` (always so on Apache
        Kafka once the record is there). Brokers that under-report it (Tansu) are read instead:
        a reader stays assigned to the partition from there on and follows its end, which costs
        a few milliseconds rather than an assign-fetch-unassign round per question.
        """
        if self.reader is None:
            extra: dict[str, Any] = {"fetch.wait.max.ms": 5, "enable.partition.eof": True}
            self.reader = broker.consumer(self.cluster, **extra)
        key = (topic, p)
        known = self.ends.get(key, 0)
        kt = kafka_topic_name(self.stream, topic)
        try:
            _, high = self.reader.get_watermark_offsets(TopicPartition(kt, p), timeout=2.0, cached=False)
        except KafkaException:
            return known  # not created yet, or not answering: no progress
        known = max(known, int(high))
        if known <= needed:
            if key not in self.tailing:
                self.reader.incremental_assign([TopicPartition(kt, p, max(0, int(high) - 1))])
                self.tailing.add(key)
            for m in self.reader.consume(10000, timeout=0.005):
                err = m.error()
                mk = (self._topic_of(cast(str, m.topic())), cast(int, m.partition()))
                if err is None:
                    self.ends[mk] = max(self.ends.get(mk, 0), cast(int, m.offset()) + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    self.ends[mk] = max(self.ends.get(mk, 0), cast(int, m.offset()))
            known = max(known, self.ends.get(key, 0))
        self.ends[key] = known
        return known

    def _topic_of(self, kt: str) -> str:
        return kt[len(kafka_topic_name(self.stream, "x")) - 1 :]

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
            self.tailing.clear()


@dataclass
class _Pending:
    topic: str
    partition: int
    offset: int
    timestamp: int
    error: KafkaError | None
    callback: Callable[[KafkaError | None, Delivery], None] | None


class StreamProducer:
    """Produces to a stream's topics by stream topic name, honouring synchronous replicas.

    path: the stream (`/cluster/stream`), or `<stream>:<topic>` to give a default topic.
    sync_timeout: seconds a record may wait for a synchronous replica before falling back.
    sync_stall: seconds without progress on a replica partition before falling back.
    sync_recheck: seconds between checks whether a fallen-back replica caught up.
    conf: further librdkafka producer properties.
    """

    def __init__(
        self,
        path: str,
        registry: Registry | None = None,
        *,
        sync_timeout: float = 5.0,
        sync_stall: float = 2.0,
        sync_recheck: float = 1.0,
        refresh_interval: float = 10.0,
        **conf: Any,
    ):
        self.reg = _registry(registry)
        stream_text, self.default_topic = split_topic(path)
        self.r, rec = load(self.reg, stream_text)
        check_perm(rec, "produceperm", self.r.path, "produce to it")
        self._rec: Record = rec
        self.sync_timeout = sync_timeout
        self.sync_stall = sync_stall
        self.sync_recheck = sync_recheck
        self.refresh_interval = refresh_interval
        self._refreshed = time.monotonic()
        self._p: Producer = broker.producer(self.r.cluster, **conf)
        self._pending: deque[_Pending] = deque()
        self._written: dict[tuple[str, int], int] = {}  # highest offset acknowledged by the broker
        self.replicas: dict[str, _SyncReplica] = {}
        self.stats: dict[str, Any] = {"acked": 0, "acked_sync": 0, "fallbacks": 0, "recoveries": 0, "errors": 0}
        self._load_replicas(rec)

    # -- metadata ---------------------------------------------------------------------------------
    def _load_replicas(self, rec: Record) -> None:
        wanted = {}
        for e in rec.get("replicas", []):
            if not e.get("synchronous") or e.get("paused"):
                continue
            try:
                if e.get("path"):
                    sp = resolve(self.reg, e["path"]).path
                else:
                    sp = StreamPath(e["cluster"], e["stream"] if e["stream"].startswith("/") else "/" + e["stream"])
                wanted[str(sp)] = (sp, self.reg.get(sp.cluster))
            except (StreamreplError, KeyError) as err:
                log.warning("synchronous replica %s of %s is not usable: %s", e, self.r.path, err)
        for path in [p for p in self.replicas if p not in wanted]:
            self.replicas.pop(path).close()
        for path, (sp, cluster) in wanted.items():
            if path not in self.replicas:
                self.replicas[path] = _SyncReplica(path, sp, cluster)

    def _refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._refreshed < self.refresh_interval:
            return
        self._refreshed = time.monotonic()
        try:
            _, rec = load(self.reg, str(self.r.path))
        except StreamreplError as e:
            log.warning("cannot re-read the metadata of %s: %s", self.r.path, e)
            return
        self._rec = rec
        self._load_replicas(rec)

    def _kafka_topic(self, topic: str) -> str:
        if topic not in self._rec.get("topics", {}):
            self._refresh(force=True)
        if topic not in self._rec.get("topics", {}):
            validate_topic(topic)
            if not self._rec.get("autocreate", True):
                raise NotFound(
                    f"topic '{topic}' does not exist in stream {self.r.path} and the stream does not create"
                    f" topics on first write (autocreate false); create it with 'streamrepl stream topic create'"
                )
            self._autocreate(topic)
        return kafka_topic_name(self.r.path, topic)

    def _autocreate(self, topic: str) -> None:
        from . import topics as topic_ops

        n = int(self._rec.get("defaultpartitions", 1))
        kt = kafka_topic_name(self.r.path, topic)
        try:
            broker.create_topics(self.r.cluster, [(kt, n, kafka_configs(self._rec))])
        except AlreadyExists:
            pass
        topic_ops.register_existing(self.r, topic, n, self._rec.get("defaulttimestamptype", "createtime"))
        self._refresh(force=True)
        log.info("created topic %s:%s (%d partitions)", self.r.path, topic, n)

    # -- producing ----------------------------------------------------------------------------------
    def produce(
        self,
        topic: str | None = None,
        value: Any = None,
        key: Any = None,
        headers: HeadersIn = None,
        partition: int | None = None,
        timestamp: int | None = None,
        on_delivery: Callable[[KafkaError | None, Delivery], None] | None = None,
    ) -> None:
        """Queue a record; `on_delivery(err, Delivery)` runs once it is acknowledged (see the module doc)."""
        topic = topic or self.default_topic
        if not topic:
            raise InvalidArgument(f"no topic given; name one, or create the producer on {self.r.path}:<topic>")
        kt = self._kafka_topic(topic)
        kwargs: dict[str, Any] = {
            "value": _bytes(value),
            "key": _bytes(key),
            "on_delivery": self._delivered(topic, on_delivery),
        }
        hs = _headers(headers)
        if hs:
            kwargs["headers"] = hs
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        while True:
            try:
                self._p.produce(kt, **kwargs)
                break
            except BufferError:
                self._p.poll(0.1)
        self._p.poll(0)
        if not self._sync_replicas():
            self._release(list(self._pending))

    def _delivered(self, topic: str, cb: Any) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:
            off = cast(int, msg.offset()) if err is None else -1
            p = cast(int, msg.partition())
            if err is None:
                k = (topic, p)
                self._written[k] = max(off, self._written.get(k, -1))
            self._pending.append(_Pending(topic, p, off, msg.timestamp()[1], err, cb))

        return done

    def _sync_replicas(self) -> list[_SyncReplica]:
        return [r for r in self.replicas.values() if r.mode == "sync"]

    def _release(self, items: list[_Pending], synchronous: bool = False) -> None:
        if not items:
            return
        ids = {id(it) for it in items}
        self._pending = deque(x for x in self._pending if id(x) not in ids)
        for it in items:
            if it.error is not None:
                self.stats["errors"] += 1
            else:
                self.stats["acked"] += 1
                if synchronous:
                    self.stats["acked_sync"] += 1
            if it.callback is not None:
                it.callback(it.error, Delivery(it.topic, it.partition, it.offset, it.timestamp, it.error, synchronous))

    def _fall_back(self, r: _SyncReplica, why: str) -> None:
        r.mode = "async"
        r.since = time.monotonic()
        r.last_check = r.since
        self.stats["fallbacks"] += 1
        log.warning("synchronous replication of %s to %s falls back to asynchronous: %s", self.r.path, r.path, why)

    def _recheck(self) -> None:
        now = time.monotonic()
        for r in self.replicas.values():
            if r.mode != "async" or now - r.last_check < self.sync_recheck:
                continue
            r.last_check = now
            if all(r.end(t, p, off) > off for (t, p), off in self._written.items()):
                r.mode = "sync"
                self.stats["recoveries"] += 1
                log.warning("synchronous replication of %s to %s is back", self.r.path, r.path)

    def _await_replicas(self, deadline: float) -> None:
        """Release the pending records, waiting for the synchronous replicas to hold them."""
        items = list(self._pending)
        if not items:
            return
        failed = [it for it in items if it.error is not None]
        self._release(failed)
        items = [it for it in items if it.error is None]
        need: dict[tuple[str, int], int] = {}
        for it in items:
            need[(it.topic, it.partition)] = max(it.offset, need.get((it.topic, it.partition), -1))
        confirmed = bool(self._sync_replicas())
        for r in self._sync_replicas():
            started = last_progress = time.monotonic()
            seen = {k: r.ends.get(k, 0) for k in need}
            while True:
                behind = {k: o for k, o in need.items() if r.ends.get(k, 0) <= o}
                for (t, p), o in behind.items():
                    end = r.end(t, p, o)
                    if end > seen[(t, p)]:
                        seen[(t, p)] = end
                        last_progress = time.monotonic()
                behind = {k: o for k, o in need.items() if r.ends.get(k, 0) <= o}
                if not behind:
                    break
                now = time.monotonic()
                if now - started > self.sync_timeout:
                    self._fall_back(r, f"a record waited more than {self.sync_timeout:g} s for the replica")
                    confirmed = False
                    break
                if now - last_progress > self.sync_stall:
                    self._fall_back(r, f"the replica made no progress for {self.sync_stall:g} s (no gateway alive?)")
                    confirmed = False
                    break
                if now > deadline:
                    return  # the caller's own timeout: nothing is acknowledged yet
                time.sleep(0.002)
        self._release(items, synchronous=confirmed)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve acknowledgements; returns the number of records still waiting for one."""
        self._p.poll(timeout)
        self._refresh()
        self._recheck()
        if self._sync_replicas():
            self._await_replicas(time.monotonic() + timeout)
        else:
            self._release(list(self._pending))
        return len(self) + len(self._pending)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait until every record is acknowledged (on synchronous replicas too); returns how many are not."""
        deadline = time.monotonic() + timeout
        left = self._p.flush(timeout)
        self._refresh()
        self._recheck()
        if self._sync_replicas():
            self._await_replicas(deadline)
        else:
            self._release(list(self._pending))
        return left + len(self._pending)

    def send(
        self,
        topic: str | None = None,
        value: Any = None,
        key: Any = None,
        headers: HeadersIn = None,
        partition: int | None = None,
        timestamp: int | None = None,
        timeout: float = 30.0,
    ) -> Delivery:
        """Produce one record and wait for its acknowledgement; raises when it failed."""
        got: list[Delivery] = []
        self.produce(topic, value, key, headers, partition, timestamp, on_delivery=lambda _e, d: got.append(d))
        self.flush(timeout)
        if not got:
            raise Unreachable(
                f"the record was not acknowledged within {timeout:g} s by cluster '{self.r.cluster.name}'"
            )
        if got[0].error is not None:
            raise StreamreplError(f"producing to {self.r.path}:{got[0].topic} failed: {got[0].error.str()}")
        return got[0]

    def __len__(self) -> int:
        return len(self._p)

    def close(self, timeout: float = 30.0) -> int:
        left = self.flush(timeout)
        for r in self.replicas.values():
            r.close()
        return left

    def __enter__(self) -> StreamProducer:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
