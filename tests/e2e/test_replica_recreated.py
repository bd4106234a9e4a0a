"""A gateway survives a replica topic deleted and created again under it (issue 25: it SIGSEGVed a few seconds after
logging "a partition it wrote was re-created ...; every partition starts again"). The gateway's reader of the replica
partitions (their ends, their last records) keeps each topic it has read with the topic's id, and librdkafka 2.16
fetches by that id: the topic created again under its name was fetched by the deleted one's id, and Tansu's answer
killed the whole process. `stream replica resync -topic` rebuilds a replica topic that way, and a replica topic deleted
with `stream topic delete` is created again by the gateway while its source still has the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest
from support import FAST_GROUP
from support.streams import (
    Gateways,
    assert_identical,
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

#: Short gateway sessions: each test's gateway joins the group the one before it left (killed) without waiting long.
FAST = {
    "STREAMREPL_GATEWAY_SESSION_MS": str(FAST_GROUP["session.timeout.ms"]),
    "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": str(FAST_GROUP["session.timeout.ms"] // 2),
}

_n = count()


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own: it deletes replica topics under a running gateway.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as ec:
        yield ec


def started_once(log: Path) -> bool:
    """The gateway whose log this is was never started again (by a supervisor, after a crash)."""
    return log.read_text().count(" started for cluster ") == 1


@pytest.mark.parametrize("how", ["resync", "topic delete"])
def test_a_replica_topic_created_again_under_a_running_gateway(ec: EphemeralClusters, tmp_path: Path, how: str) -> None:
    reg = ec.registry_path
    n = next(_n)
    src, dst, other_src, other_dst = f"/sanfrancisco/r{n}", f"/newyork/r{n}", f"/sanfrancisco/o{n}", f"/newyork/o{n}"
    topics = {"a": 2, "b": 2}
    for s, d in ((src, dst), (other_src, other_dst)):
        new_stream(reg, s)
        new_stream(reg, d)
        new_topics(reg, s, topics)
        link(reg, s, d)
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path, env=FAST) as gws:
        name = gws.start()
        gateway = gws.procs[name]
        sent = 20
        for s in (src, other_src):
            for t in topics:
                produce(sf, sp(s), t, sent, 2)
        pairs = ((src, dst), (other_src, other_dst))

        def caught_up() -> bool:
            return all(same_ends(sf, sp(s), ny, sp(d), topics) for s, d in pairs)

        wait_until(caught_up, 60, "the replicas to catch up")

        if how == "resync":
            cli("stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "a", registry=reg)
        else:
            cli("stream", "topic", "delete", "-path", dst, "-topic", "a", registry=reg)
        # The gateway writes topic a again from its source's start, then reads the replica's end before each write
        # that follows a quiet spell (replication/guard.py, end_unchanged): a few spells, a second apart.
        for _ in range(3):
            for s in (src, other_src):
                for t in topics:
                    produce(sf, sp(s), t, 2, 2, start=sent)
            sent += 2
            time.sleep(1)
            assert gateway.poll() is None, f"the gateway died (exit {gateway.returncode}) after the {how}"
        wait_until(
            lambda: gateway.poll() is not None or caught_up(),
            30,
            "the replicas to catch up again",
        )
        assert gateway.poll() is None, f"the gateway died (exit {gateway.returncode}) after the {how}"
        assert started_once(tmp_path / f"{name}.log")
        for s, d in pairs:
            assert assert_identical(sf, sp(s), uuid_of(reg, s), ny, sp(d), topics) == 2 * sent
