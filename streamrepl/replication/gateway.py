"""The gateway: a worker on the destination side that applies source records to replicas.

Gateways of one destination cluster share the work through Kafka's own consumer-group
protocol (membership.py): each destination partition hashes to one slot of the group, so
exactly one live gateway owns it. When a gateway dies or stops (SIGTERM drains its
writes, then it leaves like a crashed one: see shutdown()) its slots move to the others
once its session expires (6 s); when all are down, the sources keep the data and the
first gateway back carries on from each replica partition's real end.

The Gateway composes the pieces: the plan watcher (a thread that follows the stream
metadata), the slot group, the unit table (the replica partitions it applies), the source
feeds, the replica guard, the write session, the mover (the hot loop's work), the status
reports, the cursor sync and the metrics endpoint.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Callable

from .. import discovery, kafka, settings
from ..errors import PermissionDenied, StreamreplError
from ..kafka import Consumer, Producer
from ..registry import Cluster, Registry
from ..settings import GatewaySettings
from .allowlist import AllowList
from .cursor_sync import CursorSyncProcess, owned_links
from .destination import DestinationWatch, repair
from .feeds import source_consumer
from .links import Link, Plan, Unit
from .membership import SlotGroup, slot_of
from .metrics import MetricsServer, serve
from .mover import Mover
from .pauses import PauseWatch
from .plan import Planner
from .quiet import EndWatch, QuietFeeds, end_watch
from .registrywatch import RegistryWatch
from .reports import REPORT_SECONDS, StatusReports
from .stalls import StallWatch
from .stats import GatewayStats
from .watcher import PlanWatcher

log = logging.getLogger("streamrepl.gateway")

#: How long the loop sleeps when no source had records: briefly while records flow (the gaps between batches),
#: longer once every source was quiet for QUIET_AFTER seconds, so that an idle gateway costs next to nothing and
#: a record that wakes an idle partition waits at most IDLE_SLEEP_QUIET more (see BENCHMARKS.md, scale).
IDLE_SLEEP = 0.002
IDLE_SLEEP_QUIET = 0.01
QUIET_AFTER = 1.0
#: how long an idle loop sleeps when no source partition is fetched at all (every feed quiet): a quiet feed's end
#: that moves, a new plan (`replica resume`) and stop() wake it at once (QuietFeeds.wait_for_news); what is left to
#: it meanwhile (rebalances of the slot group, the sweeps, the reports) waits this long at most. At 800 partitions
#: the loop's 100 passes a second were half of an idle gateway's own CPU, 20 a second still a third of it.
IDLE_SLEEP_ALL_QUIET = 0.25


class Gateway:
    """`tuning` defaults to the environment's (settings.gateway()); the client factories default to real ones
    (`new_consumer` makes the replica reader, the group consumer and the metadata watch; `new_end_watch` the
    watches of quiet feeds' ends, quiet.py: by default only when the source consumers are the real ones)."""

    def __init__(
        self,
        reg: Registry,
        cluster: str,
        gateway_id: str | None = None,
        tuning: GatewaySettings | None = None,
        new_consumer: Callable[..., Consumer] = kafka.consumer,
        new_producer: Callable[..., Producer] = kafka.producer,
        new_source_consumer: Callable[[Cluster], Consumer] = source_consumer,
        new_end_watch: Callable[[Cluster], EndWatch] | None = None,
        parent_id: str | None = None,
        restarts: int = 0,
        last_exit: str = "",
        discover: bool = False,
    ):
        self.reg = reg
        self.cluster = reg.get(cluster)
        self.id = gateway_id or f"{socket.gethostname()}-{os.getpid()}"
        #: the `gateway start -workers` supervisor this gateway is a worker of (None: started on its own)
        self.parent_id = parent_id
        self.tuning = tuning or settings.gateway()
        #: set to stop the loop; a plain attribute, so that a signal handler may set it (see process.py)
        self.stopping = False
        #: the plan applied last (read by the cursor sync, the reports and the metrics)
        self.plan: Plan | None = None
        #: `restarts`, `last_exit`: how many processes of this gateway its supervisor started before this one, and how
        #: the last of them ended (workers.exit_text)
        self.stats = GatewayStats(self.id, restarts=restarts)
        self._new_producer = new_producer
        self._new_consumer = new_consumer
        #: spare source consumers are kept (SourceFeeds.keep_spares) only when they are real ones
        self._keep_spares = new_source_consumer is source_consumer
        if new_source_consumer is source_consumer:
            # Real source consumers report a lost connection, so that their feeds are checked again (see
            # UnitTable.recheck_lost_sources); the end watches report it with their news (SourceFeeds.quiet_news).
            new_source_consumer = functools.partial(source_consumer, on_lost=self._source_lost)
            if new_end_watch is None:
                new_end_watch = end_watch
        #: the feeds that brought no records for a while, their ends watched (quiet.py); None: every feed stays put
        self.quiet = QuietFeeds(new_end_watch) if new_end_watch is not None else None
        self.mover = Mover.assemble(
            new_consumer(self.cluster),
            self.stats,
            new_source_consumer,
            self._producer,
            self.tuning.throttle_rate,
            on_fail=self._report_failure,
            on_clash=self._report_clash,
            quiet=self.quiet,
            gateway_id=self.id,
            cluster_name=cluster,
            # A batch may wait a fifth of the message timeout before the partition is handed no more: the rest is
            # left for the produce request itself, whose own timeout is what its first record has left.
            queue_age=self.tuning.message_timeout_ms / 1000 / 5,
        )
        #: the replica partitions this gateway applies (units.py), their source feeds (feeds.py) and the writes
        self.table, self.feeds, self.session = self.mover.table, self.mover.feeds, self.mover.session
        self.group = SlotGroup(
            self.cluster, self.id, self.tuning.session_ms, self.stats, self._plan_again, self._give_up, new_consumer
        )
        self.watcher = PlanWatcher(
            Planner(reg, self.cluster), new_consumer, self.quiet.nudge if self.quiet is not None else lambda: None
        )
        self.reports = StatusReports(
            self.id,
            self.table,
            self.stats,
            lambda: self.group.slots,
            lambda: self.plan,
            lambda: self.session.producer,
            parent_id=parent_id,
            seats=lambda: self.group.seats,
            restarts=restarts,
            last_exit=last_exit,
            caught_up=self.feeds.caught_up,
        )
        #: the gateway list (`cluster gateway set`): one taken off it drains and leaves
        self.allow_list = AllowList(self.cluster, self.id, socket.gethostname(), new_consumer, parent_id=parent_id)
        #: why the gateway stopped serving, when the gateway list stopped it ("" otherwise)
        self.refused = ""
        self.cursor_sync: CursorSyncProcess | None = None
        #: a freeze longer than a third of the session throws the writes away (pauses.py)
        self.pause_watch = PauseWatch(self.tuning.session_ms / 3000)
        #: the destination's internal topics gone or misshapen: it came back empty, and the gateway starts over
        self.destination_watch = DestinationWatch(self.cluster)
        #: a changed registry entry of a cluster in use stops the gateway, to be started again (registrywatch.py)
        self.registry_watch = RegistryWatch(reg)
        self.metrics: MetricsServer | None = None
        #: counts the cluster's partitions that no live gateway holds, for the metrics (only while they are served)
        self.stalls: StallWatch | None = None
        #: leave the group on stop (LeaveGroup); None: as the broker allows (kafka.leaves_group_safely, decided at the
        #: stop); False: run_foreground() exits the process instead (see shutdown())
        self.leave_group: bool | None = True
        #: find out what the destination's brokers do before joining (discovery.py); the gateways of the unit
        #: tests, on fake clients, do not
        self.discover = discover
        #: the group consumer kept open until the process exits, when leave_group is False (see shutdown())
        self.left_open: list[Consumer] = []
        #: apply the published plan again even if it did not change (slots assigned, writes restarted)
        self._replan = True
        #: the loop's state between passes (step): the plan applied last, when to report and to look at the
        #: destination again, what was last reported held, when records last moved
        self._plan_applied: tuple[Plan, set[str]] | None = None
        self._next_report = self._next_gate_check = 0.0
        self._reported_holding = (0, 0)
        self._last_busy = 0.0
        #: (plan, slots, the plan's units in those slots): see apply_plan
        self._wanted: tuple[Plan | None, frozenset[int], dict[Unit, list[tuple[Link, str]]]] = (None, frozenset(), {})
        self.stats.partitions = lambda: len(self.table.units)
        self.stats.slots = lambda: len(self.group.slots)
        self.stats.partitions_in_error = lambda: len(self.table.errored)
        self.stats.pending = self.table.pending
        self.stats.links = lambda: list(self.plan.links) if self.plan is not None else []
        self.stats.cursor_commits = lambda: self.cursor_sync.committed if self.cursor_sync else 0
        self.stats.cursor_errors = lambda: self.cursor_sync.errors if self.cursor_sync else 0

    @property
    def slots(self) -> set[int]:
        return self.group.slots

    def _producer(self) -> Producer:
        return self._new_producer(
            self.cluster,
            **{
                "linger.ms": self.tuning.linger_ms,
                "batch.num.messages": 10000,
                # A queue of a second or two of records: what waits longer than the message timeout expires.
                "queue.buffering.max.messages": 200000,
                "queue.buffering.max.kbytes": 65536,
                # How long a record may wait in the producer before it expires instead of being sent. It must be
                # shorter than the session: a gateway frozen (a VM pause, SIGSTOP) past its session while records
                # were queued would otherwise send them when it resumes, after the gateway that took its
                # partitions over wrote there (doubled records, and the source's records at those offsets lost).
                # Expired, they are never sent (librdkafka drops them before sending on resume, and the epoch
                # bump that follows fences the producer), and the gateway starts its partitions again from their
                # real ends with a new producer (WriteSession.restart).
                "message.timeout.ms": self.tuning.message_timeout_ms,
                "client.id": f"streamrepl-gateway-{self.id}",
                "error_cb": self._producer_error,
            },
        )

    def _producer_error(self, err: kafka.KafkaError) -> None:
        # Runs inside librdkafka (the producer's poll): records the fact, nothing that could raise.
        if err.code() in kafka.TRANSPORT:
            self.session.destination_lost(err.str())

    # -- the pieces' callbacks ----------------------------------------------------------------
    def _plan_again(self) -> None:
        self._replan = True

    def _give_up(self, lost: set[int]) -> None:
        # Everything queued for the partitions we give up must land before another gateway starts on them.
        self.session.flush(30)
        for unit in [u for u in self.table.units if slot_of(u) in lost]:
            self.table.drop(unit)

    def _source_lost(self, cluster: str) -> None:
        self.feeds.source_lost(cluster)

    def _report_failure(self, unit: Unit, error: str) -> None:
        self.reports.unit(unit, "error", error)

    def _report_clash(self, unit: Unit, link: Link, error: str) -> None:
        self.reports.unit(unit, "error", error, sources=[link.src])

    def apply_plan(self, plan: Plan, present: set[str]) -> None:
        self.plan = plan
        # The plan is published again every few seconds unchanged: which of its units fall in this gateway's slots is
        # worked out once for each plan and set of slots, not on every publication.
        slots = frozenset(self.group.slots)
        if self._wanted[0] is not plan or self._wanted[1] != slots:
            self._wanted = (plan, slots, {u: f for u, f in plan.units.items() if slot_of(u) in slots})
        wanted = self._wanted[2]
        self.table.follow(plan, present, wanted, self.session.ready_to_acquire(), self.session.producer)
        if self._keep_spares:  # a `replica resume` then needs no new connection to its source (issue 28)
            self.feeds.keep_spares(c for c in plan.clusters if c.name != self.cluster.name)

    def serve_metrics(self, addr: str, port: int) -> int:
        """Serve Prometheus metrics (see metrics.py), with the count of the cluster's partitions that no live gateway
        holds (stalls.py); returns the port. A port in use is a clear error."""
        stalls = StallWatch(self.cluster, lambda: self.watcher.published)
        self.metrics = serve(self.stats, addr, port, stalls)
        self.stalls = stalls.start()
        return self.metrics.port

    # -- main loop ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """What a signal handler may call: it only sets `stopping` (the loop ends at its next pass; stop() takes
        locks, which a handler that interrupted their holder would wait for forever)."""
        self.stopping = True

    def stop(self) -> None:
        """Stop from another thread (a signal handler calls request_stop)."""
        self.stopping = True
        self.watcher.stop()
        self.allow_list.stop()
        if self.quiet is not None:
            self.quiet.nudge()

    def _links(self) -> list[Link]:
        return self.plan.links if self.plan is not None else []

    def _wait_for_destination(self) -> None:
        """A gateway is a long-running worker: a destination that does not answer yet is waited for
        (with backoff), not a reason to exit."""
        delay = 0.5
        while not self.stopping:
            try:
                repair(self.cluster)  # a misshapen one is said (destination.repair)
                return
            except StreamreplError as e:
                log.warning("%s; retrying in %.0f s", e, delay)
                until = time.monotonic() + delay
                while not self.stopping and time.monotonic() < until:
                    time.sleep(0.1)
                delay = min(delay * 2, 10.0)

    def run(self, max_seconds: float | None = None) -> None:
        if not self.begin():
            return
        started = time.monotonic()
        try:
            while not self.stopping:
                if max_seconds is not None and time.monotonic() - started > max_seconds:
                    break
                wait = self.step()
                if wait is None:
                    break
                if wait == "news":
                    assert self.quiet is not None
                    self.quiet.wait_for_news(IDLE_SLEEP_ALL_QUIET)
                elif isinstance(wait, float) and wait > 0:
                    time.sleep(wait)
        finally:
            self.shutdown()

    def begin(self, threads: bool = True) -> bool:
        """Everything before the loop: wait for the destination, check the gateway list, report, join the slot group,
        start the helpers. False: stopped meanwhile. `threads=False` (the simulated cluster, docs/simulation.md)
        starts no thread and no cursor sync: the caller drives the plan watcher (PlanWatcher.refresh) and step()."""
        self._wait_for_destination()
        if self.stopping:
            return False
        refusal = self.allow_list.check_now()
        if refusal:  # before joining the group (or probing its brokers): a gateway not on the list never takes a slot
            raise PermissionDenied(refusal)
        if self.discover and discovery.for_gateway(self.cluster) and self.leave_group:
            self.leave_group = None  # decided at the stop, once the LeaveGroup probe had its time
        if threads:
            self.allow_list.start()
        # Reported before joining: a member of the slot group without a fresh report could be taken for a dead
        # gateway's and its seat adopted (membership.SlotGroup.adopt_dead). Delivered, not only queued: a gateway
        # started again after a fence joined before its report was out, and the other gateway, which had adopted its
        # seat for its late reports, adopted it again at once (tests/sim, seed 8745: fenced twice after the faults).
        self.reports.all(wait=REPORT_SECONDS)
        self.group.join()
        if threads:
            # Committed cursors to the replicas: a thread feeding a worker process (see cursor_sync.py for why).
            self.cursor_sync = CursorSyncProcess(
                self.cluster, lambda: owned_links(self.plan, self.group.slots), self.tuning.cursor_sync_seconds
            ).start()
            self.watcher.start()
            self.pause_watch.start()
            self.destination_watch.start()
        self._replan = True
        self._plan_applied = None
        self._next_report = self._next_gate_check = 0.0
        self._reported_holding = (0, 0)
        self._last_busy = time.monotonic()
        log.info("gateway %s started for cluster %s", self.id, self.cluster.name)
        return True

    def step(self) -> float | str | None:
        """One pass of the loop: how long to sleep then (0: go on at once), "news" (wait for a quiet feed's news), or
        None when the gateway must stop (its gateway list refused it)."""
        now = time.monotonic()
        if self.allow_list.refusal:
            self.refused = self.allow_list.refusal
            return None
        self.registry_watch.check([self.cluster.name, *(link.src_cluster.name for link in self._links())])
        frozen = self.pause_watch.take()
        if frozen and self.table.units:
            self.session.restart(
                f"this gateway stood still for {frozen:.1f} s (frozen, or starved of CPU), long enough for its"
                " slots to have moved to another gateway"
            )
        emptied = self.destination_watch.take()
        if emptied:
            self.start_over(emptied)
            now = time.monotonic()
        self.group.poll()  # drives heartbeats and rebalances
        if self.session.restart_pending and now >= self._next_gate_check:
            self._next_gate_check = now + 0.5
            self._replan = True  # take the partitions up again once the destination is back
        published = self.watcher.published
        if published is not None and (published is not self._plan_applied or self._replan):
            self._plan_applied, self._replan = published, False
            self.apply_plan(*published)
        busy = self.mover.move_once()
        # Report at once when what this gateway holds changed: `cluster gateway list` showed 0 slots for up
        # to a report period after a gateway had taken its partitions up.
        holding = (len(self.group.slots), len(self.table.units))
        if now >= self._next_report or holding != self._reported_holding:
            self._next_report, self._reported_holding = now + REPORT_SECONDS, holding
            self.reports.all()
        if busy:
            self._last_busy = now
            return 0.0
        if now - self._last_busy < QUIET_AFTER:
            return IDLE_SLEEP
        if self.quiet is not None and self.table.all_quiet():
            return "news"
        return IDLE_SLEEP_QUIET

    def start_over(self, found: str) -> None:
        """The destination came back without the gateway's internal topics (destination.py): whatever this gateway
        held there is gone with them. Its writes are thrown away, its slots dropped (the group went with the cluster's
        state), the internal topics made again, the gateway list followed afresh, and the slots joined again; the plan
        is applied again as the metadata now says (a replica gone is out of it until it is set up again)."""
        log.warning(
            "gateway %s: cluster %s came back without its state (%s): restarted on memory storage, wiped or rebuilt?"
            " The gateway starts over on it: internal topics made again, slots joined again, the plan read again;"
            " a replica it lost must be set up again (`stream replica list` on its source says so)",
            self.id,
            self.cluster.name,
            found,
        )
        self.stats.starts_over += 1
        self.session.restart(f"cluster {self.cluster.name} came back empty")
        self.group.close()
        self._wait_for_destination()
        if self.stopping:
            return
        self.allow_list.stop()
        self.allow_list = AllowList(
            self.cluster, self.id, socket.gethostname(), self._new_consumer, parent_id=self.parent_id
        )
        self.allow_list.start()
        self.reports.all(wait=REPORT_SECONDS)
        self.group.join()
        self._replan = True
        self._plan_applied = None
        self._reported_holding = (-1, -1)

    def shutdown(self) -> None:
        self.destination_watch.stop()
        self.pause_watch.stop()
        self.watcher.stop()
        self.allow_list.stop()
        if self.cursor_sync is not None:
            self.cursor_sync.stop(timeout=5)
        log.info("gateway %s stopping", self.id)
        self.reports.stopped()
        left = self.session.flush(30)
        if left:
            log.error("%d records were not acknowledged before shutdown", left)
        leave = self.leave_group if self.leave_group is not None else kafka.leaves_group_safely(self.cluster)
        if leave:
            self.group.leave()
        else:
            # No group.close(): it would send LeaveGroup, and a LeaveGroup that reaches Tansu while the
            # group is rebalancing leaves the group with a departed leader for good (every gateway stalls).
            # Everything is drained, so leaving like a crashed gateway is safe: the slots move when the
            # session expires. run_foreground() then exits without destroying the consumer (which would
            # leave); a consumer left open in a process that goes on would keep its slots.
            self.table.drop_all()
            self.left_open = self.group.abandon()
        self.table.close()
        if self.stalls is not None:
            self.stalls.stop()
            self.stalls = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
