"""Spare source consumers: one connected ahead for each source cluster of the plan that no lane reads.

A new consumer costs four round trips before its first fetch (ApiVersions and Metadata at the bootstrap address,
ApiVersions and Fetch at the broker's): across a WAN, most of the time from `replica resume` to its first record
(issue 28). A spare is made, and asks its cluster's metadata log's end once (which connects it to both addresses), in a
thread of its own; it then reads nothing until the first lane of its cluster takes it (SourceFeeds), which is left
with the topic's lookup (NewTopics) and the fetch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from .. import kafka
from ..kafka import Consumer, TopicPartition
from ..paths import METADATA_TOPIC
from ..registry import Cluster

log = logging.getLogger("streamrepl.gateway")

#: How long a spare waits for its source cluster to answer when it is made (seconds)
SPARE_TIMEOUT = 10.0


class SpareConsumers:
    """`new_consumer(cluster)` makes a source consumer (feeds.source_consumer)."""

    def __init__(self, new_consumer: Callable[[Cluster], Consumer]):
        self._new_consumer = new_consumer
        #: source cluster name -> its spare; the names of those being connected; both under _lock (spares are made
        #: in threads of their own)
        self._spares: dict[str, Consumer] = {}
        self._warming: set[str] = set()
        #: source cluster name -> how long its spare's first request took (None: it did not answer)
        self._first_request: dict[str, float | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    def keep(self, clusters: Iterable[Cluster], in_use: set[str]) -> None:
        """Keep a spare for each of `clusters` (the source clusters of the plan: those of links held paused among
        them) whose name is not `in_use` (read by a lane); the spares of the others are closed."""
        wanted = {c.name: c for c in clusters if c.name not in in_use}
        with self._lock:
            unwanted = [self._spares.pop(name) for name in [n for n in self._spares if n not in wanted]]
            new = [c for name, c in wanted.items() if name not in self._spares and name not in self._warming]
            self._warming.update(c.name for c in new)
        for c in unwanted:
            c.close()
        for cluster in new:
            threading.Thread(target=self._warm, args=(cluster,), name="spare-consumer", daemon=True).start()

    def take(self, cluster: Cluster) -> tuple[Consumer, float | None] | None:
        """The cluster's spare, now the caller's, and how long its first request took when it was made, as a new
        consumer's would (None: it did not answer; lanes.lookup_fan): its own requests now take one round trip.
        None: there is no spare ready."""
        with self._lock:
            c = self._spares.pop(cluster.name, None)
            return None if c is None else (c, self._first_request.pop(cluster.name, None))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            spares, self._spares = list(self._spares.values()), {}
        for c in spares:
            c.close()

    def _warm(self, cluster: Cluster) -> None:
        c: Consumer | None = None
        took: float | None = None
        try:
            c = self._new_consumer(cluster)
            began = time.monotonic()
            c.offsets_for_times([TopicPartition(METADATA_TOPIC, 0, kafka.LATEST)], timeout=SPARE_TIMEOUT)
            took = time.monotonic() - began
        except Exception as e:  # noqa: BLE001 - only a head start: connected or not, a spare is kept
            log.debug("a spare consumer of %s did not connect: %s", cluster.name, e)
        with self._lock:
            self._warming.discard(cluster.name)
            if c is not None and not self._closed and cluster.name not in self._spares:
                self._spares[cluster.name], c = c, None
                self._first_request[cluster.name] = took
        if c is not None:
            c.close()
