"""Replication end to end: real brokers, real gateway processes, records compared one by one."""

from __future__ import annotations

import time
import uuid

import pytest
from support.streams import Gateways, assert_identical, caught_up, cli, cli_data, cli_json, produce, wait_until
from support.streams import cli_proc as run_cli

from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath

pytestmark = pytest.mark.noida


@pytest.fixture(scope="module")
def ec():
    # Brokers of its own: three clusters (tokyo too), one more than the shared pair.
    with EphemeralClusters(["sanfrancisco", "newyork", "tokyo"]) as clusters:
        yield clusters


def bs(ec, name: str) -> str:
    return ec.brokers[name].bootstrap


def new_stream(ec, cluster: str, name: str, *extra: str, copyfrom: str | None = None) -> str:
    path = f"/{cluster}/{name}"
    args = ["stream", "create", "-path", path, *extra]
    if copyfrom:
        args += ["-copymetafrom", copyfrom]
    run_cli(*args, registry=ec.registry_path)
    return path


def uuid_of(ec, path: str) -> str:
    return cli_json("stream", "info", "-path", path, registry=ec.registry_path)[0]["uuid"]


def link(ec, src: str, dst: str, paused: bool = False) -> None:
    run_cli(
        "stream",
        "replica",
        "add",
        "-path",
        src,
        "-replica",
        dst,
        "-paused",
        str(paused).lower(),
        registry=ec.registry_path,
    )
    run_cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=ec.registry_path)


def test_manual_procedure_preserves_every_record(ec, tmp_path):
    name = f"activity{uuid.uuid4().hex[:6]}"
    src = new_stream(ec, "sanfrancisco", name, "-defaultpartitions", "3")
    for t in ("clicks", "views", "buys"):
        run_cli("stream", "topic", "create", "-path", src, "-topic", t, registry=ec.registry_path)
    dst = new_stream(ec, "newyork", name, copyfrom=src)
    run_cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true", registry=ec.registry_path)
    rows = cli_json("stream", "replica", "list", "-path", src, registry=ec.registry_path)
    assert rows[0]["replicaPath"] == dst and rows[0]["paused"] is True
    assert "upstream add" in rows[0]["lasterror"]
    run_cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=ec.registry_path)
    ups = cli_json("stream", "upstream", "list", "-path", dst, registry=ec.registry_path)
    assert ups[0]["path"] == src and ups[0]["uuid"] == uuid_of(ec, src)
    sp = StreamPath("sanfrancisco", "/" + name)
    produce(bs(ec, "sanfrancisco"), sp, "clicks", 3000, 3)
    produce(bs(ec, "sanfrancisco"), sp, "views", 30, 3, batch=False)
    produce(bs(ec, "sanfrancisco"), sp, "buys", 500, 3)
    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        gws.start()
        time.sleep(6)
        # Paused: nothing applied yet.
        rows = cli_json("stream", "replica", "list", "-path", src, registry=ec.registry_path)
        assert rows[0]["putsPending"] == 3530
        run_cli("stream", "replica", "resume", "-path", src, "-replica", dst, registry=ec.registry_path)
        produce(bs(ec, "sanfrancisco"), sp, "clicks", 1000, 3, start=3000)
        wait_until(lambda: caught_up(ec.registry_path, src), 60, "the replica to catch up")
    n = assert_identical(
        bs(ec, "sanfrancisco"),
        sp,
        uuid_of(ec, src),
        bs(ec, "newyork"),
        StreamPath("newyork", "/" + name),
        {"clicks": 3, "views": 3, "buys": 3},
    )
    assert n == 4530
    topics = {
        r["topic"]: r["partitions"]
        for r in cli_json("stream", "topic", "list", "-path", dst, registry=ec.registry_path)
    }
    assert topics == {"clicks": 3, "views": 3, "buys": 3}


def test_a_gateway_taking_up_many_partitions_at_once_applies_their_backlogs_and_their_new_records(ec, tmp_path):
    """A gateway that takes up 16 or more partitions at once starts their feeds quiet (replication/units.py, START_QUIET_AT):
    those whose source holds records wake at the end watch's first answer, the others when records come."""
    name = f"many{uuid.uuid4().hex[:6]}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    topics = {f"t{i}": 4 for i in range(5)}  # 20 partitions
    reg = ec.registry_path
    cli("stream", "create", "-path", src, "-defaultpartitions", "4", registry=reg)
    for t in topics:
        cli("stream", "topic", "create", "-path", src, "-topic", t, registry=reg)
    cli("stream", "create", "-path", dst, "-copymetafrom", src, registry=reg)
    cli("stream", "replica", "add", "-path", src, "-replica", dst, registry=reg)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=reg)
    sp = StreamPath("sanfrancisco", "/" + name)
    produce(bs(ec, "sanfrancisco"), sp, "t0", 400, 4)
    produce(bs(ec, "sanfrancisco"), sp, "t1", 40, 4, batch=False)

    def up_to_date() -> bool:
        rows = cli_data("stream", "replica", "list", "-path", src, registry=reg)
        return bool(rows) and all(r["isUptodate"] for r in rows)

    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        wait_until(up_to_date, 60, "the backlogs to be applied")
        produce(bs(ec, "sanfrancisco"), sp, "t2", 100, 4)  # partitions that were empty when taken up
        produce(bs(ec, "sanfrancisco"), sp, "t0", 100, 4, start=400)
        wait_until(up_to_date, 60, "the new records to be applied")
    n = assert_identical(
        bs(ec, "sanfrancisco"), sp, uuid_of(ec, src), bs(ec, "newyork"), StreamPath("newyork", "/" + name), topics
    )
    assert n == 640
