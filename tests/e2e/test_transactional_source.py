"""A transactional source on a broker whose transaction markers take offsets (noida-db, as Apache Kafka): every
visible record keeps its offset in the replica, and the replica's partitions end where the source's do; the offsets of
markers and aborted records hold fillers, which no consumer sees."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support import run_cli
from support.clusters import RECENT_MS
from support.streams import (
    Gateways,
    link,
    new_stream,
    new_topics,
    read_partition,
    sp,
    tally,
    true_ends,
    uuid_of,
    wait_until,
)

from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.replication import quiet


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of their own, noida-db: its markers take offsets, and it filters aborted records as Kafka does.
    with EphemeralClusters(["sanfrancisco", "newyork"], broker="noida") as ec:
        yield ec


def write_transactions(bootstrap: str, kt: str, rounds: int = 6) -> int:
    """Committed and aborted transactions and plain records, interleaved; how many records are visible. Every third
    transaction is aborted: with rounds=1 the end moves by invisible offsets only."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(30)
    visible = 0
    if rounds == 1:
        p.begin_transaction()
        p.produce(kt, key=b"aborted", value=b"v", partition=0, timestamp=RECENT_MS)
        p.abort_transaction(30)
        return 0
    for round_ in range(rounds):
        p.begin_transaction()
        for i in range(5):
            p.produce(kt, key=f"t{round_}-{i}".encode(), value=b"v", partition=0, timestamp=RECENT_MS + round_)
        if round_ % 3 == 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            visible += 5
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        plain.produce(kt, key=f"plain-{i}".encode(), value=b"p", partition=0, timestamp=RECENT_MS + 10)
    plain.flush(30)
    return visible + 4


def ends_or_none(bootstrap: str, path: str) -> dict | None:
    try:
        return true_ends(bootstrap, sp(path), {"t": 1})
    except Exception:  # noqa: BLE001 - the replica topic is not there yet
        return None


def test_a_transactional_source_keeps_every_offset_and_its_end(ec: EphemeralClusters, tmp_path: Path) -> None:
    reg = ec.registry_path
    sf, ny = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    src = new_stream(reg, "/sanfrancisco/tx")
    dst = new_stream(reg, "/newyork/tx", copyfrom=src)
    new_topics(reg, src, {"t": 1})
    kt = kafka_topic_name(sp(src), "t")
    visible = write_transactions(sf, kt)
    link(reg, src, dst)
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        wait_until(
            lambda: ends_or_none(ny, dst) == true_ends(sf, sp(src), {"t": 1}),
            120,
            "the replica to end where the source ends",
        )
        # Quiet now: not fetched, its end watched (replication/quiet.py). An aborted transaction moves the end with
        # nothing to read: the wake must fill those offsets.
        time.sleep(quiet.QUIET_SECONDS + 1.5)
        write_transactions(sf, kt, rounds=1)
        wait_until(lambda: ends_or_none(ny, dst) == true_ends(sf, sp(src), {"t": 1}), 60, "a wake for a marker")
    src_end = true_ends(sf, sp(src), {"t": 1})[("t", 0)]
    assert src_end > visible, "the markers and aborted records take offsets on this broker"
    t = tally(sf, sp(src), uuid_of(reg, src), ny, sp(dst), {"t": 1})
    assert t.ok and t.records == visible, t
    replica = read_partition(ny, kafka_topic_name(sp(dst), "t"), 0)
    assert [r.offset for r in replica if not r.filler] == [r.offset for r in read_partition(sf, kt, 0)]
    # A consumer of the replica sees the source's visible records, at the same offsets.
    run = run_cli("consume", "-path", f"{dst}:t", "-json", "-timeout", "5", env={"STREAMREPL_CLUSTERS": str(reg)})
    assert run.code == 0, run
    consumed = [json.loads(line)["offset"] for line in run.stdout.splitlines() if line.strip()]
    assert consumed == [r.offset for r in read_partition(sf, kt, 0)]
