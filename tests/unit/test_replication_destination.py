"""The destination's internal topics watched (replication/destination.py): gone or misshapen is what a cluster that
came back empty looks like; repair makes them again as they must be. Fake admin calls: no broker."""

from __future__ import annotations

from typing import Any

import pytest

from streamrepl import kafka, statustopic
from streamrepl.errors import StreamreplError
from streamrepl.registry import Cluster
from streamrepl.replication import destination
from streamrepl.replication.destination import DestinationWatch, misshapen, repair
from streamrepl.replication.membership import SLOT_TOPIC, SLOTS

CLUSTER = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})
STATUS = statustopic.STATUS_TOPIC


def test_internal_topics_of_their_shape_are_fine_and_any_other_is_said() -> None:
    assert misshapen({SLOT_TOPIC: SLOTS, STATUS: 1, "other": 4}) == []
    assert misshapen({"other": 4}) == [f"topic {SLOT_TOPIC} is gone", f"topic {STATUS} is gone"]
    assert misshapen({SLOT_TOPIC: SLOTS, STATUS: 4}) == [f"topic {STATUS} has 4 partitions, not 1"]


class FakeCluster:
    """The topics of a cluster (name -> partitions) and what was done to them."""

    def __init__(self, topics: dict[str, int]):
        self.topics = dict(topics)
        self.done: list[tuple[str, str]] = []

    def install(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(kafka, "topics", lambda cluster, client=None: dict(self.topics))
        mp.setattr(kafka, "delete_topics", self.delete)
        mp.setattr(kafka, "create_shared_topic", lambda cluster, name, n: self.create(name, n))
        mp.setattr(kafka, "create_compacted_topic", lambda cluster, name: self.create(name, 1))

    def delete(self, cluster: Cluster, names: list[str]) -> None:
        for n in names:
            del self.topics[n]
            self.done.append(("delete", n))

    def create(self, name: str, partitions: int) -> None:
        self.topics[name] = partitions
        self.done.append(("create", name))


def test_repair_makes_the_missing_topics_and_remakes_a_misshapen_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster({STATUS: 4})
    fake.install(monkeypatch)
    assert repair(CLUSTER) == [f"topic {SLOT_TOPIC} is gone", f"topic {STATUS} has 4 partitions, not 1"]
    assert fake.topics == {SLOT_TOPIC: SLOTS, STATUS: 1}
    assert fake.done == [("create", SLOT_TOPIC), ("delete", STATUS), ("create", STATUS)]
    fake.done.clear()
    assert repair(CLUSTER) == [] and fake.done == [], "topics of their shape are left alone"


def test_the_watch_says_what_it_found_once_and_a_silent_destination_is_no_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[Any] = [{SLOT_TOPIC: SLOTS, STATUS: 1}, StreamreplError("cluster 'ny' does not answer"), {}]

    def topics(cluster: Cluster, client: Any = None) -> dict[str, int]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return dict(a)

    monkeypatch.setattr(kafka, "topics", topics)
    monkeypatch.setattr(kafka, "admin_client", lambda cluster: object())
    watch = DestinationWatch(CLUSTER)
    assert watch.look() == ""
    assert watch.look() == "", "a destination that does not answer is waited for"
    assert watch.look() == f"topic {SLOT_TOPIC} is gone; topic {STATUS} is gone"


def test_the_watch_thread_keeps_its_first_finding_until_it_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "topics", lambda cluster, client=None: {SLOT_TOPIC: SLOTS})
    monkeypatch.setattr(kafka, "admin_client", lambda cluster: object())
    watch = DestinationWatch(CLUSTER, period=0.01).start()
    try:
        for _ in range(500):
            found = watch.take()
            if found:
                break
            destination.threading.Event().wait(0.01)
        assert found == f"topic {STATUS} is gone"
    finally:
        watch.stop()
