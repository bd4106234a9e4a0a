"""Which replication links run into a destination cluster, read from the streams' metadata.

A link runs only when the two halves agree (the source lists the replica, the replica
lists the source as upstream), it is not paused, and no bulk copy (autosetup) owns it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..metastore import MetaStore
from ..model import ReplicaState, Stream
from ..paths import StreamPath, kafka_topic_name
from ..registry import Cluster, Registry

log = logging.getLogger("streamrepl.links")

#: Link states in which gateways apply records (the others belong to autosetup's copy).
RUNNING_STATES = {ReplicaState.REPLICATING, "", None}


@dataclass(frozen=True)
class Link:
    src: StreamPath
    src_cluster: Cluster
    src_uuid: str
    dst: StreamPath
    dst_uuid: str
    throttle: bool
    compression: str
    added: int
    synchronous: bool = False

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


@dataclass(frozen=True)
class Unit:
    """A destination partition: the unit of work a gateway owns."""

    dst: StreamPath
    topic: str
    partition: int

    @property
    def key(self) -> str:
        return f"{self.dst}:{self.topic}[{self.partition}]"


@dataclass
class Plan:
    links: list[Link]
    #: destination partition -> the links (and source Kafka topic) that feed it
    units: dict[Unit, list[tuple[Link, str]]]
    #: destination Kafka topics the plan needs: (dst stream, topic) -> (partitions, src topic meta)
    topics: dict[tuple[StreamPath, str], int]
    problems: list[str]
    #: the clusters whose stream metadata the plan was made from (a change in any of them changes it)
    clusters: list[Cluster] = field(default_factory=list)
    #: the source streams of the links, as read: the planner adopts topics plain Kafka clients made under them
    sources: dict[StreamPath, tuple[Cluster, Stream]] = field(default_factory=dict)
    #: when the metadata was read (ms since the epoch): a problem found then says nothing of a stream made since
    read_at: int = 0


def read_streams(cluster: Cluster, seen_end: int | None = None) -> dict[str, Stream]:
    """Every stream record of a cluster's metadata. `seen_end`: the end of its metadata log the caller saw (the plan
    watcher's change poll): the read may stop there (MetaStore.streams)."""
    return MetaStore(cluster).streams(seen_end)


def discover(reg: Registry, dst_cluster: str, read: Callable[[Cluster], dict[str, Stream]] = read_streams) -> Plan:
    dst_c = reg.get(dst_cluster)
    plan = Plan([], {}, {}, [], read_at=int(time.time() * 1000))
    stores: dict[str, dict[str, Stream]] = {}

    def streams_of(cluster: Cluster) -> dict[str, Stream]:
        if cluster.name not in stores:
            plan.clusters.append(cluster)
            stores[cluster.name] = read(cluster)
        return stores[cluster.name]

    for path, rec in streams_of(dst_c).items():
        dst = StreamPath(dst_cluster, path)
        if rec.deleting:
            continue  # its gateways let go before its topics are deleted
        for up in rec.upstreams:
            try:
                src_c = reg.get(up.cluster)
                srec = streams_of(src_c).get(up.stream)
            except Exception as e:  # noqa: BLE001 - one unreachable source must not stop the others
                plan.problems.append(f"upstream {up.path} of {dst}: {e}")
                continue
            if srec is None:
                plan.problems.append(f"upstream {up.path} of {dst} does not exist")
                continue
            entry = srec.replica(str(dst))
            if entry is None or entry.paused or entry.state not in RUNNING_STATES or srec.deleting:
                continue
            plain = [c.name for c in (src_c, dst_c) if not c.uses_tls()]
            if entry.networkencryption and plain:
                # maprcli: it "requires all participating clusters to be secure"; this registry may differ from the
                # one `replica add` checked.
                plan.problems.append(
                    f"link {up.path} -> {dst} not replicated: it has -networkencryption true, and this gateway's"
                    f" registry gives cluster '{plain[0]}' no TLS; set security.protocol SSL or SASL_SSL for it there"
                )
                continue
            link = Link(
                StreamPath(up.cluster, up.stream),
                src_c,
                srec.uuid,
                dst,
                rec.uuid,
                bool(entry.throttle),
                entry.networkcompression,
                int(entry.added),
                bool(entry.synchronous),
            )
            plan.links.append(link)
            plan.sources[link.src] = (src_c, srec)
            for topic, meta in srec.topics.items():
                replica_topic = rec.topics.get(topic)
                if meta.deleting or (replica_topic is not None and replica_topic.deleting):
                    # Out of the plan before the Kafka topic goes: a consumer fetching from a topic that disappears
                    # crashes the whole gateway (librdkafka on Tansu), and a replica topic deleted under a writer
                    # would be re-created and written at the wrong offsets.
                    continue
                n = int(meta.partitions)
                key = (dst, topic)
                plan.topics[key] = max(plan.topics.get(key, 0), n)
                src_kt = kafka_topic_name(link.src, topic)
                for p in range(n):
                    plan.units.setdefault(Unit(dst, topic, p), []).append((link, src_kt))
    return plan
