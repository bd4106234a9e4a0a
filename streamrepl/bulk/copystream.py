"""copystream: copy every topic of a stream into another stream, offsets preserved (in threads here when the
copy is small, else a Spark job: `inprocess.choose`).

Records go exactly as replication writes them: through `applier.OffsetPreservingWriter`, from the
destination's `resume_point`, one ordered writer per partition. The end of each source partition is
taken once when the job starts, so the job ends even while producers keep writing; a rerun copies only
what is new. A lock in the destination stream's metadata record (`lock.CopyLock`) keeps two runs from
writing the same destination at once.

Reading stops at the source's stable end: records of a transaction still open when the job starts are
not copied (the partition is reported as stopped there), and invisible offsets (transaction markers,
aborted records) get a filler only once they are decided.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from .. import kafka, policy, stream_ops, streams, topics
from ..applier import OffsetPreservingWriter, flush, resume_point
from ..divergence import compare, tail_of
from ..errors import AlreadyExists, InvalidArgument, StreamreplError
from ..kafka import Consumer, TopicPartition
from ..model import Stream
from ..paths import StreamPath, kafka_topic_name
from ..registry import Cluster, Registry
from . import inprocess, spark
from .access import check_any_perm
from .copyresult import CopyResult
from .lock import CopyLock, CopyLocked, LockRefresher
from .progress import copy_progress
from .reader import CONSUMER_TUNING, READ_UNCOMMITTED, Clients, batches, snapshot_end

#: Fillers are queued in chunks of at most this many, so that a huge gap never overflows the queue.
FILL_CHUNK = 50_000
#: Keep at most this many records queued in a task's producer before waiting for acknowledgements.
QUEUE_HIGH = 400_000
FLUSH_TIMEOUT = 120.0
#: At most this many producers are made before planning (an in-process run's threads; more are made as needed).
WARM_MAX = 8

PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.timeout.ms": int(FLUSH_TIMEOUT * 1000),
}


# -- the tasks: one partition each ------------------------------------------------------------
def _fill(w: OffsetPreservingWriter, producer: Any, to: int) -> None:
    while w.next < to:
        w.fill_to(min(to, w.next + FILL_CHUNK))
        producer.poll(0)
        while len(producer) > QUEUE_HIGH:
            producer.poll(0.05)


class SharedProducer:
    """One producer for every partition a task copies: an idempotent producer is slow to set up."""

    def __init__(self, cluster: Cluster, clients: Clients = kafka):
        self.cluster = cluster
        self.clients = clients
        self.producer: Any = None

    def get(self) -> Any:
        if self.producer is None:
            self.producer = self.clients.producer(self.cluster, **PRODUCER_TUNING)
        return self.producer

    def discard(self) -> None:
        """After a failure: drain what is queued, and start the next partition on a fresh producer."""
        if self.producer is not None:
            self.producer.flush(10)
            self.producer = None


def copy_partition(
    spec: dict[str, Any], item: dict[str, Any], shared: SharedProducer | None = None, clients: Clients = kafka
) -> dict[str, Any]:
    """Copy one source partition into its destination partition (runs in a Spark task)."""
    t0 = time.monotonic()
    src = Cluster(spec["src_cluster"], spec["src_props"])
    dst = Cluster(spec["dst_cluster"], spec["dst_props"])
    shared = shared or SharedProducer(dst, clients)
    secrets = src.secrets() + dst.secrets()
    part = item["partition"]
    end = item["end"]
    label = f"{spec['dst_path']}:{item['topic']}[{part}]"
    out: dict[str, Any] = {
        "topic": item["topic"],
        "partition": part,
        "start": -1,
        "end": end,
        "records": 0,
        "fillers": 0,
        "bytes": 0,
        "stopped": None,
        "error": None,
    }
    consumer: Consumer | None = None
    w: OffsetPreservingWriter | None = None
    data = 0
    try:
        probe = clients.consumer(dst)
        try:
            start, origin = resume_point(probe, TopicPartition(item["dst"], part), spec["dst_uuid"])
        finally:
            probe.close()
        out["start"] = start
        if start < end:
            consumer = clients.consumer(src, **CONSUMER_TUNING)
            producer = shared.get()
            w = OffsetPreservingWriter(
                producer, item["dst"], part, start, spec["dst_uuid"], spec["src_uuid"], origin, label=label
            )
            for good, eof in batches(consumer, TopicPartition(item["src"], part, start), end, label):
                if good:
                    first = cast(int, good[0].offset())
                    if first - w.next > FILL_CHUNK:
                        _fill(w, producer, first)
                    skipped = w.skipped
                    w.write(good)
                    data += len(good) - (w.skipped - skipped)
                    producer.poll(0)
                    while len(producer) > QUEUE_HIGH:
                        producer.poll(0.05)
                    w.raise_errors()
                else:
                    producer.poll(0)
                if eof is not None and w.next < end:
                    if item["stable"]:
                        _fill(w, producer, end)  # markers and aborted records: decided, invisible
                    else:
                        out["stopped"] = w.next  # an open transaction: nothing after it is decided yet
            flush(producer, [w], timeout=FLUSH_TIMEOUT)
    except Exception as e:  # noqa: BLE001 - reported per partition; the driver decides the exit status
        text = spark.describe(e, secrets)
        out["error"] = text if text.startswith(f"{label}: ") else f"{label}: {text}"
        shared.discard()
    finally:
        if consumer is not None:
            consumer.close()
    if w is not None:
        out["records"] = data
        out["fillers"] = w.next - out["start"] - data  # every offset copied is a record or a filler
        out["bytes"] = w.bytes
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def _copy_task(
    spec: dict[str, Any],
    groups: Iterable[list[dict[str, Any]]],
    clients: Clients = kafka,
    shared: SharedProducer | None = None,
) -> Iterator[dict[str, Any]]:
    """One Spark task, or one thread of an in-process run: a few partitions, one producer."""
    shared = shared or SharedProducer(Cluster(spec["dst_cluster"], spec["dst_props"]), clients)
    try:
        for group in groups:
            for item in group:
                yield copy_partition(spec, item, shared, clients)
    finally:
        shared.discard()


def _deal(items: list[dict[str, Any]], hands: int) -> list[list[dict[str, Any]]]:
    """Deal work items (largest first) round-robin into `hands` groups, one Spark task each."""
    ordered = sorted(items, key=lambda i: i["est"] - i["end"])
    hands = max(1, min(hands, len(ordered)))
    return [ordered[k::hands] for k in range(hands)]


# -- the driver: planning, then the job -------------------------------------------------------
def _prepare_destination(
    reg: Registry, src: str, dst: str, src_r: streams.Resolved, src_rec: Stream
) -> tuple[streams.Resolved, Stream, bool]:
    dst_r = streams.resolve(reg, dst)
    if dst_r.cluster.name == src_r.cluster.name and dst_r.path.path == src_r.path.path:
        raise InvalidArgument(f"-src and -dst are the same stream {src_r.path}; name another destination")
    created = False
    dst_rec = dst_r.store.get(dst_r.path.path)
    if dst_rec is None:
        try:
            dst_rec = stream_ops.create(reg, dst, {}, copymetafrom=src)
            created = True
        except AlreadyExists:
            dst_rec = dst_r.store.get(dst_r.path.path)
            if dst_rec is None:
                raise
    check_any_perm(dst_rec, ("copyperm", "produceperm"), dst_r, "copy into it")
    return dst_r, dst_rec, created


def _plan_copy(
    src_r: streams.Resolved, src_rec: Stream, dst_r: streams.Resolved, dst_rec: Stream, warn: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Create missing destination topics and list one work item per source partition."""
    src_present = kafka.topics(src_r.cluster)
    dst_present = kafka.topics(dst_r.cluster)
    pairs: list[tuple[str, str, str, int]] = []
    for topic in sorted(src_rec.topics):
        skt = kafka_topic_name(src_r.path, topic)
        n = src_present.get(skt)
        if n is None:
            warn(
                f"topic '{topic}' of {src_r.path} has no Kafka topic '{skt}' on cluster '{src_r.cluster.name}'; skipped"
            )
            continue
        dkt = kafka_topic_name(dst_r.path, topic)
        have = dst_present.get(dkt)
        if have is None:
            # CreateTime, whatever the source uses: the copy carries the source's timestamps.
            with contextlib.suppress(AlreadyExists):
                kafka.create_topics(dst_r.cluster, [(dkt, n, streams.kafka_configs(dst_rec.settings, "createtime"))])
        elif have < n:
            kafka.add_partitions(dst_r.cluster, dkt, n)
        meta = dst_rec.topics.get(topic)
        if meta is None or meta.partitions < n:
            tstype = meta.timestamptype if meta else "createtime"
            topics.register_existing(dst_r, topic, n, tstype)
        elif meta.timestamptype == "logappendtime":
            warn(
                f"topic '{topic}' of {dst_r.path} stamps LogAppendTime: copies get the destination's"
                " time, not the source's timestamps"
            )
        pairs.append((topic, skt, dkt, n))

    items: list[dict[str, Any]] = []
    committed = kafka.consumer(src_r.cluster)
    uncommitted = kafka.consumer(src_r.cluster, **READ_UNCOMMITTED)
    probe = kafka.consumer(dst_r.cluster)
    try:
        for topic, skt, dkt, n in pairs:
            for p in range(n):
                end, stable = snapshot_end(committed, uncommitted, TopicPartition(skt, p))
                est = kafka.true_end(probe, TopicPartition(dkt, p))
                item = {"topic": topic, "partition": p, "src": skt, "dst": dkt, "end": end, "stable": stable}
                label = f"{dst_r.path}:{topic}[{p}]"
                conflict = _foreign_end(
                    committed,
                    probe,
                    skt,
                    dkt,
                    p,
                    end,
                    est,
                    src_rec.uuid,
                    dst_rec.uuid,
                    (src_r.path, dst_r.path, topic),
                )
                items.append({**item, "est": min(est, end), "conflict": f"{label}: {conflict}" if conflict else None})
    finally:
        for c in (committed, uncommitted, probe):
            c.close()
    return items


def _foreign_end(
    src: Consumer,
    dst: Consumer,
    skt: str,
    dkt: str,
    p: int,
    end: int,
    est: int,
    src_uuid: str,
    dst_uuid: str,
    names: tuple[StreamPath, StreamPath, str],
) -> str | None:
    """Why the copy's partition cannot be a copy of the source's (None when it can be, as far as its last record
    shows). The writer checks the origin of every record it is about to write, so a record written into the copy
    by something else is caught when the source has more; this catches it when there is nothing new to copy.
    And a rerun must not append a source's new history after the old one (its topic re-created, records it had
    lost): the copy's last record must still be the source's (divergence.py)."""
    if est <= 0:
        return None
    mine = kafka.last_record(dst, TopicPartition(dkt, p), est)
    theirs = kafka.last_record(src, TopicPartition(skt, p), est) if end >= est else None
    div = compare(
        tail_of(mine, dst_uuid) if mine is not None else None,
        est,
        tail_of(theirs, src_uuid) if theirs is not None else None,
        end,
        src_uuid,
        dst_uuid,
    )
    if div is not None:
        src_path, dst_path, topic = names
        return div.describe(
            f"source {src_path}:{topic} partition {p}",
            f"streamrepl diffstreams -src {src_path} -dst {dst_path}",
            "copy into a new stream (or delete the copy's topic and copy again)",
        )
    if est > end:
        return (
            f"the copy ends at offset {est}, past the source's end {end}: something else wrote into the copy;"
            " copying this partition stopped (diffstreams shows where they differ)"
        )
    if mine is None or policy.is_filler(mine.headers()):
        return None  # offsets with no visible record: a filler or a marker, nothing to compare
    mine_origin = policy.origin_of(mine.headers(), dst_uuid)
    theirs_origin = policy.origin_of(theirs.headers(), src_uuid) if theirs is not None else None
    if theirs_origin == dst_uuid or (
        theirs is not None
        and mine_origin == theirs_origin
        and mine.key() == theirs.key()
        and mine.value() == theirs.value()
    ):
        return None
    return (
        f"the record at offset {est - 1} of the copy did not come from the source: something else wrote into the"
        " copy; copying this partition stopped (diffstreams shows where they differ)"
    )


def copystream(
    reg: Registry,
    src: str,
    dst: str,
    *,
    master: str | None = None,
    numthreads: int | None = None,
    conf: dict[str, str] | None = None,
    mapreduce: bool | None = None,
    progress: bool | None = None,
    warn: Callable[[str], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> CopyResult:
    """Copy every topic of stream `src` into stream `dst`, offsets preserved; see the module doc."""
    warn = warn or (lambda text: print(f"copystream: warning: {text}", file=sys.stderr))
    spark.check_spark_options(master, numthreads)  # before the destination is created or locked
    inprocess.check_engine_options(mapreduce, master)
    src_r, src_rec = streams.load(reg, src)
    check_any_perm(src_rec, ("copyperm", "consumeperm"), src_r, "copy from it")
    dst_r, dst_rec, created = _prepare_destination(reg, src, dst, src_r, src_rec)
    result = CopyResult(str(src_r.path), str(dst_r.path), created=created)
    secrets = src_r.cluster.secrets() + dst_r.cluster.secrets()

    lock = CopyLock(dst_r, str(src_r.path), local=master is None or master.startswith("local"))
    lock.acquire()
    handle: spark.SparkHandle | None = None
    cancel: list[Callable[[], None]] = []
    refresher = LockRefresher(lock, lambda: [f() for f in cancel])
    refresher.start()
    warm: list[SharedProducer] = []
    try:
        if mapreduce is not True and not master:
            # An idempotent producer is ready 0.5-0.9 s after it is made (measured): these get ready while we plan.
            warm = [SharedProducer(dst_r.cluster) for _ in range(min(numthreads or inprocess.THREADS, WARM_MAX))]
            for shared in warm:
                shared.get()
        dst_rec = dst_r.store.get(dst_r.path.path) or dst_rec
        items = _plan_copy(src_r, src_rec, dst_r, dst_rec, warn)
        result.partitions = len(items)
        result.failures.extend(i["conflict"] for i in items if i["conflict"])
        work = [i for i in items if i["end"] > i["est"] and not i["conflict"]]
        if not work:
            return result
        show = sys.stderr.isatty() if progress is None else progress
        records = sum(i["end"] - i["est"] for i in work)
        result.engine = inprocess.choose(records, inprocess.COPY_LIMIT, mapreduce, master)
        line = result.engine.line("copying", records)
        unused = inprocess.unused_sparkconf(result.engine, conf)
        if unused:
            warn(unused)
        spec = {
            "src_cluster": src_r.cluster.name,
            "src_props": dict(src_r.cluster.properties),
            "dst_cluster": dst_r.cluster.name,
            "dst_props": dict(dst_r.cluster.properties),
            "src_uuid": src_rec.uuid,
            "dst_uuid": dst_rec.uuid,
            "dst_path": str(dst_r.path),
        }
        threads: inprocess.Threads[int, dict[str, Any]] | None = None
        if result.engine.spark:
            inprocess.announce("copystream", line, say, show)
            with spark.starting(show, f"starting Spark ({master or 'local'})"):
                handle = spark.start_spark(
                    f"streamrepl copystream {src_r.path} -> {dst_r.path}", master, numthreads, conf, secrets
                )
            result.spark_seconds = handle.seconds
            cancel.append(handle.sc.cancelAllJobs)
        else:
            threads = inprocess.Threads(numthreads or inprocess.THREADS)
            cancel.append(threads.stop.set)
        bar = copy_progress(show, dst_r.cluster, work, f"copystream {src_r.path} -> {dst_r.path}")
        t0 = time.monotonic()
        try:
            if threads is not None:
                inprocess.announce("copystream", line, say, show)  # here: an interrupt from now on stops a copy
                groups = _deal(work, threads.threads)
                rows = threads.run(
                    lambda clients, k: _copy_task(spec, [groups[k]], clients, warm[k] if k < len(warm) else None),
                    range(len(groups)),
                    bar.tick,
                )
            else:
                assert handle is not None
                sc = handle.sc
                # A few partitions per task: each task sets up one producer, and tasks stay balanced.
                groups = _deal(work, 2 * max(1, sc.defaultParallelism))
                rows = spark.run_job(
                    sc,
                    lambda: sc.parallelize(groups, len(groups)).mapPartitions(functools.partial(_copy_task, spec)),
                    bar.tick,
                )
        except (Exception, inprocess.Cancelled) as e:  # noqa: BLE001 - a failed job is one line like any other
            if lock.lost:
                raise CopyLocked(lock.lost) from None
            what = "the Spark job" if threads is None else "the copy"
            raise StreamreplError(f"{what} failed: {spark.describe(e, secrets)}") from None
        except KeyboardInterrupt as e:
            raise type(e)(
                f"the copy into {dst_r.path} stopped part way; each of its partitions ends where its copy stopped,"
                " offsets intact, and the lock is released: run copystream again to copy the rest"
            ) from None
        finally:
            bar.close()
        result.seconds = time.monotonic() - t0
        if lock.lost:
            raise CopyLocked(lock.lost)
        for row in sorted(rows, key=lambda r: (r["topic"], r["partition"])):
            result.records += row["records"]
            result.fillers += row["fillers"]
            result.bytes += row["bytes"]
            if row["error"]:
                result.failures.append(row["error"])
            elif row["stopped"] is not None:
                result.stopped.append(
                    f"{dst_r.path}:{row['topic']}[{row['partition']}]: stopped at offset {row['stopped']}"
                    f" behind a transaction still open in the source ({row['end'] - row['stopped']} offsets"
                    " not copied); run again once it is committed or aborted"
                )
        result.details = rows
        return result
    finally:
        for shared in warm:
            shared.discard()
        refresher.stop()
        if handle is not None:
            handle.stop()
        lock.release()
