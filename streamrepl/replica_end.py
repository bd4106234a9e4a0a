"""How far a replica partition goes: what a synchronous producer waits on, read from the replica's cluster.

Shared by streamrepl's own producer (client/producer.py) and the proxy's held Produce (proxy/sync.py): both
acknowledge a record only once the replica partition's end is past its offset.

The reported high watermark, asked alone (one ListOffsets request, kafka.high_mark), settles it when it is past the
offset waited for (always so on Apache Kafka once the record is there). Brokers that under-report it (Tansu reports
the base offset of the last batch + 1) are read instead: a reader stays assigned to the partition from there on and
follows its end, which costs a few milliseconds rather than an assign-fetch-unassign round per question.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from . import kafka
from .kafka import KafkaException, TopicPartition
from .paths import StreamPath, kafka_topic_name
from .registry import Cluster

#: Seconds between two metadata requests for a replica topic the reader takes for absent (ReplicaEnds._ask_about).
ASK_AGAIN = 0.1

#: The defaults of synchronous replication, for the producer and the proxy alike: how long a record may wait for a
#: replica before replication to it falls back to asynchronous, how long a replica partition may make no progress
#: (no gateway alive) before it does, and how often a fallen-back replica is checked for having caught up.
SYNC_TIMEOUT = 5.0
SYNC_STALL = 2.0
SYNC_RECHECK = 1.0


def _stream_topic(stream: StreamPath, kt: str) -> str:
    prefix = kafka_topic_name(stream, "x")[:-1]
    return kt[len(prefix) :] if kt.startswith(prefix) else kt


@dataclass
class ReplicaEnds:
    """The ends of a replica stream's partitions, by stream topic name, as far as asked. Not thread-safe: one
    caller at a time (the proxy runs it on one thread of its own per replica)."""

    path: str
    stream: StreamPath
    cluster: Cluster
    reader: Any = None
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    tailing: set[tuple[str, int]] = field(default_factory=set)
    #: replica topic -> when the broker was last asked about it after the reader took it for absent (_ask_about)
    asked: dict[str, float] = field(default_factory=dict)

    def end(self, topic: str, p: int, needed: int) -> int:
        """What the replica partition holds: at least its end as far as needed to say whether `needed` is there."""
        if self.reader is None:
            extra: dict[str, Any] = {"fetch.wait.max.ms": 5, "enable.partition.eof": True}
            self.reader = kafka.consumer(self.cluster, **extra)
        key = (topic, p)
        known = self.ends.get(key, 0)
        kt = kafka_topic_name(self.stream, topic)
        try:
            high = kafka.high_mark(self.reader, TopicPartition(kt, p), timeout=2.0)
        except KafkaException as e:
            if kafka.is_unknown_topic(e):
                self._ask_about(kt)
            return known  # not created yet, or not answering: no progress
        known = max(known, int(high))
        if known <= needed:
            if key not in self.tailing:
                self.reader.incremental_assign([TopicPartition(kt, p, max(0, int(high) - 1))])
                self.tailing.add(key)
            for m in self.reader.consume(10000, timeout=0.005):
                err = m.error()
                mk = (_stream_topic(self.stream, cast(str, m.topic())), cast(int, m.partition()))
                if err is None:
                    self.ends[mk] = max(self.ends.get(mk, 0), cast(int, m.offset()) + 1)
                elif kafka.is_partition_eof(err):
                    self.ends[mk] = max(self.ends.get(mk, 0), cast(int, m.offset()))
            known = max(known, self.ends.get(key, 0))
        self.ends[key] = known
        return known

    def _ask_about(self, kt: str) -> None:
        """Ask the broker about replica topic `kt`, which the reader took for absent.

        librdkafka keeps a topic it was told is absent in its metadata cache, and answers later questions from
        there; such an entry is meant to last 100 ms, but one that sits behind longer-lived entries (Tansu answers
        the broker-only metadata request of a reader's first connection with all its topics) is not evicted before
        them, for up to metadata.max.age.ms (15 min). A replica topic made after the first question (the gateway
        starting after the producer, a topic the source's autocreate made) was never seen, and every record fell
        back. A metadata request for the topic itself replaces the entry. At most every ASK_AGAIN seconds a topic:
        the waiting loop asks for the end every few milliseconds."""
        now = time.monotonic()
        if now - self.asked.get(kt, float("-inf")) < ASK_AGAIN:
            return
        self.asked[kt] = now
        try:
            kafka.partitions_of(self.reader, kt, timeout=2.0)
        except KafkaException:
            pass  # not answering: the next question finds out

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
            self.tailing.clear()
            self.asked.clear()
