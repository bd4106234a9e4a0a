"""`streamrepl gateway ...` (the worker) and `streamrepl cluster gateway ...` (who is running)."""

from __future__ import annotations

import logging
import re
import sys

import click

from ..cli import CONTEXT_SETTINGS
from .common import app, handles_errors, opt, output, require

#: A gateway's id goes into its Kafka client ids, its log lines and its metrics' labels.
_GATEWAY_ID = re.compile(r"[A-Za-z0-9._-]+")


@click.group(context_settings=CONTEXT_SETTINGS)
def gateway() -> None:
    """Run the workers that apply replicated records in a destination cluster."""


@gateway.command("start", context_settings=CONTEXT_SETTINGS)
@opt("cluster", metavar="NAME", help="Destination cluster whose replicas this gateway feeds.")
@opt(
    "id",
    "gateway_id",
    metavar="NAME",
    help="Gateway name: letters, digits, '.', '_' and '-' (default: <host>-<pid>).",
)
@opt("loglevel", metavar="LEVEL", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
@opt("metricsport", type=int, metavar="PORT", help="Serve Prometheus metrics on this port (GET /metrics; 0: any).")
@opt("metricsaddr", metavar="ADDR", default="0.0.0.0", show_default=True, help="Address the metrics port listens on.")
@handles_errors
def start_cmd(
    cluster: str, gateway_id: str | None, loglevel: str, metricsport: int | None, metricsaddr: str, **_: object
) -> None:
    """Run a gateway in the foreground until SIGTERM; start as many as you like per cluster."""
    from ..errors import InvalidArgument
    from ..replication.process import run_foreground

    if gateway_id is not None and not _GATEWAY_ID.fullmatch(gateway_id):
        raise InvalidArgument(
            f"-id {gateway_id!r} is not a gateway name: use letters, digits, '.', '_' and '-' (at least one)"
        )
    level = getattr(logging, loglevel.upper(), None)
    if not isinstance(level, int):
        raise InvalidArgument(f"-loglevel {loglevel} is not a level; use DEBUG, INFO, WARNING or ERROR")
    if metricsport is not None and not 0 <= metricsport <= 65535:
        raise InvalidArgument(f"-metricsport {metricsport} is not a port; use 1-65535, or 0 for any free port")
    reg = app().registry
    reg.get(require(cluster, "cluster"))
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    run_foreground(reg, cluster, gateway_id, metrics=(metricsaddr, metricsport) if metricsport is not None else None)


@click.group("gateway", context_settings=CONTEXT_SETTINGS)
def cluster_gateway() -> None:
    """Which gateways run, and what each of them replicates."""


@cluster_gateway.command("list", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Only this destination cluster (default: all).")
@handles_errors
def list_cmd(dstcluster: str | None) -> None:
    """Show the live gateways of each destination cluster and the partitions each applies."""
    from ..replication.live import live_gateways

    reg = app().registry
    names = [dstcluster] if dstcluster else list(reg.clusters)
    rows = []
    for name in names:
        rows.extend(live_gateways(reg.get(name)))
    output(rows)
