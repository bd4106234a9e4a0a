"""`gateway start -workers 2` end to end: one command, two gateway processes sharing the slots; a worker killed
with -9 is started again under its id and the replica still equals the source record by record. The
brokers are the module's own: on the shared clusters the workers' first join hung past a minute in a CI run
(2026-11-24), behind members earlier tests left in the slot group (test_gateway_watch's in-process gateway leaves
with a LeaveGroup, which Tansu mishandles during a rebalance: see Gateway.shutdown). One stream of 4
partitions; the CLI runs in this process (each command as its own process cost a second or so)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import FAST_GROUP
from support.cli import run_cli
from support.clusters import registered_clusters
from support.streams import Gateways, assert_identical, produce, sp, wait_until

from streamrepl.local import EphemeralClusters

#: short sessions: on Tansu, which does not honour static membership, the killed worker's old member holds the
#: rebalance until its session expires
SESSION_MS = FAST_GROUP["session.timeout.ms"]
FAST = {"STREAMREPL_GATEWAY_SESSION_MS": str(SESSION_MS), "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": str(SESSION_MS // 2)}


pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with registered_clusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


def cli(*args: str) -> list[dict[str, Any]]:
    run = run_cli(*args, "-json")
    assert run.code == 0, run
    return run.data()


def test_two_workers_share_the_partitions_and_a_killed_one_comes_back(ec: EphemeralClusters, tmp_path: Path) -> None:
    name = f"wk{uuid.uuid4().hex[:8]}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", "4")
    cli("stream", "topic", "create", "-path", src, "-topic", "t")
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "replica", "add", "-path", src, "-replica", dst)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    src_bs, dst_bs = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    produce(src_bs, sp(src), "t", 2000, 4)
    gw = f"{name}-gw"
    workers = [f"{gw}.w1", f"{gw}.w2"]
    log = tmp_path / f"{gw}.log"

    def caught_up() -> bool:
        return all(r["isUptodate"] for r in cli("stream", "replica", "list", "-path", src))

    def shared_evenly() -> dict[str, dict[str, Any]] | None:
        rows = {r["gateway"]: r for r in cli("cluster", "gateway", "list", "-dstcluster", "newyork")}
        mine = {
            w: [k for k in str(rows[w]["replicates"]).split() if k.startswith(f"{dst}:")] for w in rows if w in workers
        }
        return rows if sorted(mine) == workers and all(len(keys) == 2 for keys in mine.values()) else None

    with Gateways(ec.registry_path, "newyork", tmp_path, env=FAST) as gws:
        gws.start(gw, "-workers", "2")
        wait_until(caught_up, 60, "the replica to catch up")
        before = wait_until(shared_evenly, 60, "each worker to apply 2 of the 4 partitions")
        assert all(before[w].get("parent") == gw for w in workers), before

        os.kill(before[workers[0]]["pid"], signal.SIGKILL)
        produce(src_bs, sp(src), "t", 2000, 4, start=2000)
        wait_until(
            lambda: f"worker {workers[0]} died (killed by SIGKILL)" in log.read_text(), 30, "the supervisor to say so"
        )
        after = wait_until(
            lambda: (rows := shared_evenly()) and rows[workers[0]]["pid"] != before[workers[0]]["pid"] and rows,
            60,
            f"{workers[0]} to be back under its id, in a new process",
        )
        assert after[workers[1]]["pid"] == before[workers[1]]["pid"]  # the other worker ran on
        wait_until(caught_up, 60, "the replica to catch up after the kill")

        supervisor = gws.procs.pop(gw)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0  # both workers drained and stopped cleanly
    assert "Traceback" not in log.read_text()
    src_uuid = cli("stream", "info", "-path", src)[0]["uuid"]
    assert assert_identical(src_bs, sp(src), src_uuid, dst_bs, sp(dst), {"t": 4}) == 4000
