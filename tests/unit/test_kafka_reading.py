"""streamrepl.kafka's reading and compacted-topic creation, on fake clients: no broker needed."""

from __future__ import annotations

from typing import Any

import pytest
from support.fakes import BatchConsumer, Message

from streamrepl import kafka
from streamrepl.errors import StreamreplError
from streamrepl.kafka import KafkaError, TopicPartition
from streamrepl.kafka import admin as kafka_admin
from streamrepl.registry import Cluster

EOF_ERROR = KafkaError(KafkaError._PARTITION_EOF)


def msg(offset: int, error: KafkaError | None = None, topic: str = "t", partition: int = 0) -> Message:
    return Message(offset, error=error, topic=topic, partition=partition)


def offsets(c: BatchConsumer, **kw: Any) -> list[int]:
    return [m.offset() for m in kafka.read_partition(c, TopicPartition("t", 0, 0), **kw)]  # type: ignore[arg-type]


def test_reads_to_the_end_of_the_partition() -> None:
    c = BatchConsumer([[msg(0), msg(1)], [msg(2), msg(3, EOF_ERROR)], [msg(4)]])
    assert offsets(c) == [0, 1, 2]
    assert c.assigned is None  # unassigned at the end


def test_until_goes_on_past_the_end_and_stops_at_the_offset() -> None:
    c = BatchConsumer([[msg(0), msg(1, EOF_ERROR)], [], [msg(1), msg(2)], [msg(3)]])
    assert offsets(c, until=1) == [0, 1]
    assert len(c.batches) == 1  # the record after `until` was not asked for


def test_errors_other_than_the_end_are_skipped() -> None:
    c = BatchConsumer(
        [
            [msg(0), msg(-1, KafkaError(KafkaError._TRANSPORT)), msg(1)],
            [msg(2, EOF_ERROR)],
        ]
    )
    assert offsets(c) == [0, 1]


def test_a_partition_that_never_ends_times_out() -> None:
    c = BatchConsumer([[msg(0)]])
    with pytest.raises(TimeoutError):
        offsets(c, timeout=0.05)
    assert c.assigned is None


def test_a_reader_that_stops_early_leaves_the_consumer_unassigned() -> None:
    c = BatchConsumer([[msg(0), msg(1)], [msg(2, EOF_ERROR)]])
    for m in kafka.read_partition(c, TopicPartition("t", 0, 0)):  # type: ignore[arg-type]
        if m.offset() == 0:
            break
    assert c.assigned is None


def test_true_end_reads_past_an_undercounting_watermark() -> None:
    # Tansu reports the base offset of the last batch + 1 as high watermark: 5 here, the real end is 8.
    c = BatchConsumer([[msg(4), msg(5), msg(6), msg(7)], [msg(8, EOF_ERROR)]], (0, 5))
    assert kafka.true_end(c, TopicPartition("t", 0)) == 8  # type: ignore[arg-type]
    assert c.assigned is None


def test_true_end_of_an_empty_partition_asks_nothing_more() -> None:
    c = BatchConsumer([], (3, 3))
    assert kafka.true_end(c, TopicPartition("t", 0)) == 3  # type: ignore[arg-type]
    assert c.consumed == 0


CLUSTER = Cluster("east", {"bootstrap.servers": "127.0.0.1:1"})


def test_create_compacted_topic_asks_for_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(kafka_admin, "create_topics", lambda cluster, specs: asked.extend(specs))
    kafka.create_compacted_topic(CLUSTER, "__internal")
    assert asked == [("__internal", 1, {"cleanup.policy": "compact"})]


def test_create_compacted_topic_tolerates_a_creator_that_got_there_first(monkeypatch: pytest.MonkeyPatch) -> None:
    def lost_the_race(cluster: Cluster, specs: Any) -> None:
        raise StreamreplError("already exists")

    monkeypatch.setattr(kafka_admin, "create_topics", lost_the_race)
    monkeypatch.setattr(kafka_admin, "topics", lambda cluster: {"__internal": 1})
    kafka.create_compacted_topic(CLUSTER, "__internal")


def test_create_compacted_topic_fails_when_the_topic_is_still_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(cluster: Cluster, specs: Any) -> None:
        raise StreamreplError("refused")

    monkeypatch.setattr(kafka_admin, "create_topics", refused)
    monkeypatch.setattr(kafka_admin, "topics", lambda cluster: {})
    with pytest.raises(StreamreplError, match="refused"):
        kafka.create_compacted_topic(CLUSTER, "__internal")


def test_clients_get_every_registry_property() -> None:
    c = Cluster("east", {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.password": "pw"})
    conf = kafka.client_config(c, **{"linger.ms": 0})
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.password"] == "pw"
    assert conf["linger.ms"] == 0 and conf["log_level"] == 0


def test_create_shared_topic_keeps_the_partitions_and_settings_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(kafka_admin, "create_topics", lambda cluster, specs: asked.extend(specs))
    kafka.create_shared_topic(CLUSTER, "__slots", 16)
    assert asked == [("__slots", 16, {})]


def test_an_exact_watermark_is_the_end_without_a_read() -> None:
    # noida-db and Apache Kafka: the watermark is the end; nothing is assigned or read (Tansu's 5 would be read past).
    c = BatchConsumer([[msg(7)]], watermarks=(0, 5))
    assert kafka.true_ends(c, [TopicPartition("t", 0)], exact_watermark=True) == {("t", 0): 5}  # type: ignore[arg-type]
    assert c.assigned is None and c.consumed == 0
    from streamrepl.kafka import brokers
    from streamrepl.kafka.probes import BrokerTraits

    tansu = Cluster("a", {"bootstrap.servers": "x:1"})
    noida = Cluster("b", {"bootstrap.servers": "x:2"})
    unknown = Cluster("c", {"bootstrap.servers": "x:3", "streamrepl.broker": "noida"})  # a label decides nothing
    overridden = Cluster("d", {"bootstrap.servers": "x:4", "streamrepl.watermark.exact": "true"})
    brokers.learn(tansu, BrokerTraits(identity="t", exact_watermark=False, probed_at=1))
    brokers.learn(noida, BrokerTraits(identity="n", exact_watermark=True, probed_at=1))
    brokers.learn(overridden, BrokerTraits(identity="o", exact_watermark=False, probed_at=1))
    assert not kafka.watermark_is_exact(tansu) and kafka.watermark_is_exact(noida)
    assert not kafka.watermark_is_exact(unknown), "not probed: the end is read, as on every broker"
    assert kafka.watermark_is_exact(overridden), "the registry's property overrides the probe it names"
