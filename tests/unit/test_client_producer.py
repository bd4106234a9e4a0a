"""How a synchronous replica's end is read without a broker (replica_end.ReplicaEnds, as the producer's _SyncReplica)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streamrepl.client.producer import _SyncReplica
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replica_end import ASK_AGAIN

STREAM = StreamPath("newyork", "/s")
KT = kafka_topic_name(STREAM, "t")


class StaleAbsenceReader:
    """A reader whose metadata cache keeps a topic it was told is absent as absent, as librdkafka does when the
    entry sits behind longer-lived ones (seen on Tansu: 'Unknown partition' for 60 s after the topic was made): only
    a metadata request for that topic itself replaces the entry. `ends`: the topics that exist, partition -> end."""

    def __init__(self) -> None:
        self.ends: dict[str, dict[int, int]] = {}
        self.absent: set[str] = set()
        self.asked: list[str | None] = []
        #: ListOffsets requests sent (each a round trip, in series)
        self.requests = 0

    def _end(self, tp: TopicPartition) -> int:
        if tp.topic in self.absent or tp.topic not in self.ends:
            self.absent.add(tp.topic)
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        return self.ends[tp.topic][tp.partition]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        self.requests += 2  # librdkafka asks for the low mark, then for the high one
        return 0, self._end(tp)

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        self.requests += 1
        assert all(tp.offset == -1 for tp in tps), "only the latest offset (the high watermark) is modelled"
        return [TopicPartition(tp.topic, tp.partition, self._end(tp)) for tp in tps]

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        self.asked.append(topic)
        if topic in self.ends:
            self.absent.discard(topic)
        elif topic is not None:
            self.absent.add(topic)
        found = {kt: SimpleNamespace(partitions=dict.fromkeys(ends), error=None) for kt, ends in self.ends.items()}
        return SimpleNamespace(topics=found)

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def _replica(reader: StaleAbsenceReader) -> _SyncReplica:
    r = _SyncReplica(str(STREAM), STREAM, Cluster("newyork", {"bootstrap.servers": "127.0.0.1:1"}))
    r.reader = reader
    return r


def _ends_for(r: _SyncReplica, seconds: float) -> list[int]:
    """What end() answers when asked every 2 ms for `seconds`, as the producer's waiting loop asks."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got.append(r.end("t", 0, 0))
        time.sleep(0.002)
    return got


def test_a_replica_topic_made_after_the_first_question_is_seen() -> None:
    # The producer asked before the gateway made the replica's topic (a producer that starts first, a topic the
    # source's autocreate made): once the topic is there, its end must be seen, not 'unknown' until the reader's
    # cache entry is evicted (minutes behind long-lived entries), which made every record fall back.
    reader = StaleAbsenceReader()
    r = _replica(reader)
    assert _ends_for(r, 0.3)[-1] == 0
    reader.ends[KT] = {0: 1}  # the gateway made the topic and wrote the record
    ends = _ends_for(r, 0.5)
    assert ends[-1] == 1, ends[-5:]


def test_a_replica_topic_still_absent_is_no_progress_and_asked_about_a_few_times_a_second() -> None:
    reader = StaleAbsenceReader()
    r = _replica(reader)
    ends = _ends_for(r, 0.5)
    assert set(ends) == {0}
    # every 2 ms the end is asked; the broker about the topic at most every ASK_AGAIN (0.1 s)
    assert len(ends) > 20 and 1 <= len(reader.asked) <= 0.5 / ASK_AGAIN + 1, (len(ends), reader.asked)
    assert set(reader.asked) == {KT}


def test_a_question_about_the_replica_end_is_one_request() -> None:
    # A watermark query is two ListOffsets requests (low, high); a proxy that forwards one request at a time
    # (Tansu's) makes them two round trips across a 100 ms line, and 44 ms at 0 ms. The producer needs the high
    # mark alone.
    reader = StaleAbsenceReader()
    reader.ends[KT] = {0: 1}
    r = _replica(reader)
    assert r.end("t", 0, 0) == 1
    assert reader.requests == 1
