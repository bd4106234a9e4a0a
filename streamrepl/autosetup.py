"""`stream replica autosetup`: the documented steps, resumable, in one command.

1. create the replica from the source's metadata (unless it exists and may be used);
2. register it as a replica of the source, paused, in state REPLICA_STATE_CREATE_SCHEDULE;
3. declare the source as its upstream;
4. copy the existing data (REPLICA_STATE_COPY_IN_PROGRESS) — with `-directcopy true`, the
   default, autosetup runs the copy itself (copystream: in this process when it is small, else
   a Spark job) moving records directly between the brokers; with `-directcopy false` the gateways copy the existing
   data as ordinary replication, starting from offset 0;
5. with `-multimaster yes`, the reverse link (replica -> source) both ways;
6. start replication (REPLICA_STATE_REPLICATING, not paused).

Producers may keep writing to the source throughout: the copy stops at the source's end
when it started, and the gateways go on from each replica partition's real end, so the
hand-over neither loses nor doubles a record. The state lives in the source's replica
entry, so an interrupted autosetup run again continues where it stopped (the copy only
copies what the replica lacks), and `replica remove` stops one in progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import replicas, stream_ops, streams
from .bulk.copystream import copystream
from .bulk.inprocess import check_engine_options
from .bulk.spark import check_spark_options
from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError
from .model import Replica, ReplicaState
from .registry import Registry


def _entry(reg: Registry, src: str, dst: str) -> Replica | None:
    s, rec = streams.load(reg, src)
    d = streams.resolve(reg, dst)
    return rec.replica(str(d.path))


def _has_upstream(reg: Registry, dst: str, src: str) -> bool:
    _, rec = streams.load(reg, dst)
    s = streams.resolve(reg, src)
    return rec.upstream(str(s.path)) is not None


def autosetup(
    reg: Registry,
    path: str,
    replica: str,
    *,
    multimaster: bool = False,
    synchronous: bool = False,
    throttle: bool = False,
    networkencryption: bool = False,
    networkcompression: str | None = None,
    directcopy: bool = True,
    useexistingreplica: bool = False,
    master: str | None = None,
    mapreduce: bool | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    check_spark_options(master, None)  # before the replica is created or registered
    check_engine_options(mapreduce, master)
    src, srec = streams.load(reg, path)
    streams.check_perm(srec, "adminperm", src.path, "set up replication")
    dst = streams.resolve(reg, replica)
    if dst.path == src.path:
        raise InvalidArgument(f"stream {src.path} cannot be its own replica")
    replicas.check_encryption(reg, src, dst, networkencryption)  # before the replica stream is made
    entry = _entry(reg, path, replica)
    if entry is not None and dst.store.get(dst.path.path) is None:
        # The replica's cluster came back without it (wiped, rebuilt, a broker on memory storage restarted): the
        # entry names a stream that is gone, so it is set up again from the start.
        say(f"{dst.path} no longer exists (its cluster came back without it): setting it up again")
        replicas.remove(reg, str(src.path), str(dst.path))
        entry = None
    resuming = entry is not None and entry.state in (ReplicaState.CREATE_SCHEDULE, ReplicaState.COPY_IN_PROGRESS)
    if entry is not None and not resuming:
        raise AlreadyExists(f"stream {dst.path} is already a replica of {src.path}; see 'stream replica list'")
    exists = dst.store.get(dst.path.path) is not None
    if exists and not (useexistingreplica or resuming):
        raise AlreadyExists(
            f"replica stream {dst.path} already exists; remove it, or pass -useexistingreplica true to use it"
        )
    if not exists:
        say(f"creating {dst.path} from the metadata of {src.path}")
        stream_ops.create(reg, str(dst.path), {}, copymetafrom=str(src.path))
    if entry is None:
        say(f"registering {dst.path} as a replica of {src.path} (paused)")
        replicas.add(
            reg,
            str(src.path),
            str(dst.path),
            paused=True,
            throttle=throttle,
            synchronous=synchronous,
            networkencryption=networkencryption,
            networkcompression=networkcompression,
            state=ReplicaState.CREATE_SCHEDULE,
        )
    if not _has_upstream(reg, str(dst.path), str(src.path)):
        say(f"declaring {src.path} an upstream of {dst.path}")
        replicas.upstream_add(reg, str(dst.path), str(src.path))
    copied: dict[str, Any] = {}
    if directcopy:
        replicas.set_state(reg, str(src.path), str(dst.path), ReplicaState.COPY_IN_PROGRESS)
        say(f"copying the existing data of {src.path} into {dst.path}")
        try:
            result = copystream(reg, str(src.path), str(dst.path), master=master, mapreduce=mapreduce, say=say)
        except KeyboardInterrupt as e:
            raise type(e)(
                f"the initial copy into {dst.path} stopped part way, offsets intact; the replica stays paused in"
                " REPLICA_STATE_COPY_IN_PROGRESS: run autosetup again to continue"
            ) from None
        copied = result.row()
        if not result.complete:
            raise StreamreplError(
                f"the initial copy did not finish ({result.summary()}); run autosetup again to continue"
            )
    if multimaster:
        if _entry(reg, str(dst.path), str(src.path)) is None:
            say(f"registering {src.path} as a replica of {dst.path}")
            replicas.add(
                reg,
                str(dst.path),
                str(src.path),
                throttle=throttle,
                synchronous=synchronous,
                networkencryption=networkencryption,
                networkcompression=networkcompression,
            )
        if not _has_upstream(reg, str(src.path), str(dst.path)):
            say(f"declaring {dst.path} an upstream of {src.path}")
            replicas.upstream_add(reg, str(src.path), str(dst.path))
    try:
        replicas.set_state(reg, str(src.path), str(dst.path), ReplicaState.REPLICATING)
        final = replicas.set_paused(reg, str(src.path), str(dst.path), False)
    except NotFound:
        raise StreamreplError(f"replica {dst.path} was removed while autosetup ran; autosetup stopped") from None
    say(f"replicating {src.path} -> {dst.path}" + (" and back" if multimaster else ""))
    return {
        "path": str(src.path),
        "replica": str(dst.path),
        "replicaState": str(final.state),
        "multimaster": multimaster,
        **{k: v for k, v in copied.items() if k != "dstcreated"},
        # whether this autosetup run created the replica stream (its copy found it made: copystream's own column
        # said false, and shared its name with stream info's creation time)
        "replicacreated": not exists,
    }
