"""maprcli's gateway verbs: `cluster gateway set / get / delete / resolve / local`.

`set` names the gateways allowed to serve a destination cluster: one not on the list refuses to start, and a
running one taken off the list drains and leaves. Real brokers, real gateway processes.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Run, one_error_line, run_cli, run_proc
from support.streams import Gateways, wait_until

from streamrepl.local import EphemeralClusters
from streamrepl.replication.exits import REFUSED


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own: the tests count the live gateways of a cluster (resolve, local), which other
    # modules' gateways would change, and a gateway list set here would stop other modules' gateways.
    with EphemeralClusters(["newyork"]) as ec:
        yield ec


def cli(ec: EphemeralClusters, *args: str) -> Run:
    return run_cli(*args, env={"STREAMREPL_CLUSTERS": str(ec.registry_path), "STREAMREPL_IDENTITY": "user=alice"})


def get_rows(ec: EphemeralClusters) -> list[dict]:
    return cli(ec, "cluster", "gateway", "get", "-dstcluster", "newyork", "-json").data()


def test_set_get_delete_round_trip(ec: EphemeralClusters) -> None:
    empty = cli(ec, "cluster", "gateway", "get", "-dstcluster", "newyork")
    assert empty.code == 0 and empty.stdout == "cluster\tgatewayConfig\n", empty  # the header, even when empty

    done = cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gw1  gw2.example.com")
    assert done.code == 0 and done.stdout == "", done
    shown = cli(ec, "cluster", "gateway", "get", "-dstcluster", "newyork")
    assert shown.stdout == "cluster\tgatewayConfig\nnewyork\tgw1 gw2.example.com\n", shown
    assert get_rows(ec) == [{"cluster": "newyork", "gatewayConfig": "gw1 gw2.example.com"}]

    assert cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gw3").code == 0
    assert get_rows(ec) == [{"cluster": "newyork", "gatewayConfig": "gw3"}]

    deleted = cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork")
    assert deleted.code == 0 and deleted.stdout == "", deleted
    assert get_rows(ec) == []
    assert cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork").code == 0  # nothing to delete: fine


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("-dstcluster", "newyork", "-gateways", ""), "at least one"),
        (("-dstcluster", "newyork", "-gateways", "   "), "at least one"),
        (("-dstcluster", "newyork", "-gateways", "gw1 gw1"), "more than once"),
        (("-dstcluster", "newyork", "-gateways", "gw1 bad/name"), "bad/name"),
        (("-dstcluster", "newyork", "-gateways", "gw1,gw2"), "gw1,gw2"),
        (("-dstcluster", "newyork"), "missing -gateways"),
        (("-gateways", "gw1"), "missing -dstcluster"),
        (("-dstcluster", "nosuch", "-gateways", "gw1"), "unknown cluster 'nosuch'"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(ec: EphemeralClusters, args: tuple[str, ...], says: str) -> None:
    assert cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "keep1 keep2").code == 0
    try:
        line = one_error_line(cli(ec, "cluster", "gateway", "set", *args))
        assert line.startswith("ERROR (") and "cluster gateway set" in line and says in line, line
        envelope = cli(ec, "cluster", "gateway", "set", *args, "-json")
        assert envelope.code != 0 and json.loads(envelope.stdout)["status"] == "ERROR", envelope
        assert get_rows(ec) == [{"cluster": "newyork", "gatewayConfig": "keep1 keep2"}]
    finally:
        cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork")


@pytest.mark.parametrize("verb", ["get", "delete", "resolve"])
def test_other_verbs_want_a_known_dstcluster(ec: EphemeralClusters, verb: str) -> None:
    assert "missing -dstcluster" in one_error_line(cli(ec, "cluster", "gateway", verb))
    assert "unknown cluster 'nosuch'" in one_error_line(cli(ec, "cluster", "gateway", verb, "-dstcluster", "nosuch"))


def test_local_refuses_an_unknown_format(ec: EphemeralClusters) -> None:
    line = one_error_line(cli(ec, "cluster", "gateway", "local", "-format", "xml"))
    assert "xml" in line, line


def test_a_gateway_not_on_the_list_refuses_to_start(ec: EphemeralClusters) -> None:
    assert cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "trusted").code == 0
    try:
        started = time.monotonic()
        run = run_proc(
            ["gateway", "start", "-cluster", "newyork", "-id", "intruder"],
            env={"STREAMREPL_CLUSTERS": str(ec.registry_path)},
            timeout=60,
        )
        line = one_error_line(run)  # the supervisor's, with its worker's message
        assert "intruder" in line and "not on the gateway list of cluster newyork" in line, line
        assert run.code == REFUSED
        assert time.monotonic() - started < 30
        # It never reported itself, so it never took a slot.
        listed = cli(ec, "cluster", "gateway", "list", "-json").data()
        assert all(r["gateway"] != "intruder" for r in listed), listed
    finally:
        cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork")


def live(ec: EphemeralClusters) -> dict[str, dict]:
    return {r["gateway"]: r for r in cli(ec, "cluster", "gateway", "list", "-json").data()}


def test_resolve_local_and_a_gateway_taken_off_the_list_stops(ec: EphemeralClusters, tmp_path: Path) -> None:
    host = socket.gethostname()
    assert cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gwa gwb").code == 0
    try:
        with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
            gws.start("gwa")
            gws.start("gwb", supervise=True)
            wait_until(lambda: {"gwa", "gwb"} <= set(live(ec)), 120, "both gateways to report themselves")

            resolved = cli(ec, "cluster", "gateway", "resolve", "-dstcluster", "newyork", "-json").data()
            assert [(r["cluster"], r["gateway"], r["host"]) for r in resolved] == [
                ("newyork", "gwa", host),
                ("newyork", "gwb", host),
            ], resolved
            assert all(r["lastseen"] >= 0 for r in resolved)
            text = cli(ec, "cluster", "gateway", "resolve", "-dstcluster", "newyork")
            assert text.stdout.splitlines()[0] == "cluster\tgateway\thost\tlastseen", text

            local = cli(ec, "cluster", "gateway", "local")
            assert local.code == 0 and local.stdout == "gwa gwb\n", local
            dns = cli(ec, "cluster", "gateway", "local", "-format", "dns")
            assert dns.stdout.splitlines() == [
                f'_streamrepl-gateway.newyork. 60 IN TXT "gwa {host}"',
                f'_streamrepl-gateway.newyork. 60 IN TXT "gwb {host}"',
            ], dns

            # Take gwb off the list: resolve drops it at once, and the gateway itself drains and leaves.
            assert cli(ec, "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gwa").code == 0
            resolved = cli(ec, "cluster", "gateway", "resolve", "-dstcluster", "newyork", "-json").data()
            assert [r["gateway"] for r in resolved] == ["gwa"], resolved
            proc = gws.procs["gwb"]
            wait_until(lambda: proc.poll() is not None, 30, "gwb to stop")
            # A final exit: its supervisor does not start it again, and ends with the worker's message and status.
            assert proc.returncode == REFUSED
            log = (tmp_path / "gwb.log").read_text()
            last = log.splitlines()[-1]
            assert (
                last.startswith("ERROR (1) - gateway start: ") and "not on the gateway list of cluster newyork" in last
            )
            assert "starting it again" not in log, log
            wait_until(lambda: "gwb" not in live(ec), 30, "gwb to report itself stopped")
            assert "gwa" in live(ec) and gws.procs["gwa"].poll() is None
            assert cli(ec, "cluster", "gateway", "local").stdout == "gwa\n"

            # No list: every live gateway serves.
            assert cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork").code == 0
            resolved = cli(ec, "cluster", "gateway", "resolve", "-dstcluster", "newyork", "-json").data()
            assert [r["gateway"] for r in resolved] == ["gwa"], resolved
            gws.procs.pop("gwb")
            gws.kill("gwa", signal.SIGTERM)
    finally:
        cli(ec, "cluster", "gateway", "delete", "-dstcluster", "newyork")
