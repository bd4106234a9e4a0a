"""`gateway start` end to end: its supervisor (one worker under the gateway's own id, or `-workers 2`: two gateway
processes sharing the slots); a worker killed with -9 or crashed is started again under its id and the replica
still equals the source record by record. The
brokers are the module's own: on the shared clusters the workers' first join hung past a minute in a CI run
(2026-11-24), behind members earlier tests left in the slot group (test_gateway_watch's in-process gateway leaves
with a LeaveGroup, which Tansu mishandles during a rebalance: see Gateway.shutdown). One stream of 4
partitions; the CLI runs in this process (each command as its own process cost a second or so)."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request
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

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow

#: short sessions: on Tansu, which does not honour static membership, the killed worker's old member holds the
#: rebalance until its session expires
SESSION_MS = FAST_GROUP["session.timeout.ms"]
FAST = {"STREAMREPL_GATEWAY_SESSION_MS": str(SESSION_MS), "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": str(SESSION_MS // 2)}


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_lone_gateway_is_supervised_and_a_worker_killed_or_crashed_comes_back(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    """`gateway start` without -workers: one worker under the gateway's own id; SIGKILL, then SIGSEGV (as a
    librdkafka crash would), and the supervisor starts it again each time, says so in its log, in `cluster gateway
    list` and in the metrics, and the replica equals the source record by record."""
    name = f"sv{uuid.uuid4().hex[:8]}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", "2")
    cli("stream", "topic", "create", "-path", src, "-topic", "t")
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "replica", "add", "-path", src, "-replica", dst)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    src_bs, dst_bs = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    gw = f"{name}-gw"
    log = tmp_path / f"{gw}.log"
    port = free_port()

    def caught_up() -> bool:
        return all(r["isUptodate"] for r in cli("stream", "replica", "list", "-path", src))

    def row() -> dict[str, Any] | None:
        rows = [r for r in cli("cluster", "gateway", "list", "-dstcluster", "newyork") if r["gateway"] == gw]
        return rows[0] if rows and rows[0]["slots"] else None

    def restarts_metric() -> float | None:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return None  # the worker is being started again
        for line in text.splitlines():
            if line.startswith(f'streamrepl_gateway_restarts_total{{gateway="{gw}"}}'):
                return float(line.split()[-1])
        return None

    produce(src_bs, sp(src), "t", 1000, 2)
    with Gateways(ec.registry_path, "newyork", tmp_path, env=FAST) as gws:
        gws.start(gw, "-metricsaddr", "127.0.0.1", "-metricsport", str(port), supervise=True)
        supervisor = gws.procs[gw]
        first = wait_until(row, 60, "the gateway to report itself")
        assert first["pid"] != supervisor.pid and "parent" not in first  # its worker, under the gateway's own id
        assert (first["restarts"], first["lastexit"]) == (0, "")
        wait_until(caught_up, 60, "the replica to catch up")
        wait_until(lambda: restarts_metric() == 0, 30, "streamrepl_gateway_restarts_total 0")

        pid = first["pid"]
        for n, sig in enumerate((signal.SIGKILL, signal.SIGSEGV), start=1):
            os.kill(pid, sig)
            produce(src_bs, sp(src), "t", 1000, 2, start=1000 * n)
            said = f"worker {gw} died (killed by {sig.name}); starting it again"
            wait_until(lambda: said in log.read_text(), 30, "the supervisor to say so")  # noqa: B023
            again = wait_until(
                lambda: (r := row()) and r["pid"] != pid and r["restarts"] == n and r,  # noqa: B023
                90,
                f"the gateway to be back in a new process after {sig.name}",
            )
            assert again["lastexit"] == f"signal {sig.value} ({sig.name})", again
            assert supervisor.poll() is None
            wait_until(lambda: restarts_metric() == n, 30, f"streamrepl_gateway_restarts_total {n}")  # noqa: B023
            wait_until(caught_up, 90, f"the replica to catch up after {sig.name}")
            pid = again["pid"]

        gws.procs.pop(gw)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0  # forwarded: the worker drained and stopped cleanly
    assert "Traceback" not in log.read_text()
    src_uuid = cli("stream", "info", "-path", src)[0]["uuid"]
    assert assert_identical(src_bs, sp(src), src_uuid, dst_bs, sp(dst), {"t": 2}) == 3000
