"""Fake Kafka clients shared by the unit tests: a producer that records, a message, consumers that hand out batches
or answer metadata, a reader of watermarks. (The mover's and the bulk tasks' fakes, which model partitions, are in
support/mover.py and support/bulk.py.)"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition


class RecordingProducer:
    """Keeps what it is asked to produce (in `sent`), as keyword dicts; never delivers, and holds nothing back (its
    len() is 0, as a producer's whose records were all acknowledged)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        # confluent-kafka's positional order: the writer passes its arguments positionally (a cost per record)
        kw = {"value": value, "key": key, "partition": partition, "timestamp": timestamp, "headers": headers}
        if on_delivery or callback:
            kw["on_delivery"] = on_delivery or callback
        self.sent.append({k: v for k, v in kw.items() if v is not None})

    def __len__(self) -> int:
        return 0

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


class Message:
    """A record (or an error) as confluent_kafka's consumer hands it over: the methods the code under test calls.
    Each test module has a small `msg(...)` that fills in what it cares about."""

    def __init__(
        self,
        offset: int = 0,
        value: bytes | None = None,
        *,
        key: bytes | None = None,
        topic: str = "t",
        partition: int = 0,
        headers: Any = None,
        timestamp: int = 1_700_000_000_000,
        error: KafkaError | None = None,
    ) -> None:
        self._offset, self._value, self._key, self._topic, self._partition = offset, value, key, topic, partition
        self._headers, self._timestamp, self._error = headers, timestamp, error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)  # CreateTime

    def error(self) -> KafkaError | None:
        return self._error


class BatchConsumer:
    """Hands out the prepared batches, one a consume() while not paused, then empty ones (after 10 ms, as a consume
    with nothing to read waits). Its end: `watermarks` when given, else `end` when set (a broker that lost its tail),
    else past its position (`at`) by the batches left."""

    def __init__(self, batches: list[list[Any]], watermarks: tuple[int, int] | None = None) -> None:
        self.batches = batches
        self.watermarks = watermarks
        self.assigned: list[TopicPartition] | None = None
        self.consumed = 0
        self.closed = False
        self.paused = False
        self.at = 0
        self.end: int | None = None
        #: what was done to it, in order: "consume" (while not paused), "pause", "end?", "resume"
        self.calls: list[str] = []
        self.timeouts: list[float] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = tps

    def unassign(self) -> None:
        self.assigned = None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.consumed += 1
        self.timeouts.append(timeout)
        if not self.paused:
            if not self.calls or self.calls[-1] != "consume":
                self.calls.append("consume")
            if self.batches:
                return self.batches.pop(0)
        time.sleep(0.01)
        return []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused = True
        self.calls.append("pause")

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused = False
        self.calls.append("resume")

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        if not self.calls or self.calls[-1] != "end?":
            self.calls.append("end?")
        if self.watermarks is not None:
            return self.watermarks
        if self.end is not None:
            return 0, self.end
        return 0, self.at + len(self.batches)  # the batches not read yet lie past the position

    def close(self) -> None:
        self.closed = True


class MetadataConsumer:
    """Answers metadata (`topics`: Kafka topic -> partitions), committed offsets (`stored`: partition -> offset) and
    offsets for times (`at_time`) as a broker would; with `answers` false, every metadata request fails as with no
    broker reachable."""

    def __init__(
        self,
        topics: dict[str, int] | None = None,
        stored: dict[int, int] | None = None,
        at_time: int = -1,
        answers: bool = True,
    ) -> None:
        self.topics = {
            kt: SimpleNamespace(partitions=dict.fromkeys(range(n)), error=None) for kt, n in (topics or {}).items()
        }
        self.stored = stored or {}
        self.at_time = at_time
        self.answers = answers
        self.asked: list[str | None] = []
        self.committed_asked = 0
        self.closed = False

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> MetadataConsumer:
        self.asked.append(topic)
        if not self.answers:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return self

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.committed_asked += 1
        return [TopicPartition(tp.topic, tp.partition, self.stored.get(tp.partition, -1001)) for tp in tps]

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at_time) for tp in tps]

    def close(self) -> None:
        self.closed = True


class WatermarkReader:
    """Partitions whose real end is their high watermark: `ends` ((topic, partition) -> end), else `default`; a
    partition with neither is an unknown one, as the broker says."""

    def __init__(self, ends: dict[tuple[str, int], int] | None = None, default: int | None = None) -> None:
        self.ends = ends or {}
        self.default = default
        self.closed = False

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        end = self.ends.get((tp.topic, tp.partition), self.default)
        if end is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return end, end

    def close(self) -> None:
        self.closed = True
