"""What a proxy counts, and its Prometheus metrics (`proxy start -metricsport N`).

The hot path only adds to plain counters; the figures are read when Prometheus scrapes (a custom collector), as the
gateway's are (replication/metrics.py). Metrics (label `cluster`):

- streamrepl_proxy_connections: client connections open now
- streamrepl_proxy_connections_total: client connections accepted
- streamrepl_proxy_connect_failures_total: client connections closed because their broker did not answer
- streamrepl_proxy_listeners: ports the proxy listens on (bootstrap and one per broker)
- streamrepl_proxy_requests_total{api_key}: requests passed to the brokers, by Kafka API key
- streamrepl_proxy_request_bytes_total, streamrepl_proxy_response_bytes_total: their bytes (frames, as passed)
- streamrepl_proxy_rewritten_total: responses rewritten to name the proxy (Metadata, FindCoordinator, DescribeCluster)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument

log = logging.getLogger("streamrepl.proxy")


@dataclass
class ProxyStats:
    cluster: str
    connections: int = 0
    accepted: int = 0
    connect_failures: int = 0
    listeners: int = 1
    rewritten: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    requests_by_api: dict[int, int] = field(default_factory=dict)

    def request(self, api_key: int, size: int) -> None:
        self.requests_by_api[api_key] = self.requests_by_api.get(api_key, 0) + 1
        self.request_bytes += size

    def response(self, size: int) -> None:
        self.response_bytes += size


class ProxyCollector:
    def __init__(self, stats: ProxyStats):
        self.stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.stats
        labels = [s.cluster]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["cluster"])
            g.add_metric(labels, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["cluster"])
            c.add_metric(labels, value)
            return c

        yield gauge("streamrepl_proxy_connections", "Client connections open now.", s.connections)
        yield counter("streamrepl_proxy_connections", "Client connections accepted.", s.accepted)
        yield counter(
            "streamrepl_proxy_connect_failures",
            "Client connections closed: their broker did not answer.",
            s.connect_failures,
        )
        yield gauge("streamrepl_proxy_listeners", "Ports the proxy listens on.", s.listeners)
        requests = CounterMetricFamily(
            "streamrepl_proxy_requests", "Requests passed to the brokers.", labels=["cluster", "api_key"]
        )
        for api_key, n in sorted(s.requests_by_api.items()):
            requests.add_metric([s.cluster, str(api_key)], n)
        yield requests
        yield counter("streamrepl_proxy_request_bytes", "Bytes of requests passed to the brokers.", s.request_bytes)
        yield counter("streamrepl_proxy_response_bytes", "Bytes of responses passed to clients.", s.response_bytes)
        yield counter("streamrepl_proxy_rewritten", "Responses rewritten to name the proxy.", s.rewritten)


class MetricsServer:
    def __init__(self, stats: ProxyStats, addr: str, port: int):
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.process_collector import ProcessCollector

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProxyCollector(stats))
        ProcessCollector(registry=self.registry)
        try:
            self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            raise InvalidArgument(
                f"cannot serve metrics on {addr}:{port}: {e.strerror or e}; pick another -metricsport or -metricsaddr"
            ) from None
        self.port = int(self.server.server_port)
        log.info("metrics on http://%s:%d/metrics", addr, self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if isinstance(self.thread, threading.Thread):
            self.thread.join(5)
