"""How many replica partitions of the cluster no live gateway holds: the figure behind the metric
streamrepl_cluster_stalled_partitions (metrics.py) and the alert on it (docs/alerts.yml).

A dead gateway exports nothing, so its own metrics cannot say that its partitions stopped moving; the gateways
still alive can. Each one that serves metrics reads the status topic every STALL_CHECK_SECONDS in a thread of its
own (a read takes a consumer and up to seconds, too long for the loop or a scrape) and counts the partitions of
its plan that no live gateway holds, as statustopic.unheld_units judges them: their gateway stopped reporting and
nobody took them over (a broker that never expires a dead member: docs/brokers.md), or their slot is not
assigned at all. Right after a gateway dies the figure shows its partitions until the group hands them over
(a session and a report period): alert on it lasting, not on one sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import statustopic
from ..paths import kafka_topic_name
from ..registry import Cluster
from .links import Plan

log = logging.getLogger("streamrepl.gateway")

STALL_CHECK_SECONDS = 10.0


class StallWatch:
    """`published()` is the gateway's plan of the moment with the destination's topics (None: none yet); `value` is
    the last count (None: not known, before the first plan or when the status topic could not be read)."""

    def __init__(
        self,
        cluster: Cluster,
        published: Callable[[], tuple[Plan, set[str]] | None],
        read: Callable[[Cluster], dict[str, dict[str, Any]]] = statustopic.read,
        interval: float = STALL_CHECK_SECONDS,
    ):
        self.cluster = cluster
        self.value: int | None = None
        self._published = published
        self._read = read
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check_now(self) -> int | None:
        published = self._published()
        if published is None:
            self.value = None
            return None
        plan, present = published
        # The partitions a gateway would take up: those of replica topics that exist (UnitTable.follow).
        wanted = {u.key for u in plan.units if kafka_topic_name(u.dst, u.topic) in present}
        reports = self._read(self.cluster)
        gateways = {k: r for k, r in reports.items() if k.startswith("gateway|")}
        units = {k: r for k, r in reports.items() if k.startswith("unit|")}
        self.value = len(statustopic.unheld_units(gateways, units, wanted, time.time() * 1000))
        return self.value

    def start(self) -> StallWatch:
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            try:
                self.check_now()
            except Exception as e:  # noqa: BLE001 - a figure for the metrics: the gateway goes on without it
                self.value = None
                log.warning("counting the partitions no live gateway holds failed: %s", e)
            if self._stop.wait(self._interval):
                return
