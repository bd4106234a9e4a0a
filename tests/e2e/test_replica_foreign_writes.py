"""`replica list` says when a replica is not what its gateway made of it (issue 38): a plain producer that wrote into
an idle replica (found while the source is idle, and said to be the replica's, not the source's), and a replica topic
made again with another partition count than its source's (a producer's write gets the broker's default)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from support.env import Env
from support.streams import (
    Gateways,
    caught_up,
    client_conf,
    link,
    new_stream,
    new_topics,
    produce,
    replica_rows,
    sp,
    wait_until,
)

from streamrepl import kafka

TOPICS = {"t": 2}


def _pair(env: Env, n: str) -> tuple[str, str]:
    src, dst = f"/sanfrancisco/fw{n}", f"/newyork/fw{n}"
    new_stream(env.reg, src)
    new_stream(env.reg, dst)
    new_topics(env.reg, src, TOPICS)
    link(env.reg, src, dst)
    return src, dst


def _error(env: Env, src: str, dst: str, words: str) -> dict:
    def row() -> dict | None:
        r = replica_rows(env.reg, src)[dst]
        return r if r["replicaState"] == "REPLICA_STATE_ERROR" and words in r["lasterror"] else None

    return wait_until(row, 60, f"replica list to say '{words}'")  # type: ignore[no-any-return]


def test_a_replica_written_by_someone_else_while_its_source_is_idle_is_said_to_be(env: Env, tmp_path: Path) -> None:
    src, dst = _pair(env, "1")
    with Gateways(env.reg, "newyork", tmp_path) as gws:
        gws.start()
        produce(env.bs("sanfrancisco"), sp(src), "t", 10, 2)
        wait_until(lambda: caught_up(env.reg, src), 60, "the replica to catch up")
        p = Producer(client_conf(env.bs("newyork")))
        p.produce(env.kt(dst, "t"), value=b"not from the source", partition=0)
        assert p.flush(30) == 0
        row = _error(env, src, dst, "was written by someone else")
        assert f"replica {dst}:t partition 0" in row["lasterror"] and "resync" in row["lasterror"], row
        assert "diverged" not in row["lasterror"] and not row["isUptodate"]


def test_a_replica_topic_with_another_partition_count_than_its_source_is_said(env: Env, tmp_path: Path) -> None:
    src, dst = _pair(env, "2")
    with Gateways(env.reg, "newyork", tmp_path) as gws:
        name = gws.start()
        produce(env.bs("sanfrancisco"), sp(src), "t", 10, 2)
        wait_until(lambda: caught_up(env.reg, src), 60, "the replica to catch up")
        gws.kill(name)  # the topic is deleted under no gateway: one reading it would crash (test_replica_recreated)
    ny = env.registry.get("newyork")
    kafka.delete_topics(ny, [env.kt(dst, "t")])
    wait_until(lambda: env.kt(dst, "t") not in kafka.topics(ny), 30, "the topic to go")
    kafka.create_topics(ny, [(env.kt(dst, "t"), 4, {})])
    row = _error(env, src, dst, "has 4 partitions")
    assert f"its source {src}:t 2" in row["lasterror"] and "resync" in row["lasterror"], row
