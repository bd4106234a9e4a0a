"""Stream metadata as types: a stream, its topics, its replica and upstream entries, and the replica states.

Only the metadata store (metastore.py) turns these into the stored JSON and back, and the JSON stays the one
written before these types existed: one flat object per stream (its settings and ACEs beside its uuid, topics,
replicas and upstreams). Two rules keep records of other versions intact:

- keys this version does not know are kept in `extra` and written back, so that a newer writer's fields survive an
  older reader's update;
- known keys a stored record lacks (written before the field existed) read as the field's default, and are still
  left out on writing while they hold it, so that a record read and written back is unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self


class ReplicaState(enum.StrEnum):
    """The state of a replica entry; `replica list` shows it (and the error states `status` works out)."""

    REPLICATING = "REPLICA_STATE_REPLICATING"
    ERROR = "REPLICA_STATE_ERROR"
    WAITING_FOR_UPSTREAM = "REPLICA_STATE_WAITING_FOR_UPSTREAM"
    #: nothing applies (some of) its partitions: no gateway of the replica's cluster is live, or the one that held
    #: them stopped reporting and no live one took them over (`replica list` works it out, like the two above)
    WAITING_FOR_GATEWAY = "REPLICA_STATE_WAITING_FOR_GATEWAY"
    #: autosetup registered the replica and has not started the copy yet
    CREATE_SCHEDULE = "REPLICA_STATE_CREATE_SCHEDULE"
    #: autosetup's copy owns the link: gateways leave it alone
    COPY_IN_PROGRESS = "REPLICA_STATE_COPY_IN_PROGRESS"


def replica_state(value: Any) -> ReplicaState | str:
    """The member for a stored state; a state only a newer writer knows stays the string it was written as."""
    try:
        return ReplicaState(value)
    except ValueError:
        return value  # type: ignore[no-any-return]


_BOOKKEEPING = ("extra", "absent")


def _fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.name not in _BOOKKEEPING]


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@dataclass
class Stored:
    """What every stored entry keeps besides its fields (see the module's docstring)."""

    #: keys this version does not know, written back as they were read
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    #: known keys the stored entry lacked: still left out on writing while the field holds its default
    absent: frozenset[str] = field(default=frozenset(), kw_only=True, repr=False, compare=False)

    #: fields today's writers leave out while they hold their default
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    #: fields stored in another form than their value (nested entries): name -> (from JSON, to JSON)
    CONVERT: ClassVar[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {}

    @classmethod
    def _read_fields(cls, data: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        """The fields `data` holds, converted, and the names of those it lacks."""
        values: dict[str, Any] = {}
        absent = set()
        for f in _fields(cls):
            if f.name not in data:
                absent.add(f.name)
                continue
            value = data[f.name]
            convert = cls.CONVERT.get(f.name)
            values[f.name] = convert[0](value) if convert else copy.deepcopy(value)
        return values, frozenset(absent)

    def _written_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in _fields(type(self)):
            value = getattr(self, f.name)
            if (f.name in self.absent or f.name in self.OPTIONAL) and value == _default(f):
                continue
            convert = self.CONVERT.get(f.name)
            out[f.name] = convert[1](value) if convert else copy.deepcopy(value)
        return out

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        return frozenset(f.name for f in _fields(cls))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        values, absent = cls._read_fields(data)
        extra = {k: copy.deepcopy(v) for k, v in data.items() if k not in cls.known_keys()}
        return cls(**values, extra=extra, absent=absent)

    def to_json(self) -> dict[str, Any]:
        return {**copy.deepcopy(self.extra), **self._written_fields()}


@dataclass
class Topic(Stored):
    """A topic of a stream (its Kafka topic is named by paths.kafka_topic_name)."""

    partitions: int = 1
    timestamptype: str = "createtime"
    #: made by a plain Kafka client or tool and adopted by the stream (`autocreate true`)
    adopted: bool = False
    #: being deleted: out of every gateway's plan until its Kafka topic is gone (topics.delete)
    deleting: bool = False

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"adopted", "deleting"})


@dataclass
class Upstream(Stored):
    """A stream this stream accepts records from (`upstream add`)."""

    path: str = ""  # `/cluster/stream`
    cluster: str = ""
    stream: str = ""  # the stream's path inside its cluster
    uuid: str = ""
    idx: int = 0


@dataclass
class Replica(Stored):
    """A stream this stream's records go to (`replica add`), and how."""

    path: str = ""  # `/cluster/stream`
    cluster: str = ""
    stream: str = ""  # the stream's path inside its cluster
    uuid: str = ""
    idx: int = 0
    paused: bool = False
    throttle: bool = False
    synchronous: bool = False
    networkencryption: bool = False
    networkcompression: str = "lz4"
    #: entries written before states existed replicate
    state: ReplicaState | str = ReplicaState.REPLICATING
    added: int = 0  # ms since the epoch

    CONVERT: ClassVar[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {"state": (replica_state, str)}


@dataclass
class Settings(Stored):
    """The stream's settings (stream create/edit options); streams.py maps them to Kafka topic configs."""

    ttl: int = 604800  # seconds, 0 = forever
    autocreate: bool = True
    defaultpartitions: int = 1
    compression: str = "inherit"
    defaulttimestamptype: str = "createtime"
    compact: bool = False
    mincompactionlag: int = 0  # ms
    deleteretention: int = 86400000  # ms


@dataclass
class Aces(Stored):
    """Who may do what with the stream: one access-control expression per permission (see ace.py)."""

    produceperm: str = ""
    consumeperm: str = ""
    topicperm: str = ""
    copyperm: str = ""
    adminperm: str = ""


def _topics_from(data: dict[str, Any]) -> dict[str, Topic]:
    return {name: Topic.from_json(meta) for name, meta in data.items()}


def _topics_to(topics: dict[str, Topic]) -> dict[str, Any]:
    return {name: t.to_json() for name, t in topics.items()}


@dataclass
class Stream(Stored):
    """A stream's metadata record. Its settings and ACEs are stored beside the other fields, not nested."""

    path: str = ""  # inside its cluster
    cluster: str = ""
    uuid: str = ""
    created: int = 0  # ms since the epoch
    creator: str = ""
    topics: dict[str, Topic] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)
    upstreams: list[Upstream] = field(default_factory=list)
    #: held by a running copystream into this stream (bulk/lock.py owns its shape)
    copylock: dict[str, Any] | None = None
    #: kept by the metadata store: one more on every change; the time of the last change (ms)
    version: int = 0
    updated: int = 0
    settings: Settings = field(default_factory=Settings)
    aces: Aces = field(default_factory=Aces)
    #: being deleted: out of every gateway's plan until its Kafka topics are gone (stream_ops.delete)
    deleting: bool = False
    #: set by `replica promote` (dr.py owns its shape): the lost primaries, when, the end of every partition then,
    #: and the uuid the stream had before it took over the identity of the history it holds; also the promote's
    #: journal (its steps and those done) while it runs
    promotion: dict[str, Any] | None = None
    #: held by a running promote, resync or failback of this stream (oplock.py owns its shape)
    oplock: dict[str, Any] | None = None
    #: the journal of a resync of this replica, there until it completed or rolled back (resync.py owns its shape)
    resync: dict[str, Any] | None = None
    #: the journal of a failback of an old primary into this stream, there until it completed or rolled back
    #: (failback.py owns its shape)
    failback: dict[str, Any] | None = None

    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"copylock", "deleting", "promotion", "oplock", "resync", "failback"}
    )
    CONVERT: ClassVar[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {
        "topics": (_topics_from, _topics_to),
        "replicas": (lambda es: [Replica.from_json(e) for e in es], lambda es: [e.to_json() for e in es]),
        "upstreams": (lambda es: [Upstream.from_json(e) for e in es], lambda es: [e.to_json() for e in es]),
    }
    #: fields stored flat, among the stream's own keys
    FLAT: ClassVar[tuple[str, ...]] = ("settings", "aces")

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        return (super().known_keys() - set(cls.FLAT)) | Settings.known_keys() | Aces.known_keys()

    @classmethod
    def _read_fields(cls, data: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        values, absent = super()._read_fields(data)
        values["settings"] = Settings.from_json({k: v for k, v in data.items() if k in Settings.known_keys()})
        values["aces"] = Aces.from_json({k: v for k, v in data.items() if k in Aces.known_keys()})
        return values, absent - set(cls.FLAT)

    def _written_fields(self) -> dict[str, Any]:
        out = super()._written_fields()
        for name in self.FLAT:
            out.pop(name, None)
        return {**out, **self.settings.to_json(), **self.aces.to_json()}

    def replica(self, path: str) -> Replica | None:
        """The replica entry for the stream `/cluster/stream`."""
        return next((e for e in self.replicas if e.path == path), None)

    def upstream(self, path: str) -> Upstream | None:
        """The upstream entry for the stream `/cluster/stream`."""
        return next((e for e in self.upstreams if e.path == path), None)
