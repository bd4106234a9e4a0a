"""A gateway's Prometheus endpoint (`gateway start -metricsport`), scraped over HTTP from a real gateway process."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from support.cli import one_error_line, run_cli
from support.metrics import free_port, sample, scrape
from support.streams import Gateways, caught_up, link, new_stream, new_topics, produce, sp, wait_until

from streamrepl.local import EphemeralClusters


@pytest.fixture(scope="module")
def ec():
    # Brokers of its own: a test counts a gateway's partitions, which replicas that other modules leave
    # in the shared newyork would change.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


def test_metrics_show_replication(ec, tmp_path):
    reg = ec.registry_path
    src = new_stream(reg, "/sanfrancisco/metrics", "-defaultpartitions", "2")
    new_topics(reg, src, {"clicks": 2})
    dst = new_stream(reg, "/newyork/metrics", copyfrom=src)
    link(reg, src, dst)
    name = f"{src}->{dst}"
    port = free_port()
    with Gateways(reg, "newyork", tmp_path) as gws:
        gw = gws.start("metrics-gw", "-metricsport", str(port), "-metricsaddr", "127.0.0.1")
        wait_until(lambda: _answers(port), 30, "the metrics port to answer")
        produce(ec.brokers["sanfrancisco"].bootstrap, sp(src), "clicks", 300, 2)
        # Records stamped now, so that the latency histogram has something meaningful to count.
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": ec.brokers["sanfrancisco"].bootstrap})
        for i in range(20):
            p.produce("sr.metrics.clicks", key=b"k", value=b"now", partition=i % 2)
        p.flush(10)
        wait_until(lambda: caught_up(reg, src), 60, "the replica to catch up")

        def counted() -> dict[str, float] | None:
            samples = scrape(port)
            return samples if sample(samples, "streamrepl_gateway_records_total", link=name) == 320 else None

        samples = wait_until(counted, 15, "320 records counted")
        assert sample(samples, "streamrepl_gateway_bytes_total", link=name) > 0
        assert sample(samples, "streamrepl_gateway_partitions", gateway=gw) == 2
        assert sample(samples, "streamrepl_gateway_pending_records", link=name) == 0
        assert sample(samples, "streamrepl_gateway_partitions_in_error", gateway=gw) == 0
        assert sample(samples, "streamrepl_gateway_rebalances_total", gateway=gw) >= 1
        assert sample(samples, "streamrepl_gateway_write_restarts_total", gateway=gw) == 0
        assert sample(samples, "streamrepl_link_synchronous", link=name) == 0
        assert sample(samples, "streamrepl_link_throttled", link=name) == 0
        # One observation per batch; the batch written last holds the records stamped now.
        count = sample(samples, "streamrepl_gateway_replication_latency_seconds_count", link=name)
        assert count is not None and count >= 1
        assert sample(samples, "streamrepl_gateway_replication_latency_seconds_bucket", link=name, le="30.0") >= 1
        assert sample(samples, "process_resident_memory_bytes") > 10_000_000


def _answers(port: int) -> bool:
    try:
        scrape(port)
        return True
    except OSError:
        return False


def test_bad_metrics_port_is_one_clear_line(ec):
    r = run_cli("-clusters", ec.registry_path, "gateway", "start", "-cluster", "newyork", "-metricsport", "70000")
    assert "-metricsport 70000 is not a port" in one_error_line(r)


def test_metrics_port_in_use_stops_the_gateway_with_a_clear_error(ec):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamrepl",
                "-clusters",
                str(ec.registry_path),
                "gateway",
                "start",
                "-cluster",
                "newyork",
                "-metricsport",
                str(port),
                "-metricsaddr",
                "127.0.0.1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in p.stderr
