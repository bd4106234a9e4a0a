"""The Gateway composing its pieces, on fake clients and given tuning: no broker, no environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mover import DST, SRC, FakeConsumer, FakeProducer, link

from streamrepl.kafka import brokers
from streamrepl.kafka.probes import BrokerTraits
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import Cluster, Registry
from streamrepl.replication import gateway as gateway_mod
from streamrepl.replication.gateway import Gateway
from streamrepl.replication.links import Plan, Unit
from streamrepl.replication.membership import SLOT_TOPIC, slot_of
from streamrepl.settings import GatewaySettings

TUNING = GatewaySettings(session_ms=7000, message_timeout_ms=3500, linger_ms=5, throttle_rate=50, cursor_sync_seconds=1)


def test_a_gateway_applies_the_partitions_of_its_slots_with_the_tuning_it_was_given() -> None:
    reg = Registry(
        Path("clusters.yaml"), "ny", {n: Cluster(n, {"bootstrap.servers": "127.0.0.1:1"}) for n in ("sf", "ny")}
    )
    producers: list[dict[str, Any]] = []

    def new_producer(cluster: Cluster, **config: Any) -> FakeProducer:
        producers.append(config)
        return FakeProducer()

    gw = Gateway(
        reg,
        "ny",
        "gw1",
        TUNING,
        new_consumer=lambda *a, **kw: FakeConsumer(),
        new_producer=new_producer,
        new_source_consumer=lambda cluster, **_: FakeConsumer(),
    )
    assert producers == [
        {
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 200000,
            "queue.buffering.max.kbytes": 65536,
            "message.timeout.ms": 3500,
            "client.id": "streamrepl-gateway-gw1",
            "error_cb": gw._producer_error,  # a lost destination restarts the writes (Mover.destination_lost)
        }
    ]
    assert gw.group.session_ms == 7000 and gw.mover.throttle_rate == 50

    lk = link()
    units = [Unit(DST, "t", p) for p in range(8)]
    plan = Plan([lk], {u: [(lk, kafka_topic_name(SRC, "t"))] for u in units}, {(DST, "t"): 8}, [])
    mine = {slot_of(units[0]), slot_of(units[1])}
    gw.group.slots = set(mine)
    gw.apply_plan(plan, {kafka_topic_name(DST, "t")})
    owned = {u for u in units if slot_of(u) in mine}
    assert set(gw.table.units) == owned
    assert gw.stats.partitions() == len(owned) and gw.stats.slots() == len(mine)
    assert [x.name for x in gw.stats.links()] == [lk.name]


class _GroupConsumer(FakeConsumer):
    def __init__(self) -> None:
        super().__init__()
        self.subscribed: list[str] = []
        self.closed = False

    def subscribe(self, topics: list[str], **_: Any) -> None:
        self.subscribed = topics

    def close(self) -> None:
        self.closed = True


def test_a_destination_that_came_back_empty_makes_the_gateway_start_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its writes thrown away, its slots dropped with their consumer closed, the internal topics made again, the slots
    joined again by a new consumer, the plan applied again."""
    reg = Registry(
        Path("clusters.yaml"), "ny", {n: Cluster(n, {"bootstrap.servers": "127.0.0.1:1"}) for n in ("sf", "ny")}
    )
    made: list[_GroupConsumer] = []

    def new_consumer(cluster: Cluster, group: str | None = None, **_: Any) -> FakeConsumer:
        if group is None:
            return FakeConsumer()
        made.append(_GroupConsumer())
        return made[-1]

    producers: list[FakeProducer] = []

    def new_producer(cluster: Cluster, **_: Any) -> FakeProducer:
        producers.append(FakeProducer())
        return producers[-1]

    repaired: list[str] = []
    monkeypatch.setattr(gateway_mod, "repair", lambda cluster: repaired.append(cluster.name) or [])
    monkeypatch.setattr(gateway_mod.AllowList, "start", lambda self: None)
    brokers.learn(reg.get("ny"), BrokerTraits(identity="x", static_rejoin=False, probed_at=1))
    gw = Gateway(
        reg,
        "ny",
        "gw1",
        TUNING,
        new_consumer=new_consumer,
        new_producer=new_producer,
        new_source_consumer=lambda cluster, **_: FakeConsumer(),
    )
    gw.group.join()
    lk = link()
    units = [Unit(DST, "t", p) for p in range(8)]
    plan = Plan([lk], {u: [(lk, kafka_topic_name(SRC, "t"))] for u in units}, {(DST, "t"): 8}, [])
    gw.group.slots = {slot_of(u) for u in units}
    gw.apply_plan(plan, {kafka_topic_name(DST, "t")})
    assert gw.table.units
    gw._replan = False

    gw.start_over(f"topic {SLOT_TOPIC} is gone")
    assert not gw.table.units and gw.group.slots == set()
    assert made[0].closed and len(made) == 2 and made[1].subscribed == [SLOT_TOPIC] and not made[1].closed
    assert repaired == ["ny"] and len(producers) == 2 and gw.session.producer is producers[1]
    assert gw._replan and gw.stats.starts_over == 1
