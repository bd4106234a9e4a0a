"""Prometheus metrics of a gateway, served on an optional port (`gateway start -metricsport N`).

The figures are read from the gateway when Prometheus scrapes (a custom collector), so the hot
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
- streamrepl_gateway_rebalances_total: slot assignments and revocations seen
- streamrepl_gateway_write_restarts_total: times the gateway's writes expired or its producer was
  fenced, and every partition started again from its real end (a frozen destination, or this gateway
  frozen past its session)
- streamrepl_link_synchronous{link}, streamrepl_link_throttled{link}: the link's mode (1 or 0)
- streamrepl_gateway_cursor_commits_total, streamrepl_gateway_cursor_errors_total: committed
  consumer-group offsets carried to replicas, and failed rounds
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("streamrepl.metrics")

#: Replication latency buckets, seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LatencyHistogram:
    """Cumulative histogram per link, observed from the gateway's loop (one thread), read by scrapes."""

    def __init__(self) -> None:
        self.by_link: dict[str, tuple[list[int], list[float]]] = {}  # link -> (bucket counts, [sum])

    def observe(self, link: str, seconds: float) -> None:
        entry = self.by_link.get(link)
        if entry is None:
            entry = self.by_link[link] = ([0] * (len(LATENCY_BUCKETS) + 1), [0.0])
        counts, total = entry
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        total[0] += seconds


class GatewayCollector:
    def __init__(self, gw: Gateway):
        self.gw = gw

    def describe(self) -> list[Any]:
        return []  # collected on scrape only; no registration-time call into the gateway

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        gw = self.gw
        gid = gw.id
        records = CounterMetricFamily(
            "streamrepl_gateway_records", "Records applied to replicas (fillers included).", labels=["gateway", "link"]
        )
        nbytes = CounterMetricFamily(
            "streamrepl_gateway_bytes", "Bytes of record values applied to replicas.", labels=["gateway", "link"]
        )
        for name, n in list(gw.records_by_link.items()):
            records.add_metric([gid, name], n)
        for name, n in list(gw.bytes_by_link.items()):
            nbytes.add_metric([gid, name], n)
        yield records
        yield nbytes
        pending = GaugeMetricFamily(
            "streamrepl_gateway_pending_records",
            "Source records not yet applied in the partitions this gateway owns.",
            labels=["gateway", "link"],
        )
        for name, n in gw.pending().items():
            pending.add_metric([gid, name], n)
        yield pending
        lat = HistogramMetricFamily(
            "streamrepl_gateway_replication_latency_seconds",
            "Time from a source record's timestamp to its acknowledgement by the destination, per batch.",
            labels=["gateway", "link"],
        )
        for name, (counts, total) in list(gw.latency.by_link.items()):
            cumulative, buckets = 0, []
            for bound, c in zip([*map(str, LATENCY_BUCKETS), "+Inf"], list(counts), strict=True):
                cumulative += c
                buckets.append((bound, cumulative))
            lat.add_metric([gid, name], buckets, total[0])
        yield lat
        for name, doc, value in (
            ("streamrepl_gateway_partitions", "Replica partitions this gateway applies now.", len(gw.units)),
            ("streamrepl_gateway_slots", "Work slots this gateway owns in its group.", len(gw.slots)),
            ("streamrepl_gateway_partitions_in_error", "Replica partitions stopped with an error.", len(gw.errored)),
        ):
            g = GaugeMetricFamily(name, doc, labels=["gateway"])
            g.add_metric([gid], value)
            yield g
        for name, doc, value in (
            ("streamrepl_gateway_errors", "Replica partitions stopped on a conflict or a write error.", gw.failures),
            ("streamrepl_gateway_rebalances", "Slot assignments and revocations seen.", gw.rebalances),
            (
                "streamrepl_gateway_write_restarts",
                "Writes expired or fenced, every partition started again from its real end.",
                gw.write_restarts,
            ),
            (
                "streamrepl_gateway_cursor_commits",
                "Consumer-group offsets carried to replicas.",
                gw.cursor_stat("committed"),
            ),
            ("streamrepl_gateway_cursor_errors", "Failed cursor replication rounds.", gw.cursor_stat("errors")),
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
        plan = gw.plan
        for link in plan.links if plan is not None else []:
            sync.add_metric([link.name], 1 if link.synchronous else 0)
            throttled.add_metric([link.name], 1 if link.throttle else 0)
        yield sync
        yield throttled


class MetricsServer:
    """The HTTP endpoint (GET /metrics) of one gateway, in a daemon thread."""

    def __init__(self, gw: Gateway, port: int, addr: str = "0.0.0.0"):
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.process_collector import ProcessCollector

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(GatewayCollector(gw))
        ProcessCollector(registry=self.registry)
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self.server.server_port
        log.info("metrics on http://%s:%d/metrics", addr, self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if isinstance(self.thread, threading.Thread):
            self.thread.join(5)
