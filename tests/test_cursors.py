"""Cursors against real brokers: cursor list/delete, assign list, and cursor replication."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from support import FAST_GROUP, RECENT_MS, Run, run_proc

from streamrepl import kafka, registry, stream_ops, streams, topics
from streamrepl.cursors import CursorReplicator, operations
from streamrepl.cursors.replicator import sync_committed_offsets
from streamrepl.errors import StreamreplError
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name

pytestmark = pytest.mark.e2e

T0 = RECENT_MS  # recent: noida-db deletes records older than retention.ms (7 days)


@pytest.fixture(scope="module")
def ec(clusters: EphemeralClusters) -> EphemeralClusters:
    return clusters  # the session's shared brokers (tests/conftest.py)


@pytest.fixture(scope="module")
def reg(ec: EphemeralClusters) -> registry.Registry:
    return registry.load(str(ec.registry_path))


def cli(ec: EphemeralClusters, *args: str) -> Run:
    return run_proc(args, env={"STREAMREPL_CLUSTERS": str(ec.registry_path)})


def data(p: Run) -> list[dict[str, Any]]:
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads(p.stdout)
    assert doc["status"] == "OK"
    return doc["data"]  # type: ignore[no-any-return]


def new_stream(reg: registry.Registry, cluster: str, name: str, partitions: int = 2) -> str:
    path = f"/{cluster}/{name}"
    stream_ops.create(reg, path, {"defaultpartitions": partitions})
    topics.create(reg, path, "clicks")
    return path


def kt(reg: registry.Registry, path: str, topic: str = "clicks") -> str:
    return kafka_topic_name(streams.resolve(reg, path).path, topic)


def produce(reg: registry.Registry, path: str, partition: int, n: int, start: int = 0, batched: bool = False) -> None:
    """n records with timestamps T0 + offset*1000; one batch when `batched` (Tansu then under-reports its end)."""
    r = streams.resolve(reg, path)
    p = Producer(kafka.client_config(r.cluster, **{"linger.ms": 200 if batched else 0}))
    for i in range(start, start + n):
        p.produce(kt(reg, path), value=b"v%d" % i, partition=partition, timestamp=T0 + i * 1000)
        if not batched:
            p.flush(10)
    assert p.flush(10) == 0


def commit(reg: registry.Registry, cluster: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = kafka.admin_client(reg.get(cluster))
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(10)
    assert all(tp.error is None for tp in res.topic_partitions)


def committed(reg: registry.Registry, cluster: str, group: str) -> dict[tuple[str, int], int]:
    admin = kafka.admin_client(reg.get(cluster))
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def active_member(reg: registry.Registry, cluster: str, group: str, topic: str, client_id: str) -> Consumer:
    """A consumer that has joined `group` and owns partitions of `topic`."""
    c = Consumer(
        kafka.client_config(
            reg.get(cluster),
            **{
                "group.id": group,
                "client.id": client_id,
                "enable.auto.commit": False,
                **FAST_GROUP,
            },
        )
    )
    assigned: list[Any] = []
    c.subscribe([topic], on_assign=lambda _c, parts: assigned.append(parts))
    deadline = time.monotonic() + 20
    while not assigned and time.monotonic() < deadline:
        c.poll(0.1)
    assert assigned, "the consumer did not join its group"
    return c


def test_cursor_list_counts_lag_from_the_real_end(ec: EphemeralClusters, reg: registry.Registry) -> None:
    path = new_stream(reg, "sanfrancisco", f"cl{uuid.uuid4().hex[:6]}")
    produce(reg, path, 0, 5)
    produce(reg, path, 0, 15, start=5, batched=True)
    produce(reg, path, 1, 3)
    c = kafka.consumer(streams.resolve(reg, path).cluster)
    try:
        _, high = c.get_watermark_offsets(TopicPartition(kt(reg, path), 0), timeout=10, cached=False)
    finally:
        c.close()
    # Tansu reports the base offset of the last batch + 1; the figures below must not believe it.
    assert high <= 20
    commit(reg, "sanfrancisco", "billing", {(kt(reg, path), 0): 5, (kt(reg, path), 1): 3})
    commit(reg, "sanfrancisco", "audit", {(kt(reg, path), 0): 20})

    rows = data(cli(ec, "stream", "cursor", "list", "-path", path, "-json"))
    by = {(r["consumergroup"], r["partitionid"]): r for r in rows}
    assert set(by) == {("billing", 0), ("billing", 1), ("audit", 0)}
    assert by[("billing", 0)] == {
        "consumergroup": "billing",
        "topic": "clicks",
        "partitionid": 0,
        "produceroffset": 19,
        "committedoffset": 5,
        "consumerlagmillis": (19 - 4) * 1000,  # newest record minus the last one consumed (offset 4)
        "lag": 15,
    }
    assert (by[("billing", 1)]["lag"], by[("billing", 1)]["consumerlagmillis"]) == (0, 0)
    assert (by[("audit", 0)]["lag"], by[("audit", 0)]["consumerlagmillis"]) == (0, 0)

    rows = data(cli(ec, "stream", "cursor", "list", "-path", path, "-consumergroup", "billing", "-topic", "clicks",
                    "-partition", "1", "-json"))  # fmt: skip
    assert [(r["consumergroup"], r["partitionid"]) for r in rows] == [("billing", 1)]

    p = cli(ec, "stream", "cursor", "list", "-path", path, "-partition", "0")
    assert p.returncode != 0 and "-partition needs -topic" in p.stderr
    p = cli(ec, "stream", "cursor", "list", "-path", path, "-topic", "nope")
    assert p.returncode != 0 and "topic 'nope' does not exist" in p.stderr

    text = cli(ec, "stream", "cursor", "list", "-path", path, "-consumergroup", "billing")
    lines = text.stdout.splitlines()
    assert lines[0].split("\t") == list(operations.CURSOR_COLUMNS)
    assert lines[1].split("\t") == ["billing", "clicks", "0", "19", "5", "15000", "15"]


def test_cursor_delete_removes_only_the_selected_cursors(ec: EphemeralClusters, reg: registry.Registry) -> None:
    name = f"cd{uuid.uuid4().hex[:6]}"
    path = new_stream(reg, "sanfrancisco", name)
    other = new_stream(reg, "sanfrancisco", name + "x")
    for part in (0, 1):
        produce(reg, path, part, 4)
    produce(reg, other, 0, 4)
    a, b, o = (kt(reg, path), 0), (kt(reg, path), 1), (kt(reg, other), 0)
    commit(reg, "sanfrancisco", "g1", {a: 2, b: 3, o: 1})
    commit(reg, "sanfrancisco", "g2", {a: 4})

    assert cli(ec, "stream", "cursor", "delete", "-path", path, "-topic", "clicks", "-partition", "0",
               "-consumergroup", "g1").returncode == 0  # fmt: skip
    assert committed(reg, "sanfrancisco", "g1") == {b: 3, o: 1}
    assert committed(reg, "sanfrancisco", "g2") == {a: 4}

    assert cli(ec, "stream", "cursor", "delete", "-path", path).returncode == 0
    assert committed(reg, "sanfrancisco", "g1") == {o: 1}  # the other stream's cursor stays
    assert committed(reg, "sanfrancisco", "g2") == {}
    assert data(cli(ec, "stream", "cursor", "list", "-path", path, "-json")) == []

    # A group being consumed is left alone, loudly.
    commit(reg, "sanfrancisco", "busy", {a: 1})
    member = active_member(reg, "sanfrancisco", "busy", a[0], "busy-reader")
    try:
        p = cli(ec, "stream", "cursor", "delete", "-path", path, "-consumergroup", "busy")
        assert p.returncode != 0 and "active members" in p.stderr
        assert committed(reg, "sanfrancisco", "busy") == {a: 1}

        # assign list: the member, with its client id (read from the member id when the broker omits it).
        rows = data(cli(ec, "stream", "assign", "list", "-path", path, "-consumergroup", "busy", "-json"))
        assert rows and all(r["consumergroup"] == "busy" for r in rows)
        assert all(r["clientid"] == "busy-reader" and r["consumerid"].startswith("busy-reader-") for r in rows)
        # Brokers that report assignments name the partitions; Tansu reports none.
        assert all(r["topic"] in ("clicks", None) for r in rows)
        assert {r["partitionid"] for r in rows} in ({0, 1}, {None})
    finally:
        member.close()


def test_cursor_replication_moves_forward_only_and_leaves_active_groups_alone(reg: registry.Registry) -> None:
    name = f"cr{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, "sanfrancisco", name), new_stream(reg, "newyork", name)
    for path in (sf, ny):  # the same records on both sides: offsets line up, as replication keeps them
        produce(reg, path, 0, 20)
        produce(reg, path, 1, 10, batched=True)
    s0, s1 = (kt(reg, sf), 0), (kt(reg, sf), 1)
    d0, d1 = (kt(reg, ny), 0), (kt(reg, ny), 1)
    src, dst = streams.resolve(reg, sf), streams.resolve(reg, ny)

    commit(reg, "sanfrancisco", "app", {s0: 5, s1: 3})
    commit(reg, "sanfrancisco", "streamrepl-gateways-x", {s0: 7})  # streamrepl's own groups never travel
    changed = sync_committed_offsets(src.cluster, dst.cluster, src.path, dst.path, ["clicks"])
    assert sorted((c["group"], c["partition"], c["previous"], c["offset"]) for c in changed) == [
        ("app", 0, -1, 5),
        ("app", 1, -1, 3),
    ]
    assert committed(reg, "newyork", "app") == {d0: 5, d1: 3}
    assert committed(reg, "newyork", "streamrepl-gateways-x") == {}

    with CursorReplicator(src.cluster, dst.cluster, src.path, dst.path) as rep:
        assert rep.run_once() == []  # nothing moved: nothing written
        # Ahead on the replica (the group already moved there): never set back.
        commit(reg, "newyork", "app", {d0: 12})
        commit(reg, "sanfrancisco", "app", {s0: 8})
        assert rep.run_once() == []
        commit(reg, "sanfrancisco", "app", {s0: 2})  # even when the source goes back
        assert rep.run_once() == []
        assert committed(reg, "newyork", "app") == {d0: 12, d1: 3}

        # Never past what the replica holds: the source has records the replica does not have yet.
        produce(reg, sf, 1, 5, start=10, batched=True)
        commit(reg, "sanfrancisco", "app", {s1: 14})
        changed = rep.run_once()
        assert [(c["partition"], c["source"], c["offset"]) for c in changed] == [(1, 14, 10)]
        assert committed(reg, "newyork", "app")[d1] == 10
        produce(reg, ny, 1, 5, start=10, batched=True)  # replication catches up
        assert [(c["partition"], c["offset"]) for c in rep.run_once()] == [(1, 14)]

        # A group that is active on the replica's cluster is not touched.
        commit(reg, "sanfrancisco", "live", {s0: 4})
        member = active_member(reg, "newyork", "live", d0[0], "live-reader")
        try:
            assert rep.run_once() == []
            assert committed(reg, "newyork", "live") == {}
        finally:
            member.close()
        deadline = time.monotonic() + 10
        changed = []
        while not changed and time.monotonic() < deadline:  # once it has left, its cursor follows
            changed = rep.run_once()
            time.sleep(0.2)
        assert [(c["group"], c["offset"]) for c in changed] == [("live", 4)]


class _SlowFuture:
    """A future that completes `after` seconds from now, failing with `error` or giving `value`."""

    def __init__(self, after: float, error: Exception | None = None, value: Any = None):
        self.at, self.error, self.value = time.monotonic() + after, error, value

    def done(self) -> bool:
        return time.monotonic() >= self.at

    def result(self, timeout: float | None = None) -> Any:
        time.sleep(max(0.0, self.at - time.monotonic()))
        if self.error is not None:
            raise self.error
        return self.value


def test_no_admin_request_is_left_pending_when_a_broker_stops_answering() -> None:
    """librdkafka aborts the process (rd_kafka_enq_once_del_source_return) when an admin client is destroyed
    with requests still pending; a gateway's cursor sync did that when one request failed and it started over
    with new clients. Every request must be finished before the error goes up."""
    from confluent_kafka import KafkaError, KafkaException

    cluster = registry.Cluster("c", {"bootstrap.servers": "127.0.0.1:1"})
    down = KafkaException(KafkaError(KafkaError._TRANSPORT))
    futures = {"g1": _SlowFuture(0.0, error=down), "g2": _SlowFuture(0.5, error=down), "g3": _SlowFuture(0.3)}

    class Admin:
        def list_consumer_group_offsets(self, req: list[Any], request_timeout: float) -> dict[str, Any]:
            return {req[0].group_id: futures[req[0].group_id]}

        def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
            return {g: futures[g] for g in groups}

    with pytest.raises(StreamreplError, match="does not answer"):
        kafka.committed_offsets(cluster, Admin(), ["g1", "g2", "g3"])  # type: ignore[arg-type]
    assert all(f.done() for f in futures.values())
    futures.update({"g1": _SlowFuture(0.0, error=down), "g2": _SlowFuture(0.5, error=down), "g3": _SlowFuture(0.3)})
    with pytest.raises(StreamreplError, match="does not answer"):
        kafka.describe_groups(cluster, Admin(), ["g1", "g2", "g3"])  # type: ignore[arg-type]
    assert all(f.done() for f in futures.values())
