"""What the `local` tests share: whether a broker process is alive, a record written and read back through a broker."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def round_trip(bootstrap: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(10)
    value = uuid.uuid4().bytes
    assert produce_one(bootstrap, topic, value) is None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None
        assert (msg.key(), msg.value(), msg.offset()) == (b"k", value, 0)
    finally:
        consumer.close()


def produce_one(bootstrap: str, topic: str, value: bytes, timeout_ms: int = 10_000) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": timeout_ms, "log_level": 0})
    producer.produce(topic, value, key=b"k", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(timeout_ms / 1000 + 5)
    assert errors, "no delivery report"
    return errors[0]
