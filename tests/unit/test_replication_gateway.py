"""The Gateway composing its pieces, on fake clients and given tuning: no broker, no environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.mover import DST, SRC, FakeConsumer, FakeProducer, link

from streamrepl.paths import kafka_topic_name
from streamrepl.registry import Cluster, Registry
from streamrepl.replication.gateway import Gateway
from streamrepl.replication.links import Plan, Unit
from streamrepl.replication.membership import slot_of
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
