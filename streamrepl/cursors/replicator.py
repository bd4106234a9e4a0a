"""Cursor replication (contract point 6).

`CursorReplicator` carries the committed offsets of every consumer group reading a source
stream to a replica stream: offsets are preserved between copies, so an offset means the
same record on both sides. It never moves a group's offset backwards, never touches a
group that is active on the destination cluster, and never points a cursor past what the
destination partition holds (it commits min(source offset, destination real end)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import kafka
from ..errors import StreamreplError
from ..kafka import AdminClient, Consumer, KafkaException, TopicPartition
from ..paths import StreamPath, from_kafka_topic_name, kafka_topic_name
from ..registry import Cluster

#: group -> ({(Kafka topic, partition): committed offset}, {(Kafka topic, partition): commit metadata})
SourceCommits = dict[str, tuple[dict[tuple[str, int], int], dict[tuple[str, int], str]]]


class CursorReplicator:
    """Carries committed offsets of consumer groups from a source stream to a replica stream.

    Holds its admin clients and a reader, so `run_once()` can be called every few seconds:
    a run costs one ListGroups and one OffsetFetch per group on each side, one DescribeGroups
    on the destination for the groups that need a change, and a read of a destination
    partition's end only where a source offset lies beyond its reported high watermark.
    """

    def __init__(
        self,
        src_cluster: Cluster,
        dst_cluster: Cluster,
        src_stream: StreamPath,
        dst_stream: StreamPath,
        *,
        admin: Callable[[Cluster], AdminClient] = kafka.admin_client,
        reader: Callable[[Cluster], Consumer] = kafka.consumer,
    ):
        """`admin` and `reader` build the clients (fakes in unit tests). The admins are GroupAdmins: one whose request
        timed out is let go and built again (kafka/groups.py: kept, it made librdkafka abort the process)."""
        self.src_cluster = src_cluster
        self.dst_cluster = dst_cluster
        self.src_stream = src_stream
        self.dst_stream = dst_stream
        self._new_reader = reader
        self._src_admin = kafka.GroupAdmin(src_cluster, admin)
        self._dst_admin = kafka.GroupAdmin(dst_cluster, admin)
        self._reader: Consumer | None = None

    def _dst_reader(self) -> Consumer:
        if self._reader is None:
            self._reader = self._new_reader(self.dst_cluster)
        return self._reader

    def _source_topic(self, kafka_topic: str, topics: set[str] | None) -> str | None:
        tp = from_kafka_topic_name(self.src_stream.cluster, kafka_topic)
        if tp is None or tp.stream.path != self.src_stream.path:
            return None
        if topics is not None and tp.topic not in topics:
            return None
        return tp.topic

    def _dst_end(self, kt: str, p: int, needed: int) -> int:
        """The destination's end, read for real only when the reported high watermark is below `needed`."""
        c = self._dst_reader()
        tp = TopicPartition(kt, p)
        try:
            _, high = kafka.watermarks(c, tp)
        except KafkaException:
            return -1  # topic or partition not replicated yet
        if high >= needed:
            return int(high)
        try:
            return kafka.true_end(c, tp)
        except (KafkaException, TimeoutError):
            return int(high)

    def source_commits(self) -> SourceCommits:
        """What every group of the source cluster committed (streamrepl's own left out), whatever its topics: one
        ListGroups and one OffsetFetch per group. The same for every link out of that cluster: a gateway's cursor
        sync reads it once a round for all of them (cursor_sync.CursorSync), not once per link."""
        groups = kafka.list_groups(self.src_cluster, self._src_admin)
        return kafka.committed_offsets(self.src_cluster, self._src_admin, groups)

    def run_once(
        self, topics: Iterable[str] | None = None, source: Callable[[], SourceCommits] | None = None
    ) -> list[dict[str, Any]]:
        """Copy what moved since the last run; returns one dict per destination offset changed.

        `topics` limits the work to these stream topics (default: every topic of the stream); `source` gives
        what the source's groups committed (default: `source_commits()`, read now).
        Each dict has group, topic, partition, source (the source offset), previous (the
        destination offset before, -1 when none) and offset (what was committed; below
        source when the destination does not hold the records up to source yet).
        """
        try:
            return self._run(set(topics) if topics is not None else None, source or self.source_commits)
        except StreamreplError:
            # Unreachable, or a client wedged by a dropped connection: start the next run afresh (every request of
            # the run has settled: the group functions wait for each before they raise).
            self._src_admin.let_go()
            self._dst_admin.let_go()
            raise

    def _run(self, wanted: set[str] | None, source: Callable[[], SourceCommits]) -> list[dict[str, Any]]:
        src = source()
        # group -> {(dst Kafka topic, partition): (source offset, metadata, stream topic)}
        plan: dict[str, dict[tuple[str, int], tuple[int, str | None, str]]] = {}
        for g, (offs, meta) in src.items():
            for (kt, p), off in offs.items():
                t = self._source_topic(kt, wanted)
                if t is not None:
                    plan.setdefault(g, {})[(kafka_topic_name(self.dst_stream, t), p)] = (off, meta.get((kt, p)), t)
        if not plan:
            return []
        dst = kafka.committed_offsets(self.dst_cluster, self._dst_admin, sorted(plan))
        # group -> [(dst Kafka topic, partition, source offset, destination offset, metadata, stream topic)]
        moves: dict[str, list[tuple[str, int, int, int, str | None, str]]] = {}
        for g, cells in plan.items():
            current = dst.get(g, ({}, {}))[0]
            for (kt, p), (off, md, t) in cells.items():
                before = current.get((kt, p), -1)
                if off > before:
                    moves.setdefault(g, []).append((kt, p, off, before, md, t))
        if not moves:
            return []
        info = kafka.describe_groups(self.dst_cluster, self._dst_admin, sorted(moves))
        changed: list[dict[str, Any]] = []
        for g, todo in sorted(moves.items()):
            gi = info.get(g)
            if gi is not None and gi.active:
                continue  # consumed on the destination: its own commits win
            tps = []
            rows = []
            for kt, p, off, before, md, t in todo:
                end = self._dst_end(kt, p, off)
                target = min(off, end)
                if target <= before or target < 0:
                    continue
                tps.append(kafka.group_offset(kt, p, target, md))
                rows.append(
                    {"group": g, "topic": t, "partition": p, "source": off, "previous": before, "offset": target}
                )
            if not tps:
                continue
            try:
                refused = kafka.commit_offsets(self._dst_admin, g, tps)
            except KafkaException:
                continue  # the group became active, or the broker is busy (its admin let go): next run
            not_committed = {(tp.topic, tp.partition) for tp in refused}
            for row, tp in zip(rows, tps, strict=True):
                if (tp.topic, tp.partition) not in not_committed:
                    changed.append(row)
        return changed

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> CursorReplicator:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def sync_committed_offsets(
    src_cluster: Cluster,
    dst_cluster: Cluster,
    src_stream: StreamPath,
    dst_stream: StreamPath,
    topics: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One pass of cursor replication from `src_stream` to `dst_stream` (see CursorReplicator.run_once)."""
    with CursorReplicator(src_cluster, dst_cluster, src_stream, dst_stream) as r:
        return r.run_once(topics)
