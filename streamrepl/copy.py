"""Bulk work on Spark: copystream and diffstreams.

Both are Spark jobs whose tasks talk to the brokers themselves: the driver plans one work
item per (topic, partition) and each task opens its own confluent-kafka clients, so records
never pass through the JVM. Nothing here imports pyspark at module level; the CLI's
`--help` stays free of it.

copystream
    Copies every topic of a stream into another stream with offsets preserved, exactly as
    replication does: through `applier.OffsetPreservingWriter`, from the destination's
    `resume_point`, one ordered writer per partition. The end of each source partition is
    taken once when the job starts, so the job ends even while producers keep writing; a
    rerun copies only what is new. A lock in the destination stream's metadata record
    (`copylock`: owner, since, expires; refreshed while the copy runs) keeps two runs from
    writing the same destination at once.

    Reading stops at the source's stable end: records of a transaction still open when the
    job starts are not copied (the partition is reported as stopped there), and invisible
    offsets (transaction markers, aborted records) get a filler only once they are decided.

diffstreams
    Compares two streams partition by partition: counts, the first differing offset and a
    digest of the records (offset, key, value, user headers, timestamp). Replication's own
    headers are ignored, and a filler on one side matches a gap (no visible record) on the
    other, so a replica that copystream or the gateways made compares equal to its source.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import getpass
import hashlib
import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from . import broker, policy, streams, topics
from .applier import OffsetPreservingWriter, flush, resume_point
from .errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied, StreamreplError, Unreachable
from .metastore import Record
from .paths import kafka_topic_name
from .registry import Cluster, Registry

#: The field of a destination stream's metadata record that holds the copy lock.
LOCK_FIELD = "copylock"
#: A lock not refreshed for this long belongs to a run that died; the next run takes it over.
LOCK_TTL = 120.0
LOCK_REFRESH = 20.0

#: Records fetched per consume() call in a task.
BATCH = 10_000
#: A partition from which nothing (not even an end-of-partition event) arrives for this long fails.
STALL_TIMEOUT = 60.0
#: Fillers are queued in chunks of at most this many, so that a huge gap never overflows the queue.
FILL_CHUNK = 50_000
#: Keep at most this many records queued in a task's producer before waiting for acknowledgements.
QUEUE_HIGH = 400_000
FLUSH_TIMEOUT = 120.0

CONSUMER_TUNING: dict[str, Any] = {
    "fetch.wait.max.ms": 50,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "queued.min.messages": 200_000,
}
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.timeout.ms": int(FLUSH_TIMEOUT * 1000),
}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
_ERROR = Message.error
#: Consumer errors that waiting will not cure.
_HOPELESS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
    }
)


class CopyLocked(StreamreplError):
    """Another copystream run holds the destination."""

    code = errno.EBUSY


# -- small helpers ------------------------------------------------------------------------
def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def check_any_perm(rec: Record, perms: tuple[str, ...], r: streams.Resolved, action: str) -> None:
    """Pass when the local identity holds at least one of `perms` on the stream."""
    for perm in perms:
        try:
            streams.check_perm(rec, perm, r.path, action)
            return
        except PermissionDenied:
            continue
    from . import ace

    me = ace.current_identity()
    raise PermissionDenied(
        f"user '{me.user}' lacks {' or '.join(perms)} on stream {r.path}, needed to {action};"
        f" ask a user with adminperm to grant it (streamrepl stream edit -path {r.path} -{perms[0]} ...)"
    )


def _describe(e: BaseException, secrets: Iterable[str]) -> str:
    if isinstance(e, StreamreplError):
        return broker.scrub(e.message, secrets)
    return broker.describe_exception(e, secrets)[1]


# -- the copy lock ------------------------------------------------------------------------
class _Unchanged(Exception):
    """Raised inside a metadata edit to leave the record as it is."""


def _dead_here(held: dict[str, Any]) -> bool:
    """True when the lock's owner ran Spark in local mode on this host and its process is gone (killed,
    crashed): its tasks died with it (PySpark's JVM exits when its parent does), so a rerun from cron on
    the same host need not wait for the lock to expire. A run on a Spark cluster may leave executors
    writing for a while after its driver dies: its lock is waited for. Owners are `user@host:pid:nonce`."""
    if not held.get("local"):
        return False
    m = re.fullmatch(r"[^@]*@(.*):(\d+):[0-9a-f]+", str(held.get("owner", "")))
    if m is None or m.group(1) != socket.gethostname():
        return False
    try:
        os.kill(int(m.group(2)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, under another user
    return False


class CopyLock:
    """The `copylock` field of a destination stream's metadata record (compare-and-set)."""

    def __init__(self, r: streams.Resolved, source: str, ttl: float = LOCK_TTL, local: bool = True):
        self.r = r
        self.source = source
        #: Spark runs inside this process (local mode): its tasks die with it
        self.local = local
        self.ttl_ms = int(ttl * 1000)
        self.owner = f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.since = 0
        self.lost: str | None = None

    def _refuse(self, held: dict[str, Any]) -> CopyLocked:
        return CopyLocked(
            f"destination {self.r.path} is being copied by another run (owner {held.get('owner')},"
            f" since {_iso(int(held.get('since', 0)))}); wait for it to finish, or, if that run died,"
            f" for its lock to expire at {_iso(int(held.get('expires', 0)))}"
        )

    def _take(self, current: Record | None) -> Record:
        if current is None:
            raise NotFound(f"stream {self.r.path} does not exist")
        held = current.get(LOCK_FIELD)
        now = _now_ms()
        if held and held.get("owner") != self.owner and int(held.get("expires", 0)) > now and not _dead_here(held):
            raise self._refuse(held)
        since = int(held["since"]) if held and held.get("owner") == self.owner else now
        current[LOCK_FIELD] = {
            "owner": self.owner,
            "since": since,
            "expires": now + self.ttl_ms,
            "source": self.source,
            "local": self.local,
        }
        self.since = since
        return current

    def acquire(self) -> None:
        self.r.store.update(self.r.path.path, self._take)

    def refresh(self) -> bool:
        """Extend the lock; False (and `lost` set) when another run has taken it over."""

        def extend(current: Record | None) -> Record:
            held = (current or {}).get(LOCK_FIELD)
            if not held or held.get("owner") != self.owner:
                other = held.get("owner") if held else "nobody"
                raise CopyLocked(f"the copy lock on {self.r.path} was taken over by {other}")
            return self._take(current)

        try:
            self.r.store.update(self.r.path.path, extend)
            return True
        except CopyLocked as e:
            self.lost = e.message
            return False

    def release(self) -> None:
        def drop(current: Record | None) -> Record:
            held = (current or {}).get(LOCK_FIELD)
            if current is None or not held or held.get("owner") != self.owner:
                raise _Unchanged
            del current[LOCK_FIELD]
            return current

        with contextlib.suppress(_Unchanged):
            self.r.store.update(self.r.path.path, drop)


class _Refresher(threading.Thread):
    def __init__(self, lock: CopyLock, on_lost: Callable[[], object], every: float = LOCK_REFRESH):
        super().__init__(daemon=True, name="copylock-refresher")
        self.lock, self.on_lost, self.every = lock, on_lost, every
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                if not self.lock.refresh():
                    self.on_lost()
                    return
            except StreamreplError:
                continue  # the destination is briefly unreachable; the lock has slack for that

    def stop(self) -> None:
        self.stopped.set()


# -- Spark --------------------------------------------------------------------------------
@dataclass
class SparkHandle:
    spark: Any
    seconds: float
    owned: bool
    log: str | None = None

    @property
    def sc(self) -> Any:
        return self.spark.sparkContext

    def stop(self) -> None:
        if self.owned:
            self.spark.stop()
            if self.log and not os.environ.get("STREAMREPL_KEEP_SPARK_LOG"):
                # Named only when Spark fails to start; a run that got this far leaves nothing behind (cron).
                with contextlib.suppress(OSError):
                    os.unlink(self.log)


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point fd 2 at `path` while the JVM starts: it keeps that stderr (and its chatter) for good."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


@contextlib.contextmanager
def _starting(show: bool, text: str) -> Iterator[None]:
    """A spinner on the terminal while Spark starts (through a copy of fd 2: the JVM gets fd 2 itself)."""
    if not show:
        yield
        return
    from rich.console import Console

    with os.fdopen(os.dup(2), "w") as tty, Console(file=tty).status(text):
        yield


def _log_tail(path: str | None, lines: int = 8) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line for line in text[-lines:] if line.strip())


def start_spark(
    app_name: str,
    master: str | None = None,
    numthreads: int | None = None,
    conf: dict[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> SparkHandle:
    """A Spark session for one job: `local[*]` (or `local[N]`) unless a master is named.

    An already active SparkContext (a notebook, a test) is reused and left running. A JVM this
    function launches writes its log to a file instead of the terminal (named on failure).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if numthreads is not None and numthreads < 1:
        raise InvalidArgument(f"-numthreads {numthreads} must be at least 1")
    t0 = time.monotonic()
    if SparkContext._active_spark_context is not None:
        return SparkHandle(SparkSession.builder.getOrCreate(), 0.0, owned=False)
    settings: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in (conf or {}):
        # Tasks run where streamrepl and confluent-kafka are: this interpreter, unless told otherwise.
        # PySpark reads the workers' interpreter from the environment, not from its settings.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    elif (conf or {}).get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = (conf or {})["spark.pyspark.python"]
    if master and numthreads:
        settings["spark.cores.max"] = str(numthreads)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master or (f"local[{numthreads}]" if numthreads else "local[*]"))
    for k, v in settings.items():
        builder = builder.config(k, v)
    log: str | None = None
    try:
        if SparkContext._gateway is None and not os.environ.get("STREAMREPL_DEBUG"):
            log = os.path.join(tempfile.gettempdir(), f"streamrepl-spark-{os.getpid()}.log")
            with _stderr_to(log):
                spark = builder.getOrCreate()
        else:
            spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - the JVM's reasons are in its log
        detail = _log_tail(log) or _describe(e, secrets)
        where = f" (log {log})" if log else ""
        raise StreamreplError(
            f"Spark did not start on master {master or 'local'}{where}: {broker.scrub(detail, secrets)}"
        ) from None
    spark.sparkContext.setLogLevel("WARN")
    handle = SparkHandle(spark, time.monotonic() - t0, owned=True, log=log)
    if not cast(str, spark.sparkContext.master).startswith("local"):
        _ship_package(spark.sparkContext)
    return handle


def _ship_package(sc: Any) -> None:
    """Send streamrepl itself to the executors, for clusters where it is not installed."""
    import zipfile

    pkg = Path(__file__).resolve().parent
    out = Path(tempfile.mkdtemp(prefix="streamrepl-pyfiles-")) / "streamrepl.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in pkg.rglob("*.py"):
            z.write(f, f.relative_to(pkg.parent).as_posix())
    sc.addPyFile(str(out))


def _run_job(
    sc: Any, make: Callable[[], Any], on_tick: Callable[[], None] | None = None, tick: float = 0.5
) -> list[Any]:
    """Collect an RDD in a thread (so Ctrl-C and the lock can cancel it) while `on_tick` runs here."""
    from pyspark import InheritableThread

    group = f"streamrepl-{uuid.uuid4().hex[:8]}"
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            sc.setJobGroup(group, "streamrepl", interruptOnCancel=True)
            box["rows"] = make().collect()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    t = InheritableThread(target=work, daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(tick)
            if on_tick is not None:
                on_tick()
    except BaseException:
        sc.cancelJobGroup(group)
        t.join(30)
        raise
    if "error" in box:
        raise box["error"]
    return cast(list[Any], box["rows"])


# -- reading a source partition -----------------------------------------------------------
def snapshot_end(committed: Consumer, uncommitted: Consumer, tp: TopicPartition) -> tuple[int, bool]:
    """(end, stable): the real end of the log now, and whether every offset before it is decided.

    A partition is not stable while a transaction in it is open: its records may still commit
    (or abort), so readers stop at the first undecided offset.
    """
    end = broker.true_end(uncommitted, tp)
    if end <= 0:
        return end, True
    return end, broker.true_end(committed, tp) >= end


def _batches(c: Consumer, tp: TopicPartition, end: int, label: str) -> Iterator[tuple[list[Message], int | None]]:
    """Visible records of `tp` from its assigned offset up to (not including) `end`, in batches.

    Each item is (records, eof): eof is the partition's read position when the broker said
    there is nothing more to read now (the rest up to `end` is then invisible), else None.
    The iteration ends at `end` or after an eof.
    """
    c.assign([tp])
    quiet_since = time.monotonic()
    while True:
        msgs = c.consume(BATCH, timeout=0.1)
        if not msgs:
            if time.monotonic() - quiet_since > STALL_TIMEOUT:
                raise Unreachable(
                    f"{label}: nothing arrived from the source for {STALL_TIMEOUT:.0f}s; is its broker up?"
                )
            yield [], None
            continue
        eof: int | None = None
        good = msgs
        if any(map(_ERROR, msgs)):
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof = cast(int, m.offset())
                elif err.fatal() or err.code() in _HOPELESS:
                    raise KafkaException(err)
                # Anything else (a broker briefly away) librdkafka retries by itself; the stall timeout
                # ends the wait if it never comes back.
        if good or eof is not None:
            quiet_since = time.monotonic()
        if good and cast(int, good[-1].offset()) >= end:
            good = [m for m in good if cast(int, m.offset()) < end]
            yield good, None
            return
        yield good, eof
        if eof is not None or (good and cast(int, good[-1].offset()) >= end - 1):
            return


# -- copystream: tasks ----------------------------------------------------------------------
def _fill(w: OffsetPreservingWriter, producer: Any, to: int) -> None:
    while w.next < to:
        w.fill_to(min(to, w.next + FILL_CHUNK))
        producer.poll(0)
        while len(producer) > QUEUE_HIGH:
            producer.poll(0.05)


class _SharedProducer:
    """One producer for every partition a task copies: an idempotent producer is slow to set up."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.producer: Any = None

    def get(self) -> Any:
        if self.producer is None:
            self.producer = broker.producer(self.cluster, **PRODUCER_TUNING)
        return self.producer

    def discard(self) -> None:
        """After a failure: drain what is queued, and start the next partition on a fresh producer."""
        if self.producer is not None:
            self.producer.flush(10)
            self.producer = None


def copy_partition(spec: dict[str, Any], item: dict[str, Any], shared: _SharedProducer | None = None) -> dict[str, Any]:
    """Copy one source partition into its destination partition (runs in a Spark task)."""
    t0 = time.monotonic()
    src = Cluster(spec["src_cluster"], spec["src_props"])
    dst = Cluster(spec["dst_cluster"], spec["dst_props"])
    shared = shared or _SharedProducer(dst)
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
        probe = broker.consumer(dst)
        try:
            start, origin = resume_point(probe, TopicPartition(item["dst"], part), spec["dst_uuid"])
        finally:
            probe.close()
        out["start"] = start
        if start < end:
            consumer = broker.consumer(src, **CONSUMER_TUNING)
            producer = shared.get()
            w = OffsetPreservingWriter(
                producer, item["dst"], part, start, spec["dst_uuid"], spec["src_uuid"], origin, label=label
            )
            for good, eof in _batches(consumer, TopicPartition(item["src"], part, start), end, label):
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
        text = _describe(e, secrets)
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


def _copy_task(spec: dict[str, Any], groups: Iterable[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    shared = _SharedProducer(Cluster(spec["dst_cluster"], spec["dst_props"]))
    try:
        for group in groups:
            for item in group:
                yield copy_partition(spec, item, shared)
    finally:
        shared.discard()


def _deal(items: list[dict[str, Any]], hands: int) -> list[list[dict[str, Any]]]:
    """Deal work items (largest first) round-robin into `hands` groups, one Spark task each."""
    ordered = sorted(items, key=lambda i: i["est"] - i["end"])
    hands = max(1, min(hands, len(ordered)))
    return [ordered[k::hands] for k in range(hands)]


# -- copystream: driver ---------------------------------------------------------------------
@dataclass
class CopyResult:
    src: str
    dst: str
    created: bool = False
    partitions: int = 0
    records: int = 0
    fillers: int = 0
    bytes: int = 0
    seconds: float = 0.0
    spark_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.failures and not self.stopped

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "created": self.created,
            "partitions": self.partitions,
            "records": self.records,
            "fillers": self.fillers,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "recordspersecond": round(self.rate),
            "sparkstartupseconds": round(self.spark_seconds, 3),
            "failed": len(self.failures) + len(self.stopped),
        }

    def summary(self) -> str:
        fillers = f", {self.fillers} fillers" if self.fillers else ""
        failed = len(self.failures) + len(self.stopped)
        tail = f"; {failed} partitions NOT fully copied" if failed else ""
        return (
            f"copystream: {self.src} -> {self.dst}: copied {self.records} records ({self.bytes} bytes{fillers})"
            f" in {self.seconds:.2f} s, {self.rate:.0f} records/s; Spark start-up {self.spark_seconds:.2f} s;"
            f" {self.partitions} partitions{tail}"
        )


class _CopyProgress:
    """A rich progress bar on stderr, fed by the destination's (cheap, possibly low) watermarks."""

    def __init__(self, enabled: bool, dst: Cluster, items: list[dict[str, Any]], label: str):
        self.enabled = enabled and bool(items)
        self.items = items
        self.total = sum(i["end"] - i["est"] for i in items)
        self.last = 0.0
        self.every = max(0.5, len(items) / 100)
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.consumer = broker.consumer(dst)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task(label, total=self.total, rate="")
        self.t0 = time.monotonic()
        self.bar.start()

    def tick(self) -> None:
        if not self.enabled or time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        done = 0
        for i in self.items:
            try:
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(i["dst"], i["partition"]), timeout=2, cached=False
                )
            except KafkaException:
                continue
            done += max(0, min(high, i["end"]) - i["est"])
        rate = done / max(1e-3, time.monotonic() - self.t0)
        self.bar.update(self.task, completed=done, rate=f"{rate:,.0f} rec/s")

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
            self.consumer.close()


def _prepare_destination(
    reg: Registry, src: str, dst: str, src_r: streams.Resolved, src_rec: Record
) -> tuple[streams.Resolved, Record, bool]:
    dst_r = streams.resolve(reg, dst)
    if dst_r.cluster.name == src_r.cluster.name and dst_r.path.path == src_r.path.path:
        raise InvalidArgument(f"-src and -dst are the same stream {src_r.path}; name another destination")
    created = False
    dst_rec = dst_r.store.get(dst_r.path.path)
    if dst_rec is None:
        try:
            dst_rec = streams.create(reg, dst, {}, copymetafrom=src)
            created = True
        except AlreadyExists:
            dst_rec = dst_r.store.get(dst_r.path.path)
            if dst_rec is None:
                raise
    check_any_perm(dst_rec, ("copyperm", "produceperm"), dst_r, "copy into it")
    return dst_r, dst_rec, created


def _plan_copy(
    src_r: streams.Resolved, src_rec: Record, dst_r: streams.Resolved, dst_rec: Record, warn: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Create missing destination topics and list one work item per source partition."""
    src_present = broker.topics(src_r.cluster)
    dst_present = broker.topics(dst_r.cluster)
    pairs: list[tuple[str, str, str, int]] = []
    for topic in sorted(src_rec.get("topics", {})):
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
                broker.create_topics(dst_r.cluster, [(dkt, n, streams.kafka_configs(dst_rec, "createtime"))])
        elif have < n:
            broker.add_partitions(dst_r.cluster, dkt, n)
        meta = dst_rec.get("topics", {}).get(topic)
        if meta is None or meta.get("partitions", 0) < n:
            tstype = meta.get("timestamptype", "createtime") if meta else "createtime"
            topics.register_existing(dst_r, topic, n, tstype)
        elif meta.get("timestamptype") == "logappendtime":
            warn(
                f"topic '{topic}' of {dst_r.path} stamps LogAppendTime: copies get the destination's"
                " time, not the source's timestamps"
            )
        pairs.append((topic, skt, dkt, n))

    items: list[dict[str, Any]] = []
    committed = broker.consumer(src_r.cluster)
    uncommitted = broker.consumer(src_r.cluster, **READ_UNCOMMITTED)
    probe = broker.consumer(dst_r.cluster)
    try:
        for topic, skt, dkt, n in pairs:
            for p in range(n):
                end, stable = snapshot_end(committed, uncommitted, TopicPartition(skt, p))
                est = broker.true_end(probe, TopicPartition(dkt, p))
                item = {"topic": topic, "partition": p, "src": skt, "dst": dkt, "end": end, "stable": stable}
                label = f"{dst_r.path}:{topic}[{p}]"
                conflict = _foreign_end(committed, probe, skt, dkt, p, end, est, src_rec["uuid"], dst_rec["uuid"])
                items.append({**item, "est": min(est, end), "conflict": f"{label}: {conflict}" if conflict else None})
    finally:
        for c in (committed, uncommitted, probe):
            c.close()
    return items


def _foreign_end(
    src: Consumer, dst: Consumer, skt: str, dkt: str, p: int, end: int, est: int, src_uuid: str, dst_uuid: str
) -> str | None:
    """Why the copy's partition cannot be a copy of the source's (None when it can be, as far as its last record
    shows). The writer checks the origin of every record it is about to write, so a record written into the copy
    by something else is caught when the source has more; this catches it when there is nothing new to copy."""
    if est > end:
        return (
            f"the copy ends at offset {est}, past the source's end {end}: something else wrote into the copy;"
            " copying this partition stopped (diffstreams shows where they differ)"
        )
    if est <= 0:
        return None
    mine = broker.last_record(dst, TopicPartition(dkt, p), est)
    theirs = broker.last_record(src, TopicPartition(skt, p), est)
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
    progress: bool | None = None,
    warn: Callable[[str], None] | None = None,
) -> CopyResult:
    """Copy every topic of stream `src` into stream `dst`, offsets preserved; see the module doc."""
    warn = warn or (lambda text: print(f"copystream: warning: {text}", file=sys.stderr))
    src_r, src_rec = streams.load(reg, src)
    check_any_perm(src_rec, ("copyperm", "consumeperm"), src_r, "copy from it")
    dst_r, dst_rec, created = _prepare_destination(reg, src, dst, src_r, src_rec)
    result = CopyResult(str(src_r.path), str(dst_r.path), created=created)
    secrets = src_r.cluster.secrets() + dst_r.cluster.secrets()

    lock = CopyLock(dst_r, str(src_r.path), local=master is None or master.startswith("local"))
    lock.acquire()
    handle: SparkHandle | None = None
    cancel: list[Callable[[], None]] = []
    refresher = _Refresher(lock, lambda: [f() for f in cancel])
    refresher.start()
    try:
        dst_rec = dst_r.store.get(dst_r.path.path) or dst_rec
        items = _plan_copy(src_r, src_rec, dst_r, dst_rec, warn)
        result.partitions = len(items)
        result.failures.extend(i["conflict"] for i in items if i["conflict"])
        work = [i for i in items if i["end"] > i["est"] and not i["conflict"]]
        if not work:
            return result
        show = sys.stderr.isatty() if progress is None else progress
        with _starting(show, f"starting Spark ({master or 'local'})"):
            handle = start_spark(
                f"streamrepl copystream {src_r.path} -> {dst_r.path}", master, numthreads, conf, secrets
            )
        result.spark_seconds = handle.seconds
        sc = handle.sc
        cancel.append(sc.cancelAllJobs)
        spec = {
            "src_cluster": src_r.cluster.name,
            "src_props": dict(src_r.cluster.properties),
            "dst_cluster": dst_r.cluster.name,
            "dst_props": dict(dst_r.cluster.properties),
            "src_uuid": src_rec["uuid"],
            "dst_uuid": dst_rec["uuid"],
            "dst_path": str(dst_r.path),
        }
        bar = _CopyProgress(show, dst_r.cluster, work, f"copystream {src_r.path} -> {dst_r.path}")
        t0 = time.monotonic()
        try:
            # A few partitions per task: each task sets up one producer, and tasks stay balanced.
            groups = _deal(work, 2 * max(1, sc.defaultParallelism))
            rows = _run_job(
                sc,
                lambda: sc.parallelize(groups, len(groups)).mapPartitions(functools.partial(_copy_task, spec)),
                bar.tick,
            )
        except Exception as e:  # noqa: BLE001 - a Spark failure is one line like any other
            if lock.lost:
                raise CopyLocked(lock.lost) from None
            raise StreamreplError(f"the Spark job failed: {_describe(e, secrets)}") from None
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
        refresher.stop()
        if handle is not None:
            handle.stop()
        lock.release()


# -- diffstreams ----------------------------------------------------------------------------
def _encode(m: Message, headers: Any) -> bytes:
    """The compared content of a record: timestamp, key, value and user headers."""
    key, value = m.key(), m.value()
    parts = [
        struct.pack(">qii", m.timestamp()[1], -1 if key is None else len(key), -1 if value is None else len(value)),
        key or b"",
        value or b"",
    ]
    for k, v in policy.user_headers(headers):
        kb = k.encode()
        parts += [struct.pack(">ii", len(kb), -1 if v is None else len(v)), kb, v or b""]
    return b"".join(parts)


def _visible(c: Consumer | None, kt: str | None, part: int, end: int, label: str) -> Iterator[tuple[int, bytes | None]]:
    """(offset, content) of each record before `end`; content None for a filler."""
    if c is None or kt is None or end <= 0:
        return
    for good, _ in _batches(c, TopicPartition(kt, part, OFFSET_BEGINNING), end, label):
        for m in good:
            headers = m.headers()
            yield cast(int, m.offset()), (None if headers and policy.is_filler(headers) else _encode(m, headers))


def diff_partition(spec: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """Compare one partition of the two streams (runs in a Spark task)."""
    src = Cluster(spec["src_cluster"], spec["src_props"])
    dst = Cluster(spec["dst_cluster"], spec["dst_props"])
    part = item["partition"]
    label = f"{item['topic']}[{part}]"
    hs, hd = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    counts = [0, 0]
    firstdiff = -1
    error = None
    cs = broker.consumer(src, **CONSUMER_TUNING) if item["src"] else None
    cd = broker.consumer(dst, **CONSUMER_TUNING) if item["dst"] else None

    def take(it: Iterator[tuple[int, bytes | None]], h: Any, side: int) -> tuple[int, bytes | None] | None:
        nxt = next(it, None)
        if nxt is not None and nxt[1] is not None:
            counts[side] += 1
            h.update(struct.pack(">qi", nxt[0], len(nxt[1])))
            h.update(nxt[1])
        return nxt

    try:
        si = _visible(cs, item["src"], part, item["src_end"], f"{spec['src_path']}:{label}")
        di = _visible(cd, item["dst"], part, item["dst_end"], f"{spec['dst_path']}:{label}")
        s, d = take(si, hs, 0), take(di, hd, 1)
        while s is not None or d is not None:
            if d is None or (s is not None and s[0] < d[0]):
                assert s is not None
                at, differs = s[0], s[1] is not None  # a source record where the destination has a gap
                s = take(si, hs, 0)
            elif s is None or d[0] < s[0]:
                at, differs = d[0], d[1] is not None
                d = take(di, hd, 1)
            else:
                at, differs = s[0], s[1] != d[1]
                s, d = take(si, hs, 0), take(di, hd, 1)
            if differs and firstdiff < 0:
                firstdiff = at
                if spec["first_exit"]:
                    break
    except Exception as e:  # noqa: BLE001 - reported in the row
        error = f"{label}: {_describe(e, src.secrets() + dst.secrets())}"
    finally:
        for c in (cs, cd):
            if c is not None:
                c.close()
    row = {
        "topic": item["topic"],
        "partition": part,
        "srccount": counts[0],
        "dstcount": counts[1],
        "firstdiff": firstdiff,
        "srcdigest": hs.hexdigest(),
        "dstdigest": hd.hexdigest(),
        "match": firstdiff < 0 and error is None,
    }
    if error:
        row["error"] = error
    return row


def _diff_task(spec: dict[str, Any], items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        yield diff_partition(spec, item)


DIFF_COLUMNS = ("topic", "partition", "srccount", "dstcount", "firstdiff", "srcdigest", "dstdigest", "match")


@dataclass
class DiffResult:
    src: str
    dst: str
    rows: list[dict[str, Any]]
    partitions: int
    seconds: float = 0.0
    spark_seconds: float = 0.0
    stopped_early: bool = False

    @property
    def match(self) -> bool:
        return len(self.rows) == self.partitions and all(r["match"] for r in self.rows)

    def first_difference(self) -> dict[str, Any] | None:
        return next((r for r in self.rows if not r["match"]), None)

    def document(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "timestamp": _now_ms(),
            "match": self.match,
            "partitions": self.partitions,
            "compared": len(self.rows),
            "seconds": round(self.seconds, 3),
            "data": self.rows,
        }


def _plan_diff(
    src_r: streams.Resolved, src_rec: Record, dst_r: streams.Resolved, dst_rec: Record
) -> list[dict[str, Any]]:
    names = sorted(set(src_rec.get("topics", {})) | set(dst_rec.get("topics", {})))
    src_present = broker.topics(src_r.cluster)
    dst_present = broker.topics(dst_r.cluster)
    items: list[dict[str, Any]] = []
    ends = {
        "s": broker.consumer(src_r.cluster, **READ_UNCOMMITTED),
        "d": broker.consumer(dst_r.cluster, **READ_UNCOMMITTED),
    }
    try:
        for topic in names:
            skt, dkt = kafka_topic_name(src_r.path, topic), kafka_topic_name(dst_r.path, topic)
            ns, nd = src_present.get(skt, 0), dst_present.get(dkt, 0)
            for p in range(max(ns, nd)):
                items.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "src": skt if p < ns else None,
                        "dst": dkt if p < nd else None,
                        "src_end": broker.true_end(ends["s"], TopicPartition(skt, p)) if p < ns else 0,
                        "dst_end": broker.true_end(ends["d"], TopicPartition(dkt, p)) if p < nd else 0,
                    }
                )
    finally:
        for c in ends.values():
            c.close()
    return items


def diffstreams(
    reg: Registry,
    src: str,
    dst: str,
    *,
    first_exit: bool = False,
    master: str | None = None,
    numthreads: int | None = None,
    conf: dict[str, str] | None = None,
    progress: bool | None = None,
) -> DiffResult:
    """Compare two streams partition by partition; see the module doc."""
    src_r, src_rec = streams.load(reg, src)
    dst_r, dst_rec = streams.load(reg, dst)
    check_any_perm(src_rec, ("copyperm", "consumeperm"), src_r, "compare it")
    check_any_perm(dst_rec, ("copyperm", "consumeperm"), dst_r, "compare it")
    secrets = src_r.cluster.secrets() + dst_r.cluster.secrets()
    items = _plan_diff(src_r, src_rec, dst_r, dst_rec)
    result = DiffResult(str(src_r.path), str(dst_r.path), [], len(items))
    if not items:
        return result
    show = sys.stderr.isatty() if progress is None else progress
    with _starting(show, f"starting Spark ({master or 'local'})"):
        handle = start_spark(f"streamrepl diffstreams {src_r.path} {dst_r.path}", master, numthreads, conf, secrets)
    result.spark_seconds = handle.seconds
    try:
        sc = handle.sc
        spec = {
            "src_cluster": src_r.cluster.name,
            "src_props": dict(src_r.cluster.properties),
            "dst_cluster": dst_r.cluster.name,
            "dst_props": dict(dst_r.cluster.properties),
            "src_path": str(src_r.path),
            "dst_path": str(dst_r.path),
            "first_exit": first_exit,
        }
        task = functools.partial(_diff_task, spec)
        bar = _TaskProgress(show, sc, len(items), f"diffstreams {src_r.path} {dst_r.path}")
        t0 = time.monotonic()
        # With -first_exit the partitions are compared in waves, and no wave starts after a difference.
        wave = max(1, sc.defaultParallelism) if first_exit else len(items)
        try:
            for i in range(0, len(items), wave):
                chunk = items[i : i + wave]
                bar.base = i
                result.rows += _run_job(
                    sc,
                    lambda chunk=chunk: sc.parallelize(chunk, len(chunk)).mapPartitions(task),  # type: ignore[misc]
                    bar.tick,
                )
                if first_exit and not all(r["match"] for r in result.rows):
                    result.stopped_early = i + wave < len(items)
                    break
        except Exception as e:  # noqa: BLE001
            raise StreamreplError(f"the Spark job failed: {_describe(e, secrets)}") from None
        finally:
            bar.close()
        result.seconds = time.monotonic() - t0
        result.rows.sort(key=lambda r: (r["topic"], r["partition"]))
        return result
    finally:
        handle.stop()


class _TaskProgress:
    """Progress in partitions compared, from Spark's status tracker."""

    def __init__(self, enabled: bool, sc: Any, total: int, label: str):
        self.enabled, self.sc, self.base = enabled, sc, 0
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task(label, total=total)
        self.bar.start()

    def tick(self) -> None:
        if not self.enabled:
            return
        st = self.sc.statusTracker()
        done = 0
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
        self.bar.update(self.task, completed=self.base + done)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()


def write_outdir(outdir: str, result: DiffResult) -> Path:
    """Write the comparison as JSON: `<outdir>/diffstreams.json` (on the machine that runs the command)."""
    d = Path(outdir).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
        path = d / "diffstreams.json"
        tmp = d / f".diffstreams.json.{os.getpid()}"
        tmp.write_text(json.dumps(result.document(), indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise InvalidArgument(f"-outdir {outdir} cannot be written ({e.strerror}); give a writable directory") from None
    return path


# -- benchmark --------------------------------------------------------------------------------
def benchmark(n: int = 1_000_000, partitions: int = 4, size: int = 100, master: str | None = None) -> dict[str, Any]:
    """copystream's records/s for `n` records of `size` bytes, beside a plain producer's rate.

    Starts two embedded clusters and fills a source stream (`partitions` partitions) with a
    plain confluent-kafka producer: records of `size` bytes with a key, a header and a
    timestamp. The same producer loop then writes the same records into the destination's
    broker (the ceiling), copystream copies the source stream into a new stream on that
    broker (Spark start-up reported apart), and the plain producer runs once more: the two
    plain figures show how much the machine's load moved during the run.
    """
    from confluent_kafka import Producer

    from .local import EphemeralClusters
    from .registry import load as load_registry

    def plain(bootstrap: str, kt: str) -> float:
        """Records/s of a plain producer with librdkafka's defaults."""
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
        value = b"v" * size
        headers: list[tuple[str, str | bytes | None]] = [("seq", b"12345678")]
        ts = _now_ms()
        produce, poll = p.produce, p.poll
        t0 = time.monotonic()
        for i in range(n):
            while True:
                try:
                    produce(kt, value, key=b"k%d" % i, partition=i % partitions, headers=headers, timestamp=ts + i)
                    break
                except BufferError:
                    poll(0.005)
            if i % 10_000 == 0:
                poll(0)
        left = p.flush(120)
        if left:
            raise StreamreplError(f"{left} benchmark records were not acknowledged")
        return n / (time.monotonic() - t0)

    with EphemeralClusters(["benchsrc", "benchdst"]) as ec:
        reg = load_registry(str(ec.registry_path))
        for path in ("/benchsrc/bench", "/benchdst/plain1", "/benchdst/plain2"):
            streams.create(reg, path, {"defaultpartitions": partitions})
            topics.create(reg, path, "t", partitions)

        def kt(path: str) -> str:
            return kafka_topic_name(streams.resolve(reg, path).path, "t")

        src_rate = plain(ec.brokers["benchsrc"].bootstrap, kt("/benchsrc/bench"))
        before = plain(ec.brokers["benchdst"].bootstrap, kt("/benchdst/plain1"))
        res = copystream(reg, "/benchsrc/bench", "/benchdst/copy", master=master, progress=False)
        after = plain(ec.brokers["benchdst"].bootstrap, kt("/benchdst/plain2"))
        if not res.complete or res.records != n:
            raise StreamreplError(f"benchmark copy incomplete: {res.summary()} {res.failures or res.stopped}")
        ceiling = (before + after) / 2
        return {
            "records": n,
            "size": size,
            "partitions": partitions,
            "master": master or "local[*]",
            "producer_into_source_rps": round(src_rate),
            "plain_producer_rps_before": round(before),
            "plain_producer_rps_after": round(after),
            "copystream_rps": round(res.rate),
            "copystream_seconds": round(res.seconds, 2),
            "spark_startup_seconds": round(res.spark_seconds, 2),
            "ratio": round(res.rate / ceiling, 3),
        }


def bench_main(argv: list[str] | None = None) -> None:
    """`python -m streamrepl.copy [-n N] [-partitions P] [-size B] [-master URL]`: print the benchmark's figures."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m streamrepl.copy", description="copystream benchmark")
    ap.add_argument("-n", type=int, default=1_000_000, help="records (default 1000000)")
    ap.add_argument("-partitions", type=int, default=4, help="partitions of the source topic (default 4)")
    ap.add_argument("-size", type=int, default=100, help="value bytes (default 100)")
    ap.add_argument("-master", default=None, help="Spark master (default local[*])")
    a = ap.parse_args(argv)
    print(json.dumps(benchmark(a.n, a.partitions, a.size, a.master), indent=1))


if __name__ == "__main__":
    # Run from the imported module, not __main__: Spark tasks must find their functions by module name.
    import importlib

    importlib.import_module("streamrepl.copy").bench_main()
