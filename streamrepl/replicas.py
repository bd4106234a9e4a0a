"""Replication links: replica add/edit/remove/pause/resume/list and upstream add/remove/list.

A link from stream S to stream R exists only when both halves agree: S lists R as a
replica (`replica add`, needs adminperm on S) and R lists S as an upstream (`upstream add`,
needs adminperm on R). Gateways apply nothing until both halves are there.
"""

from __future__ import annotations

import time
from typing import Any

from . import status as link_status
from .errors import AlreadyExists, InvalidArgument, LimitExceeded, NotFound, StreamreplError
from .metastore import Record
from .registry import Registry
from .streams import KAFKA_COMPRESSION, Resolved, check_perm, load, resolve

MAX_REPLICAS = 64
MAX_UPSTREAMS = 64

STATE_REPLICATING = "REPLICA_STATE_REPLICATING"
STATE_ERROR = "REPLICA_STATE_ERROR"
STATE_WAITING = "REPLICA_STATE_WAITING_FOR_UPSTREAM"


def _find(entries: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    return next((e for e in entries if e["path"] == path), None)


def _next_idx(entries: list[dict[str, Any]]) -> int:
    return max((e.get("idx", 0) for e in entries), default=0) + 1


def _compression(value: str | None, rec: Record) -> str:
    v = (value or rec.get("compression") or "lz4").lower()
    if v == "inherit":
        v = "lz4"
    if v == "lzf":
        raise InvalidArgument("-networkcompression lzf has no Kafka counterpart; use off, lz4, zlib, snappy or zstd")
    if v not in KAFKA_COMPRESSION:
        raise InvalidArgument(f"-networkcompression {v} is not valid; use off, lz4, zlib, snappy or zstd")
    return v


def _check_encryption(reg: Registry, src: Resolved, dst: Resolved, wanted: bool | None) -> None:
    if wanted and not (src.cluster.uses_tls() and dst.cluster.uses_tls()):
        raise InvalidArgument(
            "-networkencryption true needs TLS to both clusters; set security.protocol SSL or SASL_SSL"
            f" for '{src.cluster.name}' and '{dst.cluster.name}' in the registry"
        )


def _pair(reg: Registry, path: str, replica: str) -> tuple[Resolved, Record, Resolved, Record]:
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    src, srec = load(reg, path)
    dst_r = resolve(reg, replica)
    if dst_r.path == src.path:
        raise InvalidArgument(f"stream {src.path} cannot be its own replica")
    _, drec = load(reg, replica)
    return src, srec, dst_r, drec


def _refuse_one_way_cycle(reg: Registry, src: str, dst: str, drec: Record) -> None:
    """Refuse a link src -> dst that closes a cycle of one-way links (dst -> ... -> src): each stream of it
    would take records from a stream that takes its own. A link back (dst -> src) makes a multi-master pair."""

    def one_way_replicas(path: str, rec: Record) -> list[str]:
        targets = [e["path"] for e in rec.get("replicas", [])]
        out = []
        for t in targets:
            try:
                _, trec = load(reg, t)
            except StreamreplError:  # gone or unreachable: no link on through it to follow
                continue
            if _find(trec.get("replicas", []), path) is None:
                out.append(t)
        return out

    if _find(drec.get("replicas", []), src) is not None:
        return
    trail = {dst: [dst]}
    todo = [(dst, drec)]
    while todo:
        path, rec = todo.pop()
        for nxt in one_way_replicas(path, rec):
            if nxt == src:
                cycle = " -> ".join([src, *trail[path], src])
                raise InvalidArgument(
                    f"a replica {dst} of {src} would close a cycle of one-way links ({cycle}); replicate between"
                    " two streams both ways (multi-master) instead, or leave one link out"
                )
            if nxt not in trail:
                trail[nxt] = [*trail[path], nxt]
                try:
                    todo.append((nxt, load(reg, nxt)[1]))
                except StreamreplError:
                    continue


def add(
    reg: Registry,
    path: str,
    replica: str,
    paused: bool = False,
    throttle: bool = False,
    synchronous: bool = False,
    networkencryption: bool = False,
    networkcompression: str | None = None,
    state: str = STATE_REPLICATING,
) -> dict[str, Any]:
    src, srec, dst, drec = _pair(reg, path, replica)
    check_perm(srec, "adminperm", src.path, "add replicas")
    _refuse_one_way_cycle(reg, str(src.path), str(dst.path), drec)
    _check_encryption(reg, src, dst, networkencryption)
    compression = _compression(networkcompression, srec)

    def register(current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        replicas = current.setdefault("replicas", [])
        if _find(replicas, str(dst.path)):
            raise AlreadyExists(f"stream {dst.path} is already a replica of {src.path}")
        if len(replicas) >= MAX_REPLICAS:
            raise LimitExceeded(f"stream {src.path} already has {MAX_REPLICAS} replicas, the most a stream can have")
        replicas.append(
            {
                "path": str(dst.path),
                "cluster": dst.cluster.name,
                "stream": dst.path.path,
                "uuid": drec["uuid"],
                "idx": _next_idx(replicas),
                "paused": paused,
                "throttle": throttle,
                "synchronous": synchronous,
                "networkencryption": networkencryption,
                "networkcompression": compression,
                "state": state,
                "added": int(time.time() * 1000),
            }
        )
        return current

    out = src.store.update(src.path.path, register)
    assert out is not None
    entry = _find(out["replicas"], str(dst.path))
    assert entry is not None
    return entry


def _change(reg: Registry, path: str, replica: str, action: str, change: Any) -> dict[str, Any]:
    src, srec = load(reg, path)
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    dst = resolve(reg, replica)
    check_perm(srec, "adminperm", src.path, action)
    if _find(srec.get("replicas", []), str(dst.path)) is None:
        raise NotFound(f"stream {dst.path} is not a replica of {src.path}; see 'streamrepl stream replica list'")
    result: dict[str, Any] = {}

    def apply(current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        entry = _find(current.get("replicas", []), str(dst.path))
        if entry is None:
            raise NotFound(f"stream {dst.path} is not a replica of {src.path}")
        change(current, entry)
        result.update(entry)
        return current

    src.store.update(src.path.path, apply)
    return result


def edit(
    reg: Registry,
    path: str,
    replica: str,
    newreplica: str | None = None,
    throttle: bool | None = None,
    synchronous: bool | None = None,
    networkencryption: bool | None = None,
    networkcompression: str | None = None,
) -> dict[str, Any]:
    if all(v is None for v in (newreplica, throttle, synchronous, networkencryption, networkcompression)):
        raise InvalidArgument(
            "nothing to change; give -newreplica, -throttle, -synchronous, -networkencryption or -networkcompression"
        )
    src, srec = load(reg, path)
    new_entry: dict[str, Any] = {}
    if newreplica:
        new_r, new_rec = load(reg, newreplica)
        if new_r.path == src.path:
            raise InvalidArgument(f"stream {src.path} cannot be its own replica")
        if _find(srec.get("replicas", []), str(new_r.path)):
            raise AlreadyExists(f"stream {new_r.path} is already a replica of {src.path}")
        new_entry = {
            "path": str(new_r.path),
            "cluster": new_r.cluster.name,
            "stream": new_r.path.path,
            "uuid": new_rec["uuid"],
        }
        _check_encryption(reg, src, new_r, networkencryption)
    else:
        _check_encryption(reg, src, resolve(reg, replica), networkencryption)
    compression = _compression(networkcompression, srec) if networkcompression else None

    def change(_: Record, e: dict[str, Any]) -> None:
        for k, v in (
            ("throttle", throttle),
            ("synchronous", synchronous),
            ("networkencryption", networkencryption),
            ("networkcompression", compression),
        ):
            if v is not None:
                e[k] = v
        e.update(new_entry)

    return _change(reg, path, replica, "edit replicas", change)


def set_paused(reg: Registry, path: str, replica: str, paused: bool) -> dict[str, Any]:
    return _change(reg, path, replica, "pause or resume replication", lambda _, e: e.update(paused=paused))


def set_state(reg: Registry, path: str, replica: str, state: str) -> dict[str, Any]:
    return _change(reg, path, replica, "change replication", lambda _, e: e.update(state=state))


def remove(reg: Registry, path: str, replica: str) -> None:
    src, srec = load(reg, path)
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    dst = resolve(reg, replica)
    check_perm(srec, "adminperm", src.path, "remove replicas")
    if _find(srec.get("replicas", []), str(dst.path)) is None:
        raise NotFound(f"stream {dst.path} is not a replica of {src.path}")

    def drop(current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        current["replicas"] = [e for e in current.get("replicas", []) if e["path"] != str(dst.path)]
        return current

    src.store.update(src.path.path, drop)


# -- upstreams ----------------------------------------------------------------------------
def upstream_add(reg: Registry, path: str, upstream: str) -> dict[str, Any]:
    if not upstream:
        raise InvalidArgument("missing -upstream; give the upstream stream's path")
    dst, drec = load(reg, path)
    up = resolve(reg, upstream)
    if up.path == dst.path:
        raise InvalidArgument(f"stream {dst.path} cannot be its own upstream")
    _, urec = load(reg, upstream)
    check_perm(drec, "adminperm", dst.path, "add upstreams")

    def register(current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {dst.path} was deleted meanwhile")
        ups = current.setdefault("upstreams", [])
        if _find(ups, str(up.path)):
            raise AlreadyExists(f"stream {up.path} is already an upstream of {dst.path}")
        if len(ups) >= MAX_UPSTREAMS:
            raise LimitExceeded(f"stream {dst.path} already has {MAX_UPSTREAMS} upstreams, the most a stream can have")
        ups.append(
            {
                "path": str(up.path),
                "cluster": up.cluster.name,
                "stream": up.path.path,
                "uuid": urec["uuid"],
                "idx": _next_idx(ups),
            }
        )
        return current

    out = dst.store.update(dst.path.path, register)
    assert out is not None
    entry = _find(out["upstreams"], str(up.path))
    assert entry is not None
    return entry


def upstream_remove(reg: Registry, path: str, upstream: str) -> None:
    if not upstream:
        raise InvalidArgument("missing -upstream; give the upstream stream's path")
    dst, drec = load(reg, path)
    up = resolve(reg, upstream)
    check_perm(drec, "adminperm", dst.path, "remove upstreams")
    if _find(drec.get("upstreams", []), str(up.path)) is None:
        raise NotFound(f"stream {up.path} is not an upstream of {dst.path}")

    def drop(current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {dst.path} was deleted meanwhile")
        current["upstreams"] = [e for e in current.get("upstreams", []) if e["path"] != str(up.path)]
        return current

    dst.store.update(dst.path.path, drop)


def upstream_list(reg: Registry, path: str) -> list[dict[str, Any]]:
    _, rec = load(reg, path)
    return [
        {"cluster": e["cluster"], "stream": e["stream"], "path": e["path"], "idx": e["idx"], "uuid": e["uuid"]}
        for e in rec.get("upstreams", [])
    ]


# -- listing -------------------------------------------------------------------------------
def list_replicas(reg: Registry, path: str, refreshnow: bool = False) -> list[dict[str, Any]]:
    src, srec = load(reg, path)
    rows = []
    for e in srec.get("replicas", []):
        row: dict[str, Any] = {
            "cluster": e["cluster"],
            "stream": e["stream"],
            "type": "Stream",
            "replicaPath": e["path"],
            "replicaState": e.get("state", STATE_REPLICATING),
            "paused": e["paused"],
            "throttle": e["throttle"],
            "idx": e["idx"],
            "networkencryption": e["networkencryption"],
            "synchronous": e["synchronous"],
            "networkcompression": e["networkcompression"],
            "uuid": e["uuid"],
        }
        row.update(link_status.link_row(reg, src, srec, e))
        rows.append(row)
    return rows
