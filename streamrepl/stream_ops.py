"""What changes a stream: create, edit (settings and ACEs, applied to its Kafka topics first), delete (after its
gateways let go of it), and the checks of what is given. The read side (resolve, load, check_perm, kafka_configs,
info) is streams.py."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import ace, kafka, statustopic
from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError
from .model import Aces, Settings, Stream
from .paths import StreamPath, kafka_topic_name
from .registry import Cluster, Registry
from .streams import (
    KAFKA_COMPRESSION,
    MAX_PARTITIONS,
    MAXIMA,
    PERMS,
    TIMESTAMP_TYPES,
    Resolved,
    check_perm,
    kafka_configs,
    load,
    resolve,
)

log = logging.getLogger("streamrepl.streams")


# -- validation -------------------------------------------------------------------------
def validate_settings(s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in s.items():
        if v is None:
            continue
        if k in ("ttl", "mincompactionlag", "deleteretention") and v < 0:
            raise InvalidArgument(f"-{k} {v} is negative; give 0 or more (-ttl 0 keeps messages forever)")
        if k in MAXIMA and v > MAXIMA[k]:
            raise InvalidArgument(f"-{k} {v} is too large; the most Kafka can hold is {MAXIMA[k]}")
        if k == "defaultpartitions":
            check_partitions(v, "-defaultpartitions")
        if k == "compression":
            v = str(v).lower()
            if v == "lzf":
                raise InvalidArgument("-compression lzf has no Kafka counterpart; use off, lz4, zlib, snappy or zstd")
            if v not in KAFKA_COMPRESSION and v != "inherit":
                raise InvalidArgument(f"-compression {v} is not supported; use off, lz4, zlib, snappy or zstd")
        if k == "defaulttimestamptype":
            v = str(v).lower()
            if v not in TIMESTAMP_TYPES:
                raise InvalidArgument(f"-defaulttimestamptype {v} is not valid; use createtime or logappendtime")
        if k in PERMS:
            v = ace.normalize(str(v))
        out[k] = v
    return out


def check_partitions(n: int, option: str) -> int:
    if n <= 0:
        raise InvalidArgument(f"{option} {n} must be at least 1")
    if n > MAX_PARTITIONS:
        raise InvalidArgument(f"{option} {n} is too large: at most {MAX_PARTITIONS} partitions a topic")
    return n


def apply_settings(rec: Stream, given: dict[str, Any]) -> None:
    """Set the settings and ACEs `given` (validated; by option name) on the stream."""
    for k, v in given.items():
        setattr(rec.aces if k in PERMS else rec.settings, k, v)


def refuse_lockout(
    given: dict[str, Any], stream: StreamPath, force: bool = False, warn: Callable[[str], None] = lambda _: None
) -> None:
    """Refuse an adminperm that grants nobody (empty, or one no identity passes): since changing it needs adminperm,
    nobody (root included: streamrepl checks ACEs itself, not the operating system) could ever change the stream
    again. One that does not pass the caller is refused unless `force` (handing the stream to someone else is
    possible: they can give it back); one that passes identities it does not name (`!u:root`) is told to `warn`."""
    if "adminperm" not in given:
        return
    admins = ace.parse(given["adminperm"])
    if admins.expr is None:
        me = ace.current_identity()
        raise InvalidArgument(
            f"an empty -adminperm would leave nobody able to change or delete stream {stream}, ever; name who"
            f" administers it, e.g. -adminperm 'u:{me.user}'"
        )
    if ace.grants_nobody(admins):  # `u:alice & u:bob`, `u:root & !u:root`: as empty as the empty ACE
        me = ace.current_identity()
        raise InvalidArgument(
            f"-adminperm '{admins}' passes nobody (a user has one name, and nobody both is and is not in a group"
            f" or role), so nobody could change or delete stream {stream} again; name who administers it, e.g."
            f" -adminperm 'u:{me.user}'"
        )
    me = ace.current_identity()
    if not admins.allows(me) and not force:
        raise InvalidArgument(
            f"-adminperm '{admins}' does not pass you ({me.user}): you could not change or delete stream {stream}"
            f" afterwards; include yourself (e.g. -adminperm '{admins} | u:{me.user}'), or give -force true to set it"
            " anyway (someone it passes can change it back)"
        )
    if ace.passes_strangers(admins):
        warn(
            f"warning: -adminperm '{admins}' grants admin to every identity it does not name (any other user, in any"
            f" group): everyone but a few can change or delete stream {stream}"
        )


# -- verbs ------------------------------------------------------------------------------
def create(
    reg: Registry,
    path: str,
    settings: dict[str, Any],
    copymetafrom: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] = lambda _: None,
) -> Stream:
    """`force`, `warn`: see refuse_lockout."""
    target = resolve(reg, path)
    given = validate_settings(settings)
    refuse_lockout(given, target.path, force, warn)
    me = ace.current_identity()
    # -copymetafrom carries over the settings and ACEs (not the UUID, topics, replicas or upstreams).
    src = load(reg, copymetafrom)[1] if copymetafrom else None
    base_settings = Settings() if src is None else dataclasses.replace(src.settings, absent=frozenset())
    base_aces = Aces() if src is None else dataclasses.replace(src.aces, absent=frozenset())
    for p in PERMS:
        if src is None or p in src.aces.absent:
            setattr(base_aces, p, ace.default_for(me))

    def make(current: Stream | None) -> Stream:
        if current is not None:
            raise AlreadyExists(f"stream {target.path} already exists; pick another path or edit it")
        rec = Stream(
            path=target.path.path,
            cluster=target.cluster.name,
            uuid=str(uuid.uuid4()),
            created=int(time.time() * 1000),
            creator=me.user,
            settings=dataclasses.replace(base_settings),
            aces=dataclasses.replace(base_aces),
        )
        apply_settings(rec, given)
        return rec

    rec = target.store.update(target.path.path, make)
    assert rec is not None
    return rec


def edit(
    reg: Registry,
    path: str,
    settings: dict[str, Any],
    force: bool = False,
    warn: Callable[[str], None] = lambda _: None,
) -> Stream:
    """`force`, `warn`: see refuse_lockout."""
    r, rec = load(reg, path)
    check_perm(rec, "adminperm", r.path, "edit it")
    given = validate_settings(settings)
    if not given:
        raise InvalidArgument("nothing to change; give at least one setting such as -ttl or -adminperm")
    refuse_lockout(given, r.path, force, warn)
    preview = dataclasses.replace(rec.settings, **{k: v for k, v in given.items() if k not in PERMS})
    names = [kafka_topic_name(r.path, t) for t in rec.topics]
    if any(
        k in given
        for k in (
            "ttl",
            "compression",
            "compact",
            "mincompactionlag",
            "deleteretention",
            "defaulttimestamptype",
        )
    ):
        # Kafka first: if a broker refuses a setting, the stream record stays as it was.
        conf = kafka_configs(preview)
        conf.pop("message.timestamp.type", None)  # a topic keeps the type it was created with
        if preview.compression == "inherit":
            conf["compression.type"] = "producer"  # undo a codec set before: Kafka's own default
        if names:
            # Only topics the broker has: Apache Kafka refuses to configure a missing one.
            present = kafka.topics(r.cluster)
            kafka.set_topic_configs(r.cluster, [n for n in names if n in present], conf)

    def apply(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} was deleted meanwhile")
        check_perm(current, "adminperm", r.path, "edit it")
        apply_settings(current, given)
        return current

    out = r.store.update(r.path.path, apply)
    assert out is not None
    return out


def release_gateways(reg: Registry, r: Resolved, rec: Stream, topic: str | None = None) -> None:
    """Wait until no gateway applies the stream's `topic` (every topic when None) any more, once the record says it is
    being deleted (the gateways take it out of their plans within a second). The replicas' gateways read it, and when
    the stream is itself a replica its own cluster's gateways write it. Deleting a Kafka topic under a consumer that
    fetches from it crashes the consumer's whole process (librdkafka 2.16 on Tansu); deleting it under a writer
    makes the writer re-create it and write at the wrong offsets."""
    suffix = f":{topic}[" if topic is not None else ":"
    holders: dict[str, tuple[Cluster, list[str]]] = {}
    for e in rec.replicas:
        if e.cluster in reg.clusters:
            holders.setdefault(e.cluster, (reg.get(e.cluster), []))[1].append(e.path + suffix)
    if rec.upstreams:
        holders.setdefault(r.cluster.name, (r.cluster, []))[1].append(str(r.path) + suffix)
    try:
        held = statustopic.wait_released(holders) if holders else []
    except StreamreplError as e:  # a replica's cluster that does not answer has no gateway to wait for
        log.warning("could not ask the gateways of %s to let go of it: %s", r.path, e)
        return
    if held:
        log.warning(
            "gateways still held %s after %.0f s; deleting anyway", ", ".join(held), statustopic.RELEASE_TIMEOUT
        )


def delete(reg: Registry, path: str) -> None:
    r, rec = load(reg, path)
    check_perm(rec, "adminperm", r.path, "delete it")

    def mark(current: Stream | None) -> Stream | None:
        if current is not None:
            check_perm(current, "adminperm", r.path, "delete it")
            current.deleting = True
        return current

    release_gateways(reg, r, r.store.update(r.path.path, mark) or rec)
    prefix = kafka_topic_name(r.path, "x")[:-1]
    for attempt in range(3):
        try:
            kafka.delete_topics(r.cluster, [t for t in kafka.topics(r.cluster) if t.startswith(prefix)])
            break
        except NotFound:
            # A topic went away between listing and deleting (someone deleted it meanwhile;
            # Apache Kafka then refuses the whole request): list again.
            if attempt == 2:
                raise

    def drop(current: Stream | None) -> None:
        if current is not None:
            check_perm(current, "adminperm", r.path, "delete it")
        return None

    r.store.update(r.path.path, drop)
