"""The held EndTxn against real brokers: a confluent-kafka transactional producer writing through `proxy start` to a
stream with a synchronous replica finds, when its commit_transaction returns, the transaction's records in the
replica (read right after each commit, one gateway running). noida-db brokers of the module's own: transactions
as Apache Kafka has them (markers taking offsets). The hold itself is unit-tested in tests/unit/test_proxy_end_txn.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.metrics import sample, scrape
from support.proxy import running_proxy
from support.streams import Gateways, synchronous_pair

from streamrepl import kafka, registry, streams
from streamrepl.kafka import TopicPartition
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name

pytestmark = pytest.mark.noida

TRANSACTIONS = 10
RECORDS = 3  # per transaction


@pytest.fixture(scope="module")
def ec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EphemeralClusters]:
    with EphemeralClusters(
        ["sanfrancisco", "newyork"], state_dir=tmp_path_factory.mktemp("txn-state"), broker="noida"
    ) as ec:
        yield ec


def test_a_commit_through_the_proxy_returns_once_the_replica_holds_the_transaction(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    regfile = tmp_path / "clusters.yaml"  # the registry a user writes: bootstrap.servers only
    clusters = {name: {"bootstrap.servers": b.bootstrap} for name, b in ec.brokers.items()}
    regfile.write_text(yaml.safe_dump({"default": "sanfrancisco", "clusters": clusters}))
    reg = registry.load(str(regfile))
    sf, ny = synchronous_pair(reg, "pxtxn")
    source, replica = streams.resolve(reg, sf).path, streams.resolve(reg, ny).path
    source_topic = kafka_topic_name(source, "orders")
    tp = TopicPartition(kafka_topic_name(replica, "orders"), 0)

    with (
        Gateways(regfile, "newyork", tmp_path) as gateways,
        running_proxy("sanfrancisco", "-metricsport", "0", registry=str(regfile), log=tmp_path / "proxy.log") as proxy,
    ):
        gateways.start()
        readers = [kafka.consumer(reg.get("newyork"))]

        def replica_end() -> int:
            """The replica's high watermark, one request (noida-db's is exact): no time for the gateway to catch up
            with a commit that did not wait for it."""
            try:
                return kafka.high_mark(readers[-1], tp, timeout=10)
            except Exception:  # noqa: BLE001 - the gateway has not made the replica topic yet
                readers[-1].close()  # librdkafka keeps a topic it was told is absent in its metadata cache
                readers.append(kafka.consumer(reg.get("newyork")))
                return 0

        # Replicating: a record written straight to the source is copied (the first commit need not wait for the
        # gateway's start, which takes longer than -syncstall).
        direct = kafka.producer(reg.get("sanfrancisco"))
        direct.produce(source_topic, b"warm-up", partition=0)
        assert direct.flush(30) == 0
        deadline = time.monotonic() + 120
        while replica_end() < 1:
            assert time.monotonic() < deadline, "the gateway did not copy the warm-up record"
            time.sleep(0.2)

        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "transactional.id": f"tx-{sf.rsplit('/', 1)[1]}",
                "acks": "all",
                "linger.ms": 0,
            }
        )
        producer.init_transactions(60)
        committed: list[tuple[int, int]] = []  # (the transaction's last offset, the replica's end after the commit)
        offsets: list[int] = []
        for t in range(TRANSACTIONS):
            offsets.clear()
            producer.begin_transaction()
            for i in range(RECORDS):
                producer.produce(
                    source_topic,
                    b"t%d-%d" % (t, i),
                    partition=0,
                    on_delivery=lambda e, m: offsets.append(-1 if e else m.offset()),
                )
            producer.commit_transaction(60)
            assert len(offsets) == RECORDS and min(offsets) >= 0, offsets
            committed.append((max(offsets), replica_end()))
        for r in readers:
            r.close()
        assert proxy.metrics_port
        samples = scrape(proxy.metrics_port)
        held = sample(samples, "streamrepl_proxy_end_txn_held_total", cluster="sanfrancisco") or 0
        confirmed = sample(samples, "streamrepl_proxy_held_confirmed_total", cluster="sanfrancisco") or 0

    in_replica = [last for last, end in committed if end > last]
    assert len(in_replica) >= TRANSACTIONS - 1, committed
    assert held == TRANSACTIONS and confirmed >= TRANSACTIONS - 1
