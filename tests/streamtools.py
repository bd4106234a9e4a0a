"""Helpers for end-to-end replication tests: gateways as real processes, records compared one by one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streamrepl import policy
from streamrepl.paths import StreamPath, kafka_topic_name


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


def run_cli(*args: str, registry: str | Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, STREAMREPL_CLUSTERS=str(registry))
    p = subprocess.run(
        [sys.executable, "-m", "streamrepl", *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and p.returncode != 0:
        raise AssertionError(f"streamrepl {' '.join(args)} failed: {p.stderr or p.stdout}")
    return p


def cli_json(*args: str, registry: str | Path) -> list[dict]:
    return json.loads(run_cli(*args, "-json", registry=registry).stdout)["data"]


class Gateways:
    """Gateway processes for one destination cluster."""

    def __init__(self, registry: str | Path, cluster: str, logdir: Path):
        self.registry, self.cluster, self.logdir = str(registry), cluster, logdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.count = 0

    def start(self, name: str | None = None) -> str:
        self.count += 1
        name = name or f"{self.cluster}-gw{self.count}"
        log = open(self.logdir / f"{name}.log", "a")  # noqa: SIM115
        env = dict(os.environ, STREAMREPL_CLUSTERS=self.registry)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "streamrepl", "gateway", "start", "-cluster", self.cluster, "-id", name],
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
    bootstrap: str,
    stream: StreamPath,
    topic: str,
    n: int,
    partitions: int,
    start: int = 0,
    batch: bool = True,
    tag: str = "",
) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5 if batch else 0, "enable.idempotence": True})
    kt = kafka_topic_name(stream, topic)
    for i in range(start, start + n):
        p.produce(
            kt,
            key=f"{tag}k{i}".encode(),
            value=f"{tag}value-{i}-".encode() * 3,
            headers=[("seq", str(i).encode()), ("tag", tag.encode())],
            timestamp=1_700_000_000_000 + i,
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
                hs = m.headers() or []
                origin = next((v.decode() for k, v in hs if k == policy.ORIGIN), None)
                out.append(
                    Rec(
                        m.offset(),
                        m.key(),
                        m.value(),
                        tuple(policy.user_headers(hs)),
                        m.timestamp()[1],
                        m.timestamp()[0],
                        policy.is_filler(hs),
                        origin,
                    )
                )
            if done:
                return out
        raise AssertionError(f"reading {kt}[{partition}] timed out")
    finally:
        c.close()


def assert_identical(
    src_bootstrap: str, src: StreamPath, src_uuid: str, dst_bootstrap: str, dst: StreamPath, topics: dict[str, int]
) -> int:
    """Every source record sits at the same offset in the replica with the same key, value, headers,
    timestamp; replica records carry the origin; fillers only where the source shows no record."""
    total = 0
    for topic, parts in topics.items():
        for p in range(parts):
            a = read_partition(src_bootstrap, kafka_topic_name(src, topic), p)
            b = read_partition(dst_bootstrap, kafka_topic_name(dst, topic), p)
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
