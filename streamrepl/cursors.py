"""Committed cursors of consumer groups: list, delete, assignments, and their replication.

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

Group descriptions
    librdkafka first asks with ConsumerGroupDescribe (KIP-848) when a broker advertises it;
    Tansu answers that for classic groups with no members. When a group is reported as not
    empty but with no member, `describe_groups` asks again with the classic DescribeGroups.
    Tansu's DescribeGroups lists members but not their client id, host or assignment: the
    client id is then read from the member id (`<client.id>-<uuid>`, as librdkafka and the
    Java client build it) and the assignment is reported as unknown.

Cursor replication (contract point 6)
    `CursorReplicator` carries the committed offsets of every consumer group reading a source
    stream to a replica stream: offsets are preserved between copies, so an offset means the
    same record on both sides. It never moves a group's offset backwards, never touches a
    group that is active on the destination cluster, and never points a cursor past what the
    destination partition holds (it commits min(source offset, destination real end)).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from . import ace, broker, policy
from .errors import InvalidArgument, NotFound, PermissionDenied, StreamreplError
from .metastore import Record
from .paths import StreamPath, from_kafka_topic_name, kafka_topic_name
from .registry import Cluster, Registry
from .streams import Resolved, load

#: Consumer groups of streamrepl itself (gateways, readers): never listed, deleted or replicated.
INTERNAL_GROUP_PREFIX = "streamrepl-"

#: Group states in which the group has (or is getting) members.
_ACTIVE_STATES = {
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
}
_IDLE_STATES = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}

_MEMBER_ID_RE = re.compile(r"^(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

Offsets = dict[tuple[str, int], int]  # (Kafka topic, partition) -> committed offset


# -- broker helpers --------------------------------------------------------------------------------
def _legacy_admin(cluster: Cluster) -> AdminClient:
    """An admin client that uses the classic DescribeGroups API (see the module docstring)."""
    return AdminClient(
        broker.client_config(cluster, **{"api.version.request": False, "broker.version.fallback": "0.9.0"})
    )


def _settled(futures: dict[str, Any]) -> dict[str, Any]:
    """Wait for every future (each request carries its own timeout) and return result or exception per key.

    No error goes up while a request is pending: librdkafka aborts the whole process
    (rd_kafka_enq_once_del_source_return) when an admin client is destroyed with requests in flight,
    and callers drop their clients on errors."""
    out: dict[str, Any] = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result()
        except KafkaException as e:
            out[key] = e
    return out


def list_groups(cluster: Cluster, admin: AdminClient) -> list[str]:
    try:
        res = admin.list_consumer_groups(request_timeout=broker.REQUEST_TIMEOUT).result()
    except KafkaException:
        raise broker.unreachable(cluster, "listing consumer groups") from None
    return sorted(g.group_id for g in res.valid if not g.group_id.startswith(INTERNAL_GROUP_PREFIX))


def committed_offsets(
    cluster: Cluster, admin: AdminClient, groups: Iterable[str], wanted: Any = None
) -> dict[str, tuple[Offsets, dict[tuple[str, int], str]]]:
    """group -> ({(Kafka topic, partition): offset}, {(topic, partition): commit metadata}).

    `wanted(kafka_topic) -> bool` keeps only some topics. Requests go out together; a group
    whose offsets cannot be read is left out.
    """
    futures = {}
    for g in groups:
        try:
            futures[g] = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=broker.REQUEST_TIMEOUT
            )[g]
        except KafkaException:
            raise broker.unreachable(cluster, "reading committed offsets") from None
    out: dict[str, tuple[Offsets, dict[tuple[str, int], str]]] = {}
    for g, res in _settled(futures).items():
        if isinstance(res, KafkaException):
            err = res.args[0] if res.args else None
            if isinstance(err, KafkaError) and err.code() in (
                KafkaError._TRANSPORT,
                KafkaError._TIMED_OUT,
                KafkaError._ALL_BROKERS_DOWN,
            ):
                raise broker.unreachable(cluster, "reading committed offsets") from None
            continue
        offsets: Offsets = {}
        meta: dict[tuple[str, int], str] = {}
        for tp in res.topic_partitions or []:
            if tp.offset < 0 or tp.error is not None:
                continue
            if wanted is not None and not wanted(tp.topic):
                continue
            offsets[(tp.topic, tp.partition)] = tp.offset
            if tp.metadata:
                meta[(tp.topic, tp.partition)] = tp.metadata
        out[g] = (offsets, meta)
    return out


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    #: (Kafka topic, partition) pairs, or None when the broker does not report assignments
    assignment: list[tuple[str, int]] | None


@dataclass
class GroupInfo:
    group_id: str
    state: str
    members: list[Member] = field(default_factory=list)
    active: bool = False


def _state_name(state: Any) -> str:
    return str(getattr(state, "name", state) or "UNKNOWN").lower()


def _client_id(member_id: str, reported: str) -> str:
    if reported:
        return reported
    m = _MEMBER_ID_RE.match(member_id or "")
    return m.group(1) if m else ""


def _members(desc: Any) -> list[Member]:
    out = []
    for m in desc.members or []:
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        out.append(
            Member(
                member_id=m.member_id,
                client_id=_client_id(m.member_id, m.client_id or ""),
                host=(m.host or "").lstrip("/"),
                assignment=[(tp.topic, tp.partition) for tp in tps] or None,
            )
        )
    return out


def describe_groups(cluster: Cluster, admin: AdminClient, groups: list[str]) -> dict[str, GroupInfo]:
    """State and members of each group (see the module docstring for the Tansu workarounds)."""
    if not groups:
        return {}
    try:
        futures = admin.describe_consumer_groups(groups, request_timeout=broker.REQUEST_TIMEOUT)
    except KafkaException:
        raise broker.unreachable(cluster, "describing consumer groups") from None
    out: dict[str, GroupInfo] = {}
    retry: list[str] = []
    for g, d in _settled(futures).items():
        if isinstance(d, KafkaException):
            err = d.args[0] if d.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                out[g] = GroupInfo(g, "dead")
                continue
            raise broker.unreachable(cluster, "describing consumer groups") from None
        members = _members(d)
        active = d.state in _ACTIVE_STATES or bool(members)
        out[g] = GroupInfo(g, _state_name(d.state), members, active)
        if not members and d.state not in _IDLE_STATES:
            retry.append(g)
    if retry:
        try:
            legacy = _legacy_admin(cluster)  # must outlive its futures
            answers = _settled(legacy.describe_consumer_groups(retry, request_timeout=broker.REQUEST_TIMEOUT))
            for g, desc in answers.items():
                if isinstance(desc, KafkaException):
                    continue  # keep what the first answer said
                members = _members(desc)
                if members:
                    out[g].members = members
                    out[g].active = True
        except KafkaException:
            pass  # keep what the first answer said
    return out


def _read_at(c: Any, tp: TopicPartition, offset: int, end: int) -> Message | None:
    """The first record that is not a filler at or after `offset` (and before `end`)."""
    if offset >= end:
        return None
    c.assign([TopicPartition(tp.topic, tp.partition, offset)])
    deadline = time.monotonic() + broker.REQUEST_TIMEOUT
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(100, timeout=0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return None
                    continue
                if cast(int, m.offset()) >= end:
                    return None
                if not policy.is_filler(m.headers()):
                    return m
        return None
    finally:
        c.unassign()


def _tp(topic: str, partition: int, offset: int, metadata: str | None) -> TopicPartition:
    if metadata:
        return TopicPartition(topic, partition, offset, metadata=metadata)
    return TopicPartition(topic, partition, offset)


# -- selection ---------------------------------------------------------------------------------------
@dataclass
class Selection:
    r: Resolved
    rec: Record
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
    names = list(rec.get("topics", {}))
    if topic:
        if topic not in names:
            raise NotFound(f"topic '{topic}' does not exist in stream {r.path}; see 'streamrepl stream topic list'")
        n = int(rec["topics"][topic]["partitions"])
        if partition is not None and partition >= n:
            raise NotFound(
                f"topic '{topic}' of stream {r.path} has {n} partitions (0..{n - 1}); no partition {partition}"
            )
        names = [topic]
    return Selection(r, rec, {kafka_topic_name(r.path, t): t for t in names}, partition)


def _groups(sel: Selection, admin: AdminClient, group: str | None) -> list[str]:
    if group:
        return [group]
    return list_groups(sel.r.cluster, admin)


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
    admin = broker.admin(cluster)
    committed = committed_offsets(cluster, admin, _groups(sel, admin, group), sel.wants)
    cells = sorted(
        (g, sel.topics[kt], p, off)
        for g, (offs, _) in committed.items()
        for (kt, p), off in offs.items()
        if sel.wants(kt, p)
    )
    if not cells:
        return []
    c = broker.consumer(cluster)
    ends: dict[tuple[str, int], int] = {}
    newest: dict[tuple[str, int], int | None] = {}
    stamps: dict[tuple[str, int, int], int | None] = {}
    rows = []
    try:
        for g, t, p, off in cells:
            kt = kafka_topic_name(sel.r.path, t)
            tp = TopicPartition(kt, p)
            if (kt, p) not in ends:
                ends[(kt, p)] = broker.true_end(c, tp)
            end = ends[(kt, p)]
            lag = max(0, end - off)
            lagmillis = 0
            if lag > 0:
                if (kt, p) not in newest:
                    last = broker.last_record(c, tp, end)
                    newest[(kt, p)] = (
                        last.timestamp()[1] if last is not None and not policy.is_filler(last.headers()) else None
                    )
                key = (kt, p, off)
                if key not in stamps:
                    low, _ = c.get_watermark_offsets(tp, timeout=broker.REQUEST_TIMEOUT, cached=False)
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
    if ace.allows(sel.rec.get("adminperm", ""), me) or ace.allows(sel.rec.get("consumeperm", ""), me):
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
    admin = broker.admin(cluster)
    everything = committed_offsets(cluster, admin, _groups(sel, admin, group))
    doomed = {
        g: {k: v for k, v in offs.items() if sel.wants(*k)}
        for g, (offs, _) in everything.items()
        if any(sel.wants(*k) for k in offs)
    }
    if not doomed:
        return []
    info = describe_groups(cluster, admin, sorted(doomed))
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
        keep = [_tp(kt, p, off, meta.get((kt, p))) for (kt, p), off in offs.items() if (kt, p) not in gone]
        _delete_group(cluster, g)
        if keep:
            _restore(cluster, g, keep)
        rows += [
            {"consumergroup": g, "topic": sel.topics[kt], "partitionid": p, "committedoffset": off}
            for (kt, p), off in sorted(gone.items())
        ]
    return rows


def _transport(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)


# After Tansu drops a connection (it does on the first commit to a group it has just deleted),
# the admin client that saw it can time out on every later request: each attempt uses a new one.
def _delete_group(cluster: Cluster, group: str) -> None:
    for attempt in range(5):
        try:
            admin = broker.admin(cluster)  # must outlive its future
            admin.delete_consumer_groups([group], request_timeout=broker.REQUEST_TIMEOUT)[group].result()
            return
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.NON_EMPTY_GROUP:
                raise StreamreplError(
                    f"consumer group {group} became active; stop its consumers and try again"
                ) from None
            if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return
            if not _transport(e) or attempt == 4:
                raise broker.unreachable(cluster, f"deleting the cursors of group {group}") from None
        time.sleep(0.2 * (attempt + 1))


def _restore(cluster: Cluster, group: str, keep: list[TopicPartition]) -> None:
    last: Exception | None = None
    for attempt in range(5):
        try:
            admin = broker.admin(cluster)
            res = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, keep)], request_timeout=broker.REQUEST_TIMEOUT
            )[group].result()
            bad = [tp for tp in res.topic_partitions or [] if tp.error is not None]
            if not bad:
                return
            last = StreamreplError(str(bad[0].error))
        except KafkaException as e:
            last = e
        time.sleep(0.2 * (attempt + 1))
    lost = ", ".join(f"{tp.topic}[{tp.partition}]={tp.offset}" for tp in keep)
    raise StreamreplError(
        f"deleted group {group} but could not restore its other cursors ({last}); commit them again: {lost}"
    )


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
    admin = broker.admin(cluster)
    groups = _groups(sel, admin, group)
    info = describe_groups(cluster, admin, groups)
    unknown = [g for g, gi in info.items() if any(m.assignment is None for m in gi.members)]
    readers = {
        g for g, (offs, _) in committed_offsets(cluster, admin, unknown).items() if any(sel.wants(*k) for k in offs)
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


# -- cursor replication ---------------------------------------------------------------------------------
class CursorReplicator:
    """Carries committed offsets of consumer groups from a source stream to a replica stream.

    Holds its admin clients and a reader, so `run_once()` can be called every few seconds:
    a run costs one ListGroups and one OffsetFetch per group on each side, one DescribeGroups
    on the destination for the groups that need a change, and a read of a destination
    partition's end only where a source offset lies beyond its reported high watermark.
    """

    def __init__(self, src_cluster: Cluster, dst_cluster: Cluster, src_stream: StreamPath, dst_stream: StreamPath):
        self.src_cluster = src_cluster
        self.dst_cluster = dst_cluster
        self.src_stream = src_stream
        self.dst_stream = dst_stream
        self._src_admin = broker.admin(src_cluster)
        self._dst_admin = broker.admin(dst_cluster)
        self._reader: Any = None
        self.runs = 0
        self.commits = 0

    def _dst_reader(self) -> Any:
        if self._reader is None:
            self._reader = broker.consumer(self.dst_cluster)
        return self._reader

    def _source_topic(self, kafka_topic: str, topics: set[str] | None) -> str | None:
        tp = from_kafka_topic_name(self.src_stream.cluster, kafka_topic)
        if tp is None or tp.stream.path != self.src_stream.path:
            return None
        if topics is not None and tp.topic not in topics:
            return None
        return tp.topic

    def _dst_end(self, kt: str, p: int, needed: int) -> int:
        """The destination's end, read for real only when the reported high watermark is below `needed`."""
        c = self._dst_reader()
        tp = TopicPartition(kt, p)
        try:
            _, high = c.get_watermark_offsets(tp, timeout=broker.REQUEST_TIMEOUT, cached=False)
        except KafkaException:
            return -1  # topic or partition not replicated yet
        if high >= needed:
            return int(high)
        try:
            return broker.true_end(c, tp)
        except (KafkaException, TimeoutError):
            return int(high)

    def run_once(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Copy what moved since the last run; returns one dict per destination offset changed.

        `topics` limits the work to these stream topics (default: every topic of the stream).
        Each dict has group, topic, partition, source (the source offset), previous (the
        destination offset before, -1 when none) and offset (what was committed; below
        source when the destination does not hold the records up to source yet).
        """
        self.runs += 1
        try:
            return self._run(set(topics) if topics is not None else None)
        except StreamreplError:
            # Unreachable, or a client wedged by a dropped connection: start the next run afresh.
            self._src_admin = broker.admin(self.src_cluster)
            self._dst_admin = broker.admin(self.dst_cluster)
            raise

    def _run(self, wanted: set[str] | None) -> list[dict[str, Any]]:
        src_groups = list_groups(self.src_cluster, self._src_admin)
        src = committed_offsets(
            self.src_cluster,
            self._src_admin,
            src_groups,
            lambda kt: self._source_topic(kt, wanted) is not None,
        )
        # group -> {(dst Kafka topic, partition): (source offset, metadata, stream topic)}
        plan: dict[str, dict[tuple[str, int], tuple[int, str | None, str]]] = {}
        for g, (offs, meta) in src.items():
            for (kt, p), off in offs.items():
                t = self._source_topic(kt, wanted)
                if t is not None:
                    plan.setdefault(g, {})[(kafka_topic_name(self.dst_stream, t), p)] = (off, meta.get((kt, p)), t)
        if not plan:
            return []
        dst = committed_offsets(self.dst_cluster, self._dst_admin, sorted(plan))
        # group -> [(dst Kafka topic, partition, source offset, destination offset, metadata, stream topic)]
        moves: dict[str, list[tuple[str, int, int, int, str | None, str]]] = {}
        for g, cells in plan.items():
            current = dst.get(g, ({}, {}))[0]
            for (kt, p), (off, md, t) in cells.items():
                before = current.get((kt, p), -1)
                if off > before:
                    moves.setdefault(g, []).append((kt, p, off, before, md, t))
        if not moves:
            return []
        info = describe_groups(self.dst_cluster, self._dst_admin, sorted(moves))
        changed: list[dict[str, Any]] = []
        for g, todo in sorted(moves.items()):
            gi = info.get(g)
            if gi is not None and gi.active:
                continue  # consumed on the destination: its own commits win
            tps = []
            rows = []
            for kt, p, off, before, md, t in todo:
                end = self._dst_end(kt, p, off)
                target = min(off, end)
                if target <= before or target < 0:
                    continue
                tps.append(_tp(kt, p, target, md))
                rows.append(
                    {"group": g, "topic": t, "partition": p, "source": off, "previous": before, "offset": target}
                )
            if not tps:
                continue
            try:
                res = self._dst_admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(g, tps)], request_timeout=broker.REQUEST_TIMEOUT
                )[g].result()
            except KafkaException as e:
                if _transport(e):
                    self._dst_admin = broker.admin(self.dst_cluster)  # see _delete_group
                continue  # the group became active, or the broker is busy: next run
            ok = {(tp.topic, tp.partition) for tp in res.topic_partitions or [] if tp.error is None}
            for row, tp in zip(rows, tps, strict=True):
                if (tp.topic, tp.partition) in ok:
                    changed.append(row)
        self.commits += len(changed)
        return changed

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> CursorReplicator:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def sync_committed_offsets(
    src_cluster: Cluster,
    dst_cluster: Cluster,
    src_stream: StreamPath,
    dst_stream: StreamPath,
    topics: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One pass of cursor replication from `src_stream` to `dst_stream` (see CursorReplicator.run_once)."""
    with CursorReplicator(src_cluster, dst_cluster, src_stream, dst_stream) as r:
        return r.run_once(topics)
