"""Quiet feeds (replication/quiet.py, feeds.py): not fetched, their ends watched; with fake clients, no broker."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import TopicPartition
from support.mover import SRC, FakeEnds, Rig, link

from streamrepl.paths import kafka_topic_name
from streamrepl.replication import quiet
from streamrepl.replication.links import Plan
from streamrepl.replication.quiet import EndWatch

KT = kafka_topic_name(SRC, "t")


def quiet_rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    """A rig whose one feed applied offsets 0 and 1, then went quiet (the writer's next offset: 2)."""
    rig = Rig(link())
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    rig.mover.move_once()  # the deliveries: the writer is idle
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 60.0)
    assert rig.quiet.holds(link().name, TopicPartition(KT, 0)) and rig.source.assigned == []
    return rig


def test_a_wake_that_finds_nothing_does_not_wake_the_feed_again_for_the_same_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transaction's commit marker (or an aborted transaction) moves the end without a record to read. The wake
    finds nothing, the feed goes quiet again, and it must not wake every quiet spell for that same end: only when
    the end moves past it."""
    rig = quiet_rig(monkeypatch)
    rig.ends.ends[(KT, 0)] = 3
    rig.look()
    assert rig.source.assigned == [(KT, 0, 2)], "woken, to read on at the writer's next offset"
    # The consumer read up to the end: librdkafka's position passes a transaction's marker (measured on Tansu: a
    # committed transaction's record at 0 and its marker at 1, the consumer assigned at 1 stood at 2 after the EOF).
    rig.source.positions[(KT, 0)] = 3
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()  # nothing came: quiet again
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 60.0)
    assert rig.source.assigned == []
    for _ in range(3):
        rig.look()
    assert rig.source.assigned == [], "the same end does not wake it again"
    rig.ends.ends[(KT, 0)] = 4
    rig.look()
    assert rig.source.assigned == [(KT, 0, 2)], "an end past it does"


@pytest.mark.parametrize("read_to", [None, 3], ids=["nothing read", "part read"])
def test_a_wake_whose_consumer_did_not_read_to_the_end_wakes_again(
    monkeypatch: pytest.MonkeyPatch, read_to: int | None
) -> None:
    """Many feeds woken at once share one consumer, which may not come to some of them for longer than a quiet spell:
    bench/wan.py, 64 partitions of 1 KiB records taken up at once across a 100 ms round trip, had 8 of them stop for
    good at 0-85 % of their records (the replica 175,000 of 200,000). The end did not move since the wake, but the
    records below it were never read: the feed must wake again, not wait for the next record."""
    rig = quiet_rig(monkeypatch)
    rig.ends.ends[(KT, 0)] = 5
    rig.look()
    assert rig.source.assigned == [(KT, 0, 2)]
    if read_to is not None:
        rig.feed(SRC, [2])
        rig.mover.move_once()
        rig.mover.move_once()  # the delivery: the writer is idle at 3, two records short of the end it woke for
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()  # nothing more came for a quiet spell: quiet again
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 60.0)
    assert rig.source.assigned == []
    rig.look()
    at = read_to if read_to is not None else 2
    assert rig.source.assigned == [(KT, 0, at)], "woken again at the writer's next offset: records are left to read"


def test_a_feed_let_go_while_quiet_is_no_longer_watched_nor_woken(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = quiet_rig(monkeypatch)
    rig.look()
    assert rig.ends.asked[-1] == [(KT, 0)]
    lk = link()
    rig.table.follow(Plan([lk], {}, {}, []), {KAFKA_DST}, {}, True, rig.producer)  # type: ignore[arg-type]
    assert rig.table.units == {} and not rig.quiet.held
    rig.ends.ends[(KT, 0)] = 10
    asked = len(rig.ends.asked)
    rig.look()
    assert len(rig.ends.asked) == asked, "nothing left to ask for"
    assert rig.source.assigned == [], "not woken into a consumer"


KAFKA_DST = kafka_topic_name(link().dst, "t")


def test_a_quiet_feed_whose_source_connection_was_lost_is_checked_again_before_it_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A source broker that restarted may have lost records the replica holds and taken new ones at their offsets:
    its end moves past the writer. The watch reports the lost connection with that end; the feed is compared with
    its replica again (unverified) instead of reading on after the old history."""
    rig = quiet_rig(monkeypatch)
    rig.mover.move_once()  # the watch is told what to watch
    rig.ends.ends[(KT, 0)] = 5
    rig.ends.lose = True
    for w in rig.quiet.watches.values():
        w.round()
    rig.mover.move_once()  # takes the news: the lost connection first
    state = rig.table.units[rig.unit]
    assert link().name in state.unverified and not state.feeds, "stopped, to be compared with the replica first"
    assert rig.source.assigned == [] and not rig.quiet.held


def test_an_end_watch_publishes_only_the_ends_that_changed_and_every_end_when_what_it_watches_changed() -> None:
    client = FakeEnds()
    w = EndWatch(lambda on_lost: client, 0.1, start=False)
    assert w.take() is None
    w.watch([("a", 0), ("a", 1)])
    w.round()
    assert w.take() == ({("a", 0): 0, ("a", 1): 0}, False), "the first answer: every end"
    w.round()
    assert w.take() is None, "nothing changed"
    client.ends[("a", 1)] = 7
    w.round()
    client.ends[("a", 0)] = 3
    w.round()
    assert w.take() == ({("a", 0): 3, ("a", 1): 7}, False), "rounds not taken yet add up"
    w.watch([("a", 0), ("b", 0)])
    w.round()
    assert w.take() == ({("a", 0): 3, ("b", 0): 0}, False), "every end again: a partition may have joined"
    client.lose = True
    client.on_lost = w._on_lost
    w.round()
    assert w.take() == ({}, True), "a lost connection: its answer is not trusted"
    w.close()


def test_a_failed_request_is_news_only_when_the_connection_is_lost() -> None:
    from confluent_kafka import KafkaError, KafkaException

    class Failing(FakeEnds):
        code = KafkaError._TRANSPORT

        def offsets_for_times(self, tps: list, timeout: float = 0) -> list:
            raise KafkaException(KafkaError(self.code))

    client = Failing()
    w = EndWatch(lambda on_lost: client, 0.1, start=False)
    w.watch([("a", 0)])
    w.round()
    assert w.take() == ({}, True)
    client.code = KafkaError.UNKNOWN_TOPIC_OR_PART
    w.round()
    assert w.take() == ({("a", 0): -1}, False), "its topic's ends unknown (asked alone, it failed alone)"
    w.round()
    assert w.take() is None
    w.close()


def test_a_loop_with_every_feed_quiet_sleeps_until_a_watch_has_news(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing fetched, the loop needs to run only when a quiet feed's end moved: it waits for the watch's
    news (gateway.IDLE_SLEEP_ALL_QUIET at most) instead of passing every 10 ms."""
    rig = Rig(link())
    assert not rig.table.all_quiet(), "its feed is fetched"
    rig = quiet_rig(monkeypatch)
    assert rig.table.all_quiet()
    rig.mover.move_once()  # the watch is told what to watch
    rig.ends.ends[(KT, 0)] = 5
    for w in rig.quiet.watches.values():
        w.round()
    waited = threading.Thread(target=rig.quiet.wait_for_news, args=(60,))
    waited.start()
    waited.join(30)  # a hang guard: news were published before the wait began
    assert not waited.is_alive(), "the news did not end the wait"
    rig.mover.move_once()
    assert rig.source.assigned == [(KT, 0, 2)] and not rig.table.all_quiet()


def test_a_new_plan_ends_the_wait_of_a_loop_whose_feeds_are_all_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle loop waits long for news (gateway.IDLE_SLEEP_ALL_QUIET); a plan change (`replica resume`) must still
    be applied at once: the plan watcher's publication ends the wait."""
    from streamrepl.replication.watcher import PlanWatcher

    rig = quiet_rig(monkeypatch)
    watcher = PlanWatcher(None, lambda cluster: None, rig.quiet.nudge)  # type: ignore[arg-type]
    rig.quiet.wait_for_news(0)  # nothing pending
    waited = threading.Thread(target=rig.quiet.wait_for_news, args=(60,))
    waited.start()
    watcher.published = (Plan([link()], {}, {}, []), set())
    waited.join(30)  # a hang guard
    assert not waited.is_alive(), "the new plan did not end the wait"
    assert watcher.published is not None


def test_the_end_check_period_is_the_brokers_unless_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """STREAMREPL_QUIET_END_CHECK_MS trades an idle partition's wake for what watching it costs (at 800 partitions
    on Tansu, the source broker's largest idle cost: BENCHMARKS.md)."""
    from streamrepl import kafka
    from streamrepl.registry import Cluster

    made: list[object] = []
    monkeypatch.setattr(quiet, "EndWatch", lambda new_client, period: made.append(period) or period)
    cluster = Cluster("sanfrancisco", {"bootstrap.servers": "127.0.0.1:1"})
    monkeypatch.delenv("STREAMREPL_QUIET_END_CHECK_MS", raising=False)
    quiet.end_watch(cluster)
    monkeypatch.setenv("STREAMREPL_QUIET_END_CHECK_MS", "250")
    quiet.end_watch(cluster)
    assert made == [kafka.quiet_end_check_ms(cluster) / 1000, 0.25]


# -- partitions taken up many at once start quiet ---------------------------------------------------------
def bulk_rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    """A rig whose one partition was taken up as if among many (units.START_QUIET_AT lowered to 1)."""
    from streamrepl.replication import units

    monkeypatch.setattr(units, "START_QUIET_AT", 1)
    return Rig(link())


def test_partitions_taken_up_many_at_once_start_quiet_and_wake_when_their_source_is_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway taking up thousands of partitions put every one into its link's consumer, which fetched them all
    until they went quiet 5 s later: on noida-db, which answers an empty fetch at once, 100 consumers did so 125 s
    long at 4,000 partitions (a load of 62 on 2 cores, the source broker at 84 %). Taken up together, feeds start
    quiet instead: nothing fetches them, and the watch's first answer wakes those whose source is ahead."""
    rig = bulk_rig(monkeypatch)
    lk = link()
    assert rig.source.assigned == [] and rig.quiet.holds(lk.name, TopicPartition(KT, 0)), "not fetched"
    assert rig.table.all_quiet()
    assert ("topics", [(KT, -1)]) in rig.source.asked, "its consumer was told of the topic, for the wake"
    rig.look()
    assert rig.source.assigned == [], "its source ends where the replica does: it stays quiet"
    rig.ends.ends[(KT, 0)] = 2
    rig.look()
    assert rig.source.assigned == [(KT, 0, 0)], "woken, to read from the replica's end"
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    assert [r["key"] for r in rig.replica()] == [b"k0", b"k1"]


def test_a_feed_started_quiet_wakes_at_once_when_its_source_is_ahead() -> None:
    """The first answer for a feed that started quiet wakes it unless its end is exactly the replica's end."""
    client = FakeEnds()
    feeds = quiet.QuietFeeds(lambda cluster: EndWatch(lambda on_lost: client, 0.1, start=False))
    cluster = link().src_cluster
    feeds.hold("l", cluster, TopicPartition("a", 0), 0)
    feeds.news()  # tells the watch
    client.ends[("a", 0)] = 4
    feeds.watches[cluster.name].round()
    assert feeds.news()[0] == [("l", "a", 0, 4)]


def test_a_feed_started_quiet_whose_source_ends_below_the_replica_wakes_to_have_it_checked() -> None:
    """A source that ends below the replica's end: the replica's last records must be its own or the source's, which
    the writer checks when the feed reads the source's last record again (watermarks.recheck_lagging_feeds, from the
    link's consumer). Left quiet, the feed would wake only once the source passed the replica, never checked (the
    same topic written in two streams would go unnoticed)."""
    client = FakeEnds()
    feeds = quiet.QuietFeeds(lambda cluster: EndWatch(lambda on_lost: client, 0.1, start=False))
    cluster = link().src_cluster
    feeds.hold("l", cluster, TopicPartition("a", 0), 5)
    feeds.hold("l", cluster, TopicPartition("a", 1), 5)
    feeds.news()
    client.ends[("a", 0)] = 3
    client.ends[("a", 1)] = 5
    feeds.watches[cluster.name].round()
    assert feeds.news()[0] == [("l", "a", 0, 3)], "behind the replica: woken; level with it: quiet"
    client.ends[("a", 1)] = 4
    feeds.watches[cluster.name].round()
    assert feeds.news()[0] == [], "after its first answer a quiet feed wakes only when its end passes the replica's"
    client.ends[("a", 1)] = 6
    feeds.watches[cluster.name].round()
    assert feeds.news()[0] == [("l", "a", 1, 6)]


def test_a_few_partitions_taken_up_are_fetched_at_once() -> None:
    """A resume or a new topic takes up a few partitions: they go to the consumer at once (no wait for a round)."""
    rig = Rig(link())
    assert rig.source.assigned == [(KT, 0, 0)] and not rig.quiet.held


def test_a_topic_deleted_under_its_quiet_feed_does_not_keep_the_other_quiet_feeds_asleep() -> None:
    """On noida-db a request for the ends of a deleted topic fails whole (UNKNOWN_TOPIC_OR_PART): the other quiet
    partitions asked in the same request never woke (e2e: test_source_deleted, a topic deleted outside streamrepl
    while its stream's feeds were quiet: the other stream of the source cluster stopped). Asked topic by topic after
    such a failure, the others' ends still come; the deleted topic's are unknown (-1: no wake)."""
    from confluent_kafka import KafkaError, KafkaException

    class DeletedTopic(FakeEnds):
        def offsets_for_times(self, tps: list, timeout: float = 0) -> list:
            if any(tp.topic == "gone" for tp in tps):
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            return super().offsets_for_times(tps, timeout)

    client = DeletedTopic()
    w = EndWatch(lambda on_lost: client, 0.1, start=False)
    w.watch([("gone", 0), ("kept", 0), ("kept", 1)])
    w.round()
    assert w.take() == ({("gone", 0): -1, ("kept", 0): 0, ("kept", 1): 0}, False)
    client.ends[("kept", 1)] = 5
    w.round()
    assert w.take() == ({("kept", 1): 5}, False), "the kept topic's news come"
    w.close()
