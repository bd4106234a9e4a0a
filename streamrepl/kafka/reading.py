"""Reading partitions: to their end within a deadline, their real ends, their first and last records.

Readers use consumers from `clients.consumer`, which report a partition's end (enable.partition.eof):
that event, not the broker's high watermark, says a partition was read to its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

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


def high_mark(c: Consumer, tp: TopicPartition, timeout: float = REQUEST_TIMEOUT) -> int:
    """The high watermark alone (it can under-count: see true_ends), in one ListOffsets request. `watermarks` sends
    two (low, high): across a plain delay line they go together, one round trip, but a proxy that forwards one
    request of a connection at a time (Tansu's) makes them two round trips, and costs 44 ms more even at 0 ms
    (measured, docs/notes/bench-wan.md)."""
    answer = c.offsets_for_times([TopicPartition(tp.topic, tp.partition, LATEST)], timeout)[0]
    if answer.error is not None:
        raise KafkaException(answer.error)
    return int(answer.offset)


def marks_for_reading(
    c: Consumer, tps: list[TopicPartition], timeout: float = REQUEST_TIMEOUT
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) of each partition for a read that starts just below `high`, in one request for all of them: a
    watermark query a partition is a round trip each, in series (a takeover of 4 partitions across a 50 ms line
    spent 0.2 s on them alone, issue 28). For several partitions `low` is 0, not asked for (a second ListOffsets,
    which went out only after the first was answered): a read from below a partition's low watermark starts at it
    (the readers' auto.offset.reset is earliest), so only its extra fetch is lost, and only then."""
    if len(tps) < 2:
        return {(tp.topic, tp.partition): watermarks(c, tp, timeout) for tp in tps}
    got: dict[tuple[str, int], tuple[int, int]] = {}
    for answer in c.offsets_for_times([TopicPartition(tp.topic, tp.partition, LATEST) for tp in tps], timeout):
        if answer.error is not None:
            raise KafkaException(answer.error)
        got[(answer.topic, answer.partition)] = (0, answer.offset)
    return got


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
    marks = marks_for_reading(c, tps, timeout)
    start = {} if exact_watermark else {key: max(low, high - 1) for key, (low, high) in marks.items() if high > low}
    return _read_to_ends(c, marks, start, lambda key, m: None, timeout)


#: ends_and_records reads from the record asked for when it lies at most this far below the watermark; from further
#: down it reads the ends first and the records after, as two passes
ONE_PASS_RECORDS = 10_000


def ends_and_records(
    c: Consumer, at: dict[tuple[str, int], int], timeout: float = REQUEST_TIMEOUT
) -> dict[tuple[str, int], tuple[int, Message | None]]:
    """For each (topic, partition) -> offset: the partition's real end (as true_ends gives it) and its record at
    that offset (None: no visible record there, or the partition ends before it). Read in one pass from that record
    on to the end: the ends read first and the records after cost a fetch's round trips twice, in series, and the
    records read one partition at a time once each (a takeover of 4 partitions across a 50 ms line spent 0.25 s a
    partition on them, issue 28). Raises TimeoutError when `timeout` passes first."""
    marks = marks_for_reading(c, [TopicPartition(t, p) for t, p in at], timeout)
    start: dict[tuple[str, int], int] = {}
    far: dict[tuple[str, int], int] = {}
    for key, offset in at.items():
        low, high = marks[key]
        if high > low:
            # From the record asked for, or from just before the watermark (which can under-count: see true_ends).
            start[key] = max(low, min(offset, high - 1))
            if high - start[key] > ONE_PASS_RECORDS:
                start[key], far[key] = max(low, high - 1), offset
    records: dict[tuple[str, int], Message | None] = dict.fromkeys(at)

    def keep(key: tuple[str, int], m: Message) -> None:
        if m.offset() == at[key]:
            records[key] = m

    ends = _read_to_ends(c, marks, start, keep, timeout)
    for key, offset in far.items():
        records[key] = last_record(c, TopicPartition(*key), offset + 1) if offset < ends[key] else None
    return {key: (ends[key], records[key]) for key in at}


def tails(
    c: Consumer, tps: list[TopicPartition], timeout: float = REQUEST_TIMEOUT
) -> dict[tuple[str, int], tuple[int, Message | None]]:
    """Each partition's real end and its record just before it (None: nothing visible there), all read in one pass:
    what true_end and last_record give one partition, for several at once."""
    marks = marks_for_reading(c, tps, timeout)
    start = {key: max(low, high - 1) for key, (low, high) in marks.items() if high > low}
    last: dict[tuple[str, int], Message | None] = {}

    def keep(key: tuple[str, int], m: Message) -> None:
        last[key] = m

    ends = _read_to_ends(c, marks, start, keep, timeout)
    out: dict[tuple[str, int], tuple[int, Message | None]] = {}
    for key, end in ends.items():
        m = last.get(key)
        out[key] = (end, m if m is not None and m.offset() == end - 1 else None)
    return out


def _read_to_ends(
    c: Consumer,
    marks: dict[tuple[str, int], tuple[int, int]],
    start: dict[tuple[str, int], int],
    keep: Callable[[tuple[str, int], Message], None],
    timeout: float,
) -> dict[tuple[str, int], int]:
    """Read the partitions from `start` to their real ends (see true_ends), handing each record to `keep`; the ends
    of the partitions not read are their high watermarks."""
    ends = {key: high for key, (_, high) in marks.items()}
    if not start:
        return ends
    waiting = set(start)
    # A partition is done at its end-of-partition, or once the batch holding the record at its watermark has been
    # read: one more consume after the one that handed out that record (a batch's records come in one fetch answer,
    # which one consume may not take whole). End-of-partition alone never came while the partition was being
    # written faster than a fetch's round trip (a source written 1,000 records/s through a 50 ms line: every fetch
    # found new batches, and each divergence check timed out; issue 28). Later records only move the end on.
    reached: set[tuple[str, int]] = set()
    c.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading the end of {len(waiting)} partitions timed out")
            done, reached = reached, set()
            for m in c.consume(10000, timeout=0.02):
                key = (cast(str, m.topic()), cast(int, m.partition()))
                if key not in waiting:
                    continue
                err = m.error()
                if err is None:
                    ends[key] = max(ends[key], cast(int, m.offset()) + 1)
                    keep(key, m)
                    if ends[key] >= marks[key][1]:
                        reached.add(key)
                elif is_partition_eof(err):
                    waiting.discard(key)
            waiting -= done
    finally:
        c.unassign()
    return ends


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


def last_record(c: Consumer, tp: TopicPartition, end: int, strict: bool = False) -> Message | None:
    """The record just before `end`, or None when the partition holds no visible record there (or, unless
    `strict`, when the broker did not answer in time; `strict`: TimeoutError then, for callers that must not take
    an unanswered read for an empty offset)."""
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
        if strict:
            raise TimeoutError(f"reading {tp.topic}[{tp.partition}] at offset {end - 1} timed out")
        return None
    finally:
        c.unassign()
