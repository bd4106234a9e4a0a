"""Contract point 6 end to end: a real gateway process carries committed consumer-group cursors to the replica.

One replicated stream and one gateway (cursor sync every 0.5 s) for the module; each test uses groups
of its own. The unit test at the end drives `CursorSync` with a fake gateway and a fake replicator.
"""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from support import FAST_GROUP
from support.streams import Gateways, caught_up, cli_json, produce, sp, wait_until
from support.streams import cli_proc as run_cli

from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.replication import cursor_sync as checkpoints
from streamrepl.replication import links

SYNC = "0.5"  # seconds between two cursor sync rounds of the gateway
#: Fast group joins (support.clusters.FAST_GROUP: 2 s sessions on Tansu, the 6 s noida-db allows at least).
FAST = FAST_GROUP
#: Group names of this module's own: the brokers are the session's shared ones, and a group another module
#: committed with there (test_cursors has a "billing" too) would show its cursors here.
_GROUPS = f"cs{uuid.uuid4().hex[:6]}"
BILLING, AUDIT, AUDIT_MARKER = f"billing-{_GROUPS}", f"audit-{_GROUPS}", f"audit-marker-{_GROUPS}"
REPORTING, REPORTING_MARKER = f"reporting-{_GROUPS}", f"reporting-marker-{_GROUPS}"


@dataclass
class Setup:
    registry: Path
    src: str
    dst: str
    src_bs: str
    dst_bs: str
    src_kt: str
    dst_kt: str
    metrics_port: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def setup(clusters: EphemeralClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reg = clusters.registry_path
    name = f"cs{uuid.uuid4().hex[:8]}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    run_cli("stream", "create", "-path", src, "-defaultpartitions", "2", registry=reg)
    run_cli("stream", "topic", "create", "-path", src, "-topic", "clicks", registry=reg)
    run_cli("stream", "create", "-path", dst, "-copymetafrom", src, registry=reg)
    run_cli("stream", "replica", "add", "-path", src, "-replica", dst, registry=reg)
    run_cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=reg)
    s = Setup(
        reg,
        src,
        dst,
        clusters.brokers["sanfrancisco"].bootstrap,
        clusters.brokers["newyork"].bootstrap,
        kafka_topic_name(sp(src), "clicks"),
        kafka_topic_name(sp(dst), "clicks"),
        free_port(),
    )
    produce(s.src_bs, sp(src), "clicks", 100, 2)  # 50 records in each partition
    logdir = tmp_path_factory.mktemp("cursor-sync")
    with Gateways(reg, "newyork", logdir, env={"STREAMREPL_CURSOR_SYNC_SECONDS": SYNC}) as gws:
        gws.start("cursors-gw", "-metricsport", str(s.metrics_port), "-metricsaddr", "127.0.0.1")
        wait_until(lambda: caught_up(reg, src), 60, "the replica to catch up")
        yield s
        gws.stop_all()
    log = (logdir / "cursors-gw.log").read_text()
    assert "Traceback" not in log, log


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(10)
    assert all(tp.error is None for tp in res.topic_partitions)


def on_replica(s: Setup, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Source cursors as the replica's: same partitions and offsets, the replica's Kafka topic."""
    return {(s.dst_kt, p): o for (_, p), o in offsets.items()}


def group_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **FAST,
        }
    )
    c.subscribe([topic])
    return c


def read(c: Consumer, n: int) -> int:
    got = 0
    deadline = time.monotonic() + 20
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(n - got, timeout=0.5) if m.error() is None)
    assert got == n, f"read {got} of {n} records"
    return got


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.mark.e2e
def test_a_groups_committed_offsets_follow_on_the_replica(setup: Setup) -> None:
    s = setup
    c = group_consumer(s.src_bs, BILLING, s.src_kt)
    try:
        read(c, 60)  # part of the topic; more than a partition holds, so both get a cursor
        first = {(tp.topic, tp.partition): tp.offset for tp in c.commit(asynchronous=False)}
        assert first and all(o > 0 for o in first.values())
        wait_until(lambda: committed(s.dst_bs, BILLING) == on_replica(s, first), 10, "the cursors on the replica")
        # The CLI sees it too, as a cursor of the replica stream.
        found = cli_json("stream", "cursor", "list", "-path", s.dst, "-consumergroup", BILLING, registry=s.registry)
        rows = {(r["topic"], r["partitionid"]): r["committedoffset"] for r in found}
        assert rows == {("clicks", p): o for (_, p), o in first.items()}

        read(c, 20)  # commit further: the replica follows
        c.commit(asynchronous=False)
        second = committed(s.src_bs, BILLING)
        assert second != first and set(second) == set(first)
        wait_until(lambda: committed(s.dst_bs, BILLING) == on_replica(s, second), 10, "the new cursors on the replica")
    finally:
        c.close()
    assert metric(s.metrics_port, "streamrepl_gateway_cursor_commits_total") >= len(first) + 1


@pytest.mark.e2e
def test_b_a_cursor_is_never_moved_back(setup: Setup) -> None:
    s = setup
    commit(s.src_bs, AUDIT, {(s.src_kt, 0): 10, (s.src_kt, 1): 10})
    wait_until(lambda: committed(s.dst_bs, AUDIT) == {(s.dst_kt, 0): 10, (s.dst_kt, 1): 10}, 10, "first cursors")
    # The group moved on the replica meanwhile (partition 0 to 40); the source then commits 25 in both.
    commit(s.dst_bs, AUDIT, {(s.dst_kt, 0): 40})
    commit(s.src_bs, AUDIT, {(s.src_kt, 0): 25, (s.src_kt, 1): 25})
    # A group committed after it shows that a sync round has seen the source's commit.
    commit(s.src_bs, AUDIT_MARKER, {(s.src_kt, 0): 1})
    wait_until(lambda: committed(s.dst_bs, AUDIT_MARKER), 10, "a sync round after the commit")
    wait_until(lambda: committed(s.dst_bs, AUDIT).get((s.dst_kt, 1)) == 25, 10, "partition 1 to follow")
    assert committed(s.dst_bs, AUDIT) == {(s.dst_kt, 0): 40, (s.dst_kt, 1): 25}


@pytest.mark.e2e
def test_c_a_group_active_on_the_replica_cluster_is_left_alone(setup: Setup) -> None:
    s = setup
    member = group_consumer(s.dst_bs, REPORTING, s.dst_kt)  # consumes the replica, commits nothing
    try:
        read(member, 10)  # subscribed, assigned and polling
        commit(s.src_bs, REPORTING, {(s.src_kt, 0): 20, (s.src_kt, 1): 30})
        commit(s.src_bs, REPORTING_MARKER, {(s.src_kt, 0): 1})
        wait_until(lambda: committed(s.dst_bs, REPORTING_MARKER), 10, "a sync round after the commit")
        for _ in range(4):  # a few more rounds, the member still polling
            member.poll(0.5)
        assert committed(s.dst_bs, REPORTING) == {}
    finally:
        member.close()
    # Once the group has no member on the replica's cluster, its cursors follow.
    want = {(s.dst_kt, 0): 20, (s.dst_kt, 1): 30}
    wait_until(lambda: committed(s.dst_bs, REPORTING) == want, 15, "the cursors after the member left")


# -- the thread, with a fake gateway -------------------------------------------------------------------
class FakeReplicator:
    calls: list[str] = []
    closed: list[str] = []
    fail_next: set[str] = set()

    def __init__(self, src_cluster: Any, dst_cluster: Any, src_stream: Any, dst_stream: Any) -> None:
        self.src_cluster, self.dst_stream, self.name = src_cluster, dst_stream, f"{src_stream}->{dst_stream}"

    def run_once(self, source: Any = None) -> list[dict[str, Any]]:
        FakeReplicator.calls.append(self.name)
        if self.name in FakeReplicator.fail_next:
            FakeReplicator.fail_next.discard(self.name)
            raise RuntimeError("the broker said no\nsecond line")
        return [{"group": "g", "topic": "t", "partition": 0, "offset": 5, "source": 5, "previous": -1}]

    def close(self) -> None:
        FakeReplicator.closed.append(self.name)


def test_each_link_is_synced_by_one_gateway_and_a_failing_round_is_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from streamrepl.paths import StreamPath
    from streamrepl.replication.membership import SLOTS

    monkeypatch.setattr(checkpoints, "CursorReplicator", FakeReplicator)
    FakeReplicator.calls, FakeReplicator.closed, FakeReplicator.fail_next = [], [], set()
    ls = [
        links.Link(StreamPath("a", f"/s{i}"), None, "u", StreamPath("b", f"/s{i}"), "v", False, "lz4", 0)  # type: ignore[arg-type]
        for i in range(12)
    ]
    plan = links.Plan(ls, {}, {}, [])

    class Gw:
        """What a gateway gives its cursor sync: the links of its plan in its slots."""

        def __init__(self, slots: set[int]) -> None:
            self.plan: links.Plan | None = plan
            self.slots = slots

        def sync(self, period: float | None = None) -> checkpoints.CursorSync:
            return checkpoints.CursorSync(None, lambda: checkpoints.owned_links(self.plan, self.slots), period)  # type: ignore[arg-type]

    half = set(range(0, SLOTS, 2))
    gw_one, gw_other = Gw(half), Gw(set(range(SLOTS)) - half)
    one, other = gw_one.sync(), gw_other.sync()
    mine, theirs = {x.name for x in one.owned()}, {x.name for x in other.owned()}
    assert not mine & theirs and mine | theirs == {x.name for x in ls}

    # A failing link is logged on one line with its name and retried next round; the others go on.
    bad = sorted(mine)[0]
    FakeReplicator.fail_next = {bad}
    with caplog.at_level(logging.INFO, logger="streamrepl.cursors"):
        assert one.run_once() == len(mine) - 1
        assert (one.errors, one.committed) == (1, len(mine) - 1)
        assert one.run_once() == len(mine)
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed == [f"cursor sync of {bad} failed: the broker said no; retrying every 2 s"]
    assert FakeReplicator.calls.count(bad) == 2

    # A link no longer owned (the slots moved) has its replicator closed.
    gw_one.slots = set()
    assert one.run_once() == 0
    assert sorted(set(FakeReplicator.closed)) == sorted(mine)

    # The thread: runs rounds, survives a plan that cannot be read, and stops promptly.
    gw_t = Gw(half)
    t = gw_t.sync(period=0.05)
    gw_t.plan = None
    t.start()
    time.sleep(0.2)
    gw_t.plan = plan
    wait_until(lambda: t.committed > 0, 5, "a round", interval=0.05)
    t.stop()
    assert t._thread is None


def test_the_gateways_cursor_sync_worker_is_started_again_when_it_dies() -> None:
    """The gateway runs the cursor sync in a child process, so that librdkafka aborting it (seen with frozen
    brokers) costs a round of cursor sync, not the gateway; a dead worker is replaced at the next round."""
    from streamrepl.registry import Cluster

    sync = checkpoints.CursorSyncProcess(Cluster("b", {"bootstrap.servers": "127.0.0.1:1"}), list, period=0.1)
    try:
        assert sync.run_once(timeout=30) == 0 and sync.errors == 0
        first = sync._proc
        first.kill()
        first.wait()
        assert sync.run_once(timeout=30) == 0
        assert sync.restarts == 1 and sync._proc is not first and sync._proc.poll() is None
        assert sync.errors == 0
    finally:
        sync.stop()
    assert sync._proc is not None and sync._proc.wait(10) is not None
