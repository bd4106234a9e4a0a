"""A noida-db source holding more than a client takes in one answer (issue 28's WAN sweep found it): noida-db answers a
fetch with everything a partition holds past the asked offset, whatever fetch.max.bytes says, and librdkafka refuses
an answer above receive.message.max.bytes (100 MB by default: "Invalid response size"), so a consumer with default
settings receives nothing while the backlog stays above it. The gateway must still replicate such a backlog."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.streams import Gateways, link, new_stream, new_topics, same_ends, sp, wait_until

from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow

RECORDS = 110_000  # of 1 KiB: 113 MB in one partition, above librdkafka's 100 MB receive.message.max.bytes
SIZE = 1024


def _tail(bootstrap: str, topic: str, end: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The last `n` records before `end` (read from there: a small answer)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, end - n)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        while len(out) < n:
            m = c.poll(30)
            assert m is not None, f"{topic}: no record after offset {end - n + len(out)}"
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def test_a_source_backlog_above_a_clients_answer_limit_is_replicated(tmp_path: Path) -> None:
    with EphemeralClusters(["sanfrancisco", "newyork"], broker="noida", state_dir=tmp_path / "state") as ec:
        reg = ec.registry_path
        bs = {name: b.bootstrap for name, b in ec.brokers.items()}
        src = new_stream(reg, "/sanfrancisco/big")
        dst = new_stream(reg, "/newyork/big", copyfrom=src)
        new_topics(reg, src, {"t": 1})
        kt = kafka_topic_name(sp(src), "t")
        p = Producer({"bootstrap.servers": bs["sanfrancisco"], "linger.ms": 5, "enable.idempotence": True})
        for i in range(RECORDS):
            while True:
                try:
                    p.produce(kt, value=i.to_bytes(8, "big") * (SIZE // 8), key=str(i).encode(), partition=0)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(60) == 0
        link(reg, src, dst)
        with Gateways(reg, "newyork", tmp_path) as gws:
            gws.start()
            wait_until(
                lambda: same_ends(bs["sanfrancisco"], sp(src), bs["newyork"], sp(dst), {"t": 1}),
                120,
                f"{dst} to hold the {RECORDS} records of {src}",
            )
        dkt = kafka_topic_name(sp(dst), "t")
        assert _tail(bs["newyork"], dkt, RECORDS, 200) == _tail(bs["sanfrancisco"], kt, RECORDS, 200)
