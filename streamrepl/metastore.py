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

import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from . import kafka
from .errors import ConcurrentEdit
from .model import Stream
from .paths import METADATA_TOPIC
from .registry import Cluster

#: A stored record as JSON: read and written here alone (model.Stream converts it).
Record = dict[str, Any]
Edit = Callable[[Stream | None], Stream | None]

MAX_ATTEMPTS = 8


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


class MetaStore:
    """Stream records of one cluster."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._seen = False  # the metadata topic once seen stays: no need to ask the broker again

    # -- reading ---------------------------------------------------------------------
    def _exists(self) -> bool:
        if not self._seen:
            self._seen = METADATA_TOPIC in kafka.topics(self.cluster)
        return self._seen

    def _read(self, until: int | None = None) -> dict[str, Record]:
        """Fold the whole log (or up to and including offset `until`)."""
        state: dict[str, Record] = {}
        if not self._exists():
            return state
        # A short fetch wait and short polls: the log is small and read whole on every command, so
        # waiting for a full batch (consume's count) or for the broker's default 500 ms fetch wait
        # would cost every command a second or more.
        c = kafka.consumer(self.cluster)  # readers already use a 10 ms fetch wait
        try:
            for m in kafka.read_partition(c, kafka.TopicPartition(METADATA_TOPIC, 0, 0), until, batch=1000, wait=0.01):
                _fold(state, m.key(), m.value(), cast(int, m.offset()))
            return state
        except TimeoutError:
            raise kafka.unreachable(self.cluster, "reading stream metadata") from None
        finally:
            c.close()

    def streams(self) -> dict[str, Stream]:
        """Every live stream of the cluster, by path."""
        return {p: _stream(r) for p, r in self._read().items() if not r.get("deleted")}

    def get(self, path: str) -> Stream | None:
        rec = self._read().get(path)
        return None if rec is None or rec.get("deleted") else _stream(rec)

    # -- writing ---------------------------------------------------------------------
    def _ensure_topic(self) -> None:
        if not self._exists():
            kafka.create_compacted_topic(self.cluster, METADATA_TOPIC)

    def _append(self, path: str, rec: Record) -> tuple[int, str]:
        """Write one record; return its offset and its key (which names this very write)."""
        # Not idempotent: setting up an idempotent producer costs 0.5-1 s, on every command. A
        # duplicate written by a retry is harmless: readers ignore it (its version is no longer
        # the next one), and the writer recognises its win by the key, not by the offset.
        p = kafka.producer(
            self.cluster,
            **{
                "linger.ms": 0,
                "enable.idempotence": False,
                "message.timeout.ms": int(kafka.REQUEST_TIMEOUT * 1000),
            },
        )
        offsets: list[int] = []
        errors: list[kafka.KafkaError] = []

        def delivered(err: kafka.KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        key = f"{path}@{rec['version']}@{uuid.uuid4().hex[:12]}"
        body = {k: v for k, v in rec.items() if not k.startswith("_")}
        p.produce(
            METADATA_TOPIC,
            key=key.encode(),
            value=json.dumps(body, sort_keys=True).encode(),
            partition=0,
            on_delivery=delivered,
        )
        p.flush(kafka.REQUEST_TIMEOUT + 2)
        if errors or not offsets:
            raise kafka.unreachable(self.cluster, "writing stream metadata")
        return offsets[-1], key

    def update(self, path: str, edit: Edit) -> Stream | None:
        """Apply `edit` to the current record of `path` (None when absent) and store the result.

        `edit` returns the new record, or None to delete the stream; it may raise a
        StreamreplError to refuse, in which case nothing is written. It runs again on the
        fresh state whenever another writer got in first.
        """
        self._ensure_topic()
        for attempt in range(MAX_ATTEMPTS):
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
            offset, key = self._append(path, rec)
            after = self._read(until=offset)
            won = after.get(path)
            if won is not None and won.get("_key") == key:
                return None if new is None else _stream(won)
            time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        raise ConcurrentEdit(
            f"stream {path} on cluster '{self.cluster.name}' is being changed by others at the same time; try again"
        )
