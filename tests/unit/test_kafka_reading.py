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


class Partitions:
    """A consumer over several partitions, each a list of the offsets of its visible records; `marks` gives a
    partition's (low, high) watermarks when they differ from (its first, its last + 1) (Tansu under-counts high).
    A consume hands out every assigned partition's records from its position on, then its end-of-partition."""

    def __init__(self, logs: dict[tuple[str, int], list[int]], marks: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.logs, self.marks = logs, marks
        self.pos: dict[tuple[str, int], int] = {}
        self.requests: list[str] = []

    def _marks(self, key: tuple[str, int]) -> tuple[int, int]:
        log = self.logs[key]
        return self.marks.get(key, (log[0], log[-1] + 1) if log else (0, 0))

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        self.requests.append("list offsets")
        low_or_high = [self._marks((tp.topic, tp.partition))[0 if tp.offset == -2 else 1] for tp in tps]
        return [TopicPartition(tp.topic, tp.partition, o) for tp, o in zip(tps, low_or_high, strict=True)]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        self.requests.append("watermarks")
        return self._marks((tp.topic, tp.partition))

    def assign(self, tps: list[TopicPartition]) -> None:
        self.requests.append("assign")
        self.pos = {(tp.topic, tp.partition): tp.offset for tp in tps}

    def unassign(self) -> None:
        self.pos = {}

    def consume(self, n: int, timeout: float = 0) -> list[Message]:
        out: list[Message] = []
        for (t, p), at in self.pos.items():
            out += [msg(o, topic=t, partition=p) for o in self.logs[(t, p)] if o >= at]
            end = self.logs[(t, p)][-1] + 1 if self.logs[(t, p)] else at
            out.append(msg(end, EOF_ERROR, topic=t, partition=p))
            self.pos[(t, p)] = end
        return out

    def poll(self, timeout: float = 0) -> Message | None:
        got = self.consume(1)
        return got[0] if got else None


def test_ends_and_records_reads_both_in_one_pass() -> None:
    c = Partitions(
        {("t", 0): list(range(8)), ("t", 1): [0, 1, 2, 3], ("t", 2): [0, 1, 3], ("t", 3): [0, 1]},
        {("t", 0): (0, 5)},  # under-counted: the last batch starts at 4, the real end is 8
    )
    got = kafka.ends_and_records(c, {("t", 0): 6, ("t", 1): 2, ("t", 2): 2, ("t", 3): 5})  # type: ignore[arg-type]
    seen = {k: (end, None if rec is None else rec.offset()) for k, (end, rec) in got.items()}
    assert seen == {
        ("t", 0): (8, 6),  # past the watermark
        ("t", 1): (4, 2),
        ("t", 2): (4, None),  # no visible record there (compacted away, a transaction marker)
        ("t", 3): (2, None),  # the partition ends before it
    }
    assert c.requests == ["list offsets", "assign"], "one request of each kind for all partitions"


def test_ends_and_records_reads_a_record_far_below_the_end_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamrepl.kafka import reading

    monkeypatch.setattr(reading, "ONE_PASS_RECORDS", 3)
    c = Partitions({("t", 0): list(range(10)), ("t", 1): list(range(10))}, {})
    got = kafka.ends_and_records(c, {("t", 0): 1, ("t", 1): 8})  # type: ignore[arg-type]
    assert {k: (end, rec.offset() if rec else None) for k, (end, rec) in got.items()} == {
        ("t", 0): (10, 1),
        ("t", 1): (10, 8),
    }


def test_tails_give_each_partitions_end_and_last_record_in_one_pass() -> None:
    c = Partitions(
        {("t", 0): list(range(8)), ("t", 1): [0, 1, 2], ("t", 2): []},
        {("t", 0): (0, 5), ("t", 1): (0, 4)},  # t[0] under-counted; t[1] ends with a transaction marker at 3
    )
    got = kafka.tails(c, [TopicPartition("t", p) for p in range(3)])  # type: ignore[arg-type]
    assert {k: (end, rec.offset() if rec else None) for k, (end, rec) in got.items()} == {
        ("t", 0): (8, 7),
        ("t", 1): (4, None),
        ("t", 2): (0, None),
    }
    assert c.requests == ["list offsets", "assign"]
