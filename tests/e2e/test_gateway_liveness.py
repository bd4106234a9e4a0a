"""`replica list` and `cluster gateway list` tell the truth about gateways: a replica with no live gateway says so
(and since when), and each gateway row says how fresh it is."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Run, run_cli
from support.freeze import frozen
from support.streams import Gateways, produce, sp, wait_until

from streamrepl.local import EphemeralClusters

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own: the test counts the gateways of a cluster, which other modules' gateways would change.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as ec:
        yield ec


def cli(ec: EphemeralClusters, *args: str) -> Run:
    return run_cli(*args, env={"STREAMREPL_CLUSTERS": str(ec.registry_path), "STREAMREPL_IDENTITY": None})


def replica_row(ec: EphemeralClusters, src: str) -> dict:
    return cli(ec, "stream", "replica", "list", "-path", src, "-json").data()[0]  # type: ignore[no-any-return]


def test_no_live_gateway_is_said_in_replica_list_and_gateway_rows_show_their_age(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    src, dst = "/sanfrancisco/live", "/newyork/live"
    for path in (src, dst):
        assert cli(ec, "stream", "create", "-path", path).code == 0
    assert cli(ec, "stream", "topic", "create", "-path", src, "-topic", "t", "-partitions", "2").code == 0
    assert cli(ec, "stream", "replica", "add", "-path", src, "-replica", dst).code == 0
    assert cli(ec, "stream", "upstream", "add", "-path", dst, "-upstream", src).code == 0

    row = replica_row(ec, src)
    assert "no gateway" in row["lasterror"] and "gateway start -cluster newyork" in row["lasterror"], row

    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        name = gws.start("gwlive")
        rows = wait_until(
            lambda: [r for r in cli(ec, "cluster", "gateway", "list", "-json").data() if r["slots"] > 0],
            120,
            "the gateway to report its slots",
        )
        assert rows[0]["gateway"] == name and rows[0]["lastseen"] >= 0, rows
        wait_until(lambda: "no gateway" not in replica_row(ec, src)["lasterror"], 60, "replica list to see it")
        gws.kill(name, signal.SIGTERM)

    row = replica_row(ec, src)
    assert "no gateway is running" in row["lasterror"] and "gwlive" in row["lasterror"], row
    assert (row["replicaState"], row["isUptodate"]) == ("REPLICA_STATE_WAITING_FOR_GATEWAY", False), row
    assert cli(ec, "cluster", "gateway", "list", "-json").data() == []


WAITING = "REPLICA_STATE_WAITING_FOR_GATEWAY"


def test_replica_list_never_says_up_to_date_without_a_live_gateway(ec: EphemeralClusters, tmp_path: Path) -> None:
    """Right after autosetup, with no gateway ever started, a row said REPLICA_STATE_REPLICATING and isUptodate true,
    and in its lasterror that nothing was replicated. And a gateway that stopped reporting (frozen past
    statustopic.LIVE_SECONDS) left its partitions isUptodate true."""
    name = f"nogw{uuid.uuid4().hex[:6]}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    assert cli(ec, "stream", "create", "-path", src).code == 0
    assert cli(ec, "stream", "topic", "create", "-path", src, "-topic", "t", "-partitions", "2").code == 0
    produce(ec.brokers["sanfrancisco"].bootstrap, sp(src), "t", 20, 2)
    assert cli(ec, "stream", "replica", "autosetup", "-path", src, "-replica", dst).code == 0

    row = replica_row(ec, src)
    assert (row["replicaState"], row["isUptodate"], row["putsPending"]) == (WAITING, False, 0), row
    assert "'streamrepl gateway start -cluster newyork'" in row["lasterror"], row

    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        name = gws.start("gwheld")
        row = wait_until(lambda: (r := replica_row(ec, src))["isUptodate"] and r, 120, "the gateway to hold the link")
        assert (row["replicaState"], row["lasterror"]) == ("REPLICA_STATE_REPLICATING", ""), row

        with frozen(gws.procs[name]):
            row = wait_until(
                lambda: (r := replica_row(ec, src))["replicaState"] == WAITING and r, 60, "the frozen gateway to lapse"
            )
            assert row["isUptodate"] is False and "gwheld" in row["lasterror"], row
            assert "'streamrepl gateway start -cluster newyork'" in row["lasterror"], row
        wait_until(lambda: replica_row(ec, src)["isUptodate"], 60, "the thawed gateway to report again")
