"""The gateway list of a destination cluster: which gateways may serve it (`cluster gateway set`).

The list lives in the destination cluster's status topic under one key (compacted, like the gateways' reports):
`{"gateways": [...], "updated": ms, "by": user}`; `cluster gateway delete` writes a tombstone. An entry names a
gateway by its id (`gateway start -id`) or by its host name. No list, or an empty one, lets every gateway serve.

It keeps honest gateways off a cluster (a test gateway started against production by mistake, a host being
retired), not hostile ones: ids are chosen by whoever starts the gateway, and anyone who can write to the status
topic can change the list. The broker's ACLs are the real boundary.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from . import ace, statustopic
from .errors import InvalidArgument
from .registry import Cluster

CONFIG_KEY = "config|gateways"
_ENTRY_RE = re.compile(r"[A-Za-z0-9._-]+")


def parse(text: str) -> list[str]:
    """The entries of `-gateways` (space-separated), checked: at least one, each a plain name, none twice."""
    entries = text.split()
    if not entries:
        raise InvalidArgument("-gateways needs at least one gateway id or host name (space-separated)")
    for entry in entries:
        if not _ENTRY_RE.fullmatch(entry):
            raise InvalidArgument(
                f"-gateways: '{entry}' is not a gateway id or host name; use letters, digits, '.', '_' and '-',"
                " and separate entries with spaces"
            )
    seen: set[str] = set()
    for entry in entries:
        if entry in seen:
            raise InvalidArgument(f"-gateways: '{entry}' is named more than once")
        seen.add(entry)
    return entries


def read(cluster: Cluster) -> dict[str, Any] | None:
    """The stored list of `cluster` (the whole record), or None when none is set."""
    return statustopic.read(cluster, CONFIG_KEY).get(CONFIG_KEY)


def allowed(cluster: Cluster) -> list[str]:
    """The gateways allowed to serve `cluster`; [] when any may."""
    record = read(cluster)
    return list(record.get("gateways", [])) if record else []


def permits(gateways: list[str], gateway_id: str, host: str, parent: str | None = None) -> bool:
    """`parent`: the id of the `gateway start -workers` supervisor whose worker this gateway is (it allows it too)."""
    return not gateways or gateway_id in gateways or host in gateways or (parent is not None and parent in gateways)


def refusal(cluster_name: str, gateways: list[str], gateway_id: str, host: str, parent: str | None = None) -> str:
    """Why gateway `gateway_id` on `host` (a worker of `parent`) may not serve the cluster; "" when it may."""
    if permits(gateways, gateway_id, host, parent):
        return ""
    return (
        f"gateway {gateway_id} (host {host}) is not on the gateway list of cluster {cluster_name}"
        f" ({' '.join(gateways)}); see 'streamrepl cluster gateway get -dstcluster {cluster_name}'"
    )


def store(cluster: Cluster, gateways: list[str]) -> None:
    body = {"gateways": gateways, "updated": int(time.time() * 1000), "by": ace.current_identity().user}
    _write(cluster, json.dumps(body).encode())


def delete(cluster: Cluster) -> None:
    _write(cluster, None)


def _write(cluster: Cluster, value: bytes | None) -> None:
    statustopic.put(cluster, CONFIG_KEY, value, "writing the gateway list")
