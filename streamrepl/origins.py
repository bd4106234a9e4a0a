"""Where the records of a partition came from, kept beside the data: runs of offsets and their origin stream.

Offsets are the same in every copy of a partition, so the origin of a record (the UUID of the stream where it was
first published) is known from its offset alone: per partition, a list of runs `[start offset, origin uuid]`, each
covering the offsets from its start to the next run's. The runs describe the partition totally from the first run
on; below it (and in a partition with no runs) every record is the stream's own. A writer that is about to write
records of another origin than the runs say at its offset appends a run first, and writes the records only once the
run is acknowledged: a run never describes records that are not there, and a record never lands undescribed.

A run appended at offset s replaces every run from s on: a partition re-created empty (`replica resync`, a replica
topic deleted and created again) starts at 0 again, and its first writer's run at 0 drops what the old partition had.

A partition that an older gateway wrote (each copied record carrying the `streamrepl.origin` header) gets a
`headerform` mark: below it, the origin is read from the header as before; from it on, from the runs. Past the mark
a header of that name is the user's data.

The runs of one cluster live in its compacted topic `__streamrepl_origins` (one partition), one record per run,
keyed `<kafka topic>|<stream created ms>|<partition>|<start>` (the creation time keeps a stream deleted and created
again under its path from inheriting the old one's runs; the UUID is not in the key because a promote changes it),
and a `...|headerform` record for the mark. Compaction keeps the newest record per key, and the log's order is the
order of the appends, so folding it in offset order gives every partition's runs back.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import kafka, policy
from .errors import StreamreplError
from .registry import Cluster

ORIGINS_TOPIC = "__streamrepl_origins"
HEADERFORM = "headerform"

#: A partition as the runs store knows it: (Kafka topic, the stream's creation time in ms, partition)
PartitionKey = tuple[str, int, int]


@dataclass(frozen=True)
class Runs:
    """The origin runs of one partition: `starts` ascending, `origins[i]` covering [starts[i], starts[i + 1]).
    `headerform_below`: offsets below it were written by a gateway that marked each record with the origin header."""

    starts: tuple[int, ...] = ()
    origins: tuple[str, ...] = ()
    headerform_below: int = 0

    def at(self, offset: int, own: str) -> str:
        """The origin of the record at `offset` of a partition of the stream `own` (not for the header form)."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return self.origins[i] if i >= 0 else own

    def span(self, offset: int, own: str) -> tuple[str, int]:
        """The origin at `offset` and the first offset past its run (a very large number for the last run): a
        writer takes a batch whose offsets are all below it as of one origin."""
        i = bisect.bisect_right(self.starts, offset) - 1
        until = self.starts[i + 1] if i + 1 < len(self.starts) else 1 << 62
        return (self.origins[i] if i >= 0 else own), until

    def last(self, own: str) -> str:
        """The origin of what is written at the partition's end from now on."""
        return self.origins[-1] if self.origins else own

    def origin_of(self, offset: int, headers: Any, own: str) -> str:
        """The origin of a record, read from its header below the header-form mark and from the runs past it."""
        if offset < self.headerform_below:
            return policy.origin_of(headers, own)
        return self.at(offset, own)

    def appended(self, start: int, origin: str) -> Runs:
        i = bisect.bisect_left(self.starts, start)
        return Runs(self.starts[:i] + (start,), self.origins[:i] + (origin,), self.headerform_below)

    def __bool__(self) -> bool:
        return bool(self.starts) or self.headerform_below > 0


NO_RUNS = Runs()


class OriginLog(Protocol):
    """The log the runs of one cluster are kept in (KafkaOriginLog; a list in the unit tests)."""

    def exists(self) -> bool: ...

    def read(self, offset: int) -> Iterable[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every record from `offset` to the log's real end."""
        ...

    def append(self, key: bytes, value: bytes) -> None:
        """Write one record and return once the log acknowledged it (raise when it did not)."""
        ...


def run_key(pk: PartitionKey, start: int | str) -> bytes:
    topic, created, partition = pk
    return f"{topic}|{created}|{partition}|{start}".encode()


@dataclass
class _Folded:
    runs: dict[PartitionKey, Runs] = field(default_factory=dict)
    next_offset: int = 0


def _fold(state: _Folded, offset: int, key: bytes | None, value: bytes | None) -> None:
    state.next_offset = offset + 1
    if key is None or value is None:
        return
    try:
        topic, created, partition, start = key.decode().rsplit("|", 3)
        pk = (topic, int(created), int(partition))
        rec = json.loads(value)
    except ValueError:
        return  # not a record this module wrote: ignored, never fatal to a reader
    if not isinstance(rec, dict):
        return
    runs = state.runs.get(pk, NO_RUNS)
    if start == HEADERFORM and isinstance(rec.get("below"), int):
        state.runs[pk] = Runs(runs.starts, runs.origins, rec["below"])
    elif start.isdigit() and isinstance(rec.get("origin"), str):
        state.runs[pk] = runs.appended(int(start), rec["origin"])


class OriginStore:
    """The runs of one cluster's partitions as read so far, and the appends to them. `refresh()` reads what was
    appended since the last read (a reader of another cluster's runs calls it when the plan changes and before it
    ever takes a record for a conflict or skips one on a mismatch: runs change rarely, and a stale copy must never
    decide against the data)."""

    def __init__(self, log: OriginLog):
        self.log = log
        self._state = _Folded()
        self._read_once = False
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            if not self.log.exists():
                self._state = _Folded()  # gone (or never made): nothing is known of any partition
            else:
                for offset, key, value in self.log.read(self._state.next_offset):
                    _fold(self._state, offset, key, value)
            self._read_once = True

    def runs(self, pk: PartitionKey) -> Runs:
        if not self._read_once:
            self.refresh()
        return self._state.runs.get(pk, NO_RUNS)

    def append(self, pk: PartitionKey, start: int, origin: str) -> Runs:
        """Append the run [start, origin] and return the partition's runs with it, once the log acknowledged it."""
        value = json.dumps({"origin": origin}).encode()
        self.log.append(run_key(pk, start), value)
        with self._lock:
            runs = self._state.runs.get(pk, NO_RUNS).appended(start, origin)
            self._state.runs[pk] = runs
        return runs

    def mark_headerform(self, pk: PartitionKey, below: int) -> Runs:
        """Offsets below `below` of the partition carry their origin in the record's header (the older form)."""
        self.log.append(run_key(pk, HEADERFORM), json.dumps({"below": below}).encode())
        with self._lock:
            old = self._state.runs.get(pk, NO_RUNS)
            runs = Runs(old.starts, old.origins, below)
            self._state.runs[pk] = runs
        return runs


class KafkaOriginLog:
    """The runs log of a cluster in its topic ORIGINS_TOPIC, made on the first append. Its clients are made on first
    use and kept: the log is read a few times a plan, appended to a few times a partition's life."""

    def __init__(self, cluster: Cluster, timeout: float = kafka.REQUEST_TIMEOUT):
        self.cluster = cluster
        self.timeout = timeout
        self._consumer: kafka.Consumer | None = None
        self._producer: kafka.Producer | None = None
        self._made = False

    def _reader(self) -> kafka.Consumer:
        if self._consumer is None:
            self._consumer = kafka.consumer(self.cluster)
        return self._consumer

    def exists(self) -> bool:
        return kafka.partitions_of(self._reader(), ORIGINS_TOPIC, self.timeout) is not None

    def read(self, offset: int) -> Iterable[tuple[int, bytes | None, bytes | None]]:
        start = kafka.TopicPartition(ORIGINS_TOPIC, 0, offset)
        for m in kafka.read_partition(self._reader(), start, timeout=self.timeout):
            yield m.offset() or 0, m.key(), m.value()

    def append(self, key: bytes, value: bytes) -> None:
        if not self._made:
            kafka.create_compacted_topic(self.cluster, ORIGINS_TOPIC)
            self._made = True
        if self._producer is None:
            self._producer = kafka.producer(self.cluster, **{"enable.idempotence": True, "linger.ms": 0})
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err.str())

        self._producer.produce(ORIGINS_TOPIC, value, key, 0, delivered)
        if self._producer.flush(self.timeout) > 0 or failed:
            why = failed[0] if failed else f"no answer within {self.timeout:.0f} s"
            raise StreamreplError(f"cannot record the origin of records in cluster {self.cluster.name}: {why}")

    def close(self) -> None:
        for c in (self._consumer, self._producer):
            if c is not None and hasattr(c, "close"):
                c.close()
        self._consumer = self._producer = None


#: cluster name -> its store, for the processes that read and append runs of several clusters
_stores: dict[str, OriginStore] = {}
_stores_lock = threading.Lock()


def store_of(cluster: Cluster) -> OriginStore:
    """The runs store of `cluster`, one per process."""
    with _stores_lock:
        s = _stores.get(cluster.name)
        if s is None:
            s = _stores[cluster.name] = OriginStore(KafkaOriginLog(cluster))
        return s
