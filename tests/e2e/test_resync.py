"""`stream replica resync` and the source broker that loses acknowledged, already-replicated records.

On noida-db brokers of the module's own: the test SIGKILLs the source broker (which would break every other module's
tests), and noida keeps its data on disk, saving it about once a second: a SIGKILL loses what was written since the
last save, which Tansu (memory only) cannot show. noida also survives a topic deleted under a fetching gateway, which
segfaults librdkafka on Tansu, so the check while a gateway runs is shown here with a real gateway.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ON_NOIDA, kill_broker, one_error_line
from support.env import Env, own_env
from support.histories import recreate_topic, write
from support.streams import (
    Gateways,
    assert_identical,
    caught_up,
    cli,
    cli_data,
    link,
    new_stream,
    new_topics,
    produce,
    read_partition,
    replica_rows,
    same_ends,
    sp,
    true_ends,
    uuid_of,
    wait_until,
)

from streamrepl import local

pytestmark = pytest.mark.noida

#: The SIGKILL scenario and the resync that follows take about two minutes (a Spark copy set aside, a broker killed
#: until it loses records): out of the default run, in the noida-db one (STREAMREPL_LOCAL_BROKER=noida).
noida_run = pytest.mark.skipif(not ON_NOIDA, reason="long; runs with STREAMREPL_LOCAL_BROKER=noida")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # Brokers of its own, on noida: see the module doc.
    with own_env(tmp_path_factory, broker="noida") as e:
        yield e


def pair(env: Env, topics: dict[str, int]) -> tuple[str, str]:
    n = f"r{uuid.uuid4().hex[:6]}"
    src = new_stream(env.reg, f"/sanfrancisco/{n}", "-ttl", "0")
    dst = new_stream(env.reg, f"/newyork/{n}", copyfrom=src)
    new_topics(env.reg, src, topics)
    link(env.reg, src, dst)
    return src, dst


def row_of(env: Env, src: str, dst: str) -> dict:
    return replica_rows(env.reg, src)[dst]


def in_error(env: Env, src: str, dst: str) -> dict | None:
    row = row_of(env, src, dst)
    return row if row["replicaState"] == "REPLICA_STATE_ERROR" else None


def saved_at(env: Env, cluster: str) -> float:
    f = local.data_dir(env.ec.state_dir, cluster) / "kafka.json"
    return f.stat().st_mtime if f.exists() else 0.0


def frozen_broker(env: Env, cluster: str) -> contextlib.AbstractContextManager[None]:
    """The cluster's broker stopped (SIGSTOP) for a block: the process kill_and_restart started, when an earlier test
    of the module restarted it (the state directory still names the first, dead one), else the recorded one."""
    from support.freeze import broker_frozen, frozen

    proc = env.restarted.get(cluster)
    return frozen(proc) if proc is not None else broker_frozen(env.ec, cluster)


def kill_and_restart(env: Env, cluster: str) -> None:
    """SIGKILL the cluster's broker and start it again with the same command line: the same port (the running
    gateway keeps its bootstrap servers) and the same data directory."""
    proc = env.restarted.get(cluster)
    pid = proc.pid if proc is not None else env.ec.brokers[cluster].pid
    cmd = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    if proc is not None:
        proc.kill()
        proc.wait(30)
    else:
        kill_broker(env.ec, cluster)
    env.restarted[cluster] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host, port = env.ec.brokers[cluster].bootstrap.rsplit(":", 1)

    def answers() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex((host, int(port))) == 0

    wait_until(answers, 30, f"the {cluster} broker back", 0.05)


def lose_replicated_records(env: Env, src: str, dst: str, topic: str) -> int:
    """Write records to the source, let the running gateway copy them, and SIGKILL the source broker before its
    next save; restarted, it ends below the replica. noida saves about once a second: an attempt whose records
    were saved before the kill loses nothing and is tried again. Returns the source's end after the restart."""
    for attempt in range(8):
        # A record that makes the broker save, so that the next save is a second away when the save is seen.
        before = saved_at(env, "sanfrancisco")
        produce(env.bs_of(src), sp(src), topic, 1, 1, start=900 + attempt, tag=f"saved{attempt}")
        wait_until(
            lambda before=before: saved_at(env, "sanfrancisco") != before, 10, "a save of the source broker", 0.01
        )
        end = true_ends(env.bs_of(src), sp(src), {topic: 1})[(topic, 0)]
        produce(env.bs_of(src), sp(src), topic, 5, 1, start=1000 + 10 * attempt, tag=f"lost{attempt}")
        wait_until(
            lambda end=end: true_ends(env.bs_of(dst), sp(dst), {topic: 1})[(topic, 0)] >= end + 5, 10, "the copy", 0.01
        )
        kill_and_restart(env, "sanfrancisco")
        now = true_ends(env.bs_of(src), sp(src), {topic: 1})[(topic, 0)]
        if now < end + 5:
            return now
    raise AssertionError("the source broker saved the records before every SIGKILL")


@noida_run
def test_a_source_broker_that_lost_replicated_records_is_detected_and_resync_brings_the_replica_back(
    env: Env,
) -> None:
    src, dst = pair(env, {"t": 1, "u": 1})
    produce(env.bs_of(src), sp(src), "t", 20, 1)
    produce(env.bs_of(src), sp(src), "u", 10, 1)
    with Gateways(env.reg, "newyork", env.logdir) as gws:
        gws.start()
        wait_until(lambda: caught_up(env.reg, src), 120, "the replica caught up")
        lost_end = lose_replicated_records(env, src, dst, "t")
        replica_end = true_ends(env.bs_of(dst), sp(dst), {"t": 1})[("t", 0)]
        assert lost_end < replica_end
        # The source goes on: its new records take offsets the replica holds with other records.
        produce(env.bs_of(src), sp(src), "t", replica_end - lost_end + 3, 1, start=2000, tag="new")
        row = wait_until(lambda: in_error(env, src, dst), 120, "the link in error")
        error = row["lasterror"]
        assert f"source {src}:t partition 0 diverged at offset " in error, error
        assert f"'streamrepl stream replica resync -path {src} -replica {dst} -topic t'" in error, error
        assert row["isUptodate"] is False
        held = read_partition(env.bs_of(dst), env.kt(dst, "t"), 0)
        assert len(held) == replica_end, "nothing of the new history was written"

        # resync, gateway still running: it says what it will do, pauses the link and waits for the gateway.
        plan = cli_data(
            "stream", "replica", "resync", "-path", src, "-replica", dst, "-dryrun", "true", registry=env.reg
        )
        assert [(r["topic"], r["partition"], r["rebuild"]) for r in plan] == [("t", 0, True), ("u", 0, False)]
        (t0,) = [r for r in plan if r["topic"] == "t"]
        assert (t0["replicaend"], t0["forkoffset"], t0["setaside"]) == (replica_end, lost_end, replica_end - lost_end)
        aside = t0["aside"]
        assert aside not in {r["path"] for r in cli_data("stream", "list", registry=env.reg)}
        assert row_of(env, src, dst)["paused"] is False  # the dry run changed nothing

        done = cli("stream", "replica", "resync", "-path", src, "-replica", dst, registry=env.reg)
        assert f"set aside: {aside} holds {dst} whole" in done.stderr, done.stderr
        # The replica's old records, its diverged tail among them, kept at their offsets.
        kept = read_partition(env.bs_of(aside), env.kt(aside, "t"), 0)
        assert [(r.offset, r.key, r.value) for r in kept] == [(r.offset, r.key, r.value) for r in held]

        # The link replicates again, from the source's start: the replica is the source's copy, offset by offset.
        produce(env.bs_of(src), sp(src), "t", 4, 1, start=3000, tag="after")
        wait_until(lambda: caught_up(env.reg, src), 120, "the replica healthy again")
        row = row_of(env, src, dst)
        assert (row["replicaState"], row["lasterror"], row["paused"]) == ("REPLICA_STATE_REPLICATING", "", False)
        topics = {"t": 1, "u": 1}
        assert same_ends(env.bs_of(src), sp(src), env.bs_of(dst), sp(dst), topics)
        assert assert_identical(env.bs_of(src), sp(src), uuid_of(env.reg, src), env.bs_of(dst), sp(dst), topics) > 0
        gws.stop_all()
    for log in env.logdir.glob("*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()


@noida_run
def test_a_multi_master_pair_whose_one_broker_lost_records_shows_it_on_both_links(env: Env) -> None:
    """The diverged link (sanfrancisco -> newyork) is in ERROR with the resync hint; the other one (newyork ->
    sanfrancisco) showed putsPending for good and no error: newyork holds records of sanfrancisco's origin that
    sanfrancisco lost, which are never copied back to their origin. It must say so, and its advice, followed, ends
    with both links up to date and both streams equal."""
    src, dst = pair(env, {"t": 1})
    link(env.reg, dst, src)
    produce(env.bs_of(src), sp(src), "t", 20, 1)
    with Gateways(env.reg, "newyork", env.logdir) as ny_gws, Gateways(env.reg, "sanfrancisco", env.logdir) as sf_gws:
        ny_gws.start("ny-mm")
        sf_gws.start("sf-mm")
        wait_until(lambda: caught_up(env.reg, src) and caught_up(env.reg, dst), 120, "both links caught up")
        lost_end = lose_replicated_records(env, src, dst, "t")
        replica_end = true_ends(env.bs_of(dst), sp(dst), {"t": 1})[("t", 0)]
        assert lost_end < replica_end
        wait_until(lambda: in_error(env, src, dst), 120, "the diverged link in error")
        row = wait_until(lambda: in_error(env, dst, src), 60, "the other link in error")
        error = row["lasterror"]
        assert f"{src} lost records it had written" in error, error
        assert f"{dst}:t partition 0 holds {replica_end - lost_end} of them" in error, error
        assert row["isUptodate"] is False
        fix = re.findall(r"'streamrepl ([^']*)'", error)
        assert fix and fix[-1].split() == ["stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "t"]
        cli(*fix[-1].split(), registry=env.reg)
        wait_until(lambda: caught_up(env.reg, src) and caught_up(env.reg, dst), 120, "both links healthy again")
        for a, b in ((src, dst), (dst, src)):
            r = row_of(env, a, b)
            assert (r["replicaState"], r["lasterror"], r["isUptodate"]) == ("REPLICA_STATE_REPLICATING", "", True), r
        assert assert_identical(env.bs_of(src), sp(src), uuid_of(env.reg, src), env.bs_of(dst), sp(dst), {"t": 1}) > 0
        ny_gws.stop_all()
        sf_gws.stop_all()


@noida_run
def test_a_source_topic_recreated_under_a_running_gateway_is_detected(env: Env) -> None:
    src, dst = pair(env, {"t": 1})
    produce(env.bs_of(src), sp(src), "t", 20, 1)
    with Gateways(env.reg, "newyork", env.logdir) as gws:
        gws.start()
        wait_until(lambda: caught_up(env.reg, src), 120, "the replica caught up")
        held = read_partition(env.bs_of(dst), env.kt(dst, "t"), 0)
        # Outside streamrepl, under the gateway that fetches from it (noida survives that, Tansu does not).
        recreate_topic(env.bs_of(src), env.kt(src, "t"), 1)
        write(env.bs_of(src), env.kt(src, "t"), {0: 30}, "new")
        row = wait_until(lambda: in_error(env, src, dst), 120, "the link in error")
        assert f"source {src}:t partition 0 diverged at offset " in row["lasterror"], row
        assert read_partition(env.bs_of(dst), env.kt(dst, "t"), 0) == held
        gws.stop_all()


def test_resync_refuses_bad_input_in_one_line(env: Env) -> None:
    src, dst = pair(env, {"t": 1})
    lone = new_stream(env.reg, f"/newyork/lone{uuid.uuid4().hex[:6]}")

    def refused(*args: str) -> str:
        run = cli("stream", "replica", "resync", *args, registry=env.reg, check=False)
        assert run.code != 0
        return one_error_line(run)

    assert refused("-path", src, "-replica", lone).endswith(
        f"stream {lone} is not a replica of {src}; see 'streamrepl stream replica list -path {src}'"
    )
    assert refused("-path", src, "-replica", dst, "-topic", "nope").endswith(
        f"topic nope is not a topic of stream {src}; see 'streamrepl stream topic list -path {src}'"
    )
    assert refused("-path", src).endswith("missing -replica; give the replica stream's path")
    assert refused("-path", src, "-replica", src).endswith(
        f"stream {src} cannot be resynchronized from itself; give its replica in -replica"
    )
    assert row_of(env, src, dst)["paused"] is False


def test_resync_keeps_a_link_the_operator_had_paused_paused(env: Env) -> None:
    src, dst = pair(env, {"t": 1})
    new_topics(env.reg, dst, {"t": 1})  # what a gateway would make; none runs here
    produce(env.bs_of(src), sp(src), "t", 4, 1)
    produce(env.bs_of(dst), sp(dst), "t", 3, 1, tag="replica")
    cli("stream", "replica", "pause", "-path", src, "-replica", dst, registry=env.reg)
    done = cli("stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "t", registry=env.reg)
    assert f"the link {src} -> {dst} was paused before resync: it stays paused" in done.stderr, done.stderr
    assert f"'streamrepl stream replica resume -path {src} -replica {dst}'" in done.stderr, done.stderr
    assert row_of(env, src, dst)["paused"] is True
    assert true_ends(env.bs_of(dst), sp(dst), {"t": 1})[("t", 0)] == 0  # rebuilt empty, and nothing copied into it


def test_resync_of_a_paused_link_says_which_link_is_paused_already(env: Env) -> None:
    src, dst = pair(env, {"t": 1})
    new_topics(env.reg, dst, {"t": 1})
    cli("stream", "replica", "pause", "-path", src, "-replica", dst, registry=env.reg)
    plan = cli(
        "stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "t", "-dryrun", "true", registry=env.reg
    )
    assert "pause  and" not in plan.stderr, plan.stderr
    assert f"resync: the link {src} -> {dst} is paused already; wait until no gateway holds t" in plan.stderr, (
        plan.stderr
    )


def test_a_second_resync_in_the_same_minute_sets_aside_into_a_stream_of_its_own(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set-aside stream is named by the minute: a second resync of the pair within it took the same name, and
    rolled back saying 'run resync again', which failed the same way until the minute changed."""
    from datetime import datetime

    from streamrepl import dr

    class SameMinute(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime(2026, 12, 2, 8, 15, 30)

    monkeypatch.setattr(dr, "datetime", SameMinute)
    src, dst = pair(env, {"t": 1})
    new_topics(env.reg, dst, {"t": 1})
    produce(env.bs_of(src), sp(src), "t", 4, 1)
    cli("stream", "replica", "pause", "-path", src, "-replica", dst, registry=env.reg)
    asides = []
    for n in (3, 2):
        produce(env.bs_of(dst), sp(dst), "t", n, 1, tag=f"replica{n}")
        done = cli("stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "t", registry=env.reg)
        asides += re.findall(r"set aside: (\S+) holds", done.stderr)
    assert len(asides) == 2 and asides[0] != asides[1], asides
    assert asides[0] == f"{dst}.aside-202612020815", asides
    for aside, n in zip(asides, (3, 2), strict=True):
        assert len(read_partition(env.bs_of(aside), env.kt(aside, "t"), 0)) == n


def test_replica_list_right_after_a_resync_does_not_show_the_error_it_cured(env: Env) -> None:
    """The gateway's report of the diverged partition (its ERROR) stayed until the gateway reported it again."""
    import json

    from streamrepl import registry, statustopic

    src, dst = pair(env, {"t": 1})
    new_topics(env.reg, dst, {"t": 1})
    produce(env.bs_of(src), sp(src), "t", 4, 1)
    produce(env.bs_of(dst), sp(dst), "t", 3, 1, tag="replica")
    cli("stream", "replica", "pause", "-path", src, "-replica", dst, registry=env.reg)
    report = {"state": "error", "error": f"source {src}:t partition 0 diverged at offset 2", "updated": 1}
    key = statustopic.unit_key(dst, src, "t", 0)
    statustopic.put(registry.load(str(env.reg)).get("newyork"), key, json.dumps(report).encode(), "a test report")
    assert row_of(env, src, dst)["replicaState"] == "REPLICA_STATE_ERROR"
    cli("stream", "replica", "resync", "-path", src, "-replica", dst, "-topic", "t", registry=env.reg)
    row = row_of(env, src, dst)
    assert (row["replicaState"], row["lasterror"]) != ("REPLICA_STATE_ERROR", report["error"]), row
    assert "diverged" not in row["lasterror"], row


# Each waits out a read timeout (about 10 s): with the long tests, on noida-db (see noida_run); the default run has
# tests/unit/test_resync_plan.py.
@noida_run
@pytest.mark.parametrize("stalled", ["sanfrancisco", "newyork"])
def test_a_broker_stalled_during_the_fork_search_fails_the_plan_closed(
    env: Env, monkeypatch: pytest.MonkeyPatch, stalled: str
) -> None:
    """Every replica record differs from its source's. With a broker stalled (SIGSTOP) during the fork search, the
    dry run exited 0 with a fork past 0: each read that timed out counted as a match."""
    from streamrepl import policy, registry
    from streamrepl import resync as resync_module

    src, dst = pair(env, {"t": 1})
    new_topics(env.reg, dst, {"t": 1})
    write(env.bs_of(src), env.kt(src, "t"), {0: 8}, "source")
    write(env.bs_of(dst), env.kt(dst, "t"), {0: 8}, "other", [(policy.ORIGIN, uuid_of(env.reg, src).encode())])
    real = resync_module._fork

    def stalled_fork(*args, **kwargs):  # type: ignore[no-untyped-def]
        with frozen_broker(env, stalled):
            return real(*args, **kwargs)

    monkeypatch.setattr(resync_module, "_fork", stalled_fork)
    reg = registry.load(str(env.reg))
    with pytest.raises(Exception) as refused:
        resync_module.resync(reg, src, dst, dryrun=True)
    assert f"cluster '{stalled}' (" in str(refused.value) and "does not answer" in str(refused.value), refused.value
    monkeypatch.setattr(resync_module, "_fork", real)
    (row,) = resync_module.resync(reg, src, dst, dryrun=True)
    assert (row["forkoffset"], row["setaside"]) == (0, 8), row
