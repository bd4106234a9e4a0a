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
- streamrepl_proxy_held_total: Produce responses held for a synchronous replica (holds.py);
  streamrepl_proxy_held_confirmed_total of them answered once every synchronous replica held the records,
  streamrepl_proxy_held_unconfirmed_total without (a replica fallen back, or the request's timeout);
  streamrepl_proxy_held_seconds_total: the time they were held, summed;
  streamrepl_proxy_transactional_not_held_total: transactional Produces to synchronous streams, answered at once;
  streamrepl_proxy_end_txn_held_total: EndTxn responses held instead (commits of the transactions that wrote them)
- streamrepl_proxy_link_synchronous{link}: 1 while the link (`/src->/replica`) is synchronous, 0 fallen back;
  streamrepl_proxy_link_fallbacks_total{link}, streamrepl_proxy_link_recoveries_total{link}
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument
from .sync import HoldStats

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
    #: the held Produce's figures (None: the proxy holds nothing)
    holds: HoldStats | None = None

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
        if s.holds is not None:
            yield from _hold_metrics(s.cluster, s.holds)


def _hold_metrics(cluster: str, h: HoldStats) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for name, doc, value in (
        ("streamrepl_proxy_held", "Produce responses held for a synchronous replica.", h.held),
        ("streamrepl_proxy_held_confirmed", "Held Produce responses answered once replicated.", h.confirmed),
        (
            "streamrepl_proxy_held_unconfirmed",
            "Held Produce responses answered without: fallback or timeout.",
            h.unconfirmed,
        ),
        ("streamrepl_proxy_held_seconds", "Seconds Produce responses were held, summed.", h.seconds),
        (
            "streamrepl_proxy_transactional_not_held",
            "Transactional Produces to synchronous streams, not held.",
            h.transactional,
        ),
        (
            "streamrepl_proxy_end_txn_held",
            "EndTxn responses held until the replicas hold what the transaction wrote.",
            h.end_txn,
        ),
    ):
        c = CounterMetricFamily(name, doc, labels=["cluster"])
        c.add_metric([cluster], value)
        yield c
    sync = GaugeMetricFamily(
        "streamrepl_proxy_link_synchronous",
        "1 while the link is synchronous, 0 fallen back.",
        labels=["cluster", "link"],
    )
    fallbacks = CounterMetricFamily(
        "streamrepl_proxy_link_fallbacks", "Falls back to asynchronous of the link.", labels=["cluster", "link"]
    )
    recoveries = CounterMetricFamily(
        "streamrepl_proxy_link_recoveries", "Returns to synchronous of the link.", labels=["cluster", "link"]
    )
    for link, state in sorted(h.links.items()):
        sync.add_metric([cluster, link], 1 if state.mode == "sync" else 0)
        fallbacks.add_metric([cluster, link], state.fallbacks)
        recoveries.add_metric([cluster, link], state.recoveries)
    yield sync
    yield fallbacks
    yield recoveries


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
