"""streamrepl_cluster_stalled_partitions end to end: the live gateways count the partitions held by a gateway that
stopped reporting (replication/stalls.py). Brokers of its own: on Tansu a group's session seems to be the one its
first member joined with (6 s for the gateways other modules start), while this test needs the long sessions it
starts its gateways with, so that the frozen gateway keeps its slots well past the moment its report went stale."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from support.cli import run_cli
from support.metrics import free_port, sample, scrape
from support.streams import Gateways, caught_up, link, new_stream, new_topics, produce, sp, wait_until

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.lifecycle  # a minute and a half: .ci/run's lifecycle step


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


#: Sessions long enough that a frozen gateway keeps its slots well after its report went stale (15 s): between the
#: two its partitions are held by no live gateway, as a dead member's are for good on a broker that never expires it.
LONG_SESSION = {"STREAMREPL_GATEWAY_SESSION_MS": "120000"}


def test_the_live_gateways_count_the_partitions_held_by_a_gateway_that_stopped_reporting(ec, tmp_path):
    reg = ec.registry_path
    src = new_stream(reg, "/sanfrancisco/stalls", "-defaultpartitions", "4")
    new_topics(reg, src, {"t": 4})
    dst = new_stream(reg, "/newyork/stalls", copyfrom=src)
    link(reg, src, dst)
    port = free_port()

    seen: list[float | None] = []

    def stalled() -> float | None:
        try:
            value = sample(scrape(port), "streamrepl_cluster_stalled_partitions", cluster="newyork", gateway="watcher")
        except OSError:
            value = None
        if not seen or seen[-1] != value:
            seen.append(value)
        return value

    def rows() -> dict[str, dict]:
        run = run_cli("-clusters", reg, "cluster", "gateway", "list", "-dstcluster", "newyork", "-json")
        return {r["gateway"]: r for r in run.data()}

    with Gateways(reg, "newyork", tmp_path, env=LONG_SESSION) as gws:
        gws.start("watcher", "-metricsport", str(port), "-metricsaddr", "127.0.0.1")
        gws.start("frozen")
        both = wait_until(
            lambda: (r := rows()) and all(r.get(g, {}).get("partitions") for g in ("watcher", "frozen")) and r,
            120,
            "both gateways to hold partitions",
        )
        produce(ec.brokers["sanfrancisco"].bootstrap, sp(src), "t", 100, 4)
        wait_until(lambda: caught_up(reg, src), 60, "the replica to catch up")
        wait_until(lambda: stalled() == 0, 30, "no stalled partition while both report")
        held = rows()["frozen"]["partitions"]
        assert held == both["frozen"]["partitions"], (both, rows())
        gws.procs["frozen"].send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: stalled() == held, 90, f"the {held} partitions of the frozen gateway counted")
        except AssertionError as e:
            raise AssertionError(f"{e}; the values seen: {seen}") from None
        finally:
            gws.procs["frozen"].send_signal(signal.SIGCONT)
        wait_until(lambda: stalled() == 0, 40, "no stalled partition once it reports again")
        gws.stop_all()
