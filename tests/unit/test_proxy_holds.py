"""The held Produce without brokers (streamrepl.proxy.sync, holds): a hold ends when the replica's end passes the
last offset written, falls back to asynchronous past the latency limit (a wait too long, a replica without progress),
ends unconfirmed at the request's own timeout, and a fallen-back link comes back once the replica caught up. The
clock is a fake that `sleep` moves on: nothing waits for real time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.proxy.holds import Holds, Target
from streamrepl.proxy.sync import ASYNC, CONFIRMED, TIMED_OUT, Limits, SyncLink

LIMITS = Limits(timeout=5.0, stall=2.0, recheck=1.0)
SOURCE, REPLICA = "/sf/s", "/ny/s"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)

    def wall(self) -> float:
        return 1_000_000.0 + self.now


class FakeReplica:
    """A replica partition whose end follows `end_at(now)`; counts the questions."""

    def __init__(self, clock: FakeClock, end_at: Callable[[float], int]):
        self.clock, self.end_at = clock, end_at
        self.questions = 0

    async def end(self, topic: str, p: int, needed: int) -> int:
        self.questions += 1
        return self.end_at(self.clock.now)


def _link(clock: FakeClock, replica: FakeReplica, changes: list[str] | None = None) -> SyncLink:
    return SyncLink(
        SOURCE,
        REPLICA,
        replica.end,
        LIMITS,
        clock=clock,
        sleep=clock.sleep,
        wall=clock.wall,
        on_change=(lambda link: changes.append(link.state.mode)) if changes is not None else None,
    )


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


def test_a_hold_ends_when_the_replica_holds_the_last_offset_written() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        # the gateway copies offsets 0-9 at 0.05 s, 10-19 at 0.3 s
        replica = FakeReplica(clock, lambda t: 20 if t >= 0.3 else 10 if t >= 0.05 else 0)
        link = _link(clock, replica)
        assert await link.hold({("t", 0): 9}, deadline=30) == CONFIRMED
        assert 0.05 <= clock.now < 0.06
        assert await link.hold({("t", 0): 19}, deadline=30) == CONFIRMED
        assert 0.3 <= clock.now < 0.31
        asked = replica.questions
        assert await link.hold({("t", 0): 15}, deadline=30) == CONFIRMED  # known to be there: no question
        assert replica.questions == asked and link.synchronous

    run(scenario())


def test_a_replica_without_progress_falls_back_and_the_next_produces_are_not_held() -> None:
    async def scenario() -> None:
        clock, changes = FakeClock(), []
        replica = FakeReplica(clock, lambda t: 0)  # no gateway
        link = _link(clock, replica, changes)
        assert await link.hold({("t", 0): 0}, deadline=30) == ASYNC
        assert LIMITS.stall <= clock.now < LIMITS.stall + 0.01
        assert not link.synchronous and link.state.fallbacks == 1 and "no progress" in link.state.why
        assert changes == ["async"]
        asked, when = replica.questions, clock.now
        assert await link.hold({("t", 0): 1}, deadline=30) == ASYNC
        assert clock.now == when and replica.questions == asked  # answered at once

    run(scenario())


def test_a_replica_too_slow_for_the_latency_limit_falls_back_after_the_timeout() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        replica = FakeReplica(clock, lambda t: int(t))  # one record a second: progress, never stalled
        link = _link(clock, replica)
        assert await link.hold({("t", 0): 100}, deadline=30) == ASYNC
        assert LIMITS.timeout < clock.now < LIMITS.timeout + 0.01
        assert "waited more than 5 s" in link.state.why

    run(scenario())


def test_a_hold_ends_unconfirmed_at_the_request_timeout_and_the_link_stays_synchronous() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        link = _link(clock, FakeReplica(clock, lambda t: 0))
        assert await link.hold({("t", 0): 0}, deadline=0.5) == TIMED_OUT
        assert 0.5 <= clock.now < 0.51 and link.synchronous and link.state.fallbacks == 0

    run(scenario())


def test_every_hold_waiting_is_answered_by_a_fallback() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        replica = FakeReplica(clock, lambda t: 3 if t >= 0.01 else 0)

        async def end(topic: str, p: int, needed: int) -> int:
            return await replica.end(topic, p, needed) if p == 0 else 0  # partition 1 gets nothing

        link = _link(clock, replica)
        link.end = end
        first = asyncio.ensure_future(link.hold({("t", 0): 2}, deadline=30))
        later = asyncio.ensure_future(link.hold({("t", 1): 0}, deadline=30))
        assert await first == CONFIRMED  # partition 0 got there; partition 1 never does
        assert await later == ASYNC and not link.waiters

    run(scenario())


def test_a_fallen_back_link_comes_back_once_the_replica_holds_what_was_written() -> None:
    async def scenario() -> None:
        clock, changes = FakeClock(), []
        ends = {"now": 0}
        replica = FakeReplica(clock, lambda t: ends["now"])
        link = _link(clock, replica, changes)
        assert await link.hold({("t", 0): 4}, deadline=30) == ASYNC
        assert await link.hold({("t", 0): 9}, deadline=30) == ASYNC  # written while asynchronous
        assert not await link.recheck()  # too early: checked every `recheck` seconds
        asked = replica.questions
        await clock.sleep(LIMITS.recheck)
        ends["now"] = 5
        assert not await link.recheck() and replica.questions == asked + 1  # not everything written is there
        await clock.sleep(LIMITS.recheck)
        ends["now"] = 10
        assert await link.recheck()
        assert link.synchronous and link.state.recoveries == 1 and changes == ["async", "sync"]
        ends["now"] = 11
        assert await link.hold({("t", 0): 10}, deadline=30) == CONFIRMED

    run(scenario())


# -- Holds: which Produces wait, for which links ---------------------------------------------------------------------
SYNC_STREAM = StreamPath("sf", "/s")
PLAIN_STREAM = StreamPath("sf", "/plain")


def _holds(clock: FakeClock, replica: FakeReplica, closed: list[str] | None = None) -> Holds:
    def make_end(target: Target) -> tuple[Any, Callable[[], None]]:
        return replica.end, lambda: (closed if closed is not None else []).append(target.replica)

    holds = Holds(
        "sf",
        lambda: {},
        make_end,
        LIMITS,
        proxy_id="p1",
        clock=clock,
        sleep=clock.sleep,
        wall=clock.wall,
    )
    holds.apply({SOURCE: [Target(SOURCE, REPLICA, StreamPath("ny", "/s"), None)]})
    return holds


def test_only_topics_of_a_stream_with_a_synchronous_replica_are_held() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        replica = FakeReplica(clock, lambda t: 8 if t >= 0.02 else 0)
        holds = _holds(clock, replica)
        sync_kt, plain_kt = kafka_topic_name(SYNC_STREAM, "orders"), kafka_topic_name(PLAIN_STREAM, "orders")
        assert holds.active and holds.links_of(sync_kt) is not None
        assert holds.links_of(plain_kt) is None and holds.links_of("not-a-stream-topic") is None
        # a Produce request is decoded only when a synchronous stream's topic prefix is in its bytes
        assert holds.may_hold(b"\x00\x10" + sync_kt.encode() + b"\x00records")
        assert not holds.may_hold(b"\x00\x10" + plain_kt.encode() + b"\x00records")

        assert await holds.hold({(plain_kt, 0): 100, ("other", 0): 5}, deadline=30)
        assert clock.now == 0 and replica.questions == 0 and holds.stats.held == 0  # not held up at all

        assert await holds.hold({(sync_kt, 0): 7, (plain_kt, 0): 100}, deadline=30)
        assert 0.02 <= clock.now < 0.03
        assert holds.stats.held == 1 and holds.stats.confirmed == 1 and holds.stats.seconds > 0

    run(scenario())


def test_a_replica_no_longer_synchronous_is_no_longer_waited_for() -> None:
    async def scenario() -> None:
        clock, closed = FakeClock(), []
        holds = _holds(clock, FakeReplica(clock, lambda t: 0), closed)
        kt = kafka_topic_name(SYNC_STREAM, "orders")
        link = holds.by_source[SOURCE][0]
        waiting = asyncio.ensure_future(holds.hold({(kt, 0): 0}, deadline=30))
        while not link.waiters:
            await asyncio.sleep(0)
        holds.apply({})
        assert not await waiting and clock.now < 0.02  # answered at once, unconfirmed
        assert not holds.active and closed == [REPLICA] and not holds.stats.links
        assert await holds.hold({(kt, 0): 0}, deadline=30)
        assert clock.now < 0.02

    run(scenario())


def test_the_fallback_of_another_proxy_is_followed_when_newer_than_this_ones_last_change() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        holds = _holds(clock, FakeReplica(clock, lambda t: 0))
        link = holds.by_source[SOURCE][0]
        now_ms = int(clock.wall() * 1000)

        def report(proxy: str, mode: str, since: int, updated: int = now_ms) -> dict[str, Any]:
            return {"proxy": proxy, "source": SOURCE, "replica": REPLICA, "mode": mode, "since": since,
                    "why": "no progress", "updated": updated}  # fmt: skip

        holds.follow_others({"a": report("p1", "async", now_ms + 1)})  # its own report
        holds.follow_others({"b": report("p2", "async", link.state.since_ms - 1)})  # before this one's last change
        holds.follow_others({"c": report("p2", "async", now_ms + 1, updated=now_ms - 60_000)})  # a proxy gone
        holds.follow_others({"e": {**report("p2", "async", now_ms + 1), "stopped": True}})  # a proxy stopped
        assert link.synchronous
        holds.follow_others({"d": report("p2", "async", now_ms + 1)})
        assert not link.synchronous and "proxy p2 fell back" in link.state.why
        assert [(k, v["mode"]) for k, v in holds.reports()] == [(f"proxy|p1|{SOURCE}|{REPLICA}", "async")]
        assert [v["stopped"] for _, v in holds.reports(stopped=True)] == [True]

    run(scenario())
