"""Streams as readers see them: a stream path resolved to its cluster and metadata record, the permission check,
the Kafka topic configs a stream's settings stand for, and `stream info`/`stream list`. What changes a stream
(create, edit, delete) is stream_ops.py.

Settings that have a Kafka topic-config counterpart (kafka_configs) are applied to every Kafka topic of
the stream:

    ttl (seconds, 0 = forever)      -> retention.ms (ttl * 1000, or -1)
    defaulttimestamptype            -> message.timestamp.type (CreateTime | LogAppendTime)
    compression off|lz4|zlib        -> compression.type uncompressed|lz4|gzip (zlib is DEFLATE, as gzip)
    compression snappy|zstd         -> compression.type snappy|zstd (streamrepl extensions)
    compression inherit (default)   -> the broker's default; on edit, compression.type producer
    compact true|false              -> cleanup.policy compact|delete
    mincompactionlag (ms)           -> min.compaction.lag.ms
    deleteretention (ms)            -> delete.retention.ms

`lzf` has no Kafka codec and is refused. The other settings (autocreate, defaultpartitions,
the ACEs) live only in the stream's metadata record.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from . import ace
from .errors import NotFound, PermissionDenied
from .metastore import MetaStore
from .model import Settings, Stream
from .paths import StreamPath, parse_stream
from .registry import Cluster, Registry

PERMS = ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")  # the fields of model.Aces
KAFKA_COMPRESSION = {"off": "uncompressed", "lz4": "lz4", "zlib": "gzip", "snappy": "snappy", "zstd": "zstd"}
TIMESTAMP_TYPES = {"createtime": "CreateTime", "logappendtime": "LogAppendTime"}
MAX_LONG = 2**63 - 1
#: The most partitions a topic can be created with or grown to: the limit confluent-kafka's NewTopic and
#: NewPartitions check (Kafka's own protocol field would take 2**31 - 1).
MAX_PARTITIONS = 100_000
#: Settings a Kafka topic config holds as a 64-bit number (ttl in milliseconds).
MAXIMA = {"ttl": MAX_LONG // 1000, "mincompactionlag": MAX_LONG, "deleteretention": MAX_LONG}


@dataclass(frozen=True)
class Resolved:
    path: StreamPath
    cluster: Cluster

    @functools.cached_property
    def store(self) -> MetaStore:
        return MetaStore(self.cluster)


def resolve(reg: Registry, text: str) -> Resolved:
    sp = parse_stream(text, set(reg.clusters), reg.default)
    return Resolved(sp, reg.get(sp.cluster))


def load(reg: Registry, text: str) -> tuple[Resolved, Stream]:
    r = resolve(reg, text)
    rec = r.store.get(r.path.path)
    if rec is None:
        raise NotFound(f"stream {r.path} does not exist; create it with 'streamrepl stream create -path {r.path}'")
    return r, rec


def kafka_configs(s: Settings, timestamptype: str | None = None) -> dict[str, str]:
    conf = {
        "retention.ms": str(s.ttl * 1000 if s.ttl > 0 else -1),
        "message.timestamp.type": TIMESTAMP_TYPES[timestamptype or s.defaulttimestamptype],
        "cleanup.policy": "compact" if s.compact else "delete",
        "min.compaction.lag.ms": str(s.mincompactionlag),
        "delete.retention.ms": str(s.deleteretention),
    }
    if s.compression != "inherit":
        conf["compression.type"] = KAFKA_COMPRESSION[s.compression]
    return conf


# -- permissions ------------------------------------------------------------------------
def check_perm(rec: Stream, perm: str, stream: StreamPath, action: str) -> None:
    """Refuse unless the local identity passes `perm` (adminperm also grants topicperm)."""
    me = ace.current_identity()
    if ace.allows(getattr(rec.aces, perm), me):
        return
    if perm == "topicperm" and ace.allows(rec.aces.adminperm, me):
        return
    raise PermissionDenied(
        f"user '{me.user}' lacks {perm} on stream {stream}, needed to {action}; ask a user with adminperm"
        f" to grant it (streamrepl stream edit -path {stream} -{perm} ...)"
    )


#: The columns of `stream info`/`stream list` that every user sees (the ACEs follow for users with adminperm).
INFO_COLUMNS = (
    "path",
    "cluster",
    "uuid",
    "numtopics",
    "defaultpartitions",
    "ttl",
    "compression",
    "autocreate",
    "defaulttimestamptype",
    "compact",
    "numreplicas",
    "numupstreams",
    "creator",
    "created",
)


def info_row(r: Resolved, rec: Stream) -> dict[str, Any]:
    s = rec.settings
    row: dict[str, Any] = {
        "path": str(r.path),
        "cluster": r.cluster.name,
        "uuid": rec.uuid,
        "numtopics": len(rec.topics),
        "defaultpartitions": s.defaultpartitions,
        "ttl": s.ttl,
        "compression": s.compression,
        "autocreate": s.autocreate,
        "defaulttimestamptype": s.defaulttimestamptype,
        "compact": s.compact,
        "numreplicas": len(rec.replicas),
        "numupstreams": len(rec.upstreams),
        "creator": rec.creator,
        "created": rec.created,
    }
    me = ace.current_identity()
    if ace.allows(rec.aces.adminperm, me):
        row.update({p: getattr(rec.aces, p) for p in PERMS})
    return row


def info(reg: Registry, path: str) -> dict[str, Any]:
    r, rec = load(reg, path)
    return info_row(r, rec)


def list_streams(reg: Registry, cluster: str | None = None) -> list[dict[str, Any]]:
    names = [cluster] if cluster else list(reg.clusters)
    rows = []
    for name in names:
        c = reg.get(name)
        for p, rec in sorted(MetaStore(c).streams().items()):
            rows.append(info_row(Resolved(StreamPath(name, p), c), rec))
    return rows
