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
A link the operator had paused stays paused.

resync is journaled (Stream.resync, in the replica's record, written before the first change; journal.RESYNC_STEPS):
a rerun after a run that died completes it, or, when it cannot go on before any topic was rebuilt (gateways still
holding, the replica changed since the plan, the copy failed, an interrupt), rolls back: the links it paused are
resumed, its partial set-aside copy deleted and the journal cleared. Once a topic is being rebuilt, only completing
is possible: the journal stays until a rerun does. One run at a time holds the replica (oplock.py).

Why this is longer than the modules' guide: the plan, each journaled step, the checks made again under the lock and
the rollback are one operation whose order matters; split, each part would read the others' state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import dr, journal, kafka, oplock, replicas, settings, statustopic, stream_ops, streams
from .bulk.copystream import copystream
from .divergence import Divergence, check, tail_of
from .errors import InvalidArgument, NotFound, StreamreplError
from .model import Stream
from .paths import kafka_topic_name
from .registry import Cluster, Registry
from .streams import Resolved


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


#: a fresh resync's table columns, in their order
COLUMNS = tuple(Rebuild(dr.PartitionPlan("", 0, 0, 0, 0), None).row(""))


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
    src_c: kafka.Consumer,
    skt: str,
    dst_c: kafka.Consumer,
    dkt: str,
    p: int,
    upto: int,
    uuids: tuple[str, str],
    clusters: tuple[Cluster, Cluster],
) -> int:
    """The first offset below `upto` from which the replica's records are not the source's (a bisection: the two
    histories share a prefix). An offset where either side shows no record (compacted, a marker) counts as the same;
    a read that timed out is no answer (Unreachable): counted as a match, it put the fork past records that differ."""

    def same(offset: int) -> bool:
        with kafka.answering(clusters[1], "reading the replica for resync's plan"):
            mine = kafka.last_record(dst_c, kafka.TopicPartition(dkt, p), offset + 1, strict=True)
        with kafka.answering(clusters[0], "reading the source for resync's plan"):
            theirs = kafka.last_record(src_c, kafka.TopicPartition(skt, p), offset + 1, strict=True)
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

    def reading_src() -> contextlib.AbstractContextManager[None]:
        return kafka.answering(src.cluster, "reading the source for resync's plan")

    def reading_dst() -> contextlib.AbstractContextManager[None]:
        return kafka.answering(dst.cluster, "reading the replica for resync's plan")

    with reading_src():
        src_ends = kafka.topic_ends(src.cluster, [kafka_topic_name(src.path, t) for t in names])
    with reading_dst():
        dst_ends = kafka.topic_ends(dst.cluster, [kafka_topic_name(dst.path, t) for t in names])
    out: list[Rebuild] = []
    src_c, dst_c = kafka.consumer(src.cluster), kafka.consumer(dst.cluster)
    try:
        for t in names:
            skt, dkt = kafka_topic_name(src.path, t), kafka_topic_name(dst.path, t)
            parts = []
            for p in range(srec.topics[t].partitions):
                s_end, d_end = src_ends.get((skt, p), 0), dst_ends.get((dkt, p), 0)
                with reading_dst():
                    last = kafka.last_record(dst_c, kafka.TopicPartition(dkt, p), d_end, strict=True) if d_end else None
                tail = tail_of(last, drec.uuid) if last is not None else None
                with reading_src():
                    div = check(src_c, kafka.TopicPartition(skt, p), d_end, tail, srec.uuid, drec.uuid)
                clusters = (src.cluster, dst.cluster)
                fork = _fork(src_c, skt, dst_c, dkt, p, div.offset, (srec.uuid, drec.uuid), clusters) if div else d_end
                with reading_dst():
                    count = dr.count_records(dst.cluster, dkt, p, fork, d_end)
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


def _announce(
    src: Resolved,
    dst: Resolved,
    drec: Stream,
    parts: list[Rebuild],
    links: list[list[str]],
    kept: list[list[str]],
    aside: str,
    say: dr.Say,
) -> None:
    chosen = sorted({r.part.topic for r in parts if r.rebuild})
    for r in parts:
        p = r.part
        where = f"  {p.topic}[{p.partition}]: {src.path} ends at {p.new_end}, {dst.path} at {p.old_end}"
        if r.divergence is not None:
            say(f"{where}; diverged: {p.diverged} records from offset {p.fork} differ from the source's")
        else:
            say(f"{where}; {'rebuilt as asked' if r.rebuild else 'matches its source, kept'}")
    if not chosen:
        return
    if links:
        say(f"pause {', '.join(f'{s} -> {d}' for s, d in links)} and wait until no gateway holds {', '.join(chosen)}")
    else:
        paused = ", ".join(f"{s} -> {d}" for s, d in kept)
        say(
            f"the link{'s' if len(kept) > 1 else ''} {paused} {'are' if len(kept) > 1 else 'is'} paused already; wait"
            f" until no gateway holds {', '.join(chosen)}"
        )
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


def _check_pending(src: Resolved, dst: Resolved, drec: Stream, j: dict[str, Any], topic: str | None) -> None:
    """A rerun finishes the resync its journal describes: the same source, and the same -topic if one is given."""
    streams.check_perm(drec, "adminperm", dst.path, "resynchronize it")
    again = f"'streamrepl stream replica resync -path {j.get('source')} -replica {dst.path}'"
    if j.get("source") != str(src.path):
        raise InvalidArgument(
            f"an interrupted resync of {dst.path} from {j.get('source')} is pending (started"
            f" {journal.iso(j.get('started'))}): run {again} to complete it or roll it back first"
        )
    if topic is not None and topic not in j.get("topics", []):
        raise InvalidArgument(
            f"an interrupted resync of {dst.path} (topics {', '.join(j.get('topics', []))}) is pending: run {again}"
            " without -topic to complete it or roll it back first"
        )


def _check_unchanged(reg: Registry, dst: Resolved, begun: dict[str, Any]) -> None:
    """The replica's topics to rebuild still end where the plan saw them, and its set-aside stream is still to be
    made if it was: else the plan is stale (another resync ran meanwhile), and going on would copy the rebuilt
    replica over the other run's set-aside copy, or delete it on a roll back."""
    planned: dict[str, list[int]] = begun["ends"]
    found = kafka.topic_ends(dst.cluster, [kafka_topic_name(dst.path, t) for t in planned])
    now = {
        t: [found.get((kafka_topic_name(dst.path, t), p), 0) for p in range(len(ends))] for t, ends in planned.items()
    }
    aside = streams.resolve(reg, str(begun["aside"]))
    if now != planned or (begun["asidenew"] and aside.store.get(aside.path.path) is not None):
        raise StreamreplError(
            f"{dst.path} changed since this resync planned it (another resync may have run meanwhile); nothing was"
            " changed: see 'streamrepl stream replica list', and run resync again if it still shows a divergence"
        )


def _resuming(src: Resolved, dst: Resolved, j: dict[str, Any], say: dr.Say) -> None:
    left = [s for s in journal.RESYNC_STEPS if s not in j.get("done", [])]
    say(
        f"an interrupted resync of {dst.path} from {src.path} (started {journal.iso(j.get('started'))}, topics"
        f" {', '.join(j.get('topics', []))}) did {', '.join(j.get('done', []))}; left: {', '.join(left)}"
    )


def resync(
    reg: Registry,
    path: str,
    replica: str,
    *,
    topic: str | None = None,
    dryrun: bool = False,
    master: str | None = None,
    say: dr.Say = dr.quiet,
    ends: dr.Ends = kafka.topic_ends,
    copy: Callable[..., Any] = copystream,
    wait_released: Callable[[dict[str, tuple[Cluster, list[str]]]], list[str]] = statustopic.wait_released,
) -> list[dict[str, Any]]:
    """Rebuild the diverged topics of replica `replica` from its source `path`; see the module doc."""
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    settings.crash_after_step()  # a bad value of the test hook is refused before anything, not after step 1
    src, srec = streams.load(reg, path)
    dst, drec = streams.load(reg, replica)
    pending = journal.resyncing(drec)
    begun: dict[str, Any] = {}
    if pending is not None:
        _check_pending(src, dst, drec, pending, topic)
        rows: list[dict[str, Any]] = dr.in_order(list(pending.get("rows", [])), COLUMNS)
        if dryrun:
            _resuming(src, dst, pending, say)
            return rows
    else:
        _check(src, srec, dst, drec, topic)
        parts = plan(src, srec, dst, drec, topic)
        aside = dr.aside_path(dst)
        rows = [r.row(aside) for r in parts]
        every = _links(src, srec, dst, drec)
        links = [[s, d] for s, d, was in every if not was]
        kept = [[s, d] for s, d, was in every if was]
        _announce(src, dst, drec, parts, links, kept, aside, say)
        chosen = sorted({r.part.topic for r in parts if r.rebuild})
        if not chosen:
            say(f"no partition of {dst.path} diverged from {src.path}: nothing to do")
            return rows
        if dryrun:
            return rows
        aside_r = streams.resolve(reg, aside)
        begun = {
            "source": str(src.path),
            "topic": topic,
            "topics": chosen,
            "aside": aside,
            # deleted on a roll back only when this resync made it
            "asidenew": aside_r.store.get(aside_r.path.path) is None,
            "links": links,
            "kept": kept,
            # the replica's ends when planned: its set-aside copy must end there too
            "ends": {t: [r.part.old_end for r in parts if r.part.topic == t] for t in chosen},
            "rows": rows,
            "steps": list(journal.RESYNC_STEPS),
            "done": ["journal"],
        }
    # One run at a time; what the run before this one left is read once the lock is held.
    with oplock.holding(dst, "resync") as lock:
        dst, now = streams.load(reg, replica)
        found = journal.resyncing(now)
        if (found is None) != (pending is None) or (
            found and pending and found.get("started") != pending.get("started")
        ):
            raise StreamreplError(f"another resync of {dst.path} ran meanwhile; nothing was changed: run resync again")
        if found is None:
            _check_unchanged(reg, dst, begun)  # another resync may have rebuilt it between the plan and the lock
            j = {**begun, "started": int(time.time() * 1000)}

            def begin(current: Stream | None) -> Stream:
                if current is None:
                    raise StreamreplError(f"stream {dst.path} was deleted meanwhile; nothing was changed")
                current.resync = j
                return current

            dst.store.update(dst.path.path, begin)
            oplock.step_done("resync", 1)
        else:
            j = found
            _resuming(src, dst, j, say)  # once the lock is held: a run that holds it is not interrupted
        _Run(reg, src, dst, now, j, lock, say, ends, copy, master, wait_released).run(resumed=pending is not None)
    return rows


class _Run:
    """The steps of one resync (journal.RESYNC_STEPS) not done yet, each marked done in its journal once it is."""

    def __init__(
        self,
        reg: Registry,
        src: Resolved,
        dst: Resolved,
        drec: Stream,
        j: dict[str, Any],
        lock: oplock.OpLock,
        say: dr.Say,
        ends: dr.Ends,
        copy: Callable[..., Any],
        master: str | None,
        wait_released: Callable[[dict[str, tuple[Cluster, list[str]]]], list[str]],
    ):
        self.reg, self.src, self.dst, self.drec, self.j, self.lock = reg, src, dst, drec, j, lock
        self.say, self.ends, self.copy, self.master, self.wait_released = say, ends, copy, master, wait_released
        self.topics: list[str] = list(j.get("topics", []))
        self.links: list[tuple[str, str]] = [(s, d) for s, d in j.get("links", [])]

    def mark(self, step: str) -> None:
        def apply(current: Stream | None) -> Stream:
            if current is None or journal.resyncing(current) is None:
                raise StreamreplError(f"the journal of the resync of {self.dst.path} vanished meanwhile")
            if self.lock.lost:
                raise oplock.OpLocked(f"resync of {self.dst.path} stopped: {self.lock.lost}")
            assert current.resync is not None
            current.resync["done"] = [*current.resync.get("done", []), step]
            return current

        self.dst.store.update(self.dst.path.path, apply)
        self.j["done"] = [*self.j.get("done", []), step]
        oplock.step_done("resync", journal.RESYNC_STEPS.index(step) + 1)

    def done(self, step: str) -> bool:
        return step in self.j.get("done", [])

    def _clear(self) -> None:
        def drop(current: Stream | None) -> Stream:
            if current is None:
                raise StreamreplError(f"stream {self.dst.path} was deleted meanwhile")
            current.resync = None
            return current

        self.dst.store.update(self.dst.path.path, drop)

    def run(self, resumed: bool) -> None:
        again = f"'streamrepl stream replica resync -path {self.src.path} -replica {self.dst.path}'"
        phase = journal.TwoPhase(
            f"resync of {self.dst.path} from {self.src.path}",
            str(self.dst.path),
            again,
            f"after its set-aside copy {self.j.get('aside')} was checked",
            " and the links stay paused",
        )
        journal.run_two_phase(phase, self._prepare, self._roll_back, self._finish, self.say, resumed)

    def _prepare(self) -> None:
        """The steps that change nothing of the replica: pause, wait for the gateways, set the replica aside."""
        if not self.done("pause"):
            for s, d in self.links:
                replicas.set_paused(self.reg, s, d, True)
            self.mark("pause")
        if not self.done("released"):
            held = self.wait_released(_holders(self.reg, self.dst, self.drec, self.topics))
            if held:
                raise StreamreplError(
                    f"gateways still hold {', '.join(held[:3])} after {statustopic.RELEASE_TIMEOUT:.0f} s (see"
                    f" 'streamrepl cluster gateway list -cluster {self.dst.cluster.name}')"
                )
            self.mark("released")
        if not self.done("aside"):
            planned = [
                dr.PartitionPlan(t, p, end, 0, 0)
                for t, per in self.j.get("ends", {}).items()
                for p, end in enumerate(per)
            ]
            dr.set_aside(
                self.reg, self.dst, self.drec, self.j["aside"], planned, self.ends, self.copy, self.master, "resync"
            )
            self.say(f"set aside: {self.j['aside']} holds {self.dst.path} whole")
            self.mark("aside")

    def _forget_reports(self) -> None:
        """The gateways' last reports of the rebuilt partitions (their ERROR among them) are of the old history:
        `replica list` showed them until a gateway reported the partition again."""
        keys = [
            statustopic.unit_key(str(self.dst.path), str(self.src.path), t, p)
            for t in self.topics
            for p in range(self.drec.topics[t].partitions)
        ]
        statustopic.put_all(self.dst.cluster, [(k, None) for k in keys], "clearing the reports of the rebuilt topics")

    def _roll_back(self) -> str:
        """Undo what the steps before "rebuild" did, clear the journal; says what was undone."""
        undone = []
        for s, d in self.links:
            try:
                replicas.set_paused(self.reg, s, d, False)
            except NotFound:
                continue  # the link was removed meanwhile: nothing to resume
        if self.links:
            undone.append(f"resumed {', '.join(f'{s} -> {d}' for s, d in self.links)}")
        aside = str(self.j.get("aside", ""))
        if aside and self.j.get("asidenew"):
            a = streams.resolve(self.reg, aside)
            if a.store.get(a.path.path) is not None:
                stream_ops.delete(self.reg, aside)
                undone.append(f"deleted its partial copy {aside}")
        self._clear()
        return ", ".join(undone) or "nothing to undo"

    def _finish(self) -> None:
        """The steps past the point of no return: rebuild the topics, resume the links, clear the journal."""
        if not self.done("rebuild"):
            for t in self.topics:
                meta = self.drec.topics[t]
                configs = streams.kafka_configs(self.drec.settings, meta.timestamptype)
                dr.recreate_topic(self.dst.cluster, kafka_topic_name(self.dst.path, t), meta.partitions, configs)
                self.say(f"rebuilt {self.dst.path}:{t} empty ({meta.partitions} partitions)")
            self._forget_reports()
            self.mark("rebuild")
        if not self.done("resume"):
            for s, d in self.links:
                try:
                    replicas.set_paused(self.reg, s, d, False)
                except NotFound:
                    self.say(f"the link {s} -> {d} was removed meanwhile: nothing to resume")
            self.mark("resume")
        self._clear()
        if (str(self.src.path), str(self.dst.path)) in self.links:
            self.say(
                f"replicating {self.src.path} -> {self.dst.path} again; 'streamrepl stream replica list -path"
                f" {self.src.path}' shows it"
            )
        else:
            self.say(
                f"{self.src.path} -> {self.dst.path} stays paused, as it was: 'streamrepl stream replica resume"
                f" -path {self.src.path} -replica {self.dst.path}' copies the source into the rebuilt topics"
            )
