"""A replica never silently mixes two source histories: real brokers, real gateway processes, copystream.

A source topic deleted and created again outside streamrepl (new records at the offsets the replica holds), a
replica re-written while no gateway runs: the partition stops in REPLICA_STATE_ERROR with a lasterror that says
where and what to do, nothing of the other history is written, and the other partitions go on.

The source topic is deleted while no gateway runs: on Tansu, librdkafka segfaults a consumer whose ASSIGNED
topic is deleted (a separate issue), so the gateway is stopped (SIGTERM) first and started again afterwards:
the check on acquire is what catches it here (the checks while running are unit-tested with fake clients).
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
import uuid

import pytest
from support.env import Env
from support.histories import recreate_topic, write
from support.streams import (
    Gateways,
    Rec,
    caught_up,
    cli_json,
    cli_proc,
    link,
    new_stream,
    new_topics,
    produce,
    read_partition,
    sp,
    tally,
    uuid_of,
    wait_until,
)

from streamrepl import policy


def pair(env: Env, topics: dict[str, int]) -> tuple[str, str]:
    n = f"d{uuid.uuid4().hex[:6]}"
    src = new_stream(env.reg, f"/sanfrancisco/{n}")
    dst = new_stream(env.reg, f"/newyork/{n}", copyfrom=src)
    new_topics(env.reg, src, topics)
    link(env.reg, src, dst)
    return src, dst


def replica_row(env: Env, src: str) -> dict:
    (row,) = cli_json("stream", "replica", "list", "-path", src, registry=env.reg)
    return row


def in_error(env: Env, src: str, partitions: int) -> dict | None:
    row = replica_row(env, src)
    ok = row["replicaState"] == "REPLICA_STATE_ERROR" and row["errorPartitions"] == partitions
    return row if ok else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(gws: Gateways, name: str) -> None:
    gws.kill(name, signal.SIGTERM)


@pytest.mark.slow
def test_a_source_topic_recreated_under_its_replica_stops_its_partitions_and_nothing_else(env: Env) -> None:
    src, dst = pair(env, {"t": 2, "u": 1})
    produce(env.bs_of(src), sp(src), "t", 60, 2)  # 30 records in each partition
    produce(env.bs_of(src), sp(src), "u", 20, 1)
    src_uuid = uuid_of(env.reg, src)
    with Gateways(env.reg, "newyork", env.logdir) as gws:
        gw = gws.start()
        wait_until(lambda: caught_up(env.reg, src), 120, "the replica caught up")
        assert tally(env.bs_of(src), sp(src), src_uuid, env.bs_of(dst), sp(dst), {"t": 2, "u": 1}).ok
        before = {p: read_partition(env.bs_of(dst), env.kt(dst, "t"), p) for p in (0, 1)}
        assert [len(before[p]) for p in (0, 1)] == [30, 30]
        stop(gws, gw)

        # Outside streamrepl: the source topic re-created, and another history written into it. Partition 0
        # gets more records than the replica holds (its record at offset 29 is another one), partition 1 fewer.
        recreate_topic(env.bs_of(src), env.kt(src, "t"), 2)
        write(env.bs_of(src), env.kt(src, "t"), {0: 45, 1: 10}, "new")

        gw = gws.start()
        row = wait_until(lambda: in_error(env, src, 2), 120, "both partitions of t in error")
        error = row["lasterror"]
        assert f"source {src}:t partition " in error and " diverged at offset " in error, error
        assert (
            f"'streamrepl diffstreams -src {src} -dst {dst}'" in error
            and f"replica resync -path {src} -replica {dst} -topic t" in error
        ), error
        assert row["isUptodate"] is False
        log = (env.logdir / f"{gw}.log").read_text()
        assert (
            f"source {src}:t partition 0 diverged at offset 29: the source's record there is not the one replicated"
            " (source end 45, replica end 30)" in log
        ), log
        assert f"source {src}:t partition 1 diverged at offset 10: the source now ends at offset 10" in log, log

        # The other topic goes on.
        produce(env.bs_of(src), sp(src), "u", 20, 1, start=20)
        wait_until(lambda: len(read_partition(env.bs_of(dst), env.kt(dst, "u"), 0)) == 40, 120, "u replicated on")
        assert tally(env.bs_of(src), sp(src), src_uuid, env.bs_of(dst), sp(dst), {"u": 1}).ok

        # A restart does not append the new history either.
        stop(gws, gw)
        gw = gws.start()
        wait_until(lambda: "diverged at offset 29" in (env.logdir / f"{gw}.log").read_text(), 120, "checked again")
        time.sleep(2)
        after = {p: read_partition(env.bs_of(dst), env.kt(dst, "t"), p) for p in (0, 1)}
        assert after == before, "the replica's records are unchanged, one by one"
        assert in_error(env, src, 2)
        stop(gws, gw)


def test_a_replica_rewritten_while_no_gateway_runs_is_detected_on_acquire(env: Env) -> None:
    src, dst = pair(env, {"t": 1})
    produce(env.bs_of(src), sp(src), "t", 30, 1)
    src_uuid = uuid_of(env.reg, src)
    with Gateways(env.reg, "newyork", env.logdir) as gws:
        gw = gws.start()
        wait_until(lambda: caught_up(env.reg, src), 120, "the replica caught up")
        stop(gws, gw)
        # The replica restored from a backup of another history of the same source (its records carry the
        # source's origin, as replicated ones do).
        recreate_topic(env.bs_of(dst), env.kt(dst, "t"), 1)
        write(env.bs_of(dst), env.kt(dst, "t"), {0: 12}, "old", headers=[(policy.ORIGIN, src_uuid.encode())])
        before = read_partition(env.bs_of(dst), env.kt(dst, "t"), 0)
        produce(env.bs_of(src), sp(src), "t", 5, 1, start=30)
        port = free_port()
        gw = gws.start(None, "-metricsport", str(port), "-metricsaddr", "127.0.0.1")
        row = wait_until(lambda: in_error(env, src, 1), 120, "the partition in error")
        assert f"source {src}:t partition 0 diverged at offset 11: the source's record there is not" in row["lasterror"]
        assert "(source end 35, replica end 12)" in row["lasterror"], row
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        # This gateway applies the other tests' replicas too (all of newyork): their diverged partitions count.
        counts = {
            name: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            for name in ("streamrepl_gateway_divergences_total", "streamrepl_gateway_partitions_in_error")
            if line.startswith(f'{name}{{gateway="{gw}"}}')
        }
        divergences = counts["streamrepl_gateway_divergences_total"]
        assert divergences >= 1 and counts["streamrepl_gateway_partitions_in_error"] >= 1, metrics
        stop(gws, gw)
    after: list[Rec] = read_partition(env.bs_of(dst), env.kt(dst, "t"), 0)
    assert after == before


def test_a_copystream_rerun_refuses_a_partition_whose_source_was_recreated(env: Env) -> None:
    n = f"c{uuid.uuid4().hex[:6]}"
    src, dst = new_stream(env.reg, f"/sanfrancisco/{n}"), f"/newyork/{n}"
    new_topics(env.reg, src, {"t": 1, "u": 1})
    produce(env.bs_of(src), sp(src), "t", 20, 1)
    produce(env.bs_of(src), sp(src), "u", 5, 1)
    cli_proc("copystream", "-src", src, "-dst", dst, registry=env.reg)
    before = read_partition(env.bs_of(dst), env.kt(dst, "t"), 0)
    recreate_topic(env.bs_of(src), env.kt(src, "t"), 1)
    write(env.bs_of(src), env.kt(src, "t"), {0: 30}, "new")
    run = cli_proc("copystream", "-src", src, "-dst", dst, registry=env.reg, check=False)
    assert run.code != 0
    errors = [line for line in run.stderr.splitlines() if "diverged" in line]
    assert len(errors) == 1, run.stderr
    assert f"source {src}:t partition 0 diverged at offset 19: the source's record there is not" in errors[0]
    assert f"'streamrepl diffstreams -src {src} -dst {dst}'" in errors[0]
    assert read_partition(env.bs_of(dst), env.kt(dst, "t"), 0) == before, "nothing appended"
