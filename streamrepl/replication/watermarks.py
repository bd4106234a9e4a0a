"""What the source consumers' last fetches say of their partitions' ends (cached watermarks: no request): the
records not applied yet, and feeds whose source ends before the replica. Functions over a Partitions, kept apart so
that its class stays small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kafka import KafkaException, TopicPartition

if TYPE_CHECKING:
    from .partitions import Partitions, UnitState


def recheck_lagging_feeds(partitions: Partitions) -> None:
    """A feed starts at the replica partition's end. When its source ends before that, the replica's
    records up to the source's end must have come from it (or be the replica's own): read the source's
    last records again so that the writer checks their origin. Otherwise the same topic written in two
    streams goes unnoticed for as long as the source stays behind. Uses the watermark the last fetch
    brought (no request); each feed is looked at once per acquisition."""
    for state in partitions.units.values():
        for name, (_, tp) in state.feeds.items():
            c = partitions.consumer_of(name)
            if name in state.rechecked or c is None:
                continue
            try:
                _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
            except KafkaException:
                continue
            if high < 0:
                continue  # no fetch answered yet
            state.rechecked.add(name)
            if 0 < high < state.writer.next:
                c.seek(TopicPartition(tp.topic, tp.partition, high - 1))


def pending(partitions: Partitions) -> dict[str, int]:
    """Source records not applied yet, per link, from the watermarks of the last fetches (no request).
    Called from the metrics thread: works on snapshots, and a consumer closed meanwhile counts nothing."""
    out: dict[str, int] = {}
    for state in list(partitions.units.values()):
        for name, (_, tp) in list(state.feeds.items()):
            c = partitions.consumer_of(name)
            if partitions.quiet is not None and partitions.quiet.holds(name, tp):
                out[name] = out.get(name, 0)  # a quiet feed's end has not passed its writer (quiet.py)
                continue
            if c is None:
                continue
            try:
                _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
            except (KafkaException, RuntimeError):
                continue
            out[name] = out.get(name, 0) + max(0, high - state.writer.next)
    return out


def caught_up(partitions: Partitions, state: UnitState) -> bool:
    """Whether the writer had applied every record its feeds' last fetches showed (the source's end as the last fetch
    saw it, no request; a quiet feed's end has not passed its writer). Reported with the unit (reports.py): promote
    -consistent lets a partition caught up at its last report not hold its cut back (promoteconsistent.py)."""
    if not state.feeds:
        return False
    for name, (_, tp) in list(state.feeds.items()):
        if partitions.quiet is not None and partitions.quiet.holds(name, tp):
            continue
        c = partitions.consumer_of(name)
        if c is None:
            return False
        try:
            _, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
        except (KafkaException, RuntimeError):
            return False
        if high < 0 or high > state.writer.next:
            return False
    return True
