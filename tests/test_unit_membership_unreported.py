"""SlotGroup.dead_seats and a member of the slot group that never reported (found by tests/sim, seeds 1071, 1265,
1374): a destination crash lost every report of a gateway that then died, and on a broker that never expires dead
members (noida-db) the group waited for it for good."""

from __future__ import annotations

from typing import Any

import pytest
from test_unit_replication_membership import _group, _report

from streamrepl import statustopic
from streamrepl.replication import membership


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_780_000_000.0 + self.now


def test_a_member_without_a_report_is_adopted_once_it_stayed_without_one_past_a_reports_lifetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    made: list[Any] = []
    group = _group(True, made, "gw-new")
    group.join()
    monkeypatch.setattr(membership, "time", clock)
    monkeypatch.setattr(statustopic, "time", clock)
    reports = {"gateway|gw-new": _report("gw-new", 0) | {"updated": clock.time() * 1000}}
    members = ["gw-new", "gw-lost"]
    # First seen without a report: its report may be on its way (gateways report before they join).
    assert group.dead_seats(reports, members, {"gw-new"}) == []
    clock.now += statustopic.LIVE_SECONDS / 2
    reports["gateway|gw-new"]["updated"] = clock.time() * 1000
    assert group.dead_seats(reports, members, {"gw-new"}) == []
    # Still none past a live gateway's report lifetime: its reports were lost and it is gone.
    clock.now += statustopic.LIVE_SECONDS
    reports["gateway|gw-new"]["updated"] = clock.time() * 1000
    assert group.dead_seats(reports, members, {"gw-new"}) == ["gw-lost"]
    # A member that reports (late) is judged by its report again: alive, so not adopted.
    reports["gateway|gw-lost"] = {"gateway": "gw-lost", "updated": clock.time() * 1000, "slots": []}
    assert group.dead_seats(reports, members, {"gw-new"}) == []
