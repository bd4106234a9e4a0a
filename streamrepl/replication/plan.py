"""The planner: the links and replica partitions the stream metadata asks for (links.discover), and the replica
topics they need, created in the destination cluster and written into its replica streams' metadata."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import kafka, topics
from ..errors import StreamreplError
from ..model import Stream
from ..paths import kafka_topic_name
from ..registry import Cluster, Registry
from ..streams import Resolved, kafka_configs
from .links import Plan, discover, read_streams

log = logging.getLogger("streamrepl.gateway")


class Planner:
    def __init__(
        self,
        reg: Registry,
        cluster: Cluster,
        list_topics: Callable[..., dict[str, int]] = kafka.topics,
        create_topics: Callable[..., None] = kafka.create_topics,
        read_streams: Callable[[Cluster], dict[str, Stream]] = read_streams,
    ):
        self.reg = reg
        self.cluster = cluster
        self._list_topics = list_topics
        self._create_topics = create_topics
        self._read_streams = read_streams

    def discover(self) -> Plan:
        return discover(self.reg, self.cluster.name, self._read_streams)

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

    def ensure_topics(self, plan: Plan) -> None:
        present = self._list_topics(self.cluster)
        for (dst, topic), n in plan.topics.items():
            kt = kafka_topic_name(dst, topic)
            if kt in present:
                continue
            r = Resolved(dst, self.cluster)
            rec = r.store.get(dst.path)
            if rec is None:
                continue
            try:
                # Replica topics stamp CreateTime so that the source's timestamps survive the copy.
                self._create_topics(self.cluster, [(kt, n, kafka_configs(rec.settings, "createtime"))])
            except StreamreplError as e:
                if kt not in self._list_topics(self.cluster):
                    log.error("cannot create %s: %s", kt, e)
                    continue
            topics.register_existing(r, topic, n)
            log.info("created topic %s:%s (%d partitions)", dst, topic, n)
