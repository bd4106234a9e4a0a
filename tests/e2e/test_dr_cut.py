"""`stream replica promote` reports its cut: per partition the last record the replica got (offset, timestamp), the
spread across partitions, and, when the lost source still answers, what the replica lacks (records, time range);
in the table and in -json, and again on a rerun. Checked record by record against both streams, under a steady
producer; then with the source's broker gone (what the replica lacks is unknown, and said so).

Brokers of the module's own: the last test stops the source's broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clusters import kill_broker, registered_clusters
from support.streams import (
    Gateways,
    SteadyProducer,
    cli,
    link,
    new_stream,
    new_topics,
    read_all,
    sp,
    true_ends,
    wait_until,
)

from streamrepl.local import EphemeralClusters

TOPICS = {"t": 2, "u": 2}


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with registered_clusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


def linked(ec: EphemeralClusters) -> tuple[str, str]:
    reg, name = ec.registry_path, f"c{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), new_stream(reg, f"/newyork/{name}")
    new_topics(reg, sf, TOPICS)
    new_topics(reg, ny, TOPICS)
    link(reg, sf, ny)
    return sf, ny


def test_promote_under_load_reports_its_cut_and_what_the_replica_lacks(ec: EphemeralClusters, tmp_path: Path) -> None:
    reg = ec.registry_path
    sf, ny = linked(ec)
    sf_bs, ny_bs = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        producer = SteadyProducer(sf_bs, sp(sf), TOPICS, rate=300).start()
        try:
            wait_until(lambda: all(e >= 30 for e in true_ends(ny_bs, sp(ny), TOPICS).values()), 120, "replication")
            run = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
        finally:
            producer.stop()
        gws.stop_all()
    rows = run.json()["data"]
    src, dst = read_all(sf_bs, sp(sf), TOPICS), read_all(ny_bs, sp(ny), TOPICS)
    assert [(r["topic"], r["partition"]) for r in rows] == sorted(src)
    for r in rows:
        tp = (r["topic"], r["partition"])
        held, source = dst[tp], src[tp]
        # The replica holds a prefix of its source, to the cut; its last record is the one reported.
        assert r["cutoffset"] == len(held) == true_ends(ny_bs, sp(ny), TOPICS)[tp]
        assert [(x.offset, x.key, x.value) for x in held] == [(x.offset, x.key, x.value) for x in source[: len(held)]]
        assert (r["lastoffset"], r["lasttimestamp"]) == (held[-1].offset, held[-1].timestamp)
        # What it lacks: the source's records from the cut to the source's end when promote read it.
        lacks = [x for x in source if r["cutoffset"] <= x.offset < r["sourceend"]]
        assert r["missing"] == len(lacks)
        if lacks:
            stamps = [x.timestamp for x in lacks]
            assert (r["missingfromts"], r["missingtots"]) == (min(stamps), max(stamps))
    stamps = [r["lasttimestamp"] for r in rows]
    assert {r["spreadms"] for r in rows} == {max(stamps) - min(stamps)}
    assert [r["behindms"] for r in rows] == [max(stamps) - s for s in stamps]
    assert sum(r["missing"] for r in rows) > 0, "the producer wrote on while promote ran"
    assert f"{ny} lacks {sum(r['missing'] for r in rows)} records that {sf} holds past the cut" in run.stderr
    assert "their last records span" in run.stderr
    # A rerun reports the same cut; the table has its columns.
    again = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg).json()["data"]
    assert again == rows
    table = cli("stream", "replica", "promote", "-path", ny, registry=reg).stdout.splitlines()
    assert table[0].split() == list(rows[0])
    assert len(table) == 1 + len(rows)


def test_promote_of_a_replica_whose_source_is_gone_says_what_it_lacks_is_unknown(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny = linked(ec)
    kill_broker(ec, "sanfrancisco")  # the last test of the module: its brokers are its own
    run = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
    rows = run.json()["data"]
    assert [(r["topic"], r["partition"], r["cutoffset"], r["missing"], r["sourceend"]) for r in rows] == [
        (t, p, 0, -1, -1) for t in sorted(TOPICS) for p in range(TOPICS[t])
    ]
    assert f"{sf} does not answer: what {ny} lacks of it cannot be known" in run.stderr, run.stderr
