"""SourceFeeds' spare consumers (spares.py, through SourceFeeds.keep_spares): no broker."""

from __future__ import annotations

import threading
import time
from typing import Any

from streamrepl.paths import StreamPath
from streamrepl.registry import Cluster
from streamrepl.replication.feeds import SourceFeeds
from streamrepl.replication.lanes import SOURCE_CONSUMERS, strand_name
from streamrepl.replication.links import Link

SF = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"})
TOKYO = Cluster("tokyo", {"bootstrap.servers": "127.0.0.1:2"})


class Consumers:
    """Made consumers, in order: each asks for an end once (the spare's warm-up) and can be closed."""

    def __init__(self, first_request_seconds: float = 0.0) -> None:
        self.made: list[Any] = []
        self.lock = threading.Lock()
        self.first_request_seconds = first_request_seconds

    def __call__(self, cluster: Cluster, **settings: Any) -> Any:
        made = self

        class Consumer:
            def __init__(self) -> None:
                self.cluster, self.asked, self.closed = cluster.name, 0, False

            def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
                if not self.asked:
                    time.sleep(made.first_request_seconds)
                self.asked += 1
                return tps

            def list_topics(self, topic: str | None = None, timeout: float = 0) -> None:
                pass

            def close(self) -> None:
                self.closed = True

        c = Consumer()
        with made.lock:
            made.made.append(c)
        return c


def link(cluster: Cluster, stream: str = "/s") -> Link:
    return Link(StreamPath(cluster.name, stream), cluster, "u", StreamPath("ny", stream), "v", False, "", 0)


def spare_of(feeds: SourceFeeds, made: Consumers, n: int) -> None:
    deadline = time.monotonic() + 10  # a hang guard, not a time limit
    while len(made.made) < n or any(c.asked == 0 for c in made.made):
        assert time.monotonic() < deadline, "no spare was made"
        time.sleep(0.005)
    time.sleep(0.05)  # the warming thread files it


def test_a_resumed_link_takes_the_spare_consumer_of_its_cluster() -> None:
    # A new consumer costs four round trips before its first fetch: across a WAN most of the time from `replica
    # resume` to its first record (issue 28). The spare was connected (it asked for an end) before it was needed.
    made = Consumers()
    feeds = SourceFeeds(made)
    feeds.keep_spares([SF])
    spare_of(feeds, made, 1)
    (spare,) = made.made
    assert spare.cluster == "sf" and spare.asked == 1
    assert feeds.ready(link(SF), "t", 0) is True
    assert feeds.consumers == {strand_name("sf#0", 0): spare}
    assert len(made.made) == 1
    # Another link of the same source stream takes the cluster's next lane: a consumer of its own, made now.
    second = Link(StreamPath("sf", "/s"), SF, "u", StreamPath("ny", "/s2"), "v2", False, "", 0)
    feeds.ready(second, "t", 0)
    assert len(made.made) == 2 and not made.made[1].asked


def test_spares_are_closed_when_no_longer_asked_for_and_with_the_feeds() -> None:
    made = Consumers()
    feeds = SourceFeeds(made)
    feeds.keep_spares([SF, TOKYO])
    spare_of(feeds, made, 2)
    feeds.keep_spares([SF, TOKYO])  # asked again (every plan): none made twice
    time.sleep(0.05)
    assert len(made.made) == 2
    feeds.keep_spares([SF])
    assert [c.closed for c in made.made if c.cluster == "tokyo"] == [True]
    feeds.close()
    assert all(c.closed for c in made.made)


def test_a_spare_tells_how_far_its_source_is_as_a_new_consumer_would() -> None:
    """The fan of a lane the registry names none for comes from how long its first consumer's first request took
    (lanes.lookup_fan). A spare is connected already: its lookup took one round trip, under the long-line mark at
    50 ms, and a lane across a 50 ms line got one consumer instead of four (bench/wan.py at ed12d2b: 73k/s, a lone
    consumer's ceiling). The spare's own first request, timed when it was made, says it instead."""
    made = Consumers(first_request_seconds=0.12)  # a new client's first request across a long line
    feeds = SourceFeeds(made)
    feeds.keep_spares([SF])
    spare_of(feeds, made, 1)
    for p in range(SOURCE_CONSUMERS):
        assert feeds.ready(link(SF), "t", p) is True
    assert len(feeds.consumers) == SOURCE_CONSUMERS
