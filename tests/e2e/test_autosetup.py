"""autosetup end to end: the initial copy (in this process, or on Spark), producers writing throughout, gateways
taking over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from support.streams import Gateways, assert_identical, caught_up, cli_json, produce, wait_until
from support.streams import cli_proc as run_cli

from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath


@pytest.fixture(scope="module")
def ec():
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


def _source(ec, name: str, records: int) -> StreamPath:
    path = f"/sanfrancisco/{name}"
    run_cli("stream", "create", "-path", path, "-defaultpartitions", "2", registry=ec.registry_path)
    for t in ("orders", "payments"):
        run_cli("stream", "topic", "create", "-path", path, "-topic", t, registry=ec.registry_path)
    sp = StreamPath("sanfrancisco", "/" + name)
    for t in ("orders", "payments"):
        produce(ec.brokers["sanfrancisco"].bootstrap, sp, t, records, 2)
    return sp


def test_autosetup_multimaster_while_producing(ec, tmp_path):
    name = f"auto{uuid.uuid4().hex[:6]}"
    sp = _source(ec, name, 5000)
    stop = threading.Event()
    sent = {"n": 5000}

    def keep_writing() -> None:
        while not stop.is_set():
            produce(ec.brokers["sanfrancisco"].bootstrap, sp, "orders", 200, 2, start=sent["n"], tag="live")
            sent["n"] += 200
            time.sleep(0.1)

    with (
        Gateways(ec.registry_path, "newyork", tmp_path) as ny,
        Gateways(ec.registry_path, "sanfrancisco", tmp_path) as sf,
    ):
        ny.start()
        sf.start()
        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            out = cli_json(
                "stream",
                "replica",
                "autosetup",
                "-path",
                f"/sanfrancisco/{name}",
                "-replica",
                f"/newyork/{name}",
                "-multimaster",
                "yes",
                registry=ec.registry_path,
            )
            assert out[0]["replicaState"] == "REPLICA_STATE_REPLICATING"
            # It made the replica stream (copystream's own "created" column said false here, and was named like
            # stream info's creation time).
            assert out[0]["replicacreated"] is True and "created" not in out[0], out[0]
            time.sleep(2)
        finally:
            stop.set()
            writer.join()
        # The replica's own topic, written on the replica side, goes back to the source.
        run_cli(
            "stream", "topic", "create", "-path", f"/newyork/{name}", "-topic", "refunds", registry=ec.registry_path
        )
        produce(ec.brokers["newyork"].bootstrap, StreamPath("newyork", "/" + name), "refunds", 300, 2)
        wait_until(
            lambda: (
                caught_up(ec.registry_path, f"/sanfrancisco/{name}") and caught_up(ec.registry_path, f"/newyork/{name}")
            ),
            90,
            "both directions to catch up",
        )
    src_uuid = cli_json("stream", "info", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path)[0]["uuid"]
    dst_uuid = cli_json("stream", "info", "-path", f"/newyork/{name}", registry=ec.registry_path)[0]["uuid"]
    n = assert_identical(
        ec.brokers["sanfrancisco"].bootstrap,
        sp,
        src_uuid,
        ec.brokers["newyork"].bootstrap,
        StreamPath("newyork", "/" + name),
        {"orders": 2, "payments": 2},
    )
    assert n == sent["n"] + 5000
    back = assert_identical(
        ec.brokers["newyork"].bootstrap,
        StreamPath("newyork", "/" + name),
        dst_uuid,
        ec.brokers["sanfrancisco"].bootstrap,
        sp,
        {"refunds": 2},
    )
    assert back == 300


def test_autosetup_onto_existing_replica_fails_clearly(ec):
    name = f"exists{uuid.uuid4().hex[:6]}"
    _source(ec, name, 10)
    run_cli("stream", "create", "-path", f"/newyork/{name}", registry=ec.registry_path)
    p = run_cli(
        "stream",
        "replica",
        "autosetup",
        "-path",
        f"/sanfrancisco/{name}",
        "-replica",
        f"/newyork/{name}",
        registry=ec.registry_path,
        check=False,
    )
    assert p.returncode != 0
    assert p.stderr.count("\n") == 1 and "already exists" in p.stderr and "-useexistingreplica" in p.stderr
    assert cli_json("stream", "replica", "list", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path) == []


def test_autosetup_with_a_bad_master_changes_nothing(ec):
    """Issue 16, item 6: a bad -master is one line, before the replica is created or registered."""
    name = f"badmaster{uuid.uuid4().hex[:6]}"
    _source(ec, name, 10)
    p = run_cli(
        "stream",
        "replica",
        "autosetup",
        "-path",
        f"/sanfrancisco/{name}",
        "-replica",
        f"/newyork/{name}",
        "-master",
        "bogus://x",
        registry=ec.registry_path,
        check=False,
    )
    assert p.returncode != 0
    assert p.stderr.count("\n") == 1 and "bogus://x" in p.stderr, p.stderr
    assert cli_json("stream", "replica", "list", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path) == []
    info = run_cli("stream", "info", "-path", f"/newyork/{name}", registry=ec.registry_path, check=False)
    assert info.returncode != 0


@pytest.mark.spark
def test_autosetup_killed_in_the_middle_completes_when_run_again(ec, tmp_path):
    """Killed while Spark copies; the rerun finishes the copy in this process (small by then, or not: the
    engines continue each other's copies)."""
    name = f"resume{uuid.uuid4().hex[:6]}"
    sp = _source(ec, name, 20000)
    env = dict(os.environ, STREAMREPL_CLUSTERS=str(ec.registry_path))
    args = [
        sys.executable,
        "-m",
        "streamrepl",
        "stream",
        "replica",
        "autosetup",
        "-path",
        f"/sanfrancisco/{name}",
        "-replica",
        f"/newyork/{name}",
    ]
    first = subprocess.Popen(
        [*args, "-mapreduce", "true"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def copying() -> bool:
        rows = cli_json("stream", "replica", "list", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path)
        return bool(rows) and rows[0]["replicaState"] == "REPLICA_STATE_COPY_IN_PROGRESS"

    wait_until(copying, 60, "the copy to start")
    first.send_signal(signal.SIGKILL)
    first.wait()
    rows = cli_json("stream", "replica", "list", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path)
    assert rows[0]["replicaState"] == "REPLICA_STATE_COPY_IN_PROGRESS" and rows[0]["paused"] is True
    # The killed run's copy lock is still there, but its process is gone (same host, Spark in local mode):
    # the rerun takes it at once instead of waiting for it to expire.
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    with Gateways(ec.registry_path, "newyork", tmp_path) as ny:
        ny.start()
        wait_until(lambda: caught_up(ec.registry_path, f"/sanfrancisco/{name}"), 60, "the replica to catch up")
    src_uuid = cli_json("stream", "info", "-path", f"/sanfrancisco/{name}", registry=ec.registry_path)[0]["uuid"]
    assert (
        assert_identical(
            ec.brokers["sanfrancisco"].bootstrap,
            sp,
            src_uuid,
            ec.brokers["newyork"].bootstrap,
            StreamPath("newyork", "/" + name),
            {"orders": 2, "payments": 2},
        )
        == 40000
    )
