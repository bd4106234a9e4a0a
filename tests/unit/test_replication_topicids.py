"""TopicIds (replication/topicids.py): which topics a long-lived consumer must ask for before it reads them again."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from streamrepl.replication.topicids import TopicIds


class Metadata:
    """Answers a Metadata request for one topic after `delay` seconds; counts the requests and how many were on the
    wire at once."""

    def __init__(self, topics: set[str], delay: float = 0.05) -> None:
        self.topics, self.delay = topics, delay
        self.asked: list[str | None] = []
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        with self._lock:
            self.asked.append(topic)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
        found = {t: SimpleNamespace(error=None, partitions={0: None}) for t in self.topics if t == topic}
        return SimpleNamespace(topics=found)


def read_and_let_go(ids: TopicIds, c: Metadata, topics: list[str]) -> None:
    for t in topics:
        assert ids.ready("lane", c, t) is True  # type: ignore[arg-type]
        ids.let_go("lane", t)


def test_a_topic_let_go_is_asked_for_before_it_is_read_again() -> None:
    ids, c = TopicIds(), Metadata({"a"})
    read_and_let_go(ids, c, ["a"])
    assert c.asked == []
    assert ids.ready("lane", c, "a") is True  # type: ignore[arg-type]
    assert c.asked == ["a"]
    assert ids.ready("lane", c, "a") is True  # type: ignore[arg-type]
    assert c.asked == ["a"], "asked once"


def test_topics_let_go_are_asked_for_together_ahead() -> None:
    """A takeover of a stream's topics across a 50 ms line asked for each topic in series (issue 28)."""
    topics = ["a", "b", "c", "d"]
    ids, c = TopicIds(), Metadata({"a", "b", "c"})
    read_and_let_go(ids, c, topics)
    ids.ask_ahead("lane", c, set(topics))  # type: ignore[arg-type]
    assert sorted(t for t in c.asked if t) == topics
    assert c.most_in_flight > 1, "the requests were on the wire together"
    asked = len(c.asked)
    assert [ids.ready("lane", c, t) for t in topics[:3]] == [True, True, True]  # type: ignore[arg-type]
    assert len(c.asked) == asked, "the topics found ahead are not asked for again"
    assert ids.ready("lane", c, "d") == "unread", "a topic not found is left to ready(), which says so"  # type: ignore[arg-type]
