"""Stream metadata, kept in each cluster in one internal compacted topic.

Each change to a stream appends one record keyed `<stream path>@<version>@<writer>` whose
value is the stream's whole new state (JSON) with `version` = previous version + 1.
Readers fold the log in offset order and accept a record only when its version is
exactly one more than the version they hold, so when two operators edit the same stream
at once, the record that reached the log first wins and the other is ignored by every
reader. The writer then reads back, sees whether it won, and, if not, re-applies its
edit to the new state and tries again: no edit is silently lost.

Keys carry the version and a writer id so that compaction never drops a winning record in
favour of a losing one written later with the same key.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Generator
from typing import Any, cast

from . import kafka
from .errors import ConcurrentEdit, Unreachable
from .model import Stream
from .paths import METADATA_TOPIC
from .registry import Cluster

#: A stored record as JSON: read and written here alone (model.Stream converts it).
Record = dict[str, Any]
Edit = Callable[[Stream | None], Stream | None]

MAX_ATTEMPTS = 8
#: A write builds on the state read this long ago (seconds) without reading again. A command reads a stream, checks
#: the change and writes it: the second read found nothing new and cost as much as the first (with a new consumer
#: then, whose first request Tansu answers with every topic of the cluster; three round trips now). A state that was
#: stale after all costs only the write: its version is no longer the next one, every reader ignores it, and the
#: writer reads and tries again.
FRESH_FOR_WRITE = 1.0


class _Gone(Exception):
    """The reader found no metadata log."""


def _fold(state: dict[str, Record], key: bytes | None, value: bytes | None, offset: int) -> str | None:
    """Apply one log record to `state`; return the winning path when it was accepted."""
    if key is None or value is None:
        return None
    try:
        # The key is `<path>@<version>@<writer>`; a path may itself hold '@'.
        text_key = key.decode()
        path = text_key.rsplit("@", 2)[0]
        rec = json.loads(value)
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None
    if not isinstance(rec, dict) or rec.get("path") != path:
        return None  # not a record this module wrote: ignored, never fatal to every reader
    current = state.get(path)
    expected = (current["version"] if current else 0) + 1
    if type(rec.get("version")) is not int or rec["version"] != expected:
        return None
    rec["_offset"] = offset
    rec["_key"] = text_key
    state[path] = rec
    return path


def _stream(rec: Record) -> Stream:
    """The typed stream of a folded record (without the reader's own `_offset` and `_key`)."""
    return Stream.from_json({k: v for k, v in rec.items() if not k.startswith("_")})


class _Log:
    """The metadata log of one cluster as read so far in this process: the folded state, every key accepted by the
    fold, and where to read on. Every MetaStore of the cluster shares it, so each read fetches only the records
    written since the last one: a write used to read the whole log twice, which made setting up many streams and
    topics quadratic (336 s for 50 streams x 20 topics). Its producer, the consumer that reads it and one that looks
    topics up are kept too: a new client's first request took about 50 ms on Tansu. Used under `lock` (the gateway's
    plan watcher reads from a thread of its own)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[str, Record] = {}
        self.accepted: set[str] = set()  # keys of every accepted record: whether a write won, whatever came after
        self.next_offset = 0
        self.last_key: bytes | None = None  # the key of the record at next_offset - 1
        self.records_read = 0  # every record fetched, the check of the last one included (for tests)
        self.read_at = float("-inf")  # time.monotonic() of the last read of the log
        #: the log was found at the last look (`exists`, or a read's own topic lookup): a read asks the reader alone.
        #: A store per read asked first each time, a round trip before every read of the plan watcher (issue 28)
        self.known = False
        #: asks which topics exist, and nothing else
        self.lookup: kafka.Consumer | None = None
        #: creates the streams' Kafka topics (`MetaStore.create_topics`): a new client's first request costs in
        #: proportion to the cluster's topics (Tansu answers the brokers-only Metadata request a client sends when it
        #: connects with every topic: 135 kB, 6-8 ms at 1,000 topics).
        self.admin: kafka.AdminClient | None = None
        #: reads the log (`_read_on`), assigned only while it reads. A consumer kept naively crashed its whole process
        #: when the log was deleted and re-created (SIGSEGV in librdkafka 2.16's metadata cache, in
        #: rd_kafka_metadata_update_op, on Tansu): when it fetched the new log by the old log's topic id, and when
        #: its last fetch, still on the wire as a read returned, was answered after the deletion. So each read asks
        #: about the topic first, and its fetches are answered (`settle`) before the reader asks or fetches again.
        self.reader: kafka.Consumer | None = None
        #: the reader's last fetch may still be on the wire. It is settled under `lock` before the reader is used or
        #: closed again; after a read given the end its caller saw (the plan watcher's), by a thread of its own as
        #: soon as the read returns: waiting for it before the read returned was a round trip of every such read
        #: (between `replica resume` and its first record; issue 28). Other reads settle before they return. What that wait also kept from the fetch is the caller's own deletion of the log right
        #: after a read: nothing in streamrepl deletes it (tests do, on loopback, where the fetch comes back in 1 ms);
        #: another process's deletion could always meet a fetch of a read on the wire.
        self.unsettled = False
        self.producer: kafka.Producer | None = None
        self.write_lock = threading.Lock()  # one write at a time: each waits for its own delivery report

    def forget(self) -> None:
        """Drop what was read: the log is gone or is another one now."""
        self.state, self.accepted, self.next_offset, self.last_key = {}, set(), 0, None
        self.read_at = float("-inf")

    def read(self, cluster: Cluster, until: int | None = None, seen_end: int | None = None) -> bool:
        """Fold the records written since the last read (up to and including offset `until`, or the end); False when
        the cluster has no metadata log (deleted: nothing is left of what was read).

        The log can be re-created or lose its tail behind our back (Tansu restarted on the same port keeps
        nothing; noida-db killed comes back without what it took since its last save): the read starts again
        at the record read last, and unless that very record (by its key, which no other write shares) is there,
        the whole log is folded afresh.

        `seen_end`: an end of the log the caller saw (the plan watcher's change poll): the read may stop after the
        record before it instead of at end-of-partition, which a fetch reports only once it comes back empty (a
        round trip more), asks for no watermarks (a shorter log shows in the fetch's answer), and leaves the settle
        of its reader to a thread (see `unsettled`). What was written after that end is the caller's next read."""
        if not self.known and not self.exists(cluster):
            return False
        try:
            # Also when `until` was read already (by another thread): a writer must not take its record for read
            # unless the log it was read from is still the one it wrote to.
            if self.next_offset > 0 and not self._read_on(cluster, until, seen_end):
                self.forget()
            if self.next_offset == 0:
                self._read_on(cluster, until, None)
        except _Gone:
            # Deleted, or not yet known to the broker the reader asked (another broker of the cluster told of it):
            # the first reads as no streams, as it does for a store that never saw the log; the second is an error.
            self._drop_reader()
            if self.exists(cluster):
                raise kafka.unreachable(cluster, "reading stream metadata") from None
            return False
        self.read_at = time.monotonic()
        return True

    def exists(self, cluster: Cluster) -> bool:
        """Whether the cluster has a metadata log now (asked); forgets what was read when it has none."""
        self.known = self.partitions_of(cluster, METADATA_TOPIC) is not None
        if not self.known:
            self.forget()
        return self.known

    def partitions_of(self, cluster: Cluster, topic: str) -> int | None:
        """How many partitions a Kafka topic has (None: no such topic), asking about that topic alone with a kept
        consumer: a new client's first request took about 50 ms on Tansu, and listing every topic grows with them."""
        if self.lookup is None:
            self.lookup = kafka.consumer(cluster)
        try:
            return kafka.partitions_of(self.lookup, topic)
        except kafka.KafkaException:
            lookup, self.lookup = self.lookup, None
            lookup.close()
            raise kafka.unreachable(cluster, "listing topics") from None

    def _read_on(self, cluster: Cluster, until: int | None, seen_end: int | None) -> bool:
        """Read on from the record read last (from the start when none was): False when it is not there.
        Raises _Gone when the reader finds no log."""
        self.settle()
        if self.reader is None:
            # A 1 ms fetch wait: a read ends at the partition's end, which a fetch with nothing to return reports only
            # after its wait (10 ms, the readers' default, was two thirds of a read on from the last record; 0 made
            # Tansu never report the end of an empty log).
            self.reader = kafka.consumer(cluster, None, **{"fetch.wait.max.ms": 1})
        consumer = self.reader
        check = self.next_offset - 1 if self.next_offset > 0 else None
        # Where the read may stop without end-of-partition: the record before the end the caller saw, when it has
        # not been read already (then the log may have been read further by another thread: read to its end). That
        # end is exact: Tansu's can fall short only when the last batch holds several records, and each write here
        # is a batch of its own (one produce, flushed, under write_lock).
        stop = seen_end - 1 if seen_end is not None and (check is None or check < seen_end) else None
        # From offset 0, not OFFSET_BEGINNING: asking where the beginning is made an empty log take 0.5 s to read.
        tp = kafka.TopicPartition(METADATA_TOPIC, 0)
        start = kafka.TopicPartition(METADATA_TOPIC, 0, check if check is not None else 0)
        # consume() returns when it has `batch` records or after `wait`: a read on from the last one expects a few
        # records and takes each as it comes, a whole log is taken in large batches.
        batch = 1000 if check is None else 1
        records: Generator[kafka.Message, None, None] | None = None
        try:
            # librdkafka fetches by topic id: a kept consumer would fetch a re-created log by the id of the
            # deleted one, and the answer crashed the process (see `reader`). Asking about the topic first
            # updates the id.
            if kafka.partitions_of(consumer, METADATA_TOPIC) is None:
                raise _Gone
            self.known = True
            if check is not None and stop is None:
                # Past the end, a fetch gets nothing (Tansu) and no end-of-partition either: the log is shorter than
                # what was read, so it is another one. (Tansu's high watermark can fall short of the real end when
                # the last batch holds several records; this then reads the log afresh, which is only slower.)
                low, high = kafka.watermarks(consumer, tp)
                if not low <= check < high:
                    return False
            if stop is not None and stop < 0:
                return check is None  # the caller saw an empty log: nothing to fetch
            # Without the watermarks asked for: a log shorter than what was read ends the read at the fetch's answer.
            ends_after = check if stop is not None else None
            records = kafka.read_partition(consumer, start, until, batch=batch, wait=0.01, ends_after=ends_after)
            for m in records:
                self.records_read += 1
                offset = cast(int, m.offset())
                if check is not None:
                    # The first record must be the one read last; an offset past the end resets to the earliest.
                    if offset != check or m.key() != self.last_key:
                        return False
                    check = None
                else:
                    path = _fold(self.state, m.key(), m.value(), offset)
                    if path is not None:
                        self.accepted.add(self.state[path]["_key"])
                    self.next_offset, self.last_key = offset + 1, m.key()
                if stop is not None and offset >= stop:
                    break  # `until` ends read_partition itself
            return check is None  # an empty log when a record was read before: it was re-created
        except (TimeoutError, kafka.KafkaException):
            records = None
            self._drop_reader()  # a fresh one next time: this one's connection may be what failed
            raise kafka.unreachable(cluster, "reading stream metadata") from None
        finally:
            if records is not None:
                records.close()  # unassigns, also when the read stopped early
                self.unsettled = True
                if seen_end is None:
                    self.settle()  # a command's read: in its time, as always (and no thread in tests/sim's world)
                else:
                    threading.Thread(target=self._settle_when_free, name="metadata-settle", daemon=True).start()

    def settle(self) -> None:
        """Return only when the reader's last fetch has been answered: one on the wire when the log is deleted comes
        back for a topic the consumer no longer knows, which crashed the process (see `reader`). The broker answers
        a connection's requests in order, so the answer to a request sent after the read ends comes after it. Under
        `lock`: before the reader asks or fetches again, or is closed."""
        if not self.unsettled:
            return
        self.unsettled = False
        if self.reader is None:
            return
        try:
            kafka.watermarks(self.reader, kafka.TopicPartition(METADATA_TOPIC, 0))
        except kafka.KafkaException:
            self._drop_reader()  # the log is gone already, or the broker: closing waits for what is on the wire

    def _settle_when_free(self) -> None:
        """Settle after the read that started this thread returned (its caller holds `lock` until then)."""
        with self.lock:
            self.settle()

    def _drop_reader(self) -> None:
        self.unsettled = False  # closing waits for what is on the wire
        if self.reader is not None:
            reader, self.reader = self.reader, None
            reader.close()

    def fold_own(self, key: bytes, value: bytes, offset: int) -> bool:
        """Take a record this process wrote at `offset` as read, when it came right after the last record read:
        nothing else can lie between them, so reading it back would only fetch what is known. False: read."""
        if self.next_offset == 0 or offset != self.next_offset:
            return False  # another writer got in between (or nothing was read): the log must be read
        path = _fold(self.state, key, value, offset)
        if path is not None:
            self.accepted.add(self.state[path]["_key"])
        self.next_offset, self.last_key = offset + 1, key
        return True

    def close(self) -> None:
        if self.lookup is not None:
            lookup, self.lookup = self.lookup, None
            lookup.close()
        self._drop_reader()
        self.producer = self.admin = None


_logs: dict[tuple[int, tuple[tuple[str, str], ...]], _Log] = {}
_logs_lock = threading.Lock()


def _log_of(cluster: Cluster) -> _Log:
    """The shared log of a cluster, by its client properties (other credentials may see other things) and by
    process: a forked child must not use its parent's Kafka clients."""
    key = (os.getpid(), tuple(sorted(cluster.client_properties.items())))
    with _logs_lock:
        log = _logs.get(key)
        if log is None:
            log = _logs[key] = _Log()
        return log


def close_clients() -> None:
    """Close the clients every cluster's log keeps (also done at exit): a Tansu broker being stopped waits for its
    connected clients, 5 s, and a client kept for a broker that is gone tries to reconnect for ever."""
    with _logs_lock:
        logs = [log for (pid, _), log in _logs.items() if pid == os.getpid()]
        _logs.clear()
    for log in logs:
        with log.lock:
            log.close()


atexit.register(close_clients)


class MetaStore:
    """Stream records of one cluster."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._seen = False  # a write found the metadata topic: no need to ask the broker again
        self._log = _log_of(cluster)

    # -- reading ---------------------------------------------------------------------
    def partitions_of(self, kafka_topic: str) -> int | None:
        """How many partitions a Kafka topic of this cluster has now (None: it does not exist); with the client the
        store keeps, so that a command that already read the metadata asks without connecting again."""
        with self._log.lock:
            return self._log.partitions_of(self.cluster, kafka_topic)

    def create_topics(self, specs: list[tuple[str, int, dict[str, str]]]) -> None:
        """Create Kafka topics of this cluster (kafka.create_topics) with the admin client the store keeps."""
        with self._log.lock:
            if self._log.admin is None:
                self._log.admin = kafka.admin_client(self.cluster)
            admin = self._log.admin
        try:
            kafka.create_topics(self.cluster, specs, client=admin)
        except Unreachable:
            with self._log.lock:
                self._log.admin = None  # a fresh one next time: this one's connection may be what failed
            raise

    def _read(self, until: int | None = None, seen_end: int | None = None) -> dict[str, Record]:
        """The log folded up to its end (or at least up to and including offset `until`; see _Log.read for
        `seen_end`); empty when the cluster has no log (none made yet, or deleted since it was read)."""
        with self._log.lock:
            if not self._log.read(self.cluster, until, seen_end):
                return {}
            return dict(self._log.state)  # records are replaced, never changed, by a fold: a shallow copy is safe

    def streams(self, seen_end: int | None = None) -> dict[str, Stream]:
        """Every live stream of the cluster, by path. `seen_end`: an end of the metadata log the caller saw (the
        plan watcher's change poll); what was written after it may be left to the next read."""
        return {p: _stream(r) for p, r in self._read(seen_end=seen_end).items() if not r.get("deleted")}

    def get(self, path: str) -> Stream | None:
        rec = self._read().get(path)
        return None if rec is None or rec.get("deleted") else _stream(rec)

    # -- writing ---------------------------------------------------------------------
    def _ensure_topic(self) -> None:
        """Make the log when the cluster has none. Asked once per store, not taken from what the process read: a log
        deleted since is made again, not written to as if it were there."""
        if not self._seen:
            with self._log.lock:
                self._seen = self._log.exists(self.cluster)
        if not self._seen:
            kafka.create_compacted_topic(self.cluster, METADATA_TOPIC)

    def _append(self, path: str, rec: Record) -> tuple[int, str, bytes]:
        """Write one record; return its offset, its key (which names this very write) and its value."""
        offsets: list[int] = []
        errors: list[kafka.KafkaError] = []

        def delivered(err: kafka.KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        key = f"{path}@{rec['version']}@{uuid.uuid4().hex[:12]}"
        body = {k: v for k, v in rec.items() if not k.startswith("_")}
        value = json.dumps(body, sort_keys=True).encode()
        with self._log.write_lock:
            if self._log.producer is None:
                # Not idempotent: setting up an idempotent producer costs 0.5-1 s, on every command. A
                # duplicate written by a retry is harmless: readers ignore it (its version is no longer
                # the next one), and the writer recognises its win by the key, not by the offset.
                self._log.producer = kafka.producer(
                    self.cluster,
                    **{
                        "linger.ms": 0,
                        "enable.idempotence": False,
                        "message.timeout.ms": int(kafka.REQUEST_TIMEOUT * 1000),
                    },
                )
            p = self._log.producer
            p.produce(
                METADATA_TOPIC,
                key=key.encode(),
                value=value,
                partition=0,
                on_delivery=delivered,
            )
            p.flush(kafka.REQUEST_TIMEOUT + 2)
            if errors or not offsets:
                self._log.producer = None  # a fresh one next time: this one's connection may be what failed
                raise kafka.unreachable(self.cluster, "writing stream metadata")
        return offsets[-1], key, value

    def _won(self, key: str, value: bytes, offset: int) -> bool:
        """Whether the record written with `key` at `offset` was accepted by the fold (read up to it first)."""
        with self._log.lock:
            if not self._log.fold_own(key.encode(), value, offset):
                self._log.read(self.cluster, until=offset)
            return key in self._log.accepted

    def update(self, path: str, edit: Edit) -> Stream | None:
        """Apply `edit` to the current record of `path` (None when absent) and store the result.

        `edit` returns the new record, or None to delete the stream; it may raise a
        StreamreplError to refuse, in which case nothing is written. It runs again on the
        fresh state whenever another writer got in first.
        """
        self._ensure_topic()
        for attempt in range(MAX_ATTEMPTS):
            with self._log.lock:
                read_again = attempt > 0 or time.monotonic() - self._log.read_at > FRESH_FOR_WRITE
                state = dict(self._log.state)
            if read_again:
                state = self._read()
            current = state.get(path)
            live = None if current is None or current.get("deleted") else current
            new = edit(None if live is None else _stream(live))
            if new is None and live is None:
                return None
            version = (current["version"] if current else 0) + 1
            rec = {"deleted": True, "path": path} if new is None else new.to_json()
            rec["version"] = version
            rec["path"] = path
            rec["updated"] = int(time.time() * 1000)
            offset, key, value = self._append(path, rec)
            if self._won(key, value, offset):
                # As read back: the JSON a reader folds, not the objects `edit` returned.
                return None if new is None else _stream(json.loads(json.dumps(rec)))
            if read_again:  # lost to another writer, not to a state that was stale: let the others finish
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        raise ConcurrentEdit(
            f"stream {path} on cluster '{self.cluster.name}' is being changed by others at the same time; try again"
        )
