"""The held Produce's fallback and its return under an added delay: the destination cluster is reached through a delay
line (tests/support/delayline.py: every byte to and from its broker held a while, as on a slow WAN), by the gateway
that writes the replica and by the proxy that reads the replica's ends. With a small delay a plain producer's sends
through the proxy are held and confirmed (the replica holds them at the acknowledgement); with the delay raised so
that a replication round takes longer than -synctimeout, the link falls back to asynchronous (the proxy's metrics,
`replica list`'s syncFallback column); with the delay lowered again it returns to synchronous. Only states are asserted:
the deadlines below only keep a broken run from hanging."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.behind import tansu_behind
from support.delayline import DelayLine
from support.metrics import sample, scrape
from support.proxy import running_proxy
from support.streams import Gateways, synchronous_pair

from streamrepl import kafka, registry, streams
from streamrepl.kafka import TopicPartition
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.status import proxy_fallback

pytestmark = pytest.mark.noida

#: one-way delays to the destination's broker: a replication round is a few round trips (the gateway's write, the
#: proxy's read of the replica's end), so LARGE makes it take well over SYNC_TIMEOUT, and SMALL well under
SMALL = 0.005
LARGE = 1.0
SYNC_TIMEOUT = 0.5


def _wait(what: str, done: Callable[[], object], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not seen: {what}"
        time.sleep(0.25)


def test_the_link_falls_back_when_the_delay_grows_and_returns_when_it_shrinks(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    with (
        EphemeralClusters(["sanfrancisco"], state_dir=tmp_path / "state") as ec,
        tansu_behind("newyork", tmp_path, lambda port: DelayLine(port, SMALL)) as (newyork, line),
    ):
        regfile = tmp_path / "clusters.yaml"  # the registry a user writes: bootstrap.servers only
        clusters = {"sanfrancisco": {"bootstrap.servers": ec.brokers["sanfrancisco"].bootstrap}}
        clusters["newyork"] = {"bootstrap.servers": newyork}
        regfile.write_text(yaml.safe_dump({"default": "sanfrancisco", "clusters": clusters}))
        reg = registry.load(str(regfile))
        sf, ny = synchronous_pair(reg, "pxdelay")
        source, replica = streams.resolve(reg, sf).path, streams.resolve(reg, ny).path
        source_topic, replica_topic = kafka_topic_name(source, "orders"), kafka_topic_name(replica, "orders")
        link = f"{source}->{replica}"

        with (
            Gateways(regfile, "newyork", tmp_path) as gateways,
            running_proxy(
                "sanfrancisco",
                "-metricsport",
                "0",
                "-synctimeout",
                str(SYNC_TIMEOUT),
                "-syncstall",
                "60",  # the replica keeps making progress, only late: the fallback is the latency limit's
                registry=str(regfile),
                log=tmp_path / "proxy.log",
            ) as proxy,
        ):
            gateways.start()
            readers = [kafka.consumer(reg.get("newyork"))]
            tp = TopicPartition(replica_topic, 0)

            def replica_end() -> int:
                try:
                    return kafka.true_end(readers[-1], tp, timeout=10)
                except Exception:  # noqa: BLE001 - the gateway has not made the replica topic yet
                    # A new reader next time: librdkafka keeps a topic it was told is absent in its metadata cache.
                    readers[-1].close()
                    readers.append(kafka.consumer(reg.get("newyork")))
                    return 0

            # Replicating: a record written straight to the source is copied.
            direct = kafka.producer(reg.get("sanfrancisco"))
            direct.produce(source_topic, b"warm-up", partition=0)
            assert direct.flush(30) == 0
            _wait("the gateway copy the warm-up record", lambda: replica_end() >= 1, 120)

            def metric(name: str, **labels: str) -> float:
                assert proxy.metrics_port
                return sample(scrape(proxy.metrics_port), name, cluster="sanfrancisco", **labels) or 0.0

            def fallback_shown() -> str:
                # replica list's syncFallback column, as it computes it (status.link_row): the rest of the row reads
                # the replica's cluster, many round trips through the delay line (test_proxy_sync runs replica list
                # itself)
                return proxy_fallback(reg.get("sanfrancisco"), str(source), str(replica))

            producer = Producer({"bootstrap.servers": proxy.bootstrap, "acks": "all", "linger.ms": 0})

            def send(value: bytes) -> int:
                got: list[int] = []
                producer.produce(source_topic, value, partition=0, on_delivery=lambda e, m: got.append(m.offset()))
                assert producer.flush(60) == 0 and got and got[0] >= 0
                return got[0]

            # A small delay: held, and confirmed.
            confirmed, unconfirmed = (metric("streamrepl_proxy_held_confirmed_total"), _unconfirmed(metric))
            for i in range(5):
                offset = send(b"small%d" % i)
            assert metric("streamrepl_proxy_held_confirmed_total") == confirmed + 5
            assert _unconfirmed(metric) == unconfirmed
            assert replica_end() > offset
            assert metric("streamrepl_proxy_link_synchronous", link=link) == 1

            # The delay raised: a replication round takes longer than -synctimeout, the link falls back.
            line.delay = LARGE
            send(b"large")
            _wait("the link fall back", lambda: metric("streamrepl_proxy_link_synchronous", link=link) == 0)
            assert metric("streamrepl_proxy_link_fallbacks_total", link=link) >= 1
            assert _unconfirmed(metric) >= unconfirmed + 1
            _wait("replica list show the fallback", fallback_shown)
            shown = fallback_shown()
            assert "asynchronous since" in shown and "waited more than" in shown, shown

            # The delay lowered: the replica catches up and the link is synchronous again.
            line.delay = SMALL
            _wait("the link return", lambda: metric("streamrepl_proxy_link_synchronous", link=link) == 1)
            assert metric("streamrepl_proxy_link_recoveries_total", link=link) >= 1
            _wait("replica list drop the fallback", lambda: not fallback_shown())
            confirmed = metric("streamrepl_proxy_held_confirmed_total")
            offset = send(b"back")
            assert metric("streamrepl_proxy_held_confirmed_total") == confirmed + 1
            assert replica_end() > offset
            readers[-1].close()


def _unconfirmed(metric: Callable[..., float]) -> float:
    return metric("streamrepl_proxy_held_unconfirmed_total")
