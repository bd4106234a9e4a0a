"""A gateway survives a source topic or stream deleted under it (issue: the whole gateway exited 139, no log line,
and replication into the cluster stopped). librdkafka 2.16 crashes a consumer when a topic it fetches from disappears
on Tansu; streamrepl's own `stream topic delete` / `stream delete` therefore take the topic out of every plan and wait
for the gateways to let it go before the Kafka topic is deleted. It crashes it too when it fetches a topic deleted and
created again under its name by the old topic's id, which a consumer that read the old topic keeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import FAST_GROUP
from support.streams import (
    Gateways,
    assert_identical,
    caught_up,
    cli,
    link,
    new_stream,
    new_topics,
    produce,
    same_ends,
    sp,
    uuid_of,
    wait_until,
)

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida_matrix

#: Short gateway sessions: each test's gateway joins the group the one before it left (killed) without waiting long.
FAST = {
    "STREAMREPL_GATEWAY_SESSION_MS": str(FAST_GROUP["session.timeout.ms"]),
    "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": str(FAST_GROUP["session.timeout.ms"] // 2),
}


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own: it deletes topics under a running gateway, which would touch other modules' replicas.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as ec:
        yield ec


def test_deleting_a_source_topic_then_the_stream_leaves_the_gateway_running(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    reg = ec.registry_path
    src, dst, other_src, other_dst = "/sanfrancisco/d4", "/newyork/d4", "/sanfrancisco/o4", "/newyork/o4"
    for s, d in ((src, dst), (other_src, other_dst)):
        new_stream(reg, s)
        new_stream(reg, d)
        new_topics(reg, s, {"a": 2, "b": 2})
        link(reg, s, d)
    sf = ec.brokers["sanfrancisco"].bootstrap
    with Gateways(reg, "newyork", tmp_path, env=FAST) as gws:
        name = gws.start()
        for s in (src, other_src):
            for t in ("a", "b"):
                produce(sf, sp(s), t, 50, 2)
        wait_until(lambda: caught_up(reg, src) and caught_up(reg, other_src), 120, "the replicas to catch up")

        cli("stream", "topic", "delete", "-path", src, "-topic", "a", registry=reg)
        produce(sf, sp(src), "b", 50, 2, start=50)
        wait_until(lambda: caught_up(reg, src), 60, "topic b to keep replicating after topic a was deleted")
        assert gws.procs[name].poll() is None, "the gateway died when a source topic was deleted"

        cli("stream", "delete", "-path", src, registry=reg)
        produce(sf, sp(other_src), "a", 50, 2, start=50)
        wait_until(lambda: caught_up(reg, other_src), 60, "the other stream to keep replicating")
        assert gws.procs[name].poll() is None, "the gateway died when a source stream was deleted"


def started_once(log: Path) -> bool:
    """The gateway whose log this is was never started again (by a supervisor, after a crash)."""
    return log.read_text().count(" started for cluster ") == 1


def test_a_source_stream_deleted_and_created_again_under_its_name_is_read_again(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    """Issue 23: the links of a source cluster share one consumer (replication/lanes.py), which outlives a link that
    leaves the plan. librdkafka keeps each topic it has read, with the topic's id; the stream deleted and created again
    under its path has Kafka topics of the same names, and the shared consumer fetched them by the deleted topics' ids:
    Tansu's answer killed the gateway (exit -11), and the other stream of the source cluster stopped with it."""
    reg = ec.registry_path
    gone, kept, again = "/sanfrancisco/g5", "/sanfrancisco/k5", "/newyork/g5again"
    topics = {"a": 2, "b": 2}
    for s, d in ((gone, "/newyork/g5"), (kept, "/newyork/k5")):
        new_stream(reg, s)
        new_stream(reg, d)
        new_topics(reg, s, topics)
        link(reg, s, d)
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path, env=FAST) as gws:
        name = gws.start()
        gateway = gws.procs[name]
        for s in (gone, kept):
            for t in topics:
                produce(sf, sp(s), t, 20, 2)

        def kept_caught_up() -> bool:
            return same_ends(sf, sp(kept), ny, sp("/newyork/k5"), topics)

        wait_until(
            lambda: same_ends(sf, sp(gone), ny, sp("/newyork/g5"), topics) and kept_caught_up(),
            60,
            "the replicas to catch up",
        )
        cli("stream", "delete", "-path", gone, registry=reg)
        for t in topics:
            produce(sf, sp(kept), t, 5, 2, start=20)
        wait_until(lambda: gateway.poll() is not None or kept_caught_up(), 30, "the other stream to go on")
        assert gateway.poll() is None, f"the gateway died (exit {gateway.returncode}) when {gone} was deleted"

        # The same path again, replicated into a new replica: its Kafka topics have the deleted ones' names.
        new_stream(reg, gone)
        new_stream(reg, again)
        new_topics(reg, gone, topics)
        link(reg, gone, again)
        for t in topics:
            produce(sf, sp(gone), t, 5, 2, tag="again")
        wait_until(
            lambda: gateway.poll() is not None or same_ends(sf, sp(gone), ny, sp(again), topics),
            30,
            "the new stream to replicate",
        )
        assert gateway.poll() is None, f"the gateway died (exit {gateway.returncode}) reading {gone} created again"
        for t in topics:
            produce(sf, sp(kept), t, 5, 2, start=25)
        wait_until(kept_caught_up, 30, "the other stream to go on")

        assert gateway.poll() is None and started_once(tmp_path / f"{name}.log")
        assert assert_identical(sf, sp(kept), uuid_of(reg, kept), ny, sp("/newyork/k5"), topics) == 60
        assert assert_identical(sf, sp(gone), uuid_of(reg, gone), ny, sp(again), topics) == 10


def test_a_source_topic_deleted_outside_streamrepl_costs_a_restart_not_the_other_streams(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    """A Kafka admin tool deletes a replicated source topic under a running gateway. On Tansu librdkafka's consumer
    of it dies with the process (exit -11): the gateway's supervisor starts it again, and the other stream of the
    source cluster, read by the same consumer, goes on; on noida-db the gateway survives. Either way every record of
    the other stream is in its replica."""
    from streamrepl import kafka
    from streamrepl.paths import kafka_topic_name
    from streamrepl.registry import Cluster

    reg = ec.registry_path
    gone, kept = "/sanfrancisco/x6", "/sanfrancisco/y6"
    topics = {"a": 2}
    for s, d in ((gone, "/newyork/x6"), (kept, "/newyork/y6")):
        new_stream(reg, s)
        new_stream(reg, d)
        new_topics(reg, s, topics)
        link(reg, s, d)
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path, env=FAST) as gws:
        gws.start("outside", supervise=True)
        for s in (gone, kept):
            produce(sf, sp(s), "a", 20, 2)

        def kept_caught_up() -> bool:
            return same_ends(sf, sp(kept), ny, sp("/newyork/y6"), topics)

        wait_until(lambda: kept_caught_up() and caught_up(reg, gone), 90, "the replicas to catch up")
        kafka.delete_topics(Cluster("sanfrancisco", {"bootstrap.servers": sf}), [kafka_topic_name(sp(gone), "a")])
        for round_ in range(3):
            produce(sf, sp(kept), "a", 10, 2, start=20 + 10 * round_)
            wait_until(kept_caught_up, 90, "the other stream to go on after the topic was deleted outside streamrepl")
        assert gws.procs["outside"].poll() is None, "the supervisor ended"
        assert assert_identical(sf, sp(kept), uuid_of(reg, kept), ny, sp("/newyork/y6"), topics) == 50
        # The way out the README gives: take the topic out of the stream (it works when the Kafka topic is gone).
        cli("stream", "topic", "delete", "-path", gone, "-topic", "a", registry=reg)
