"""Failover with a fake consumer and a fake ping: which copy a StreamConsumer tries, and when it leaves one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from support.fakes import MetadataConsumer

from streamrepl.client.failover import Failover
from streamrepl.errors import InvalidArgument
from streamrepl.registry import Cluster, Registry

REG = Registry(
    Path("/nonexistent/clusters.yaml"),
    "sanfrancisco",
    {n: Cluster(n, {"bootstrap.servers": "127.0.0.1:1"}) for n in ("sanfrancisco", "newyork", "paris")},
)


def failover(ping: Any = None, **kw: Any) -> Failover:
    args = {"failover_after": 0.2, "probe_interval": 0.05, "probe_timeout": 0.1}
    args.update(kw)
    texts = ["/sanfrancisco/activity:clicks", "/newyork/activity:clicks", "/paris/activity"]
    return Failover(REG, texts, ping=ping or (lambda _c, _t: True), **args)


def test_copies_and_the_topics_their_paths_name() -> None:
    f = failover()
    assert [str(c.r.path) for c in f.copies] == ["/sanfrancisco/activity", "/newyork/activity", "/paris/activity"]
    assert f.named == ["clicks"]
    with pytest.raises(InvalidArgument, match="at least one copy"):
        Failover(REG, [], 1.0, 1.0, 1.0)


def test_the_next_copies_in_list_order_cycling_back_to_the_current_one() -> None:
    f = failover()
    f.opened(1)
    assert f.after_current() == [2, 0, 1]
    f.opened(2)
    assert f.after_current() == [0, 1, 2]


def test_a_copy_that_does_not_answer_a_ping_is_skipped() -> None:
    asked: list[str] = []

    def ping(cluster: Cluster, timeout: float) -> bool:
        asked.append(cluster.name)
        return cluster.name != "newyork"

    f = failover(ping)
    assert [i for i in range(3) if f.answers(i)] == [0, 2]
    assert asked == ["sanfrancisco", "newyork", "paris"]


def test_a_copy_that_answers_probes_is_never_left() -> None:
    f = failover()
    f.opened(0)
    c = MetadataConsumer()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert not f.silent_too_long(c, "kt")
        time.sleep(0.01)
    assert c.asked and set(c.asked) == {"kt"}


def test_a_silent_copy_is_left_after_failover_after_seconds() -> None:
    f = failover()
    f.opened(0)
    c = MetadataConsumer(answers=False)
    assert not f.silent_too_long(c, None)
    time.sleep(0.25)
    assert f.silent_too_long(c, None)
    f.leaving()
    assert f.failovers == 1


def test_a_transport_error_makes_the_next_check_probe_at_once() -> None:
    f = failover(probe_interval=60.0)
    f.opened(0)
    c = MetadataConsumer()
    f.silent_too_long(c, None)
    f.silent_too_long(c, None)
    assert len(c.asked) == 1  # the interval has not passed
    f.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    f.silent_too_long(c, None)
    assert len(c.asked) == 2
    f.on_error(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    f.silent_too_long(c, None)
    assert len(c.asked) == 2  # not a transport error


def test_after_no_copy_answered_the_next_round_waits_a_second() -> None:
    f = failover()
    assert not f.wait_before_retry(0.01)
    f.none_answers()
    started = time.monotonic()
    assert f.wait_before_retry(0.05)
    assert 0.04 <= time.monotonic() - started < 0.5


def test_a_dropped_consumer_is_closed_aside() -> None:
    f = failover()
    c = MetadataConsumer()
    f.drop(c)
    f.join()
    assert c.closed
