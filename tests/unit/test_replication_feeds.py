"""The source feeds (replication/feeds.py) when a link's partitions are spread over several source consumers (its
lane's strands, lanes.py): each partition read by one consumer only, records routed to their replica partitions,
pause/seek, quiet feeds and their wake, and the lanes' consumers closed with the last link, all on the partition's own
consumer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from support.mover import DST, FakeConsumer, FakeEnds, FakeProducer, msg

from streamrepl import discovery, kafka
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster
from streamrepl.replication import feeds as feeds_module
from streamrepl.replication import lanes, quiet
from streamrepl.replication.feeds import NewTopics, SourceFeeds
from streamrepl.replication.links import Link, Plan, Unit
from streamrepl.replication.mover import Mover
from streamrepl.replication.quiet import EndWatch, QuietFeeds
from streamrepl.replication.stats import GatewayStats

PARTITIONS = 8


class ClosingConsumer(FakeConsumer):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _link(fan: int, throttle: bool = False, src: str = "/s") -> Link:
    sf = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1", "streamrepl.source.consumers": str(fan)})
    return Link(StreamPath("sf", src), sf, "SRC", DST, "DST", throttle, "lz4", 0)


class SpreadRig:
    """A link of PARTITIONS partitions on a Mover over fakes; `made`: the source consumers, in the order made."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.made: list[ClosingConsumer] = []
        self.producer = FakeProducer()
        self.ends = FakeEnds()

        def new_consumer(cluster: Cluster, **_: Any) -> ClosingConsumer:
            self.made.append(ClosingConsumer())
            return self.made[-1]

        def ends_client(on_lost: Any) -> Any:
            self.ends.on_lost = on_lost
            return self.ends

        self.mover = Mover.assemble(
            FakeConsumer(),  # type: ignore[arg-type]
            GatewayStats("test"),
            new_consumer,
            lambda: self.producer,  # type: ignore[arg-type,return-value]
            1000,
            quiet=QuietFeeds(lambda cluster: EndWatch(ends_client, 0.1, start=False)),
            new_probe=lambda cluster, **_: FakeConsumer(),  # the divergence checks' own, not counted
        )
        self.src_kt = kafka_topic_name(link.src, "t")
        self.dst_kt = kafka_topic_name(DST, "t")
        self.units = [Unit(DST, "t", p) for p in range(PARTITIONS)]
        self.follow([link])

    def follow(self, links: list[Link]) -> None:
        plan = Plan(links, {u: [(lk, self.src_kt) for lk in links] for u in self.units}, {}, [])
        self.mover.table.follow(plan, {self.dst_kt}, plan.units, True, self.producer)  # type: ignore[arg-type]

    def holder(self, partition: int) -> ClosingConsumer:
        """The one consumer that has `partition` assigned (fails when none or several do)."""
        holders = [c for c in self.made if any(a[1] == partition for a in c.assigned)]
        assert len(holders) == 1, (partition, [c.assigned for c in self.made])
        return holders[0]

    def keys(self, partition: int) -> list[bytes]:
        return [r["key"] for r in self.producer.log.get((self.dst_kt, partition), [])]


def test_a_links_partitions_are_read_by_several_consumers_and_each_record_lands_at_its_offset() -> None:
    rig = SpreadRig(_link(fan=4))
    assert len(rig.made) == 4, "one consumer a strand"
    for p in range(PARTITIONS):
        assert rig.holder(p) is rig.made[p % 4]
    for p in range(PARTITIONS):
        rig.holder(p).queued += [msg(rig.src_kt, p, o, f"p{p}o{o}".encode()) for o in range(3)]
    assert rig.mover.move_once() == 3 * PARTITIONS
    for p in range(PARTITIONS):
        assert rig.keys(p) == [f"p{p}o{o}".encode() for o in range(3)]


def test_a_fan_of_one_reads_every_partition_with_one_consumer() -> None:
    rig = SpreadRig(_link(fan=1))
    assert len(rig.made) == 1 and len(rig.made[0].assigned) == PARTITIONS


class Clocked(ClosingConsumer):
    """A consumer whose topic lookups take `took` seconds of a fake clock (None: they fail)."""

    clock = [0.0]
    took: float | None = 0.0

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        if Clocked.took is None:
            raise kafka.KafkaException(kafka.KafkaError(kafka.KafkaError._TIMED_OUT))
        Clocked.clock[0] += Clocked.took
        return super().list_topics(topic, timeout)


@pytest.mark.parametrize(
    ("took", "consumers"), [(0.004, 1), (lanes.LONG_LINE_LOOKUP + 0.05, lanes.SOURCE_CONSUMERS), (None, 4)]
)
def test_a_source_the_registry_says_nothing_of_is_read_with_consumers_chosen_from_its_first_lookup(
    took: float | None, consumers: int
) -> None:
    """On loopback several consumers cost the gateway a fifth of its rate; across a long line they are what fills it.
    The lane's first consumer's first topic lookup (which it makes anyway) says which; that consumer is kept."""
    made: list[Clocked] = []
    sizes: list[int] = []
    Clocked.took = took

    def new_consumer(cluster: Cluster, strands: int = 1, **_: Any) -> Clocked:
        made.append(Clocked())
        sizes.append(strands)
        return made[-1]

    feeds = SourceFeeds(new_consumer, clock=lambda: Clocked.clock[0])  # type: ignore[arg-type]
    sf = Cluster("sf", {"bootstrap.servers": "127.0.0.1:1"})
    lk = Link(StreamPath("sf", "/s"), sf, "SRC", DST, "DST", False, "lz4", 0)
    for p in range(PARTITIONS):
        assert feeds.ready(lk, "t", p) is True
    assert len(made) == consumers and len(feeds.consumers) == consumers, "the first consumer is the lane's first strand"
    assert sizes == [1] + [consumers] * (consumers - 1), "the others share the prefetch out"
    holders = {feeds.consumer_of(lk.name, p) for p in range(PARTITIONS)}
    assert holders == set(made)


def test_a_throttled_feed_is_paused_and_sought_in_its_own_consumer() -> None:
    rig = SpreadRig(_link(fan=4, throttle=True))
    rig.mover.throttle_rate = 10  # a slice of 2 records
    c = rig.holder(5)
    c.queued += [msg(rig.src_kt, 5, o, b"k") for o in range(4)]
    rig.mover.move_once()
    assert rig.keys(5) == [b"k", b"k"]
    assert c.paused == {(rig.src_kt, 5)} and c.seeks == [(rig.src_kt, 5, 2)]
    assert all(not other.paused and not other.seeks for other in rig.made if other is not c)
    state = rig.mover.table.units[Unit(DST, "t", 5)]
    state.throttled_until = 0.001
    rig.mover.unthrottle()
    assert c.paused == set(), "resumed in the consumer that paused it"


def test_a_quiet_feed_leaves_its_own_consumer_and_wakes_back_into_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = SpreadRig(_link(fan=4))
    c = rig.holder(6)
    c.queued += [msg(rig.src_kt, 6, o, b"k") for o in range(2)]
    rig.mover.move_once()
    rig.mover.move_once()  # the deliveries: the writer is idle
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 0.0)
    rig.mover._next_sweep = 0.0
    rig.mover.move_once()
    monkeypatch.setattr(quiet, "QUIET_SECONDS", 60.0)
    assert all(a[1] != 6 for other in rig.made for a in other.assigned), "not fetched by any consumer"
    rig.ends.ends[(rig.src_kt, 6)] = 5
    rig.mover.move_once()
    for w in rig.mover.feeds.quiet.watches.values():  # type: ignore[union-attr]
        w.round()
    rig.mover.move_once()
    assert rig.holder(6) is c and (rig.src_kt, 6, 2) in c.assigned, "back in its own consumer, where the writer is"


def test_the_consumers_read_while_any_of_their_links_feeds_are_not_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strand is skipped only when all feeds of its links are quiet: one busy partition keeps every strand read."""
    rig = SpreadRig(_link(fan=4))
    asked: list[int] = []
    for i, c in enumerate(rig.made):
        real = c.consume
        monkeypatch.setattr(c, "consume", lambda n, timeout=0, i=i, real=real: asked.append(i) or real(n))
    rig.mover.move_once()
    assert sorted(asked) == [0, 1, 2, 3]


def test_the_lanes_consumers_are_closed_when_its_last_link_leaves_the_plan() -> None:
    rig = SpreadRig(_link(fan=4))
    rig.follow([])
    assert all(c.closed for c in rig.made) and rig.mover.feeds.consumers == {}


def test_two_replicas_of_one_stream_never_share_a_consumer() -> None:
    x = _link(fan=4)
    y = Link(x.src, x.src_cluster, "SRC", StreamPath("ny", "/y"), "DY", False, "lz4", 0)
    rig = SpreadRig(x)
    plan_units = {u: [(x, rig.src_kt)] for u in rig.units}
    y_units = [Unit(y.dst, "t", p) for p in range(PARTITIONS)]
    plan_units.update({u: [(y, rig.src_kt)] for u in y_units})
    plan = Plan([x, y], plan_units, {}, [])
    dst = {rig.dst_kt, kafka_topic_name(y.dst, "t")}
    rig.mover.table.follow(plan, dst, plan.units, True, rig.producer)  # type: ignore[arg-type]
    assert len(rig.made) == 8
    for c in rig.made:
        assert len({(t, p) for t, p, _ in c.assigned}) == len(c.assigned), "a partition once in a consumer"


def test_the_strands_are_told_of_their_new_topics_at_once() -> None:
    """Four strands of a lane asked one after another cost a round trip to the source each before a resume's first
    fetch. Each fake waits at a barrier for the others: asked one after another, the barrier breaks."""
    barrier = threading.Barrier(4, timeout=5)
    passed: list[str] = []

    class Slow(FakeConsumer):
        def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
            barrier.wait()
            passed.append(str(topic))
            return super().list_topics(topic, timeout)

    topics = NewTopics()
    consumers: dict[str, Any] = {f"sf#0/{i}": Slow() for i in range(4)}
    for i, name in enumerate(consumers):
        topics.assign(consumers[name], name, TopicPartition("t", i, 0))
    topics.introduce(consumers)
    assert len(passed) == 4, "the four were asked at the same time"


def test_a_strand_shares_out_the_prefetch_and_asks_for_larger_partition_fetches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lane of four consumers holds no more prefetched records than one did; the registry's own sizes stand."""
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(discovery, "learn_cached", lambda cluster: None)
    monkeypatch.setattr(kafka, "consumer", lambda cluster, **extra: made.append(extra))
    feeds_module.source_consumer(_link(fan=4).src_cluster, strands=4)
    assert made[-1]["queued.max.messages.kbytes"] == feeds_module.QUEUED_KBYTES // 4
    assert made[-1]["max.partition.fetch.bytes"] == feeds_module.PARTITION_FETCH_BYTES
    feeds_module.source_consumer(_link(fan=1).src_cluster)
    assert made[-1]["queued.max.messages.kbytes"] == feeds_module.QUEUED_KBYTES
    feeds_module.source_consumer(_link(fan=16).src_cluster, strands=16)
    assert made[-1]["queued.max.messages.kbytes"] == feeds_module.QUEUED_KBYTES_MIN
    own = Cluster("sf", {"bootstrap.servers": "h:1", "max.partition.fetch.bytes": "1048576"})
    feeds_module.source_consumer(own)
    assert "max.partition.fetch.bytes" not in made[-1], "the registry's setting is the client's"


def test_partitions_taken_up_again_ask_for_their_topic_on_every_strand_at_once() -> None:
    """Partitions let go and taken up again (slots revoked and assigned back: a rebalance, the seat an adopter
    leaves) are read by strands that let their topic go and ask for it again before they read it (topicids.py).
    A strand asks for one topic, and one topic was not asked ahead (TopicIds.ask_ahead), so each strand asked in
    series, and each link's after the other's: across a 50 ms line a noida-db takeover took up its 4 partitions
    50-75 ms apart. Each fake waits at a barrier for the other strands of both links: asked one after another,
    the barrier breaks and the partitions do not start."""
    x = _link(fan=4)
    y = Link(x.src, x.src_cluster, "SRC", StreamPath("ny", "/y"), "DY", False, "lz4", 0)
    rig = SpreadRig(x)
    y_units = [Unit(y.dst, "t", p) for p in range(PARTITIONS)]
    plan = Plan(
        [x, y], {**{u: [(x, rig.src_kt)] for u in rig.units}, **{u: [(y, rig.src_kt)] for u in y_units}}, {}, []
    )
    dst = {rig.dst_kt, kafka_topic_name(y.dst, "t")}
    rig.mover.table.follow(plan, dst, plan.units, True, rig.producer)  # type: ignore[arg-type]
    assert len(rig.made) == 8 and len(rig.mover.table.units) == 2 * PARTITIONS
    rig.mover.table.follow(plan, dst, {}, True, rig.producer)  # type: ignore[arg-type]
    assert not rig.mover.table.units
    barrier = threading.Barrier(8, timeout=1)
    asked: list[int] = []
    for i, c in enumerate(rig.made):

        def slow(topic: str | None = None, timeout: float = 0, c: ClosingConsumer = c, i: int = i) -> Any:
            barrier.wait()
            asked.append(i)
            return FakeConsumer.list_topics(c, topic, timeout)

        c.list_topics = slow  # type: ignore[method-assign]
    rig.mover.table.follow(plan, dst, plan.units, True, rig.producer)  # type: ignore[arg-type]
    assert sorted(asked) == list(range(8)), "each strand asked once, all at the same time"
    assert set(rig.mover.table.units) == set(plan.units)


def test_a_seek_refused_while_a_partition_is_not_fetched_yet_is_tried_again_not_fatal() -> None:
    """A feed whose source ends below the replica reads the source's last record again (recheck_lagging). Right after
    its slots were taken up again the partition's cached end is known while librdkafka has not started fetching it:
    the seek fails with _STATE ("Failed to seek ... Erroneous state", issue 38), which killed the gateway's worker
    three times. Refused, it is tried again at the next pass."""
    rig = SpreadRig(_link(fan=1))
    state = rig.mover.table.units[Unit(DST, "t", 0)]
    state.rechecked.clear()
    state.writer.next = 10
    c = rig.holder(0)
    refusals = [kafka.KafkaException(kafka.KafkaError(kafka.KafkaError._STATE, "Failed to seek: Erroneous state"))]
    seek = c.seek

    def refusing_seek(tp: Any) -> None:
        if refusals:
            raise refusals.pop()
        seek(tp)

    c.seek = refusing_seek  # type: ignore[method-assign]
    c.get_watermark_offsets = lambda tp, timeout=0, cached=False: (0, 5)  # type: ignore[method-assign]
    rig.mover.feeds.recheck_lagging({Unit(DST, "t", 0): state})
    assert not state.rechecked and c.seeks == []
    rig.mover.feeds.recheck_lagging({Unit(DST, "t", 0): state})
    assert c.seeks == [(rig.src_kt, 0, 4)] and state.rechecked
