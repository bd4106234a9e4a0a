"""Fake Kafka clients shared by the unit tests."""

from __future__ import annotations

from typing import Any


class RecordingProducer:
    """Keeps what it is asked to produce (in `sent`), as keyword dicts; never delivers."""

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

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0
