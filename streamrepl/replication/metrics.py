"""Prometheus metrics of a gateway, served on an optional port (`gateway start -metricsport N`).

The figures are read from the gateway's stats (stats.py) when Prometheus scrapes (a custom collector), so the hot
path only keeps plain counters per batch. Exposition format, histograms and the process metrics
(CPU, RSS, open files) come from prometheus_client.

Metrics (labels: `link` = `<source stream>-><replica stream>`):

- streamrepl_gateway_records_total{link}: records applied to replicas (fillers included)
- streamrepl_gateway_bytes_total{link}: bytes of record values applied
- streamrepl_gateway_pending_records{link}: records in the source partitions this gateway owns
  that are not applied yet, from the high watermarks of the gateway's last fetches (no request;
  on Tansu, which reports the start of a partition's last batch, it can be short by that batch)
- streamrepl_gateway_replication_latency_seconds{link}: histogram, per batch, of the time from
  the source record's timestamp to its acknowledgement by the destination (meaningful when
  producers stamp CreateTime with a clock close to the gateway's)
- streamrepl_gateway_partitions, streamrepl_gateway_slots: what this gateway owns now
- streamrepl_gateway_partitions_in_error, streamrepl_gateway_errors_total: partitions stopped
  on a conflict or write error (`replica list` shows why)
- streamrepl_gateway_divergences_total: partitions stopped because their source's history changed under
  the replica (the source lost records it had, or its topic was re-created; `replica list` says where)
- streamrepl_gateway_rebalances_total: slot assignments and revocations seen
- streamrepl_gateway_restarts_total: times the supervisor (`gateway start`) started this gateway again after its
  process died; served by the restarted process, which is told the count, so that it only grows
- streamrepl_gateway_write_restarts_total: times the gateway's writes expired or its producer was
  fenced, and every partition started again from its real end (a frozen destination, or this gateway
  frozen past its session)
- streamrepl_gateway_destination_waits_total: 50 ms waits for the destination's acknowledgements before handing it
  more records, the write window full (a destination slower than the source; writes.WriteSession)
- streamrepl_cluster_stalled_partitions{cluster}: replica partitions of the gateway's destination cluster that no
  live gateway holds (stalls.py), the same figure from each gateway of the cluster that serves metrics
- streamrepl_link_synchronous{link}, streamrepl_link_throttled{link}: the link's mode (1 or 0)
- streamrepl_gateway_cursor_commits_total, streamrepl_gateway_cursor_errors_total: committed
  consumer-group offsets carried to replicas, and failed rounds
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidArgument
from .stalls import StallWatch
from .stats import LATENCY_BUCKETS, GatewayStats

log = logging.getLogger("streamrepl.metrics")


class GatewayCollector:
    def __init__(self, stats: GatewayStats):
        self.stats = stats

    def describe(self) -> list[Any]:
        return []  # collected on scrape only; no registration-time call into the gateway

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        stats = self.stats
        gid = stats.gateway_id
        records = CounterMetricFamily(
            "streamrepl_gateway_records", "Records applied to replicas (fillers included).", labels=["gateway", "link"]
        )
        nbytes = CounterMetricFamily(
            "streamrepl_gateway_bytes", "Bytes of record values applied to replicas.", labels=["gateway", "link"]
        )
        for name, n in list(stats.records_by_link.items()):
            records.add_metric([gid, name], n)
        for name, n in list(stats.bytes_by_link.items()):
            nbytes.add_metric([gid, name], n)
        yield records
        yield nbytes
        pending = GaugeMetricFamily(
            "streamrepl_gateway_pending_records",
            "Source records not yet applied in the partitions this gateway owns.",
            labels=["gateway", "link"],
        )
        for name, n in stats.pending().items():
            pending.add_metric([gid, name], n)
        yield pending
        lat = HistogramMetricFamily(
            "streamrepl_gateway_replication_latency_seconds",
            "Time from a source record's timestamp to its acknowledgement by the destination, per batch.",
            labels=["gateway", "link"],
        )
        for name, (counts, total) in list(stats.latency.by_link.items()):
            cumulative, buckets = 0, []
            for bound, c in zip([*map(str, LATENCY_BUCKETS), "+Inf"], list(counts), strict=True):
                cumulative += c
                buckets.append((bound, cumulative))
            lat.add_metric([gid, name], buckets, total[0])
        yield lat
        for name, doc, value in (
            ("streamrepl_gateway_partitions", "Replica partitions this gateway applies now.", stats.partitions()),
            ("streamrepl_gateway_slots", "Work slots this gateway owns in its group.", stats.slots()),
            (
                "streamrepl_gateway_partitions_in_error",
                "Replica partitions stopped with an error.",
                stats.partitions_in_error(),
            ),
        ):
            g = GaugeMetricFamily(name, doc, labels=["gateway"])
            g.add_metric([gid], value)
            yield g
        for name, doc, value in (
            ("streamrepl_gateway_errors", "Replica partitions stopped on a conflict or a write error.", stats.failures),
            (
                "streamrepl_gateway_divergences",
                "Replica partitions stopped because their source's history changed under the replica.",
                stats.divergences,
            ),
            ("streamrepl_gateway_rebalances", "Slot assignments and revocations seen.", stats.rebalances),
            (
                "streamrepl_gateway_restarts",
                "Times the supervisor started this gateway again after its process died.",
                stats.restarts,
            ),
            (
                "streamrepl_gateway_write_restarts",
                "Writes expired or fenced, every partition started again from its real end.",
                stats.write_restarts,
            ),
            (
                "streamrepl_gateway_destination_waits",
                "Waits for the destination's acknowledgements before handing a partition more records.",
                stats.destination_waits,
            ),
            (
                "streamrepl_gateway_cursor_commits",
                "Consumer-group offsets carried to replicas.",
                stats.cursor_commits(),
            ),
            ("streamrepl_gateway_cursor_errors", "Failed cursor replication rounds.", stats.cursor_errors()),
        ):
            counter = CounterMetricFamily(name, doc, labels=["gateway"])
            counter.add_metric([gid], value)
            yield counter
        sync = GaugeMetricFamily(
            "streamrepl_link_synchronous", "1 when the link is synchronous (-synchronous true).", labels=["link"]
        )
        throttled = GaugeMetricFamily(
            "streamrepl_link_throttled", "1 when the link is throttled (-throttle true).", labels=["link"]
        )
        for link in stats.links():
            sync.add_metric([link.name], 1 if link.synchronous else 0)
            throttled.add_metric([link.name], 1 if link.throttle else 0)
        yield sync
        yield throttled


class StallCollector:
    """The count of a StallWatch, once known."""

    def __init__(self, gateway_id: str, stalls: StallWatch):
        self.gateway_id = gateway_id
        self.stalls = stalls

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        value = self.stalls.value
        if value is not None:
            g = GaugeMetricFamily(
                "streamrepl_cluster_stalled_partitions",
                "Replica partitions of the cluster that no live gateway holds (the same from each gateway of it).",
                labels=["cluster", "gateway"],
            )
            g.add_metric([self.stalls.cluster.name, self.gateway_id], value)
            yield g


class MetricsServer:
    """The HTTP endpoint (GET /metrics) of one gateway, in a daemon thread."""

    def __init__(self, stats: GatewayStats, port: int, addr: str = "0.0.0.0", stalls: StallWatch | None = None):
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.process_collector import ProcessCollector

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(GatewayCollector(stats))
        if stalls is not None:
            self.registry.register(StallCollector(stats.gateway_id, stalls))
        ProcessCollector(registry=self.registry)
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self.server.server_port
        log.info("metrics on http://%s:%d/metrics", addr, self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if isinstance(self.thread, threading.Thread):
            self.thread.join(5)


def serve(stats: GatewayStats, addr: str, port: int, stalls: StallWatch | None = None) -> MetricsServer:
    """The endpoint on addr:port (0: any free port). A port in use is a clear error."""
    try:
        return MetricsServer(stats, port, addr, stalls)
    except OSError as e:
        raise _cannot_serve(addr, port, e) from None


def check_ports(addr: str, ports: list[int]) -> None:
    """Each of `ports` can be listened on at `addr` now (as serve() will: SO_REUSEADDR), or the InvalidArgument serve()
    would raise. The supervisor checks its workers' ports before it starts them: a worker that cannot serve its port
    stops for good (exits.BAD_INPUT), and the others with it."""
    import socket

    for port in ports:
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(sockaddr)
        except OSError as e:
            raise _cannot_serve(addr, port, e) from None


def _cannot_serve(addr: str, port: int, e: OSError) -> InvalidArgument:
    return InvalidArgument(
        f"cannot serve metrics on {addr}:{port}: {e.strerror or e}; pick another -metricsport or -metricsaddr"
    )
