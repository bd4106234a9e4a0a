"""The partitions that no live gateway holds (statustopic.unheld_units, replication/stalls.py): the figure behind
streamrepl_cluster_stalled_partitions, from status reports made up here. No broker."""

from __future__ import annotations

import time
from typing import Any

from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication.links import Link, Plan, Unit
from streamrepl.replication.stalls import StallWatch
from streamrepl.statustopic import LIVE_SECONDS, gateway_key, unheld_units, unit_key, unit_of

NOW = time.time() * 1000
CLUSTER = Cluster("newyork", {"bootstrap.servers": "127.0.0.1:1"})


def gateway(name: str, units: list[str], age: float = 1.0, stopped: bool = False) -> tuple[str, dict[str, Any]]:
    # Dated now, not when the module was imported: the watch judges liveness by the clock (a suite that ran for more
    # than LIVE_SECONDS before this test took its report for a dead gateway's).
    body: dict[str, Any] = {"gateway": name, "units": units, "updated": time.time() * 1000 - age * 1000}
    if stopped:
        body["stopped"] = True
    return gateway_key(name), body


def test_a_unit_report_key_names_its_unit() -> None:
    assert unit_of(unit_key("/newyork/s", "/sanfrancisco/s", "t", 3)) == "/newyork/s:t[3]"


def test_held_by_a_live_gateway_is_not_stalled_and_everything_else_is() -> None:
    wanted = {f"/newyork/s:t[{p}]" for p in range(6)}
    gateways = dict(
        [
            gateway("alive", ["/newyork/s:t[0]", "/newyork/s:t[1]"]),
            # stopped reporting longer ago than a live gateway reports: its partitions are nobody's
            gateway("dead", ["/newyork/s:t[2]"], age=LIVE_SECONDS + 1),
            gateway("stopped", ["/newyork/s:t[3]"], stopped=True),
        ]
    )
    units = {
        unit_key("/newyork/s", "/sanfrancisco/s", "t", 4): {"state": "error", "gateway": "alive"},
        unit_key("/newyork/s", "/sanfrancisco/s", "t", 2): {"state": "ok", "gateway": "dead"},
    }
    # t[5]: in no report at all (its slot assigned to nobody); t[4]: stopped on an error, which replica list shows
    now = time.time() * 1000
    assert unheld_units(gateways, units, wanted, now) == {"/newyork/s:t[2]", "/newyork/s:t[3]", "/newyork/s:t[5]"}
    assert unheld_units(gateways, units, {"/newyork/s:t[0]"}, now) == set()


def test_the_watch_counts_the_plan_s_partitions_of_replica_topics_that_exist() -> None:
    src, dst = StreamPath("sanfrancisco", "/s"), StreamPath("newyork", "/s")
    lk = Link(src, CLUSTER, "u1", dst, "u2", False, "off", 0)
    units = {Unit(dst, t, p): [(lk, kafka_topic_name(src, t))] for t in ("a", "b") for p in range(2)}
    plan = Plan([lk], units, {(dst, "a"): 2, (dst, "b"): 2}, [])
    present = {kafka_topic_name(dst, "a")}  # b's replica topic is not there yet: no gateway could hold it
    reads: list[Cluster] = []

    def read(cluster: Cluster) -> dict[str, dict[str, Any]]:
        reads.append(cluster)
        return dict([gateway("g", ["/newyork/s:a[0]"])])

    watch = StallWatch(CLUSTER, lambda: (plan, present), read=read)
    assert watch.check_now() == 1 and watch.value == 1 and reads == [CLUSTER]
    assert StallWatch(CLUSTER, lambda: None, read=read).check_now() is None  # no plan yet: not known
