"""resync.py's plan against fake clients: a read that timed out is never evidence that two histories match."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from support.fakes import Message

from streamrepl import resync
from streamrepl.errors import Unreachable
from streamrepl.kafka import reading
from streamrepl.model import Stream, Topic
from streamrepl.paths import StreamPath
from streamrepl.registry import Cluster


class PartitionConsumer:
    """Reads one record at a time from `records` (offset -> value); `stalled`: never answers (a frozen broker)."""

    def __init__(self, records: dict[int, bytes], stalled: bool = False) -> None:
        self.records, self.stalled = records, stalled
        self.at = -1

    def assign(self, tps: list[Any]) -> None:
        self.at = tps[0].offset

    def unassign(self) -> None:
        self.at = -1

    def poll(self, timeout: float) -> Message | None:
        if self.stalled or self.at not in self.records:
            return None
        return Message(self.at, self.records[self.at], key=b"k")

    def close(self) -> None:
        pass


class Side:
    def __init__(self, name: str) -> None:
        self.cluster = Cluster(name, {"bootstrap.servers": "127.0.0.1:1"})
        self.path = StreamPath(name, "/s")


@pytest.fixture(autouse=True)
def short_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "REQUEST_TIMEOUT", 0.2)


def test_the_fork_search_fails_closed_when_the_source_does_not_answer() -> None:
    """Every replica record differs from the source's: with the source stalled, the bisection counted each
    unanswered read as a match and put the fork at the end (K > 0 on a partition that differs from offset 0)."""
    src = PartitionConsumer({o: b"source" for o in range(8)}, stalled=True)
    dst = PartitionConsumer({o: b"other" for o in range(8)})
    with pytest.raises(Unreachable) as e:
        resync._fork(src, "skt", dst, "dkt", 0, 8, ("S", "D"), (Side("sanfrancisco").cluster, Side("newyork").cluster))
    assert "cluster 'sanfrancisco' (" in str(e.value) and "does not answer" in str(e.value), e.value


def test_the_fork_search_fails_closed_when_the_replica_does_not_answer() -> None:
    src = PartitionConsumer({o: b"source" for o in range(8)})
    dst = PartitionConsumer({o: b"other" for o in range(8)}, stalled=True)
    with pytest.raises(Unreachable) as e:
        resync._fork(src, "skt", dst, "dkt", 0, 8, ("S", "D"), (Side("sanfrancisco").cluster, Side("newyork").cluster))
    assert "cluster 'newyork' (" in str(e.value), e.value


def test_the_fork_is_where_the_records_part() -> None:
    src = PartitionConsumer({o: b"same" if o < 3 else b"source" for o in range(8)})
    dst = PartitionConsumer({o: b"same" if o < 3 else b"other" for o in range(8)})
    clusters = (Side("sanfrancisco").cluster, Side("newyork").cluster)
    assert resync._fork(src, "skt", dst, "dkt", 0, 8, ("S", "S"), clusters) == 3


def test_a_plan_whose_source_times_out_names_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw '_TIMED_OUT: Failed to get watermark offsets: Local: Timed out' of a stalled source."""
    src, dst = Side("sanfrancisco"), Side("newyork")

    def ends(cluster: Cluster, topics: Any) -> dict:
        if cluster.name == "sanfrancisco":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermark offsets"))
        return {}

    monkeypatch.setattr(resync.kafka, "topic_ends", ends)
    rec = Stream(uuid="S")
    rec.topics["t"] = Topic(partitions=1)
    with pytest.raises(Unreachable) as e:
        resync.plan(src, rec, dst, rec, None)  # type: ignore[arg-type]
    assert str(e.value).startswith("cluster 'sanfrancisco' (127.0.0.1:1) does not answer"), e.value
