"""AllowList and gateway_lists with fake clients: which gateway a list allows, and that the running check judges a
list only once it has read the status topic to its end."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.fakes import BatchConsumer, Message

from streamrepl import gateway_lists
from streamrepl.errors import InvalidArgument
from streamrepl.kafka import KafkaError
from streamrepl.registry import Cluster
from streamrepl.replication import allowlist
from streamrepl.replication.allowlist import AllowList

CLUSTER = Cluster("newyork", {"bootstrap.servers": "127.0.0.1:1"})
KEY = gateway_lists.CONFIG_KEY


def msg(key: str | None = None, value: Any = "absent", eof: bool = False) -> Message:
    """A record of the gateway-list topic: `value` as JSON (None: a tombstone), or the end of the partition."""
    return Message(
        key=key.encode() if key else None,
        value=None if value is None else json.dumps(value).encode(),
        error=KafkaError(KafkaError._PARTITION_EOF) if eof else None,
    )


def test_parse_checks_entries() -> None:
    assert gateway_lists.parse(" gw1\tgw2.example.com  h-3 ") == ["gw1", "gw2.example.com", "h-3"]
    for bad, says in [("", "at least one"), ("a a", "more than once"), ("a b/c", "b/c"), ("a,b", "a,b")]:
        with pytest.raises(InvalidArgument, match=says):
            gateway_lists.parse(bad)


def test_an_entry_matches_the_id_or_the_host() -> None:
    assert gateway_lists.permits([], "any", "host")
    assert gateway_lists.permits(["gw1"], "gw1", "host")
    assert gateway_lists.permits(["host"], "gw9", "host")
    assert not gateway_lists.permits(["gw1"], "gw9", "host")
    assert "not on the gateway list of cluster newyork (gw1)" in gateway_lists.refusal("newyork", ["gw1"], "x", "h")


def test_check_now_reads_the_stored_list() -> None:
    allow = AllowList(CLUSTER, "gw9", "host", read_list=lambda c: ["gw1"])
    assert "gw9" in allow.check_now() and allow.refusal
    assert AllowList(CLUSTER, "gw1", "host", read_list=lambda c: ["gw1"]).check_now() == ""


def test_the_list_is_judged_only_at_the_end_of_the_topic() -> None:
    # An older list without gw1, then the newer one with it, in the same read: never refused.
    batches = [
        [msg(KEY, {"gateways": ["gw2"]}), msg("gateway|gw2", {"x": 1})],
        [msg(KEY, {"gateways": ["gw1", "gw2"]}), msg(eof=True)],
        [msg(KEY, {"gateways": ["gw2"]}), msg(eof=True)],  # then gw1 is taken off
    ]
    consumer = BatchConsumer(batches[:2])
    allow = AllowList(CLUSTER, "gw1", "host", new_consumer=lambda *a, **kw: consumer)
    gateways, at_end = AllowList.read_on(consumer, [])  # type: ignore[arg-type]
    assert (gateways, at_end) == (["gw2"], False)
    gateways, at_end = AllowList.read_on(consumer, gateways)  # type: ignore[arg-type]
    assert (gateways, at_end) == (["gw1", "gw2"], True)
    assert allow._judge(gateways) == ""

    consumer = BatchConsumer(list(batches))
    allow = AllowList(CLUSTER, "gw1", "host", new_consumer=lambda *a, **kw: consumer)
    allow.start()
    deadline = time.monotonic() + 5
    while not allow.refusal and time.monotonic() < deadline:
        time.sleep(0.01)
    allow.stop()
    assert "gw1" in allow.refusal


def test_a_tombstone_allows_every_gateway() -> None:
    consumer = BatchConsumer([[msg(KEY, {"gateways": ["gw2"]}), msg(KEY, None), msg(eof=True)]])
    assert AllowList.read_on(consumer, []) == ([], True)  # type: ignore[arg-type]


def test_following_the_list_does_not_fetch_every_few_ms() -> None:
    """The list is judged about every CHECK_SECONDS: its consumer's fetches may wait long at the broker (with the
    readers' 10 ms it asked the destination a hundred times a second)."""
    made: list[dict[str, Any]] = []

    def new_consumer(cluster: Cluster, **kw: Any) -> BatchConsumer:
        made.append(kw)
        return BatchConsumer([[msg(eof=True)]])

    allow = AllowList(CLUSTER, "gw1", "host", new_consumer=new_consumer)  # type: ignore[arg-type]
    allow.start()
    deadline = time.monotonic() + 5
    while not made and time.monotonic() < deadline:
        time.sleep(0.01)
    allow.stop()
    assert made and made[0].get("fetch.wait.max.ms", 0) >= 500, made


def test_at_the_end_of_the_status_topic_the_follower_stops_fetching_until_its_end_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that answers an empty fetch at once whatever its wait (noida-db) was asked about 1,000 times a second
    by an idle gateway's follower: 40 % of the destination broker's core and half of the gateway's. At the end the
    partition is paused, and only its end is asked for (one ListOffsets request every CHECK_SECONDS) until it moves."""
    monkeypatch.setattr(allowlist, "CHECK_SECONDS", 0.01)
    consumer = BatchConsumer([[msg(KEY, {"gateways": ["gw2"]}), msg(eof=True)]])
    consumer.at = 2
    allow = AllowList(CLUSTER, "gw1", "host", new_consumer=lambda *a, **kw: consumer)
    allow.start()
    deadline = time.monotonic() + 5
    while consumer.calls[-1:] != ["end?"] and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert consumer.calls == ["consume", "pause", "end?"], "no fetch while its end stays"
    assert "gw1" in allow.refusal
    consumer.batches.append([msg(KEY, {"gateways": ["gw1"]}), msg(eof=True)])
    while allow.refusal and time.monotonic() < deadline:
        time.sleep(0.01)
    allow.stop()
    assert consumer.calls[:5] == ["consume", "pause", "end?", "resume", "consume"], consumer.calls
    # While it reads, the partition is fetched: a read waits only briefly, so that the end is seen (and the partition
    # paused) soon after the records; waiting a second there was 1,000 fetches of noida-db every few seconds.
    assert max(consumer.timeouts) <= allowlist.READ_SECONDS


def test_a_status_topic_that_ended_below_the_follower_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination broker that lost its tail (noida-db SIGKILLed between saves) reports an end below where the
    follower stands: the records written there next, a list change among them, lie below its position. Waiting for the
    end to pass the position would skip them; the follower fetches again, and the consumer's reset reads them."""
    from streamrepl.kafka import brokers
    from streamrepl.kafka.probes import BrokerTraits

    monkeypatch.setattr(allowlist, "CHECK_SECONDS", 0.01)
    # Only an exact end below the position means a lost tail (Tansu's end is short by design): the broker was
    # found to report exact ends.
    exact = Cluster("newyork", {"bootstrap.servers": "127.0.0.1:2"})
    brokers.learn(exact, BrokerTraits(identity="noida-like", exact_watermark=True, probed_at=1))
    consumer = BatchConsumer([[msg(KEY, {"gateways": ["gw2"]}), msg(eof=True)]])
    consumer.at = 10
    allow = AllowList(exact, "gw1", "host", new_consumer=lambda *a, **kw: consumer)
    allow.start()
    deadline = time.monotonic() + 5
    while consumer.calls[-1:] != ["end?"] and time.monotonic() < deadline:
        time.sleep(0.01)
    consumer.end = 4
    while "resume" not in consumer.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    allow.stop()
    assert "resume" in consumer.calls, consumer.calls
