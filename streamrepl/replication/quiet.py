"""Quiet feeds: source partitions with no records for a while are not fetched at all; their ends are watched.

A broker serves every fetch of a consumer for all its partitions; what an idle partition costs grows with how often
it is fetched, and on Tansu a waiting fetch keeps re-reading every partition it holds (800 idle partitions: 33 % of
a core at a 100 ms wait; noida-db answers empty fetches at once, about 1,000 a second). A feed quiet for
QUIET_SECONDS leaves its link's consumer; an EndWatch per source cluster asks for the ends of all its quiet
partitions in a few ListOffsets requests every kafka.quiet_end_check_ms (a tenth of the broker's cost of the
fetches, measured with bench/probes/idle_fetch_probe.py: BENCHMARKS.md). When a quiet partition's end passes where its
writer stands, the feed goes back to its link's consumer at the writer's next offset: nothing skipped or read twice.

The end asked for is the consumer's (read_committed: the last stable offset where the broker knows it). A wake that
finds nothing to apply (an end moved by a transaction marker, an aborted transaction, or a broker that reports the
end ignoring the isolation level) does not wake the feed again for the same end: the next quiet spell waits for the
end to pass the one it woke for. Tansu's end can be low (the last batch's base offset + 1, kafka.watermark_is_exact)
but never below a new batch's first offset, so a record past the writer still moves it past the writer.

Only a unit fed by one link, not throttled, with every delivery acknowledged, goes quiet: several feeds into one
partition and throttled links keep their consumer (their pause/seek state lives there).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import kafka, settings
from ..kafka import Consumer, KafkaException, TopicPartition
from ..registry import Cluster

log = logging.getLogger("streamrepl.gateway")

#: how long a feed must have brought no record before it stops being fetched
QUIET_SECONDS = 5.0
#: partitions per ListOffsets request: librdkafka matches each answer to its request by a linear search, so one
#: request for 800 partitions cost the client 3.0 ms of CPU, four of 200 1.4 ms, 16 of 50 1.7 ms (BENCHMARKS.md;
#: at 2,000 partitions requests of 100 cost the client 3.6 ms a round against 4.2, but the broker more requests)
END_CHECK_CHUNK = 200
END_CHECK_TIMEOUT = 2.0


def reports_lost_connection(cluster: Cluster, on_lost: Callable[[str], None] | None) -> dict[str, Any]:
    """The consumer setting that calls `on_lost(cluster name)` when the consumer lost its connection to a broker of
    `cluster` (from within its consume or poll), so that the feeds it reads are compared with their replicas again."""
    if on_lost is None:
        return {}
    name = cluster.name

    def error_cb(err: kafka.KafkaError) -> None:
        # Runs inside librdkafka: records the fact, nothing that could raise.
        if err.code() in kafka.TRANSPORT:
            on_lost(name)

    return {"error_cb": error_cb}


class EndWatch:
    """Asks a source cluster for the ends of the partitions in `watch()`, every `period` seconds from a thread of its
    own (a request must not stall the loop, nor a cluster that does not answer). The loop takes each round's answer
    with `take()`: the ends that changed since the round before (every one when the partitions asked for changed),
    and whether the connection to the cluster was lost meanwhile. `new_client(on_lost)` makes the client that asks,
    a consumer (its isolation level is the feeds'); `start=False` leaves the rounds to the caller (`round()`)."""

    def __init__(self, new_client: Callable[[Callable[[str], None]], Consumer], period: float, start: bool = True):
        self._lost = False
        #: called (from the watch's thread) when news were published
        self.on_news: Callable[[], None] = lambda: None
        self.client = new_client(self._on_lost)
        self.period = period
        self._ask: list[list[TopicPartition]] = []
        self._asked: list[list[TopicPartition]] | None = None
        self._last: list[int] = []
        #: the last round's news, until the loop takes it: (changed ends, lost)
        self._news: tuple[dict[tuple[str, int], int], bool] | None = None
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: how long the last round took (seconds): longer than the period, the rounds overrun it (logged)
        self.round_seconds = 0.0
        self._overrun_logged = 0.0
        if start:
            self._thread = threading.Thread(target=self._run, name="streamrepl-endwatch", daemon=True)
            self._thread.start()

    def _on_lost(self, cluster: str) -> None:
        self._lost = True

    def watch(self, keys: list[tuple[str, int]]) -> None:
        """From the loop: the partitions to watch from the next round on."""
        tps = [TopicPartition(t, p, kafka.LATEST) for t, p in sorted(keys)]
        self._ask = [tps[i : i + END_CHECK_CHUNK] for i in range(0, len(tps), END_CHECK_CHUNK)]
        if tps:
            self._wanted.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wanted.clear()  # before looking: partitions given meanwhile set it again
            if not self._ask:
                self._wanted.wait(1.0)
                continue
            began = time.monotonic()
            try:
                self.round()
            except Exception as e:  # noqa: BLE001 - the thread must go on; the next round asks again
                log.warning("cannot ask for the ends of quiet partitions: %s", e)
            self._stop.wait(max(0.0, self.period - (time.monotonic() - began)))

    def round(self) -> None:
        """One round: ask for every end, then publish what changed."""
        began = time.monotonic()
        ask = self._ask
        ends: list[int] = []
        lost = False
        try:
            for chunk in ask:
                if self._stop.is_set():
                    return  # closing: the client must not be in use when it is closed
                ends += self._ends_of(chunk)
        except KafkaException as e:
            lost = kafka.is_transport(e)
            ends = []
        # The loss of a connection is reported from the client's queue, served here: after the answers, so that an
        # answer from a broker that came back is published with the news of its loss (never before it).
        self.client.poll(0)
        lost, self._lost = lost or self._lost, False
        changed: dict[tuple[str, int], int] = {}
        if ends and not lost:
            if ask is not self._asked:
                tps = [tp for chunk in ask for tp in chunk]
                changed = {(tp.topic, tp.partition): end for tp, end in zip(tps, ends, strict=True)}
            elif ends != self._last:  # one comparison in C: an idle round builds nothing more
                tps = [tp for chunk in ask for tp in chunk]
                changed = {
                    (tp.topic, tp.partition): end
                    for tp, end, was in zip(tps, ends, self._last, strict=True)
                    if end != was
                }
            self._asked, self._last = ask, ends
        else:
            self._asked = None  # everything is news again after a failed round
        self.round_seconds = took = time.monotonic() - began
        if took > self.period and began - self._overrun_logged > 60:
            # The wake of a quiet partition grows with the round. Its requests one after another were measured at
            # 10-13 ms a round for 2,000 partitions on Tansu; four at once were no faster and cost the client more.
            self._overrun_logged = began
            n = sum(len(chunk) for chunk in ask)
            log.warning(
                "asking for %d ends took %.0f ms, longer than the %.0f ms period", n, 1000 * took, 1000 * self.period
            )
        if changed or lost:
            with self._lock:
                old = self._news
                if old is not None:
                    changed = {**old[0], **changed}
                    lost = lost or old[1]
                self._news = (changed, lost)
            self.on_news()

    def _ends_of(self, chunk: list[TopicPartition]) -> list[int]:
        try:
            return [tp.offset for tp in self.client.offsets_for_times(chunk, timeout=END_CHECK_TIMEOUT)]
        except KafkaException as e:
            if kafka.is_transport(e):
                raise
        # A topic the broker does not know any more (deleted under its quiet feed) fails the whole request on some
        # brokers (noida-db), and the other partitions asked with it never woke: ask topic by topic. The ends of a
        # topic that fails alone are unknown (-1: no partition wakes for it; its feed learns of the deletion itself).
        ends: list[int] = []
        for _, group in itertools.groupby(chunk, key=lambda tp: tp.topic):
            tps = list(group)
            try:
                ends += [tp.offset for tp in self.client.offsets_for_times(tps, timeout=END_CHECK_TIMEOUT)]
            except KafkaException as e:
                if kafka.is_transport(e):
                    raise
                ends += [-1] * len(tps)
        return ends

    def take(self) -> tuple[dict[tuple[str, int], int], bool] | None:
        """The news since the last take: (ends that changed, whether the connection was lost); None: nothing new."""
        if self._news is None:
            return None
        with self._lock:
            news, self._news = self._news, None
        return news

    def close(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(END_CHECK_TIMEOUT + 1)
            if self._thread.is_alive():
                return  # still in a request (a hung broker): closing its client under it could crash the process
        self.client.close()


def end_watch(cluster: Cluster) -> EndWatch:
    """The watch of a source cluster's quiet partitions, with a client that reports a lost connection like the feeds'
    consumers (feeds.source_consumer): a quiet feed must not wake on records that a restarted broker took at
    offsets the replica already holds."""
    return EndWatch(
        lambda on_lost: kafka.consumer(cluster, **reports_lost_connection(cluster, on_lost)),
        settings.QUIET_END_CHECK_MS.read(default=kafka.quiet_end_check_ms(cluster)) / 1000,
    )


class QuietFeeds:
    """The quiet feeds of one gateway ((link, topic, partition) -> where their end must pass to wake them) and the
    EndWatch of each source cluster (`new_watch(cluster)`)."""

    def __init__(self, new_watch: Callable[[Cluster], EndWatch] = end_watch):
        self.watches: dict[str, EndWatch] = {}
        #: (link, topic, partition) -> (source cluster name, the end that wakes the feed when passed)
        self.held: dict[tuple[str, str, int], tuple[str, int]] = {}
        #: link name -> how many of its feeds are quiet
        self.count: dict[str, int] = {}
        #: (source cluster, topic, partition) -> the links whose quiet feeds read it
        self._readers: dict[tuple[str, str, int], set[str]] = {}
        #: (link, topic, partition) -> the end a wake was for (see the module doc: a wake that found nothing)
        self._woken_for: dict[tuple[str, str, int], int] = {}
        #: feeds started quiet whose end no answer has told yet (see hold)
        self._unseen: set[tuple[str, str, int]] = set()
        #: source clusters whose watched partitions changed since the watch was told
        self._dirty: set[str] = set()
        self._new_watch = new_watch
        self._news_ready = threading.Event()

    def holds(self, name: str, tp: TopicPartition) -> bool:
        return (name, tp.topic, tp.partition) in self.held

    def quieten(self, name: str, cluster: Cluster, tp: TopicPartition, busy: Consumer, offset: int) -> None:
        """Stop fetching a feed (its link's consumer lets it go); it wakes when its end passes `offset` (the writer's
        next offset), or the end its last wake was for if its consumer read up to that end (a wake that found nothing
        to apply). One that did not (many feeds woken at once share a consumer that may not come to some of them
        within a quiet spell: 64 partitions across a 100 ms round trip, bench/wan.py) has records left below that
        end: it wakes at the next answer."""
        key = (name, tp.topic, tp.partition)
        woken_for = self._woken_for.get(key)
        if woken_for is not None:
            # librdkafka's position passes transaction markers; OFFSET_INVALID (-1001): nothing read since the wake
            if busy.position([TopicPartition(tp.topic, tp.partition)])[0].offset < woken_for:
                del self._woken_for[key]
        busy.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
        self._hold(name, cluster, tp, offset)

    def hold(self, name: str, cluster: Cluster, tp: TopicPartition, offset: int) -> None:
        """Start a feed quiet, never fetched yet (`offset`: the replica's end). Its source was not seen: the first
        answer wakes it unless its end is exactly `offset`. A source ahead has records to apply; a source behind
        must have its last records read again by the link's consumer, so that the writer checks whose the
        replica's last records are (SourceFeeds.recheck_lagging)."""
        self._hold(name, cluster, tp, offset)
        self._unseen.add((name, tp.topic, tp.partition))

    def _hold(self, name: str, cluster: Cluster, tp: TopicPartition, offset: int) -> None:
        if cluster.name not in self.watches:
            w = self.watches[cluster.name] = self._new_watch(cluster)
            w.on_news = self._news_ready.set
        key = (name, tp.topic, tp.partition)
        self.held[key] = (cluster.name, max(offset, self._woken_for.pop(key, -1)))
        self._readers.setdefault((cluster.name, tp.topic, tp.partition), set()).add(name)
        self.count[name] = self.count.get(name, 0) + 1
        self._dirty.add(cluster.name)

    def news(self) -> tuple[list[tuple[str, str, int, int]], set[str]]:
        """From the loop: tell the watches what to watch, and take their news: the feeds whose end passed their
        mark ((link, topic, partition, end)), and the source clusters whose connection was lost (their feeds are checked again before anything)."""
        for cluster in self._dirty:
            w = self.watches.get(cluster)
            if w is not None:
                w.watch([(t, p) for (c, t, p) in self._readers if c == cluster])
        self._dirty.clear()
        moved: list[tuple[str, str, int, int]] = []
        lost: set[str] = set()
        for cluster, w in self.watches.items():
            got = w.take()
            if got is None:
                continue
            ends, was_lost = got
            if was_lost:
                lost.add(cluster)
            for (topic, partition), end in ends.items():
                if end < 0:
                    continue  # unknown (its topic's ends could not be asked for: EndWatch._ends_of)
                for name in self._readers.get((cluster, topic, partition), ()):
                    key = (name, topic, partition)
                    mark = self.held[key][1]
                    if end > mark or (key in self._unseen and end != mark):
                        moved.append((name, topic, partition, end))
                    self._unseen.discard(key)
        return moved, lost

    def wait_for_news(self, timeout: float) -> None:
        """Sleep up to `timeout`, less when a watch published news meanwhile (taken with the loop's next news()),
        or something else woke the loop (nudge())."""
        if self._news_ready.wait(timeout):
            self._news_ready.clear()

    def nudge(self) -> None:
        """End the loop's wait_for_news now: news from elsewhere than the watches (a new plan, a stop)."""
        self._news_ready.set()

    def wake(self, name: str, tp: TopicPartition, busy: Consumer, offset: int, end: int) -> None:
        """A quiet feed's end moved to `end`: back to its link's consumer, to read on at `offset`."""
        self.release(name, tp)
        self._woken_for[(name, tp.topic, tp.partition)] = end
        busy.incremental_assign([TopicPartition(tp.topic, tp.partition, offset)])

    def release(self, name: str, tp: TopicPartition) -> None:
        """The feed is no longer watched (it wakes, or its partition is let go), nor the end of its last wake kept."""
        key = (name, tp.topic, tp.partition)
        self._woken_for.pop(key, None)
        self._unseen.discard(key)
        held = self.held.pop(key, None)
        if held is None:
            return
        self.count[name] -= 1
        readers = self._readers.get((held[0], tp.topic, tp.partition), set())
        readers.discard(name)
        if not readers:
            self._readers.pop((held[0], tp.topic, tp.partition), None)
        self._dirty.add(held[0])

    def close_unused(self, live: set[str], live_clusters: set[str]) -> None:
        """Forget the feeds of links that are gone; close the watches of source clusters no link reads."""
        for key in [k for k in self.held if k[0] not in live]:
            self.release(key[0], TopicPartition(key[1], key[2]))
        self._woken_for = {k: v for k, v in self._woken_for.items() if k[0] in live}
        for name in [n for n in self.count if n not in live]:
            del self.count[name]
        for cluster in [c for c in self.watches if c not in live_clusters]:
            self.watches.pop(cluster).close()

    def close(self) -> None:
        for w in self.watches.values():
            w.close()
        self.watches.clear()
        self.held.clear()
        self.count.clear()
        self._readers.clear()
        self._woken_for.clear()
        self._unseen.clear()


def due(last_active: float, now: float | None = None) -> bool:
    return (now if now is not None else time.monotonic()) - last_active > QUIET_SECONDS
