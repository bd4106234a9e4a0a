"""The proxy's held Produce against real brokers: plain producers (confluent-kafka acks=all, kafkajs) writing through
`proxy start` to a stream with a synchronous replica find each acknowledged record in the replica when the
acknowledgement comes (read right after each one, with a gateway running); a stream without a synchronous replica is
not held (its acknowledgements come while no gateway runs); with the gateway stopped the synchronous link falls back
(metrics) and comes back once a gateway runs again. The hold logic itself is unit-tested with a fake clock
(tests/unit/test_proxy_holds.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.metrics import sample, scrape
from support.proxy import RunningProxy, kafkajs, running_proxy
from support.streams import Gateways

from streamrepl import kafka, registry, replicas, stream_ops, streams, topics
from streamrepl.kafka import TopicPartition
from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath, kafka_topic_name

pytestmark = pytest.mark.noida

RECORDS = 100
SYNC_CLIENT_JS = Path(__file__).parents[1] / "support" / "proxy_sync_client.js"


@dataclass
class Pair:
    source: StreamPath
    replica: StreamPath
    topic: str = "orders"

    @property
    def source_topic(self) -> str:
        return kafka_topic_name(self.source, self.topic)

    @property
    def replica_topic(self) -> str:
        return kafka_topic_name(self.replica, self.topic)


def _pair(reg: registry.Registry, synchronous: bool) -> Pair:
    name = f"px{'sync' if synchronous else 'async'}{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    stream_ops.create(reg, sf, {"defaultpartitions": 1})
    stream_ops.create(reg, ny, {"defaultpartitions": 1})
    topics.create(reg, sf, "orders")
    replicas.add(reg, sf, ny, synchronous=synchronous)
    replicas.upstream_add(reg, ny, sf)
    return Pair(streams.resolve(reg, sf).path, streams.resolve(reg, ny).path)


@dataclass
class Setup:
    reg: registry.Registry
    sync: Pair
    plain: Pair
    proxy: RunningProxy
    gateways: Gateways


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    # Brokers of its own: a gateway on the session's shared clusters takes up every stream earlier modules left there
    # (in a full run it had not copied the warm-up record after 120 s).
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        yield from _setup(clusters, tmp_path_factory)


def _setup(clusters: EphemeralClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reg = registry.load(str(clusters.registry_path))
    sync, plain = _pair(reg, True), _pair(reg, False)
    logs = tmp_path_factory.mktemp("proxy-sync")
    with (
        Gateways(clusters.registry_path, "newyork", logs) as gateways,
        running_proxy(
            "sanfrancisco", "-metricsport", "0", registry=str(clusters.registry_path), log=logs / "proxy.log"
        ) as proxy,
    ):
        gateways.start()
        yield Setup(reg, sync, plain, proxy, gateways)


class ReplicaEnd:
    """The replica partition's real end, read from outside (not the proxy's reader)."""

    def __init__(self, reg: registry.Registry, pair: Pair):
        self.cluster = reg.get(pair.replica.cluster)
        self.reader = kafka.consumer(self.cluster)
        self.tp = TopicPartition(pair.replica_topic, 0)

    def __call__(self) -> int:
        return self._read(kafka.true_end)

    def quick(self) -> int:
        """The high watermark alone: one request, so that the gateway has no time to catch up with an acknowledgement
        that did not wait for it. It can under-count on Tansu (the base offset of the last batch + 1), never
        over-count: a record it counts is in the replica."""
        return self._read(kafka.high_mark)

    def _read(self, end: Callable[..., int]) -> int:
        try:
            return end(self.reader, self.tp, timeout=5)
        except Exception:  # noqa: BLE001 - the gateway has not made the replica topic yet
            # A new reader next time: librdkafka keeps a topic it was told is absent in its metadata cache.
            self.reader.close()
            self.reader = kafka.consumer(self.cluster)
            return 0

    def close(self) -> None:
        self.reader.close()


def _wait_replicating(s: Setup, pair: Pair) -> None:
    """Write one record straight to the source (not through the proxy) and wait until the gateway copied it: the
    gateway runs, and the proxy's link did not have to wait for its start."""
    p = kafka.producer(s.reg.get("sanfrancisco"))
    p.produce(pair.source_topic, b"warm-up", partition=0)
    assert p.flush(30) == 0
    end = ReplicaEnd(s.reg, pair)
    try:
        deadline = time.monotonic() + 120
        while end() < 1:
            assert time.monotonic() < deadline, "the gateway did not copy the warm-up record"
            time.sleep(0.2)
    finally:
        end.close()


def _metric(s: Setup, name: str, **labels: str) -> float:
    assert s.proxy.metrics_port
    return sample(scrape(s.proxy.metrics_port), name, cluster="sanfrancisco", **labels) or 0.0


def _link(pair: Pair) -> str:
    return f"{pair.source}->{pair.replica}"


def _replica_list_fallback(s: Setup) -> str:
    (row,) = replicas.list_replicas(s.reg, str(s.sync.source))
    assert row["synchronous"]
    return str(row["syncFallback"])


def test_confluent_kafka_acks_come_once_the_replica_holds_the_records(setup: Setup) -> None:
    from confluent_kafka import Producer

    _wait_replicating(setup, setup.sync)
    end = ReplicaEnd(setup.reg, setup.sync)
    producer = Producer({"bootstrap.servers": setup.proxy.bootstrap, "acks": "all", "linger.ms": 0})
    acked: list[tuple[int, int]] = []  # (offset, the replica's end right after the acknowledgement)
    got: list[int] = []
    try:
        for i in range(RECORDS):
            producer.produce(
                setup.sync.source_topic,
                b"ck%d" % i,
                partition=0,
                on_delivery=lambda err, msg: got.append(-1 if err else msg.offset()),
            )
            assert producer.flush(60) == 0 and len(got) == i + 1 and got[-1] >= 0, got[-3:]
            acked.append((got[-1], end.quick()))
    finally:
        end.close()
    held = [o for o, e in acked if e > o]
    assert len(held) >= 99, [(o, e) for o, e in acked if e <= o]
    assert _metric(setup, "streamrepl_proxy_held_total") >= 99
    assert _metric(setup, "streamrepl_proxy_link_synchronous", link=_link(setup.sync)) == 1


def test_kafkajs_acks_come_once_the_replica_holds_the_records(setup: Setup) -> None:
    prefix = kafkajs()
    _wait_replicating(setup, setup.sync)
    end = ReplicaEnd(setup.reg, setup.sync)
    proc = subprocess.Popen(
        ["node", str(SYNC_CLIENT_JS), setup.proxy.bootstrap, setup.sync.source_topic, str(RECORDS)],
        env={**os.environ, "NODE_PATH": str(prefix / "node_modules"), "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    acked: list[tuple[int, int]] = []
    try:
        for line in proc.stdout:
            ack = json.loads(line)
            if ack.get("done"):
                break
            assert ack["partition"] == 0
            acked.append((ack["offset"], end.quick()))  # read before the next record is sent
            proc.stdin.write("next\n")
            proc.stdin.flush()
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        end.close()
    assert len(acked) == RECORDS
    held = [o for o, e in acked if e > o]
    assert len(held) >= 99, [(o, e) for o, e in acked if e <= o]


def test_a_stream_without_a_synchronous_replica_is_not_held(setup: Setup) -> None:
    from confluent_kafka import Producer

    setup.gateways.stop_all()  # nothing is replicated from here on
    end = ReplicaEnd(setup.reg, setup.plain)
    held_before = _metric(setup, "streamrepl_proxy_held_total")
    producer = Producer({"bootstrap.servers": setup.proxy.bootstrap, "acks": "all", "linger.ms": 0})
    try:
        offsets: list[int] = []
        for i in range(20):
            producer.produce(
                setup.plain.source_topic,
                b"plain%d" % i,
                partition=0,
                on_delivery=lambda e, m: offsets.append(m.offset()),
            )
            assert producer.flush(60) == 0
        assert offsets == list(range(20))
        assert end() == 0  # acknowledged while no gateway ran: not one waited for the replica
    finally:
        end.close()
    assert _metric(setup, "streamrepl_proxy_held_total") == held_before


def test_a_synchronous_stream_falls_back_without_a_gateway_and_comes_back(setup: Setup) -> None:
    from confluent_kafka import Producer

    setup.gateways.stop_all()
    link = _link(setup.sync)
    producer = Producer({"bootstrap.servers": setup.proxy.bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(setup.sync.source_topic, b"while-down", partition=0)
    assert producer.flush(60) == 0  # answered: the link fell back (after -syncstall without progress)
    assert _metric(setup, "streamrepl_proxy_link_synchronous", link=link) == 0
    assert _metric(setup, "streamrepl_proxy_link_fallbacks_total", link=link) >= 1
    deadline = time.monotonic() + 60
    while not (fallback := _replica_list_fallback(setup)):  # the proxy reports it to the status topic
        assert time.monotonic() < deadline, "replica list does not show the fallback"
        time.sleep(0.5)
    assert "asynchronous since" in fallback and "no progress" in fallback, fallback
    producer.produce(setup.sync.source_topic, b"async", partition=0)
    assert producer.flush(60) == 0

    setup.gateways.start()
    deadline = time.monotonic() + 120
    while _metric(setup, "streamrepl_proxy_link_synchronous", link=link) != 1:
        assert time.monotonic() < deadline, "the link did not come back once the gateway ran again"
        time.sleep(0.5)
    assert _metric(setup, "streamrepl_proxy_link_recoveries_total", link=link) >= 1
    while _replica_list_fallback(setup):
        assert time.monotonic() < deadline, "replica list still shows the fallback"
        time.sleep(0.5)
    end = ReplicaEnd(setup.reg, setup.sync)
    try:
        got: list[int] = []
        producer.produce(setup.sync.source_topic, b"back", partition=0, on_delivery=lambda e, m: got.append(m.offset()))
        assert producer.flush(60) == 0
        assert end() > got[0]
    finally:
        end.close()
