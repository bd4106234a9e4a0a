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

import contextlib
import functools
import logging
import os
import queue
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from .. import kafka, statustopic
from ..errors import StreamreplError
from ..kafka import Consumer, TopicPartition
from ..registry import Cluster
from .links import Link, Unit
from .reports import REPORT_SECONDS
from .stats import GatewayStats

log = logging.getLogger("streamrepl.gateway")

SLOT_TOPIC = "__streamrepl_gateway_slots"
SLOTS = 64
#: how often a static member looks for dead gateways' seats to adopt (SlotGroup._check_seats)
SEAT_CHECK_SECONDS = 3.0
#: How long the slots of an adopted seat wait before they are this gateway's: two heartbeats of the seat's former
#: holder (heartbeat.interval.ms 1000) and a margin. A holder that was alive after all (its reports were late, its
#: destination flaky) hears of its fence at its next heartbeat and stops writing; taken up at once, its partitions
#: were written by both meanwhile (tests/sim, seeds 445, 2815, 3257).
HANDOVER_SECONDS = 2.5
#: How long a fenced gateway looks for the report that says who fenced it (SlotGroup._reports_after_fence).
FENCE_LOOK_SECONDS = 3.0
#: a static member's join that got no assignment for two sessions and this much more is made again (_join_stuck)
JOIN_PATIENCE_SECONDS = 5.0


def slot_of(unit: Unit) -> int:
    return (zlib.crc32(f"{unit.dst}:{unit.topic}".encode()) + unit.partition) % SLOTS


def slot_of_link(link: Link, slots: int = SLOTS) -> int:
    return zlib.crc32(link.name.encode()) % slots


class GatewayFenced(StreamreplError):
    """Another gateway joined the slot group under this gateway's id."""


class SeatTaken(StreamreplError):
    """A live gateway took this gateway's seat in the slot group while it stood still (SlotGroup.adopt_dead)."""


class Seat:
    """One membership of the slot group held by this gateway: its own, or a dead gateway's that it adopted (the
    consumer joined under that gateway's group.instance.id). Its slots are what the group assigned to it."""

    def __init__(self, instance: str, consumer: Consumer):
        self.instance = instance
        self.consumer = consumer
        self.slots: set[int] = set()
        #: the group has assigned this seat something (an empty assignment too) since it joined
        self.assigned = False
        #: since when it waits for an assignment (monotonic), from its join or its last revoke; 0: it has one
        self.waiting_since = 0.0
        #: when its slots may be written (monotonic; 0: at once): an adopted seat's wait out its former holder's
        #: next heartbeats (HANDOVER_SECONDS)
        self.usable_at = 0.0


class SlotGroup:
    """This gateway's membership of the slot group: which slots it owns now.

    On a broker whose coordinator never expires a member that died (noida-db), a gateway started after one died
    would wait for the dead member for good. Members are static there (kafka.honours_static_membership), so the
    group's own protocol offers a way out: a consumer that joins under a dead member's instance id takes its place
    and slots at once, and the broker fences whoever held that id before (a gateway that was frozen, not dead, is
    refused on its next heartbeat: FENCED_INSTANCE_ID). `adopt_dead(...)` does that for the members the status
    reports call dead; the adopted seat is then left (LeaveGroup) where the broker hands over cleanly, so that the
    live gateways share its slots, or kept, with its slots, where it does not. The real gateway coming back under
    its id fences the adopted seat in turn, which is then let go quietly.

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
        gateway_reports: Callable[[], dict[str, dict[str, Any]]] | None = None,
    ):
        self.cluster = cluster
        #: the cluster's gateway reports (statustopic): who is alive, whose seat is held by whom
        self._gateway_reports = gateway_reports or (lambda: statustopic.read(cluster, "gateway|"))
        self._next_seat_check = 0.0
        #: the look for dead seats (a thread: _check_seats), what it found, and the admin client it describes with
        self._look: threading.Thread | None = None
        self._found: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._admin: Any = kafka.GroupAdmin(cluster)  # its client let go after an unanswered request (groups.py)
        #: members seen without any report, and since when (monotonic): see dead_seats
        self._unreported_since: dict[str, float] = {}
        #: the look runs in a thread of its own (False: in poll's thread, for the simulated cluster, which drives
        #: every step itself: docs/simulation.md)
        self.threaded_look = True
        #: static member (docs/brokers.md): decided at join(), once the broker's answers are known
        self.static = False
        self.gateway_id = gateway_id
        self.session_ms = session_ms
        self.slots: set[int] = set()
        self.stats = stats
        self.consumer: Consumer | None = None
        #: the seats of dead gateways this one adopted (instance id -> seat)
        self.adopted: dict[str, Seat] = {}
        self._own = Seat(gateway_id, None)  # type: ignore[arg-type]
        self._on_assigned = on_assigned
        self._on_give_up = on_give_up
        self._new_consumer = new_consumer

    @property
    def group_id(self) -> str:
        return f"streamrepl-gateways-{self.cluster.name}"

    def _seat_consumer(self, seat: Seat, client_id: str) -> Consumer:
        """A consumer joining the group under `seat`'s instance id: the seat waits for an assignment from now."""
        seat.waiting_since = time.monotonic()
        conf: dict[str, Any] = {
            "client.id": client_id,
            "partition.assignment.strategy": "roundrobin",
            "session.timeout.ms": self.session_ms,
            "heartbeat.interval.ms": 1000,
            "enable.partition.eof": False,
        }
        if self.static:
            conf["group.instance.id"] = seat.instance
        consumer = self._new_consumer(self.cluster, group=self.group_id, **conf)
        consumer.subscribe(
            [SLOT_TOPIC],
            on_assign=functools.partial(self._on_assign, seat),
            on_revoke=functools.partial(self._on_revoke, seat),
            on_lost=functools.partial(self._on_revoke, seat),
        )
        return consumer

    def join(self) -> None:
        self.static = kafka.honours_static_membership(self.cluster)
        self.consumer = self._seat_consumer(self._own, self.gateway_id)
        self._own.consumer = self.consumer
        self._own.assigned = False

    def _join_stuck(self) -> bool:
        """A static member whose join got no assignment at all (not even an empty one) for two sessions and a few
        seconds. Seen on noida-db with three gateways joining within a second (1 start in 3): the group formed
        without one of them, whose join then waited for good behind a member the coordinator kept for it. A new
        consumer under the same instance id takes that member's place (a static member's return), as it does a dead
        gateway's (see adopt_dead). The same after a revoke: a gateway that had adopted three dead gateways' seats
        saw a rebalance that never ended (no assignment for 150 s)."""
        return self.static and self._stuck(self._own)

    def _stuck(self, seat: Seat) -> bool:
        return bool(seat.waiting_since) and (
            time.monotonic() - seat.waiting_since > 2 * self.session_ms / 1000 + JOIN_PATIENCE_SECONDS
        )

    def poll(self) -> None:
        """Drives heartbeats and rebalances (the callbacks run in here)."""
        if self.consumer is not None and self._join_stuck():
            log.warning(
                "gateway %s: the slot group assigned it nothing for %.0f s; joining again under its id",
                self.gateway_id,
                time.monotonic() - self._own.waiting_since,
            )
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.join()
        if self.consumer is not None:
            err = self._poll(self.consumer)
            if err is not None:
                self.consumer = None  # fenced: there is no membership left to leave
                # A static member is fenced when another process joins under the same id. (librdkafka hands the fence
                # over as a _FATAL event, whose fatal() is False: it went unnoticed, and the fenced gateway wrote on.)
                reports = self._reports_after_fence()
                if self._another_process_under_own_id(reports):
                    # Two gateways would write the same partitions: this one stops for good, loudly.
                    raise GatewayFenced(
                        f"gateway {self.gateway_id} was fenced out of its group ({err.str()}): another gateway was"
                        f" started with -id {self.gateway_id}; give each gateway its own -id"
                    )
                # It stood still (frozen, cut off from its destination) and a live gateway took its seat: it stops
                # writing and is started again (its supervisor), and its return under its id takes the seat back.
                # The adopter's report naming the seat may not be out yet (it reports once the seat's slots are its
                # own): a fence without a report of another process under this id is taken for this.
                adopter = self._adopter_of_own_seat(reports) or "another gateway"
                raise SeatTaken(
                    f"gateway {self.gateway_id} was fenced out of its group ({err.str()}): it stopped answering"
                    f" and {adopter} took its seat; it stops, and starts again under its id"
                )
        while not self._found.empty():  # what the last look for dead seats found (_check_seats)
            for instance in self._found.get():
                if instance not in self.adopted and self.consumer is not None:
                    self._adopt(instance)
        if self.static and self.consumer is not None and time.monotonic() >= self._next_seat_check:
            self._next_seat_check = time.monotonic() + SEAT_CHECK_SECONDS
            self._check_seats()
        for instance, seat in list(self.adopted.items()):
            if self._poll(seat.consumer) is not None:
                # The gateway whose seat this was came back under its id: its slots are its own again.
                log.info("gateway %s: gateway %s is back and took its seat again", self.gateway_id, instance)
                self._let_go(seat)
                del self.adopted[instance]
        for instance, seat in list(self.adopted.items()):
            if self.consumer is not None and self._stuck(seat):
                log.warning(
                    "gateway %s: the seat of gateway %s was assigned nothing for %.0f s; joining again under its id",
                    self.gateway_id,
                    instance,
                    time.monotonic() - seat.waiting_since,
                )
                with contextlib.suppress(Exception):
                    seat.consumer.close()
                seat.consumer = self._seat_consumer(seat, self._adopted_client_id(instance))
        handed_over = [seat for seat in self.adopted.values() if seat.usable_at and time.monotonic() >= seat.usable_at]
        for seat in handed_over:
            seat.usable_at = 0.0
        if handed_over and self._usable_slots() != self.slots:
            self.slots = self._usable_slots()
            log.info("gateway %s owns %d slots", self.gateway_id, len(self.slots))
            self._on_assigned()

    def _adopted_client_id(self, instance: str) -> str:
        return f"{self.gateway_id}.seat-of-{instance}"

    def _usable_slots(self) -> set[int]:
        """Its own seat's slots and those of the adopted seats that were handed over (HANDOVER_SECONDS)."""
        return self._own.slots.union(*(s.slots for s in self.adopted.values() if not s.usable_at))

    def _reports_after_fence(self) -> dict[str, dict[str, Any]]:
        """The reports that say who fenced this gateway: read again for up to FENCE_LOOK_SECONDS until one does. A
        second gateway started with this -id reports before it joins, but its report can land after the fence it
        brings (noida-db hands it the id at once); taken for an adoption then, this gateway would start again and
        fence the other in turn."""
        deadline = time.monotonic() + FENCE_LOOK_SECONDS
        while True:
            reports = self._read_reports()
            if self._another_process_under_own_id(reports) or self._adopter_of_own_seat(reports):
                return reports
            if time.monotonic() >= deadline:
                return reports
            time.sleep(0.25)

    def _read_reports(self) -> dict[str, dict[str, Any]]:
        """The gateways' reports ({} when they cannot be read now)."""
        try:
            return self._gateway_reports()
        except (StreamreplError, kafka.KafkaException):
            return {}

    def _another_process_under_own_id(self, reports: dict[str, dict[str, Any]]) -> bool:
        """Whether this gateway's id has a live report from another process (a gateway reports before it joins, so a
        second gateway started with this -id has overwritten this one's report by the time it fences it)."""
        mine = reports.get(statustopic.gateway_key(self.gateway_id))
        if mine is None or mine.get("stopped") or not statustopic.is_live(mine, time.time() * 1000):
            return False
        return (mine.get("pid"), mine.get("host")) not in ((None, None), (os.getpid(), socket.gethostname()))

    def _adopter_of_own_seat(self, reports: dict[str, dict[str, Any]]) -> str:
        """The live gateway whose report says it holds this gateway's seat ("" if none)."""
        now_ms = time.time() * 1000
        return next(
            (
                f"gateway {r.get('gateway')}"
                for r in reports.values()
                if statustopic.is_live(r, now_ms) and self.gateway_id in r.get("seats", [])
            ),
            "",
        )

    @staticmethod
    def _poll(consumer: Consumer) -> kafka.KafkaError | None:
        """Poll; the fence (a fatal error) if there was one."""
        msg = consumer.poll(0)
        err = msg.error() if msg is not None else None
        return err if err is not None and kafka.is_fatal(err) else None

    def _let_go(self, seat: Seat) -> None:
        if seat.slots:
            self._on_revoke(seat, None, [TopicPartition(SLOT_TOPIC, s) for s in sorted(seat.slots)])
        with contextlib.suppress(Exception):
            seat.consumer.close()

    # -- adopting the seats of dead gateways ---------------------------------------------------------------------
    def members(self) -> list[str] | None:
        """The instance ids of the group's static members, as the broker describes the group; None when it does not
        say (it lists no members, or no instance ids)."""
        info = kafka.describe_groups(self.cluster, self._admin, [self.group_id]).get(self.group_id)
        ids = [m.instance_id for m in (info.members if info is not None else []) if m.instance_id]
        return ids or None

    def _check_seats(self) -> None:
        """Leave the adopted seats that got their slots (where that is safe), and start the next look for dead seats
        in a thread of its own (poll() adopts what it finds): a describe of the group, and a read of the gateway
        reports when it has members other than this gateway's (a read of the status topic took the gateway's loop,
        which polls the group, a few hundred ms every few seconds)."""
        try:
            self.retire_adopted()
        except (StreamreplError, kafka.KafkaException) as e:
            log.warning("gateway %s: an adopted seat could not be left (%s)", self.gateway_id, e)
        if not self.threaded_look:
            self._look_for_dead({self.gateway_id, *self.adopted})
        elif self._look is None or not self._look.is_alive():
            mine = {self.gateway_id, *self.adopted}
            self._look = threading.Thread(target=self._look_for_dead, args=(mine,), name="seat-look", daemon=True)
            self._look.start()

    def _look_for_dead(self, mine: set[str]) -> None:
        try:
            members = self.members()
            if members is not None and set(members) <= mine:
                return
            self._found.put(self.dead_seats(self._gateway_reports(), members, mine))
        except (StreamreplError, kafka.KafkaException) as e:
            log.warning("gateway %s: the slot group's members could not be checked (%s)", self.gateway_id, e)

    def adopt_dead(self, reports: dict[str, dict[str, Any]], members: list[str] | None) -> list[str]:
        """Adopt the seats dead_seats finds. Returns the instance ids adopted."""
        if not self.static or self.consumer is None:
            return []
        taken = self.dead_seats(reports, members, {self.gateway_id, *self.adopted})
        for instance in taken:
            self._adopt(instance)
        return taken

    def dead_seats(self, reports: dict[str, dict[str, Any]], members: list[str] | None, mine: set[str]) -> list[str]:
        """The seats of the group's members whose gateways are dead by their status reports (`reports`: the
        cluster's gateway reports; `members`: the group's instance ids, see members(); `mine`: the seats this gateway
        holds) that this gateway is the one to adopt (each dead seat falls to one live gateway, by its id's hash, so
        that two do not fence each other in turn)."""
        # Alive while its next report (due REPORT_SECONDS after its last) is late by less than a session: a gateway
        # silent that long would have been expired by a broker that expires members. Not statustopic.LIVE_SECONDS
        # (15 s, for `cluster gateway list`), which made a takeover after a SIGKILL take 16-18 s with 6 s sessions.
        silent_ms = REPORT_SECONDS * 1000 + self.session_ms
        now_ms = time.time() * 1000
        own = reports.get(statustopic.gateway_key(self.gateway_id))
        if own is None or now_ms - own.get("updated", 0) > silent_ms:
            # This gateway's own reports are as late: its destination failed or was cut off from it, and the others'
            # reports are late for the same reason, not because they died. Adopting their seats then fenced live
            # gateways, and the adopters wrote their partitions before they saw the fence (tests/sim, seed 71).
            return []
        alive = [r for r in reports.values() if not r.get("stopped") and now_ms - r.get("updated", 0) <= silent_ms]
        live = {str(r.get("gateway")) for r in alive}
        live.add(self.gateway_id)
        held = {str(s) for r in alive for s in r.get("seats", [])}
        if members is None:
            # The broker does not list the group's members: the gateways that died holding slots.
            members = [str(r.get("gateway")) for r in reports.values() if not r.get("stopped") and r.get("slots")]
        # Members with a report that went stale or says stopped. A gateway reports before it joins, so a member
        # without one is none of streamrepl's or its report is on its way, unless it stays without one for longer
        # than a live gateway's report takes (statustopic.LIVE_SECONDS): a destination that crashes can lose every
        # report of a gateway that then died, and where dead members are never expired (noida-db) the group then
        # waited for it for good (tests/sim, seeds 1071, 1265, 1374).
        reported = {str(r.get("gateway")) for r in reports.values()}
        now = time.monotonic()
        unreported = set(members) - reported - mine
        self._unreported_since = {m: self._unreported_since.get(m, now) for m in unreported}
        lost = {m for m, since in self._unreported_since.items() if now - since > statustopic.LIVE_SECONDS}
        dead = sorted(((set(members) & reported) | lost) - live - held - mine)
        adopters = sorted(live)
        return [i for i in dead if adopters[zlib.crc32(i.encode()) % len(adopters)] == self.gateway_id]

    def _adopt(self, instance: str) -> None:
        log.warning(
            "gateway %s takes the seat of gateway %s in the slot group: it stopped reporting and the broker keeps its"
            " slots",
            self.gateway_id,
            instance,
        )
        seat = Seat(instance, None)  # type: ignore[arg-type]
        seat.usable_at = time.monotonic() + HANDOVER_SECONDS
        seat.consumer = self._seat_consumer(seat, self._adopted_client_id(instance))
        self.adopted[instance] = seat
        self.stats.seats_adopted += 1

    def retire_adopted(self) -> None:
        """Leave (LeaveGroup) the adopted seats that have their slots, so that the live gateways share them: only
        where the broker hands over cleanly (kafka.leaves_group_safely); elsewhere the seats are kept."""
        if not kafka.leaves_group_safely(self.cluster):
            return
        for instance, seat in list(self.adopted.items()):
            if seat.slots:
                log.info(
                    "gateway %s leaves the seat of gateway %s; the live gateways share its slots",
                    self.gateway_id,
                    instance,
                )
                self._leave(seat.consumer)
                self.slots -= seat.slots
                seat.slots = set()
                del self.adopted[instance]

    @property
    def seats(self) -> list[str]:
        """The instance ids of the seats this gateway adopted (reported, so that no other gateway adopts them too)."""
        return sorted(self.adopted)

    # The rebalance callbacks run inside librdkafka's poll: an exception escaping them does not reach the caller
    # intact (a gateway stopped with "SystemError: _PyErr_SetObject: exception ... is not a BaseException
    # subclass" after its destination broker crashed). So nothing escapes them; what fails is logged.
    def _on_assign(self, seat: Seat, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.stats.rebalances += 1
        seat.assigned = True
        seat.waiting_since = 0.0
        seat.slots = {tp.partition for tp in parts}
        self.slots = self._usable_slots()
        log.info("gateway %s owns %d slots", self.gateway_id, len(self.slots))
        try:
            # The slots are never read: paused, they cost the destination no fetches (an empty fetch of 64
            # partitions every few ms was most of what an idle gateway cost its destination broker).
            consumer.assign(parts)
            consumer.pause(parts)
            self._on_assigned()
        except Exception:  # noqa: BLE001 - see above
            log.exception("gateway %s: taking up the slots assigned failed", self.gateway_id)

    def _on_revoke(self, seat: Seat, _: Any, parts: list[TopicPartition]) -> None:
        self.stats.rebalances += 1
        seat.waiting_since = time.monotonic()  # until the rebalance assigns it again (_stuck)
        lost = {tp.partition for tp in parts}
        try:
            self._on_give_up(lost)
        except Exception:  # noqa: BLE001 - see above
            log.exception("gateway %s: letting the slots go failed", self.gateway_id)
        seat.slots -= lost
        self.slots -= lost
        log.info("gateway %s gave up %d slots", self.gateway_id, len(lost))

    def _leave(self, consumer: Consumer) -> None:
        if self.static:
            # librdkafka sends no LeaveGroup when a static member closes (KIP-345 lets it come back instead);
            # unsubscribing first does send it, so a planned stop still hands the slots over at once.
            # It goes out from the consumer's own thread: poll a moment, or close() cuts it off.
            consumer.unsubscribe()
            for _ in range(5):
                consumer.poll(0.1)
        consumer.close()

    def leave(self) -> None:
        """Leave the group now (LeaveGroup), with every seat."""
        for seat in self.adopted.values():
            self._leave(seat.consumer)
        self.adopted.clear()
        if self.consumer is not None:
            self._leave(self.consumer)
            self.consumer = None

    def close(self) -> None:
        """Drop every seat without leaving, its consumer closed: the group it was in is gone with the cluster's state
        (destination.py), and a consumer that knew the old slot topic must not fetch the new one by its id."""
        for seat in [*self.adopted.values(), self._own]:
            if seat.consumer is not None:
                with contextlib.suppress(Exception):
                    seat.consumer.close()
            seat.slots = set()
        self.adopted.clear()
        self.consumer = None
        self.slots = set()

    def abandon(self) -> list[Consumer]:
        """Stop taking part without leaving: the consumers are handed back, to be kept open until the process
        exits (see Gateway.shutdown for why)."""
        out = [seat.consumer for seat in self.adopted.values()]
        self.adopted.clear()
        if self.consumer is not None:
            out.append(self.consumer)
        self.consumer = None
        return out
