"""Divergence: a source partition whose history changed under its replica.

A replica holds each record at its source offset, and a writer goes on from the replica's real end (applier.py).
That is only right while the source still holds, at the offsets the replica holds, the records that were copied.
When the source's history changes (its broker comes back without records it had acknowledged, the topic is
deleted and re-created outside streamrepl, the cluster is rebuilt from a backup), the replica's offsets mean other
records at the source: going on would append the new history after the old one, silently.

So before a writer goes on (a gateway acquiring a partition, copystream resuming one) and whenever a running
gateway reads source records below the replica's end again, the replica's last record is compared with the
source's record at that offset, in the terms of the replication policy (policy.py): the same origin, timestamp,
key and value (a digest of them), or both a filler. And the source must not end below a record the replica got
from it: a partition's end never moves backwards (expiry and compaction remove records from the start or in the
middle, never the end), so a source that ends there lost that record.

What is not a divergence: the replica's own records (multi-master: the other side holds them once they are
copied there), records the source no longer shows because compaction or expiry removed them (nothing to
compare), and a replica whose last record was written into it directly (the writer's conflict checks own that).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple, cast

from . import kafka, policy
from .kafka import Consumer, Message, TopicPartition


class Tail(NamedTuple):
    """A record as replication sees it: its origin, a digest of its origin and either its filler mark or its key
    and value, and its timestamp (0 for a filler)."""

    origin: str
    digest: bytes
    timestamp: int = 0

    def holds(self, source: Tail) -> bool:
        """Is this replica record a copy of `source`? A source record without a timestamp (-1, or 0) is copied
        with the copy's time (the producer stamps it), so its timestamp is not compared then."""
        return self.digest == source.digest and (source.timestamp <= 0 or self.timestamp == source.timestamp)


def tail_of(m: Message, own_uuid: str) -> Tail:
    """`own_uuid` is the stream the record was read from (the origin of a record without the header)."""
    headers = m.headers()
    origin = policy.origin_of(headers, own_uuid)
    if policy.is_filler(headers):
        return filler_tail(origin)
    h = hashlib.blake2b(digest_size=16)
    for part in (origin.encode(), m.key(), m.value()):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
    return Tail(origin, h.digest(), m.timestamp()[1])


def filler_tail(origin: str) -> Tail:
    return Tail(origin, b"filler:" + origin.encode())


@dataclass(frozen=True)
class Divergence:
    """Where and how a source's history left its replica's: `offset` is the first offset whose records differ."""

    offset: int
    source_end: int
    replica_end: int
    why: str

    def describe(self, source: str, diff_hint: str, fix: str) -> str:
        """`source`: e.g. "source /a/s:t partition 0"; `diff_hint`: the command that shows the difference; `fix`:
        what brings the replica back."""
        return (
            f"{source} diverged at offset {self.offset}: {self.why} (source end {self.source_end}, replica end"
            f" {self.replica_end}); the replica holds another history. Run '{diff_hint}' to see it, then {fix}"
        )


def resync_hint(src: str, dst: str, topic: str) -> str:
    """What brings a diverged replica of a link back (`stream replica resync`)."""
    return (
        f"'streamrepl stream replica resync -path {src} -replica {dst} -topic {topic}' to set the replica's records"
        " aside and copy the source again"
    )


def clash(replica: str, topic: str, partition: int, kept: str, other: str) -> str:
    """Why a replica partition takes no records from upstream `other`: `kept`, another upstream (a path, or a
    description when it is not one of the replica's upstreams), wrote the same topic into it first."""
    return (
        f"{replica}:{topic}[{partition}]: two upstreams write topic {topic} into {replica}, {kept} and {other}; this"
        f" partition keeps the records of {kept}, which it got first, and takes none of {other}:{topic} (nothing was"
        f" overwritten); replication of this partition from {other} stopped, the other partitions go on. Rename the"
        f" topic on one side (write its records to a topic of another name there, then delete {topic} there), or"
        f" remove one upstream ('streamrepl stream replica remove -path {other} -replica {replica}')"
    )


def compare(
    replica: Tail | None,
    replica_end: int,
    source: Tail | None,
    source_end: int,
    src_uuid: str,
    dst_uuid: str,
    sole_feed: bool = True,
) -> Divergence | None:
    """Compare what a replica partition holds at its last offset with what its source holds there.

    `replica`: the replica's record at replica_end - 1 (None: nothing visible); `source`: the source's record at
    that offset (None: nothing visible, or the source ends before it); `sole_feed`: this source is the only one
    feeding the replica partition (with several, the replica's last record may have come from another)."""
    if replica_end <= 0 or replica is None or replica.origin == dst_uuid:
        return None  # nothing held, or the replica's own record (or one written into it directly): see the module doc
    if source_end < replica_end:
        if replica.origin == src_uuid or sole_feed:
            return Divergence(
                source_end,
                source_end,
                replica_end,
                f"the source now ends at offset {source_end}, below records it had when they were replicated",
            )
        return None
    if source is None or replica.holds(source):
        return None  # removed by compaction or expiry, or a transaction marker: nothing to compare
    return Divergence(replica_end - 1, source_end, replica_end, "the source's record there is not the one replicated")


def reads_source(replica_end: int, replica: Tail | None, dst_uuid: str) -> bool:
    """Whether `check` reads the source: not for an empty replica, nor one whose last record is its own (compare()
    would not look at the source)."""
    return replica_end > 0 and replica is not None and replica.origin != dst_uuid


def check(
    consumer: Consumer,
    source_tp: TopicPartition,
    replica_end: int,
    replica: Tail | None,
    src_uuid: str,
    dst_uuid: str,
    sole_feed: bool = True,
    timeout: float = kafka.REQUEST_TIMEOUT,
) -> Divergence | None:
    """Read the source's real end and its record at replica_end - 1, and compare (see compare). `consumer` reads
    the source; this check assigns it (it must not be one that feeds a writer)."""
    if not reads_source(replica_end, replica, dst_uuid):
        return None
    source_end, last = read_sources(consumer, {(source_tp.topic, source_tp.partition): replica_end}, timeout)[
        (source_tp.topic, source_tp.partition)
    ]
    source = tail_of(last, src_uuid) if last is not None else None
    return compare(replica, replica_end, source, source_end, src_uuid, dst_uuid, sole_feed)


def read_sources(
    consumer: Consumer, replica_ends: dict[tuple[str, int], int], timeout: float = kafka.REQUEST_TIMEOUT
) -> dict[tuple[str, int], tuple[int, Message | None]]:
    """What `check` reads, for several source partitions at once ((topic, partition) -> the replica's end there):
    each source's real end, and its record at the replica's end - 1 (None when it ends before it or holds no
    visible record there). Compare each with `compare(replica, replica_end, tail_of(...), source_end, ...)`."""
    got = kafka.ends_and_records(consumer, {k: e - 1 for k, e in replica_ends.items()}, timeout)
    return {k: (end, rec if end >= replica_ends[k] else None) for k, (end, rec) in got.items()}


@dataclass(frozen=True)
class Misplaced:
    """What a replica partition holds after a writer found another writer's records in it (applier.py's checks).

    `first_foreign`: the first offset from which the partition stops matching the source (another writer's record
    sits where the source's belonged); `count`: the source's records the writer had sent that landed after it, each
    at a wrong offset (a Kafka produce cannot be conditional: a writer learns of the other's records only when its
    own batch has landed after them); `first_wrong`: where the first of those is (-1: none)."""

    first_foreign: int
    count: int
    first_wrong: int

    def describe(self, label: str, source: str, replica: str, topic: str) -> str:
        if self.count:
            where = f"offset {self.first_wrong}" if self.first_wrong >= 0 else f"past offset {self.first_foreign}"
            landed = (
                f"1 record of {source} landed at a wrong offset, {where}"
                if self.count == 1
                else f"{self.count} records of {source} landed at wrong offsets, the first at {where}"
            )
        else:
            landed = f"no record of {source} landed at a wrong offset"
        return (
            f"{label}: another writer's records are in this replica from offset {self.first_foreign}, where those of"
            f" {source} belonged; {landed}; replication of this partition stopped. A topic written on both sides of"
            f" a multi-master pair, or by a producer into a replica, does this: stop writing {replica}:{topic} there,"
            f" then run {resync_hint(source, replica, topic)} (its records from other writers are kept in that"
            " set-aside stream)"
        )


#: How many records past the writer's last verified one are read to find where its records went.
MISPLACED_SCAN = 100_000


def misplaced(
    consumer: Consumer, tp: TopicPartition, verified: int, written_to: int, origin: str, own_uuid: str
) -> Misplaced:
    """Read the replica partition `tp` from `verified` (the offset after the writer's last record known in place) to
    find the first record of another origin than `origin`: every record the writer sent for an offset at or after
    it, up to `written_to` (the offset after the last one it sent, all of them acknowledged), landed after it, at a
    wrong offset. `consumer` reads the replica (it must not be one that feeds a writer)."""
    first_foreign = first_wrong = -1
    start = TopicPartition(tp.topic, tp.partition, verified)
    for m in kafka.read_partition(consumer, start, timeout=kafka.REQUEST_TIMEOUT):
        o = cast(int, m.offset())
        mine = policy.origin_of(m.headers(), own_uuid) == origin
        if first_foreign < 0 and not mine:
            first_foreign = o
        elif first_foreign >= 0 and mine:
            first_wrong = o
            break
        if o - verified > MISPLACED_SCAN:
            break
    if first_foreign < 0:
        first_foreign = written_to  # nothing else found (yet) in what was read: it is past the writer's records
    return Misplaced(first_foreign, max(0, written_to - first_foreign), first_wrong)
