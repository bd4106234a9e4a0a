"""A destination cluster that comes back empty under a running gateway (issue 35): Tansu restarted (memory storage),
or noida-db started again with its data directory removed, as a wiped or rebuilt cluster comes back. The gateway
notices its internal topics gone, creates them again and joins its slots again; `replica list` says the replica is
gone and what to do; `replica autosetup` run again sets the replica up, and the same gateway process replicates
every record into it. A source whose cluster comes back empty fails closed. A status topic found with the wrong partition count (the broker's default, created by a
producer's write) is repaired, and `cluster gateway list` sees the gateway. On a registry a user writes.

Marked `lifecycle` (a broker is stopped and started twice, about a minute): .ci/run runs it on both brokers.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_cli
from support.clusters import ON_NOIDA
from support.streams import Gateways, assert_identical, produce, read_partition, sp, uuid_of, wait_until

from streamrepl import kafka, local, statustopic
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import load

pytestmark = [pytest.mark.noida_matrix, pytest.mark.lifecycle]

SRC, DST = "/sanfrancisco/emptied", "/newyork/emptied"
TOPICS = {"t": 3}


@pytest.fixture
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own: the destination broker is stopped and started again empty.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as ec:
        yield ec


def _cli(ec: EphemeralClusters, *args: str) -> list[dict]:
    return run_cli(*args, "-json", env={"STREAMREPL_CLUSTERS": str(ec.registry_path)}).data()


def _replica_row(ec: EphemeralClusters) -> dict:
    (row,) = _cli(ec, "stream", "replica", "list", "-path", SRC)
    return row


def _restart_empty(ec: EphemeralClusters, cluster: str) -> None:
    """Stop `cluster`'s broker and start it again with nothing in it, on the same port."""
    port = ec.brokers[cluster].port
    local.down(ec.state_dir, [cluster])
    if ON_NOIDA:
        shutil.rmtree(local.data_dir(ec.state_dir, cluster))
    (again,) = local.up([cluster], ec.state_dir)
    assert again.port == port


def _gateway_seen(ec: EphemeralClusters, name: str) -> bool:
    rows = _cli(ec, "cluster", "gateway", "list")
    return any(r["gateway"] == name and r["slots"] == 64 for r in rows)


def test_a_destination_that_comes_back_empty_is_set_up_again_under_the_same_gateway(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    reg = ec.registry_path
    env = {"STREAMREPL_CLUSTERS": str(reg)}
    run_cli("stream", "create", "-path", SRC, "-defaultpartitions", "3", env=env)
    run_cli("stream", "topic", "create", "-path", SRC, "-topic", "t", env=env)
    _cli(ec, "stream", "replica", "autosetup", "-path", SRC, "-replica", DST)
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path) as gws:
        name = gws.start()
        gateway = gws.procs[name]
        produce(sf, sp(SRC), "t", 60, 3)
        wait_until(lambda: _replica_row(ec)["isUptodate"], 60, "the replica to catch up")

        _restart_empty(ec, "newyork")
        row = wait_until(
            lambda: (r := _replica_row(ec))["replicaState"] == "REPLICA_STATE_ERROR" and r, 60, "an error in the list"
        )
        assert "does not exist" in row["lasterror"] and "replica autosetup" in row["lasterror"], row
        assert not row["isUptodate"], row
        # The gateway made its internal topics again with their shapes and took its slots again.
        # A guard against a hang, not a speed limit: on noida-db the rejoin after its cluster came back empty took over
        # 60 s in about 1 run of 6 (seen after this session's merges; not looked into further).
        wait_until(lambda: _gateway_seen(ec, name), 180, "the gateway to hold every slot again")
        shapes = kafka.topics(load(reg).get("newyork"))
        assert shapes[statustopic.STATUS_TOPIC] == 1 and shapes["__streamrepl_gateway_slots"] == 64, shapes

        _cli(ec, "stream", "replica", "autosetup", "-path", SRC, "-replica", DST)
        produce(sf, sp(SRC), "t", 60, 3, start=60)
        wait_until(
            lambda: gateway.poll() is not None or _replica_row(ec)["isUptodate"], 60, "the replica to catch up again"
        )
        assert gateway.poll() is None, f"the gateway exited ({gateway.returncode})"
        assert assert_identical(sf, sp(SRC), uuid_of(reg, SRC), ny, sp(DST), TOPICS) == 120
        row = _replica_row(ec)
        assert row["replicaState"] == "REPLICA_STATE_REPLICATING" and row["lasterror"] == "", row
        assert (tmp_path / f"{name}.log").read_text().count(" started for cluster ") == 1


def test_a_status_topic_of_the_wrong_shape_is_repaired(ec: EphemeralClusters, tmp_path: Path) -> None:
    """The status topic made with the broker's default partition count (a producer's write created it, as one does on a
    broker that creates topics on demand): its readers read partition 0, so gateways reporting elsewhere were never
    seen. The gateway says so, makes it again with one partition, and `cluster gateway list` lists it."""
    reg = ec.registry_path
    ny = load(reg).get("newyork")
    kafka.create_topics(ny, [(statustopic.STATUS_TOPIC, 4, dict(kafka.COMPACTED))])
    with Gateways(reg, "newyork", tmp_path) as gws:
        name = gws.start()
        wait_until(lambda: _gateway_seen(ec, name), 60, "the gateway in the gateway list")
        assert kafka.topics(ny)[statustopic.STATUS_TOPIC] == 1
        log = (tmp_path / f"{name}.log").read_text()
        assert "has 4 partitions" in log, log[-3000:]


def test_a_source_that_comes_back_empty_fails_closed(ec: EphemeralClusters, tmp_path: Path) -> None:
    """The source's cluster comes back empty and the stream is made again under its path with fewer records: the
    replica keeps every record it had, and `replica list` reports the divergence (what to run), as for a source
    topic created again."""
    reg = ec.registry_path
    _cli(ec, "stream", "create", "-path", SRC, "-defaultpartitions", "3")
    _cli(ec, "stream", "topic", "create", "-path", SRC, "-topic", "t")
    _cli(ec, "stream", "replica", "autosetup", "-path", SRC, "-replica", DST)
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path) as gws:
        name = gws.start()
        produce(sf, sp(SRC), "t", 60, 3)
        wait_until(lambda: _replica_row(ec)["isUptodate"], 60, "the replica to catch up")
        before = {p: read_partition(ny, kafka_topic_name(sp(DST), "t"), p) for p in range(3)}

        _restart_empty(ec, "sanfrancisco")
        _cli(ec, "stream", "create", "-path", SRC, "-defaultpartitions", "3")
        _cli(ec, "stream", "topic", "create", "-path", SRC, "-topic", "t")
        produce(sf, sp(SRC), "t", 6, 3, tag="again-")
        _cli(ec, "stream", "replica", "add", "-path", SRC, "-replica", DST)
        row = wait_until(
            lambda: (r := _replica_row(ec))["replicaState"] == "REPLICA_STATE_ERROR" and r, 60, "an error in the list"
        )
        assert "diverged" in row["lasterror"] and "resync" in row["lasterror"], row
        assert gws.procs[name].poll() is None
        after = {p: read_partition(ny, kafka_topic_name(sp(DST), "t"), p) for p in range(3)}
        assert after == before, "the replica keeps what it had"
