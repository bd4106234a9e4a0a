"""`streamrepl cluster ...`: the clusters of the registry."""

from __future__ import annotations

from typing import Any

import click

from ..cli import CONTEXT_SETTINGS, LazyGroup
from ..errors import InvalidArgument, StreamreplError
from ..registry import Cluster
from .common import BOOL, app, handles_errors, opt, output

#: The longest `cluster list -timeout` accepted, in seconds.
MAX_TIMEOUT = 300.0

SUBGROUPS: dict[str, str] = {"gateway": "streamrepl.commands.gateway:cluster_gateway"}


@click.group(cls=LazyGroup, lazy=SUBGROUPS, context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """The clusters named in the registry."""


@cluster.command("list", context_settings=CONTEXT_SETTINGS)
@opt(
    "timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to wait for each cluster (they are checked together, a bounded number at a time).",
)
@opt(
    "probe",
    type=BOOL,
    default=False,
    help="Probe what each cluster's brokers do now (a few seconds; a gateway does so at its first start).",
)
@handles_errors
def list_cmd(timeout: float, probe: bool) -> None:
    """Show each cluster, its servers, whether it answers, what its brokers were found to do, and its other (masked)
    properties.

    The clusters are checked together: first a TCP connection to each server of each (up to 1024 at once), and a
    cluster none of whose servers accepts one is shown as not answering without more; the others are asked by a
    Kafka client, 16 at a time. Each waits at most -timeout seconds, so a registry of thousands of clusters that
    are down is listed in seconds (ports that drop connections rather than refuse them cost -timeout per 1024)."""
    from concurrent.futures import ThreadPoolExecutor

    from .. import kafka  # here, not at the top: `--help` must not load the Kafka client
    from ..kafka import reach

    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan; a negative timeout would wait forever
        raise InvalidArgument(f"-timeout {timeout} must be more than 0 and at most {MAX_TIMEOUT:g} seconds")
    reg = app().registry
    clusters = list(reg.clusters.values())
    answers = reach.which_answer(clusters, timeout, kafka.ping)
    with ThreadPoolExecutor(max_workers=reach.CLIENT_WORKERS) as pool:
        found = list(pool.map(lambda c, ok: _found(c, ok, probe), clusters, answers))
    columns = ["cluster", "default", "bootstrap.servers", "answers", "brokers", "properties"]
    rows = []
    for c, ok, what in zip(clusters, answers, found, strict=True):
        props = {k: v for k, v in c.masked().items() if k != "bootstrap.servers"}
        rows.append(
            {
                "cluster": c.name,
                "default": c.name == reg.default,
                "bootstrap.servers": c.shown_bootstrap,
                "answers": ok,
                "brokers": what[0],
                # -json only: each probe's answer (None: unknown), the identity they were found for, the overrides
                "probes": what[1],
                "properties": " ".join(f"{k}={v}" for k, v in sorted(props.items())),
            }
        )
    output(rows, columns)


def _found(cluster: Cluster, answers: bool, probe: bool) -> tuple[str, dict[str, Any]]:
    """What the cluster's brokers were found to do: one line (discovery.describe), and the answers for -json; probed
    now with -probe."""
    from .. import discovery, kafka
    from ..kafka import brokers

    if not answers:
        return "-", {}
    try:
        if probe:
            later = discovery.probe_leave_later(cluster, discovery.discover(cluster, force=True))
            if later is not None:
                later.join()
        traits = discovery.cached(cluster)
    except (StreamreplError, kafka.KafkaException, OSError, TimeoutError) as e:
        return f"not known ({type(e).__name__})", {}
    detail: dict[str, Any] = {"overrides": brokers.overridden(cluster)}
    if traits is not None:
        detail.update(traits.answers(), identity=traits.identity, probedAt=traits.probed_at)
    return discovery.describe(cluster, traits), detail
