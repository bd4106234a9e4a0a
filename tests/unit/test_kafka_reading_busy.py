"""kafka.true_ends on a partition that is being written without pause (issue 28).

Tansu reports as high watermark the base offset of the last batch + 1, so true_ends reads on from there; it waited
for the end-of-partition event, which librdkafka gives only when a fetch comes back empty. Through a 50 ms line to a
source written 1,000 records/s, every fetch found new batches: each divergence check of a partition taken over
timed out (2 s), again every 5 s for minutes, and the new gateway never wrote the partitions it had taken over
(bench/wan_ops.py takeover). The end as of the watermark asked for is reached once the batch holding the record at
the watermark has been read: later records only move the end on.
"""

from __future__ import annotations

from itertools import count

import pytest

from streamrepl import kafka
from streamrepl.kafka import KafkaError, TopicPartition

EOF = KafkaError(KafkaError._PARTITION_EOF)


class Message:
    def __init__(self, offset: int, error: KafkaError | None = None) -> None:
        self._offset, self._error = offset, error

    def offset(self) -> int:
        return self._offset

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0


class Busy:
    """Watermarks (0, 10); the last batch holds offsets 9-11; a new batch of three comes with every fetch, and no
    fetch ever comes back empty (no end-of-partition)."""

    def __init__(self) -> None:
        self.next = count(9)
        self.assigned: list[TopicPartition] | None = None

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, 10

    def assign(self, tps: list[TopicPartition]) -> None:
        assert [tp.offset for tp in tps] == [9]
        self.assigned = tps

    def unassign(self) -> None:
        self.assigned = None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return [Message(next(self.next)) for _ in range(3)]


def test_the_end_of_a_partition_written_without_pause_is_found() -> None:
    c = Busy()
    ends = kafka.true_ends(c, [TopicPartition("t", 0)], timeout=2.0)  # type: ignore[arg-type]
    assert ends[("t", 0)] >= 12  # at least past the batch at the watermark (9-11)
    assert c.assigned is None


class Marker(Busy):
    """The record at the watermark is never handed out (a transaction marker): only the end-of-partition ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = [[Message(7)], [Message(8, EOF)]]

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = tps


def test_a_partition_whose_last_offset_is_never_handed_out_ends_at_its_end_of_partition() -> None:
    assert kafka.true_ends(Marker(), [TopicPartition("t", 0)], timeout=2.0) == {("t", 0): 10}  # type: ignore[arg-type]


def test_a_partition_that_never_answers_times_out() -> None:
    class Silent(Marker):
        def consume(self, num_messages: int, timeout: float) -> list[Message]:
            return []

    with pytest.raises(TimeoutError):
        kafka.true_ends(Silent(), [TopicPartition("t", 0)], timeout=0.3)  # type: ignore[arg-type]
