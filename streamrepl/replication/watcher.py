"""The plan watcher: follows the stream metadata in a thread of its own and publishes each plan it reads.

Reading the metadata (every stream record of every cluster involved, topic lists, topic creation) takes tens to
hundreds of milliseconds: it runs in a thread of its own, so that the hot loop never waits for it; the loop only
applies each new plan, which costs nothing when nothing changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .. import kafka
from ..errors import StreamreplError
from ..kafka import Consumer, KafkaException, TopicPartition
from ..paths import METADATA_TOPIC
from ..registry import Cluster
from .links import Plan
from .plan import Planner

log = logging.getLogger("streamrepl.gateway")

#: how often a problem of the plan that lasts (a source that does not answer) is logged again
PROBLEM_LOG_SECONDS = 30.0
#: how often the plan watcher passes without a change (the plan read again when it had problems, the topics listed
#: when LISTING_SECONDS passed)
REFRESH_SECONDS = 2.0
#: how often the topics are listed again (topics a plain Kafka client made are adopted, replica topics made): a net
#: for what no stream record says (streamrepl's own topics are in the metadata log, seen by the change poll). At 800
#: idle partitions the listings were 6 of 23 samples with Python running in an idle gateway (py-spy, the end watch
#: off), about 0.5 % of a core, within the noise of the runs with and without them; every 10 s made the default
#: suite's adoption test 12 s longer (tests/e2e/test_topologies.py, 14 -> 26 s): kept at the pass's period
LISTING_SECONDS = 2.0
#: how often the stream records are read again although no metadata topic's end moved (a backstop: a change is
#: seen at once from the ends; reading every stream record of every cluster each REFRESH_SECONDS was most of an
#: idle gateway's own CPU at 20 streams)
FULL_READ_SECONDS = 30.0
#: how often the plan watcher asks whether any stream record changed (a change is applied at once). It is most of
#: the time from `replica resume` to the first record (0.2 s: 0.1 s of a median 0.19 s on Tansu); one ListOffsets
#: request per cluster each time, for one partition. Every 0.05 s it was, at 800 idle partitions, about 1.1 % of a
#: core of the gateway, 1.0 % of a Tansu source and 0.6 % of the destination (against every 0.5 s; BENCHMARKS.md,
#: idle cost at 800 partitions): 0.1 s halves that for about 25 ms more from a resume to its first record.
CHANGE_POLL_SECONDS = 0.1
#: how long asking for the end of a metadata topic may take
END_CHECK_TIMEOUT = 1.0  # seconds


class PlanWatcher:
    """`published` is the last plan read, with the destination's topics at that moment (None: none yet);
    `on_publish()` is called (from the watcher's thread) each time one is published: a loop that waits long while
    idle (gateway.IDLE_SLEEP_ALL_QUIET) must apply a new plan (`replica resume`) at once."""

    def __init__(
        self,
        planner: Planner,
        new_consumer: Callable[[Cluster], Consumer] = kafka.consumer,
        on_publish: Callable[[], None] = lambda: None,
    ):
        self.on_publish = on_publish
        self.planner = planner
        self._published: tuple[Plan, set[str]] | None = None
        self.stopping = False
        self._new_consumer = new_consumer
        self._plan_lock = threading.Lock()
        self._refresh_now = threading.Event()
        #: cluster name -> the watcher's consumer that asks for the end of its metadata topic
        self._meta_watch: dict[str, Consumer] = {}
        #: the ends the last change poll saw moved (None: the last wait ended otherwise), taken before the read
        #: they bring: the ends that read starts from, not asked for again
        self._ends_at_change: dict[str, int] | None = None
        self._thread: threading.Thread | None = None

    @property
    def published(self) -> tuple[Plan, set[str]] | None:
        return self._published

    @published.setter
    def published(self, value: tuple[Plan, set[str]] | None) -> None:
        self._published = value
        self.on_publish()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="plan-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread at its next wait (not from a signal handler: Event.set() takes a lock)."""
        self.stopping = True
        self._refresh_now.set()

    def refresh(self) -> None:
        """One full pass, in the caller's thread, for a caller that drives the watcher itself instead of start() (the
        simulated cluster, docs/simulation.md): read the plan, adopt new source topics, make the missing replica
        topics, publish. What goes wrong is logged, as in the thread."""
        try:
            plan = self.planner.discover()
            if self.planner.adopt_source_topics(plan):
                plan = self.planner.discover()
            present = self.planner.ensure_topics(plan)
            with self._plan_lock:
                self.published = (plan, present)
        except StreamreplError as e:
            log.warning("cannot read replication metadata: %s", e)

    def _watch(self) -> None:
        logged: list[str] = []
        next_problem_log = 0.0
        plan: Plan | None = None
        changed, next_full_read = True, 0.0
        #: the metadata topics' ends taken just before the stream records were last read: a record written while
        #: they were read moves an end past these, and is read at the next change poll
        read_ends: dict[str, int] = {}
        #: the destination's topics as last listed, and until when a pass brought by a change may use that listing
        listed: set[str] | None = None
        listed_until = 0.0
        while not self.stopping:
            #: a cluster the last read found first has no end from before it was read (see below)
            unseen = False
            try:
                if plan is None or changed or plan.problems or time.monotonic() >= next_full_read:
                    next_full_read = time.monotonic() + FULL_READ_SECONDS
                    # Not asked for again after a change poll saw one: a round trip to each cluster between a
                    # `replica resume` and its first record (50 ms through a 50 ms line, issue 28). Any record
                    # written since those ends were taken lies past them, and brings another read.
                    seen, self._ends_at_change = self._ends_at_change, None
                    if plan is None:
                        read_ends = {}
                    elif seen is not None and set(seen) == {c.name for c in plan.clusters}:
                        read_ends = seen
                    else:
                        read_ends = self._metadata_ends(plan.clusters)
                    # Each read may stop at the end taken for it: asking for the end again, or fetching until a
                    # fetch comes back empty to see end-of-partition, each cost a round trip (issue 28).
                    ends = {name: end for name, end in read_ends.items() if end >= 0}
                    plan = self.planner.discover(plan.clusters if plan is not None else (), ends)
                    # Its end taken after the read (at the wait) would hide a record written there meanwhile (a
                    # `replica resume` into a source cluster while the topics were listed): read once more, with
                    # every end taken first. Only when the clusters of the plan change.
                    unseen = any(c.name not in read_ends for c in plan.clusters)
                # A pass brought by a change lists no topics when it need not: the listings took 50 ms each on Tansu
                # (even with a kept client), between a `replica resume` and its first record. Topics plain Kafka
                # clients made are adopted by the periodic passes (they write no stream record: a change says nothing
                # about them), and the destination is listed again when the plan needs a topic the last listing
                # lacks (a new topic, a new link: it is made first).
                periodic = listed is None or time.monotonic() >= listed_until
                if periodic and self.planner.adopt_source_topics(plan):
                    plan = self.planner.discover()
                if plan.problems != logged or (plan.problems and time.monotonic() >= next_problem_log):
                    # Said again while it lasts: a gateway that could not read a source logged it once, then nothing
                    # for minutes while the link's partitions stalled (issue 38).
                    for p in plan.problems:
                        log.warning("%s; not replicated until it is mended", p)
                    logged = plan.problems
                    next_problem_log = time.monotonic() + PROBLEM_LOG_SECONDS
                if not periodic and listed is not None and self.planner.covers(plan, listed):
                    present = listed
                else:
                    present = listed = self.planner.ensure_topics(plan)
                    listed_until = time.monotonic() + LISTING_SECONDS
                # Published every pass, changed or not: the loop's plan application is also where a newly acquired
                # feed is first compared with its source's end (watermarks.recheck_lagging_feeds), which a feed
                # needs before it may go quiet (publishing only changes left 800 partitions fetched: Tansu at 98 %).
                with self._plan_lock:
                    self.published = (plan, present)
            except StreamreplError as e:
                log.warning("cannot read replication metadata: %s", e)
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad read
                log.exception("reading replication metadata failed")
            if unseen:
                changed = True
            else:
                changed = self._wait_for_metadata_change(plan.clusters if plan is not None else [], read_ends)
            self._refresh_now.clear()
        for c in self._meta_watch.values():
            c.close()
        self.planner.close()

    def _wait_for_metadata_change(self, clusters: list[Cluster], read_ends: dict[str, int] | None = None) -> bool:
        """Wait until REFRESH_SECONDS pass (False), or sooner when a stream record was written in one of the
        clusters the plan was read from (`replica resume`, `topic create`...; True): asking for the end of each
        metadata topic every CHANGE_POLL_SECONDS costs one small request per cluster, a full read costs far more.
        A cluster whose end cannot be read counts as changed: what it holds is read again when it answers."""
        ends = self._metadata_ends([c for c in clusters if c.name not in (read_ends or {})])
        ends.update({c.name: (read_ends or {})[c.name] for c in clusters if c.name in (read_ends or {})})
        if any(end < 0 for end in ends.values()):
            self._refresh_now.wait(REFRESH_SECONDS)
            return True
        deadline = time.monotonic() + REFRESH_SECONDS
        while not self.stopping and time.monotonic() < deadline:
            if self._refresh_now.wait(CHANGE_POLL_SECONDS):
                return True
            now = self._metadata_ends(clusters)
            if any(now.get(name, -1) != end for name, end in ends.items()):
                self._ends_at_change = now if all(end >= 0 for end in now.values()) else None
                return True
        return False

    def _metadata_ends(self, clusters: list[Cluster]) -> dict[str, int]:
        """The end of each cluster's metadata topic (-1 when it cannot be read now)."""
        ends: dict[str, int] = {}
        for cluster in clusters:
            c = self._meta_watch.get(cluster.name)
            if c is None:
                c = self._meta_watch[cluster.name] = self._new_consumer(cluster)
            try:
                got = c.offsets_for_times([TopicPartition(METADATA_TOPIC, 0, kafka.LATEST)], timeout=END_CHECK_TIMEOUT)
                ends[cluster.name] = got[0].offset if got and got[0].error is None else -1
            except KafkaException:
                ends[cluster.name] = -1
            if ends[cluster.name] < 0:
                # A new client asks next time. A kept one that found no metadata topic (a gateway started before the
                # cluster's first stream) went on answering "unknown partition" after the topic was made: every
                # pass then waited REFRESH_SECONDS and read everything, and `replica resume` took up to 2.4 s to
                # its first record (issue 28). At most one new client per REFRESH_SECONDS, while it fails.
                del self._meta_watch[cluster.name]
                c.close()
        return ends
