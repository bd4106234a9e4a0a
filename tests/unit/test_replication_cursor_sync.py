"""The gateways' cursor sync worker (replication/cursor_sync.py) with a fake replicator: one gateway per link, a failing round retried, the worker started again when it dies. No broker."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from support.streams import wait_until

from streamrepl.replication import cursor_sync as checkpoints
from streamrepl.replication import links


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}


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
