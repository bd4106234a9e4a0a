"""The plan watcher's change poll when a cluster's metadata topic could not be read (issue 28).

A gateway started before its destination's first stream found no metadata topic there, and its kept end-check
client went on answering "unknown partition" after the topic was made (seen through a 50 ms delay line: every end
check failed for as long as the gateway ran). The watcher then never saw a change in that cluster, waited
REFRESH_SECONDS and read everything on each pass: `replica resume` took 1.8-2.4 s to its first record instead of
0.6-0.7 s. A client whose end check failed is replaced.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from streamrepl.kafka import KafkaError, KafkaException, TopicPartition
from streamrepl.registry import Cluster
from streamrepl.replication import watcher
from streamrepl.replication.links import Plan
from streamrepl.replication.watcher import PlanWatcher

NY = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})
SF = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"})


class Clients:
    """The first client made never finds the topic (as the kept one did); those made after it do."""

    def __init__(self) -> None:
        self.made = 0
        self.closed = 0

    def consumer(self, cluster: Cluster) -> Any:
        clients = self
        clients.made += 1
        stale = clients.made == 1

        class Watch:
            def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
                if stale:
                    raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
                return [TopicPartition(tp.topic, tp.partition, 3) for tp in tps]

            def close(self) -> None:
                clients.closed += 1

        return Watch()


def test_a_client_whose_end_check_failed_is_replaced() -> None:
    clients = Clients()
    w = PlanWatcher(planner=None, new_consumer=clients.consumer)  # type: ignore[arg-type]  # only its end checks
    assert w._metadata_ends([NY]) == {"ny": -1}
    assert w._metadata_ends([NY]) == {"ny": 3}
    assert w._metadata_ends([NY]) == {"ny": 3}
    assert (clients.made, clients.closed) == (2, 1)  # the failed one closed; the good one kept


class Events:
    """The end asks (cluster, end answered) and the reads, in order; the source's end moved by the test."""

    def __init__(self) -> None:
        self.ends = {"ny": 5, "sf": 7}
        self.log: list[tuple[str, ...]] = []
        #: the ends each read was given (Planner.discover's `ends`)
        self.read_ends: list[dict[str, int] | None] = []
        self.lock = threading.Lock()

    def consumer(self, cluster: Cluster) -> Any:
        events = self

        class Watch:
            def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
                with events.lock:
                    end = events.ends[cluster.name]
                    events.log.append(("ask", cluster.name, str(end)))
                return [TopicPartition(tp.topic, tp.partition, end) for tp in tps]

            def close(self) -> None:
                pass

        return Watch()


class Planner:
    def __init__(self, events: Events) -> None:
        self.events = events

    def discover(self, known: Any = (), ends: dict[str, int] | None = None) -> Plan:
        with self.events.lock:
            self.events.log.append(("read",))
            self.events.read_ends.append(None if ends is None else dict(ends))
        return Plan([], {}, {}, [], clusters=[NY, SF])

    def adopt_source_topics(self, plan: Plan) -> bool:
        return False

    def covers(self, plan: Plan, present: set[str]) -> bool:
        return True

    def ensure_topics(self, plan: Plan) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def test_a_change_is_read_without_asking_for_the_ends_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The change poll has just taken every end: asking again before the read cost a round trip to each cluster
    # (50 ms of `replica resume` to its first record through a 50 ms line, issue 28).
    monkeypatch.setattr(watcher, "REFRESH_SECONDS", 60.0)
    monkeypatch.setattr(watcher, "FULL_READ_SECONDS", 600.0)
    events = Events()
    w = PlanWatcher(Planner(events), events.consumer)  # type: ignore[arg-type]
    w.start()
    try:
        deadline = time.monotonic() + 30  # hang guards, not time limits
        while len(events.log) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        with events.lock:
            events.ends["sf"] += 1  # a `replica resume` written into the source
            seen = len(events.log)
        while ("read",) not in events.log[seen:] and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        w.stop()
    after = events.log[seen:]
    assert ("read",) in after, "the change was never read"
    before_read = after[: after.index(("read",))]
    # The asks before the read: those of the change poll that saw it (one per cluster), none after it.
    assert before_read[-1] == ("ask", "sf", "8") or before_read[-2:] == [("ask", "sf", "8"), ("ask", "ny", "5")]
    assert sum(1 for e in before_read if e == ("ask", "sf", "8")) == 1


def test_a_change_is_read_up_to_the_ends_the_poll_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    # The read may stop at those ends: fetching on until a fetch came back empty (end-of-partition), and asking for
    # the end again, each cost a round trip between `replica resume` and its first record (issue 28).
    monkeypatch.setattr(watcher, "REFRESH_SECONDS", 60.0)
    monkeypatch.setattr(watcher, "FULL_READ_SECONDS", 600.0)
    events = Events()
    w = PlanWatcher(Planner(events), events.consumer)  # type: ignore[arg-type]
    w.start()
    try:
        deadline = time.monotonic() + 30  # hang guards, not time limits
        while len(events.log) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        with events.lock:
            events.ends["sf"] += 1
            reads = len(events.read_ends)
        while len(events.read_ends) == reads and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        w.stop()
    assert events.read_ends[0] in (None, {})  # the first read has no ends taken before it
    assert events.read_ends[reads:][:1] == [{"ny": 5, "sf": 8}]
