"""The lifetime of the admin clients kept for group requests (kafka/groups.py, GroupAdmin), with fake clients.

The rule (issue 38): a client one of whose group requests ended without the broker's answer is let go (librdkafka
2.16 aborts the process when the broker comes back while it exists), and only once every future of the call has
settled (a client destroyed with requests in flight aborts too); a broker's answer, even a refusal, keeps it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from streamrepl import kafka
from streamrepl.errors import StreamreplError
from streamrepl.kafka import clients
from streamrepl.kafka.groups import GroupAdmin, unanswered
from streamrepl.registry import Cluster

CLUSTER = Cluster("newyork", {"bootstrap.servers": "127.0.0.1:1"})
TIMED_OUT = KafkaError._TIMED_OUT


class Future:
    """A request's future: its answer (or error), and a line in `events` when it is waited for."""

    def __init__(self, events: list[str], name: str, value: Any = None, error: int | None = None) -> None:
        self.events, self.name, self.value, self.error = events, name, value, error

    def result(self, timeout: float | None = None) -> Any:
        self.events.append(f"settled {self.name}")
        if self.error is not None:
            raise KafkaException(KafkaError(self.error))
        return self.value


class Answer:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update({"members": [], "state": ConsumerGroupState.EMPTY, "topic_partitions": [], **kw})


class FakeAdmin:
    """An admin client whose requests fail with `errors[group]` (a librdkafka code); its destruction is an event."""

    def __init__(self, events: list[str], errors: dict[str, int]) -> None:
        self.events, self.errors = events, errors
        weakref.finalize(self, events.append, "destroyed")

    def _future(self, g: str, value: Any) -> Future:
        return Future(self.events, g, value, self.errors.get(g))

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future]:
        return {g: self._future(g, Answer(group_id=g)) for g in groups}

    def list_consumer_group_offsets(self, req: list[Any], request_timeout: float) -> dict[str, Future]:
        g = req[0].group_id
        return {g: self._future(g, Answer(group_id=g, topic_partitions=[TopicPartition("t", 0, 5)]))}

    def alter_consumer_group_offsets(self, req: list[Any], request_timeout: float) -> dict[str, Future]:
        g = req[0].group_id
        return {g: self._future(g, Answer(group_id=g, topic_partitions=req[0].topic_partitions))}

    def list_consumer_groups(self, request_timeout: float) -> Future:
        return self._future("*", Answer(valid=[Answer(group_id="a")]))


@pytest.fixture
def events() -> list[str]:
    return []


@pytest.fixture
def errors() -> dict[str, int]:
    """What the next clients' requests fail with (group -> librdkafka code; "*": the listing of groups)."""
    return {}


@pytest.fixture
def admin(events: list[str], errors: dict[str, int]) -> Iterator[GroupAdmin]:
    def make(cluster: Cluster) -> Any:
        events.append("made")
        return FakeAdmin(events, errors)

    yield GroupAdmin(CLUSTER, make)


def test_a_describe_that_timed_out_lets_the_client_go_after_every_future_settled(
    admin: GroupAdmin, events: list[str], errors: dict[str, int]
) -> None:
    errors["a"] = TIMED_OUT  # the first of three: the other two are still pending when it fails
    with pytest.raises(StreamreplError, match="does not answer"):
        kafka.describe_groups(CLUSTER, admin, ["a", "b", "c"])
    assert events == ["made", "settled a", "settled b", "settled c", "destroyed"]
    assert admin.replaced == 1
    errors.clear()
    assert kafka.describe_groups(CLUSTER, admin, ["a"])["a"].state == "empty"
    assert events[5:] == ["made", "settled a"]  # a fresh client


def test_committed_offsets_that_timed_out_let_the_client_go_after_every_future_settled(
    admin: GroupAdmin, events: list[str], errors: dict[str, int]
) -> None:
    errors["b"] = TIMED_OUT
    with pytest.raises(StreamreplError, match="does not answer"):
        kafka.committed_offsets(CLUSTER, admin, ["a", "b", "c"])
    assert events == ["made", "settled a", "settled b", "settled c", "destroyed"]


def test_a_commit_that_timed_out_lets_the_client_go(
    admin: GroupAdmin, events: list[str], errors: dict[str, int]
) -> None:
    errors["g"] = TIMED_OUT
    with pytest.raises(KafkaException):
        kafka.commit_offsets(admin, "g", [TopicPartition("t", 0, 5)])
    assert events == ["made", "settled g", "destroyed"]


def test_a_listing_that_failed_lets_the_client_go(admin: GroupAdmin, events: list[str], errors: dict[str, int]) -> None:
    errors["*"] = KafkaError._TRANSPORT
    with pytest.raises(StreamreplError):
        kafka.list_groups(CLUSTER, admin)
    assert events == ["made", "settled *", "destroyed"]


def test_the_brokers_answers_keep_the_client(admin: GroupAdmin, events: list[str], errors: dict[str, int]) -> None:
    """A group that does not exist, an active group refusing a commit, answers: the same client asks on."""
    errors.update(gone=KafkaError.GROUP_ID_NOT_FOUND, busy=KafkaError.REBALANCE_IN_PROGRESS)
    assert kafka.describe_groups(CLUSTER, admin, ["gone"])["gone"].state == "dead"
    with pytest.raises(KafkaException):
        kafka.commit_offsets(admin, "busy", [TopicPartition("t", 0, 5)])
    assert kafka.committed_offsets(CLUSTER, admin, ["a"]) == {"a": ({("t", 0): 5}, {})}
    assert events.count("made") == 1 and "destroyed" not in events
    assert admin.replaced == 0


def test_a_plain_client_is_the_callers_to_let_go(events: list[str], errors: dict[str, int]) -> None:
    client = FakeAdmin(events, {"a": TIMED_OUT})
    with pytest.raises(StreamreplError):
        kafka.describe_groups(CLUSTER, client, ["a"])  # type: ignore[arg-type]
    assert "destroyed" not in events


def test_unanswered_means_librdkafkas_own_errors() -> None:
    for code in (TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY):
        assert unanswered(KafkaException(KafkaError(code)))
    for code in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.NOT_COORDINATOR):
        assert not unanswered(KafkaException(KafkaError(code)))
    assert unanswered(RuntimeError("not a Kafka error"))


def test_the_gateways_look_for_dead_seats_asks_on_a_fresh_client_after_a_timeout(
    events: list[str], errors: dict[str, int]
) -> None:
    """The slot group's seat look kept one admin client for good: a describe that timed out while the broker was
    down made the gateway worker abort when the broker came back."""
    from streamrepl.replication.membership import SlotGroup
    from streamrepl.replication.stats import GatewayStats

    def backend(kind: type, cluster: Cluster, conf: dict[str, Any]) -> Any:
        events.append("made")
        return FakeAdmin(events, errors)

    group = SlotGroup(CLUSTER, "gw1", 6000, GatewayStats("gw1"), lambda: None, lambda _: None)
    clients.set_backend(backend)
    try:
        errors[group.group_id] = TIMED_OUT
        with pytest.raises(StreamreplError):
            group.members()
        assert events == ["made", f"settled {group.group_id}", "destroyed"]
        errors.clear()
        assert group.members() is None  # no members: asked on a new client
        assert events[3:] == ["made", f"settled {group.group_id}"]
    finally:
        clients.set_backend(None)
