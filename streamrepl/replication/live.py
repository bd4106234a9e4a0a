"""Who is gateway for a cluster right now.

Each gateway reports itself every few seconds in the destination cluster's status topic;
a gateway whose last report is older than LIVE_SECONDS is taken for gone. (The consumer
group the gateways share would say the same, but not every broker describes its members:
Tansu answers with an empty member list.)
"""

from __future__ import annotations

import time
from typing import Any

from .. import status
from ..registry import Cluster

LIVE_SECONDS = 15.0


def live_gateways(cluster: Cluster) -> list[dict[str, Any]]:
    now_ms = time.time() * 1000
    rows = []
    for rep in status.read(cluster, "gateway|").values():
        if now_ms - rep.get("updated", 0) > LIVE_SECONDS * 1000 or rep.get("stopped"):
            continue
        units = rep.get("units", [])
        rows.append(
            {
                "cluster": cluster.name,
                "gateway": rep.get("gateway"),
                "host": rep.get("host"),
                "pid": rep.get("pid"),
                "slots": len(rep.get("slots", [])),
                "partitions": len(units),
                "applied": rep.get("applied", 0),
                "errors": rep.get("errors", 0),
                "replicates": " ".join(units),
            }
        )
    return sorted(rows, key=lambda r: str(r["gateway"]))
