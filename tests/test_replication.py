"""Replication end to end: real brokers, real gateway processes, records compared one by one."""

from __future__ import annotations

import time
import uuid

import pytest
from support.streams import Gateways, assert_identical, caught_up, cli_json, produce, wait_until
from support.streams import cli_proc as run_cli

from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath

pytestmark = pytest.mark.e2e


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
