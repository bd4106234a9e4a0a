"""The gateway's group requests across a broker that dies and comes back: no signal death (issue 38).

librdkafka 2.16 aborts a process (SIGABRT, `rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0`)
when a group request of an admin client timed out while the group's coordinator was down, and that broker comes
back while the client still exists (RELIABILITY.md, "librdkafka's group requests"). Gateway workers died of it: the
slot group's look for dead seats kept one admin client for good. Here a child process makes the gateway's group
requests in a loop (the seat look's describe, the cursor sync's reads of a replica's groups) with requests that time
out after 1 s, while this module's own broker is killed and started again; the child must outlive every round.
(Before the fix the child died by SIGABRT at the first restart, every time.)

The module starts a broker of its own: it kills it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from support.clusters import crash_broker

from streamrepl.local import EphemeralClusters

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow

ROUNDS = 3
#: seconds the broker stays down: long enough for the child's 1 s requests to time out while it is
DOWN_SECONDS = 2.5

CHILD = r"""
import sys, time
from streamrepl import kafka
from streamrepl.cursors import CursorReplicator
from streamrepl.errors import StreamreplError
from streamrepl.kafka import groups
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication.membership import SlotGroup
from streamrepl.replication.stats import GatewayStats

groups.REQUEST_TIMEOUT = 1.0  # requests that time out while the broker is down, not after it is back
cluster = Cluster("c", {"bootstrap.servers": sys.argv[1]})
seats = SlotGroup(cluster, "gw1", 6000, GatewayStats("gw1"), lambda: None, lambda _: None)
src, dst = StreamPath("c", "/src"), StreamPath("c", "/dst")
cursors = CursorReplicator(cluster, cluster, src, dst)
commits = {"app": ({(kafka_topic_name(src, "t"), 0): 5}, {})}
while True:
    try:
        seats.members()  # the gateway worker's look for dead seats
        cursors.run_once(source=lambda: commits)  # the cursor sync's reads of the replica's groups
        print("answered", flush=True)
    except (StreamreplError, kafka.KafkaException) as e:
        print("failed", type(e).__name__, flush=True)
    time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[EphemeralClusters]:
    with EphemeralClusters(["sanfrancisco"]) as ec:
        yield ec


def test_group_requests_that_timed_out_while_the_broker_was_down_kill_nothing_when_it_comes_back(
    broker: EphemeralClusters,
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, broker.brokers["sanfrancisco"].bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    gone = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        lines.extend(line.strip() for line in child.stdout)
        gone.set()

    def answered_since(k: int, timeout: float) -> bool:
        """Whether the child answered after its line k, within `timeout` s (False at once if it died)."""
        deadline = time.monotonic() + timeout
        while not gone.is_set() and time.monotonic() < deadline:
            if "answered" in lines[k:]:
                return True
            time.sleep(0.05)
        return False

    def why() -> str:
        if gone.is_set():
            child.wait()
            assert child.stderr is not None
            return f"the child died ({child.returncode}): {child.stderr.read()[-2000:]}"
        return f"its last lines: {lines[-3:]}"

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for k in range(ROUNDS):
            assert answered_since(len(lines), 60), f"round {k}: no answer; {why()}"
            before = len(lines)
            crash_broker(broker, "sanfrancisco", down_seconds=DOWN_SECONDS)
            assert answered_since(before, 60), f"round {k}: no answer after the restart; {why()}"
            assert any(x.startswith("failed") for x in lines[before:]), f"round {k}: nothing timed out"
    finally:
        child.kill()
        _, err = child.communicate()
        reader.join(5)
    assert child.returncode == -signal.SIGKILL, f"the child died ({child.returncode}): {err[-2000:]}"
    assert "Assertion" not in err
