"""What gateways report about the links they run, and what `replica list` makes of it.

Gateways write one record per replica partition (and one per gateway) to an internal
compacted topic in the destination cluster; readers keep the latest record per key.
Pending work is measured, not taken from the reports: the source's and the replica's real
partition ends are read when `replica list` runs.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from confluent_kafka import KafkaError, TopicPartition

from . import broker
from .metastore import MetaStore, Record
from .paths import StreamPath, kafka_topic_name
from .registry import Cluster, Registry

STATUS_TOPIC = "__streamrepl_status"
BYTES_SAMPLE = 20000


def unit_key(replica: str, upstream: str, topic: str, partition: int) -> str:
    return f"unit|{replica}|{upstream}|{topic}|{partition}"


def gateway_key(gateway_id: str) -> str:
    return f"gateway|{gateway_id}"


def ensure_topic(cluster: Cluster) -> None:
    if STATUS_TOPIC not in broker.topics(cluster):
        try:
            broker.create_topics(cluster, [(STATUS_TOPIC, 1, {"cleanup.policy": "compact"})])
        except Exception:  # noqa: BLE001 - another gateway created it first
            if STATUS_TOPIC not in broker.topics(cluster):
                raise


def read(cluster: Cluster, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Latest report per key (optionally only keys starting with `prefix`)."""
    out: dict[str, dict[str, Any]] = {}
    if STATUS_TOPIC not in broker.topics(cluster):
        return out
    c = broker.consumer(cluster)
    try:
        c.assign([TopicPartition(STATUS_TOPIC, 0, 0)])
        deadline = time.monotonic() + broker.REQUEST_TIMEOUT
        while time.monotonic() < deadline:
            for m in c.consume(5000, timeout=0.05):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    continue
                key = (m.key() or b"").decode()
                if not key.startswith(prefix):
                    continue
                if m.value() is None:
                    out.pop(key, None)
                else:
                    out[key] = json.loads(cast(bytes, m.value()))
        return out
    finally:
        c.close()


def _replica_lists_upstream(reg: Registry, entry: dict[str, Any], src_path: str) -> tuple[bool, Record | None]:
    try:
        cluster = reg.get(entry["cluster"])
    except Exception:  # noqa: BLE001
        return False, None
    rec = MetaStore(cluster).get(entry["stream"])
    if rec is None:
        return False, None
    return any(u["path"] == src_path for u in rec.get("upstreams", [])), rec


def _ends(cluster: Cluster, names: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    present = broker.topics(cluster)
    c = broker.consumer(cluster)
    try:
        return broker.true_ends(c, [TopicPartition(t, p) for t, p in names if t in present])
    finally:
        c.close()


def _pending_detail(cluster: Cluster, tp: tuple[str, int], start: int, end: int) -> tuple[int, int, int]:
    """(bytes, oldest timestamp, newest timestamp) of the records in [start, end) of a source partition."""
    c = broker.consumer(cluster)
    total = seen = 0
    oldest = newest = 0
    try:
        c.assign([TopicPartition(tp[0], tp[1], start)])
        deadline = time.monotonic() + 5
        while seen < BYTES_SAMPLE and time.monotonic() < deadline:
            msgs = c.consume(5000, timeout=0.05)
            stop = False
            for m in msgs:
                if m.error() is not None:
                    stop = stop or cast(KafkaError, m.error()).code() == KafkaError._PARTITION_EOF
                    continue
                if cast(int, m.offset()) >= end:
                    stop = True
                    break
                ts = m.timestamp()[1]
                oldest = oldest or ts
                newest = ts
                total += len(m.value() or b"") + len(m.key() or b"")
                seen += 1
            if stop:
                break
        if seen and seen < end - start:
            total = total * (end - start) // seen
        last = broker.last_record(c, TopicPartition(*tp), end)
        if last is not None:
            newest = last.timestamp()[1]
    finally:
        c.close()
    return total, oldest, newest


def link_row(reg: Registry, src: Any, srec: Record, entry: dict[str, Any]) -> dict[str, Any]:
    """Pending work, state and last error of the link from `src` to the replica `entry`."""
    row: dict[str, Any] = {
        "isUptodate": False,
        "putsPending": 0,
        "bytesPending": 0,
        "minPendingTS": 0,
        "maxPendingTS": 0,
        "lasterror": "",
    }
    agreed, drec = _replica_lists_upstream(reg, entry, str(src.path))
    if drec is None:
        row["replicaState"] = "REPLICA_STATE_ERROR"
        row["lasterror"] = f"replica stream {entry['path']} does not exist"
        return row
    if not agreed:
        row["replicaState"] = "REPLICA_STATE_WAITING_FOR_UPSTREAM"
        row["lasterror"] = (
            f"waiting for the replica to accept this upstream: run 'streamrepl stream upstream add"
            f" -path {entry['path']} -upstream {src.path}'"
        )
    dst_cluster = reg.get(entry["cluster"])
    dst_path = StreamPath(entry["cluster"], entry["stream"])
    pairs = []
    for topic, meta in srec.get("topics", {}).items():
        for p in range(meta["partitions"]):
            pairs.append((topic, p))
    src_ends = _ends(src.cluster, [(kafka_topic_name(src.path, t), p) for t, p in pairs])
    dst_ends = _ends(dst_cluster, [(kafka_topic_name(dst_path, t), p) for t, p in pairs])
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
    reports = read(dst_cluster, f"unit|{entry['path']}|{src.path}|")
    errors = [r for r in reports.values() if r.get("state") == "error"]
    if errors:
        worst = max(errors, key=lambda r: r.get("updated", 0))
        row["replicaState"] = "REPLICA_STATE_ERROR"
        row["lasterror"] = worst.get("error", "")
        row["errorPartitions"] = len(errors)
    row["isUptodate"] = agreed and not errors and row["putsPending"] == 0
    return row
