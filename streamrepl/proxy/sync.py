"""The held Produce: a Produce response held until every synchronous replica of the stream holds the records.

For each Produce the proxy passes whose topics belong to a stream with a synchronous replica (not paused), the
broker's response is held until each such replica's partitions are past the last offset written (the base offset
of each partition in the response + the records the request carried for it - 1), then answered unchanged.

- The replica's ends are read as streamrepl's own producer reads them (replica_end.ReplicaEnds): on a thread of its
  own per replica, one question at a time; a link asks only about the partitions someone waits for.
- A hold ends, at the latest, at the Produce request's own timeout (its timeout_ms from when it came): the response
  is then answered as it came, unconfirmed; the proxy never retries nor answers an error of its own.
- Past the latency limit (a Produce waited `timeout` seconds for the replica, or the replica's partitions made no
  progress for `stall` seconds: no gateway alive), replication to that replica falls back to asynchronous: every
  hold waiting for it is answered, and the next Produces are answered at once. Every `recheck` seconds a fallen-back
  link checks whether the replica holds everything written through this proxy since; then it is synchronous again.
  As the producer's (client/producer.py) fallback, logged as a warning and counted; shown in the proxy's metrics
  and, through reports in the status topic of the proxy's cluster (`proxy|...`), in `replica list`. A proxy that
  reads another live proxy's report of a fallback newer than its own last change falls back too: the fallback is
  shared by every proxy of the cluster.
- Transactional Produces are not held (the gateway reads committed records only: they reach the replica once the
  transaction commits): what they wrote is remembered per transactional id (holds.py), and the EndTxn response that
  commits the transaction is held instead, until the replicas hold those records (server.py).

Time is an injected clock (`clock`, `sleep`), so the unit tests run with no real waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..replica_end import SYNC_RECHECK, SYNC_STALL, SYNC_TIMEOUT

log = logging.getLogger("streamrepl.proxy")

#: A partition of a stream: (stream topic name, partition).
Key = tuple[str, int]
#: How the end of a replica partition is read: (topic, partition, the offset waited for) -> the end known.
EndReader = Callable[[str, int, int], Awaitable[int]]

#: How often a link asks for the ends of the partitions someone waits for, as the producer's loop does.
POLL_SECONDS = 0.002

CONFIRMED, ASYNC, TIMED_OUT = "confirmed", "async", "timeout"


@dataclass(frozen=True)
class Limits:
    """The latency limit of synchronous replication (the same defaults as streamrepl's own producer)."""

    timeout: float = SYNC_TIMEOUT
    stall: float = SYNC_STALL
    recheck: float = SYNC_RECHECK


@dataclass(eq=False)
class _Waiter:
    need: dict[Key, int]  # the last offset written, per partition
    started: float
    deadline: float
    done: asyncio.Future[str]


@dataclass
class LinkState:
    """What is shown of a link: its mode, since when (wall clock, ms), why it fell back, and its counts."""

    mode: str = "sync"
    since_ms: int = 0
    why: str = ""
    fallbacks: int = 0
    recoveries: int = 0


class SyncLink:
    """The holds of one (source stream, synchronous replica) pair."""

    def __init__(
        self,
        source: str,
        replica: str,
        end: EndReader,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[SyncLink], None] | None = None,
    ):
        self.source, self.replica = source, replica
        self.end, self.limits = end, limits
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.on_change = on_change
        self.state = LinkState(since_ms=int(wall() * 1000))
        #: the replica's ends as far as read
        self.known: dict[Key, int] = {}
        #: the last offset written through this proxy per partition (what a recovery waits for)
        self.written: dict[Key, int] = {}
        self.waiters: list[_Waiter] = []
        self.progress = float("-inf")
        self.last_check = clock()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"{self.source}->{self.replica}"

    @property
    def synchronous(self) -> bool:
        return self.state.mode == "sync"

    def _held(self, need: dict[Key, int]) -> bool:
        return all(self.known.get(k, 0) > o for k, o in need.items())

    async def hold(self, need: dict[Key, int], deadline: float) -> str:
        """Wait until the replica holds `need` (partition -> last offset written): CONFIRMED; ASYNC when the link is
        (or falls back to) asynchronous; TIMED_OUT at `deadline` (the request's own timeout)."""
        for k, o in need.items():
            self.written[k] = max(self.written.get(k, -1), o)
        if not self.synchronous:
            return ASYNC
        if self._held(need):
            return CONFIRMED
        waiter = _Waiter(need, self.clock(), deadline, asyncio.get_running_loop().create_future())
        self.waiters.append(waiter)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._follow())
        return await waiter.done

    def _finish(self, waiter: _Waiter, outcome: str) -> None:
        self.waiters.remove(waiter)
        if not waiter.done.done():
            waiter.done.set_result(outcome)

    async def _follow(self) -> None:
        """Read the ends waited for until no hold is left."""
        while self.waiters:
            wanted: dict[Key, int] = {}
            for w in self.waiters:
                for k, o in w.need.items():
                    if self.known.get(k, 0) <= o:
                        wanted[k] = max(wanted.get(k, -1), o)
            for (topic, p), o in wanted.items():
                try:
                    end = await self.end(topic, p, o)
                except Exception as e:  # noqa: BLE001 - a replica not answering is no progress
                    log.debug("end of %s:%s[%d] not read: %s", self.replica, topic, p, e)
                    continue
                if end > self.known.get((topic, p), 0):
                    self.known[(topic, p)] = end
                    self.progress = self.clock()
            now = self.clock()
            for w in list(self.waiters):
                if self._held(w.need):
                    self._finish(w, CONFIRMED)
                elif now - w.started > self.limits.timeout:
                    self.fall_back(f"a Produce waited more than {self.limits.timeout:g} s for the replica")
                elif now - max(w.started, self.progress) > self.limits.stall:
                    self.fall_back(f"the replica made no progress for {self.limits.stall:g} s (no gateway alive?)")
                elif now >= w.deadline:
                    self._finish(w, TIMED_OUT)
            if self.waiters:
                await self.sleep(POLL_SECONDS)

    def fall_back(self, why: str, since_ms: int | None = None) -> None:
        """Answer every hold now and the next Produces at once, until a recheck finds the replica caught up."""
        if not self.synchronous:
            return
        self.state.mode, self.state.why = "async", why
        self.state.since_ms = since_ms if since_ms is not None else int(self.wall() * 1000)
        self.state.fallbacks += 1
        self.last_check = self.clock()
        log.warning(
            "synchronous replication of %s to %s falls back to asynchronous: %s", self.source, self.replica, why
        )
        for w in list(self.waiters):
            self._finish(w, ASYNC)
        if self.on_change is not None:
            self.on_change(self)

    def release(self) -> None:
        """Answer every hold now, unconfirmed: the replica is no longer synchronous (or no longer this stream's)."""
        for w in list(self.waiters):
            self._finish(w, ASYNC)

    async def recheck(self) -> bool:
        """When asynchronous and `recheck` seconds passed since the last check: whether the replica now holds every
        record written through the proxy, and if so synchronous again. Whether the link is synchronous."""
        if self.synchronous or self.clock() - self.last_check < self.limits.recheck:
            return self.synchronous
        self.last_check = self.clock()
        for (topic, p), o in list(self.written.items()):
            try:
                end = await self.end(topic, p, o)
            except Exception:  # noqa: BLE001 - not answering: not caught up
                return False
            self.known[(topic, p)] = max(self.known.get((topic, p), 0), end)
            if end <= o:
                return False
        self.state.mode, self.state.why = "sync", ""
        self.state.since_ms = int(self.wall() * 1000)
        self.state.recoveries += 1
        self.progress = self.clock()
        log.warning("synchronous replication of %s to %s is back", self.source, self.replica)
        if self.on_change is not None:
            self.on_change(self)
        return True


@dataclass
class HoldStats:
    """What the holds did, for the metrics."""

    held: int = 0  # Produce responses held
    confirmed: int = 0  # answered once every synchronous replica held the records
    unconfirmed: int = 0  # answered without: a link asynchronous, or the request's timeout
    transactional: int = 0  # transactional Produces to synchronous topics, answered at once (their EndTxn is held)
    end_txn: int = 0  # EndTxn responses (commits of transactions that wrote synchronous topics) held
    seconds: float = 0.0  # the time responses were held, summed
    links: dict[str, LinkState] = field(default_factory=dict)


async def hold_all(links: list[SyncLink], need: dict[Key, int], deadline: float) -> bool:
    """Hold until every link holds `need`; whether every one confirmed it."""
    if len(links) == 1:
        return await links[0].hold(need, deadline) == CONFIRMED
    outcomes = await asyncio.gather(*(link.hold(need, deadline) for link in links))
    return all(o == CONFIRMED for o in outcomes)
