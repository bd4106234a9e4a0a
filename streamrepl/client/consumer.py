"""StreamConsumer: reads a stream's topics from one copy at a time, failing over between copies (see the package doc)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from .. import kafka, policy
from ..errors import NotFound, StreamreplError, Unreachable
from ..kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from ..paths import kafka_topic_name, validate_topic
from ..registry import Registry
from .access import kafka_prefix, open_stream, registry_or_default, stream_topic
from .failover import Failover
from .positions import ReadPositions

log = logging.getLogger("streamrepl.client")


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
        self.reg = registry_or_default(registry)
        texts = [copies] if isinstance(copies, str) else list(copies)
        self._failover = Failover(self.reg, texts, failover_after, probe_interval, probe_timeout)
        named = self._failover.named
        for t in (topics or []) + named:
            validate_topic(t)
        self.topics: list[str] | None = list(topics) if topics else (named or None)
        self.group = group
        self._positions = ReadPositions(
            group, partitions, start, start_timestamp, str(conf.get("auto.offset.reset", "earliest"))
        )
        self.manual = self._positions.manual
        self.commit_timeout = commit_timeout
        self.batch = batch
        self.conf = conf

        self._c: Consumer | None = None
        self._kt: dict[str, str] = {}  # Kafka topic -> stream topic, for the current copy
        self._buf: deque[Message] = deque()
        self._owned: set[tuple[str, int]] = set()
        self._commits_done: list[KafkaError | None] = []
        self._closed = False
        if not self._connect(range(len(self._failover.copies))):
            raise Unreachable(
                "no copy of the stream answers: " + ", ".join(str(c.r.path) for c in self._failover.copies)
            )

    # -- properties --------------------------------------------------------------------------------
    @property
    def current(self) -> str | None:
        """The path of the copy being read, or None between copies."""
        return str(self._failover.copy.r.path) if self._c is not None else None

    @property
    def ready(self) -> bool:
        """True once the consumer reads partitions (a group join takes a few seconds)."""
        return self._c is not None and bool(self._owned)

    @property
    def failovers(self) -> int:
        """How many times the consumer left a copy."""
        return self._failover.failovers

    # -- connecting -------------------------------------------------------------------------------
    def _connect(self, order: Any) -> bool:
        for i in order:
            if not self._failover.answers(i):
                continue
            try:
                self._open(i)
                return True
            except (Unreachable, KafkaException) as e:
                log.warning("cannot read copy %s: %s", self._failover.copies[i].r.path, e)
                self._drop_consumer()
        return False

    def _on_commit(self, err: KafkaError | None, _: list[TopicPartition]) -> None:
        self._commits_done.append(err)

    def _open(self, i: int) -> None:
        copy = self._failover.copies[i]
        r, rec = open_stream(self.reg, str(copy.r.path), "consumeperm", "consume from it")
        names = self.topics or sorted(rec.topics)
        if self.topics:
            missing = [t for t in self.topics if t not in rec.topics]
            if missing:
                raise NotFound(f"topic '{missing[0]}' does not exist in stream {r.path}")
        self._kt = {kafka_topic_name(r.path, t): t for t in names}
        conf: dict[str, Any] = {
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "error_cb": self._failover.on_error,
            "on_commit": self._on_commit,
        }
        conf.update(self.conf)
        c = kafka.consumer(r.cluster, group=self.group, **conf)
        self._c = c
        self._failover.opened(i)
        self._owned.clear()
        self._positions.new_copy()
        self._buf.clear()
        if self.manual:
            parts = self._positions.start_offsets(c, r, names, self._kt, resumed=self.failovers > 0)
            c.assign(parts)
            self._owned = {(self._kt[tp.topic], tp.partition) for tp in parts}
        elif self.topics:
            c.subscribe(list(self._kt), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        else:
            # The whole stream, including topics created later: the escaped path holds no regex characters.
            pattern = "^" + kafka_prefix(r.path).replace(".", "\\.") + ".*"
            c.subscribe([pattern], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        log.info("reading %s%s", r.path, f" as group {self.group}" if self.group else "")

    def _stream_topic(self, kt: str) -> str:
        t = self._kt.get(kt)
        if t is None:
            t = self._kt[kt] = stream_topic(self._failover.copy.r.path, kt)
        return t

    def _on_assign(self, c: Consumer, parts: list[TopicPartition]) -> None:
        keys = [(self._stream_topic(tp.topic), tp.partition) for tp in parts]
        if self.failovers and self._positions.resume_assigned(c, parts, keys):
            if "cooperative" in str(self.conf.get("partition.assignment.strategy", "")):
                c.incremental_assign(parts)
            else:
                c.assign(parts)
        self._owned.update(keys)

    def _on_revoke(self, _: Consumer, parts: list[TopicPartition]) -> None:
        gone = {(self._stream_topic(tp.topic), tp.partition) for tp in parts}
        self._owned -= gone
        self._positions.forget(gone)
        self._buf = deque(m for m in self._buf if (self._stream_topic(cast(str, m.topic())), m.partition()) not in gone)

    def _drop_consumer(self) -> None:
        old, self._c = self._c, None
        if old is not None:
            self._failover.drop(old)

    def _move_to_next_copy(self) -> None:
        self._failover.leaving()
        self._positions.leave_copy()
        self._drop_consumer()
        self._buf.clear()
        if not self._connect(self._failover.after_current()):
            log.warning("no copy of the stream answers; retrying")
            self._failover.none_answers()
        else:
            log.warning("now reading %s", self.current)

    # -- reading ----------------------------------------------------------------------------------
    def _fetch(self, timeout: float) -> None:
        if self._closed:
            raise StreamreplError("the consumer is closed")
        if self._c is None:
            if self._failover.wait_before_retry(timeout):
                return
            if not self._connect(self._failover.after_current()):
                self._failover.none_answers()
                return
        assert self._c is not None
        msgs = self._c.consume(self.batch, timeout=max(0.0, timeout))
        got = False
        for m in msgs:
            err = m.error()
            if err is None:
                self._buf.append(m)
                got = True
            elif kafka.is_partition_eof(err):
                got = True
            elif err.fatal():
                raise KafkaException(err)
            else:
                self._failover.on_error(err)
                log.warning("%s: %s", self.current, err.str())
        if got:
            self._failover.answered()
        elif self._failover.silent_too_long(self._c, next(iter(self._kt), None)):
            self._move_to_next_copy()

    def _deliver(self, m: Message) -> StreamRecord | None:
        kt = cast(str, m.topic())
        topic, p, o = self._stream_topic(kt), cast(int, m.partition()), cast(int, m.offset())
        if not self.manual and (topic, p) not in self._owned:
            return None  # revoked meanwhile
        headers = m.headers()
        ts_type, ts = m.timestamp()
        if not self._positions.deliverable((topic, p), o, ts, policy.is_filler(headers)):
            return None
        return StreamRecord(
            topic=topic,
            partition=p,
            offset=o,
            key=m.key(),
            value=m.value(),
            headers=policy.user_headers(headers),
            timestamp=ts,
            timestamp_type=ts_type,
            stream=str(self._failover.copy.r.path),
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
        r = self._failover.copy.r
        todo = self._positions.to_commit()
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
            self._failover.suspect()
            log.warning("commit on %s was not confirmed within %.0f s", r.path, self.commit_timeout)
            return False
        err = self._commits_done[-1]
        if err is not None:
            log.warning("commit on %s failed: %s", r.path, err.str())
            return False
        self._positions.commit_done(todo)
        self._failover.answered()
        return True

    def positions(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offset after the last record delivered (fillers included)."""
        return dict(self._positions.delivered)

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._drop_consumer()
        self._failover.join()

    def __enter__(self) -> StreamConsumer:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
