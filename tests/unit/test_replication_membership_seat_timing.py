"""When a dead gateway's seat may be adopted (replication/membership.py, on brokers that never expire a dead member):
once its report is overdue by a whole session (its next report was due REPORT_SECONDS after the last), not only
after statustopic.LIVE_SECONDS (15 s), which `cluster gateway list` uses and which made a takeover after a SIGKILL
on noida-db take 16-18 s with 6 s sessions."""

from __future__ import annotations

import time
from typing import Any

from streamrepl.kafka import brokers
from streamrepl.kafka.probes import BrokerTraits
from streamrepl.registry import Cluster
from streamrepl.replication.membership import SlotGroup
from streamrepl.replication.reports import REPORT_SECONDS
from streamrepl.replication.stats import GatewayStats

SESSION_S = 6.0


class _Consumer:
    def __init__(self, cluster: Cluster, group: str | None = None, **config: Any):
        self.config = config

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass


def _group(made: list[Any], gateway_id: str) -> SlotGroup:
    """A slot group with static members (a broker found to honour them, as noida-db), with fake consumers."""

    def new_consumer(cluster: Cluster, **kw: Any) -> Any:
        made.append(_Consumer(cluster, **kw))
        return made[-1]

    cluster = Cluster("ny", {"bootstrap.servers": "127.0.0.1:9"})
    brokers.learn(cluster, BrokerTraits(identity="x", static_rejoin=True, clean_leave=True, probed_at=1))
    return SlotGroup(
        cluster, gateway_id, int(SESSION_S * 1000), GatewayStats(gateway_id), lambda: None, lambda _: None, new_consumer
    )


def _report(gateway: str, age_s: float, **extra: Any) -> dict[str, Any]:
    return {"gateway": gateway, "updated": int((time.time() - age_s) * 1000), "slots": [1], **extra}


def _adopted(age_s: float, **extra: Any) -> list[str]:
    made: list[Any] = []
    group = _group(made, "gw-new")
    group.join()
    reports = {"gateway|gw-dead": _report("gw-dead", age_s, **extra), "gateway|gw-new": _report("gw-new", 0)}
    return group.adopt_dead(reports, ["gw-dead", "gw-new"])


def test_a_seat_is_adopted_once_its_gateways_report_is_overdue_by_a_session() -> None:
    assert _adopted(REPORT_SECONDS + SESSION_S + 1) == ["gw-dead"]


def test_a_seat_whose_gateway_reported_within_a_report_and_a_session_is_left_alone() -> None:
    assert _adopted(SESSION_S + 1) == []  # older than the session, but its next report may be on its way
    assert _adopted(REPORT_SECONDS + SESSION_S - 1) == []


def test_a_seat_held_by_a_gateway_whose_report_is_overdue_is_adopted_too() -> None:
    made: list[Any] = []
    group = _group(made, "gw-new")
    group.join()
    reports = {
        "gateway|gw-a": _report("gw-a", 60),
        "gateway|gw-b": _report("gw-b", REPORT_SECONDS + SESSION_S + 1, seats=["gw-a"]),
        "gateway|gw-new": _report("gw-new", 0),
    }
    assert group.adopt_dead(reports, ["gw-a", "gw-b", "gw-new"]) == ["gw-a", "gw-b"]
