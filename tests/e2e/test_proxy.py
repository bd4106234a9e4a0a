"""`streamrepl proxy start` in front of a real broker: the three clients (confluent-kafka, kafka-python, kafkajs)
produce, consume in a group and administer a cluster through it, every broker they are told of being the proxy's;
its metrics; SIGTERM; bad input. The wire format, rewriting and draining against fake brokers are in
tests/unit/test_proxy_server.py and test_proxy_wire.py."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import FAST_GROUP, one_error_line, run_proc
from support.metrics import sample, scrape
from support.proxy import RunningProxy, run_kafkajs, running_proxy

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida

RECORDS = 20


@pytest.fixture(scope="module")
def proxy(clusters: EphemeralClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with running_proxy("sanfrancisco", "-metricsport", "0", registry=str(clusters.registry_path), log=log) as p:
        yield p


def _direct(clusters: EphemeralClusters) -> str:
    return clusters.brokers["sanfrancisco"].bootstrap


def _topic(stem: str) -> str:
    return f"proxy-{stem}-{uuid.uuid4().hex[:8]}"


def _values() -> list[str]:
    return sorted(f"v{i}" for i in range(RECORDS))


def _assert_names_the_proxy(addresses: list[str], proxy: RunningProxy, direct: str) -> None:
    assert addresses, "no broker named"
    for address in addresses:
        host = address.rsplit(":", 1)[0]
        assert host == proxy.bootstrap.rsplit(":", 1)[0] and address != direct, addresses


def _direct_ends(direct: str, topic: str) -> list[tuple[int, int]]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": direct})
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}
    got = admin.list_offsets(wanted)
    return sorted((tp.partition, f.result(30).offset) for tp, f in got.items())


def test_confluent_kafka_through_the_proxy(proxy: RunningProxy, clusters: EphemeralClusters) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    bs, topic = proxy.bootstrap, _topic("ck")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    metadata = admin.list_topics(timeout=30)
    _assert_names_the_proxy([f"{b.host}:{b.port}" for b in metadata.brokers.values()], proxy, _direct(clusters))
    described = admin.describe_cluster().result(30)
    _assert_names_the_proxy([f"{n.host}:{n.port}" for n in described.nodes], proxy, _direct(clusters))

    failed: list[object] = []
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed

    consumer = Consumer(
        {"bootstrap.servers": bs, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", **FAST_GROUP}
    )
    consumer.subscribe([topic])
    got: list[str] = []
    for _ in range(60):
        for m in consumer.consume(RECORDS, timeout=1):
            assert m.error() is None, m.error()
            got.append(m.value().decode())
        if len(got) >= RECORDS:
            break
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == _values()

    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}
    ends = sorted((tp.partition, f.result(30).offset) for tp, f in admin.list_offsets(wanted).items())
    assert ends == _direct_ends(_direct(clusters), topic)


def test_kafka_python_through_the_proxy(proxy: RunningProxy, clusters: EphemeralClusters) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    bs, topic = proxy.bootstrap, _topic("kp")
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bs, acks="all")
    sent = [producer.send(topic, f"v{i}".encode()) for i in range(RECORDS)]
    for future in sent:
        future.get(30)
    producer.close()

    # kafka-python needs its request timeout above the session timeout, and noida-db a session of at least 6 s.
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bs,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=60_000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    got = []
    for m in consumer:
        got.append(m.value.decode())
        if len(got) >= RECORDS:
            break
    consumer.commit()
    ends = consumer.end_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    brokers = [f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers()]
    consumer.close()
    admin.close()
    assert sorted(got) == _values()
    assert sorted((tp.partition, end) for tp, end in ends.items()) == _direct_ends(_direct(clusters), topic)
    _assert_names_the_proxy(brokers, proxy, _direct(clusters))


def test_kafkajs_through_the_proxy(proxy: RunningProxy, clusters: EphemeralClusters) -> None:
    topic = _topic("js")
    seen = run_kafkajs(proxy.bootstrap, topic, RECORDS, int(FAST_GROUP["session.timeout.ms"]))
    assert seen["consumed"] == _values()
    assert [tuple(o) for o in seen["offsets"]] == _direct_ends(_direct(clusters), topic)
    _assert_names_the_proxy(seen["brokers"], proxy, _direct(clusters))


def test_metrics_count_what_passed(proxy: RunningProxy) -> None:
    """After the clients' tests (or alone: one Metadata request through the proxy is enough)."""
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": proxy.bootstrap}).list_topics(timeout=30)
    assert proxy.metrics_port
    samples = scrape(proxy.metrics_port)
    assert (sample(samples, "streamrepl_proxy_requests_total", cluster="sanfrancisco", api_key="3") or 0) >= 1
    assert (sample(samples, "streamrepl_proxy_rewritten_total", cluster="sanfrancisco") or 0) >= 1
    assert (sample(samples, "streamrepl_proxy_listeners", cluster="sanfrancisco") or 0) >= 2


def test_sigterm_stops_the_proxy_cleanly(clusters: EphemeralClusters, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    log = tmp_path / "proxy.log"
    with running_proxy("sanfrancisco", registry=str(clusters.registry_path), log=log) as p:
        AdminClient({"bootstrap.servers": p.bootstrap}).list_topics(timeout=30)
        assert p.stop() == 0
    assert "stopped" in log.read_text()


def test_bad_listen_address_is_one_line(clusters: EphemeralClusters) -> None:
    r = run_proc(["proxy", "start", "-cluster", "sanfrancisco", "-listen", "nowhere"])
    assert r.code != 0
    assert "-listen 'nowhere' is not HOST:PORT" in one_error_line(r)


def test_port_in_use_is_one_line(clusters: EphemeralClusters) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = run_proc(["proxy", "start", "-cluster", "sanfrancisco", "-listen", f"127.0.0.1:{port}"])
    assert r.code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in one_error_line(r)
