"""CursorReplicator with fake admin clients and a fake reader: what it commits on the replica, and what it leaves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from support.fakes import WatermarkReader

from streamrepl.cursors import CursorReplicator
from streamrepl.errors import StreamreplError
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster

SRC = StreamPath("sanfrancisco", "/activity")
DST = StreamPath("newyork", "/activity")
SRC_CLUSTER = Cluster("sanfrancisco", {"bootstrap.servers": "127.0.0.1:1"})
DST_CLUSTER = Cluster("newyork", {"bootstrap.servers": "127.0.0.1:2"})


def src_kt(topic: str = "clicks") -> str:
    return kafka_topic_name(SRC, topic)


def dst_kt(topic: str = "clicks") -> str:
    return kafka_topic_name(DST, topic)


class Done:
    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class Answer:
    """What a broker's answer objects carry, as far as the cursor code reads them."""

    group_id: str = ""
    topic_partitions: list[TopicPartition] = field(default_factory=list)
    valid: list[Any] = field(default_factory=list)
    state: Any = ConsumerGroupState.EMPTY
    members: list[Any] = field(default_factory=list)


class FakeAdmin:
    def __init__(self, offsets: dict[str, dict[tuple[str, int], int]], active: set[str] | None = None) -> None:
        self.offsets = offsets
        self.active = active or set()
        self.altered: list[tuple[str, list[TopicPartition]]] = []
        self.down = False
        self.listings = 0

    def list_consumer_groups(self, request_timeout: float) -> Done:
        self.listings += 1
        if self.down:
            return Done(error=KafkaException(KafkaError(KafkaError._TRANSPORT)))
        return Done(Answer(valid=[Answer(group_id=g) for g in self.offsets]))

    def list_consumer_group_offsets(self, req: list[Any], request_timeout: float) -> dict[str, Done]:
        g = req[0].group_id
        tps = [TopicPartition(kt, p, off) for (kt, p), off in self.offsets.get(g, {}).items()]
        return {g: Done(Answer(g, tps))}

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Done]:
        member = Answer()
        member.__dict__.update(member_id="m-1", client_id="app", host="/10.0.0.1", assignment=None)
        return {
            g: Done(Answer(g, state=ConsumerGroupState.STABLE, members=[member]) if g in self.active else Answer(g))
            for g in groups
        }

    def alter_consumer_group_offsets(self, req: list[Any], request_timeout: float) -> dict[str, Done]:
        g, tps = req[0].group_id, req[0].topic_partitions
        self.altered.append((g, tps))
        for tp in tps:
            self.offsets.setdefault(g, {})[(tp.topic, tp.partition)] = tp.offset
        return {g: Done(Answer(g, [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in tps]))}


def replicator(src: FakeAdmin, dst: FakeAdmin, reader: WatermarkReader) -> tuple[CursorReplicator, list[str]]:
    built: list[str] = []

    def admin(cluster: Cluster) -> Any:
        built.append(cluster.name)
        return src if cluster is SRC_CLUSTER else dst

    rep = CursorReplicator(SRC_CLUSTER, DST_CLUSTER, SRC, DST, admin=admin, reader=lambda _c: reader)
    return rep, built


def test_cursors_move_forward_only_up_to_what_the_replica_holds() -> None:
    src = FakeAdmin(
        {
            "ahead": {(src_kt(), 0): 10},
            "behind": {(src_kt(), 0): 3},
            "short": {(src_kt(), 1): 20},
            "busy": {(src_kt(), 0): 10},
            "streamrepl-gateway": {(src_kt(), 0): 10},  # streamrepl's own groups are not carried
            "other": {(kafka_topic_name(StreamPath("sanfrancisco", "/other"), "clicks"), 0): 10},
        }
    )
    dst = FakeAdmin({"ahead": {(dst_kt(), 0): 4}, "behind": {(dst_kt(), 0): 7}}, active={"busy"})
    rep, _ = replicator(src, dst, WatermarkReader({(dst_kt(), 0): 100, (dst_kt(), 1): 5}))
    changed = rep.run_once()
    assert sorted((c["group"], c["partition"], c["source"], c["previous"], c["offset"]) for c in changed) == [
        ("ahead", 0, 10, 4, 10),
        ("short", 1, 20, -1, 5),
    ]
    assert sorted(g for g, _ in dst.altered) == ["ahead", "short"]
    assert dst.offsets["behind"] == {(dst_kt(), 0): 7}
    assert rep.run_once() == []  # nothing moved since


def test_topics_limit_the_work_and_unreplicated_topics_wait() -> None:
    src = FakeAdmin({"g": {(src_kt("clicks"), 0): 5, (src_kt("views"), 0): 6}})
    dst = FakeAdmin({})
    rep, _ = replicator(src, dst, WatermarkReader({(dst_kt("clicks"), 0): 9}))
    assert [c["topic"] for c in rep.run_once(["views"])] == []  # views not on the replica yet
    assert [c["topic"] for c in rep.run_once()] == ["clicks"]


def test_an_unreachable_cluster_raises_and_the_next_run_uses_new_admin_clients() -> None:
    src = FakeAdmin({"g": {(src_kt(), 0): 5}})
    rep, built = replicator(src, FakeAdmin({}), WatermarkReader({(dst_kt(), 0): 9}))
    assert built == []  # made when first needed
    src.down = True
    with pytest.raises(StreamreplError, match="does not answer"):
        rep.run_once()
    assert built == ["sanfrancisco"]  # the replica's cluster was not asked
    src.down = False
    assert [c["offset"] for c in rep.run_once()] == [5]
    assert built == ["sanfrancisco", "sanfrancisco", "newyork"]  # the source's made again, not reused


def test_a_gateways_round_asks_each_source_cluster_for_its_groups_once_for_all_its_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 links out of one cluster asked it for its groups and their commits 20 times every round (the idle cost of
    the cursor sync at 800 partitions): once a round serves them all, and a source that does not answer fails the
    round of each of its links, as before."""
    from streamrepl.replication import cursor_sync, links

    streams = [f"/s{i}" for i in range(3)]
    src = FakeAdmin({"g": {(kafka_topic_name(StreamPath("sanfrancisco", s), "clicks"), 0): 7 for s in streams}})
    dst = FakeAdmin({})
    reader = WatermarkReader({(kafka_topic_name(StreamPath("newyork", s), "clicks"), 0): 9 for s in streams})

    def with_fakes(src_cluster: Cluster, dst_cluster: Cluster, src_stream: StreamPath, dst_stream: StreamPath) -> Any:
        def admin(cluster: Cluster) -> Any:
            return src if cluster is SRC_CLUSTER else dst

        return CursorReplicator(src_cluster, dst_cluster, src_stream, dst_stream, admin=admin, reader=lambda _c: reader)

    monkeypatch.setattr(cursor_sync, "CursorReplicator", with_fakes)
    plan = links.Plan(
        [
            links.Link(StreamPath("sanfrancisco", s), SRC_CLUSTER, "u", StreamPath("newyork", s), "v", False, "", 0)
            for s in streams
        ],
        {},
        {},
        [],
    )

    sync = cursor_sync.CursorSync(DST_CLUSTER, lambda: plan.links)
    assert sync.run_once() == 3  # each replica's cursor moved
    assert src.listings == 1
    assert sorted(off for _, tps in dst.altered for off in [tps[0].offset]) == [7, 7, 7]

    src.down = True
    assert sync.run_once() == 0
    assert (src.listings, sync.errors) == (2, 3)  # asked once; each link's round failed
