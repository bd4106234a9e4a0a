"""The slot group: how the gateways of one destination cluster share its replica partitions.

Each gateway joins the group `streamrepl-gateways-<cluster>` on a slot topic of SLOTS partitions in the
destination cluster; the round-robin assignor spreads the slots over the live gateways, and each destination
partition hashes to one slot (slot_of), so exactly one live gateway owns it. The cursor sync spreads the links
the same way (slot_of_link).

The partitions of one topic take consecutive slots (the topic's hash + the partition number): round robin deals
the slots out in turn, so a topic's partitions spread evenly over the members whatever their number (n partitions
over m gateways: n/m each when m divides n). A hash of each partition's own key did so only by luck (CRC32 is
linear: up to 10 partitions their keys differ in one digit and landed evenly; 12 or 16 partitions over 4 members
split unevenly for half the topics, e.g. 2/2/4/4). Every gateway of a cluster must map partitions to slots the
same way, or two could own one partition: an upgrade across this change (2026-11) stops every gateway of a
cluster before any new one starts.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Any

from .. import kafka, statustopic
from ..errors import StreamreplError
from ..kafka import Consumer, TopicPartition
from ..registry import Cluster
from .links import Link, Unit
from .stats import GatewayStats

log = logging.getLogger("streamrepl.gateway")

SLOT_TOPIC = "__streamrepl_gateway_slots"
SLOTS = 64


def slot_of(unit: Unit) -> int:
    return (zlib.crc32(f"{unit.dst}:{unit.topic}".encode()) + unit.partition) % SLOTS


def slot_of_link(link: Link, slots: int = SLOTS) -> int:
    return zlib.crc32(link.name.encode()) % slots


def ensure_internal_topics(cluster: Cluster) -> None:
    """The slot topic and the status topic exist in the destination cluster."""
    if SLOT_TOPIC not in kafka.topics(cluster):
        kafka.create_shared_topic(cluster, SLOT_TOPIC, SLOTS)  # another gateway may be creating it too
    statustopic.ensure_topic(cluster)


class GatewayFenced(StreamreplError):
    """Another gateway joined the slot group under this gateway's id."""


class SlotGroup:
    """This gateway's membership of the slot group: which slots it owns now.

    `on_assigned()` is called when slots were assigned (the plan must be applied again), `on_give_up(lost)`
    before slots are given up (their partitions must be drained and let go first). Both run in the thread
    that calls poll()."""

    def __init__(
        self,
        cluster: Cluster,
        gateway_id: str,
        session_ms: int,
        stats: GatewayStats,
        on_assigned: Callable[[], None],
        on_give_up: Callable[[set[int]], None],
        new_consumer: Callable[..., Consumer] = kafka.consumer,
    ):
        self.cluster = cluster
        #: join as a static member (README, "Brokers"): a gateway started again under its id gets its slots back
        self.static = kafka.honours_static_membership(cluster)
        self.gateway_id = gateway_id
        self.session_ms = session_ms
        self.slots: set[int] = set()
        self.stats = stats
        self.consumer: Consumer | None = None
        self._on_assigned = on_assigned
        self._on_give_up = on_give_up
        self._new_consumer = new_consumer

    def join(self) -> None:
        conf: dict[str, Any] = {
            "client.id": self.gateway_id,
            "partition.assignment.strategy": "roundrobin",
            "session.timeout.ms": self.session_ms,
            "heartbeat.interval.ms": 1000,
            "enable.partition.eof": False,
        }
        if self.static:
            conf["group.instance.id"] = self.gateway_id
        self.consumer = self._new_consumer(self.cluster, group=f"streamrepl-gateways-{self.cluster.name}", **conf)
        self.consumer.subscribe(
            [SLOT_TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    def poll(self) -> None:
        """Drives heartbeats and rebalances (the callbacks run in here)."""
        if self.consumer is not None:
            msg = self.consumer.poll(0)
            err = msg.error() if msg is not None else None
            if err is not None and kafka.is_fatal(err):
                self.consumer = None  # fenced: there is no membership left to leave
                # A static member is fenced when another process joins under the same id: two gateways would write
                # the same partitions, so this one stops, loudly. (librdkafka hands the fence over as a _FATAL event,
                # whose fatal() is False: it went unnoticed, and the fenced gateway wrote on.)
                raise GatewayFenced(
                    f"gateway {self.gateway_id} was fenced out of its group ({err.str()}): another gateway was started"
                    f" with -id {self.gateway_id}; give each gateway its own -id"
                )

    # The rebalance callbacks run inside librdkafka's poll: an exception escaping them does not reach the caller
    # intact (a gateway stopped with "SystemError: _PyErr_SetObject: exception ... is not a BaseException
    # subclass" after its destination broker crashed). So nothing escapes them; what fails is logged.
    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.stats.rebalances += 1
        self.slots = {tp.partition for tp in parts}
        log.info("gateway %s owns %d slots", self.gateway_id, len(self.slots))
        try:
            # The slots are never read: paused, they cost the destination no fetches (an empty fetch of 64
            # partitions every few ms was most of what an idle gateway cost its destination broker).
            consumer.assign(parts)
            consumer.pause(parts)
            self._on_assigned()
        except Exception:  # noqa: BLE001 - see above
            log.exception("gateway %s: taking up the slots assigned failed", self.gateway_id)

    def _on_revoke(self, _: Any, parts: list[TopicPartition]) -> None:
        self.stats.rebalances += 1
        lost = {tp.partition for tp in parts}
        try:
            self._on_give_up(lost)
        except Exception:  # noqa: BLE001 - see above
            log.exception("gateway %s: letting the slots go failed", self.gateway_id)
        self.slots -= lost
        log.info("gateway %s gave up %d slots", self.gateway_id, len(lost))

    def leave(self) -> None:
        """Leave the group now (LeaveGroup)."""
        if self.consumer is not None:
            if self.static:
                # librdkafka sends no LeaveGroup when a static member closes (KIP-345 lets it come back instead);
                # unsubscribing first does send it, so a planned stop still hands the slots over at once.
                # It goes out from the consumer's own thread: poll a moment, or close() cuts it off.
                self.consumer.unsubscribe()
                for _ in range(5):
                    self.consumer.poll(0.1)
            self.consumer.close()
            self.consumer = None

    def abandon(self) -> Consumer | None:
        """Stop taking part without leaving: the consumer is handed back, to be kept open until the process
        exits (see Gateway.shutdown for why)."""
        consumer, self.consumer = self.consumer, None
        return consumer
