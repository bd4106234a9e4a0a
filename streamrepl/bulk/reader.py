"""Reading a source partition range: where its log ends now, and its visible records in batches; and where
a task gets its Kafka clients."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol, cast

from .. import kafka
from ..errors import Unreachable
from ..kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from ..registry import Cluster

#: Records fetched per consume() call in a task.
BATCH = 10_000
#: A partition from which nothing (not even an end-of-partition event) arrives for this long fails.
STALL_TIMEOUT = 60.0

CONSUMER_TUNING: dict[str, Any] = {
    "fetch.wait.max.ms": 50,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "queued.min.messages": 200_000,
}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
_ERROR = Message.error
#: Consumer errors that waiting will not cure.
_HOPELESS = kafka.UNKNOWN_TOPIC | kafka.ACCESS_DENIED


class Clients(Protocol):
    """Where a task gets its Kafka clients: the `kafka` package, or fakes in a unit test."""

    def consumer(self, cluster: Cluster, group: str | None = None, **extra: Any) -> Consumer: ...

    def producer(self, cluster: Cluster, **extra: Any) -> Producer: ...


def snapshot_end(committed: Consumer, uncommitted: Consumer, tp: TopicPartition) -> tuple[int, bool]:
    """(end, stable): the real end of the log now, and whether every offset before it is decided.

    A partition is not stable while a transaction in it is open: its records may still commit
    (or abort), so readers stop at the first undecided offset.
    """
    end = kafka.true_end(uncommitted, tp)
    if end <= 0:
        return end, True
    return end, kafka.true_end(committed, tp) >= end


def batches(c: Consumer, tp: TopicPartition, end: int, label: str) -> Iterator[tuple[list[Message], int | None]]:
    """Visible records of `tp` from its assigned offset up to (not including) `end`, in batches.

    Each item is (records, eof): eof is the partition's read position when the broker said
    there is nothing more to read now (the rest up to `end` is then invisible), else None.
    The iteration ends at `end` or after an eof.
    """
    c.assign([tp])
    quiet_since = time.monotonic()
    while True:
        msgs = c.consume(BATCH, timeout=0.1)
        if not msgs:
            if time.monotonic() - quiet_since > STALL_TIMEOUT:
                raise Unreachable(
                    f"{label}: nothing arrived from the source for {STALL_TIMEOUT:.0f}s; is its broker up?"
                )
            yield [], None
            continue
        eof: int | None = None
        good = msgs
        if any(map(_ERROR, msgs)):
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif kafka.is_partition_eof(err):
                    eof = cast(int, m.offset())
                elif err.fatal() or err.code() in _HOPELESS:
                    raise KafkaException(err)
                # Anything else (a broker briefly away) librdkafka retries by itself; the stall timeout
                # ends the wait if it never comes back.
        if good or eof is not None:
            quiet_since = time.monotonic()
        if good and cast(int, good[-1].offset()) >= end:
            good = [m for m in good if cast(int, m.offset()) < end]
            yield good, None
            return
        yield good, eof
        if eof is not None or (good and cast(int, good[-1].offset()) >= end - 1):
            return
