"""The end check: before the gateway writes into a replica partition that was quiet, is its end still where this
gateway left it? A stray producer's record would shift every record written after it; a broker that lost
acknowledged records would take the next write below its offset; another gateway that took the partition over
has written on. Functions over the Mover's state (its reader, partitions and restart), kept apart so that the
hot loop's class stays small.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, cast

from .. import kafka, policy
from ..kafka import KafkaException, Message, TopicPartition
from .links import Link
from .partitions import UnitState

if TYPE_CHECKING:
    from .mover import Mover

log = logging.getLogger("streamrepl.gateway")

END_CHECK_TIMEOUT = 1.0  # seconds
#: A partition quiet for longer than this has its end checked before it is written again (end_unchanged).
#: Not after every short gap: at a few thousand records/s each partition goes idle between batches, and a
#: request on the loop before each batch doubled the p99 latency (BENCHMARKS.md). A stray write in a gap
#: shorter than this is still caught, by the delivery check, after the batch that follows it.
END_CHECK_IDLE = 0.5


def ends_of_waking(mover: Mover, link: Link, by_tp: dict[tuple[str, int], list[Message]]) -> dict[tuple[str, int], int]:
    """The ends of the replica partitions a batch wakes (see end_unchanged), asked for in one request when there
    are several: after a quiet spell a burst into 800 partitions woke them all, one request each, on the loop."""
    now = time.monotonic()
    if now < mover._end_checks_off_until or len(by_tp) < 2:
        return {}
    tps = []
    for (topic, partition), batch in by_tp.items():
        unit = mover.partitions.by_source.get((link.name, topic, partition))
        state = mover.partitions.units.get(unit) if unit else None
        if state is None:
            continue
        w = state.writer
        if w.idle() and now - state.last_write > END_CHECK_IDLE and cast(int, batch[-1].offset()) >= w.next:
            tps.append(TopicPartition(w.topic, w.partition, kafka.LATEST))
    if len(tps) < 2:
        return {}
    try:
        got = mover.reader.offsets_for_times(tps, timeout=END_CHECK_TIMEOUT)
    except KafkaException:
        return {}  # each is asked for alone, as before
    return {(tp.topic, tp.partition): tp.offset for tp in got if tp.error is None and tp.offset >= 0}


def end_unchanged(mover: Mover, state: UnitState, origin: str) -> bool:
    """Before writing into a partition whose writes are all acknowledged and that was quiet for
    END_CHECK_IDLE, check that nothing else wrote into it meanwhile (a stray producer): its record would
    shift every record written after it. This costs a request only when a partition wakes up.

    When the records written meanwhile are copies of the same origin, another gateway took the
    partition over (this one was stalled past its session, and has not heard yet): the partition
    is let go, not failed; it is acquired again from its real end if this gateway still owns it."""
    now = time.monotonic()
    if now < mover._end_checks_off_until:
        return True
    w = state.writer
    try:
        high = mover._ends_ahead.get((w.topic, w.partition), -1)
        if high < 0:
            _, high = mover.reader.get_watermark_offsets(
                TopicPartition(w.topic, w.partition), timeout=END_CHECK_TIMEOUT, cached=False
            )
    except KafkaException:
        # The destination does not answer: do not stall every partition on it; writes are checked on delivery.
        mover._end_checks_off_until = now + 10
        return True
    if high < w.next:
        # The watermark can under-count (Tansu: the last batch's base offset + 1): read the real end.
        try:
            high = kafka.true_end(mover.reader, TopicPartition(w.topic, w.partition), END_CHECK_TIMEOUT)
        except (KafkaException, TimeoutError):
            return True  # the destination does not answer now: writes are checked on delivery
    if high < w.next:
        # The destination broker came back without records it had acknowledged (a crash between its saves,
        # an unclean leader election): a write now would land below its offset. Start again from the real end.
        mover.restart_writes(
            f"{w.label}: the replica partition ends at offset {high}, below offset {w.next} where this gateway"
            " left it (its broker lost acknowledged records)"
        )
        return False
    if high > w.next:
        try:
            rec = kafka.last_record(mover.reader, TopicPartition(w.topic, w.partition), high)
        except KafkaException:
            rec = None
        if rec is not None and origin != w.dst_uuid and policy.origin_of(rec.headers(), w.dst_uuid) == origin:
            log.warning(
                "%s: another gateway wrote up to offset %d meanwhile (this one left it at %d); letting it go",
                w.label,
                high,
                w.next,
            )
            mover.partitions.drop(state.unit)
            return False
        why = (
            f"{w.label}: the replica partition ends at offset {high}, past offset {w.next} where this gateway"
            " left it; something else writes into this replica; replication of this partition stopped"
        )
        mover.partitions.fail(state.unit, mover.conflict_error(state, why))
        return False
    return True
