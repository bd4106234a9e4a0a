"""A read on of the metadata log asks for the log's watermarks while it looks the topic up (issue 28): one round trip
instead of two before each read, between a `replica resume` and its first record across a WAN. A fake reader whose
two answers each wait for the other request to have been sent: asked one after the other, the first never answers."""

from __future__ import annotations

import threading
from typing import Any

from streamrepl import metastore
from streamrepl.kafka import KafkaError, TopicPartition
from streamrepl.registry import Cluster

CLUSTER = Cluster("parallel", {"bootstrap.servers": "127.0.0.1:1"})


class Message:
    def __init__(self, offset: int, key: bytes, error: KafkaError | None = None) -> None:
        self._offset, self._key, self._error = offset, key, error

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return b"{}"

    def error(self) -> KafkaError | None:
        return self._error


class Reader:
    """Answers the topic lookup and the first watermark ask only once both were sent (a 5 s guard against a hang)."""

    def __init__(self) -> None:
        self.lookup_sent = threading.Event()
        self.marks_sent = threading.Event()
        self.both_waited: list[bool] = []
        self.batches = [[Message(4, b"last")], [Message(5, b"x", KafkaError(KafkaError._PARTITION_EOF))]]

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.lookup_sent.set()
        self.both_waited.append(self.marks_sent.wait(5))

        class Md:
            topics = {topic: type("T", (), {"error": None, "partitions": {0: None}})()}

        return Md()

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        if not self.marks_sent.is_set():
            self.marks_sent.set()
            self.both_waited.append(self.lookup_sent.wait(5))
        return 0, 5

    def assign(self, tps: list[TopicPartition]) -> None:
        pass

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []


def test_the_watermarks_are_asked_for_while_the_topic_is_looked_up() -> None:
    log = metastore._Log()
    log.next_offset, log.last_key = 5, b"last"
    reader = Reader()
    log.reader = reader  # type: ignore[assignment]
    assert log._read_on(CLUSTER, None) is True
    assert reader.both_waited == [True, True]
