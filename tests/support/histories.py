"""A source topic's history rewritten under a replica: deleted and created again, and records written to it directly
(the divergence, resync and DR tests)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support.streams import (
    wait_until,
)


def recreate_topic(bootstrap: str, kt: str, partitions: int) -> None:
    """Delete a Kafka topic and create it again, as an operator would outside streamrepl."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.delete_topics([kt])[kt].result(30)
    wait_until(lambda: kt not in admin.list_topics(timeout=10).topics, 30, f"{kt} deleted")
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(kt, partitions, 1)])[kt].result(30)
            break
        except Exception:  # noqa: BLE001 - the deletion may still be under way
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    wait_until(lambda: kt in admin.list_topics(timeout=10).topics, 30, f"{kt} created")


def write(bootstrap: str, kt: str, counts: dict[int, int], tag: str, headers: list | None = None) -> None:
    """`counts[p]` records into partition p, keyed and valued by `tag` (another history than produce()'s)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(
                kt,
                key=f"{tag}k{i}".encode(),
                value=f"{tag}-{i}".encode(),
                partition=partition,
                timestamp=1_800_000_000_000 + i,
                headers=headers,
            )
    assert p.flush(30) == 0
