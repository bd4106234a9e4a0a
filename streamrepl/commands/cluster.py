"""`streamrepl cluster ...`: the clusters of the registry."""

from __future__ import annotations

import click

from ..cli import CONTEXT_SETTINGS, LazyGroup
from ..errors import InvalidArgument
from .common import app, handles_errors, opt, output

#: The longest `cluster list -timeout` accepted, in seconds.
MAX_TIMEOUT = 300.0

SUBGROUPS: dict[str, str] = {"gateway": "streamrepl.commands.gateway:cluster_gateway"}


@click.group(cls=LazyGroup, lazy=SUBGROUPS, context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """The clusters named in the registry."""


@cluster.command("list", context_settings=CONTEXT_SETTINGS)
@opt("timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for each cluster.")
@handles_errors
def list_cmd(timeout: float) -> None:
    """Show each cluster, its servers, whether it answers, and its other (masked) properties."""
    from concurrent.futures import ThreadPoolExecutor

    from .. import kafka  # here, not at the top: `--help` must not load the Kafka client

    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan; a negative timeout would wait forever
        raise InvalidArgument(f"-timeout {timeout} must be more than 0 and at most {MAX_TIMEOUT:g} seconds")
    reg = app().registry
    clusters = list(reg.clusters.values())
    with ThreadPoolExecutor(max_workers=max(1, len(clusters))) as pool:
        answers = list(pool.map(lambda c: kafka.ping(c, timeout), clusters))
    rows = []
    for c, ok in zip(clusters, answers, strict=True):
        props = {k: v for k, v in c.masked().items() if k != "bootstrap.servers"}
        rows.append(
            {
                "cluster": c.name,
                "default": c.name == reg.default,
                "bootstrap.servers": c.shown_bootstrap,
                "answers": ok,
                "properties": " ".join(f"{k}={v}" for k, v in sorted(props.items())),
            }
        )
    output(rows)
