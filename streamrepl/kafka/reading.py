"""Reading partitions: to their end within a deadline, their real ends, their first and last records.

Readers use consumers from `clients.consumer`, which report a partition's end (enable.partition.eof):
that event, not the broker's high watermark, says a partition was read to its end.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from typing import cast

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ..registry import Cluster
from .admin import topics
from .brokers import watermark_is_exact
from .clients import REQUEST_TIMEOUT, consumer
from .errors import is_partition_eof

#: ListOffsets' "latest", asked for through offsets_for_times: the end of a partition (for a read_committed consumer,
#: its last stable offset) in one request, where a watermark query sends two
LATEST = -1


def read_partition(
    c: Consumer,
    start: TopicPartition,
    until: int | None = None,
    timeout: float = REQUEST_TIMEOUT,
    batch: int = 1000,
    wait: float = 0.01,
    ends_after: int | None = None,
) -> Generator[Message, None, None]:
    """The records of one partition from `start.offset`, in order, until its end.

    With `until`, the reading goes on past the end (records being written) and stops after the
    record at offset `until` or later. Raises TimeoutError when `timeout` seconds pass first.
    `batch` and `wait` are consume()'s count and timeout: the small defaults make a small
    partition read in a few milliseconds instead of waiting for a full batch. The consumer is
    unassigned when the reading ends, including when the caller stops early.

    `ends_after`: an offset the partition is known to hold; the reading also ends when a fetch's answer (its cached
    high watermark, no request) says the partition ends at or before it. A fetch past a partition's end gets no
    end-of-partition from some brokers (Tansu): without this, a read of a partition that became shorter than the
    caller knew it (deleted and created again) waited `timeout`.
    """
    c.assign([start])
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {start.topic}[{start.partition}] to its end timed out")
            eof = False
            for m in c.consume(batch, timeout=wait):
                err = m.error()
                if err is not None:
                    eof = eof or is_partition_eof(err)
                    continue
                yield m
                if until is not None and cast(int, m.offset()) >= until:
                    return
            if eof and until is None:
                return
            if ends_after is not None and 0 <= c.get_watermark_offsets(start, cached=True)[1] <= ends_after:
                return
    finally:
        c.unassign()


def watermarks(c: Consumer, tp: TopicPartition, timeout: float = REQUEST_TIMEOUT) -> tuple[int, int]:
    """(low, high) as the broker reports them now (high can under-count: see true_ends)."""
    low, high = c.get_watermark_offsets(tp, timeout=timeout, cached=False)
    return low, high


def true_end(c: Consumer, tp: TopicPartition, timeout: float = REQUEST_TIMEOUT) -> int:
    """The offset after the last record of a partition (see true_ends)."""
    return true_ends(c, [tp], timeout)[(tp.topic, tp.partition)]


def true_ends(
    c: Consumer, tps: list[TopicPartition], timeout: float = REQUEST_TIMEOUT, exact_watermark: bool = False
) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition.

    Some brokers (Tansu) report as high watermark the base offset of the last batch + 1,
    so the watermark alone can under-count: read each partition from just before it to
    its real end, all partitions at once. `exact_watermark`: the broker's watermark is right
    (brokers.watermark_is_exact), so it is the answer and nothing is read.
    """
    ends: dict[tuple[str, int], int] = {}
    marks: dict[tuple[str, int], int] = {}  # the watermarks
    start: list[TopicPartition] = []
    for tp in tps:
        low, high = watermarks(c, tp, timeout)
        ends[(tp.topic, tp.partition)] = marks[(tp.topic, tp.partition)] = high
        if high > low and not exact_watermark:
            start.append(TopicPartition(tp.topic, tp.partition, max(low, high - 1)))
    if not start:
        return ends
    waiting = {(tp.topic, tp.partition) for tp in start}
    # A partition is done at its end-of-partition, or once the batch holding the record at its watermark has been
    # read: one more consume after the one that handed out that record (a batch's records come in one fetch answer,
    # which one consume may not take whole). End-of-partition alone never came while the partition was being
    # written faster than a fetch's round trip (a source written 1,000 records/s through a 50 ms line: every fetch
    # found new batches, and each divergence check timed out; issue 28). Later records only move the end on.
    reached: set[tuple[str, int]] = set()
    c.assign(start)
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading the end of {len(waiting)} partitions timed out")
            done, reached = reached, set()
            for m in c.consume(10000, timeout=0.02):
                key = (cast(str, m.topic()), cast(int, m.partition()))
                err = m.error()
                if err is None:
                    ends[key] = max(ends[key], cast(int, m.offset()) + 1)
                    if ends[key] >= marks[key]:
                        reached.add(key)
                elif is_partition_eof(err):
                    waiting.discard(key)
            waiting -= done
        return ends
    finally:
        c.unassign()


def partition_ends(cluster: Cluster, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The real end of each (Kafka topic, partition) whose topic exists; missing topics are left out."""
    present = topics(cluster)
    c = consumer(cluster)
    try:
        tps = [TopicPartition(t, p) for t, p in partitions if t in present]
        return true_ends(c, tps, exact_watermark=watermark_is_exact(cluster))
    finally:
        c.close()


def topic_ends(cluster: Cluster, kafka_topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The real end of every partition of each topic that exists; missing topics are left out."""
    present = topics(cluster)
    c = consumer(cluster)
    try:
        tps = [TopicPartition(kt, p) for kt in kafka_topics if kt in present for p in range(present[kt])]
        return true_ends(c, tps, exact_watermark=watermark_is_exact(cluster))
    finally:
        c.close()


def partitions_of(c: Consumer, topic: str, timeout: float = REQUEST_TIMEOUT) -> int | None:
    """How many partitions `topic` has (None: it does not exist, as for `topics`), asking about that topic alone.
    Through a consumer, which never asks the broker to create a topic it looks up (a producer or admin client may)."""
    md = c.list_topics(topic, timeout=timeout)
    found = md.topics.get(topic)
    return None if found is None or found.error is not None else len(found.partitions)


def first_record(c: Consumer, tp: TopicPartition, low: int, end: int) -> Message | None:
    """The record at `low` when the partition holds records in [low, end), else None."""
    if end <= low:
        return None
    c.assign([TopicPartition(tp.topic, tp.partition, low)])
    deadline = time.monotonic() + REQUEST_TIMEOUT
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            return m if m.error() is None else None
        return None
    finally:
        c.unassign()


def last_record(c: Consumer, tp: TopicPartition, end: int) -> Message | None:
    """The record just before `end`, or None when the partition holds no visible record there."""
    if end <= 0:
        return None
    c.assign([TopicPartition(tp.topic, tp.partition, end - 1)])
    deadline = time.monotonic() + REQUEST_TIMEOUT
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is None:
                return m if m.offset() == end - 1 else None
            if is_partition_eof(cast(KafkaError, m.error())):
                return None
        return None
    finally:
        c.unassign()
