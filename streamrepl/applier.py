"""Writing a destination partition so that every record keeps its source offset.

Kafka brokers assign offsets themselves, so a copy keeps offsets by writing exactly one
record per source offset, in order, starting where the destination partition ends: the
destination is the record of progress, and a writer that restarts (after a crash, a
rebalance, or a rerun of copystream) reads the destination's real end and goes on from
there. Nothing is written twice, nothing is skipped.

The writer trusts nothing: it checks that each batch's last record landed at the offset
it was meant for. If another producer wrote into the partition, offsets shift and the
check fails, and the partition stops with a ReplicaConflict rather than going on misaligned.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from . import kafka, policy
from .errors import StreamreplError
from .kafka import Consumer, KafkaError, Message, Producer, TopicPartition

LOG_APPEND_TIME = 2


class ReplicaConflict(StreamreplError):
    """The destination partition holds records that did not come from this source."""


class OriginClash(ReplicaConflict):
    """A record of origin `origin` arrived for a partition that holds records of another origin, `held`: two streams
    write the same topic (the gateway stops that feed alone, units.UnitTable.clash)."""

    def __init__(self, message: str, origin: str, held: str):
        super().__init__(message)
        self.origin, self.held = origin, held


def replica_tail(c: Consumer, tp: TopicPartition) -> tuple[int, Message | None]:
    """A destination partition's real end, and its record just before it (None: nothing visible there)."""
    return kafka.tails(c, [tp])[(tp.topic, tp.partition)]


def origin_of_tail(last: Message | None, own_uuid: str) -> str | None:
    """The origin of a destination partition's records so far, from its last record."""
    return policy.origin_of(last.headers(), own_uuid) if last is not None else None


def resume_point(c: Consumer, tp: TopicPartition, own_uuid: str) -> tuple[int, str | None]:
    """Where a copy into `tp` goes on: its real end, and the origin of its records so far."""
    end, last = replica_tail(c, tp)
    return end, origin_of_tail(last, own_uuid)


class OffsetPreservingWriter:
    """Copies records of one source partition into one destination partition."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        partition: int,
        next_offset: int,
        dst_uuid: str,
        src_uuid: str,
        origin: str | None = None,
        label: str = "",
    ):
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.next = next_offset
        self.dst_uuid = dst_uuid
        self.src_uuid = src_uuid
        self.origin = origin
        self.label = label or f"{topic}[{partition}]"
        self.errors: list[str] = []
        #: the first delivery error after which nothing is known of where the writer's records are
        #: (kafka.UNCERTAIN_DELIVERY; also in `errors`), or "". Not a conflict: a gateway starts the
        #: partition again from its real end with a new producer (replication.writes.WriteSession.restart).
        self.uncertain = ""
        #: a record landed past its offset: another writer wrote into the partition (divergence.misplaced)
        self.shifted = False
        #: The offset after the last record the destination acknowledged where it was meant to land.
        self.acked = next_offset
        self.records = 0
        self.bytes = 0
        self.skipped = 0
        #: called with the seconds from a batch's last source timestamp to its acknowledgement
        self.observe: Callable[[float], None] | None = None
        #: called with the seconds each batch waited in the producer, from its hand-over to its acknowledgement
        self.on_ack: Callable[[float], None] | None = None
        #: (offset, when) of each batch handed to the producer whose delivery check has not come back, oldest first
        self._handed: deque[tuple[int, float]] = deque()

    def _conflict(self, why: str) -> ReplicaConflict:
        return ReplicaConflict(f"{self.label}: {why}; replication of this partition stopped")

    def _clash(self, why: str, origin: str) -> OriginClash:
        return OriginClash(f"{self.label}: {why}; replication of this partition stopped", origin, self.origin or "")

    def _delivered(self, expected: int, ts: int = 0) -> Any:
        observe = self.observe

        def check(err: KafkaError | None, msg: Message) -> None:
            handed, since = self._handed, 0.0
            while handed and handed[0][0] <= expected:
                since = handed.popleft()[1]
            if err is not None:
                self.errors.append(f"{self.label}: write failed: {err.str()}")
                if not self.uncertain and (err.code() in kafka.UNCERTAIN_DELIVERY or err.fatal()):
                    self.uncertain = err.str()
            elif cast(int, msg.offset()) < expected:
                # The partition ended below where this writer went on: its broker lost acknowledged records (a
                # crash between saves, an unclean leader election), not another writer (whose records would push
                # ours up). Where the rest went is unknown: a gateway starts again from the real end.
                why = (
                    f"{self.label}: a record meant for offset {expected} landed at {msg.offset()}; the destination"
                    " lost records it had acknowledged"
                )
                self.errors.append(why)
                self.uncertain = self.uncertain or why
            elif msg.offset() != expected:
                self.shifted = True
                self.errors.append(
                    f"{self.label}: a record meant for offset {expected} landed at {msg.offset()};"
                    " something else writes into this replica"
                )
            elif expected >= self.acked:
                self.acked = expected + 1
                if observe is not None and ts > 0:
                    observe(time.time() - ts / 1000)
                if since and self.on_ack is not None:
                    self.on_ack(time.monotonic() - since)

        return check

    def write(self, msgs: Sequence[Message], src_uuid: str | None = None) -> int:
        """Queue the records at or after `next`; returns how many were queued (fillers included).

        `src_uuid` names the stream the records were read from when a partition has several
        upstreams (defaults to the one given at construction).

        This is the gateway's hot path: per record it reads the origin header once and hands
        the record to librdkafka; everything else is decided per batch.
        """
        source = src_uuid or self.src_uuid
        tag = [(policy.ORIGIN, source.encode())]
        produce = self.producer.produce
        topic, partition, dst_uuid = self.topic, self.partition, self.dst_uuid
        origin_key = policy.ORIGIN
        last = msgs[-1] if msgs else None
        queued = nbytes = 0
        nxt = self.next
        checked = -1
        try:
            for m in msgs:
                o: int = m.offset()  # type: ignore[assignment]
                headers: list[tuple[str, bytes]] | None = m.headers()  # type: ignore[assignment]
                origin = source
                out_headers: Any = tag
                if headers:
                    out_headers = headers
                    for k, v in headers:
                        if k == origin_key:
                            origin = v.decode() if v else source
                            break
                    else:
                        out_headers = headers + tag
                if o != nxt or origin != self.origin or origin == dst_uuid:
                    # Not simply the next record of the same origin: decide what it is (outside the common path).
                    if origin == dst_uuid:
                        # Published here first: never applied back (multi-master loops end here). Offsets are
                        # the same in every copy, so the destination holds it at `o` already: move past it.
                        if o >= nxt:
                            nxt = o + 1
                        if self.origin is None:
                            # So this partition is the destination's own: a record of any other origin is a conflict.
                            self.origin = dst_uuid
                        self.skipped += 1
                        continue
                    if self.origin is None:
                        self.origin = origin
                    if o < nxt:
                        # Already in place (a second path, or a rerun); it must still be of the same origin.
                        if origin != self.origin:
                            raise self._clash(
                                f"offset {o} comes from stream {origin}, the replica holds {self.origin}", origin
                            )
                        self.skipped += 1
                        continue
                    if origin != self.origin:
                        raise self._clash(
                            f"offset {o} comes from stream {origin} while this partition holds records of"
                            f" {self.origin} (the same topic is written in two streams)",
                            origin,
                        )
                    while nxt < o:
                        produce(topic, partition=partition, headers=policy.filler_headers(origin), timestamp=0)
                        nxt += 1
                        queued += 1
                ts_type, ts = m.timestamp()
                if ts_type == LOG_APPEND_TIME:
                    out_headers = list(out_headers) + [(policy.TSTYPE, b"logappendtime")]
                value = m.value()
                # Positional arguments (topic, value, key, partition, on_delivery, callback, timestamp, headers):
                # produce() parses keywords at about 0.4 us a record, a fifth of the gateway's own work per
                # record (BENCHMARKS.md). Offsets are contiguous, so the last record landing where it should
                # proves the batch did: only it carries a delivery check.
                produce(
                    topic,
                    value,
                    m.key(),
                    partition,
                    self._delivered(nxt, ts) if m is last else None,
                    None,
                    ts if ts > 0 else 0,
                    out_headers,
                )
                if value:
                    nbytes += len(value)
                if m is last:
                    checked = nxt
                nxt += 1
                queued += 1
        finally:
            self.next = nxt
            self.bytes += nbytes
            self.records += queued
            if checked >= 0:
                self._handed.append((checked, time.monotonic()))
        return queued

    def fill_to(self, end: int) -> int:
        """Write fillers up to `end` (the source's real end past records no longer visible)."""
        n = 0
        while self.next < end:
            cb = {"on_delivery": self._delivered(self.next)} if self.next == end - 1 else {}
            self.producer.produce(
                self.topic,
                partition=self.partition,
                headers=policy.filler_headers(self.origin or self.src_uuid),
                timestamp=0,
                **cb,
            )
            self.next += 1
            n += 1
        if n:
            self._handed.append((end - 1, time.monotonic()))
        return n

    def idle(self) -> bool:
        """True when everything this writer queued is acknowledged: the partition should end at `next`."""
        return self.acked >= self.next

    def raise_errors(self) -> None:
        if self.errors:
            raise self._conflict(self.errors[0])


def flush(producer: Producer, writers: Iterable[OffsetPreservingWriter], timeout: float = 30.0) -> None:
    """Wait until every queued record is acknowledged; raise the first write error or conflict."""
    left = producer.flush(timeout)
    for w in writers:
        w.raise_errors()
    if left:
        raise StreamreplError(
            f"{left} records were not acknowledged within {timeout:.0f}s; the destination is slow or down"
        )
