"""What `replica list` makes of the links of a stream: the gateways' reports (statustopic.py) and measured work.

Pending work is measured, not taken from the reports: the source's and the replica's real
partition ends are read when `replica list` runs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, cast

from . import journal, kafka, policy, statustopic, topics
from .divergence import resync_hint
from .metastore import MetaStore
from .model import Replica, ReplicaState, Stream
from .paths import StreamPath, kafka_topic_name
from .registry import Cluster, Registry
from .replication.links import RUNNING_STATES, Unit
from .statustopic import no_gateway_error, read, stalled_error, unheld

BYTES_SAMPLE = 20000


def _replica_lists_upstream(reg: Registry, entry: Replica, src_path: str) -> tuple[bool, Stream | None]:
    try:
        cluster = reg.get(entry.cluster)
    except Exception:  # noqa: BLE001
        return False, None
    rec = MetaStore(cluster).get(entry.stream)
    if rec is None:
        return False, None
    return rec.upstream(src_path) is not None, rec


def _pending_detail(cluster: Cluster, tp: tuple[str, int], start: int, end: int) -> tuple[int, int, int]:
    """(bytes, oldest timestamp, newest timestamp) of the records in [start, end) of a source partition."""
    c = kafka.consumer(cluster)
    total = seen = 0
    oldest = newest = 0
    try:
        try:
            for m in kafka.read_partition(
                c, kafka.TopicPartition(tp[0], tp[1], start), timeout=5, batch=5000, wait=0.05
            ):
                if cast(int, m.offset()) >= end:
                    break
                ts = m.timestamp()[1]
                oldest = oldest or ts
                newest = ts
                total += len(m.value() or b"") + len(m.key() or b"")
                seen += 1
                if seen >= BYTES_SAMPLE:
                    break
        except TimeoutError:
            pass  # an estimate from the records read in time
        if seen and seen < end - start:
            total = total * (end - start) // seen
        last = kafka.last_record(c, kafka.TopicPartition(*tp), end)
        if last is not None:
            newest = last.timestamp()[1]
    finally:
        c.close()
    return total, oldest, newest


def link_row(reg: Registry, src: Any, srec: Stream, entry: Replica) -> dict[str, Any]:
    """Pending work, state and last error of the link from `src` to the replica `entry`."""
    row: dict[str, Any] = {
        "isUptodate": False,
        "putsPending": 0,
        "bytesPending": 0,
        "minPendingTS": 0,
        "maxPendingTS": 0,
        "lasterror": "",
        "errorPartitions": 0,  # always there: scripts read columns by position
        "syncFallback": "",  # a synchronous link that a proxy answers asynchronously (proxy_fallback)
    }
    if entry.synchronous:
        row["syncFallback"] = proxy_fallback(src.cluster, str(src.path), entry.path)
    agreed, drec = _replica_lists_upstream(reg, entry, str(src.path))
    gone = _replica_gone(src, entry, drec)
    if gone:
        row["replicaState"] = str(ReplicaState.ERROR)
        row["lasterror"] = gone
        return row
    assert drec is not None
    if not agreed:
        row["replicaState"] = str(ReplicaState.WAITING_FOR_UPSTREAM)
        row["lasterror"] = (
            f"waiting for the replica to accept this upstream: run 'streamrepl stream upstream add"
            f" -path {entry.path} -upstream {src.path}'"
        )
    present = kafka.topics(src.cluster)
    srec = topics.adopt_strays(src, srec, present)
    unadopted = topics.strays(src, srec, present)
    if unadopted:
        row["lasterror"] = topics.unadopted_warning(src, unadopted)
    dst_cluster = reg.get(entry.cluster)
    dst_path = StreamPath(entry.cluster, entry.stream)
    pairs = []
    for topic, meta in srec.topics.items():
        for p in range(meta.partitions):
            pairs.append((topic, p))
    src_ends = kafka.partition_ends(src.cluster, [(kafka_topic_name(src.path, t), p) for t, p in pairs])
    dst_ends = kafka.partition_ends(dst_cluster, [(kafka_topic_name(dst_path, t), p) for t, p in pairs])
    for topic, p in pairs:
        s_tp = (kafka_topic_name(src.path, topic), p)
        s_end = src_ends.get(s_tp, 0)
        d_end = dst_ends.get((kafka_topic_name(dst_path, topic), p), 0)
        if s_end > d_end:
            row["putsPending"] += s_end - d_end
            nbytes, oldest, newest = _pending_detail(src.cluster, s_tp, d_end, s_end)
            row["bytesPending"] += nbytes
            if oldest and (not row["minPendingTS"] or oldest < row["minPendingTS"]):
                row["minPendingTS"] = oldest
            row["maxPendingTS"] = max(row["maxPendingTS"], newest)
    # The link's partitions as they are now: a topic deleted or renamed at the source leaves its reports behind.
    current = {f"{t}|{p}" for t, p in pairs}
    reports = {
        k: v for k, v in read(dst_cluster, f"unit|{entry.path}|{src.path}|").items() if k.split("|", 3)[-1] in current
    }
    # Gateways apply a link that is agreed, not paused, and not owned by autosetup's copy.
    applied = agreed and not entry.paused and entry.state in RUNNING_STATES
    held = False  # by live gateways, every partition of the link
    if agreed and not entry.paused:
        gateways = read(dst_cluster, "gateway|")  # one read of the status topic serves every check
        waiting = no_gateway_error(dst_cluster, gateways)
        if applied and not waiting:
            waiting = stalled_error(dst_cluster, gateways, reports, set(pairs))
        if waiting:
            row["lasterror"] = waiting  # before a warning about topics: nothing is replicated at all
            if applied:
                row["replicaState"] = str(ReplicaState.WAITING_FOR_GATEWAY)
        elif applied:
            units = [Unit(dst_path, t, p).key for t, p in pairs if not srec.topics[t].deleting]
            held = not unheld(gateways, units)
            unread = _source_unread(gateways, str(src.path), entry.path, srec.created)
            if unread:
                row["replicaState"] = str(ReplicaState.ERROR)
                row["lasterror"] = unread
                held = False
    errors = _partition_errors(reports)
    lost, nlost = _lost_own_records(src, srec, entry, drec, src_ends, dst_ends, pairs) if not errors else ("", 0)
    if lost:
        row["replicaState"] = str(ReplicaState.ERROR)
        row["lasterror"] = lost
        row["errorPartitions"] = nlost
    if not errors and not lost:
        lost, nlost = _replica_misshapen(src, srec, entry, dst_cluster, dst_path)
        if not lost and srec.upstream(entry.path) is None:
            lost, nlost = _written_by_another(src, entry, reports, src_ends, dst_ends, pairs, dst_path, dst_cluster)
        if lost:
            row["replicaState"] = str(ReplicaState.ERROR)
            row["lasterror"] = lost
            row["errorPartitions"] = nlost
    if errors:
        row["replicaState"] = str(ReplicaState.ERROR)
        row["lasterror"] = errors[0].get("error", "")
        row["errorPartitions"] = len(errors)
    pending_resync = journal.resync_note(str(src.path), entry.path, drec) or journal.failback_note(
        str(src.path), srec, entry.path
    )
    if pending_resync and not errors:
        row["lasterror"] = pending_resync
    # Up to date: nothing pending, and a live gateway holds every partition (or the link is paused on purpose).
    caught_up = not errors and not lost and not unadopted and not pending_resync and row["putsPending"] == 0
    row["isUptodate"] = agreed and caught_up and (entry.paused or held)
    return row


def proxy_fallback(cluster: Cluster, src: str, replica: str, now_ms: float | None = None) -> str:
    """What the proxies of the source's cluster (`proxy start`, proxy/holds.py) report of a synchronous link they
    fell back to asynchronous for: since when and why, "" when no live proxy did."""
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    reports = read(cluster, "proxy|")
    fallen = [
        r
        for r in reports.values()
        if r.get("source") == src
        and r.get("replica") == replica
        and r.get("mode") == "async"
        and not r.get("stopped")
        and now_ms - r.get("updated", 0) <= statustopic.LIVE_SECONDS * 1000
    ]
    if not fallen:
        return ""
    first = min(fallen, key=lambda r: r.get("since", 0))
    when = datetime.fromtimestamp(first.get("since", 0) / 1000, tz=UTC).isoformat(timespec="seconds")
    return (
        f"asynchronous since {when} on {len(fallen)} proxy(ies), {first.get('proxy')} first: {first.get('why')};"
        f" synchronous again once the replica holds what they passed"
    )


def _source_unread(gateways: dict[str, dict[str, Any]], src: str, dst: str, created: int = 0) -> str:
    """What a live gateway says keeps it from reading the link's source (its plan's problems), "" if none does.
    `created`: when the source stream was made (ms); a gateway that found it missing before then has not re-read
    the metadata yet (the source's cluster came back empty and the stream was made again): not a problem."""
    now_ms = time.time() * 1000
    for r in gateways.values():
        if not statustopic.is_live(r, now_ms):
            continue
        for problem in r.get("problems", []):
            missing = str(problem).endswith(" does not exist")
            if missing and created and r.get("planned", now_ms) <= created:
                continue
            if str(problem).startswith(f"upstream {src} of {dst}"):
                return (
                    f"gateway {r.get('gateway')} cannot read the source, so nothing is replicated: {problem}; mend"
                    f" the gateway's registry entry of the source's cluster (or its network), and it goes on by itself"
                )
    return ""


def _replica_misshapen(
    src: Any, srec: Stream, entry: Replica, dst_cluster: Cluster, dst_path: StreamPath
) -> tuple[str, int]:
    """A replica topic with another partition count than its source's (made by a plain producer's write, which gets the
    broker's default count): what to say of the first and how many there are ("", 0: none)."""
    present = kafka.topics(dst_cluster)
    found = [
        (t, present[kafka_topic_name(dst_path, t)], meta.partitions)
        for t, meta in srec.topics.items()
        if not meta.deleting and present.get(kafka_topic_name(dst_path, t), meta.partitions) != meta.partitions
    ]
    if not found:
        return "", 0
    topic, got, want = found[0]
    return (
        f"replica topic {entry.path}:{topic} has {got} partitions, its source {src.path}:{topic} {want}: it was made"
        f" again by something other than streamrepl (a producer's write gets the broker's default count); the"
        f" partitions past {want - 1} are not replicated. Run {resync_hint(str(src.path), entry.path, topic)}"
        f" into a topic made again with {want} partitions"
    ), len(found)


def _written_by_another(
    src: Any,
    entry: Replica,
    reports: dict[str, dict[str, Any]],
    src_ends: dict[tuple[str, int], int],
    dst_ends: dict[tuple[str, int], int],
    pairs: list[tuple[str, int]],
    dst_path: StreamPath,
    dst_cluster: Cluster,
) -> tuple[str, int]:
    """Replica partitions that end past both their source's end and what their gateway wrote (its report's `next`):
    something other than the gateway wrote into the replica. Found while the source is idle, and not blamed on the
    source, which did not change. When the replica's last record there is a replicated one (it carries its origin),
    a gateway wrote it and it is the source that ends below it now (its stream made again under its path, or its
    broker came back without records): a divergence. What to say of the first and how many there are ("", 0)."""
    found: list[tuple[str, int, int, int, int]] = []
    for topic, p in pairs:
        report = reports.get(statustopic.unit_key(entry.path, str(src.path), topic, p))
        wrote = int(report.get("next", -1)) if report is not None else -1
        s_end = src_ends.get((kafka_topic_name(src.path, topic), p), 0)
        d_end = dst_ends.get((kafka_topic_name(dst_path, topic), p), 0)
        if wrote >= 0 and d_end > max(s_end, wrote):
            found.append((topic, p, d_end, max(s_end, wrote), s_end))
    if not found:
        return "", 0
    topic, p, d_end, ours, s_end = found[0]
    c = kafka.consumer(dst_cluster)
    try:
        last = kafka.last_record(c, kafka.TopicPartition(kafka_topic_name(dst_path, topic), p), d_end)
    finally:
        c.close()
    if last is not None and policy.origin_of(last.headers(), "") != "":
        return (
            f"source {src.path}:{topic} partition {p} diverged from its replica {entry.path}: it ends at offset"
            f" {s_end}, below the {d_end} records the replica holds from it (its stream or topic was made again, or"
            f" its broker came back without records); the replica keeps them. Compare with 'streamrepl diffstreams"
            f" -src {src.path} -dst {entry.path}', then {resync_hint(str(src.path), entry.path, topic)}"
        ), len(found)
    return (
        f"replica {entry.path}:{topic} partition {p} was written by someone else: it ends at offset {d_end}, past"
        f" offset {ours}, where its source and the gateway's writes end ({d_end - ours} records that are not from"
        f" {src.path}); the partition stops when its source writes again. Find the producer that writes"
        f" into the replica and stop it (replicas are written by gateways only), then"
        f" {resync_hint(str(src.path), entry.path, topic)}"
    ), len(found)


def failback_entry(srec: Stream, listed: set[str]) -> Replica | None:
    """The old primary of a failback into `srec` that did not finish, as the replica entry it will have, while it is
    not registered yet (deleted, or not set up again yet): `replica list` shows it, with failback_row."""
    j = journal.failing_back(srec)
    old = str(j.get("old", "")) if j is not None else ""
    if not old or old in listed:
        return None
    cluster, _, stream = old.lstrip("/").partition("/")
    return Replica(path=old, cluster=cluster, stream="/" + stream, paused=True, state=ReplicaState.CREATE_SCHEDULE)


def failback_row(src: Any, srec: Stream, entry: Replica) -> dict[str, Any]:
    """The state columns of link_row for a failback_entry: nothing measured, the failback's note."""
    return {
        "isUptodate": False,
        "putsPending": 0,
        "bytesPending": 0,
        "minPendingTS": 0,
        "maxPendingTS": 0,
        "lasterror": journal.failback_note(str(src.path), srec, entry.path),
        "errorPartitions": 0,
        "syncFallback": "",
    }


def _lost_own_records(
    src: Any,
    srec: Stream,
    entry: Replica,
    drec: Stream,
    src_ends: dict[tuple[str, int], int],
    dst_ends: dict[tuple[str, int], int],
    pairs: list[tuple[str, int]],
) -> tuple[str, int]:
    """In a multi-master pair (the replica is also an upstream of the source): the replica lost records it had
    written and the source holds (its broker came back without them). Records are never copied back to their
    origin, so this link cannot catch up: the source's records past the replica's end are the replica's own. The
    link the other way is the one that diverged (divergence.py); its resync is the fix of both. What to say of the
    first such partition and how many there are ("", 0: none)."""
    if srec.upstream(entry.path) is None:
        return "", 0
    dst_path = StreamPath(entry.cluster, entry.stream)
    found: list[tuple[str, int, int, int]] = []
    c = kafka.consumer(src.cluster)
    try:
        for topic, p in pairs:
            s_tp = (kafka_topic_name(src.path, topic), p)
            s_end, d_end = src_ends.get(s_tp, 0), dst_ends.get((kafka_topic_name(dst_path, topic), p), 0)
            if s_end <= d_end:
                continue
            last = kafka.last_record(c, kafka.TopicPartition(*s_tp), s_end)
            if (
                last is None
                or cast(int, last.offset()) < d_end
                or policy.origin_of(last.headers(), srec.uuid) != drec.uuid
            ):
                continue
            found.append((topic, p, s_end, d_end))
    finally:
        c.close()
    if not found:
        return "", 0
    topic, p, s_end, d_end = found[0]
    return (
        f"{entry.path} lost records it had written: {src.path}:{topic} partition {p} holds {s_end - d_end} of them"
        f" past offset {d_end}, where {entry.path} now ends (its broker came back without them?); records are not"
        f" copied back to their origin, so this link cannot catch up, and the link {entry.path} -> {src.path} has"
        f" diverged. Run 'streamrepl stream replica list -path {entry.path}' to see it, then"
        f" {resync_hint(entry.path, str(src.path), topic)}"
    ), len(found)


def link_error(reg: Registry, src: Any, srec: Stream, entry: Replica) -> str | None:
    """Why the link from `src` to the replica `entry` is in ERROR (None: it is not), as link_row says, without
    counting its pending work: `replica resume` needs only this, and the count reads a sample of the pending records
    of every partition (0.6-0.9 s with a backlog)."""
    _, drec = _replica_lists_upstream(reg, entry, str(src.path))
    gone = _replica_gone(src, entry, drec)
    if gone:
        return gone
    errors = _partition_errors(read(reg.get(entry.cluster), f"unit|{entry.path}|{src.path}|"))
    return str(errors[0].get("error", "")) if errors else None


def _replica_gone(src: Any, entry: Replica, drec: Stream | None) -> str:
    """Why the replica stream is not the one the link was made with, or no longer its replica (promoted); "": it is."""
    if drec is None:
        return (
            f"replica stream {entry.path} does not exist (deleted, or its cluster {entry.cluster} came back without"
            f" it); run 'streamrepl stream replica autosetup -path {src.path} -replica {entry.path}' to set it up"
            f" again, or 'streamrepl stream replica remove -path {src.path} -replica {entry.path}'"
        )
    # Promoted: its uuid changed too (it took over the identity of its history), but it is the same stream.
    promoted = journal.promotion_note(str(src.path), entry.path, entry.uuid, drec)
    if promoted:
        return promoted
    if entry.uuid and drec.uuid != entry.uuid:
        return (
            f"replica stream {entry.path} was deleted and created again (uuid {entry.uuid}, now"
            f" {drec.uuid}): it is another stream; run 'streamrepl stream replica remove -path {src.path}"
            f" -replica {entry.path}', then add it again"
        )
    return ""


def _partition_errors(reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The gateways' reports of the link's partitions in error, the latest first."""
    errors = [r for r in reports.values() if r.get("state") == "error"]
    return sorted(errors, key=lambda r: r.get("updated", 0), reverse=True)
