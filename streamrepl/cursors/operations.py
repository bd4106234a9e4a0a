"""The operator's cursor commands: `stream cursor list`, `stream cursor delete`, `stream assign list`.

A *cursor* is a consumer group's committed offset in a partition of a stream's topic: the
offset of the next record the group will read. `stream cursor list` shows it beside the
partition's real end (never the broker's reported high watermark, which Tansu under-counts)
and the time lag between the newest record and the last one the group consumed.

Deleting cursors
    Kafka's OffsetDelete is not exposed by the Python client, so `delete_cursors` works at
    the group level: for each selected group it reads all of the group's committed offsets,
    deletes the group (DeleteGroups), and commits back the offsets that were not selected
    (other topics, other streams, other partitions) in one request. This is done only for
    groups with no active member: a group that is being consumed is refused with an error
    (Kafka refuses to delete a non-empty group; Tansu would delete it, so we check first).
    A consumer that joins the group in the instant between the two steps starts from its
    `auto.offset.reset` position on the partitions whose cursors are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from tenacity import retry, retry_if_exception, retry_if_exception_type, stop_after_attempt, wait_incrementing

from .. import ace, kafka, policy
from ..errors import InvalidArgument, NotFound, PermissionDenied, StreamreplError
from ..kafka import KafkaError, KafkaException, Message, TopicPartition
from ..model import Stream
from ..paths import kafka_topic_name
from ..registry import Cluster, Registry
from ..streams import Resolved, load


def _read_at(c: Any, tp: TopicPartition, offset: int, end: int) -> Message | None:
    """The first record that is not a filler at or after `offset` (and before `end`)."""
    if offset >= end:
        return None
    c.assign([TopicPartition(tp.topic, tp.partition, offset)])
    deadline = time.monotonic() + kafka.REQUEST_TIMEOUT
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(100, timeout=0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if kafka.is_partition_eof(err):
                        return None
                    continue
                if cast(int, m.offset()) >= end:
                    return None
                if not policy.is_filler(m.headers()):
                    return m
        return None
    finally:
        c.unassign()


# -- selection ---------------------------------------------------------------------------------------
@dataclass
class Selection:
    r: Resolved
    rec: Stream
    #: Kafka topic -> stream topic name, for the selected topics of the stream
    topics: dict[str, str]
    partition: int | None

    def wants(self, kafka_topic: str, partition: int | None = None) -> bool:
        if kafka_topic not in self.topics:
            return False
        return self.partition is None or partition is None or partition == self.partition


def select(reg: Registry, path: str, topic: str | None, partition: int | None) -> Selection:
    if partition is not None and not topic:
        raise InvalidArgument("-partition needs -topic: name the topic whose partition you mean")
    if partition is not None and partition < 0:
        raise InvalidArgument(f"-partition {partition} is negative; partitions are numbered from 0")
    r, rec = load(reg, path)
    names = list(rec.topics)
    if topic:
        if topic not in names:
            raise NotFound(f"topic '{topic}' does not exist in stream {r.path}; see 'streamrepl stream topic list'")
        n = int(rec.topics[topic].partitions)
        if partition is not None and partition >= n:
            raise NotFound(
                f"topic '{topic}' of stream {r.path} has {n} partitions (0..{n - 1}); no partition {partition}"
            )
        names = [topic]
    return Selection(r, rec, {kafka_topic_name(r.path, t): t for t in names}, partition)


def _groups(sel: Selection, admin: kafka.GroupAdmin, group: str | None) -> list[str]:
    if group:
        return [group]
    return kafka.list_groups(sel.r.cluster, admin)


# -- cursor list -------------------------------------------------------------------------------------
CURSOR_COLUMNS = (
    "consumergroup",
    "topic",
    "partitionid",
    "produceroffset",
    "committedoffset",
    "consumerlagmillis",
    "lag",
)


def list_cursors(
    reg: Registry, path: str, group: str | None = None, topic: str | None = None, partition: int | None = None
) -> list[dict[str, Any]]:
    sel = select(reg, path, topic, partition)
    cluster = sel.r.cluster
    admin = kafka.GroupAdmin(cluster)
    committed = kafka.committed_offsets(cluster, admin, _groups(sel, admin, group), sel.wants)
    cells = sorted(
        (g, sel.topics[kt], p, off)
        for g, (offs, _) in committed.items()
        for (kt, p), off in offs.items()
        if sel.wants(kt, p)
    )
    if not cells:
        return []
    c = kafka.consumer(cluster)
    ends: dict[tuple[str, int], int] = {}
    newest: dict[tuple[str, int], int | None] = {}
    stamps: dict[tuple[str, int, int], int | None] = {}
    rows = []
    try:
        for g, t, p, off in cells:
            kt = kafka_topic_name(sel.r.path, t)
            tp = TopicPartition(kt, p)
            if (kt, p) not in ends:
                ends[(kt, p)] = kafka.true_end(c, tp)
            end = ends[(kt, p)]
            lag = max(0, end - off)
            lagmillis = 0
            if lag > 0:
                if (kt, p) not in newest:
                    last = kafka.last_record(c, tp, end)
                    newest[(kt, p)] = (
                        last.timestamp()[1] if last is not None and not policy.is_filler(last.headers()) else None
                    )
                key = (kt, p, off)
                if key not in stamps:
                    low, _ = kafka.watermarks(c, tp)
                    ref = _read_at(c, tp, max(off - 1, low, 0), end)
                    stamps[key] = ref.timestamp()[1] if ref is not None else None
                new, ref_ts = newest[(kt, p)], stamps[key]
                if new is not None and ref_ts is not None and new > 0 and ref_ts > 0:
                    lagmillis = max(0, new - ref_ts)
            rows.append(
                {
                    "consumergroup": g,
                    "topic": t,
                    "partitionid": p,
                    "produceroffset": end - 1,
                    "committedoffset": off,
                    "consumerlagmillis": lagmillis,
                    "lag": lag,
                }
            )
    finally:
        c.close()
    return rows


# -- cursor delete ------------------------------------------------------------------------------------
def _check_delete_perm(sel: Selection) -> None:
    me = ace.current_identity()
    if ace.allows(sel.rec.aces.adminperm, me) or ace.allows(sel.rec.aces.consumeperm, me):
        return
    raise PermissionDenied(
        f"user '{me.user}' lacks adminperm and consumeperm on stream {sel.r.path}, one of which is needed to"
        f" delete cursors; ask a user with adminperm to grant it (streamrepl stream edit -path {sel.r.path}"
        " -consumeperm ...)"
    )


def delete_cursors(
    reg: Registry, path: str, group: str | None = None, topic: str | None = None, partition: int | None = None
) -> list[dict[str, Any]]:
    """Delete the selected committed cursors; returns the rows deleted (group, topic, partition, offset)."""
    sel = select(reg, path, topic, partition)
    _check_delete_perm(sel)
    cluster = sel.r.cluster
    admin = kafka.GroupAdmin(cluster)
    everything = kafka.committed_offsets(cluster, admin, _groups(sel, admin, group))
    doomed = {
        g: {k: v for k, v in offs.items() if sel.wants(*k)}
        for g, (offs, _) in everything.items()
        if any(sel.wants(*k) for k in offs)
    }
    if not doomed:
        return []
    info = kafka.describe_groups(cluster, admin, sorted(doomed))
    busy = sorted(g for g in doomed if info.get(g) is not None and info[g].active)
    if busy:
        raise StreamreplError(
            f"consumer group{'s' if len(busy) > 1 else ''} {', '.join(busy)} "
            f"{'have' if len(busy) > 1 else 'has'} active members; their cursors cannot be deleted while they"
            " consume: stop the consumers (see 'streamrepl stream assign list') and try again"
        )
    rows = []
    for g, gone in sorted(doomed.items()):
        offs, meta = everything[g]
        keep = [
            kafka.group_offset(kt, p, off, meta.get((kt, p))) for (kt, p), off in offs.items() if (kt, p) not in gone
        ]
        _delete_group(cluster, g)
        if keep:
            _restore(cluster, g, keep)
        rows += [
            {"consumergroup": g, "topic": sel.topics[kt], "partitionid": p, "committedoffset": off}
            for (kt, p), off in sorted(gone.items())
        ]
    return rows


# After Tansu drops a connection (it does on the first commit to a group it has just deleted),
# the admin client that saw it can time out on every later request: each attempt uses a new one.
_STOP = stop_after_attempt(5)
_WAIT = wait_incrementing(start=0.2, increment=0.2)  # 0.2 s, 0.4 s, ... between attempts


def _delete_group(cluster: Cluster, group: str) -> None:
    try:
        _delete_group_attempt(cluster, group)
    except KafkaException:
        raise kafka.unreachable(cluster, f"deleting the cursors of group {group}") from None


@retry(retry=retry_if_exception(kafka.is_transport), stop=_STOP, wait=_WAIT, reraise=True)
def _delete_group_attempt(cluster: Cluster, group: str) -> None:
    admin = kafka.admin_client(cluster)  # must outlive its future
    try:
        admin.delete_consumer_groups([group], request_timeout=kafka.REQUEST_TIMEOUT)[group].result()
    except KafkaException as e:
        del admin  # settled: not kept by the traceback while the next attempt waits (kafka/groups.py, GroupAdmin)
        if kafka.error_code(e) == KafkaError.NON_EMPTY_GROUP:
            raise StreamreplError(f"consumer group {group} became active; stop its consumers and try again") from None
        if kafka.error_code(e) == KafkaError.GROUP_ID_NOT_FOUND:
            return
        raise


def _restore(cluster: Cluster, group: str, keep: list[TopicPartition]) -> None:
    try:
        _restore_attempt(cluster, group, keep)
    except (KafkaException, StreamreplError) as last:
        lost = ", ".join(f"{tp.topic}[{tp.partition}]={tp.offset}" for tp in keep)
        raise StreamreplError(
            f"deleted group {group} but could not restore its other cursors ({last}); commit them again: {lost}"
        ) from None


@retry(retry=retry_if_exception_type((KafkaException, StreamreplError)), stop=_STOP, wait=_WAIT, reraise=True)
def _restore_attempt(cluster: Cluster, group: str, keep: list[TopicPartition]) -> None:
    admin = kafka.GroupAdmin(cluster)
    bad = kafka.commit_offsets(admin, group, keep)
    if bad:
        raise StreamreplError(str(bad[0].error))


# -- assign list --------------------------------------------------------------------------------------
ASSIGN_COLUMNS = ("consumergroup", "consumerid", "clientid", "host", "topic", "partitionid", "state")


def list_assignments(
    reg: Registry, path: str, group: str | None = None, topic: str | None = None, partition: int | None = None
) -> list[dict[str, Any]]:
    """One row per (group, member, partition of the stream) the member reads.

    A member whose assignment the broker does not report (Tansu) gets one row with an empty
    topic and partition; it is listed when its group has committed cursors in the selection.
    """
    sel = select(reg, path, topic, partition)
    cluster = sel.r.cluster
    admin = kafka.GroupAdmin(cluster)
    groups = _groups(sel, admin, group)
    info = kafka.describe_groups(cluster, admin, groups)
    unknown = [g for g, gi in info.items() if any(m.assignment is None for m in gi.members)]
    readers = {
        g
        for g, (offs, _) in kafka.committed_offsets(cluster, admin, unknown).items()
        if any(sel.wants(*k) for k in offs)
    }
    rows = []
    for g in sorted(info):
        gi = info[g]
        for m in sorted(gi.members, key=lambda m: m.member_id):
            base: dict[str, Any] = {
                "consumergroup": g,
                "consumerid": m.member_id,
                "clientid": m.client_id,
                "host": m.host,
            }
            if m.assignment is None:
                if g in readers:
                    rows.append({**base, "topic": None, "partitionid": None, "state": gi.state})
                continue
            for kt, p in sorted(m.assignment):
                if sel.wants(kt, p):
                    rows.append({**base, "topic": sel.topics[kt], "partitionid": p, "state": gi.state})
    return rows
