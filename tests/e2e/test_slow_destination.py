"""A destination slower than the source (issue 28's noida-db sweep found it): the gateway read a backlog far faster
than the destination took it, queued up to 64 MB in its producer, and what waited there longer than the message
timeout (half the group session, 5 s) expired. Each expiry restarts the writes, and a produce request that was in
flight when it expired may still be appended by the broker after the gateway has taken the partition up again, at
offsets past the new writes (librdkafka closes the connection, the broker may still append what it had received).
A slow destination must slow the gateway down, not time its writes out.

The destination here is a Tansu broker that advertises a proxy in front of it which lets clients send 3 MB/s."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from support.behind import tansu_behind
from support.streams import Gateways, assert_identical, link, new_stream, new_topics, same_ends, sp, uuid_of, wait_until
from support.throttle import Throttle

from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow

RATE = 3_000_000  # bytes/s the destination takes
RECORDS = 24_000  # of 1 KiB over 4 partitions: 8 s at RATE, all of it queued at once before the fix
SIZE = 1024
TOPICS = {"t": 4}


def _preload(bootstrap: str, kt: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(RECORDS):
        while True:
            try:
                p.produce(
                    kt,
                    value=i.to_bytes(8, "big") * (SIZE // 8),
                    key=f"k{i}".encode(),
                    headers=[("seq", str(i).encode())],
                    timestamp=1_700_000_000_000 + i,
                    partition=i % TOPICS["t"],
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def test_a_destination_slower_than_the_source_slows_the_gateway_and_times_no_write_out(tmp_path: Path) -> None:
    with (
        EphemeralClusters(["sanfrancisco"], state_dir=tmp_path / "state") as ec,
        tansu_behind("newyork", tmp_path, lambda port: Throttle(port, RATE)) as (newyork, _),
    ):
        # The registry a user writes: bootstrap.servers only.
        reg = tmp_path / "clusters.yaml"
        src_bs = ec.brokers["sanfrancisco"].bootstrap
        clusters = {"sanfrancisco": {"bootstrap.servers": src_bs}, "newyork": {"bootstrap.servers": newyork}}
        reg.write_text(yaml.safe_dump({"default": "sanfrancisco", "clusters": clusters}))
        src = new_stream(reg, "/sanfrancisco/slow")
        dst = new_stream(reg, "/newyork/slow", copyfrom=src)
        new_topics(reg, src, TOPICS)
        _preload(src_bs, kafka_topic_name(sp(src), "t"))
        link(reg, src, dst)
        with Gateways(reg, "newyork", tmp_path) as gws:
            name = gws.start()
            wait_until(
                lambda: same_ends(src_bs, sp(src), newyork, sp(dst), TOPICS),
                180,
                f"{dst} to hold the {RECORDS} records of {src}",
            )
        log = (tmp_path / f"{name}.log").read_text()
        assert "failed" not in log, log[-3000:]
        assert assert_identical(src_bs, sp(src), uuid_of(reg, src), newyork, sp(dst), TOPICS) == RECORDS
