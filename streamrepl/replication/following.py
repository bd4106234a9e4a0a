"""Following a plan: the partition table (partitions.py) made to hold exactly the replica partitions a plan gives
this gateway, and their feeds. Functions over a Partitions, kept apart so that its class stays small.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..applier import ReplicaConflict
from ..kafka import KafkaException, Producer
from ..paths import kafka_topic_name
from . import watermarks
from .links import Link, Plan, Unit

if TYPE_CHECKING:
    from .partitions import Partitions

log = logging.getLogger("streamrepl.gateway")

#: When a plan makes a gateway take up at least this many partitions at once (it starts, or slots moved to it), their
#: feeds start quiet (quiet.QuietFeeds.hold): nothing fetches them until their end watch's first answer, a round
#: later, wakes those whose source is ahead. Fetched at once, every one was fetched until it went quiet 5 s after the
#: last was taken up: 2,000 partitions a gateway on noida-db, which answers an empty fetch at once, kept 100 consumers
#: fetching for 125 s (load 62 on 2 cores, the source broker 84 % of a core; BENCHMARKS.md). Fewer (a resume, a new
#: topic) are fetched at once: they do not wait for a round.
START_QUIET_AT = 16


def follow(
    partitions: Partitions,
    plan: Plan,
    present: set[str],
    wanted: dict[Unit, list[tuple[Link, str]]],
    ready: bool,
    producer: Producer,
) -> None:
    """Own exactly the `wanted` units of the plan whose replica topic is `present`: drop the others (their
    queued records delivered first), acquire the new ones when `ready`, follow the feeds of the others."""
    for unit in [u for u in partitions.units if u not in wanted]:
        try:
            producer.flush(30)
        except KafkaException as e:
            # A producer in a fatal state: its records' delivery reports restart the writes (Mover.check_writes).
            log.warning("%s: the writes queued before letting it go failed: %s", unit.key, e)
        partitions.drop(unit)
    # A failed unit that left the plan (a link paused, as resync does) is checked again when it comes back.
    for unit in [u for u in partitions.errored if u not in wanted]:
        del partitions.errored[unit]
    taking_up = sum(
        1
        for unit in wanted
        if unit not in partitions.units
        and unit not in partitions.errored
        and kafka_topic_name(unit.dst, unit.topic) in present
    )
    partitions.start_quiet = ready and taking_up >= START_QUIET_AT
    try:
        _follow_wanted(partitions, wanted, present, ready, producer)
    finally:
        partitions.start_quiet = False
    watermarks.recheck_lagging_feeds(partitions)
    _close_unused(partitions, plan)


def _follow_wanted(
    partitions: Partitions,
    wanted: dict[Unit, list[tuple[Link, str]]],
    present: set[str],
    ready: bool,
    producer: Producer,
) -> None:
    for unit, feeds in wanted.items():
        if unit in partitions.errored:
            continue
        if kafka_topic_name(unit.dst, unit.topic) not in present:
            continue
        state = partitions.units.get(unit)
        if state is None:
            if not ready:
                continue
            try:
                partitions.acquire(unit, feeds, producer)
            except ReplicaConflict as e:
                partitions.fail(unit, str(e))
            except Exception as e:  # noqa: BLE001 - retried with the next plan
                log.warning("cannot start %s yet: %s", unit.key, e)
            continue
        names = {link.name for link, _ in feeds}
        for name in [n for n in state.feeds if n not in names]:
            partitions.remove_feed(state, name)
        for name in [n for n in state.unverified if n not in names]:
            del state.unverified[name]
        for link, src_kt in feeds:
            if link.name not in state.feeds:
                # A link added to a running partition: its source is compared with the replica first.
                state.unverified[link.name] = (link, src_kt)
            elif state.feeds[link.name][0] != link:
                # The link's settings changed (`replica edit -throttle ...`): follow them.
                state.feeds[link.name] = (link, state.feeds[link.name][1])
        if state.unverified:
            partitions.verify_feeds(state)


def _close_unused(partitions: Partitions, plan: Plan) -> None:
    """The consumers, probes and watches of links and source clusters the plan no longer has; each link's
    consumer told of its new topics."""
    live = {link.name for link in plan.links}
    for name in [n for n in partitions.lanes.of if n not in live]:
        partitions.lanes.release(name)
    for lane in [n for n in partitions.sources if n not in partitions.lanes.links]:
        partitions.close_lane(lane)
    partitions.new_topics.introduce(partitions.sources)
    live_clusters = {link.src_cluster.name for link in plan.links}
    for name in [n for n in partitions.probes if n not in live_clusters]:
        partitions.close_probe(name)
    if partitions.quiet is not None:
        partitions.quiet.close_unused(live, live_clusters)
    # One pass over the units (each plan, every 2 s): a pass per link was 100,000 steps at 50 links and 2,000 units
    # (Every link with a feed has a lane, and so a consumer: a link leaves its lane only when it left the plan.)
    partitions.links = {}
    for state in partitions.units.values():
        for name, (link, _) in state.feeds.items():
            partitions.links.setdefault(name, link)
