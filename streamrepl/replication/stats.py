"""What a gateway counts while it works: read by the metrics endpoint (metrics.py) and the status reports.

The hot loop only adds to plain counters per batch; the figures that describe the gateway's state right now
(partitions owned, pending records, the plan's links, the cursor sync's counters) are read through callables
the gateway sets, when a scrape asks for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .links import Link

#: Replication latency buckets, seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LatencyHistogram:
    """Cumulative histogram per link, observed from the gateway's loop (one thread), read by scrapes."""

    def __init__(self) -> None:
        self.by_link: dict[str, tuple[list[int], list[float]]] = {}  # link -> (bucket counts, [sum])

    def observe(self, link: str, seconds: float) -> None:
        entry = self.by_link.get(link)
        if entry is None:
            entry = self.by_link[link] = ([0] * (len(LATENCY_BUCKETS) + 1), [0.0])
        counts, total = entry
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        total[0] += seconds


def _nothing_pending() -> dict[str, int]:
    return {}


def _no_links() -> list[Link]:
    return []


def _zero() -> int:
    return 0


@dataclass
class GatewayStats:
    gateway_id: str
    #: records applied to replicas (fillers included), in all
    records_applied: int = 0
    #: per link name: records and value bytes applied, and the replication latency (see metrics.py)
    records_by_link: dict[str, int] = field(default_factory=dict)
    bytes_by_link: dict[str, int] = field(default_factory=dict)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    rebalances: int = 0
    #: seats of dead gateways this one took in the slot group (membership.SlotGroup.adopt_dead)
    seats_adopted: int = 0
    failures: int = 0
    #: partitions stopped because their source's history changed under the replica (divergence.py)
    divergences: int = 0
    write_restarts: int = 0
    #: the destination came back without its internal topics and the gateway started over on it (destination.py)
    starts_over: int = 0
    #: waits of mover.QUEUE_WAIT_SLICE for the destination's acknowledgements, the write window full (writes.py)
    destination_waits: int = 0
    #: how many times the supervisor started this gateway again before this process (`gateway start`: workers.py)
    restarts: int = 0
    # Read when asked for (set by the gateway): the state right now.
    partitions: Callable[[], int] = _zero
    slots: Callable[[], int] = _zero
    partitions_in_error: Callable[[], int] = _zero
    pending: Callable[[], dict[str, int]] = _nothing_pending
    links: Callable[[], list[Link]] = _no_links
    cursor_commits: Callable[[], int] = _zero
    cursor_errors: Callable[[], int] = _zero

    def applied(self, link: str, records: int, nbytes: int) -> None:
        self.records_applied += records
        self.records_by_link[link] = self.records_by_link.get(link, 0) + records
        self.bytes_by_link[link] = self.bytes_by_link.get(link, 0) + nbytes
