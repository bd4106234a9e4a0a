"""`proxy start`: a cluster's proxy in the foreground of its process, until SIGTERM or SIGINT (which drain it)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..kafka.tlscheck import tls_context
from ..registry import Cluster, Registry
from .holds import Holds, load_targets, status_publisher, status_reader, thread_ends
from .server import Address, Listen, Proxy, Upstream
from .stats import MetricsServer, ProxyStats
from .sync import Limits

log = logging.getLogger("streamrepl.proxy")


def parse_address(text: str, option: str, default_port: int | None = None) -> Address:
    """HOST:PORT (or [IPv6]:PORT) as given to -listen or -advertise; a bad one is an InvalidArgument."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, "" if default_port is None else str(default_port)
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise InvalidArgument(
            f"-{option} {text!r} is not HOST:PORT; give a host and a port, e.g. 0.0.0.0:9092"
        ) from None
    if not host or not 0 <= number <= 65535:
        raise InvalidArgument(f"-{option} {text!r} is not HOST:PORT; give a host and a port from 0 to 65535")
    return Address(host, number)


def bootstrap_addresses(cluster: Cluster) -> list[Address]:
    """The brokers of the registry's bootstrap.servers (schemes and user:password@ dropped)."""
    addresses = []
    for entry in cluster.bootstrap.split(","):
        entry = entry.strip().split("://", 1)[-1].rsplit("@", 1)[-1]
        if entry:
            addresses.append(parse_address(entry, "bootstrap.servers"))
    if not addresses:
        raise InvalidArgument(f"cluster {cluster.name} has no bootstrap.servers; set it in the registry")
    return addresses


def upstream_of(cluster: Cluster) -> Upstream:
    """How the proxy reaches the cluster: its bootstrap brokers, with TLS when the registry's security.protocol says so
    (SASL is the client's own, passed through)."""
    tls = None
    if cluster.uses_tls():
        tls = tls_context(cluster)
        if tls is None:
            raise InvalidArgument(
                f"cannot load the TLS settings of cluster {cluster.name}; check its ssl.ca.location and certificates"
            )
    return Upstream(bootstrap_addresses(cluster), tls)


def listening_socket(address: Address) -> socket.socket:
    """The bootstrap port's socket, bound and listening (as asyncio's servers are: SO_REUSEADDR), for a supervisor
    to keep open across its worker's restarts. A port in use is an InvalidArgument."""
    try:
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        return socket.create_server((address.host, address.port), family=family, backlog=100)
    except OSError as e:
        raise InvalidArgument(
            f"cannot listen on {address}: {e.strerror or e}; pick another -listen address or port"
        ) from None


def server_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS of the proxy's own listeners (-tlscert/-tlskey), None without."""
    if cert is None and key is None:
        return None
    if not cert or not key:
        raise InvalidArgument("-tlscert and -tlskey go together; give both, or neither for plaintext")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise InvalidArgument(f"cannot load -tlscert {cert} with -tlskey {key}: {e}; check the files") from None
    return ctx


@dataclass(frozen=True)
class Started:
    """What a started proxy tells: where it listens and what it advertises."""

    cluster: str
    listen: str
    advertise: str
    metrics_port: int | None


def proxy_id() -> str:
    """This proxy's name in its reports (the status topic's `proxy|...` records): host and process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def holds_of(registry: Registry, cluster: Cluster, limits: Limits) -> Holds:
    """The held Produce of a proxy of `cluster`: its streams' synchronous replicas, read from the metadata store."""
    return Holds(
        cluster.name,
        lambda: load_targets(registry, cluster),
        thread_ends,
        limits,
        proxy_id(),
        publish=status_publisher(cluster),
        read_reports=status_reader(cluster),
    )


def run_foreground(
    cluster: Cluster,
    listen: Listen,
    metrics: tuple[str, int] | None = None,
    on_started: Callable[[Started], None] | None = None,
    registry: Registry | None = None,
    limits: Limits | None = None,
) -> None:
    """Run the proxy until SIGTERM or SIGINT, then drain it. A port in use is an InvalidArgument. With a registry,
    Produces to streams with a synchronous replica are held (holds.py)."""
    upstream = upstream_of(cluster)
    holds = holds_of(registry, cluster, limits or Limits()) if registry is not None else None
    asyncio.run(_run(cluster, upstream, listen, metrics, on_started, holds))


async def _run(
    cluster: Cluster,
    upstream: Upstream,
    listen: Listen,
    metrics: tuple[str, int] | None,
    on_started: Callable[[Started], None] | None,
    holds: Holds | None = None,
) -> None:
    stats = ProxyStats(cluster.name, holds=holds.stats if holds is not None else None)
    proxy = Proxy(cluster.name, upstream, listen, stats, holds)
    try:
        await proxy.start()
    except OSError as e:
        raise InvalidArgument(
            f"cannot listen on {listen.listen}: {e.strerror or e}; pick another -listen address or port"
        ) from None
    server = MetricsServer(stats, *metrics) if metrics is not None else None
    holding: asyncio.Task[None] | None = None
    if holds is not None:
        # Before the proxy says where it listens: a stream's synchronous replica is known from the first Produce.
        await holds.refresh()
        holding = asyncio.create_task(holds.run())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, proxy.request_stop)
    if on_started is not None:
        on_started(
            Started(
                cluster.name,
                f"{listen.listen.host}:{proxy.bootstrap_port}",
                str(proxy.advertised(proxy.bootstrap_port)),
                server.port if server else None,
            )
        )
    try:
        await proxy.wait_stopped()
    finally:
        if holding is not None:
            holding.cancel()
        if holds is not None:
            await holds.report_stopped()
            holds.close()
        if server is not None:
            server.close()
    log.info("proxy of cluster %s stopped", cluster.name)
