"""The write session: the producer the writers of every replica partition share, its delivery reports, the checks of
what was delivered, and the restarts of the writes.

When records handed to the producer expired, the producer was fenced or fell into a fatal state, a record landed
below its offset, or the connection to the destination was lost, where the records are is unknown: every partition
is let go, the producer is thrown away with what it still holds, and the partitions are taken up again from their real
ends once the destination has answered for RESTART_GRACE_SECONDS (ready_to_acquire).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import cast

from ..divergence import misplaced
from ..kafka import Consumer, KafkaException, Producer, TopicPartition
from .membership import SLOT_TOPIC
from .state import UnitState
from .stats import GatewayStats
from .units import UnitTable

log = logging.getLogger("streamrepl.gateway")

#: After such a restart, how long the destination must have answered before partitions are taken up again:
#: a produce request sent to a frozen broker before the restart is appended when the broker resumes.
RESTART_GRACE_SECONDS = 2.0
#: How long the destination may take to answer whether it is back after a restart (seconds).
ANSWER_TIMEOUT = 1.0
#: How long a partition that another writer wrote into waits for this gateway's records in flight, so that its
#: error counts every one that landed at a wrong offset.
CONFLICT_FLUSH_SECONDS = 5.0
#: The bounds of the write window: how many records the producer may hold unacknowledged (see WriteSession.room).
#: The top is the producer's own queue.buffering.max.messages.
WINDOW_MIN = 1_000
WINDOW_MAX = 200_000
#: How long a batch may wait in the producer before the window shrinks (seconds; the gateway gives a fifth of its
#: message timeout, the rest is left for the produce request itself).
QUEUE_AGE = 1.0


def why_of(e: Exception) -> str:
    """The text of a Kafka error (its KafkaError's, when it carries one)."""
    return str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)


class WriteSession:
    """`new_producer()` makes the producer (again after each restart); `reader` reads the replica partitions;
    `table` holds the units whose writers use the producer; the gateway and its cluster name the logs; `queue_age`:
    see QUEUE_AGE.

    The write window: a destination slower than the source (a thin link, a busy disk) made the producer queue up to
    64 MB, more than it took within the message timeout; records expired and the writes restarted, and a produce
    request in flight when its records expired may still be appended by the broker after the restart (librdkafka
    closes the connection; the broker appends what it had received), past the new writes (issue 28's noida-db
    sweep, tests/e2e/test_slow_destination.py). So the records handed and not acknowledged are kept within a window:
    it starts at WINDOW_MIN, doubles after a batch acknowledged within half of `queue_age` while the window was
    full, and halves (at most once every `queue_age`) after a batch that waited longer than `queue_age`."""

    def __init__(
        self,
        new_producer: Callable[[], Producer],
        reader: Consumer,
        table: UnitTable,
        stats: GatewayStats,
        gateway_id: str = "",
        cluster_name: str = "",
        queue_age: float = QUEUE_AGE,
    ):
        self._new_producer = new_producer
        self.reader = reader
        self.table = table
        self.stats = stats
        self.gateway_id = gateway_id
        self.cluster_name = cluster_name
        self.producer = new_producer()
        #: after a restart of the writes, partitions wait for the destination (see ready_to_acquire)
        self.restart_pending = False
        #: when the destination answered again after the restart (None: not yet)
        self._answering_since: float | None = None
        #: why the producer lost its connection to the destination since the loop last looked ("": it did not)
        self._destination_lost = ""
        self.queue_age = queue_age
        #: how many records the producer may hold unacknowledged (the write window, see above)
        self.window = WINDOW_MIN
        self._window_full = False
        self._next_shrink = 0.0

    def room(self) -> int:
        """How many more records may be handed to the producer now (0 or less: wait for acknowledgements)."""
        left = self.window - len(self.producer)
        if left <= 0:
            self._window_full = True
        return left

    def acked_after(self, seconds: float) -> None:
        """A batch was acknowledged `seconds` after it was handed to the producer: the window follows."""
        if seconds > self.queue_age:
            now = time.monotonic()
            if now >= self._next_shrink:
                self.window = max(WINDOW_MIN, self.window // 2)
                self._next_shrink = now + self.queue_age
        elif seconds < self.queue_age / 2 and self._window_full:
            self.window = min(WINDOW_MAX, self.window * 2)
            self._window_full = False

    @property
    def destination_was_lost(self) -> bool:
        return bool(self._destination_lost)

    def poll(self, timeout: float = 0) -> int:
        """Serve the producer's delivery reports; returns how many events were served. A producer in a fatal state
        raises here (an idempotent producer whose destination broker came back without its state: "out of order
        sequence number"): the writes start again with a new one, the gateway goes on."""
        try:
            return cast(int, self.producer.poll(timeout))
        except (KafkaException, SystemError) as e:
            self.restart(why_of(e))
            return 0

    def flush(self, timeout: float) -> int:
        """Wait for the queued records to be acknowledged; returns how many were not. A producer in a fatal state
        restarts the writes (its records' fate is unknown: every partition starts again from its real end)."""
        try:
            return cast(int, self.producer.flush(timeout))
        except (KafkaException, SystemError) as e:
            # SystemError: the fatal error raised inside a rebalance callback reaches us mangled (see membership.py).
            self.restart(why_of(e))
            return 0

    def destination_lost(self, why: str) -> None:
        """The producer lost its connection to a destination broker (its error_cb, from inside poll)."""
        self._destination_lost = self._destination_lost or why

    def check(self) -> None:
        """What the delivery reports said: a lost destination or records in doubt restart the writes; a partition
        whose writes failed (another writer wrote into it, a record refused) stops."""
        units = self.table.units
        lost, self._destination_lost = self._destination_lost, ""
        if lost and units:
            # A broker that went away may come back without records it had acknowledged. librdkafka would send
            # what it still holds once it is back, and after an epoch bump (a record expired meanwhile) with
            # sequence numbers the broker accepts: at its new end, below their offsets (the chaos suite's
            # destination crashes found such records). Thrown away before the broker is back, they are never
            # sent; every partition starts again from its real end.
            self.restart(f"lost the connection to the destination: {lost}")
            return
        uncertain = next((st.writer.uncertain for st in units.values() if st.writer.uncertain), "")
        if uncertain:
            self.restart(uncertain)
            return
        for unit, state in list(units.items()):
            if state.writer.errors:
                why = f"{state.writer.errors[0]}; replication of this partition stopped"
                self.table.fail(unit, self.conflict_error(state, why) if state.writer.shifted else why)

    def conflict_error(self, state: UnitState, fallback: str) -> str:
        """The error of a partition that another writer wrote into: where the replica stops matching its source and
        how many records this gateway sent landed at wrong offsets (divergence.misplaced), read once they have all
        landed; `fallback` when that cannot be known."""
        w = state.writer
        links = [link for link, _ in state.feeds.values()]
        link = next((x for x in links if x.src_uuid == w.origin), links[0] if links else None)
        if link is None:
            return fallback
        # The records it sends are of the partition's origin; a partition of the replica's own takes none.
        origin = link.src_uuid if w.origin in (None, w.dst_uuid) else w.origin
        try:
            if self.producer.flush(CONFLICT_FLUSH_SECONDS) > 0:
                return fallback
            found = misplaced(self.reader, TopicPartition(w.topic, w.partition), w.acked, w.next, origin, w.dst_uuid)
        except (KafkaException, SystemError, TimeoutError):
            return fallback
        return found.describe(w.label, str(link.src), str(link.dst), state.unit.topic)

    def restart(self, why: str) -> None:
        """Records handed to the producer expired, or the producer was fenced: where they are is unknown.
        Let every partition go, throw the producer away with what it still holds, and take the partitions
        up again from their real ends once the destination has answered for RESTART_GRACE_SECONDS."""
        log.warning(
            "gateway %s: writes into %s failed (%s); every partition starts again from its real end",
            self.gateway_id,
            self.cluster_name,
            why,
        )
        self.stats.write_restarts += 1
        self.table.drop_all()
        self.table.producer_replaced()
        old = self.producer
        try:
            old.purge(in_queue=True, in_flight=True)
            old.poll(0)
        except (KafkaException, RuntimeError, SystemError):  # a producer in a fatal state raises here too
            pass
        self.producer = self._new_producer()
        self.window = WINDOW_MIN  # what it held was more than the destination took in time
        self.restart_pending = True
        self._answering_since = None
        self._destination_lost = ""  # the old producer's news

    def ready_to_acquire(self) -> bool:
        """False while a restart of the writes waits for the destination (see restart)."""
        if not self.restart_pending:
            return True
        now = time.monotonic()
        if self._answering_since is None:
            try:
                self.reader.list_topics(SLOT_TOPIC, timeout=ANSWER_TIMEOUT)
            except KafkaException:
                return False
            self._answering_since = now
        if now - self._answering_since < RESTART_GRACE_SECONDS:
            return False
        self.restart_pending = False
        return True
