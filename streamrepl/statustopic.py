"""The status topic: what gateways write into their destination cluster, and how it is read.

Gateways write one record per replica partition (its state, `unit|...`) and one per gateway (itself: its slots, the
units it holds, `gateway|...`) to the compacted topic `__streamrepl_status` of the destination cluster; the gateway
list of `cluster gateway set` (`config|gateways`) and the brokers' probed traits (`traits|brokers`) live there too.
Readers keep the latest record per key. Writes go through this module (`put`: one record, waited for; `send`: a
gateway's report through its own producer), and so do reads (`read`), but for the gateway list's follower
(replication/allowlist.py), which stays at the end of partition 0 to learn of a change at once. Kept apart from status.py
(`replica list`) so that the stream and topic operations can wait for gateways without an import cycle.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, cast

from . import kafka
from .registry import Cluster

STATUS_TOPIC = "__streamrepl_status"
#: A gateway reports itself every few seconds (replication/reports.py); one silent for longer is taken for gone.
LIVE_SECONDS = 15.0
#: How long a delete waits for the gateways to take a topic out of their plans (they re-plan within a second).
RELEASE_TIMEOUT = 20.0


def unit_key(replica: str, upstream: str, topic: str, partition: int) -> str:
    return f"unit|{replica}|{upstream}|{topic}|{partition}"


def gateway_key(gateway_id: str) -> str:
    return f"gateway|{gateway_id}"


def ensure_topic(cluster: Cluster) -> None:
    if STATUS_TOPIC not in kafka.topics(cluster):
        kafka.create_compacted_topic(cluster, STATUS_TOPIC)


def put(cluster: Cluster, key: str, value: bytes | None, what: str) -> None:
    """Write one record (None: a tombstone) and wait until the broker has it; `what` names the write in the error
    raised when it could not be written."""
    put_all(cluster, [(key, value)], what)


def put_all(cluster: Cluster, records: list[tuple[str, bytes | None]], what: str) -> None:
    """`put` for several records, through one producer."""
    ensure_topic(cluster)
    p = kafka.producer(
        cluster,
        **{"linger.ms": 0, "enable.idempotence": False, "message.timeout.ms": int(kafka.REQUEST_TIMEOUT * 1000)},
    )
    errors: list[kafka.KafkaError] = []
    done: list[bool] = []

    def delivered(err: kafka.KafkaError | None, _: Any) -> None:
        if err is not None:
            errors.append(err)
        done.append(True)

    # Partition 0 always: a reader of one key (the gateway list's follower) reads only that partition.
    for key, value in records:
        p.produce(STATUS_TOPIC, key=key.encode(), value=value, partition=0, on_delivery=delivered)
    p.flush(kafka.REQUEST_TIMEOUT + 2)
    if errors or len(done) < len(records):
        raise kafka.unreachable(cluster, what)


def send(producer: kafka.Producer, key: str, body: dict[str, Any]) -> None:
    """Queue a gateway's report on the gateway's own producer (delivered with its writes; not waited for)."""
    # Partition 0, as put(): the readers read only that one, whatever partitions a topic made by mistake has.
    producer.produce(STATUS_TOPIC, key=key.encode(), value=json.dumps(body).encode(), partition=0)


def read(cluster: Cluster, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Latest report per key (optionally only keys starting with `prefix`)."""
    out: dict[str, dict[str, Any]] = {}
    if STATUS_TOPIC not in kafka.topics(cluster):
        return out
    c = kafka.consumer(cluster)
    try:
        for m in kafka.read_partition(c, kafka.TopicPartition(STATUS_TOPIC, 0, 0), batch=5000, wait=0.05):
            key = (m.key() or b"").decode()
            if not key.startswith(prefix):
                continue
            if m.value() is None:
                out.pop(key, None)
            else:
                out[key] = json.loads(cast(bytes, m.value()))
    except TimeoutError:
        pass  # a status topic too slow to read shows the reports read so far
    finally:
        c.close()
    return out


def is_live(report: dict[str, Any], now_ms: float | None = None) -> bool:
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    return not report.get("stopped") and now_ms - report.get("updated", 0) <= LIVE_SECONDS * 1000


def no_gateway_error(cluster: Cluster, gateways: dict[str, dict[str, Any]]) -> str:
    """Why nothing moves into `cluster`'s replicas when no gateway of it is alive, and since when; "" if one is.
    `gateways`: the cluster's gateway reports (`read(cluster, "gateway|")`)."""
    reports = list(gateways.values())
    if any(is_live(r) for r in reports):
        return ""
    start = f"start one with 'streamrepl gateway start -cluster {cluster.name}'"
    if not reports:
        return f"no gateway has ever run for cluster {cluster.name}, so nothing is replicated into it; {start}"
    last = max(reports, key=lambda r: r.get("updated", 0))
    when = datetime.fromtimestamp(last.get("updated", 0) / 1000, tz=UTC).isoformat(timespec="seconds")
    how = "stopped" if last.get("stopped") else "last reported"
    return f"no gateway is running for cluster {cluster.name} (gateway {last.get('gateway')} {how} at {when}); {start}"


def live_ids(gateways: dict[str, dict[str, Any]], now_ms: float) -> set[str]:
    """The ids of the gateways whose reports (`read(cluster, "gateway|")`) are live at `now_ms`."""
    return {str(r.get("gateway")) for r in gateways.values() if is_live(r, now_ms)}


def live_held(gateways: dict[str, dict[str, Any]], now_ms: float) -> set[str]:
    """The units (`/cluster/stream:topic[p]`) that a live gateway says it holds."""
    return {u for r in gateways.values() if is_live(r, now_ms) for u in r.get("units", [])}


def held_units(cluster: Cluster, prefixes: list[str]) -> list[str]:
    """The units (`/cluster/stream:topic[p]`) starting with one of `prefixes` that a live gateway of `cluster` holds."""
    held = live_held(read(cluster, "gateway|"), time.time() * 1000)
    return sorted(u for u in held if any(u.startswith(p) for p in prefixes))


def wait_released(holders: dict[str, tuple[Cluster, list[str]]], timeout: float = RELEASE_TIMEOUT) -> list[str]:
    """Wait until no live gateway holds a unit under the prefixes given per cluster; what is still held at the
    deadline (a gateway frozen or too slow to re-plan) is returned."""
    deadline = time.monotonic() + timeout
    while True:
        held = [u for cluster, prefixes in holders.values() for u in held_units(cluster, prefixes)]
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.3)


def unheld(gateways: dict[str, dict[str, Any]], units: list[str]) -> list[str]:
    """The units of `units` (`/cluster/stream:topic[p]`, replication.links.Unit.key) that no live gateway holds.
    `gateways`: the cluster's gateway reports."""
    now_ms = time.time() * 1000
    held = {u for r in gateways.values() if is_live(r, now_ms) for u in r.get("units", [])}
    return [u for u in units if u not in held]


def stalled_error(
    cluster: Cluster,
    gateways: dict[str, dict[str, Any]],
    unit_reports: dict[str, dict[str, Any]],
    wanted: set[tuple[str, int]],
) -> str:
    """The replica partitions (of `wanted`, (topic, partition)) whose last report comes from a gateway that is no longer
    live, so that nobody applies them, held by whom and since when; "" when none. A broker that expires dead members
    hands them to another gateway within a session, whose report then replaces the dead one's; one whose coordinator
    keeps dead members (noida-db) never does. `gateways`: the cluster's gateway reports."""
    live = live_ids(gateways, time.time() * 1000)
    held: dict[str, list[str]] = {}
    for key, rep in unit_reports.items():
        _, topic, partition = key.rsplit("|", 2)  # unit|<replica>|<upstream>|<topic>|<partition>
        gateway = rep.get("gateway")
        if (topic, int(partition)) in wanted and gateway and gateway not in live and rep.get("state") != "error":
            held.setdefault(str(gateway), []).append(f"{topic}[{partition}]")
    if not held:
        return ""
    gateway, parts = sorted(held.items())[0]
    last = gateways.get(gateway_key(gateway), {})
    when = datetime.fromtimestamp(last.get("updated", 0) / 1000, tz=UTC).isoformat(timespec="seconds")
    return (
        f"partitions {', '.join(sorted(parts))} are held by gateway {gateway}, which stopped reporting at {when}, and"
        f" no live gateway has taken them over: nothing is replicated into them (see docs/brokers.md for brokers"
        f" that never expire a dead member); start that gateway again with"
        f" 'streamrepl gateway start -cluster {cluster.name} -id {gateway}'"
    )


def unit_of(key: str) -> str:
    """The unit (`/cluster/stream:topic[p]`) a unit report's key (unit_key) is about."""
    head, topic, partition = key.rsplit("|", 2)  # unit|<replica>|<upstream>|<topic>|<partition>
    return f"{head.split('|')[1]}:{topic}[{partition}]"


def unheld_units(
    gateways: dict[str, dict[str, Any]], unit_reports: dict[str, dict[str, Any]], wanted: set[str], now_ms: float
) -> set[str]:
    """The units of `wanted` that no live gateway holds, so that nothing is replicated into them: their gateway
    stopped reporting (the test of stalled_error: not live) and nobody took them over, or their slot is assigned to
    no gateway at all. Units stopped on an error are left out (their reports say so: `replica list`).
    `gateways`, `unit_reports`: the reports read (`gateway|`, `unit|`)."""
    errored = {unit_of(k) for k, r in unit_reports.items() if r.get("state") == "error"}
    return wanted - live_held(gateways, now_ms) - errored
