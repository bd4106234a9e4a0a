"""Which consumer reads each feed (replication/lanes.py): a link's lane, the lane's strands (one consumer each) chosen by
partition number, and what stays fixed while a link is in the plan."""

from __future__ import annotations

from streamrepl.paths import StreamPath
from streamrepl.registry import Cluster
from streamrepl.replication import lanes as lanes_module
from streamrepl.replication.lanes import Lanes
from streamrepl.replication.links import Link


def _link(src: str, dst: str, fan: int | None = None, cluster: str = "sf") -> Link:
    props = {"bootstrap.servers": "127.0.0.1:1"}
    if fan is not None:
        props["streamrepl.source.consumers"] = str(fan)
    c = Cluster(cluster, props)
    return Link(StreamPath(cluster, src), c, f"S{src}", StreamPath("ny", dst), f"D{dst}", False, "lz4", 0)


def test_a_links_partitions_are_spread_over_its_lanes_strands_by_partition_number() -> None:
    lanes, a = Lanes(), _link("/a", "/a", fan=4)
    strands = [lanes.strand(a, p) for p in range(10)]
    assert strands == [f"sf#0/{p % 4}" for p in range(10)]
    assert [lanes.strand_of(a.name, p) for p in range(10)] == strands, "the same strand every time it is asked"
    assert lanes.links == {f"sf#0/{i}": {a.name} for i in range(4)}


def test_the_fan_is_the_registrys_else_the_one_chosen_for_the_new_lane() -> None:
    asked: list[str] = []

    def choose(lane: str) -> int:
        asked.append(lane)
        return 2

    lanes = Lanes()
    assert {lanes.strand(_link("/a", "/a", fan=1), p, choose) for p in range(8)} == {"sf#0/0"}
    assert asked == [], "the registry's fan is not chosen again"
    other = Lanes()
    assert {other.strand(_link("/a", "/a"), p, choose) for p in range(8)} == {"sf#0/0", "sf#0/1"}
    assert asked == ["sf#0"], "chosen once, when the lane was made"
    assert len({Lanes().strand(_link("/a", "/a"), p) for p in range(64)}) == lanes_module.SOURCE_CONSUMERS


def test_a_source_whose_first_lookup_was_slow_or_did_not_answer_is_read_with_several_consumers() -> None:
    assert lanes_module.lookup_fan(0.003) == 1
    assert lanes_module.lookup_fan(lanes_module.LONG_LINE_LOOKUP + 0.01) == lanes_module.SOURCE_CONSUMERS
    assert lanes_module.lookup_fan(None) == lanes_module.SOURCE_CONSUMERS


def test_two_links_of_one_source_stream_never_share_a_strand() -> None:
    """A consumer holds a partition once, at one position: two replicas of a stream read it at their own offsets."""
    lanes, x, y = Lanes(), _link("/a", "/x", fan=4), _link("/a", "/y", fan=4)
    sx = {lanes.strand(x, p) for p in range(8)}
    sy = {lanes.strand(y, p) for p in range(8)}
    assert len(sx) == len(sy) == 4 and not sx & sy


def test_links_of_other_streams_share_the_clusters_strands() -> None:
    lanes, a, b = Lanes(), _link("/a", "/a", fan=4), _link("/b", "/b", fan=4)
    assert [lanes.strand(a, p) for p in range(4)] == [lanes.strand(b, p) for p in range(4)]
    lanes.route("sf#0/1", "topic-a", a.name)
    lanes.route("sf#0/1", "topic-b", b.name)
    lanes.release(a.name)
    assert lanes.links == {f"sf#0/{i}": {b.name} for i in range(4)}, "b still reads them"
    assert lanes.routes == {"sf#0/1": {"topic-b": b.name}}
    lanes.release(b.name)
    assert lanes.links == {} and lanes.routes == {} and lanes.fan == {} and lanes.of == {}


def test_a_feed_never_moves_while_its_link_is_in_the_plan_even_when_the_registry_changes_the_fan() -> None:
    """The fan is the lane's, fixed while any link has the lane: a registry edit (a new Link, the same name) does not
    move a feed to another consumer. A lane made after the old one was dropped takes the new fan."""
    lanes, before = Lanes(), _link("/a", "/a", fan=4)
    first = [lanes.strand(before, p) for p in range(8)]
    after = _link("/a", "/a", fan=2)
    assert [lanes.strand(after, p) for p in range(8)] == first
    lanes.release(after.name)
    assert [lanes.strand(after, p) for p in range(8)] == [f"sf#0/{p % 2}" for p in range(8)]


def test_a_second_link_joining_a_lane_takes_the_lanes_fan() -> None:
    lanes, a, b = Lanes(), _link("/a", "/a", fan=4), _link("/b", "/b", fan=2)
    lanes.strand(a, 0)
    assert [lanes.strand(b, p) for p in range(4)] == [f"sf#0/{p}" for p in range(4)]
