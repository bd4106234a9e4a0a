"""Where a StreamConsumer starts reading a copy, and what it delivered and committed: its positions.

Offsets are preserved between copies, so a position taken on one copy names the same record
on another (see the package doc on failover).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from .. import kafka
from ..errors import InvalidArgument, NotFound
from ..kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, Consumer, TopicPartition
from ..paths import kafka_topic_name
from ..registry import Cluster
from ..streams import Resolved

#: (stream topic, partition)
Key = tuple[str, int]


def parse_start(start: str | int | None) -> str | int | None:
    if isinstance(start, str) and start not in ("earliest", "latest"):
        try:
            return int(start)
        except ValueError:
            raise InvalidArgument(f"start '{start}' must be earliest, latest or an offset") from None
    return start


class ReadPositions:
    """The start options of a consumer and its positions on the copy it reads.

    delivered: the next offset after what was delivered, on the copy being read.
    committed: what the consumer committed, on any copy; committed_here: on the copy being read.
    `reader` builds the consumer that reads a partition's real end (a fake in unit tests).
    """

    def __init__(
        self,
        group: str | None,
        partitions: list[int] | None,
        start: str | int | None,
        start_timestamp: int | None,
        reset: str,
        reader: Callable[[Cluster], Consumer] = kafka.consumer,
    ):
        self.group = group
        self.partitions = partitions
        self.start = parse_start(start)
        self.start_timestamp = start_timestamp
        self.reset = reset  # the consumer's auto.offset.reset
        self.delivered: dict[Key, int] = {}
        self.committed: dict[Key, int] = {}
        self.committed_here: dict[Key, int] = {}
        self._resume: dict[Key, int] = {}  # positions on the copy left last
        self._not_before: dict[Key, int] = {}  # timestamp to reach before delivering
        self._new_reader = reader
        self._reader: Consumer | None = None

    @property
    def manual(self) -> bool:
        """True when the consumer assigns partitions itself (no group rebalancing)."""
        return (
            self.group is None
            or self.partitions is not None
            or self.start is not None
            or self.start_timestamp is not None
        )

    def new_copy(self) -> None:
        """Forget what belongs to the copy read so far (what was committed anywhere stays)."""
        self.committed_here.clear()
        self._not_before.clear()
        self.delivered.clear()

    def leave_copy(self) -> None:
        self._resume = dict(self.delivered)

    def start_offsets(
        self, c: Consumer, r: Resolved, names: list[str], topic_of: dict[str, str], resumed: bool
    ) -> list[TopicPartition]:
        """The partitions to assign on copy `r` and where to start in each.

        `topic_of` maps the copy's Kafka topics to stream topics; `resumed` says a failover happened.
        """
        try:
            return self._start_offsets(c, r, names, topic_of, resumed)
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _start_offsets(
        self, c: Consumer, r: Resolved, names: list[str], topic_of: dict[str, str], resumed: bool
    ) -> list[TopicPartition]:
        md = c.list_topics(timeout=kafka.REQUEST_TIMEOUT)
        parts: list[TopicPartition] = []
        for t in names:
            kt = kafka_topic_name(r.path, t)
            meta = md.topics.get(kt)
            if meta is None or meta.error is not None:
                continue
            for p in sorted(meta.partitions):
                if self.partitions is not None and p not in self.partitions:
                    continue
                parts.append(TopicPartition(kt, p, OFFSET_STORED if self.group else OFFSET_INVALID))
        if self.partitions is not None and not parts:
            raise NotFound(f"no partition {self.partitions} in the topics {names} of stream {r.path}")
        stored = c.committed(parts, timeout=kafka.REQUEST_TIMEOUT) if (self.group and resumed) else []
        stored_at = {(tp.topic, tp.partition): tp.offset for tp in stored}
        todo_ts = []
        for tp in parts:
            key = (topic_of[tp.topic], tp.partition)
            mine = self.committed.get(key) if self.group else self._resume.get(key)
            if resumed and mine is not None:
                theirs = stored_at.get((tp.topic, tp.partition), -1)
                tp.offset = max(mine, theirs)
                continue
            if resumed and self.group and stored_at.get((tp.topic, tp.partition), -1) >= 0:
                tp.offset = stored_at[(tp.topic, tp.partition)]
                continue
            if self.start_timestamp is not None:
                tp.offset = self.start_timestamp
                todo_ts.append(tp)
            elif self.start == "earliest":
                tp.offset = OFFSET_BEGINNING
            elif self.start == "latest":
                tp.offset = OFFSET_END
            elif isinstance(self.start, int):
                tp.offset = self.start if self.start >= 0 else max(0, self._end_of(r, tp) + self.start)
            elif not self.group:
                tp.offset = OFFSET_BEGINNING if self.reset == "earliest" else OFFSET_END
        if todo_ts:
            found = c.offsets_for_times(todo_ts, timeout=kafka.REQUEST_TIMEOUT)
            at = {(tp.topic, tp.partition): tp.offset for tp in found}
            for tp in todo_ts:
                off = at.get((tp.topic, tp.partition), -1)
                tp.offset = off if off >= 0 else OFFSET_END
                # Some brokers (Tansu) answer with the start of the batch holding the time: records
                # before the first one at or after it are skipped here.
                self._not_before[(topic_of[tp.topic], tp.partition)] = cast(int, self.start_timestamp)
        return parts

    def _end_of(self, r: Resolved, tp: TopicPartition) -> int:
        """The real end of a partition (the reported high watermark can under-count)."""
        if self._reader is None:
            self._reader = self._new_reader(r.cluster)
        return kafka.true_end(self._reader, TopicPartition(tp.topic, tp.partition))

    def resume_assigned(self, c: Consumer, parts: list[TopicPartition], keys: list[Key]) -> bool:
        """After a failover, start the partitions a group hands out at the further of the group's offsets
        here and what this consumer committed on the copy it left. True when `parts` need assigning."""
        if not any(k in self.committed for k in keys):
            return False
        stored = {(tp.topic, tp.partition): tp.offset for tp in c.committed(parts, timeout=kafka.REQUEST_TIMEOUT)}
        for tp, k in zip(parts, keys, strict=True):
            mine = self.committed.get(k)
            if mine is not None and mine > stored.get((tp.topic, tp.partition), -1):
                tp.offset = mine
        return True

    def deliverable(self, key: Key, offset: int, timestamp: int, filler: bool) -> bool:
        """Note the record at `offset` as delivered; False when it must not reach the application."""
        self.delivered[key] = offset + 1
        if filler:
            return False
        if self._not_before:
            floor = self._not_before.get(key)
            if floor is not None:
                if timestamp < floor:
                    return False
                del self._not_before[key]
        return True

    def forget(self, keys: set[Key]) -> None:
        for k in keys:
            self.delivered.pop(k, None)

    def to_commit(self) -> dict[Key, int]:
        return {k: off for k, off in self.delivered.items() if self.committed_here.get(k) != off}

    def commit_done(self, offsets: dict[Key, int]) -> None:
        self.committed.update(offsets)
        self.committed_here.update(offsets)
