"""The slot group (replication/membership.py) with a fake group consumer: no broker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from streamrepl import statustopic
from streamrepl.kafka import brokers
from streamrepl.kafka.probes import BrokerTraits
from streamrepl.paths import StreamPath
from streamrepl.registry import Cluster
from streamrepl.replication import membership
from streamrepl.replication.links import Unit
from streamrepl.replication.membership import SLOT_TOPIC, SLOTS, SlotGroup, slot_of
from streamrepl.replication.stats import GatewayStats


class FakeGroupConsumer:
    def __init__(self, cluster: Cluster, group: str | None = None, **config: Any):
        self.group, self.config = group, config
        self.subscribed: list[str] = []
        self.callbacks: dict[str, Any] = {}
        self.closed = False
        self.assigned: list[TopicPartition] = []
        self.paused: list[TopicPartition] = []

    def assign(self, parts: list[TopicPartition]) -> None:
        self.assigned, self.paused = list(parts), []

    def pause(self, parts: list[TopicPartition]) -> None:
        self.paused += parts

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed, self.callbacks = topics, callbacks

    def poll(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_slots_follow_assignments_and_revocations() -> None:
    events: list[Any] = []
    stats = GatewayStats("gw1")
    made: list[FakeGroupConsumer] = []

    def new_consumer(cluster: Cluster, **kw: Any) -> FakeGroupConsumer:
        made.append(FakeGroupConsumer(cluster, **kw))
        return made[-1]

    group = SlotGroup(
        Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"}),
        "gw1",
        6000,
        stats,
        lambda: events.append("assigned"),
        lambda lost: events.append(("give up", sorted(lost))),
        new_consumer,
    )
    group.join()
    (c,) = made
    assert c.group == "streamrepl-gateways-ny" and c.subscribed == [SLOT_TOPIC]
    assert c.config["session.timeout.ms"] == 6000 and c.config["partition.assignment.strategy"] == "roundrobin"

    c.callbacks["on_assign"](c, [TopicPartition(SLOT_TOPIC, p) for p in (1, 2, 3)])
    assert group.slots == {1, 2, 3} and events == ["assigned"]
    # Slots given up (or lost with the session): their partitions are let go before the slots are.
    c.callbacks["on_revoke"](c, [TopicPartition(SLOT_TOPIC, 2)])
    c.callbacks["on_lost"](c, [TopicPartition(SLOT_TOPIC, 3)])
    assert group.slots == {1} and events[1:] == [("give up", [2]), ("give up", [3])]
    assert stats.rebalances == 3

    assert group.abandon() == [c] and not c.closed, "kept open: closing would send LeaveGroup"
    group.leave()
    assert not c.closed


def test_every_partition_hashes_to_one_slot() -> None:
    units = [Unit(StreamPath("ny", "/s"), "t", p) for p in range(200)]
    slots = {slot_of(u) for u in units}
    assert all(0 <= s < SLOTS for s in slots) and len(slots) > SLOTS // 2, "spread over the slots"
    assert [slot_of(u) for u in units] == [slot_of(u) for u in units]


class _FatalError:
    def fatal(self) -> bool:
        return True

    def str(self) -> str:
        return "Broker: Static consumer fenced by other consumer with same group.instance.id"


class _FencedMessage:
    def error(self) -> _FatalError:
        return _FatalError()


def _group(
    static_rejoin: bool | None,
    made: list[Any],
    gateway_id: str = "gw1",
    leave: bool = False,
    reports: dict[str, dict[str, Any]] | None = None,
) -> SlotGroup:
    """A slot group on a cluster whose brokers were found to honour static members (True), rebalance on their return
    (False) or not probed (None)."""

    def new_consumer(cluster: Cluster, **kw: Any) -> Any:
        made.append(FakeGroupConsumer(cluster, **kw))
        return made[-1]

    cluster = Cluster("ny", {"bootstrap.servers": f"127.0.0.1:{len(made) + 1}"})
    brokers.learn(cluster, BrokerTraits(identity="x", static_rejoin=static_rejoin, clean_leave=leave, probed_at=1))
    stats = GatewayStats(gateway_id)
    if reports is None:
        reports = {"gateway|gw-other": {"gateway": "gw-other", "updated": time.time() * 1000, "seats": ["gw-taken"]}}
    return SlotGroup(
        cluster, gateway_id, 6000, stats, lambda: None, lambda _: None, new_consumer, gateway_reports=lambda: reports
    )


def test_gateways_join_as_static_members_unless_the_broker_rebalances_on_their_return() -> None:
    made: list[Any] = []
    _group(True, made).join()
    _group(False, made).join()
    _group(None, made).join()
    assert made[0].config["group.instance.id"] == "gw1"
    assert "group.instance.id" not in made[1].config, "Tansu: dynamic members, which it expires"
    assert made[2].config["group.instance.id"] == "gw1", "not probed: static, with adoption (needs no expiry)"


def _report(gateway: str, age_s: float, **extra: Any) -> dict[str, Any]:
    return {"gateway": gateway, "updated": int((time.time() - age_s) * 1000), "slots": [1], **extra}


def test_the_seat_of_a_dead_member_is_adopted_by_one_live_gateway() -> None:
    made: list[Any] = []
    group = _group(True, made, "gw-new")
    group.join()
    reports = {f"gateway|{g}": _report(g, age) for g, age in (("gw-dead", 60), ("gw-new", 0))}
    assert group.adopt_dead(reports, ["gw-dead", "gw-new"]) == ["gw-dead"]
    seat = made[-1]
    assert seat.config["group.instance.id"] == "gw-dead" and seat.group == "streamrepl-gateways-ny"
    assert group.seats == ["gw-dead"] and group.stats.seats_adopted == 1
    # Adopted once: the next look finds it held (by this gateway's report, or its own list).
    assert group.adopt_dead(reports, ["gw-dead", "gw-new"]) == []
    # Its slots count as this gateway's once its former holder had time to hear of its fence (HANDOVER_SECONDS): one
    # that was alive after all stops writing at its next heartbeat, before this gateway starts.
    replanned: list[bool] = []
    group._on_assigned = lambda: replanned.append(True)  # type: ignore[method-assign]
    seat.callbacks["on_assign"](seat, [TopicPartition(SLOT_TOPIC, p) for p in (5, 6)])
    made[0].callbacks["on_assign"](made[0], [TopicPartition(SLOT_TOPIC, 7)])
    assert group.slots == {7}
    group.poll()
    assert group.slots == {7}, "not yet handed over"
    group.adopted["gw-dead"].usable_at = time.monotonic() - 0.1
    replanned.clear()
    group.poll()
    assert group.slots == {5, 6, 7} and replanned == [True], "handed over: the plan is applied again"


def test_seats_that_are_not_dead_or_not_ours_to_take_are_left_alone() -> None:
    made: list[Any] = []
    group = _group(True, made, "gw1")
    group.join()
    reports = {
        "gateway|gw1": _report("gw1", 0),
        "gateway|gw2": _report("gw2", 1),  # alive
        "gateway|gw3": _report("gw3", 1, seats=["gw4"]),  # alive, holds gw4's seat
        "gateway|gw4": _report("gw4", 60),
        "gateway|gw5": _report("gw5", 60, stopped=True),
    }
    # gw6 has no report: a member that is not a gateway's yet (gateways report before they join).
    members = ["gw1", "gw2", "gw3", "gw4", "gw6"]
    assert group.adopt_dead(reports, members) == []
    # gw5 stopped without leaving and is still a member: dead. Exactly one of the live gateways adopts it.
    taken = []
    for me in ("gw1", "gw2", "gw3"):
        g = _group(True, made, me)
        g.join()
        taken += g.adopt_dead(reports, [*members, "gw5"])
    assert taken == ["gw5"]


def test_a_gateway_whose_own_report_is_as_late_adopts_no_seat() -> None:
    """Its destination failed or was cut off from it: every report is late, the others' for the same reason as its
    own, not because they died (tests/sim seed 71: gateways on a flaky destination adopted each other's seats, fenced
    live ones and wrote their partitions before those saw the fence)."""
    made: list[Any] = []
    group = _group(True, made, "gw1")
    group.join()
    late = {f"gateway|{g}": _report(g, 30) for g in ("gw1", "gw2")}
    assert group.adopt_dead(late, ["gw1", "gw2"]) == []
    assert group.adopt_dead({k: v for k, v in late.items() if k != "gateway|gw1"}, ["gw1", "gw2"]) == []
    late["gateway|gw1"] = _report("gw1", 0)  # its own reports get through again: gw2's are late for its own reasons
    assert group.adopt_dead(late, ["gw1", "gw2"]) == ["gw2"]


def test_dynamic_members_adopt_nothing() -> None:
    made: list[Any] = []
    group = _group(False, made, "gw1")
    group.join()
    assert group.adopt_dead({"gateway|gw2": _report("gw2", 60)}, ["gw2"]) == []


def test_an_adopted_seat_whose_gateway_came_back_is_let_go_quietly() -> None:
    made: list[Any] = []
    lost: list[set[int]] = []
    group = _group(True, made, "gw1")
    group._on_give_up = lost.append  # type: ignore[method-assign]
    group.join()
    group.adopt_dead({"gateway|gw1": _report("gw1", 0), "gateway|gw2": _report("gw2", 60)}, ["gw1", "gw2"])
    seat = made[-1]
    seat.callbacks["on_assign"](seat, [TopicPartition(SLOT_TOPIC, 9)])
    seat.poll = lambda timeout: _FencedMessage()
    group.poll()  # no error: the fence was the seat's, not this gateway's
    assert group.seats == [] and group.slots == set() and lost == [{9}] and seat.closed


def test_a_gateway_fenced_by_another_with_its_id_stops_with_a_clear_error() -> None:
    import os

    import pytest

    from streamrepl.errors import StreamreplError

    made: list[Any] = []
    # The other gateway reports under the id before it joins (another process, or host): that is what says so.
    other = {"gateway": "gw1", "updated": time.time() * 1000, "pid": os.getpid() + 1, "host": "elsewhere"}
    group = _group(True, made, reports={"gateway|gw1": other})
    group.join()
    made[0].poll = lambda timeout: _FencedMessage()
    with pytest.raises(StreamreplError, match="another gateway was started with -id gw1"):
        group.poll()
    group.leave()  # nothing left to leave: the fenced consumer is not used again
    assert made[0].closed is False


def test_the_slots_are_never_fetched() -> None:
    """The slot topic only shares the work out: its partitions are assigned and paused, so the group consumer does
    not fetch them (it did, every 10 ms: 64 empty partitions, most of an idle destination broker's CPU)."""
    made: list[FakeGroupConsumer] = []
    group = SlotGroup(
        Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"}),
        "gw1",
        6000,
        GatewayStats("gw1"),
        lambda: None,
        lambda lost: None,
        lambda cluster, **kw: made.append(FakeGroupConsumer(cluster, **kw)) or made[-1],
    )
    group.join()
    parts = [TopicPartition(SLOT_TOPIC, p) for p in (1, 2, 3)]
    made[0].callbacks["on_assign"](made[0], parts)
    assert [tp.partition for tp in made[0].assigned] == [1, 2, 3]
    assert [tp.partition for tp in made[0].paused] == [1, 2, 3]


def test_the_partitions_of_a_topic_spread_evenly_over_members_under_round_robin() -> None:
    # The round-robin assignor deals the slots out in turn: member i of n gets the slots s with s % n == i.
    # (4 partitions split evenly under the old hash of each partition's key too: CRC32 is linear, and keys that
    # differ in one digit differ in their low bits; 12 or 16 split unevenly over 4 members for half the topics.)
    for topic in ("t", "orders", "clicks", "a-much-longer-topic-name"):
        for partitions, members in ((4, 2), (4, 4), (12, 4), (16, 4), (16, 8)):
            counts = [0] * members
            for p in range(partitions):
                counts[slot_of(Unit(StreamPath("ny", "/s1"), topic, p)) % members] += 1
            assert counts == [partitions // members] * members, (topic, partitions, members, counts)


def test_a_gateway_whose_seat_a_live_gateway_took_stops_to_start_again_not_for_good() -> None:
    """Frozen past its reports, its seat was adopted and the broker fenced it: that is not a duplicate -id (final),
    but a stop after which its supervisor starts it again, and it takes its seat back."""
    import pytest

    from streamrepl.replication.membership import GatewayFenced, SeatTaken

    made: list[Any] = []
    group = _group(True, made, "gw-taken")
    group.join()
    made[0].poll = lambda timeout: _FencedMessage()
    with pytest.raises(SeatTaken, match="gateway gw-other took its seat") as e:
        group.poll()
    assert not isinstance(e.value, GatewayFenced)


def test_a_fenced_gateway_whose_adopters_report_is_not_out_yet_stops_to_start_again() -> None:
    """The destination failed for longer than a report lives: a live gateway's reports went stale, another adopted its
    seat, and the fence came before the adopter's report naming the seat (tests/sim seeds 71, 445, 2815...). No report
    says another process runs under this id: a stop to start again (SeatTaken), not the final GatewayFenced."""
    import pytest

    from streamrepl.replication.membership import GatewayFenced, SeatTaken

    made: list[Any] = []
    group = _group(True, made, "gw-alone")
    group.join()
    made[0].poll = lambda timeout: _FencedMessage()
    with pytest.raises(SeatTaken) as e:
        group.poll()
    assert not isinstance(e.value, GatewayFenced)


# -- members that never reported ----------------------------------------
# SlotGroup.dead_seats (found by tests/sim, seeds 1071, 1265, 1374): a destination crash lost every report of a
# gateway that then died, and on a broker that never expires dead members (noida-db) the group waited for it for good.
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


def test_a_fence_whose_cause_is_not_reported_yet_is_looked_at_again_before_the_gateway_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second gateway started with the same -id reports before it joins, but its report may land after the fence
    it brings (noida-db takes the id from the first at once): the first read still shows this gateway's own report,
    and it stopped as if its seat had been adopted, to start again and fence the other in turn (CI, test_gateway_handoff
    on noida-db). The reports are read again for a few seconds before the fence is judged."""
    import os
    import socket

    from streamrepl.replication.membership import GatewayFenced

    made: list[Any] = []
    mine = {"gateway": "dup", "updated": time.time() * 1000, "pid": os.getpid(), "host": socket.gethostname()}
    reports: dict[str, dict[str, Any]] = {"gateway|dup": mine}
    group = _group(True, made, "dup", reports=reports)
    group.join()
    made[0].poll = lambda timeout: _FencedMessage()
    other = {"gateway": "dup", "updated": time.time() * 1000, "pid": os.getpid() + 1, "host": "elsewhere"}
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        reports["gateway|dup"] = other  # the other's report lands
        real_sleep(0)

    monkeypatch.setattr(membership.time, "sleep", sleep)
    with pytest.raises(GatewayFenced, match="give each gateway its own -id"):
        group.poll()


def test_a_seat_whose_rebalance_never_ends_joins_again_under_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """On noida-db, one new gateway that adopted the seats of three dead ones saw two of its seats assigned, then a
    rebalance that never ended (CI, test_all_three_die_and_one_new_gateway_takes_everything: no assignment for 150 s).
    A seat (its own or an adopted one) left without an assignment for two sessions and a few seconds after its join
    or its last revoke joins again under its id, as a join that got no answer already did."""
    clock = Clock()
    monkeypatch.setattr(membership, "time", clock)
    made: list[Any] = []
    group = _group(True, made, "gw1")
    group.join()
    own = made[0]
    own.callbacks["on_assign"](own, [TopicPartition(SLOT_TOPIC, 1)])
    reports = {"gateway|gw1": {"gateway": "gw1", "updated": clock.time() * 1000}, "gateway|gw2": {"gateway": "gw2"}}
    group.adopt_dead(reports, ["gw1", "gw2"])
    seat = made[-1]
    own.callbacks["on_revoke"](own, [TopicPartition(SLOT_TOPIC, 1)])
    seat.callbacks["on_revoke"](seat, [])
    limit = 2 * group.session_ms / 1000 + membership.JOIN_PATIENCE_SECONDS
    clock.now += limit / 2
    group.poll()
    assert len(made) == 2, "a rebalance may take a while"
    clock.now += limit
    group.poll()
    assert len(made) == 4, "both seats joined again"
    assert made[2].config.get("group.instance.id") == "gw1" and made[3].config.get("group.instance.id") == "gw2"
    assert own.closed and seat.closed
