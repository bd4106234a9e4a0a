"""A gateway survives a source topic or stream deleted under it (issue: the whole gateway exited 139, no log line,
and replication into the cluster stopped). librdkafka 2.16 crashes a consumer when a topic it fetches from disappears
on Tansu; streamrepl's own `stream topic delete` / `stream delete` therefore take the topic out of every plan and wait
for the gateways to let it go before the Kafka topic is deleted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.streams import Gateways, caught_up, cli, link, new_stream, new_topics, produce, sp, wait_until

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.e2e


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
    with Gateways(reg, "newyork", tmp_path) as gws:
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
