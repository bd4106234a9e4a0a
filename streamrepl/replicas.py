"""Replication links: replica add/edit/remove/pause/resume/list and upstream add/remove/list.

A link from stream S to stream R exists only when both halves agree: S lists R as a
replica (`replica add`, needs adminperm on S) and R lists S as an upstream (`upstream add`,
needs adminperm on R). Gateways apply nothing until both halves are there.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import status as link_status
from .errors import AlreadyExists, InvalidArgument, LimitExceeded, NotFound, StreamreplError
from .model import Replica, ReplicaState, Stream, Upstream
from .registry import Registry
from .streams import KAFKA_COMPRESSION, Resolved, check_perm, load, resolve

MAX_REPLICAS = 64
MAX_UPSTREAMS = 64


def _next_idx(entries: Sequence[Replica | Upstream]) -> int:
    return max((e.idx for e in entries), default=0) + 1


def _compression(value: str | None, rec: Stream) -> str:
    v = (value or rec.settings.compression or "lz4").lower()
    if v == "inherit":
        v = "lz4"
    if v == "lzf":
        raise InvalidArgument("-networkcompression lzf has no Kafka counterpart; use off, lz4, zlib, snappy or zstd")
    if v not in KAFKA_COMPRESSION:
        raise InvalidArgument(f"-networkcompression {v} is not valid; use off, lz4, zlib, snappy or zstd")
    return v


def check_encryption(reg: Registry, src: Resolved, dst: Resolved, wanted: bool | None) -> None:
    """maprcli: "-networkencryption true requires all participating clusters to be secure"; here, that the registry
    gives both clusters TLS (the gateways check it again with their own registry: replication/links.py)."""
    if wanted and not (src.cluster.uses_tls() and dst.cluster.uses_tls()):
        raise InvalidArgument(
            "-networkencryption true needs TLS to both clusters; set security.protocol SSL or SASL_SSL"
            f" for '{src.cluster.name}' and '{dst.cluster.name}' in the registry"
        )


def _pair(reg: Registry, path: str, replica: str) -> tuple[Resolved, Stream, Resolved, Stream]:
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    src, srec = load(reg, path)
    dst_r = resolve(reg, replica)
    if dst_r.path == src.path:
        raise InvalidArgument(f"stream {src.path} cannot be its own replica")
    _, drec = load(reg, replica)
    return src, srec, dst_r, drec


def _one_way_trail(
    reg: Registry,
    start: str,
    rec: Stream,
    goal: str,
    follow: Callable[[Stream], list[str]],
    back: Callable[[Stream, str], bool],
) -> list[str] | None:
    """The streams from `start` to `goal` along one-way halves (`follow` names where a stream's halves lead; a half
    x -> y with `back(y, x)`, one the other way, makes a multi-master pair and is not followed), or None."""
    trail = {start: [start]}
    todo = [(start, rec)]
    while todo:
        path, rec = todo.pop()
        for nxt in follow(rec):
            try:
                _, nrec = load(reg, nxt)
            except StreamreplError:  # gone or unreachable: no link on through it to follow
                continue
            if back(nrec, path):
                continue
            if nxt == goal:
                return [*trail[path], nxt]
            if nxt not in trail:
                trail[nxt] = [*trail[path], nxt]
                todo.append((nxt, nrec))
    return None


def _cycle_error(cycle: list[str], what: str) -> InvalidArgument:
    return InvalidArgument(
        f"{what} would close a cycle of one-way links ({' -> '.join(cycle)}); replicate between two streams both"
        " ways (multi-master) instead, or leave one link out"
    )


def _refuse_one_way_cycle(reg: Registry, src: str, dst: str, drec: Stream) -> None:
    """Refuse a replica half src -> dst that closes a cycle of one-way links (dst -> ... -> src): each stream of it
    would take records from a stream that takes its own. A link back (dst -> src) makes a multi-master pair."""
    if drec.replica(src) is not None:
        return
    found = _one_way_trail(
        reg, dst, drec, src, lambda rec: [e.path for e in rec.replicas], lambda rec, p: rec.replica(p) is not None
    )
    if found is not None:
        raise _cycle_error([src, *found], f"a replica {dst} of {src}")


def _refuse_one_way_upstream_cycle(reg: Registry, dst: str, up: str, urec: Stream) -> None:
    """The same for the upstream half up -> dst, which may be the last half of a link to come: walks upstreams back
    from `up` (who feeds it) looking for `dst`."""
    if urec.upstream(dst) is not None:
        return
    found = _one_way_trail(
        reg, up, urec, dst, lambda rec: [e.path for e in rec.upstreams], lambda rec, p: rec.upstream(p) is not None
    )
    if found is not None:
        raise _cycle_error([*reversed(found), dst], f"an upstream {up} of {dst}")


def add(
    reg: Registry,
    path: str,
    replica: str,
    paused: bool = False,
    throttle: bool = False,
    synchronous: bool = False,
    networkencryption: bool = False,
    networkcompression: str | None = None,
    state: ReplicaState = ReplicaState.REPLICATING,
) -> Replica:
    src, srec, dst, drec = _pair(reg, path, replica)
    check_perm(srec, "adminperm", src.path, "add replicas")
    _refuse_one_way_cycle(reg, str(src.path), str(dst.path), drec)
    check_encryption(reg, src, dst, networkencryption)
    compression = _compression(networkcompression, srec)

    def register(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        replicas = current.replicas
        if current.replica(str(dst.path)):
            raise AlreadyExists(f"stream {dst.path} is already a replica of {src.path}")
        if len(replicas) >= MAX_REPLICAS:
            raise LimitExceeded(f"stream {src.path} already has {MAX_REPLICAS} replicas, the most a stream can have")
        replicas.append(
            Replica(
                path=str(dst.path),
                cluster=dst.cluster.name,
                stream=dst.path.path,
                uuid=drec.uuid,
                idx=_next_idx(replicas),
                paused=paused,
                throttle=throttle,
                synchronous=synchronous,
                networkencryption=networkencryption,
                networkcompression=compression,
                state=state,
                added=int(time.time() * 1000),
            )
        )
        return current

    out = src.store.update(src.path.path, register)
    assert out is not None
    entry = out.replica(str(dst.path))
    assert entry is not None
    return entry


def _change(reg: Registry, path: str, replica: str, action: str, change: Callable[[Replica], None]) -> Replica:
    src, srec = load(reg, path)
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    dst = resolve(reg, replica)
    check_perm(srec, "adminperm", src.path, action)
    if srec.replica(str(dst.path)) is None:
        raise NotFound(f"stream {dst.path} is not a replica of {src.path}; see 'streamrepl stream replica list'")
    result: list[Replica] = []

    def apply(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        entry = current.replica(str(dst.path))
        if entry is None:
            raise NotFound(f"stream {dst.path} is not a replica of {src.path}")
        change(entry)
        result[:] = [dataclasses.replace(entry)]
        return current

    src.store.update(src.path.path, apply)
    return result[0]


def edit(
    reg: Registry,
    path: str,
    replica: str,
    newreplica: str | None = None,
    throttle: bool | None = None,
    synchronous: bool | None = None,
    networkencryption: bool | None = None,
    networkcompression: str | None = None,
) -> Replica:
    if all(v is None for v in (newreplica, throttle, synchronous, networkencryption, networkcompression)):
        raise InvalidArgument(
            "nothing to change; give -newreplica, -throttle, -synchronous, -networkencryption or -networkcompression"
        )
    src, srec = load(reg, path)
    moved: Replica | None = None  # the replica -newreplica names instead
    if newreplica:
        new_r, new_rec = load(reg, newreplica)
        if new_r.path == src.path:
            raise InvalidArgument(f"stream {src.path} cannot be its own replica")
        if srec.replica(str(new_r.path)):
            raise AlreadyExists(f"stream {new_r.path} is already a replica of {src.path}")
        _refuse_one_way_cycle(reg, str(src.path), str(new_r.path), new_rec)
        moved = Replica(path=str(new_r.path), cluster=new_r.cluster.name, stream=new_r.path.path, uuid=new_rec.uuid)
        check_encryption(reg, src, new_r, networkencryption)
    else:
        check_encryption(reg, src, resolve(reg, replica), networkencryption)
    compression = _compression(networkcompression, srec) if networkcompression else None

    def change(e: Replica) -> None:
        if throttle is not None:
            e.throttle = throttle
        if synchronous is not None:
            e.synchronous = synchronous
        if networkencryption is not None:
            e.networkencryption = networkencryption
        if compression is not None:
            e.networkcompression = compression
        if moved is not None:
            e.path, e.cluster, e.stream, e.uuid = moved.path, moved.cluster, moved.stream, moved.uuid

    return _change(reg, path, replica, "edit replicas", change)


def set_paused(reg: Registry, path: str, replica: str, paused: bool) -> Replica:
    def change(e: Replica) -> None:
        e.paused = paused

    return _change(reg, path, replica, "pause or resume replication", change)


def set_state(reg: Registry, path: str, replica: str, state: ReplicaState) -> Replica:
    def change(e: Replica) -> None:
        e.state = state

    return _change(reg, path, replica, "change replication", change)


def remove(reg: Registry, path: str, replica: str) -> None:
    src, srec = load(reg, path)
    if not replica:
        raise InvalidArgument("missing -replica; give the replica stream's path")
    dst = resolve(reg, replica)
    check_perm(srec, "adminperm", src.path, "remove replicas")
    if srec.replica(str(dst.path)) is None:
        raise NotFound(f"stream {dst.path} is not a replica of {src.path}")

    def drop(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {src.path} was deleted meanwhile")
        current.replicas = [e for e in current.replicas if e.path != str(dst.path)]
        return current

    src.store.update(src.path.path, drop)


# -- upstreams ----------------------------------------------------------------------------
def upstream_add(reg: Registry, path: str, upstream: str) -> Upstream:
    if not upstream:
        raise InvalidArgument("missing -upstream; give the upstream stream's path")
    dst, drec = load(reg, path)
    up = resolve(reg, upstream)
    if up.path == dst.path:
        raise InvalidArgument(f"stream {dst.path} cannot be its own upstream")
    _, urec = load(reg, upstream)
    check_perm(drec, "adminperm", dst.path, "add upstreams")
    _refuse_one_way_upstream_cycle(reg, str(dst.path), str(up.path), urec)

    def register(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {dst.path} was deleted meanwhile")
        ups = current.upstreams
        if current.upstream(str(up.path)):
            raise AlreadyExists(f"stream {up.path} is already an upstream of {dst.path}")
        if len(ups) >= MAX_UPSTREAMS:
            raise LimitExceeded(f"stream {dst.path} already has {MAX_UPSTREAMS} upstreams, the most a stream can have")
        ups.append(
            Upstream(
                path=str(up.path),
                cluster=up.cluster.name,
                stream=up.path.path,
                uuid=urec.uuid,
                idx=_next_idx(ups),
            )
        )
        return current

    out = dst.store.update(dst.path.path, register)
    assert out is not None
    entry = out.upstream(str(up.path))
    assert entry is not None
    return entry


def upstream_remove(reg: Registry, path: str, upstream: str) -> None:
    if not upstream:
        raise InvalidArgument("missing -upstream; give the upstream stream's path")
    dst, drec = load(reg, path)
    up = resolve(reg, upstream)
    check_perm(drec, "adminperm", dst.path, "remove upstreams")
    if drec.upstream(str(up.path)) is None:
        raise NotFound(f"stream {up.path} is not an upstream of {dst.path}")

    def drop(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {dst.path} was deleted meanwhile")
        current.upstreams = [e for e in current.upstreams if e.path != str(up.path)]
        return current

    dst.store.update(dst.path.path, drop)


def upstream_list(reg: Registry, path: str) -> list[dict[str, Any]]:
    _, rec = load(reg, path)
    return [
        {"cluster": e.cluster, "stream": e.stream, "path": e.path, "idx": e.idx, "uuid": e.uuid} for e in rec.upstreams
    ]


# -- listing -------------------------------------------------------------------------------
def link_error(reg: Registry, path: str, replica: str) -> tuple[bool, str | None]:
    """(whether the link from `path` to `replica` is paused, why it is in ERROR or None): what `replica resume`
    checks, without the pending work `list_replicas` counts. No such link: (False, None)."""
    src, srec = load(reg, path)
    entry = srec.replica(str(resolve(reg, replica).path))
    if entry is None:
        return False, None
    return entry.paused, link_status.link_error(reg, src, srec, entry)


def list_replicas(reg: Registry, path: str, refreshnow: bool = False) -> list[dict[str, Any]]:
    src, srec = load(reg, path)
    rows = []
    pending = link_status.failback_entry(srec, {e.path for e in srec.replicas})
    for e in [*srec.replicas, *([pending] if pending else [])]:
        row: dict[str, Any] = {
            "cluster": e.cluster,
            "stream": e.stream,
            "type": "Stream",
            "replicaPath": e.path,
            "replicaState": str(e.state),
            "paused": e.paused,
            "throttle": e.throttle,
            "idx": e.idx,
            "networkencryption": e.networkencryption,
            "synchronous": e.synchronous,
            "networkcompression": e.networkcompression,
            "uuid": e.uuid,
        }
        row.update(
            link_status.link_row(reg, src, srec, e) if e is not pending else link_status.failback_row(src, srec, e)
        )
        rows.append(row)
    return rows
