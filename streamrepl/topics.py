"""Topic operations inside a stream: create, edit, delete, info, list."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import kafka
from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError
from .model import Stream, Topic
from .paths import from_kafka_topic_name, kafka_topic_name, validate_topic
from .registry import Registry
from .stream_ops import check_partitions, release_gateways
from .streams import TIMESTAMP_TYPES, Resolved, check_perm, kafka_configs, load


# -- topics made by plain Kafka clients ---------------------------------------------------------
def strays(r: Resolved, rec: Stream, present: dict[str, int] | None = None) -> dict[str, int]:
    """Kafka topics under the stream's prefix that its metadata does not list, {topic: partitions}: made by a plain
    Kafka client writing to a new name (the broker creates it) or by a Kafka tool."""
    present = kafka.topics(r.cluster) if present is None else present
    found = {}
    try:
        # Only the names under the stream's prefix are parsed: a gateway asks for every replicated stream's strays
        # every few seconds, and parsing every topic of the cluster for each stream grew with streams x topics.
        prefix = kafka_topic_name(r.path, "t")[:-1]
    except InvalidArgument:
        prefix = ""
    for kt, n in present.items():
        if not kt.startswith(prefix):
            continue
        named = from_kafka_topic_name(r.cluster.name, kt)
        if named is not None and named.stream == r.path and named.topic not in rec.topics:
            found[named.topic] = n
    return found


def adopt_strays(r: Resolved, rec: Stream, present: dict[str, int] | None = None) -> Stream:
    """The stream's record with its stray topics adopted when it has `autocreate true` (every topic of a stream
    is the stream's, and replicated); with `autocreate false` they are left out, for `unadopted_warning` to report.
    A topic with fewer partitions than the stream's defaultpartitions gets the missing ones where the broker can add
    them (see _grown)."""
    found = strays(r, rec, present) if rec.settings.autocreate else {}
    if not found:
        return rec
    found = {topic: _grown(r, rec, topic, n) for topic, n in found.items()}

    def add(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} was deleted meanwhile")
        for topic, n in found.items():
            current.topics.setdefault(topic, Topic(partitions=n, timestamptype="createtime", adopted=True))
        return current

    out = r.store.update(r.path.path, add)
    return out if out is not None else rec


def _grown(r: Resolved, rec: Stream, topic: str, partitions: int) -> int:
    """The partitions a stray topic has once adopted: a plain producer writing to a new name has the broker create
    it with the broker's default count (Tansu 4, noida-db 1), not the stream's defaultpartitions, so the missing
    ones are added where the broker takes CreatePartitions (noida-db, Apache Kafka); Tansu refuses, and `stream
    topic list` says the topic differs (fewer_partitions_warning). More than defaultpartitions are kept."""
    want = rec.settings.defaultpartitions
    if partitions >= want:
        return partitions
    name = kafka_topic_name(r.path, topic)
    try:
        kafka.add_partitions(r.cluster, name, want)
        return want
    except StreamreplError:
        # Refused, or another adopter added them meanwhile: what the topic has now.
        with contextlib.suppress(StreamreplError):
            return max(partitions, r.store.partitions_of(name) or 0)
        return partitions


def fewer_partitions_warning(r: Resolved, rec: Stream) -> str:
    """What `stream topic list` says of adopted topics with fewer partitions than the stream's defaultpartitions
    (their broker could not add the missing ones); "" when there are none."""
    want = rec.settings.defaultpartitions
    fewer = {t: m.partitions for t, m in sorted(rec.topics.items()) if m.adopted and m.partitions < want}
    if not fewer:
        return ""
    topics = ", ".join(f"topic '{t}' of stream {r.path} has {n} partition{'s' * (n != 1)}" for t, n in fewer.items())
    return (
        f"{topics}, not the stream's defaultpartitions {want}: a plain Kafka client or tool made it (a producer has"
        " the broker create it with the broker's default count), and this broker cannot add partitions; it"
        " replicates as it is. Create topics with 'streamrepl stream topic create' before plain clients write to them"
    )


def unadopted_warning(r: Resolved, found: dict[str, int]) -> str:
    names = ", ".join(sorted(found))
    return (
        f"Kafka topics under stream {r.path} that are not part of it (autocreate false), so not replicated: {names};"
        f" adopt each with 'streamrepl stream topic create -path {r.path} -topic NAME', or delete it"
    )


def _require_topic(r: Resolved, rec: Stream, topic: str) -> Topic:
    meta = rec.topics.get(topic)
    if meta is None:
        raise NotFound(f"topic '{topic}' does not exist in stream {r.path}; see 'streamrepl stream topic list'")
    return meta


def clashes(reg: Registry, r: Resolved, rec: Stream, topic: str) -> list[tuple[str, str]]:
    """(replica, its other upstream) pairs where that upstream has a topic `topic` too: both would write the
    replica's `topic`, which keeps only the first one's records (many-to-one). Streams that cannot be read now are
    left out: this is advice, not a guarantee."""
    found = []
    for entry in rec.replicas:
        try:
            _, replica = load(reg, entry.path)
        except StreamreplError:
            continue
        for up in replica.upstreams:
            if up.path == str(r.path):
                continue
            try:
                _, other = load(reg, up.path)
            except StreamreplError:
                continue
            if topic in other.topics:
                found.append((entry.path, up.path))
    return found


def clash_text(path: str, topic: str, found: list[tuple[str, str]]) -> str:
    where = "; ".join(
        f"in {replica}, a replica of {path}: its upstream {other} has a topic {topic}" for replica, other in found
    )
    return (
        f"topic {topic} of {path} would clash {where}; both would write that topic into the replica, which keeps only"
        " the records of the first one (stream replica list shows the clash)"
    )


def create(
    reg: Registry,
    path: str,
    topic: str,
    partitions: int | None = None,
    timestamptype: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """`force`: create it even when it clashes with a topic of another upstream of one of the stream's replicas
    (`clashes`); `warn` hears of the clash then."""
    r, rec = load(reg, path)
    validate_topic(topic)
    check_perm(rec, "topicperm", r.path, "create topics")
    found = clashes(reg, r, rec, topic) if topic not in rec.topics else []
    if found and not force:
        raise InvalidArgument(
            f"{clash_text(str(r.path), topic, found)}; nothing was created: choose another name, or give -force true"
            " to create it anyway"
        )
    if found:
        warn(f"warning: {clash_text(str(r.path), topic, found).replace(' would clash ', ' clashes ', 1)}")
    n = rec.settings.defaultpartitions if partitions is None else check_partitions(partitions, "-partitions")
    tstype = (timestamptype or rec.settings.defaulttimestamptype).lower()
    if tstype not in TIMESTAMP_TYPES:
        raise InvalidArgument(f"-timestamptype {tstype} is not valid; use createtime or logappendtime")
    if topic in rec.topics:
        raise AlreadyExists(f"topic '{topic}' already exists in stream {r.path}")
    name = kafka_topic_name(r.path, topic)
    existing = r.store.partitions_of(name)  # this topic alone: listing all of them grows with the cluster
    if existing is not None:
        # Made by a plain Kafka client or tool: this adopts it, with the partitions it has (and more if asked).
        if partitions is not None and n > existing:
            kafka.add_partitions(r.cluster, name, n)
        n = max(n, existing) if partitions is not None else existing
    else:
        r.store.create_topics([(name, n, kafka_configs(rec.settings, tstype))])

    def add(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} was deleted meanwhile")
        if topic in current.topics:
            raise AlreadyExists(f"topic '{topic}' already exists in stream {r.path}")
        current.topics[topic] = Topic(partitions=n, timestamptype=tstype)
        return current

    try:
        r.store.update(r.path.path, add)
    except Exception:
        if existing is not None:
            raise  # not ours to delete
        # Nothing half-made; best effort, so that the user hears why the update failed
        # (a stream deleted meanwhile takes its Kafka topics with it).
        with contextlib.suppress(StreamreplError):
            kafka.delete_topics(r.cluster, [name])
        raise
    return {"topic": topic, "partitions": n, "timestamptype": tstype, "kafkatopic": name}


def register_existing(r: Resolved, topic: str, partitions: int, timestamptype: str = "createtime") -> None:
    """Record a topic whose Kafka topic already exists (made by a gateway for a replica)."""
    register_many(r, [(topic, partitions)], timestamptype)


def register_many(r: Resolved, wanted: list[tuple[str, int]], timestamptype: str = "createtime") -> None:
    """Record several (topic, partitions) whose Kafka topics exist, in one metadata write: a gateway creating a
    replica's topics wrote them one by one, and each write reads the whole metadata log (1,000 topics took minutes)."""

    def add(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} does not exist")
        for topic, partitions in wanted:
            meta = current.topics.get(topic)
            if meta is None or meta.partitions < partitions:
                current.topics[topic] = Topic(partitions=partitions, timestamptype=timestamptype)
        return current

    r.store.update(r.path.path, add)


def edit(
    reg: Registry, path: str, topic: str, partitions: int | None = None, timestamptype: str | None = None
) -> dict[str, Any]:
    r, rec = load(reg, path)
    meta = _require_topic(r, rec, topic)
    check_perm(rec, "topicperm", r.path, "edit topics")
    if partitions is None and timestamptype is None:
        raise InvalidArgument("nothing to change; give -partitions N or -timestamptype")
    name = kafka_topic_name(r.path, topic)
    if partitions is not None:
        check_partitions(partitions, "-partitions")
        if partitions < meta.partitions:
            raise InvalidArgument(
                f"-partitions {partitions} is fewer than the {meta.partitions} topic '{topic}' has;"
                " partitions can be added, never removed"
            )
        if partitions > meta.partitions:
            kafka.add_partitions(r.cluster, name, partitions)
    if timestamptype is not None:
        tstype = timestamptype.lower()
        if tstype not in TIMESTAMP_TYPES:
            raise InvalidArgument(f"-timestamptype {tstype} is not valid; use createtime or logappendtime")
        kafka.set_topic_configs(r.cluster, [name], {"message.timestamp.type": TIMESTAMP_TYPES[tstype]})

    def change(current: Stream | None) -> Stream:
        if current is None or topic not in current.topics:
            raise NotFound(f"topic '{topic}' of stream {r.path} was deleted meanwhile")
        t = current.topics[topic]
        if partitions is not None:
            t.partitions = max(t.partitions, partitions)
        if timestamptype is not None:
            t.timestamptype = timestamptype.lower()
        return current

    out = r.store.update(r.path.path, change)
    assert out is not None
    t = out.topics[topic]
    return {
        "topic": topic,
        "partitions": t.partitions,
        "timestamptype": t.timestamptype,
        "kafkatopic": name,
    }


def delete(reg: Registry, path: str, topic: str) -> None:
    r, rec = load(reg, path)
    _require_topic(r, rec, topic)
    check_perm(rec, "topicperm", r.path, "delete topics")

    def mark(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} was deleted meanwhile")
        if topic in current.topics:
            current.topics[topic].deleting = True
        return current

    release_gateways(reg, r, r.store.update(r.path.path, mark) or rec, topic)
    name = kafka_topic_name(r.path, topic)
    if name in kafka.topics(r.cluster):
        kafka.delete_topics(r.cluster, [name])

    def drop(current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {r.path} was deleted meanwhile")
        current.topics.pop(topic, None)
        return current

    r.store.update(r.path.path, drop)


def _committed_by_group(r: Resolved, kafka_topics: set[str]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> {(kafka topic, partition): committed offset} for groups reading these topics."""
    a = kafka.GroupAdmin(r.cluster)
    groups = kafka.list_groups(r.cluster, a)
    found = kafka.committed_offsets(r.cluster, a, groups, wanted=lambda kt: kt in kafka_topics)
    return {g: offsets for g, (offsets, _) in found.items() if offsets}


#: The columns of `stream topic list`.
LIST_COLUMNS = ("topic", "partitions", "consumers", "maxlag", "timestamptype", "kafkatopic")


def list_topics(reg: Registry, path: str, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    r, rec = load(reg, path)
    present = kafka.topics(r.cluster)
    rec = adopt_strays(r, rec, present)
    if warn is not None and (found := strays(r, rec, present)):
        warn(unadopted_warning(r, found))
    if warn is not None and (fewer := fewer_partitions_warning(r, rec)):
        warn(fewer)
    names = {t: kafka_topic_name(r.path, t) for t in rec.topics}
    ends = kafka.topic_ends(r.cluster, names.values())
    groups = _committed_by_group(r, set(names.values()))
    rows = []
    for topic, meta in sorted(rec.topics.items()):
        kt = names[topic]
        readers = [g for g, offs in groups.items() if any(k[0] == kt for k in offs)]
        lags = [ends.get(k, 0) - off for offs in groups.values() for k, off in offs.items() if k[0] == kt]
        rows.append(
            {
                "topic": topic,
                "partitions": meta.partitions,
                "consumers": len(readers),
                "maxlag": max(lags, default=0),
                "timestamptype": meta.timestamptype,
                "kafkatopic": kt,
            }
        )
    return rows


def _iso(ms: int | None) -> str | None:
    if ms is None or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def info(reg: Registry, path: str, topic: str) -> list[dict[str, Any]]:
    r, rec = load(reg, path)
    if topic not in rec.topics:
        rec = adopt_strays(r, rec)
    meta = _require_topic(r, rec, topic)
    kt = kafka_topic_name(r.path, topic)
    present = kafka.topics(r.cluster)
    if kt not in present:
        raise NotFound(f"Kafka topic '{kt}' of {r.path}:{topic} is missing on cluster '{r.cluster.name}'")
    groups = _committed_by_group(r, {kt})
    c = kafka.consumer(r.cluster)
    rows = []
    try:
        for p in range(present[kt]):
            tp = kafka.TopicPartition(kt, p)
            low, _ = kafka.watermarks(c, tp)
            end = kafka.true_end(c, tp)
            first = kafka.first_record(c, tp, low, end)
            last = kafka.last_record(c, tp, end)
            committed = [offs[(kt, p)] for offs in groups.values() if (kt, p) in offs]
            rows.append(
                {
                    "partitionid": p,
                    "minoffset": low,
                    "maxoffset": end - 1 if end > low else -1,
                    # `is not None`: a Message has a length (its value's), so one with an empty value is falsy.
                    "mintimestamp": _iso(first.timestamp()[1]) if first is not None else None,
                    "maxtimestamp": _iso(last.timestamp()[1]) if last is not None else None,
                    "minoffsetacrossconsumers": min(committed, default=low),
                    "timestamptype": meta.timestamptype,
                }
            )
    finally:
        c.close()
    return rows
