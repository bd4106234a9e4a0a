"""What the copystream, diffstreams and Spark end-to-end tests share: their brokers' environment (Env), the CLI run
in this process, records written with keys, headers and timestamps, and a copy compared with its source record by record."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streamrepl import policy
from streamrepl.cli import main
from support import RECENT_MS
from support.env import Env

TS0 = RECENT_MS  # recent: noida-db deletes records older than retention.ms (7 days)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process (Spark's JVM is started once and reused); (exit, stdout, stderr)."""
    code = 0
    try:
        main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def send(
    bootstrap: str,
    kt: str,
    n: int,
    partitions: int,
    start: int = 0,
    single: bool = False,
    tag: str = "",
    plain: bool = False,
) -> None:
    """n records spread over the partitions: keys, headers, explicit timestamps; `single` flushes each
    one (one record per batch), otherwise they go in large batches (the Tansu watermark quirk)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if single else 50, "log_level": 0})
    for i in range(start, start + n):
        kwargs: dict[str, Any] = {"partition": i % partitions, "timestamp": TS0 + 7 * i}
        if not plain and i % 11 != 5:
            kwargs["key"] = f"{tag}k{i}".encode()
            kwargs["headers"] = [("seq", str(i).encode()), ("tag", tag.encode()), ("empty", None)]
        p.produce(kt, value=(f"{tag}v{i}-".encode() * 5) if i % 13 != 7 else None, **kwargs)
        if single:
            p.flush(10)
    assert p.flush(30) == 0


Row = tuple[int, bytes | None, bytes | None, tuple, int, int, bool, str | None]


def records(bootstrap: str, kt: str, partition: int) -> list[Row]:
    """Every committed record of a partition: (offset, key, value, user headers, ts, ts type, filler, origin)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
            "log_level": 0,
        }
    )
    out: list[Row] = []
    try:
        c.assign([TopicPartition(kt, partition, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    continue
                hs = m.headers() or []
                origin = next((v.decode() for k, v in hs if k == policy.ORIGIN), None)
                ts_type, ts = m.timestamp()
                row = (m.offset(), m.key(), m.value(), tuple(policy.user_headers(hs)), ts, ts_type)
                out.append((*row, policy.is_filler(hs), origin))  # type: ignore[arg-type]
        raise AssertionError(f"reading {kt}[{partition}] timed out")
    finally:
        c.close()


def assert_copied(env: Env, src: str, dst: str, topic_parts: dict[str, int]) -> tuple[int, int]:
    """Every source record sits at the same offset of the copy with the same key, value, user headers
    and timestamp; the copy has no holes and fillers only where the source shows no record.
    Returns (records, fillers) of the copy."""
    src_cluster, dst_cluster = src.split("/")[1], dst.split("/")[1]
    src_uuid = env.uuid(src)
    total = fillers = 0
    for topic, parts in topic_parts.items():
        for p in range(parts):
            a = records(env.bs(src_cluster), env.kt(src, topic), p)
            b = records(env.bs(dst_cluster), env.kt(dst, topic), p)
            assert [r[0] for r in b] == list(range(len(b))), f"{topic}[{p}]: the copy has holes"
            by_offset = {r[0]: r for r in b}
            for r in a:
                got = by_offset.get(r[0])
                assert got is not None, f"{topic}[{p}] offset {r[0]} missing from the copy"
                assert got[:5] == r[:5], f"{topic}[{p}] offset {r[0]} differs: {r[:5]} != {got[:5]}"
                assert got[5] == 1 and not got[6] and got[7] == src_uuid
            src_offsets = {r[0] for r in a}
            extra = [r for r in b if r[0] not in src_offsets]
            assert all(r[6] for r in extra), f"{topic}[{p}]: records in the copy that the source does not show"
            if a:
                assert len(b) >= a[-1][0] + 1
            total += len(a)
            fillers += len(extra)
    return total, fillers


def copied(out: str) -> int:
    m = re.search(r"copied (\d+) records", out)
    assert m, f"no summary in {out!r}"
    return int(m.group(1))
