"""`stream replica resync`: a replica whose source's history changed under it, rebuilt from the source.

A diverged replica partition (divergence.py) holds, at some offsets, records its source no longer holds there. Kafka
cannot truncate a partition, so the replica's topic is rebuilt: deleted and created again empty, and the link copies
the source into it from its start, offsets kept, as replication always does. Before anything is deleted:

- the plan is printed, per partition: both ends, where the two histories part (the first offset whose records
  differ) and how many of the replica's records past it differ from the source's; `-dryrun true` stops there;
- the link is paused, and the link out of the replica to each of its own replicas (they read the topic that is
  deleted; on Tansu, a topic deleted under a fetching consumer takes its process down), and the command waits until
  no live gateway holds those partitions any more (the status topic's reports, as promote and the deletes do); when
  one still does, the links are resumed as they were and the command refuses;
- the replica is copied whole into `<replica>.aside-<yyyymmddHHMM>` beside it and the copy checked (dr.py's
  set-aside, the one failback uses): the diverged records are kept, never dropped.

Without -topic, the topics with a diverged partition are rebuilt (none: nothing is done); with -topic, that topic is
rebuilt whether or not a divergence is seen (diffstreams may have shown one in the middle of a partition). Only a
replica fed by this one source can be rebuilt from it: records of several sources share its partitions otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import dr, kafka, replicas, statustopic, streams
from .bulk.copystream import copystream
from .divergence import Divergence, check, tail_of
from .errors import InvalidArgument, StreamreplError
from .model import Stream
from .paths import kafka_topic_name
from .registry import Cluster, Registry
from .streams import Resolved

#: How long the rebuild waits for a deleted topic to be gone before it is created again.
DELETE_TIMEOUT = 30.0


@dataclass
class Rebuild:
    """One replica partition in the plan (its fork and set-aside count in `part`, dr's PartitionPlan)."""

    part: dr.PartitionPlan
    divergence: Divergence | None
    rebuild: bool = False

    def row(self, aside: str) -> dict[str, Any]:
        p = self.part
        return {
            "topic": p.topic,
            "partition": p.partition,
            "sourceend": p.new_end,
            "replicaend": p.old_end,
            "forkoffset": p.fork,
            "setaside": p.diverged,
            "rebuild": self.rebuild,
            "aside": aside if self.rebuild else "",
        }


def _check(src: Resolved, srec: Stream, dst: Resolved, drec: Stream, topic: str | None) -> None:
    if src.path == dst.path:
        raise InvalidArgument(f"stream {src.path} cannot be resynchronized from itself; give its replica in -replica")
    if srec.replica(str(dst.path)) is None:
        raise InvalidArgument(
            f"stream {dst.path} is not a replica of {src.path}; see 'streamrepl stream replica list -path {src.path}'"
        )
    if drec.upstream(str(src.path)) is None:
        raise InvalidArgument(
            f"stream {dst.path} does not accept {src.path} as its upstream; add it with 'streamrepl stream upstream"
            f" add -path {dst.path} -upstream {src.path}'"
        )
    others = [u.path for u in drec.upstreams if u.path != str(src.path)]
    if others:
        raise InvalidArgument(
            f"stream {dst.path} has other upstreams too ({', '.join(others)}): its partitions hold records of"
            f" several sources and cannot be rebuilt from {src.path} alone; copy into a new stream instead"
        )
    if topic is not None and topic not in srec.topics:
        raise InvalidArgument(
            f"topic {topic} is not a topic of stream {src.path}; see 'streamrepl stream topic list -path {src.path}'"
        )
    streams.check_perm(drec, "adminperm", dst.path, "resynchronize it")


def _fork(
    src_c: kafka.Consumer, skt: str, dst_c: kafka.Consumer, dkt: str, p: int, upto: int, uuids: tuple[str, str]
) -> int:
    """The first offset below `upto` from which the replica's records are not the source's (a bisection: the two
    histories share a prefix). An offset where either side shows no record (compacted, a marker) counts as the same."""

    def same(offset: int) -> bool:
        mine = kafka.last_record(dst_c, kafka.TopicPartition(dkt, p), offset + 1)
        theirs = kafka.last_record(src_c, kafka.TopicPartition(skt, p), offset + 1)
        if mine is None or theirs is None:
            return True
        return tail_of(mine, uuids[1]).holds(tail_of(theirs, uuids[0]))

    low, high = 0, upto
    while low < high:
        mid = (low + high) // 2
        if same(mid):
            low = mid + 1
        else:
            high = mid
    return low


def plan(src: Resolved, srec: Stream, dst: Resolved, drec: Stream, topic: str | None) -> list[Rebuild]:
    """Per partition of the topics both streams have (or of `topic`): ends, divergence, fork, records set aside."""
    names = [t for t in sorted(srec.topics) if t in drec.topics and topic in (None, t)]
    src_ends = kafka.topic_ends(src.cluster, [kafka_topic_name(src.path, t) for t in names])
    dst_ends = kafka.topic_ends(dst.cluster, [kafka_topic_name(dst.path, t) for t in names])
    out: list[Rebuild] = []
    src_c, dst_c = kafka.consumer(src.cluster), kafka.consumer(dst.cluster)
    try:
        for t in names:
            skt, dkt = kafka_topic_name(src.path, t), kafka_topic_name(dst.path, t)
            parts = []
            for p in range(srec.topics[t].partitions):
                s_end, d_end = src_ends.get((skt, p), 0), dst_ends.get((dkt, p), 0)
                last = kafka.last_record(dst_c, kafka.TopicPartition(dkt, p), d_end) if d_end else None
                tail = tail_of(last, drec.uuid) if last is not None else None
                div = check(src_c, kafka.TopicPartition(skt, p), d_end, tail, srec.uuid, drec.uuid)
                fork = _fork(src_c, skt, dst_c, dkt, p, div.offset, (srec.uuid, drec.uuid)) if div else d_end
                count = dr._count_records(dst.cluster, dkt, p, fork, d_end)
                parts.append(Rebuild(dr.PartitionPlan(t, p, d_end, s_end, fork, count), div))
            chosen = topic is not None or any(r.divergence is not None for r in parts)
            for r in parts:
                r.rebuild = chosen
            out += parts
    finally:
        src_c.close()
        dst_c.close()
    return out


def _links(src: Resolved, srec: Stream, dst: Resolved, drec: Stream) -> list[tuple[str, str, bool]]:
    """The links to pause, (source, replica, paused already): this one, and the replica's own replicas'."""
    entry = srec.replica(str(dst.path))
    out = [(str(src.path), str(dst.path), entry is not None and entry.paused)]
    out += [(str(dst.path), e.path, e.paused) for e in drec.replicas]
    return out


def _holders(reg: Registry, dst: Resolved, drec: Stream, topics: list[str]) -> dict[str, tuple[Cluster, list[str]]]:
    """Who writes or reads the replica's rebuilt topics: its own cluster's gateways (units `/dst:topic[p]`) and its
    replicas' gateways (units `/replica:topic[p]`)."""
    holders: dict[str, tuple[Cluster, list[str]]] = {dst.cluster.name: (dst.cluster, [])}
    holders[dst.cluster.name][1].extend(f"{dst.path}:{t}[" for t in topics)
    for e in drec.replicas:
        if e.cluster in reg.clusters:
            holders.setdefault(e.cluster, (reg.get(e.cluster), []))[1].extend(f"{e.path}:{t}[" for t in topics)
    return holders


def _recreate(cluster: Cluster, kt: str, partitions: int, configs: dict[str, str]) -> None:
    """Delete a Kafka topic and create it again, empty (deletion may take a moment to finish on the broker)."""
    if kt in kafka.topics(cluster):
        kafka.delete_topics(cluster, [kt])
    deadline = time.monotonic() + DELETE_TIMEOUT
    while True:
        try:
            if kt not in kafka.topics(cluster):
                kafka.create_topics(cluster, [(kt, partitions, configs)])
                return
        except StreamreplError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise StreamreplError(f"topic {kt} of cluster {cluster.name} was not deleted within {DELETE_TIMEOUT:.0f} s")
        time.sleep(0.2)


def resync(
    reg: Registry,
    path: str,
    replica: str,
    *,
    topic: str | None = None,
    dryrun: bool = False,
    master: str | None = None,
    say: dr.Say = dr._quiet,
    ends: dr.Ends = kafka.topic_ends,
    copy: Callable[..., Any] = copystream,
    wait_released: Callable[[dict[str, tuple[Cluster, list[str]]]], list[str]] = statustopic.wait_released,
) -> list[dict[str, Any]]:
    """Rebuild the diverged topics of replica `replica` from its source `path`; see the module doc."""
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    src, srec = streams.load(reg, path)
    dst, drec = streams.load(reg, replica)
    _check(src, srec, dst, drec, topic)
    parts = plan(src, srec, dst, drec, topic)
    aside = dr.aside_path(dst)
    rows = [r.row(aside) for r in parts]
    chosen = sorted({r.part.topic for r in parts if r.rebuild})
    for r in parts:
        p = r.part
        where = f"  {p.topic}[{p.partition}]: {src.path} ends at {p.new_end}, {dst.path} at {p.old_end}"
        if r.divergence is not None:
            say(f"{where}; diverged: {p.diverged} records from offset {p.fork} differ from the source's")
        else:
            say(f"{where}; {'rebuilt as asked' if r.rebuild else 'matches its source, kept'}")
    if not chosen:
        say(f"no partition of {dst.path} diverged from {src.path}: nothing to do")
        return rows
    every = _links(src, srec, dst, drec)
    links = [(s, d, was) for s, d, was in every if not was]
    kept = [(s, d) for s, d, was in every if was]
    say(f"pause {', '.join(f'{s} -> {d}' for s, d, _ in links)} and wait until no gateway holds {', '.join(chosen)}")
    say(f"copy {dst.path} whole into {aside} (offsets kept) and check it partition by partition")
    say(f"delete and create again, empty, the topics {', '.join(chosen)} of {dst.path}")
    say(f"resume the links: the gateways of {dst.cluster.name} copy {src.path} into them from its start, offsets kept")
    for s, d in kept:
        # The operator paused it: resync leaves that decision alone.
        say(
            f"the link {s} -> {d} was paused before resync: it stays paused; resume it with 'streamrepl stream"
            f" replica resume -path {s} -replica {d}'"
            + (f" to copy {src.path} into the rebuilt topics" if d == str(dst.path) else "")
        )
    if drec.replicas:
        say(
            f"the replicas of {dst.path} ({', '.join(e.path for e in drec.replicas)}) follow its rebuilt topics:"
            " resync them too if 'stream replica list' shows them diverged"
        )
    if dryrun:
        return rows
    for s, d, _ in links:
        replicas.set_paused(reg, s, d, True)
    try:
        held = wait_released(_holders(reg, dst, drec, chosen))
        if held:
            raise StreamreplError(
                f"gateways still hold {', '.join(held[:3])} after {statustopic.RELEASE_TIMEOUT:.0f} s; nothing was"
                f" changed: see 'streamrepl cluster gateway list -cluster {dst.cluster.name}' and run resync again"
            )
        rebuilt = [r.part for r in parts if r.rebuild]
        dr._set_aside(reg, dst, drec, aside, rebuilt, ends, copy, master, command="resync")
    except BaseException:
        for s, d, _ in links:
            replicas.set_paused(reg, s, d, False)
        raise
    say(f"set aside: {aside} holds {dst.path} whole")
    for t in chosen:
        meta = drec.topics[t]
        configs = streams.kafka_configs(drec.settings, meta.timestamptype)
        _recreate(dst.cluster, kafka_topic_name(dst.path, t), meta.partitions, configs)
        say(f"rebuilt {dst.path}:{t} empty ({meta.partitions} partitions)")
    for s, d, _ in links:
        replicas.set_paused(reg, s, d, False)
    say(f"replicating {src.path} -> {dst.path} again; 'streamrepl stream replica list -path {src.path}' shows it")
    return rows
