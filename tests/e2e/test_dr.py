"""Disaster recovery end to end: `stream replica promote` and `stream replica failback` with real gateways.

The module starts brokers of its own: it stops and restarts the sanfrancisco broker, which would break every other
module's tests. They are noida brokers because noida keeps its data across a restart (Tansu comes back empty), and
the old primary's diverged tail must still be there when its cluster comes back.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from support import one_error_line
from support.streams import (
    Gateways,
    assert_identical,
    caught_up,
    cli,
    cli_data,
    new_stream,
    new_topics,
    produce,
    read_all,
    same_ends,
    sp,
    uuid_of,
    wait_until,
)

from streamrepl import local
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name

TOPICS = {"t": 2}
FAST = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500}
SYNC = {"STREAMREPL_CURSOR_SYNC_SECONDS": "0.5"}


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own (see the module doc), on noida: its data survives a restart.
    with EphemeralClusters(["sanfrancisco", "newyork"], broker="noida") as clusters:
        yield clusters


def stop_broker(ec: EphemeralClusters, name: str) -> None:
    """The cluster is lost: its broker stops (SIGTERM, so that noida saves what it holds), the registry keeps it."""
    pid = ec.brokers[name].pid
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the {name} broker did not stop")


def restart_broker(ec: EphemeralClusters, name: str) -> str:
    (broker,) = local.up([name], ec.state_dir)
    ec.brokers[name] = broker
    return broker.bootstrap


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}


def consume_and_commit(bootstrap: str, group: str, kt: str, n: int) -> dict[tuple[str, int], int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **FAST,
        }
    )
    try:
        # Assigned, not subscribed: noida's group joins are slow; the committed cursors are what matters here.
        c.assign([TopicPartition(kt, p) for p in range(TOPICS["t"])])
        got, deadline = 0, time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(n - got, timeout=0.5) if m.error() is None)
        assert got == n, f"read {got} of {n} records"
        return {(tp.topic, tp.partition): tp.offset for tp in c.commit(asynchronous=False)}
    finally:
        c.close()


def on(stream: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The same cursors on the Kafka topic of `stream`."""
    return {(kafka_topic_name(sp(stream), "t"), p): o for (_, p), o in offsets.items()}


def test_promote_and_failback_whole_cycle(ec: EphemeralClusters, tmp_path: Path) -> None:
    reg = ec.registry_path
    name = f"dr{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    # -ttl 0: the test records carry 2023 timestamps, and noida enforces retention.
    new_stream(reg, sf, "-ttl", "0")
    new_topics(reg, sf, TOPICS)
    new_stream(reg, ny, copyfrom=sf)
    cli("stream", "replica", "add", "-path", sf, "-replica", ny, registry=reg)
    cli("stream", "upstream", "add", "-path", ny, "-upstream", sf, registry=reg)
    sf_uuid = uuid_of(reg, sf)
    kt_sf = kafka_topic_name(sp(sf), "t")
    with (
        Gateways(reg, "newyork", tmp_path, env=SYNC) as ny_gws,
        Gateways(reg, "sanfrancisco", tmp_path, env=SYNC) as sf_gws,
    ):
        ny_gws.start("ny-gw")
        produce(ec.brokers["sanfrancisco"].bootstrap, sp(sf), "t", 100, 2)
        wait_until(lambda: caught_up(reg, sf), 60, "newyork to catch up")
        first = consume_and_commit(ec.brokers["sanfrancisco"].bootstrap, "billing", kt_sf, 60)
        wait_until(lambda: committed(ec.brokers["newyork"].bootstrap, "billing") == on(ny, first), 20, "the cursors")

        # The link is cut (newyork's gateway is gone), sanfrancisco takes a few more records, then it is lost.
        ny_gws.kill("ny-gw")
        produce(ec.brokers["sanfrancisco"].bootstrap, sp(sf), "t", 10, 2, start=100, tag="tail")
        history = read_all(ec.brokers["sanfrancisco"].bootstrap, sp(sf), TOPICS)
        stop_broker(ec, "sanfrancisco")
        ny_gws.start("ny-gw2")

        dry = cli("stream", "replica", "promote", "-path", ny, "-dryrun", "true", registry=reg)
        assert f"remove upstream {sf} from {ny}" in dry.stderr
        assert cli_data("stream", "upstream", "list", "-path", ny, registry=reg)[0]["path"] == sf
        done = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
        assert '"writable":true' in done.stdout.replace(" ", "")
        assert cli_data("stream", "upstream", "list", "-path", ny, registry=reg) == []

        # Producers and the group go on on newyork, from where the group was.
        ny_bs = ec.brokers["newyork"].bootstrap
        produce(ny_bs, sp(ny), "t", 30, 2, start=200, tag="ny")
        moved = consume_and_commit(ny_bs, "billing", kafka_topic_name(sp(ny), "t"), 40 + 30)
        assert all(o >= 50 for o in moved.values())

        sf_bs = restart_broker(ec, "sanfrancisco")
        assert read_all(sf_bs, sp(sf), TOPICS) == history  # the diverged tail came back with it
        sf_gws.start("sf-gw")

        plan = cli_data("stream", "replica", "failback", "-path", ny, "-replica", sf, "-dryrun", "true", registry=reg)
        assert [
            (r["topic"], r["partition"], r["oldend"], r["newend"], r["forkoffset"], r["setaside"]) for r in plan
        ] == [
            ("t", 0, 55, 65, 50, 5),
            ("t", 1, 55, 65, 50, 5),
        ]
        aside = plan[0]["aside"]
        names = {r["path"] for r in cli_data("stream", "list", registry=reg)}
        assert aside not in names and uuid_of(reg, sf) == sf_uuid  # the dry run changed nothing

        # The old primary's replica list says what happened to its replica and what to run: that is what is run.
        (row,) = cli_data("stream", "replica", "list", "-path", sf, registry=reg)
        assert f"replica stream {ny} was promoted to a writable primary at " in row["lasterror"], row
        found = re.search(r"'streamrepl (stream replica failback [^']*)'", row["lasterror"])
        assert found and found.group(1).split() == ["stream", "replica", "failback", "-path", ny, "-replica", sf]
        cli(*found.group(1).split(), registry=reg)

        # The old history whole, offsets kept, beside the new replica.
        kept = read_all(sf_bs, sp(aside), TOPICS)
        for key, recs in history.items():
            assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in kept[key]] == [
                (r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs
            ]
        # sanfrancisco is a replica of newyork now, record by record, and follows it.
        produce(ny_bs, sp(ny), "t", 10, 2, start=300, tag="after")
        wait_until(lambda: same_ends(ny_bs, sp(ny), sf_bs, sp(sf), TOPICS), 60, "sanfrancisco to follow newyork")
        assert assert_identical(ny_bs, sp(ny), uuid_of(reg, ny), sf_bs, sp(sf), TOPICS) == 140
        assert cli_data("stream", "upstream", "list", "-path", sf, registry=reg)[0]["path"] == ny
        # The group's cursor came back to sanfrancisco.
        wait_until(lambda: committed(sf_bs, "billing") == on(sf, moved), 30, "the cursors back on sanfrancisco")
        sf_gws.stop_all()
        ny_gws.stop_all()
    for log in tmp_path.glob("*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()


def test_promote_refuses_a_stream_that_is_not_a_replica(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    path = new_stream(reg, f"/newyork/lone{uuid.uuid4().hex[:6]}")
    run = cli("stream", "replica", "promote", "-path", path, registry=reg, check=False)
    assert run.code != 0
    assert one_error_line(run).endswith(f"stream {path} is not a replica of any stream; there is nothing to promote")


def test_failback_refuses_while_the_new_primary_still_replicates_the_old(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    name = f"fb{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), f"/newyork/{name}"
    new_stream(reg, ny, copyfrom=sf)
    cli("stream", "upstream", "add", "-path", ny, "-upstream", sf, registry=reg)
    run = cli(
        "stream", "replica", "failback", "-path", ny, "-replica", sf, "-dryrun", "true", registry=reg, check=False
    )
    assert run.code != 0
    assert "is still a replica of" in one_error_line(run)
    # A dry run of promote changes nothing either.
    cli("stream", "replica", "promote", "-path", ny, "-dryrun", "true", registry=reg)
    assert cli_data("stream", "upstream", "list", "-path", ny, registry=reg)[0]["path"] == sf


def test_failback_refuses_streams_that_were_never_a_replica_pair(ec: EphemeralClusters) -> None:
    """Its dry run planned to delete the other stream: nothing tied the two (no promotion from it, no replica entry)."""
    reg = ec.registry_path
    name = f"np{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), new_stream(reg, f"/newyork/{name}")
    new_topics(reg, sf, {"t": 1})
    produce(ec.brokers["sanfrancisco"].bootstrap, sp(sf), "t", 3, 1)
    sf_uuid = uuid_of(reg, sf)
    for dry in ("true", "false"):
        run = cli(
            "stream", "replica", "failback", "-path", ny, "-replica", sf, "-dryrun", dry, registry=reg, check=False
        )
        line = one_error_line(run)
        assert f"stream {ny} was never a replica of {sf}" in line, line
        assert "nothing was changed" in line and "autosetup" in line, line
    assert uuid_of(reg, sf) == sf_uuid  # not deleted
    assert not [r for r in cli_data("stream", "list", registry=reg) if r["path"].startswith(f"{sf}.aside-")]


def test_promote_refuses_a_replica_of_several_upstreams_naming_them(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    name = f"mu{uuid.uuid4().hex[:6]}"
    a, b = new_stream(reg, f"/sanfrancisco/{name}a"), new_stream(reg, f"/sanfrancisco/{name}b")
    ny = new_stream(reg, f"/newyork/{name}")
    for up in (a, b):
        cli("stream", "upstream", "add", "-path", ny, "-upstream", up, registry=reg)
    run = cli("stream", "replica", "promote", "-path", ny, registry=reg, check=False)
    line = one_error_line(run)
    assert f"stream {ny} has several upstreams ({a}, {b})" in line, line
    assert f"'streamrepl stream upstream remove -path {ny} -upstream <path>'" in line, line
    assert "nothing was changed" in line, line
    assert [r["path"] for r in cli_data("stream", "upstream", "list", "-path", ny, registry=reg)] == [a, b]
    # Once the operator removed the upstreams of the sources that are not lost, promote goes through.
    cli("stream", "upstream", "remove", "-path", ny, "-upstream", b, registry=reg)
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    assert cli_data("stream", "upstream", "list", "-path", ny, registry=reg) == []
