"""Stream set-up and checks for end-to-end replication tests: the CLI against a registry, gateways as
real processes, producers, and replicas compared with their source record by record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streamrepl import kafka, policy
from streamrepl.paths import StreamPath, kafka_topic_name
from support.cli import Run, run_cli, run_proc
from support.clusters import RECENT_MS


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int
    tstype: int
    filler: bool
    origin: str | None

    @classmethod
    def of(cls, m: Any) -> Rec:
        """A consumed message as the comparisons see it: user headers apart from streamrepl's own."""
        hs = m.headers() or []
        origin = next((v.decode() for k, v in hs if k == policy.ORIGIN), None)
        ts_type, ts = m.timestamp()
        return cls(
            m.offset(), m.key(), m.value(), tuple(policy.user_headers(hs)), ts, ts_type, policy.is_filler(hs), origin
        )


def client_conf(bootstrap: str | dict[str, str], **settings: Any) -> dict[str, Any]:
    """A client's settings for a cluster given by its address, or by its registry properties (TLS clusters)."""
    conf: dict[str, Any] = dict(bootstrap) if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}
    conf.update(settings)
    return conf


def _registry_env(registry: str | Path) -> dict[str, str | None]:
    return {"STREAMREPL_CLUSTERS": str(registry)}


def _checked(run: Run, args: tuple[str, ...], check: bool) -> Run:
    if check and run.code != 0:
        raise AssertionError(f"streamrepl {' '.join(args)} failed: {run.stderr or run.stdout}")
    return run


def cli_proc(*args: str, registry: str | Path, check: bool = True) -> Run:
    """`streamrepl <args>` against `registry`, as its own process (see support.cli.run_proc)."""
    return _checked(run_proc(args, env=_registry_env(registry), timeout=120), args, check)


def cli_json(*args: str, registry: str | Path) -> list[dict]:
    return json.loads(cli_proc(*args, "-json", registry=registry).stdout)["data"]  # type: ignore[no-any-return]


class Gateways:
    """Gateway processes for one destination cluster."""

    def __init__(self, registry: str | Path, cluster: str, logdir: Path, env: dict[str, str] | None = None):
        self.registry, self.cluster, self.logdir = str(registry), cluster, logdir
        self.env = env or {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.count = 0

    def start(self, name: str | None = None, *extra: str, supervise: bool = False) -> str:
        """Start a gateway process; `extra` are more `gateway start` options (e.g. "-metricsport", "9100").

        Unsupervised unless `supervise` (or -workers in `extra`): the tests kill and freeze the process they started
        as a gateway that crashes or hangs, which a supervisor would undo (a supervisor killed with -9 makes its
        worker drain and exit cleanly; one frozen leaves its worker running)."""
        self.count += 1
        name = name or f"{self.cluster}-gw{self.count}"
        log = open(self.logdir / f"{name}.log", "a")  # noqa: SIM115
        env = dict(os.environ, STREAMREPL_CLUSTERS=self.registry, **self.env)
        if not supervise and "-workers" not in extra:
            extra = ("-supervise", "false", *extra)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "streamrepl", "gateway", "start", "-cluster", self.cluster, "-id", name, *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(name)
        p.send_signal(sig)
        p.wait(timeout=60)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)

    def __enter__(self) -> Gateways:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait()
        self.procs.clear()


def produce(
    bootstrap: str | dict[str, str],
    stream: StreamPath,
    topic: str,
    n: int,
    partitions: int,
    start: int = 0,
    batch: bool = True,
    tag: str = "",
) -> None:
    p = Producer(client_conf(bootstrap, **{"linger.ms": 5 if batch else 0, "enable.idempotence": True}))
    kt = kafka_topic_name(stream, topic)
    for i in range(start, start + n):
        p.produce(
            kt,
            key=f"{tag}k{i}".encode(),
            value=f"{tag}value-{i}-".encode() * 3,
            headers=[("seq", str(i).encode()), ("tag", tag.encode())],
            timestamp=RECENT_MS + i,
            partition=i % partitions,
        )
        if not batch:
            p.flush()
        elif i % 1000 == 0:
            p.poll(0)
    p.flush(30)


def read_partition(bootstrap: str, kt: str, partition: int, timeout: float = 30) -> list[Rec]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "streamtools-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
        }
    )
    out: list[Rec] = []
    try:
        c.assign([TopicPartition(kt, partition, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msgs = c.consume(10000, timeout=0.5)
            done = False
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done = True
                    continue
                out.append(Rec.of(m))
            if done:
                return out
        raise AssertionError(f"reading {kt}[{partition}] timed out")
    finally:
        c.close()


def assert_identical(
    src_bootstrap: str | dict[str, str],
    src: StreamPath,
    src_uuid: str,
    dst_bootstrap: str | dict[str, str],
    dst: StreamPath,
    topics: dict[str, int],
) -> int:
    """Every source record sits at the same offset in the replica with the same key, value, headers,
    timestamp; replica records carry the origin; fillers only where the source shows no record."""
    total = 0
    # One consumer a side for every partition: one a partition took about half a second each (20 s at 20 partitions).
    sources, replicas = read_all(src_bootstrap, src, topics), read_all(dst_bootstrap, dst, topics)
    for topic, parts in topics.items():
        for p in range(parts):
            a, b = sources[(topic, p)], replicas[(topic, p)]
            real_b = [r for r in b if not r.filler]
            assert [r.offset for r in real_b] == [r.offset for r in a if not r.filler], (
                f"{topic}[{p}]: offsets differ (src {len(a)} records, replica {len(real_b)})"
            )
            for x, y in zip(a, real_b, strict=True):
                assert (x.offset, x.key, x.value, x.headers, x.timestamp) == (
                    y.offset,
                    y.key,
                    y.value,
                    y.headers,
                    y.timestamp,
                ), f"{topic}[{p}] offset {x.offset} differs"
                assert y.origin == (x.origin or src_uuid)
            offsets = [r.offset for r in b]
            assert len(offsets) == len(set(offsets))
            total += len(a)
    return total


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def caught_up(registry: str | Path, src: str) -> bool:
    rows = cli_json("stream", "replica", "list", "-path", src, registry=registry)
    return bool(rows) and all(r["isUptodate"] for r in rows)


# -- helpers for topology, fault and chaos tests ------------------------------------------------
def cli(*args: str, registry: str | Path, check: bool = True) -> Run:
    """`streamrepl <args>` against `registry`, run in this process (see support.cli.run_cli): about
    3x faster than cli_proc."""
    return _checked(run_cli(*args, env=_registry_env(registry)), args, check)


def cli_data(*args: str, registry: str | Path) -> list[dict]:
    return json.loads(cli(*args, "-json", registry=registry).stdout)["data"]  # type: ignore[no-any-return]


def sp(path: str) -> StreamPath:
    """'/cluster/name' -> StreamPath('cluster', '/name')."""
    _, cluster, rest = path.split("/", 2)
    return StreamPath(cluster, "/" + rest)


def new_stream(registry: str | Path, path: str, *extra: str, copyfrom: str | None = None) -> str:
    args = ["stream", "create", "-path", path, *extra]
    if copyfrom:
        args += ["-copymetafrom", copyfrom]
    cli(*args, registry=registry)
    return path


def new_topics(registry: str | Path, path: str, topics: dict[str, int]) -> None:
    for t, n in topics.items():
        cli("stream", "topic", "create", "-path", path, "-topic", t, "-partitions", str(n), registry=registry)


def uuid_of(registry: str | Path, path: str) -> str:
    return cli_data("stream", "info", "-path", path, registry=registry)[0]["uuid"]  # type: ignore[no-any-return]


def link(registry: str | Path, src: str, dst: str, paused: bool = False, upstream: bool = True) -> None:
    """Both halves of a replication link: `replica add` on the source and `upstream add` on the replica."""
    cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", str(paused).lower(), registry=registry)
    if upstream:
        cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=registry)


def replica_rows(registry: str | Path, src: str) -> dict[str, dict]:
    return {r["replicaPath"]: r for r in cli_data("stream", "replica", "list", "-path", src, registry=registry)}


def read_all(
    bootstrap: str | dict[str, str], stream: StreamPath, topics: dict[str, int], timeout: float = 60
) -> dict[tuple, list[Rec]]:
    """(topic, partition) -> every record of the partition, all partitions read by one consumer."""
    names = {kafka_topic_name(stream, t): t for t in topics}
    out: dict[tuple, list[Rec]] = {(t, p): [] for t, n in topics.items() for p in range(n)}
    c = Consumer(
        client_conf(
            bootstrap,
            **{
                "group.id": "streamtools-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 20,
                "log_level": 0,
            },
        )
    )
    waiting = set(out)
    try:
        c.assign([TopicPartition(kafka_topic_name(stream, t), p, 0) for t, p in out])
        deadline = time.monotonic() + timeout
        while waiting:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {stream} timed out; partitions not read to the end: {waiting}")
            for m in c.consume(10000, timeout=0.2):
                key = (names[m.topic()], m.partition())
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        waiting.discard(key)
                    continue
                out[key].append(Rec.of(m))
        return out
    finally:
        c.close()


def true_ends(bootstrap: str, stream: StreamPath, topics: dict[str, int]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset after the last record (not the broker's high watermark)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "streamtools-ends", "enable.partition.eof": True, "log_level": 0}
    )
    try:
        tps = [TopicPartition(kafka_topic_name(stream, t), p) for t, n in topics.items() for p in range(n)]
        ends = kafka.true_ends(c, tps, timeout=10)
    finally:
        c.close()
    names = {kafka_topic_name(stream, t): t for t in topics}
    return {(names[t], p): e for (t, p), e in ends.items()}


def same_ends(src_bs: str, src: StreamPath, dst_bs: str, dst: StreamPath, topics: dict[str, int]) -> bool:
    """True when every replica partition ends where its source partition ends."""
    try:
        return true_ends(src_bs, src, topics) == true_ends(dst_bs, dst, topics)
    except Exception:  # noqa: BLE001 - a topic not created yet, a broker frozen: not caught up
        return False


@dataclass
class Tally:
    """A record-by-record comparison of a replica with its source, as counts."""

    records: int = 0  # source records (fillers excluded)
    lost: int = 0  # source records that never reached the replica partition
    doubled: int = 0  # extra copies of a source record in the replica partition
    misplaced: int = 0  # source records in the replica only at another offset, or with other content or origin
    strays: int = 0  # replica records (not fillers) that match no source record
    detail: tuple = ()

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.misplaced or self.strays)

    def __add__(self, o: Tally) -> Tally:
        return Tally(
            self.records + o.records,
            self.lost + o.lost,
            self.doubled + o.doubled,
            self.misplaced + o.misplaced,
            self.strays + o.strays,
            (self.detail + o.detail)[:10],
        )


def compare(src_recs: list[Rec], dst_recs: list[Rec], src_uuid: str, where: str = "") -> Tally:
    """Count lost, doubled and misplaced records of one partition (a record is known by its key)."""
    a = [r for r in src_recs if not r.filler]
    by_key: dict[bytes | None, list[Rec]] = {}
    for r in dst_recs:
        if not r.filler:
            by_key.setdefault(r.key, []).append(r)
    t = Tally(records=len(a))
    notes = []
    src_keys = set()
    for x in a:
        src_keys.add(x.key)
        copies = by_key.get(x.key, [])
        if not copies:
            t.lost += 1
            notes.append(f"{where}@{x.offset} lost")
            continue
        t.doubled += len(copies) - 1
        if len(copies) > 1:
            notes.append(f"{where}@{x.offset} doubled at {[y.offset for y in copies]}")
        if not any(
            (y.offset, y.value, y.headers, y.timestamp) == (x.offset, x.value, x.headers, x.timestamp)
            and y.origin == (x.origin or src_uuid)
            for y in copies
        ):
            t.misplaced += 1
            notes.append(f"{where}@{x.offset} misplaced at {[y.offset for y in copies]}")
    t.strays = sum(len(v) for k, v in by_key.items() if k not in src_keys)
    offsets = [r.offset for r in dst_recs]
    if len(offsets) != len(set(offsets)):
        t.misplaced += len(offsets) - len(set(offsets))
        notes.append(f"{where}: {len(offsets) - len(set(offsets))} offsets seen twice")
    t.detail = tuple(notes[:5])
    return t


def tally(src_bs: str, src: StreamPath, src_uuid: str, dst_bs: str, dst: StreamPath, topics: dict[str, int]) -> Tally:
    """Compare every partition of `topics` in the replica with the source, record by record."""
    a, b = read_all(src_bs, src, topics), read_all(dst_bs, dst, topics)
    total = Tally()
    for key in a:
        total = total + compare(a[key], b[key], src_uuid, f"{key[0]}[{key[1]}]")
    return total


class SteadyProducer:
    """Produces `rate` records/s into every partition of `topics` of a stream, in a thread, until stopped.

    Each record has a unique key (`<tag>k<seq>`), a `seq` header and a CreateTime timestamp, so that a
    comparison can tell a lost record from a doubled or a misplaced one. A frozen broker only delays it.
    """

    def __init__(self, bootstrap: str, stream: StreamPath, topics: dict[str, int], rate: int, tag: str = "s"):
        self.bootstrap, self.stream, self.topics, self.rate, self.tag = bootstrap, stream, topics, rate, tag
        self.sent = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._targets = [(kafka_topic_name(stream, t), p) for t, n in topics.items() for p in range(n)]

    def _run(self) -> None:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 5,
                "enable.idempotence": True,
                "message.timeout.ms": 0,
                "queue.buffering.max.messages": 2000000,
                "log_level": 0,
            }
        )

        def failed(err, _msg):  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors.append(err.str())

        started = time.monotonic()
        i = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while i < due:
                kt, part = self._targets[i % len(self._targets)]
                p.produce(
                    kt,
                    key=f"{self.tag}k{i}".encode(),
                    value=f"{self.tag}value-{i}-".encode() * 3,
                    headers=[("seq", str(i).encode())],
                    timestamp=RECENT_MS + i,
                    partition=part,
                    on_delivery=failed,
                )
                i += 1
            p.poll(0)
            self.sent = i
            time.sleep(0.02)
        p.flush()
        self.sent = i

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop producing, wait until everything sent is acknowledged; returns the number of records."""
        self._stop.set()
        self._thread.join()
        assert not self.errors, self.errors[:3]
        return self.sent


def synchronous_pair(reg: Any, prefix: str, topic: str = "orders") -> tuple[str, str]:
    """/sanfrancisco/<prefix><random> with `topic` (one partition) and its synchronous replica of the same name in
    newyork, linked both ways, through the library (the registry `reg` a test loaded): (source path, replica path)."""
    import uuid

    from streamrepl import replicas, stream_ops, topics

    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    stream_ops.create(reg, sf, {"defaultpartitions": 1})
    stream_ops.create(reg, ny, {"defaultpartitions": 1})
    topics.create(reg, sf, topic)
    replicas.add(reg, sf, ny, synchronous=True)
    replicas.upstream_add(reg, ny, sf)
    return sf, ny
