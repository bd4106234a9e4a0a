"""The plan watcher (replication/watcher.py) with a fake planner and fake metadata ends: no broker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamrepl import kafka
from streamrepl.kafka import TopicPartition
from streamrepl.registry import Cluster
from streamrepl.replication import watcher
from streamrepl.replication.links import Plan
from streamrepl.replication.watcher import PlanWatcher

NY = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})
SF = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"})


class Ends:
    """The end of each cluster's metadata topic, moved by the test (a stream record written there)."""

    def __init__(self) -> None:
        self.ends = {"ny": 5, "sf": 7}
        self.asked = 0

    def consumer(self, cluster: Cluster) -> Any:
        ends = self

        class Watch:
            def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
                ends.asked += 1
                assert [tp.offset for tp in tps] == [kafka.LATEST]
                return [TopicPartition(tp.topic, tp.partition, ends.ends[cluster.name]) for tp in tps]

            def close(self) -> None:
                pass

        return Watch()


class FakePlanner:
    """Every read finds both clusters; `during_pass` runs once, after a read, while the watcher does the rest of its
    pass (topic listings, topic creation): a stream record written then must still be read soon."""

    def __init__(self, during_pass: Any = None, covered: bool = True) -> None:
        self.reads = 0
        self.listings = 0
        self.adoptions = 0
        #: whether the topics listed last hold every replica topic the plan needs
        self.covered = covered
        self.during_pass = during_pass
        self.read_again = threading.Event()

    def discover(self, known: Any = (), ends: Any = None) -> Plan:
        self.reads += 1
        if self.reads > 1:
            self.read_again.set()
        return Plan([], {}, {}, [], clusters=[NY, SF])

    def adopt_source_topics(self, plan: Plan) -> bool:
        self.adoptions += 1
        return False

    def covers(self, plan: Plan, present: set[str]) -> bool:
        return self.covered

    def ensure_topics(self, plan: Plan) -> set[str]:
        self.listings += 1
        if self.during_pass is not None:
            during, self.during_pass = self.during_pass, None
            during()
        return set()

    def close(self) -> None:
        pass


@pytest.fixture
def slow_backstops(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the change detection may bring a read: the periodic passes and the full-read backstop are far away.
    monkeypatch.setattr(watcher, "REFRESH_SECONDS", 60.0)
    monkeypatch.setattr(watcher, "FULL_READ_SECONDS", 600.0)


def run_until(w: PlanWatcher, done: threading.Event, timeout: float = 10.0) -> bool:
    w.start()
    try:
        return done.wait(timeout)  # a hang guard, not a time limit: the read comes within a few change polls
    finally:
        w.stop()


@contextlib.contextmanager
def watching(planner: FakePlanner, ends: Ends) -> Iterator[PlanWatcher]:
    """A plan watcher running over the fakes, stopped at the end."""
    w = PlanWatcher(planner, ends.consumer)  # type: ignore[arg-type]
    w.start()
    try:
        yield w
    finally:
        w.stop()


def set_periods(monkeypatch: pytest.MonkeyPatch, passes: float, listings: float) -> None:
    """The watcher's pass and listing periods; no full read during a test."""
    monkeypatch.setattr(watcher, "REFRESH_SECONDS", passes)
    monkeypatch.setattr(watcher, "LISTING_SECONDS", listings)
    monkeypatch.setattr(watcher, "FULL_READ_SECONDS", 600.0)


def wait_for(done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until done() (the timeout is a hang guard: the caller asserts)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_record_written_in_a_cluster_while_the_first_pass_runs_is_read(slow_backstops: None) -> None:
    # The plan's clusters are learned by its first read; their ends were taken only when the pass was over, so a
    # `replica resume` written into the source cluster meanwhile went unseen until the 30 s full read.
    ends = Ends()

    def resume_written() -> None:
        ends.ends["sf"] += 1

    planner = FakePlanner(during_pass=resume_written)
    w = PlanWatcher(planner, ends.consumer)  # type: ignore[arg-type]
    assert run_until(w, planner.read_again), "the record written during the first pass was never read"


def test_a_record_written_after_a_pass_is_read(slow_backstops: None) -> None:
    ends = Ends()
    planner = FakePlanner()
    with watching(planner, ends) as w:
        wait_for(lambda: w.published is not None, 10)
        assert w.published is not None
        asked = ends.asked
        wait_for(lambda: ends.asked >= asked + 4, 10)  # the watcher polls the ends again
        ends.ends["sf"] += 1
        assert planner.read_again.wait(10), "the change was never read"


def test_nothing_changed_means_no_read_and_no_listing(slow_backstops: None) -> None:
    ends = Ends()
    planner = FakePlanner()
    with watching(planner, ends):
        wait_for(lambda: ends.asked >= 20, 10)  # several change polls with the ends unmoved
        # A pass made while the clusters were learned may read once more; after that nothing moves, nothing is read.
        reads, listings = planner.reads, planner.listings
        asked = ends.asked
        wait_for(lambda: ends.asked >= asked + 10, 10)
        assert (planner.reads, planner.listings) == (reads, listings)


def changed_and_read(ends: Ends, planner: FakePlanner) -> None:
    """Run the watcher, let it settle, write a record into a cluster and wait until it was read."""
    with watching(planner, ends) as w:
        wait_for(lambda: w.published is not None and ends.asked >= 8, 10)
        reads = planner.reads
        ends.ends["sf"] += 1
        wait_for(lambda: planner.reads != reads, 10)
        # the pass after the read is over once the ends are asked for again
        wait_for(lambda: w.published is None or planner.reads <= reads or ends.asked >= 30, 10)
        assert planner.reads > reads, "the change was never read"


def test_a_change_whose_topics_were_listed_lately_is_published_without_listing_them_again(
    slow_backstops: None,
) -> None:
    # Between a `replica resume` and its first record the topic listings took 50 ms each on Tansu (even with a kept
    # client): a pass brought by a change lists again only when the plan needs a topic the last listing lacks, or
    # that listing is REFRESH_SECONDS old; strays made by plain Kafka clients are adopted at the periodic passes.
    ends = Ends()
    planner = FakePlanner()
    changed_and_read(ends, planner)
    assert (planner.listings, planner.adoptions) == (1, 1)


def test_a_change_that_needs_a_topic_not_listed_lists_and_makes_it(slow_backstops: None) -> None:
    ends = Ends()
    planner = FakePlanner(covered=False)
    changed_and_read(ends, planner)
    assert planner.listings >= 2


def test_the_periodic_pass_lists_and_adopts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    set_periods(monkeypatch, passes=0.2, listings=0.2)
    ends = Ends()
    planner = FakePlanner()
    with watching(planner, ends):
        wait_for(lambda: planner.listings >= 3 and planner.adoptions >= 3)
        assert planner.listings >= 3 and planner.adoptions >= 3


def test_a_pass_that_finds_nothing_new_lists_no_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 800 idle partitions the two topic listings every REFRESH_SECONDS were about a quarter of an idle gateway's
    Python samples with the end watch off: topics are listed every LISTING_SECONDS (a net for topics plain Kafka
    clients make: streamrepl's own are seen in the metadata log), and a change is read without a listing."""
    set_periods(monkeypatch, passes=0.05, listings=600.0)
    ends = Ends()
    planner = FakePlanner()
    with watching(planner, ends):
        wait_for(lambda: ends.asked >= 40)
        assert ends.asked >= 40  # several passes went by
        reads = planner.reads
        assert (planner.listings, planner.adoptions) == (1, 1)
        ends.ends["sf"] += 1  # a stream record: read at once, without listing
        wait_for(lambda: planner.reads != reads)
        assert (planner.reads, planner.listings) == (reads + 1, 1)
