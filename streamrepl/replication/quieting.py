"""Moving feeds between a link's consumer and the quiet feeds whose ends are watched (quiet.py), from the mover's
loop."""

from __future__ import annotations

import time

from .partitions import Partitions
from .quiet import due


def quieten_idle(partitions: Partitions) -> None:
    """Feeds that brought no record for quiet.QUIET_SECONDS stop being fetched; their ends are watched (quiet.py)."""
    quiet = partitions.quiet
    if quiet is None:
        return
    now = time.monotonic()
    for state in partitions.units.values():
        if len(state.feeds) != 1 or state.unverified or state.throttled_until or not state.writer.idle():
            continue
        ((name, (link, tp)),) = state.feeds.items()
        busy = partitions.consumer_of(name)
        if (
            busy is None
            or link.throttle
            or name not in state.rechecked
            or quiet.holds(name, tp)
            or not due(max(state.last_write, state.active_at), now)
        ):
            continue
        quiet.quieten(name, link.src_cluster, tp, busy, state.writer.next)
        state.active_at = now


def wake_moved(partitions: Partitions) -> None:
    """The quiet feeds whose end moved go back to their link's consumer. A source cluster whose connection was lost
    first has its feeds stopped and compared with their replicas again (Partitions.recheck_lost_sources): a
    restarted broker may have taken new records at offsets the replica already holds, and its end moved by them."""
    quiet = partitions.quiet
    if quiet is None:
        return
    moved, lost = quiet.news()
    for cluster in lost:
        partitions.source_lost(cluster)
    partitions.recheck_lost_sources()
    for name, topic, partition, end in moved:
        wake(partitions, name, topic, partition, end)


def wake(partitions: Partitions, name: str, topic: str, partition: int, end: int) -> None:
    """A quiet feed's end moved to `end`: back to its link's consumer, from where its writer is now."""
    unit = partitions.by_source.get((name, topic, partition))
    state = partitions.units.get(unit) if unit else None
    busy = partitions.consumer_of(name)
    quiet = partitions.quiet
    if quiet is None or state is None or busy is None or name not in state.feeds:
        return
    tp = state.feeds[name][1]
    if quiet.holds(name, tp):
        quiet.wake(name, tp, busy, state.writer.next, end)
        state.active_at = time.monotonic()
