"""Whether the destination cluster still holds the gateway's internal topics as they were made.

A destination that comes back empty (a broker on memory storage restarted, a data directory wiped, a cluster
rebuilt under its address) answers as before, and its brokers may even keep their identity (kafka.probes.identity);
what it lost is every topic. A gateway that went on as if nothing happened held no slot for good (the slot topic was
gone, so the group assigned nothing) and its reports went to a status topic that a producer's write had made again
with the broker's default partition count, of which readers read only partition 0. So a thread looks at the
internal topics every CHECK_SECONDS; one gone or of the wrong shape is the verdict the gateway's loop takes
(Gateway.start_over), and `repair` makes them again as they must be.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .. import kafka, statustopic
from ..errors import StreamreplError
from ..registry import Cluster
from .membership import SLOT_TOPIC, SLOTS

log = logging.getLogger("streamrepl.gateway")

#: how often the destination's internal topics are looked at (one Metadata request)
CHECK_SECONDS = 2.0

#: the internal topics and their partition counts
SHAPES = {SLOT_TOPIC: SLOTS, statustopic.STATUS_TOPIC: 1}


def misshapen(topics: dict[str, int]) -> list[str]:
    """What is wrong with the internal topics among `topics` (name -> partition count); []: nothing."""
    out = []
    for name, want in SHAPES.items():
        got = topics.get(name)
        if got is None:
            out.append(f"topic {name} is gone")
        elif got != want:
            out.append(f"topic {name} has {got} partitions, not {want}")
    return out


def repair(cluster: Cluster) -> list[str]:
    """Make the internal topics of `cluster` as they must be: the missing created, those of the wrong shape deleted and
    created again (what they held is reports, which the gateways write again within seconds). Returns what was wrong."""
    topics = kafka.topics(cluster)
    wrong = misshapen(topics)
    for name, want in SHAPES.items():
        got = topics.get(name)
        if got == want:
            continue
        if got is not None:
            log.warning(
                "cluster %s: topic %s has %d partitions, not %d (made by a write before it was created?);"
                " it is deleted and made again",
                cluster.name,
                name,
                got,
                want,
            )
            kafka.delete_topics(cluster, [name])
        if name == SLOT_TOPIC:
            kafka.create_shared_topic(cluster, name, want)  # another gateway may be creating it too
        else:
            _create_status_topic(cluster)
    return wrong


def _create_status_topic(cluster: Cluster) -> None:
    # Right after a delete a broker may still refuse the name for a moment.
    for _ in range(20):
        try:
            statustopic.ensure_topic(cluster)
            return
        except StreamreplError:
            threading.Event().wait(0.25)
    statustopic.ensure_topic(cluster)


class DestinationWatch:
    """Looks at the destination's internal topics from a thread of its own; `take()` returns what it found wrong since
    it was last asked ("" if nothing). A destination that does not answer is no verdict: it is waited for."""

    def __init__(self, cluster: Cluster, period: float = CHECK_SECONDS):
        self.cluster = cluster
        self.period = period
        self._found = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._admin: Any = None

    def start(self) -> DestinationWatch:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="destination-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> str:
        found, self._found = self._found, ""
        return found

    def look(self) -> str:
        """What is wrong now ("" if nothing, or if the destination does not answer)."""
        if self._admin is None:
            self._admin = kafka.admin_client(self.cluster)  # kept: asked every period
        try:
            topics = kafka.topics(self.cluster, self._admin)
        except StreamreplError:
            return ""
        return "; ".join(misshapen(topics))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                found = self.look()
            except Exception:  # noqa: BLE001 - the watch must outlive a bad answer; the gateway keeps serving
                log.exception("looking at the internal topics of cluster %s failed", self.cluster.name)
                continue
            if found and not self._found:
                self._found = found
