"""The planner: the links and replica partitions the stream metadata asks for (links.discover), and the replica
topics they need, created in the destination cluster and written into its replica streams' metadata."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from .. import kafka, topics
from ..errors import StreamreplError, Unreachable
from ..model import Stream
from ..paths import StreamPath, kafka_topic_name
from ..registry import Cluster, Registry
from ..streams import Resolved, kafka_configs
from .links import Plan, discover, read_streams

log = logging.getLogger("streamrepl.gateway")


class Planner:
    def __init__(
        self,
        reg: Registry,
        cluster: Cluster,
        list_topics: Callable[[Cluster], dict[str, int]] | None = None,
        create_topics: Callable[..., None] | None = None,
        read_streams: Callable[..., dict[str, Stream]] = read_streams,
    ):
        """`read_streams(cluster[, seen_end])`: links.read_streams; `seen_end` is passed only when discover was given
        the cluster's end."""
        self.reg = reg
        self.cluster = cluster
        self._list_topics = list_topics or self._list_with_kept_client
        self._create_topics = create_topics or self._create_with_kept_client
        self._read_streams = read_streams
        #: cluster name -> the admin client its topics are listed and the destination's made with, kept: a new one
        #: per listing cost a connection and its first request, about 50 ms on Tansu, three times a pass (between
        #: `replica resume` and its first record: BENCHMARKS.md, resume); a new one per CreateTopics about 15 ms at
        #: 4,000 partitions (Tansu answers a new client's first request with every topic of the cluster)
        self._admins: dict[str, kafka.AdminClient] = {}

    def _kept_admin(self, cluster: Cluster) -> kafka.AdminClient:
        client = self._admins.get(cluster.name)
        if client is None:
            client = self._admins[cluster.name] = kafka.admin_client(cluster)
        return client

    def _list_with_kept_client(self, cluster: Cluster) -> dict[str, int]:
        try:
            return kafka.topics(cluster, self._kept_admin(cluster))
        except StreamreplError:
            # A client that saw its broker go away may keep stale connections: the next listing makes a new one.
            self._admins.pop(cluster.name, None)
            raise

    def _create_with_kept_client(self, cluster: Cluster, specs: list[tuple[str, int, dict[str, str]]]) -> None:
        try:
            kafka.create_topics(cluster, specs, client=self._kept_admin(cluster))
        except Unreachable:  # not a topic that exists already: the broker answered that one
            self._admins.pop(cluster.name, None)
            raise

    def close(self) -> None:
        """Let the kept admin clients go (librdkafka closes an admin client when it is no longer referenced)."""
        self._admins.clear()

    def discover(self, known: Sequence[Cluster] = (), ends: Mapping[str, int] | None = None) -> Plan:
        """The plan the stream metadata asks for now. The `known` clusters (those of the last plan) are read at the
        same time, each in a thread of its own: one after the other, each read's new client and its requests added
        up (15 ms a cluster on Tansu, between a `replica resume` and its first record). A read that failed is not
        tried again (a cluster that does not answer would cost its timeout twice): its error reaches the planner,
        which reports it as always. `ends`: cluster name -> the end of its metadata log the caller saw (the plan
        watcher's change poll): its read may stop there instead of asking for the end again (issue 28)."""
        seen = dict(ends or {})

        def read_one(cluster: Cluster) -> dict[str, Stream]:
            end = seen.get(cluster.name)
            return self._read_streams(cluster) if end is None else self._read_streams(cluster, end)

        if len(known) < 2:
            return discover(self.reg, self.cluster.name, read_one)
        got: dict[str, dict[str, Stream]] = {}
        failed: dict[str, Exception] = {}

        def read(cluster: Cluster) -> None:
            try:
                got[cluster.name] = read_one(cluster)
            except Exception as e:  # noqa: BLE001 - raised again where the planner reads it
                failed[cluster.name] = e

        def read_or_raise(cluster: Cluster) -> dict[str, Stream]:
            if cluster.name in failed:
                raise failed[cluster.name]
            return got[cluster.name] if cluster.name in got else read_one(cluster)

        threads = [threading.Thread(target=read, args=(c,), name="plan-read", daemon=True) for c in known[1:]]
        for t in threads:
            t.start()
        read(known[0])
        for t in threads:
            t.join()
        return discover(self.reg, self.cluster.name, read_or_raise)

    def present(self) -> set[str]:
        """The Kafka topics of the destination cluster now."""
        return set(self._list_topics(self.cluster))

    def adopt_source_topics(self, plan: Plan) -> bool:
        """Topics a plain Kafka client made under a replicated stream's prefix join that stream (`autocreate true`):
        every topic of a stream is replicated, whoever made it. True when one was adopted (the metadata changed, so
        the next plan has it). One topic listing per source cluster."""
        listed: dict[str, dict[str, int]] = {}
        adopted = False
        for src, (cluster, rec) in plan.sources.items():
            if not rec.settings.autocreate:
                continue  # reported by `replica list` and `stream topic list`, not adopted
            try:
                if cluster.name not in listed:  # not setdefault: its argument would list the topics every time
                    listed[cluster.name] = self._list_topics(cluster)
                present = listed[cluster.name]
                r = Resolved(src, cluster)
                if topics.adopt_strays(r, rec, present) is not rec:  # the record it returns is a new one
                    adopted = True
                    log.info("adopted into %s the topics a Kafka client made under it", src)
            except StreamreplError as e:  # one source cluster down must not stop the others
                log.warning("cannot look for new topics of %s: %s", src, e)
        return adopted

    def covers(self, plan: Plan, present: set[str]) -> bool:
        """Whether `present` holds every replica topic the plan needs."""
        return all(kafka_topic_name(dst, topic) in present for dst, topic in plan.topics)

    def ensure_topics(self, plan: Plan) -> set[str]:
        """Create the replica topics the plan needs and are missing, all of a replica stream in one request, and
        record them in its metadata in one write (one request and one write per topic made 1,000 topics take
        minutes, with two gateways racing for the same ones). Returns the destination's Kafka topics now."""
        present = set(self._list_topics(self.cluster))
        missing: dict[StreamPath, list[tuple[str, int]]] = {}
        for (dst, topic), n in plan.topics.items():
            if kafka_topic_name(dst, topic) not in present:
                missing.setdefault(dst, []).append((topic, n))
        for dst, wanted in missing.items():
            r = Resolved(dst, self.cluster)
            rec = r.store.get(dst.path)
            if rec is None:
                continue
            # Replica topics stamp CreateTime so that the source's timestamps survive the copy.
            conf = kafka_configs(rec.settings, "createtime")
            try:
                self._create_topics(self.cluster, [(kafka_topic_name(dst, t), n, conf) for t, n in wanted])
            except StreamreplError as e:  # another gateway may have made some: what is there now counts
                now = self._list_topics(self.cluster)
                for t, _ in wanted:
                    if kafka_topic_name(dst, t) not in now:
                        log.error("cannot create %s: %s", kafka_topic_name(dst, t), e)
                wanted = [(t, n) for t, n in wanted if kafka_topic_name(dst, t) in now]
            if wanted:
                topics.register_many(r, wanted)
            for t, n in wanted:
                log.info("created topic %s:%s (%d partitions)", dst, t, n)
            present |= {kafka_topic_name(dst, t) for t, _ in wanted}
        # Not listed again: each listing took 60-70 ms at 200 topics on Tansu, between a new topic and its first record
        return present
