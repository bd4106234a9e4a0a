"""Which Produces the proxy holds, and the links it holds them for (sync.SyncLink): the cluster's streams with a
synchronous replica, re-read every few seconds; the links' rechecks; their reports in the status topic.

A Kafka topic is a stream's when its name is one streamrepl makes (paths.from_kafka_topic_name); the stream's
synchronous replicas that are not paused are its links. Streams without one are not held: a Produce to their topics
is passed as it came, and its response is not even decoded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..paths import StreamPath, from_kafka_topic_name, kafka_topic_name
from .sync import EndReader, HoldStats, Key, Limits, SyncLink, hold_all

log = logging.getLogger("streamrepl.proxy")

#: How often the proxy re-reads its cluster's streams (a replica made synchronous, or no longer).
REFRESH_SECONDS = 5.0
#: How often a proxy reports its links to the status topic (statustopic.LIVE_SECONDS: a report older than 15 s is
#: taken for gone) and reads the other proxies' reports.
REPORT_SECONDS = 5.0
REPORT_PREFIX = "proxy|"


@dataclass(frozen=True)
class Target:
    """A synchronous replica of a stream of the proxy's cluster: the source stream (`/cluster/path`), the replica's
    path and what reads its ends."""

    source: str
    replica: str
    replica_stream: StreamPath
    replica_cluster: Any  # registry.Cluster

    @property
    def source_stream(self) -> StreamPath:
        cluster, _, path = self.source.lstrip("/").partition("/")
        return StreamPath(cluster, "/" + path)


def report_key(proxy_id: str, link: SyncLink) -> str:
    return f"{REPORT_PREFIX}{proxy_id}|{link.source}|{link.replica}"


class Holds:
    """The held Produce of one proxy: `hold` is what a connection awaits before it answers a Produce."""

    def __init__(
        self,
        cluster: str,
        load: Callable[[], dict[str, list[Target]]],
        make_end: Callable[[Target], tuple[EndReader, Callable[[], None]]],
        limits: Limits | None = None,
        proxy_id: str = "",
        publish: Callable[[list[tuple[str, dict[str, Any]]]], None] | None = None,
        read_reports: Callable[[], dict[str, dict[str, Any]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall: Callable[[], float] = time.time,
    ):
        self.cluster = cluster
        self.load, self.make_end = load, make_end
        self.limits = limits or Limits()
        self.proxy_id = proxy_id
        self.publish, self.read_reports = publish, read_reports
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.stats = HoldStats()
        #: source stream (`/cluster/path`) -> its links
        self.by_source: dict[str, list[SyncLink]] = {}
        self._links: dict[tuple[str, str], tuple[SyncLink, Callable[[], None]]] = {}
        self._changed = False
        self._prefixes: list[bytes] = []
        #: transactional id -> (Kafka topic, partition) -> the last offset its open transaction wrote there, of the
        #: topics of streams with a synchronous replica (what the EndTxn that commits it waits for)
        self.transactions: dict[str, dict[tuple[str, int], int]] = {}

    # -- what is held ----------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether any stream of the cluster has a synchronous replica (else no Produce is even decoded)."""
        return bool(self.by_source)

    def may_hold(self, frame: bytes) -> bool:
        """Whether a Produce request may write a topic of a stream with a synchronous replica: the Kafka topic name
        prefix of one such stream is in its bytes (a search at memory speed; only then is the request decoded)."""
        return any(prefix in frame for prefix in self._prefixes)

    def links_of(self, kafka_topic: str) -> tuple[str, list[SyncLink]] | None:
        """(stream topic, the links a Produce to `kafka_topic` waits for), or None when it waits for none."""
        tp = from_kafka_topic_name(self.cluster, kafka_topic)
        if tp is None:
            return None
        links = self.by_source.get(str(tp.stream))
        return (tp.topic, links) if links else None

    async def hold(self, produced: dict[tuple[str, int], int], deadline: float) -> bool:
        """Wait until every synchronous replica of the streams written holds `produced` ((Kafka topic, partition) ->
        the last offset written), a link falls back, or `deadline`; whether every one confirmed it."""
        groups: dict[int, tuple[list[SyncLink], dict[Key, int]]] = {}
        for (kt, p), last in produced.items():
            found = self.links_of(kt)
            if found is None:
                continue
            topic, links = found
            groups.setdefault(id(links), (links, {}))[1][(topic, p)] = last
        if not groups:
            return True
        started = self.clock()
        self.stats.held += 1
        outcomes = await asyncio.gather(*(hold_all(links, need, deadline) for links, need in groups.values()))
        self.stats.seconds += self.clock() - started
        if all(outcomes):
            self.stats.confirmed += 1
        else:
            self.stats.unconfirmed += 1
        return all(outcomes)

    # -- transactions ------------------------------------------------------------------------------
    def txn_written(self, txn: str, produced: dict[tuple[str, int], int]) -> None:
        """A transactional Produce to synchronous topics was answered: remember what it wrote, for the commit."""
        wrote = self.transactions.setdefault(txn, {})
        for k, last in produced.items():
            wrote[k] = max(wrote.get(k, -1), last)

    def txn_end(self, txn: str) -> dict[tuple[str, int], int]:
        """What the transaction `txn` wrote to synchronous topics, forgotten (it ends, committed or aborted)."""
        return self.transactions.pop(txn, {})

    # -- the cluster's streams ---------------------------------------------------------------------
    def apply(self, targets: dict[str, list[Target]]) -> None:
        """Make the links those of `targets` (source -> its synchronous replicas), keeping the state of those that
        stay."""
        wanted = {(t.source, t.replica): t for ts in targets.values() for t in ts}
        for key in [k for k in self._links if k not in wanted]:
            link, close = self._links.pop(key)
            self.stats.links.pop(link.name, None)
            link.release()
            close()
        by_source: dict[str, list[SyncLink]] = {}
        for key, target in wanted.items():
            if key not in self._links:
                end, close = self.make_end(target)
                link = SyncLink(
                    target.source,
                    target.replica,
                    end,
                    self.limits,
                    clock=self.clock,
                    sleep=self.sleep,
                    wall=self.wall,
                    on_change=self._on_change,
                )
                self._links[key] = (link, close)
                self.stats.links[link.name] = link.state
                log.info("Produces to %s are held until replica %s holds them", target.source, target.replica)
            by_source.setdefault(target.source, []).append(self._links[key][0])
        self.by_source = by_source
        self._prefixes = [
            kafka_topic_name(t.source_stream, "x")[:-1].encode() for ts in targets.values() for t in ts if t.source
        ]

    def _on_change(self, _link: SyncLink) -> None:
        self._changed = True

    async def refresh(self) -> None:
        try:
            targets = await asyncio.to_thread(self.load)
        except Exception as e:  # noqa: BLE001 - keep the links as they were; the next refresh tries again
            log.warning("cannot read the streams of cluster %s: %s", self.cluster, e)
            return
        self.apply(targets)

    async def recheck(self) -> None:
        for link, _ in list(self._links.values()):
            await link.recheck()

    def reports(self, stopped: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """This proxy's report of each link (`stopped`: its last, which `replica list` and the other proxies skip)."""
        now_ms = int(self.wall() * 1000)
        out = []
        for link, _ in self._links.values():
            s = link.state
            body = {
                "proxy": self.proxy_id,
                "source": link.source,
                "replica": link.replica,
                "mode": s.mode,
                "since": s.since_ms,
                "why": s.why,
                "fallbacks": s.fallbacks,
                "recoveries": s.recoveries,
                "updated": now_ms,
                "stopped": stopped,
            }
            out.append((report_key(self.proxy_id, link), body))
        return out

    def follow_others(self, reports: dict[str, dict[str, Any]]) -> None:
        """Fall back where another live proxy fell back after this one's last change of mode: the fallback state is
        shared by every proxy of the cluster (each then comes back on its own recheck)."""
        now_ms = self.wall() * 1000
        for r in reports.values():
            if r.get("proxy") == self.proxy_id or r.get("mode") != "async" or r.get("stopped"):
                continue
            if now_ms - r.get("updated", 0) > 3 * REPORT_SECONDS * 1000:
                continue
            entry = self._links.get((str(r.get("source")), str(r.get("replica"))))
            if entry is not None and entry[0].synchronous and int(r.get("since", 0)) > entry[0].state.since_ms:
                entry[0].fall_back(f"proxy {r.get('proxy')} fell back: {r.get('why')}", since_ms=int(r["since"]))

    async def run(self) -> None:
        """Re-read the streams, recheck fallen-back links and report, until cancelled."""
        last_refresh = last_report = self.clock()
        while True:
            await self.sleep(min(self.limits.recheck, 1.0))
            await self.recheck()
            now = self.clock()
            if now - last_refresh >= REFRESH_SECONDS:
                last_refresh = now
                await self.refresh()
            if self._changed or now - last_report >= REPORT_SECONDS:
                last_report, self._changed = now, False
                await self._report()

    async def _report(self) -> None:
        if self.publish is not None and self._links:
            try:
                await asyncio.to_thread(self.publish, self.reports())
            except Exception as e:  # noqa: BLE001 - the next report tries again
                log.warning("cannot report the synchronous links to the status topic: %s", e)
        if self.read_reports is not None and self._links:
            try:
                self.follow_others(await asyncio.to_thread(self.read_reports))
            except Exception as e:  # noqa: BLE001
                log.debug("cannot read the other proxies' reports: %s", e)

    async def report_stopped(self) -> None:
        """Say that this proxy's links are no longer answered by it (at a drain's end): its fallbacks stop showing."""
        if self.publish is not None and self._links:
            try:
                await asyncio.to_thread(self.publish, self.reports(stopped=True))
            except Exception as e:  # noqa: BLE001 - the reports expire on their own (statustopic.LIVE_SECONDS)
                log.warning("cannot report the proxy's stop to the status topic: %s", e)

    def close(self) -> None:
        for _, close in self._links.values():
            close()
        self._links.clear()
        self.by_source = {}
        self._prefixes = []


# -- the real collaborators: the metadata store, the replica's ends, the status topic --------------------------------
def load_targets(registry: Any, cluster: Any) -> dict[str, list[Target]]:
    """The streams of `cluster` with synchronous replicas that are not paused: source path -> targets."""
    from ..metastore import MetaStore

    out: dict[str, list[Target]] = {}
    for path, rec in MetaStore(cluster).streams().items():
        source = str(StreamPath(cluster.name, path))
        for e in rec.replicas:
            if not e.synchronous or e.paused:
                continue
            try:
                stream = StreamPath(e.cluster, e.stream if e.stream.startswith("/") else "/" + e.stream)
                target = Target(source, e.path or str(stream), stream, registry.get(e.cluster))
            except Exception as err:  # noqa: BLE001 - an unknown cluster: that replica cannot be waited for
                log.warning("synchronous replica %s of %s is not usable: %s", e.path, source, err)
                continue
            out.setdefault(source, []).append(target)
    return out


def thread_ends(target: Target) -> tuple[EndReader, Callable[[], None]]:
    """A replica's ends read on a thread of their own (the reader is a blocking Kafka client): one question at a
    time, as replica_end.ReplicaEnds needs."""
    from ..replica_end import ReplicaEnds

    ends = ReplicaEnds(target.replica, target.replica_stream, target.replica_cluster)
    pool = ThreadPoolExecutor(1, thread_name_prefix="replica-end")

    async def end(topic: str, p: int, needed: int) -> int:
        return await asyncio.get_running_loop().run_in_executor(pool, ends.end, topic, p, needed)

    def close() -> None:
        pool.submit(ends.close)
        pool.shutdown(wait=False)

    return end, close


def status_publisher(cluster: Any) -> Callable[[list[tuple[str, dict[str, Any]]]], None]:
    from .. import statustopic

    def publish(reports: list[tuple[str, dict[str, Any]]]) -> None:
        statustopic.put_all(cluster, [(k, json.dumps(v).encode()) for k, v in reports], "the proxy's link reports")

    return publish


def status_reader(cluster: Any) -> Callable[[], dict[str, dict[str, Any]]]:
    from .. import statustopic

    return lambda: statustopic.read(cluster, REPORT_PREFIX)
