"""The destination broker crashes under load and comes back without its newest records (issue 12 §6).

noida-db keeps its data on disk but saves it every few seconds: a SIGKILL loses what it took since the last save,
as a real cluster loses a tail in an unclean leader election. The gateway's idempotent producer then meets a
broker that forgot it (a fatal "out of order sequence number"), and the replica partitions end below where the
gateway left them. What must hold: the gateway survives, takes every partition up again from its real end, and
refills it from the source, so that the replica equals its source record by record, with no conflict or
divergence reported (there is none: the source still holds everything).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clusters import crash_broker, wait_saved
from support.streams import (
    Gateways,
    SteadyProducer,
    link,
    new_stream,
    new_topics,
    replica_rows,
    same_ends,
    sp,
    tally,
    true_ends,
    uuid_of,
    wait_until,
)

from streamrepl.local import EphemeralClusters

TOPICS = {"t": 2}


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of their own, on noida-db whatever the suite runs on (data on disk): the test kills one.
    with EphemeralClusters(["sanfrancisco", "newyork"], broker="noida") as ec:
        yield ec


def test_a_destination_broker_crash_under_load_is_refilled_from_the_source(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    reg = ec.registry_path
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    src = new_stream(reg, "/sanfrancisco/crash")
    dst = new_stream(reg, "/newyork/crash", copyfrom=src)
    new_topics(reg, src, TOPICS)
    link(reg, src, dst)
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start("gw")
        producer = SteadyProducer(sf, sp(src), TOPICS, rate=1000).start()
        try:
            # Readable ends of the replica (its topic exists); two reads of a replica being written need not agree.
            def applied() -> int:
                try:
                    return sum(true_ends(ny, sp(dst), TOPICS).values())
                except Exception:  # noqa: BLE001 - the topic is not there yet
                    return 0

            wait_until(lambda: applied() > 2000, 120, "replication to start")
            wait_saved(ec, "newyork")  # then a second of records that the crash takes
            time.sleep(1)
            before = true_ends(ny, sp(dst), TOPICS)
            crash_broker(ec, "newyork", down_seconds=1)
            after = true_ends(ny, sp(dst), TOPICS)
            time.sleep(6)
        finally:
            sent = producer.stop()

        def refilled() -> bool:
            assert gws.procs["gw"].poll() is None, "the gateway died when its destination broker crashed"
            return same_ends(sf, sp(src), ny, sp(dst), TOPICS)

        wait_until(refilled, 90, "the replica to be refilled from the source")
        rows = replica_rows(reg, src)
        log = (tmp_path / "gw.log").read_text() if (tmp_path / "gw.log").exists() else ""
        assert gws.procs["gw"].poll() is None, "the gateway died when its destination broker crashed"
    t = tally(sf, sp(src), uuid_of(reg, src), ny, sp(dst), TOPICS)
    assert t.records == sent
    assert t.ok, f"{t} (replica ends before the crash {before}, after {after})"
    assert rows[dst]["replicaState"] != "REPLICA_STATE_ERROR", rows[dst]
    assert "diverged" not in log and "something else writes" not in log, log[-3000:]
    assert "another writer's records" not in log, log[-3000:]
    # The crash must have cost the destination records, or this test proves nothing.
    assert any(after[k] < before[k] for k in before), (before, after)
