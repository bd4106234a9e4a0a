"""StreamProducer: produces by stream topic name and waits for synchronous replicas (see the package doc)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .. import kafka, policy
from .. import topics as topic_ops
from ..errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError, Unreachable
from ..kafka import KafkaError, Message, Producer
from ..model import Stream
from ..paths import StreamPath, kafka_topic_name, split_topic, validate_topic
from ..registry import Registry
from ..replica_end import SYNC_RECHECK, SYNC_STALL, SYNC_TIMEOUT, ReplicaEnds
from ..streams import Resolved, kafka_configs, load, resolve
from .access import open_stream, registry_or_default

log = logging.getLogger("streamrepl.client")

HeadersIn = dict[str, Any] | list[tuple[str, Any]] | None


def _utf8(text: str, what: str) -> bytes:
    """`text` as UTF-8; a lone surrogate (no character: JSON's "\\ud800", a str built by hand) is refused,
    as the Kafka client cannot write it (a header name holding one crashes the process)."""
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise InvalidArgument(
            f"{what} holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is not text and cannot be"
            " written as UTF-8; pass bytes, or text of whole characters"
        ) from None


def _bytes(v: Any, what: str = "the value") -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return _utf8(v, what)
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidArgument(f"keys, values and header values must be bytes or str, not {type(v).__name__}")


def _headers(headers: HeadersIn) -> list[tuple[str, bytes | None]]:
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    out = []
    for k, v in items:
        if k in policy.OWN_HEADERS:
            raise InvalidArgument(f"header '{k}' is reserved for replication; use another name")
        name = str(k)
        _utf8(name, "a header name")
        out.append((name, _bytes(v, "a header value")))
    return out


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
class _SyncReplica(ReplicaEnds):
    """A synchronous replica as the producer sees it: its ends (replica_end.ReplicaEnds) and whether the producer
    waits for it ("sync") or fell back ("async", since when, last checked)."""

    mode: str = "sync"
    since: float = 0.0
    last_check: float = 0.0


@dataclass
class _Pending:
    topic: str
    partition: int
    offset: int
    timestamp: int
    error: KafkaError | None
    callback: Callable[[KafkaError | None, Delivery], None] | None


def _refuse_one_way_replica(r: Resolved, rec: Stream) -> None:
    """A stream fed by an upstream it does not replicate back to holds only its upstream's records, offset for
    offset: a record written here takes an offset the next replicated record needs, and the link stops in ERROR."""
    back = {e.path for e in rec.replicas}
    one_way = [e.path for e in rec.upstreams if e.path not in back]
    if one_way:
        raise InvalidArgument(
            f"stream {r.path} is a replica of {one_way[0]}: its records come from its upstream, and one written here"
            f" would stop replication in ERROR; write to {one_way[0]}, or make the pair multi-master ('stream"
            f" replica add -path {r.path} -replica {one_way[0]}' and 'stream upstream add -path {one_way[0]}"
            f" -upstream {r.path}')"
        )


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
        sync_timeout: float = SYNC_TIMEOUT,
        sync_stall: float = SYNC_STALL,
        sync_recheck: float = SYNC_RECHECK,
        refresh_interval: float = 10.0,
        **conf: Any,
    ):
        self.reg = registry_or_default(registry)
        stream_text, self.default_topic = split_topic(path)
        self.r, rec = open_stream(self.reg, stream_text, "produceperm", "produce to it")
        _refuse_one_way_replica(self.r, rec)
        self._rec: Stream = rec
        self.sync_timeout = sync_timeout
        self.sync_stall = sync_stall
        self.sync_recheck = sync_recheck
        self.refresh_interval = refresh_interval
        self._refreshed = time.monotonic()
        self._p: Producer = kafka.producer(self.r.cluster, **conf)
        self._pending: deque[_Pending] = deque()
        self._written: dict[tuple[str, int], int] = {}  # highest offset acknowledged by the broker
        self.replicas: dict[str, _SyncReplica] = {}
        #: Synchronous replicas that are paused: records are acknowledged without waiting for them.
        self.paused_synchronous: list[str] = []
        self.stats: dict[str, Any] = {"acked": 0, "acked_sync": 0, "fallbacks": 0, "recoveries": 0, "errors": 0}
        self._load_replicas(rec)

    # -- metadata ---------------------------------------------------------------------------------
    def _load_replicas(self, rec: Stream) -> None:
        wanted = {}
        paused = []
        for e in rec.replicas:
            if not e.synchronous:
                continue
            try:
                if e.path:
                    sp = resolve(self.reg, e.path).path
                else:
                    sp = StreamPath(e.cluster, e.stream if e.stream.startswith("/") else "/" + e.stream)
                if e.paused:
                    paused.append(str(sp))
                else:
                    wanted[str(sp)] = (sp, self.reg.get(sp.cluster))
            except (StreamreplError, KeyError) as err:
                log.warning("synchronous replica %s of %s is not usable: %s", e, self.r.path, err)
        self.paused_synchronous = paused
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
        if topic not in self._rec.topics:
            self._refresh(force=True)
        if topic not in self._rec.topics:
            validate_topic(topic)
            if not self._rec.settings.autocreate:
                raise NotFound(
                    f"topic '{topic}' does not exist in stream {self.r.path} and the stream does not create"
                    f" topics on first write (autocreate false); create it with 'streamrepl stream topic create'"
                )
            self._autocreate(topic)
        return kafka_topic_name(self.r.path, topic)

    def _autocreate(self, topic: str) -> None:
        n = int(self._rec.settings.defaultpartitions)
        kt = kafka_topic_name(self.r.path, topic)
        try:
            kafka.create_topics(self.r.cluster, [(kt, n, kafka_configs(self._rec.settings))])
        except AlreadyExists:
            pass
        topic_ops.register_existing(self.r, topic, n, self._rec.settings.defaulttimestamptype)
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
            "key": _bytes(key, "the key"),
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
