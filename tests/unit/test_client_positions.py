"""ReadPositions with a fake consumer: where a StreamConsumer starts on a copy, and what it delivers and commits."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from support.fakes import MetadataConsumer, WatermarkReader

from streamrepl.client.positions import ReadPositions
from streamrepl.errors import InvalidArgument, NotFound
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.streams import Resolved

COPY = Resolved(StreamPath("sanfrancisco", "/activity"), Cluster("sanfrancisco", {"bootstrap.servers": "127.0.0.1:1"}))
KT = kafka_topic_name(COPY.path, "clicks")
TOPIC_OF = {KT: "clicks"}


def consumer(partitions: int = 2, stored: dict[int, int] | None = None, at_time: int = -1) -> MetadataConsumer:
    """A broker holding `KT` with `partitions`, committed offsets `stored`, and `at_time` for every time asked."""
    return MetadataConsumer({KT: partitions}, stored, at_time)


def positions(**kw: Any) -> ReadPositions:
    args: dict[str, Any] = {"group": None, "partitions": None, "start": None, "start_timestamp": None}
    args.update(kw)
    return ReadPositions(reset="earliest", reader=_no_reader, **args)


def _no_reader(_: Cluster) -> Any:
    raise AssertionError("no partition end is needed here")


def offsets(parts: list[TopicPartition]) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in parts}


def test_start_options() -> None:
    c = consumer()
    assert offsets(positions(start="earliest").start_offsets(c, COPY, ["clicks"], TOPIC_OF, False)) == {
        0: OFFSET_BEGINNING,
        1: OFFSET_BEGINNING,
    }
    assert offsets(positions(start="latest").start_offsets(c, COPY, ["clicks"], TOPIC_OF, False)) == {
        0: OFFSET_END,
        1: OFFSET_END,
    }
    assert offsets(positions(start="7", partitions=[1]).start_offsets(c, COPY, ["clicks"], TOPIC_OF, False)) == {1: 7}
    with pytest.raises(InvalidArgument, match="earliest, latest or an offset"):
        positions(start="soon")
    with pytest.raises(NotFound, match="no partition"):
        positions(partitions=[5]).start_offsets(c, COPY, ["clicks"], TOPIC_OF, False)


def test_manual_unless_a_group_reads_from_its_committed_offsets() -> None:
    assert positions().manual
    assert positions(group="g", start="earliest").manual
    assert not positions(group="g").manual


def test_after_a_failover_a_group_resumes_at_the_further_of_its_two_commits() -> None:
    pos = positions(group="g", start="earliest")
    pos.commit_done({("clicks", 0): 10, ("clicks", 1): 3})
    c = consumer(stored={0: 4, 1: 8})
    assert offsets(pos.start_offsets(c, COPY, ["clicks"], TOPIC_OF, resumed=True)) == {0: 10, 1: 8}
    assert offsets(pos.start_offsets(c, COPY, ["clicks"], TOPIC_OF, resumed=False)) == {
        0: OFFSET_BEGINNING,
        1: OFFSET_BEGINNING,
    }


def test_without_a_group_a_failover_resumes_after_the_last_record_delivered() -> None:
    pos = positions(start="earliest")
    assert pos.deliverable(("clicks", 0), 41, 0, filler=False)
    pos.leave_copy()
    pos.new_copy()
    c = consumer()
    assert offsets(pos.start_offsets(c, COPY, ["clicks"], TOPIC_OF, resumed=True)) == {0: 42, 1: OFFSET_BEGINNING}
    assert c.committed_asked == 0


def test_a_start_timestamp_skips_records_before_it_in_the_batch_found() -> None:
    pos = positions(start_timestamp=1000)
    parts = pos.start_offsets(consumer(partitions=1, at_time=5), COPY, ["clicks"], TOPIC_OF, False)
    assert offsets(parts) == {0: 5}
    assert not pos.deliverable(("clicks", 0), 5, 999, filler=False)
    assert pos.deliverable(("clicks", 0), 6, 1000, filler=False)
    assert pos.deliverable(("clicks", 0), 7, 10, filler=False)  # only until the first record at the time
    assert pos.delivered == {("clicks", 0): 8}


def test_fillers_advance_the_position_but_are_not_delivered() -> None:
    pos = positions()
    assert not pos.deliverable(("clicks", 0), 3, 0, filler=True)
    assert pos.delivered == {("clicks", 0): 4}
    assert pos.to_commit() == {("clicks", 0): 4}
    pos.commit_done(pos.to_commit())
    assert pos.to_commit() == {}
    pos.new_copy()
    assert pos.delivered == {} and pos.committed == {("clicks", 0): 4}


def test_resume_assigned_only_moves_partitions_this_consumer_committed_further() -> None:
    pos = positions(group="g")
    parts = [TopicPartition(KT, 0, -1001), TopicPartition(KT, 1, -1001)]
    keys = [("clicks", 0), ("clicks", 1)]
    assert not pos.resume_assigned(consumer(), parts, keys)
    pos.commit_done({("clicks", 0): 9, ("clicks", 1): 2})
    assert pos.resume_assigned(consumer(stored={0: 5, 1: 6}), parts, keys)
    assert offsets(parts) == {0: 9, 1: -1001}


def test_a_negative_start_counts_back_from_the_real_end_and_closes_its_reader() -> None:
    readers: list[WatermarkReader] = []

    def reader(_: Cluster) -> Any:
        readers.append(WatermarkReader(default=10))
        return readers[-1]

    pos = ReadPositions(None, [0], -3, None, "earliest", reader=reader)
    assert offsets(pos.start_offsets(consumer(), COPY, ["clicks"], TOPIC_OF, False)) == {0: 7}
    assert len(readers) == 1 and readers[0].closed
