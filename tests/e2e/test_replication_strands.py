"""A link whose partitions are read by several source consumers (replication/lanes.py: a lane's strands, here 3, set
by the source's registry entry) replicates exactly: every record at its offset with its key, value, headers and
timestamp, through a gateway SIGKILLed and started again, and through a pause and a resume, with records coming in."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException
from support import not_on_noida
from support.streams import (
    Gateways,
    SteadyProducer,
    assert_identical,
    caught_up,
    cli,
    link,
    new_stream,
    new_topics,
    produce,
    sp,
    tally,
    true_ends,
    uuid_of,
    wait_until,
)

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida

TOPICS = {"a": 8, "b": 5}  # 13 partitions: fewer than units.START_QUIET_AT, so every feed starts busy
STRANDS = 3


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        path = Path(clusters.registry_path)
        doc = yaml.safe_load(path.read_text())
        doc["clusters"]["sanfrancisco"]["streamrepl.source.consumers"] = STRANDS
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        yield clusters


def strands_made(log: Path) -> set[str]:
    """The source consumers a gateway made, from its log (feeds.py)."""
    return set(re.findall(r"source consumer (\S+) made", log.read_text()))


def applied(ec: EphemeralClusters, dst: str) -> int:
    """The records the replica holds (its partitions' ends summed; 0 before the gateway made its topics)."""
    try:
        return sum(true_ends(ec.brokers["newyork"].bootstrap, sp(dst), TOPICS).values())
    except KafkaException:
        return 0


def _pair(ec: EphemeralClusters, name: str) -> tuple[str, str]:
    reg = ec.registry_path
    src = new_stream(reg, f"/sanfrancisco/{name}", "-defaultpartitions", "8")
    new_topics(reg, src, TOPICS)
    dst = new_stream(reg, f"/newyork/{name}", copyfrom=src)
    link(reg, src, dst)
    return src, dst


def _compare(ec: EphemeralClusters, src: str, dst: str, sent: int) -> None:
    reg, src_bs, dst_bs = ec.registry_path, ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    wait_until(lambda: caught_up(reg, src), 120, "the replica to catch up")
    t = tally(src_bs, sp(src), uuid_of(reg, src), dst_bs, sp(dst), TOPICS)
    assert t.ok, t
    assert assert_identical(src_bs, sp(src), uuid_of(reg, src), dst_bs, sp(dst), TOPICS) == sent


@not_on_noida(
    "noida-db's group coordinator never expires a member that died (SIGKILL): its partitions stay assigned"
    " to it and the restarted gateway's join waits for it (bench/probes/broker_probe.py: kill)"
)
@pytest.mark.slow
def test_a_link_read_by_several_consumers_is_replicated_exactly_through_a_sigkill(ec, tmp_path: Path) -> None:
    src, dst = _pair(ec, "strandskill")
    src_bs = ec.brokers["sanfrancisco"].bootstrap
    for topic, parts in TOPICS.items():
        produce(src_bs, sp(src), topic, 400 * parts, parts)  # a backlog
    backlog = 400 * sum(TOPICS.values())
    producer = SteadyProducer(src_bs, sp(src), TOPICS, rate=2000, tag="strand").start()
    try:
        with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
            gws.start("ny0")
            wait_until(lambda: applied(ec, dst) > backlog, 120, "the gateway to write past the backlog")
            gws.kill("ny0", signal.SIGKILL)
            made = strands_made(tmp_path / "ny0.log")
            assert made == {f"sanfrancisco#0/{i}" for i in range(STRANDS)}, made
            gws.start("ny0")
            floor = applied(ec, dst)
            wait_until(lambda: applied(ec, dst) > floor, 120, "the restarted gateway to write")
            sent = producer.stop()
            _compare(ec, src, dst, backlog + sent)
    finally:
        producer._stop.set()


def test_a_link_read_by_several_consumers_is_replicated_exactly_through_a_pause_and_resume(ec, tmp_path: Path) -> None:
    src, dst = _pair(ec, "strandspause")
    reg, src_bs = ec.registry_path, ec.brokers["sanfrancisco"].bootstrap
    producer = SteadyProducer(src_bs, sp(src), TOPICS, rate=2000, tag="pause").start()
    try:
        with Gateways(reg, "newyork", tmp_path) as gws:
            gws.start("ny0")
            wait_until(lambda: applied(ec, dst) > 2000, 120, "the gateway to write")
            cli("stream", "replica", "pause", "-path", src, "-replica", dst, registry=reg)
            time.sleep(2)  # records keep coming while the link is paused
            cli("stream", "replica", "resume", "-path", src, "-replica", dst, registry=reg)
            floor = producer.sent
            wait_until(lambda: applied(ec, dst) > floor, 120, "the resumed link to write past the pause")
            sent = producer.stop()
            _compare(ec, src, dst, sent)
            made = strands_made(tmp_path / "ny0.log")
            assert made == {f"sanfrancisco#0/{i}" for i in range(STRANDS)}, made
    finally:
        producer._stop.set()
