"""Who is gateway for a cluster right now.

Each gateway reports itself every few seconds in the destination cluster's status topic;
a gateway whose last report is older than statustopic.LIVE_SECONDS is taken for gone, and each row says how
old its report is (`lastseen`, seconds). (The consumer
group the gateways share would say the same, but not every broker describes its members:
Tansu answers with an empty member list.)
"""

from __future__ import annotations

import time
from typing import Any

from .. import statustopic
from ..registry import Cluster

#: The columns of `cluster gateway list`, printed even when no gateway runs.
COLUMNS = (
    "cluster",
    "gateway",
    "host",
    "pid",
    "slots",
    "partitions",
    "applied",
    "errors",
    "lastseen",
    "restarts",
    "lastexit",
    "replicates",
)


def live_gateways(cluster: Cluster) -> list[dict[str, Any]]:
    reports = statustopic.read(cluster, "gateway|")
    # After the read: a report written while the topic was read is not from the future (lastseen -0.1)
    now_ms = time.time() * 1000
    rows = []
    for rep in reports.values():
        if not statustopic.is_live(rep, now_ms):
            continue
        units = rep.get("units", [])
        row: dict[str, Any] = {
            "cluster": cluster.name,
            "gateway": rep.get("gateway"),
            "host": rep.get("host"),
            "pid": rep.get("pid"),
            "slots": len(rep.get("slots", [])),
            "partitions": len(units),
            "applied": rep.get("applied", 0),
            "errors": rep.get("errors", 0),
            # how fresh the row is: a gateway killed a moment ago is listed until LIVE_SECONDS pass
            "lastseen": round((now_ms - rep.get("updated", 0)) / 1000, 1),
            # times its supervisor started it again after it died, and how it died last ("signal 11 (SIGSEGV)")
            "restarts": rep.get("restarts", 0),
            "lastexit": rep.get("lastexit", ""),
            "replicates": " ".join(units),
        }
        if rep.get("seats"):
            row["seats"] = rep["seats"]  # dead gateways' seats it took in the slot group (-json only)
        if rep.get("parent"):
            row["parent"] = rep["parent"]  # a worker of `gateway start -workers` (not a column: -json shows it)
        rows.append(row)
    return sorted(rows, key=lambda r: str(r["gateway"]))
