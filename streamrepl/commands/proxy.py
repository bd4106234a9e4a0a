"""`streamrepl proxy ...`: a Kafka-protocol proxy in front of a source cluster."""

from __future__ import annotations

import logging
import sys

import click

from ..cli import CONTEXT_SETTINGS
from .common import LOG_LEVELS, app, handles_errors, opt, output, require


@click.group(context_settings=CONTEXT_SETTINGS)
def proxy() -> None:
    """Run a Kafka-protocol proxy that clients of a cluster connect through."""


@proxy.command("start", context_settings=CONTEXT_SETTINGS)
@opt("cluster", metavar="NAME", help="Cluster whose brokers the proxy stands in front of.")
@opt(
    "listen",
    metavar="HOST:PORT",
    default="0.0.0.0:9092",
    show_default=True,
    help="Bootstrap address; broker k listens on PORT+k (port 0: any free ports).",
)
@opt("advertise", metavar="HOST:PORT", help="Address clients are told to use (default: the listening one).")
@opt("tlscert", metavar="FILE", help="PEM certificate (chain) of the proxy's own listeners: clients connect with TLS.")
@opt("tlskey", metavar="FILE", help="PEM private key of -tlscert.")
@opt("metricsport", type=int, metavar="PORT", help="Serve Prometheus metrics on this port (GET /metrics; 0: any).")
@opt("metricsaddr", metavar="ADDR", default="0.0.0.0", show_default=True, help="Address the metrics port listens on.")
@opt(
    "synctimeout",
    type=float,
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="A Produce held longer than this for a synchronous replica makes replication to it fall back to asynchronous.",
)
@opt(
    "syncstall",
    type=float,
    metavar="SECONDS",
    default=2.0,
    show_default=True,
    help="A synchronous replica making no progress this long (no gateway alive) falls back to asynchronous.",
)
@opt(
    "loglevel",
    type=LOG_LEVELS,
    metavar="DEBUG|INFO|WARNING|ERROR",
    default="INFO",
    show_default=True,
    help="What the log shows, from everything (DEBUG) to errors only.",
)
@handles_errors
def start_cmd(
    cluster: str | None,
    listen: str,
    advertise: str | None,
    tlscert: str | None,
    tlskey: str | None,
    metricsport: int | None,
    metricsaddr: str,
    synctimeout: float,
    syncstall: float,
    loglevel: str,
) -> None:
    """Run a proxy of a cluster in the foreground until SIGTERM, which drains it; start as many as you like.

    Clients bootstrap from -listen; the proxy's Metadata, FindCoordinator and DescribeCluster answers name its own
    ports, so every connection goes through it. Requests and responses pass unchanged; SASL is the client's own,
    passed to the broker; TLS to the broker is the registry's. Prints its addresses once it listens.

    A Produce to a stream with a synchronous replica (replica add -synchronous true) is answered once the replica holds
    its records, or at once after a fallback to asynchronous (-synctimeout, -syncstall), until it has caught up.
    """
    from ..errors import InvalidArgument
    from ..proxy.run import Started, parse_address, run_foreground, server_tls
    from ..proxy.server import Listen
    from ..proxy.sync import Limits

    level = getattr(logging, loglevel.upper(), None)
    if not isinstance(level, int):
        raise InvalidArgument(f"-loglevel {loglevel} is not a level; use DEBUG, INFO, WARNING or ERROR")
    if not (synctimeout > 0 and syncstall > 0):
        raise InvalidArgument("-synctimeout and -syncstall are seconds above 0, e.g. -synctimeout 5 -syncstall 2")
    if metricsport is not None and not 0 <= metricsport <= 65535:
        raise InvalidArgument(f"-metricsport {metricsport} is not a port; use 1-65535, or 0 for any free port")
    where = Listen(
        parse_address(listen, "listen"),
        parse_address(advertise, "advertise") if advertise else None,
        server_tls(tlscert, tlskey),
    )
    target = app().registry.get(require(cluster, "cluster"))
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def started(s: Started) -> None:
        output([{"cluster": s.cluster, "listen": s.listen, "advertise": s.advertise, "metricsport": s.metrics_port}])
        sys.stdout.flush()

    run_foreground(
        target,
        where,
        (metricsaddr, metricsport) if metricsport is not None else None,
        started,
        registry=app().registry,
        limits=Limits(timeout=synctimeout, stall=syncstall),
    )
