"""Disaster recovery: what `stream replica failback` (failback.py runs it), promote (promote.py) and resync share:
the plan of a failback, its checks, and the set-aside copy.

failback (Cluster Linking's truncate-and-restore, done without truncating anything)
    Once the old primary's cluster answers again, it becomes a replica of the new primary. Whatever it holds is first
    copied whole into a stream beside it, `<old path>.aside-<yyyymmddHHMM>` (offsets kept, copystream), and the copy
    is checked partition by partition (same end as the old primary's, which did not move meanwhile) before anything
    is deleted: its diverged tail (the records past the promotion point, written to it after the cut) is set aside,
    never dropped. Kafka has no way to truncate a partition, so the old primary is deleted and created again, empty,
    as a replica of the new primary by autosetup's flow (registered paused, copied, replication started): every
    offset then means the same record in both. Its consumer groups' cursors come back from the new primary by cursor
    replication once a gateway of its cluster runs. Only a pair is failed back: the new primary was promoted from
    the old one, or the old one still lists it as its replica (else failback would delete an unrelated stream).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import kafka, policy, statustopic, streams
from .errors import InvalidArgument, StreamreplError
from .journal import promoting as _running
from .model import Stream
from .paths import kafka_topic_name
from .registry import Cluster, Registry

#: How long a re-created topic's delete may take to finish before it is created again.
DELETE_TIMEOUT = 30.0

Say = Callable[[str], None]
Ends = Callable[[Cluster, list[str]], dict[tuple[str, int], int]]
Waiter = Callable[[dict[str, tuple[Cluster, list[str]]]], list[str]]


def quiet(_: str) -> None:
    pass


def ends_by_topic(r: streams.Resolved, rec: Stream, ends: Ends) -> dict[str, list[int]]:
    """The real end of every partition of every topic of the stream (topics without a Kafka topic are left out)."""
    names = {kafka_topic_name(r.path, t): t for t in sorted(rec.topics)}
    found = ends(r.cluster, list(names))
    out: dict[str, list[int]] = {}
    for (kt, p), end in sorted(found.items()):
        out.setdefault(names[kt], []).append(end)
        assert len(out[names[kt]]) == p + 1
    return out


# -- failback ---------------------------------------------------------------------------------
@dataclass
class PartitionPlan:
    topic: str
    partition: int
    old_end: int
    new_end: int
    #: where the two histories part: the new primary's end when it was promoted
    fork: int
    #: records of the old primary past the fork: its diverged tail
    diverged: int = 0

    def row(self, old: str, new: str, aside: str) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "oldprimary": old,
            "oldend": self.old_end,
            "newprimary": new,
            "newend": self.new_end,
            "forkoffset": self.fork,
            "setaside": self.diverged,
            "aside": aside,
        }


#: a fresh failback's table columns, in their order
FAILBACK_COLUMNS = tuple(PartitionPlan("", 0, 0, 0, 0).row("", "", ""))


def in_order(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows read back from a journal (the metadata store sorts their keys) in a fresh run's column order."""
    return [{**{c: r[c] for c in columns if c in r}, **r} for r in rows]


def _fork_points(new_rec: Stream, old_path: str) -> dict[str, list[int]] | None:
    promotion = new_rec.promotion
    if not isinstance(promotion, dict) or _running(new_rec) or old_path not in promotion.get("from", []):
        return None
    return promotion.get("ends") or {}


def count_records(cluster: Cluster, kt: str, p: int, start: int, end: int) -> int:
    """The records (not fillers, not markers) of a partition from `start` to `end`."""
    if start >= end:
        return 0
    c = kafka.consumer(cluster)
    try:
        count = 0
        # To the partition's end, not `until`: the last offset may be a transaction marker, never read.
        for m in kafka.read_partition(c, kafka.TopicPartition(kt, p, start)):
            offset = m.offset()
            if offset is None or offset >= end:
                break
            count += not policy.is_filler(m.headers())
        return count
    finally:
        c.close()


def plan_failback(
    old_r: streams.Resolved, old_rec: Stream, new_r: streams.Resolved, new_rec: Stream, ends: Ends
) -> tuple[list[PartitionPlan], bool]:
    """Per partition of the old primary: its end, the new primary's, the fork and the diverged tail; and whether the
    fork points came from the promotion record (else the new primary's end stands for them)."""
    forks = _fork_points(new_rec, str(old_r.path))
    old_ends = ends_by_topic(old_r, old_rec, ends)
    new_ends = ends_by_topic(new_r, new_rec, ends)
    plan = []
    for topic, per in old_ends.items():
        for p, old_end in enumerate(per):
            new_end = (new_ends.get(topic) or [])[p] if p < len(new_ends.get(topic) or []) else 0
            known = (forks or {}).get(topic) or []
            fork = min(known[p] if p < len(known) else new_end, old_end)
            kt = kafka_topic_name(old_r.path, topic)
            plan.append(
                PartitionPlan(topic, p, old_end, new_end, fork, count_records(old_r.cluster, kt, p, fork, old_end))
            )
    return plan, forks is not None


def _paired(new_path: str, new_rec: Stream, old_path: str, old_rec: Stream) -> bool:
    """Whether the new primary was a replica of the old one: promoted from it, or still listed as its replica (an
    upstream removed by hand) with the uuid it has, or had before its promotion took over another."""
    if _fork_points(new_rec, old_path) is not None:
        return True
    entry = old_rec.replica(new_path)
    if entry is None:
        return False
    before = new_rec.promotion.get("uuid") if isinstance(new_rec.promotion, dict) else None
    return not entry.uuid or entry.uuid in (new_rec.uuid, before)


def check_failback(
    reg: Registry, new_r: streams.Resolved, new_rec: Stream, old_r: streams.Resolved, old_rec: Stream
) -> None:
    if new_r.path == old_r.path:
        raise InvalidArgument(f"-path and -replica are the same stream {new_r.path}; name the old primary in -replica")
    if new_rec.upstream(str(old_r.path)) is not None:
        raise InvalidArgument(
            f"stream {new_r.path} is still a replica of {old_r.path}; promote it first"
            f" ('streamrepl stream replica promote -path {new_r.path}')"
        )
    journal = _running(new_rec)
    if journal is not None and str(old_r.path) in journal.get("from", []):
        raise InvalidArgument(
            f"the promote of {new_r.path} did not finish; complete it first"
            f" ('streamrepl stream replica promote -path {new_r.path}')"
        )
    if new_rec.replica(str(old_r.path)) is not None:
        raise InvalidArgument(
            f"stream {old_r.path} is already registered as a replica of {new_r.path}; remove that entry first"
            f" ('streamrepl stream replica remove -path {new_r.path} -replica {old_r.path}')"
        )
    held = statustopic.held_units(old_r.cluster, [f"{old_r.path}:"])
    if held:
        raise InvalidArgument(
            f"a gateway still writes into {old_r.path} ({', '.join(held[:3])}); promote or unlink it first"
        )
    if not _paired(str(new_r.path), new_rec, str(old_r.path), old_rec):
        # Failback deletes the old primary: only a stream whose history the new primary continues may be replaced.
        raise InvalidArgument(
            f"stream {new_r.path} was never a replica of {old_r.path} (not promoted from it, not one of its replicas):"
            f" failback would delete {old_r.path}; nothing was changed. To make {old_r.path} a copy of {new_r.path},"
            f" use 'streamrepl stream replica autosetup -path {new_r.path} -replica {old_r.path}'"
        )


def aside_path(old_r: streams.Resolved, now: datetime | None = None) -> str:
    """`<path>.aside-<yyyymmddHHMM>`, or with `-2`, `-3`... when a run earlier in that minute took the name (beside
    `old_r`, on its cluster): a second run must not copy over the first one's set-aside records."""
    stem = f"{old_r.path.path}.aside-{(now or datetime.now()).strftime('%Y%m%d%H%M')}"
    name, n = stem, 1
    while old_r.store.get(name) is not None:
        n += 1
        name = f"{stem}-{n}"
    return f"/{old_r.cluster.name}{name}"


def set_aside(
    reg: Registry,
    old_r: streams.Resolved,
    old_rec: Stream,
    aside: str,
    plan: list[PartitionPlan],
    ends: Ends,
    copy: Callable[..., Any],
    master: str | None,
    command: str = "failback",
) -> None:
    """Copy the old primary whole into `aside` and check it before anything is deleted; `command` is the one to run
    again when it fails (failback, resync)."""
    result = copy(reg, str(old_r.path), aside, master=master)
    if not result.complete:
        raise StreamreplError(
            f"copying {old_r.path} aside into {aside} did not finish ({result.summary()}); nothing"
            f" was deleted: run {command} again"
        )
    aside_r, aside_rec = streams.load(reg, aside)
    copied = ends_by_topic(aside_r, aside_rec, ends)
    now = ends_by_topic(old_r, old_rec, ends)
    for pp in plan:
        have = (copied.get(pp.topic) or [])[pp.partition : pp.partition + 1]
        still = (now.get(pp.topic) or [])[pp.partition : pp.partition + 1]
        if still != [pp.old_end]:
            raise StreamreplError(
                f"{old_r.path}:{pp.topic}[{pp.partition}] grew from {pp.old_end} to {still[0] if still else '?'}"
                f" during the copy: something still writes to it; stop its producers and run {command} again"
                " (nothing was deleted)"
            )
        if have != [pp.old_end]:
            raise StreamreplError(
                f"{aside}:{pp.topic}[{pp.partition}] ends at {have[0] if have else 'nothing'}, not where"
                f" {old_r.path} ends ({pp.old_end}); nothing was deleted: run {command} again"
            )


def recreate_topic(cluster: Cluster, kt: str, partitions: int, configs: dict[str, str]) -> None:
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
