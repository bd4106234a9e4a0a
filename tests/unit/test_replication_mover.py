"""The hot loop's work (replication/mover.py, units.py, feeds.py, guard.py, writes.py) with fake clients: no broker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from support.mover import DST, SRC, FakeConsumer, FakeProducer, Rig, link, msg

from streamrepl import kafka, policy
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication import quiet
from streamrepl.replication.links import Link, Plan, Unit
from streamrepl.replication.mover import Mover
from streamrepl.replication.stats import GatewayStats


def test_records_land_at_their_source_offsets_and_gaps_are_filled() -> None:
    rig = Rig(link())
    assert rig.source.assigned == [(kafka_topic_name(SRC, "t"), 0, 0)], "the feed starts at the replica's end"
    rig.feed(SRC, [0, 1, 4, 5])  # 2 and 3 are not visible in the source (compacted, or transaction markers)
    assert rig.mover.move_once() == 4
    replica = rig.replica()
    assert [r["key"] for r in replica] == [b"k0", b"k1", None, None, b"k4", b"k5"]
    assert all(dict(r["headers"])[policy.ORIGIN] == b"SRC" for r in replica)
    state = rig.table.units[rig.unit]
    assert state.writer.next == 6 and state.writer.acked == 6, "the last record was acknowledged where it belongs"
    assert rig.stats.records_applied == 6 and rig.stats.records_by_link == {link().name: 6}
    assert rig.stats.latency.by_link[link().name][0], "the batch's latency was observed"
    rig.feed(SRC, [3, 6])  # a record seen again (a second path, a rerun) is not written twice
    rig.mover.move_once()
    assert [r["key"] for r in rig.replica()][-1] == b"k6" and len(rig.replica()) == 7


def test_a_throttled_link_writes_one_slice_then_pauses_the_partition() -> None:
    rig = Rig(link(throttle=True), throttle_rate=10)  # 10 records/s: slices of 2 records, 0.2 s each
    rig.feed(SRC, list(range(5)))
    rig.mover.move_once()
    kt = kafka_topic_name(SRC, "t")
    assert len(rig.replica()) == 2
    assert (kt, 0) in rig.source.paused and rig.source.seeks == [(kt, 0, 2)], "the rest is fetched again"
    state = rig.table.units[rig.unit]
    assert state.throttled_until > time.monotonic()
    time.sleep(0.25)
    rig.mover.unthrottle()
    assert (kt, 0) not in rig.source.paused and state.throttled_until == 0.0


def test_records_of_another_origin_stop_that_feed_alone_and_say_so_by_path() -> None:
    """The same topic written in two streams that both feed one replica (many-to-one): the other stream's feed of
    the partition stops, reported on its link alone with both upstreams by path; the first one's records go on."""
    other = StreamPath("tokyo", "/s")
    rig = Rig(link(), link(other, "TOKYO"))
    rig.feed(SRC, [0, 1, 2])
    rig.mover.move_once()
    rig.feed(other, [3])
    rig.mover.move_once()
    assert len(rig.replica()) == 3, "nothing of the other origin was written"
    assert rig.unit not in rig.table.errored and rig.unit in rig.table.units and rig.failed == []
    ((unit, source, error),) = rig.clashed
    assert (unit, source) == (rig.unit, "/tokyo/s"), rig.clashed
    assert "two upstreams write topic t into /ny/s, /sf/s and /tokyo/s" in error, error
    assert "keeps the records of /sf/s" in error, error
    assert "'streamrepl stream replica remove -path /tokyo/s -replica /ny/s'" in error, error
    rig.feed(SRC, [3, 4])
    rig.mover.move_once()
    assert len(rig.replica()) == 5, "the first upstream's records go on"


@pytest.mark.parametrize("uncertain", [True, False])
def test_a_failed_delivery_restarts_the_writes_or_fails_the_partition(uncertain: bool) -> None:
    """Expired (where the records are is unknown): every partition starts again from its real end with a new
    producer. Refused: that partition stops."""
    rig = Rig(link())
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    state = rig.table.units[rig.unit]
    code = KafkaError._MSG_TIMED_OUT if uncertain else KafkaError.MSG_SIZE_TOO_LARGE
    state.writer._delivered(1)(KafkaError(code), msg("x", 0, 1, None))  # what the producer reports of a batch
    first = rig.producer
    rig.producer = FakeProducer()  # the producer a restart makes
    rig.session.check()
    if uncertain:
        assert rig.stats.write_restarts == 1 and rig.session.producer is rig.producer is not first
        assert not rig.table.units and not rig.table.errored, "let go, to start again from the real end"
        assert rig.session.restart_pending
    else:
        assert rig.stats.write_restarts == 0 and rig.unit in rig.table.errored


def test_idle_passes_do_not_look_at_every_partition_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle gateway runs hundreds of passes a second: the checks that walk every partition (delivery errors,
    feeds waiting for their source, throttled partitions) run when a delivery report came in, or at most every
    SWEEP_SECONDS, not on every pass (at 800 partitions they were most of an idle gateway's CPU)."""
    from streamrepl.replication import mover as mover_module

    rig = Rig(link())
    swept: list[str] = []
    monkeypatch.setattr(rig.session, "check", lambda: swept.append("writes"))
    monkeypatch.setattr(rig.table, "retry_unverified", lambda: swept.append("unverified"))
    monkeypatch.setattr(rig.mover, "unthrottle", lambda: swept.append("throttled"))
    for _ in range(50):
        assert rig.mover.move_once() == 0
    assert swept.count("writes") == 1 and swept.count("unverified") == 1 and "throttled" not in swept, swept
    time.sleep(mover_module.SWEEP_SECONDS + 0.05)
    rig.mover.move_once()
    assert swept.count("writes") == 2 and swept.count("unverified") == 2
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()  # writes: their delivery reports come with the next pass's poll
    rig.mover.move_once()
    assert swept.count("writes") == 3, "a pass that served delivery reports checks them at once"


def test_a_quiet_feed_is_not_fetched_and_wakes_when_its_end_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """A feed that brought nothing for QUIET_SECONDS leaves its link's consumer: nothing fetches it (an idle partition
    costs its broker a look at its end now and then); when its end passes the writer's next offset it goes back, to
    read on there. Nothing skipped or doubled."""
    rig = Rig(link())
    kt = kafka_topic_name(SRC, "t")
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    rig.mover.move_once()  # the deliveries: the writer is idle (everything acknowledged)
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()
    assert rig.source.assigned == [] and rig.quiet.holds(link().name, TopicPartition(kt, 0)), "not fetched"
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 60.0)
    rig.ends.ends[(kt, 0)] = 2
    rig.look()
    assert rig.ends.asked == [[(kt, 0)]] and rig.source.assigned == [], "its end is where the writer stands"
    rig.ends.ends[(kt, 0)] = 4
    rig.look()
    assert rig.source.assigned == [(kt, 0, 2)], "back, to read on where the writer stands"
    rig.feed(SRC, [2, 3, 4])
    rig.mover.move_once()
    assert [r["key"] for r in rig.replica()] == [b"k0", b"k1", b"k2", b"k3", b"k4"]


def test_a_throttled_feed_never_goes_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(link(throttle=True))
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()
    assert not rig.quiet.held and rig.source.assigned, "its pause and seek state lives in its own consumer"


def test_the_partitions_one_batch_wakes_have_their_ends_checked_in_one_request() -> None:
    """Before writing into a partition quiet for END_CHECK_IDLE its end is checked (a stray producer); when a burst
    wakes many partitions at once, one request asks for all their ends (one each made 800 serial requests)."""
    lk = link()
    src_kt, units = kafka_topic_name(SRC, "t"), [Unit(DST, "t", p) for p in (0, 1, 2)]
    source, reader, producer = FakeConsumer(), FakeConsumer(), FakeProducer()
    mover = Mover.assemble(reader, GatewayStats("test"), lambda cluster, **_: source, lambda: producer, 1000)  # type: ignore[arg-type,return-value]
    plan = Plan([lk], {u: [(lk, src_kt)] for u in units}, {}, [])
    mover.table.follow(plan, {kafka_topic_name(DST, "t")}, plan.units, True, producer)  # type: ignore[arg-type]
    reader.asked.clear()
    source.queued += [msg(src_kt, p, 0, b"k") for p in (0, 1, 2)]
    mover.move_once()
    dst_kt = kafka_topic_name(DST, "t")
    assert reader.asked == [("ends", [(dst_kt, 0), (dst_kt, 1), (dst_kt, 2)])], reader.asked
    assert [len(producer.log[(dst_kt, p)]) for p in (0, 1, 2)] == [1, 1, 1]


def test_a_link_whose_feeds_are_all_quiet_is_not_asked_for_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle gateway asked every consumer for records on every pass: at 20 links that was most of its own CPU.
    A link consumer whose feeds all went quiet holds nothing to read."""
    rig = Rig(link())
    asked: list[str] = []
    real = rig.source.consume
    monkeypatch.setattr(rig.source, "consume", lambda n, timeout=0: asked.append("busy") or real(n))
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()  # the feed goes quiet
    asked.clear()
    for _ in range(20):
        rig.mover.move_once()
    assert asked == [], asked


class FatalProducer(FakeProducer):
    """A producer in a fatal state, as confluent_kafka shows one: poll and flush raise (inside a rebalance
    callback the error comes out mangled, as a SystemError)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def poll(self, timeout: float = 0) -> int:
        raise self.error

    def flush(self, timeout: float = 0) -> int:
        raise self.error


@pytest.mark.parametrize("call", ["poll", "flush"])
@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True)),
        SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception"),
    ],
)
def test_a_producer_in_a_fatal_state_is_replaced_and_the_gateway_goes_on(call: str, error: BaseException) -> None:
    """The destination broker came back without the idempotent producer's state ("out of order sequence number"):
    the writes start again with a new producer; nothing escapes to stop the gateway."""
    rig = Rig(link())
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    rig.session.producer = FatalProducer(error)
    if call == "poll":
        rig.mover.move_once()
    else:
        assert rig.session.flush(30) == 0
    assert rig.stats.write_restarts == 1 and rig.session.producer is rig.producer
    assert not rig.table.units and not rig.table.errored, "let go, to start again from the real end"


def test_a_record_landing_below_its_offset_restarts_the_writes_without_a_conflict() -> None:
    """The replica partition ends below where the writer went on: its broker lost acknowledged records. Not
    another writer (its records push ours up): the partition starts again from its real end, not failed."""
    rig = Rig(link())
    rig.feed(SRC, [0, 1, 2])
    rig.mover.move_once()
    state = rig.table.units[rig.unit]
    state.writer._delivered(5)(None, msg("x", 0, 3, None))
    rig.session.check()
    assert rig.stats.write_restarts == 1 and not rig.table.errored and not rig.failed


class ShrunkReader(FakeConsumer):
    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        return (0, 1)


@pytest.mark.parametrize("real_end", [1, 3])
def test_an_idle_partition_whose_end_moved_back_is_taken_up_again_from_its_real_end(
    real_end: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiet when its broker crashed: the end check before the next write sees the replica end below the writer's
    position, and the writes start again from the real end instead of landing below their offsets. A watermark
    that only under-counts (Tansu's: the last batch's base offset + 1) is not taken for that: the real end is."""
    rig = Rig(link())
    monkeypatch.setattr(kafka, "true_end", lambda c, tp, timeout: real_end)
    rig.feed(SRC, [0, 1, 2])
    rig.mover.move_once()
    rig.mover.move_once()  # deliveries acknowledged: the writer is idle at 3
    rig.table.units[rig.unit].last_write = 0.0  # quiet for long
    monkeypatch.setattr(rig.table.reader, "get_watermark_offsets", ShrunkReader().get_watermark_offsets)
    rig.feed(SRC, [3])
    rig.mover.move_once()
    if real_end == 3:
        assert len(rig.replica()) == 4 and rig.stats.write_restarts == 0, "written: the end had not moved"
        return
    assert len(rig.replica()) == 3, "nothing written below its offset"
    assert rig.stats.write_restarts == 1 and not rig.table.errored and not rig.failed


def test_a_lost_connection_to_the_destination_throws_away_what_the_producer_holds() -> None:
    """A destination broker that went away may come back without records it acknowledged; what the producer still
    holds would land at its new end, below their offsets. The writes restart before it is back (while nothing is
    held, a lost connection changes nothing: no restart loop while the broker stays down)."""
    rig = Rig(link())
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    first = rig.producer
    rig.producer = FakeProducer()
    rig.session.destination_lost("Disconnected")
    rig.mover.move_once()
    assert rig.stats.write_restarts == 1 and rig.session.producer is rig.producer is not first
    assert not rig.table.units and not rig.table.errored
    rig.session.destination_lost("Connection refused")
    rig.mover.move_once()
    assert rig.stats.write_restarts == 1, "nothing held: nothing to restart"


def test_a_source_consumer_is_told_of_a_topic_it_never_had_when_its_partition_is_assigned() -> None:
    """librdkafka asks for an assigned topic it does not know only at its next scan, up to a second later: a new
    topic's first record reached the replica 0.65-0.77 s after its partition was assigned."""
    rig = Rig(link())
    topic = kafka_topic_name(SRC, "t")
    told = [a for a in rig.source.asked if a[0] == "topics"]  # (it is the divergence checks' probe too)
    assert told == [("topics", [(topic, -1)])]
    plan = Plan([link()], {rig.unit: [(link(), topic)]}, {}, [])
    rig.table.follow(plan, {kafka_topic_name(DST, "t")}, plan.units, True, rig.producer)
    assert [a for a in rig.source.asked if a[0] == "topics"] == told, "once: the consumer knows it since"


def test_a_topic_let_go_is_asked_for_before_it_is_read_again() -> None:
    """Issues 23 and 25: librdkafka fetches by the topic id it learnt when it first read a topic; one deleted and
    created again under its name while the gateway had let it go was fetched by the deleted one's id, which killed the
    gateway on Tansu. Asked for by name, the consumer learns the new id: the source consumer of its lane, and the reader
    of the replica partitions, ask before they read it again. A topic held all along is not asked for again."""
    rig = Rig(link())
    topic, replica = kafka_topic_name(SRC, "t"), kafka_topic_name(DST, "t")
    plan = Plan([link()], {rig.unit: [(link(), topic)]}, {}, [])
    reader = rig.table.reader
    source_asks, reader_asks = len(rig.source.asked), len(reader.asked)  # type: ignore[attr-defined]

    def asked(c: Any, since: int) -> list[Any]:
        return [a for a in c.asked[since:] if a[0] == "topics"]

    rig.table.follow(plan, {replica}, plan.units, True, rig.producer)
    assert asked(rig.source, source_asks) == [] and asked(reader, reader_asks) == []

    rig.table.drop(rig.unit)
    rig.table.follow(plan, {replica}, plan.units, True, rig.producer)
    assert rig.source.assigned == [(topic, 0, 0)], "taken up again"
    assert asked(rig.source, source_asks) == [("topics", [(topic, -1)])], "the lane's consumer asked first"
    assert reader.asked[reader_asks] == ("topics", [(replica, -1)]), "the reader asked before its first read"  # type: ignore[attr-defined]
    rig.table.follow(plan, {replica}, plan.units, True, rig.producer)
    assert asked(rig.source, source_asks) == [("topics", [(topic, -1)])], "once"
    assert asked(reader, reader_asks) == [("topics", [(replica, -1)])], "once"


def test_a_topic_let_go_is_not_read_again_while_its_source_does_not_say_what_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Assigned without asking, it would be fetched by the id the consumer knew, which may be a deleted topic's."""
    from streamrepl.replication import units as units_module

    rig = Rig(link())
    topic, replica = kafka_topic_name(SRC, "t"), kafka_topic_name(DST, "t")
    plan = Plan([link()], {rig.unit: [(link(), topic)]}, {}, [])
    state = rig.table.units[rig.unit]
    rig.table.remove_feed(state, link().name)
    state.unverified[link().name] = (link(), topic)

    def down(topic: str | None = None, timeout: float = 0) -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(units_module, "RETRY_SECONDS", 0.0)  # asked again at the next look
    monkeypatch.setattr(rig.source, "list_topics", down)
    rig.table.follow(plan, {replica}, plan.units, True, rig.producer)
    assert rig.source.assigned == [] and link().name in state.unverified, "not fed while the source does not say"
    monkeypatch.delattr(rig.source, "list_topics")  # the class's again: it answers
    rig.table.retry_unverified()
    assert rig.source.assigned == [(topic, 0, 0)] and not state.unverified, "fed once it said"


# -- one source consumer per source cluster ---------------------------------------------------------------------
def _rig_of_links(links: list[Link]) -> tuple[Mover, FakeProducer, list[FakeConsumer]]:
    """A Mover on fakes, each link feeding partition 0 of topic t of its own replica stream; the
    source consumers made are listed in the order they were made."""
    made: list[FakeConsumer] = []

    def new_consumer(cluster: Cluster, **_: Any) -> FakeConsumer:
        made.append(FakeConsumer())
        return made[-1]

    producer = FakeProducer()
    mover = Mover.assemble(
        FakeConsumer(),  # type: ignore[arg-type]
        GatewayStats("test"),
        new_consumer,
        lambda: producer,  # type: ignore[arg-type,return-value]
        1000,
        new_probe=lambda cluster, **_: FakeConsumer(),  # the divergence checks' own, not counted
    )
    units = {Unit(lk.dst, "t", 0): [(lk, kafka_topic_name(lk.src, "t"))] for lk in links}
    plan = Plan(links, units, {}, [])
    present = {kafka_topic_name(lk.dst, "t") for lk in links}
    mover.table.follow(plan, present, plan.units, True, producer)  # type: ignore[arg-type]
    return mover, producer, made


def _link(src: str, dst: str) -> Link:
    sf = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"})
    return Link(StreamPath("sf", src), sf, f"S{src}", StreamPath("ny", dst), f"D{dst}", False, "lz4", 0)


def test_the_links_of_one_source_cluster_share_one_consumer_and_each_record_reaches_its_own_replica() -> None:
    """A consumer per link fetched for each link on its own: with one busy partition a link, 20 links on noida-db
    (which answers an empty fetch at once) kept the gateway at 95 % and the source broker at 70 % of a core for 20
    records a second (bench/scale.py --trickle 1). One consumer reads every link of a source cluster."""
    a, b = _link("/a", "/a"), _link("/b", "/b")
    mover, producer, made = _rig_of_links([a, b])
    assert len(made) == 1, "one consumer for the source cluster"
    src = made[0]
    assert sorted(src.assigned) == sorted([(kafka_topic_name(a.src, "t"), 0, 0), (kafka_topic_name(b.src, "t"), 0, 0)])
    src.queued += [msg(kafka_topic_name(a.src, "t"), 0, o, f"a{o}".encode()) for o in range(3)]
    src.queued += [msg(kafka_topic_name(b.src, "t"), 0, o, f"b{o}".encode()) for o in range(2)]
    assert mover.move_once() == 5
    assert [r["key"] for r in producer.log[(kafka_topic_name(a.dst, "t"), 0)]] == [b"a0", b"a1", b"a2"]
    assert [r["key"] for r in producer.log[(kafka_topic_name(b.dst, "t"), 0)]] == [b"b0", b"b1"]
    assert all(dict(r["headers"])[policy.ORIGIN] == b"S/a" for r in producer.log[(kafka_topic_name(a.dst, "t"), 0)])


def test_two_links_from_one_source_stream_have_a_consumer_each() -> None:
    """A consumer holds a source partition once, at one position: two replicas of one stream in the same destination
    cluster read it at their own offsets, so their links cannot share a consumer."""
    x, y = _link("/a", "/x"), _link("/a", "/y")
    mover, producer, made = _rig_of_links([x, y])
    assert len(made) == 2
    kt = kafka_topic_name(x.src, "t")
    made[0].queued += [msg(kt, 0, o, f"k{o}".encode()) for o in range(2)]
    made[1].queued += [msg(kt, 0, o, f"k{o}".encode()) for o in range(2)]
    mover.move_once()
    assert len(producer.log[(kafka_topic_name(x.dst, "t"), 0)]) == 2
    assert len(producer.log[(kafka_topic_name(y.dst, "t"), 0)]) == 2
    # The first link gone, its consumer is closed; the second keeps its own.
    plan = Plan([y], {Unit(y.dst, "t", 0): [(y, kt)]}, {}, [])
    mover.table.follow(plan, {kafka_topic_name(y.dst, "t")}, plan.units, True, producer)  # type: ignore[arg-type]
    assert len(mover.feeds.consumers) == 1


@pytest.mark.parametrize("exact", [True, False])
def test_a_partition_is_reported_caught_up_only_where_the_sources_watermark_is_exact(
    monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    """promote -consistent trusts a caught-up report (promoteconsistent.py). On Tansu the watermark is the last
    batch's base offset + 1, so a writer at it may still lack the rest of that batch: there, and on a broker whose
    watermark is not known to be exact, no partition is reported caught up."""
    from streamrepl import kafka

    rig = Rig(link())
    rig.feed(SRC, [0, 1])
    rig.mover.move_once()
    monkeypatch.setattr(kafka, "watermark_is_exact", lambda cluster: exact)
    monkeypatch.setattr(rig.source, "get_watermark_offsets", lambda tp, timeout=0, cached=False: (0, 2))
    state = rig.table.units[rig.unit]
    assert state.writer.next == 2
    assert rig.mover.feeds.caught_up(state) is exact
    monkeypatch.setattr(rig.source, "get_watermark_offsets", lambda tp, timeout=0, cached=False: (0, 3))
    assert rig.mover.feeds.caught_up(state) is False, "a record the writer has not applied yet"


def test_no_more_records_than_the_write_window_wait_in_the_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination slower than the source (tests/e2e/test_slow_destination.py): the gateway queued up to 64 MB in
    its producer and what waited there past the message timeout expired, restarting the writes. A batch that does
    not fit in the write window waits for acknowledgements (served meanwhile); the part that fits goes first."""
    rig = Rig(link())
    rig.session.window = 2
    state = rig.table.units[rig.unit]
    polls: list[float] = []
    deliver = rig.producer.poll

    def slow_poll(timeout: float = 0) -> int:  # the destination answers the third time it is asked
        polls.append(timeout)
        return deliver() if len(polls) >= 3 else 0

    acked_when_handed: list[int] = []
    produce = rig.producer.produce

    def watched_produce(*args: Any, **kwargs: Any) -> None:
        acked_when_handed.append(state.writer.acked)
        produce(*args, **kwargs)

    monkeypatch.setattr(rig.producer, "poll", slow_poll)
    monkeypatch.setattr(rig.producer, "produce", watched_produce)
    rig.feed(SRC, [0, 1, 2, 3])
    rig.mover.move_once()
    assert acked_when_handed == [0, 0, 2, 2], "records beyond the window were handed before room was made"
    assert [r["key"] for r in rig.replica()] == [b"k0", b"k1", b"k2", b"k3"]
    assert rig.stats.destination_waits == 3, "a wait for each slice served"


def test_the_write_window_follows_how_long_batches_wait() -> None:
    """It starts small, doubles on a batch acknowledged quickly while it was full, halves at most once every queue
    age on a batch that waited longer than that, and starts small again after a restart of the writes."""
    from streamrepl.replication import writes

    rig = Rig(link())
    s = rig.session
    assert s.window == writes.WINDOW_MIN
    s.acked_after(0.01)
    assert s.window == writes.WINDOW_MIN, "not full: it did not hold anything back"
    for _ in range(s.window):
        rig.producer.produce("x", partition=0)
    assert s.room() == 0
    s.acked_after(0.01)
    assert s.window == 2 * writes.WINDOW_MIN
    s.acked_after(s.queue_age + 0.1)
    s.acked_after(s.queue_age + 0.1)
    assert s.window == writes.WINDOW_MIN, "halved once"
    s.window = 64_000
    s.restart("test")
    assert s.window == writes.WINDOW_MIN
