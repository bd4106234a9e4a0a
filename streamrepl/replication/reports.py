"""What a gateway writes into the destination cluster's status topic: itself (`cluster gateway list`), and the
state of each replica partition it applies (`replica list`)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from .. import statustopic
from ..kafka import KafkaException, Producer
from ..paths import StreamPath
from .links import Plan, Unit
from .state import UnitState
from .stats import GatewayStats
from .units import UnitTable

REPORT_SECONDS = 5.0

log = logging.getLogger("streamrepl.gateway")


class StatusReports:
    """`producer()` is the gateway's producer of the moment (a restart of the writes replaces it)."""

    def __init__(
        self,
        gateway_id: str,
        table: UnitTable,
        stats: GatewayStats,
        slots: Callable[[], set[int]],
        plan: Callable[[], Plan | None],
        producer: Callable[[], Producer],
        parent_id: str | None = None,
        seats: Callable[[], list[str]] = list,
        restarts: int = 0,
        last_exit: str = "",
        caught_up: Callable[[UnitState], bool] = lambda _: False,
    ):
        self.gateway_id = gateway_id
        self.parent_id = parent_id
        self.restarts = restarts
        self.last_exit = last_exit
        self.table = table
        self.stats = stats
        self._slots = slots
        self._plan = plan
        self._producer = producer
        self._seats = seats
        self._caught_up = caught_up

    def unit(
        self, unit: Unit, state: str, error: str = "", caughtup: bool = False, sources: list[StreamPath] | None = None
    ) -> None:
        """`caughtup`: the writer had applied all its feeds' last fetches showed (SourceFeeds.caught_up); `sources`:
        the links (by source) the report is of (default: the unit's feeds, or its links in the plan)."""
        units = self.table.units
        feeds = units[unit].feeds if unit in units else {}
        plan = self._plan()
        names = (
            sources
            or [link.src for link, _ in feeds.values()]
            or [link.src for link, _ in (plan.units.get(unit, []) if plan else [])]
        )
        nxt = units[unit].writer.next if unit in units else -1
        for src in names:
            body = {
                "state": state,
                "error": error,
                "gateway": self.gateway_id,
                "next": nxt,
                "caughtup": caughtup,
                "updated": int(time.time() * 1000),
            }
            self._send(statustopic.unit_key(str(unit.dst), str(src), unit.topic, unit.partition), body)

    def all(self, wait: float = 0.0) -> None:
        """The partitions whose state changed since they were last reported, and the gateway itself; with `wait`,
        the reports are delivered (for up to `wait` seconds) before this returns."""
        for unit, st in self.table.units.items():
            mark = ("ok", st.writer.next, self._caught_up(st))
            if st.reported != mark:
                self.unit(unit, "ok", caughtup=mark[2])
                st.reported = mark
        body = {
            "gateway": self.gateway_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slots": sorted(self._slots()),
            "seats": self._seats(),
            "units": sorted(u.key for u in self.table.units),
            "applied": self.stats.records_applied,
            "errors": len(self.table.errored),
            # what keeps links of its plan from running (a source that does not answer): `replica list` says it
            "problems": list(plan.problems) if (plan := self._plan()) is not None else [],
            "planned": plan.read_at if plan is not None else 0,
            # started again by its supervisor after it died, and how it died last (`cluster gateway list`)
            "restarts": self.restarts,
            "lastexit": self.last_exit,
            "updated": int(time.time() * 1000),
        }
        if self.parent_id:
            body["parent"] = self.parent_id  # `cluster gateway resolve` allows a worker by its supervisor's id
        self._gateway(body)
        if wait > 0:
            try:
                self._producer().flush(wait)
            except KafkaException as e:
                log.warning("gateway %s: the status reports were not delivered (%s)", self.gateway_id, e)

    def stopped(self) -> None:
        self._gateway({"gateway": self.gateway_id, "stopped": True, "updated": int(time.time() * 1000)})

    def _gateway(self, body: dict[str, object]) -> None:
        self._send(statustopic.gateway_key(self.gateway_id), body)

    def _send(self, key: str, body: dict[str, object]) -> None:
        """Reports go through the gateway's producer. One in a fatal state (a destination broker that came back
        without the producer's state, a fence) is the writes' to restart (WriteSession.check sees it at the next
        delivery); a report that cannot be sent now is sent again at the next report period, not a reason to die."""
        try:
            statustopic.send(self._producer(), key, body)
        except (KafkaException, BufferError) as e:
            log.warning("gateway %s: a status report was not sent (%s)", self.gateway_id, e)
