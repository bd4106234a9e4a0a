"""A proxy stopped under load loses no acknowledged record: a plain confluent-kafka producer (acks=all, idempotence on)
writes through `proxy start` as fast as it can while the proxy is SIGKILLed (or SIGTERMed: a drain, exit 0) and
started again on the same ports; the producer reconnects by itself. Every record it got a delivery report for is in
the topic, exactly once, read straight from the broker with a plain consumer; and so is every other record it sent
(idempotence: a request whose answer the kill lost is sent again and not written twice)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from support.proxy import RunningProxy, free_port_pair, running_proxy

from streamrepl.kafka.reading import true_ends
from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida

PARTITIONS = 2
#: records acknowledged before the stop, and again after the start
ACKED_EACH_SIDE = 2000


class Load:
    """A producer writing keys 0, 1, 2... on a thread of its own until stopped; what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self.sent = 0
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="load")

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append(int(msg.key()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self._stop.is_set():
            key = str(self.sent).encode()
            try:
                self.producer.produce(self.topic, key, key=key, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.sent += 1
            if self.sent % 100 == 0:
                self.producer.poll(0)
                time.sleep(0.002)  # a steady load, not a queue of a million records

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait_acked(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert not self.errors, self.errors[:3]
            assert time.monotonic() < deadline, f"{len(self.acked)} of {count} records acknowledged"
            time.sleep(0.05)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(120) == 0, "records still unacknowledged"


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a dropped client ends its calls
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def _read_all(bootstrap: str, topic: str) -> Counter[int]:
    """Every record of the topic, read straight from the broker: how many times each key is there."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}", "enable.auto.commit": False})
    try:
        # The real ends (Tansu's high watermark is its last batch's base offset + 1).
        real = true_ends(consumer, [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        ends = {p: real[(topic, p)] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        keys: Counter[int] = Counter()
        at = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 60
        while any(at[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {at} of {ends}"
            for m in consumer.consume(1000, timeout=1):
                assert m.error() is None, m.error()
                keys[int(m.key())] += 1
                at[m.partition()] = m.offset() + 1
        return keys
    finally:
        consumer.close()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _worker_of(proxy: RunningProxy, not_this: int = 0, timeout: float = 60) -> int:
    """The pid of the supervised proxy's worker process (another than `not_this`: the one started again)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [c for c in _children(proxy.proc.pid) if c != not_this]
        if found:
            return found[0]
        assert proxy.proc.poll() is None, f"the supervisor exited ({proxy.proc.returncode})"
        assert time.monotonic() < deadline, "the supervisor started no worker"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "worker SIGKILL"])
def test_a_proxy_stopped_under_load_loses_no_acknowledged_record(
    how: str, clusters: EphemeralClusters, tmp_path: Path
) -> None:
    """SIGKILL and SIGTERM: an unsupervised proxy (-supervise false, as under systemd's Restart=always), started
    again by the test. "worker SIGKILL": `proxy start`'s worker process SIGKILLed, started again by its supervisor
    on the same ports, and the supervisor's SIGTERM drains it (exit 0)."""
    direct = clusters.brokers["sanfrancisco"].bootstrap
    topic = f"proxy-restart-{uuid.uuid4().hex[:8]}"
    _create_topic(direct, topic)
    listen = f"127.0.0.1:{free_port_pair()}"
    log = tmp_path / "proxy.log"
    registry = str(clusters.registry_path)

    with contextlib.ExitStack() as stack:
        supervised = how.startswith("worker")
        args = () if supervised else ("-supervise", "false")

        def start() -> RunningProxy:
            return stack.enter_context(running_proxy("sanfrancisco", *args, registry=registry, log=log, listen=listen))

        first = last = start()
        worker = _worker_of(first) if supervised else 0
        load = stack.enter_context(Load(first.bootstrap, topic))
        load.wait_acked(ACKED_EACH_SIDE)
        if supervised:
            os.kill(worker, signal.SIGKILL)
            assert _worker_of(first, not_this=worker) != worker  # started again by the supervisor
        elif how == "SIGKILL":
            assert first.kill() == -signal.SIGKILL
        else:
            assert first.stop() == 0, log.read_text()[-2000:]  # drained: every response already due was delivered
        acked_before = len(load.acked)
        if not supervised:
            last = start()  # on the same ports: the producer reconnects by itself
        load.wait_acked(acked_before + ACKED_EACH_SIDE)
        load.finish()
        assert last.stop() == 0, log.read_text()[-2000:]
        if supervised:
            assert "worker" in log.read_text() and "died (killed by SIGKILL)" in log.read_text()
    assert not load.errors, load.errors[:3]
    assert len(set(load.acked)) == len(load.acked) == load.sent

    there = _read_all(direct, topic)
    missing = [k for k in load.acked if there[k] == 0]
    twice = {k: n for k, n in there.items() if n > 1}
    assert not missing, f"{len(missing)} acknowledged records missing: {missing[:10]}"
    assert not twice, f"{len(twice)} records written more than once: {list(twice.items())[:10]}"
    assert set(there) == set(range(load.sent))
