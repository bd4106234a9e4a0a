"""The journals of `stream replica promote` and `stream replica resync`: a run that dies part way (the crash hook
$STREAMREPL_CRASH_AFTER_STEP exits hard right after a step, as SIGKILL would; SIGTERM and SIGINT stop it as an
interrupt) is completed, or rolled back, by the next run; one run at a time holds the stream.

Every crash point is a test; all but a representative one or two are marked `drcrash` (out of the default run:
`pytest -m drcrash tests/e2e/test_dr_journal.py`). On brokers of the module's own: its gateways replicate into every
stream of their cluster.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import one_error_line
from support.cli import STREAMREPL_BIN, run_proc
from support.clusters import registered_clusters
from support.dr import TOPICS, crash_run, key, record, replicated_pair
from support.histories import recreate_topic, write
from support.streams import (
    Gateways,
    assert_identical,
    cli,
    cli_data,
    read_all,
    same_ends,
    sp,
    true_ends,
    wait_until,
)

from streamrepl import oplock, policy, registry, resync, statustopic, streams
from streamrepl.errors import StreamreplError
from streamrepl.journal import PROMOTE_STEPS, RESYNC_STEPS
from streamrepl.local import EphemeralClusters
from streamrepl.model import Stream
from streamrepl.oplock import OpLock
from streamrepl.paths import kafka_topic_name

#: records per partition of the source topic created again under a replica (resync's tests)
NEW = 6


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with registered_clusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


class Sides:
    """Both streams' metadata and records, taken before a DR command, to check them after it."""

    def __init__(self, ec: EphemeralClusters, sf: str, ny: str):
        self.ec, self.sf, self.ny = ec, sf, ny
        self.sf_rec, self.ny_rec = record(ec.registry_path, sf), record(ec.registry_path, ny)
        self.sf_recs, self.ny_recs = self.records(sf), self.records(ny)

    def bs(self, path: str) -> str:
        return self.ec.brokers[sp(path).cluster].bootstrap

    def records(self, path: str) -> dict:
        return read_all(self.bs(path), sp(path), TOPICS)


def check_promoted(ec: EphemeralClusters, before: Sides) -> None:
    """The replica promoted exactly as an uninterrupted promote leaves it; its source untouched."""
    reg, sf, ny = ec.registry_path, before.sf, before.ny
    rec = record(reg, ny)
    assert rec.upstreams == []
    assert rec.oplock is None
    p = rec.promotion
    assert p is not None
    assert (p["state"], p["from"], p["done"], p["uuid"]) == ("complete", [sf], list(PROMOTE_STEPS), before.ny_rec.uuid)
    ends = true_ends(before.bs(ny), sp(ny), TOPICS)
    assert p["ends"] == {"t": [ends[("t", 0)], ends[("t", 1)]]}
    assert rec.uuid == before.sf_rec.uuid  # the identity of the history it holds
    assert p["at"] >= p["started"]
    # The source is not contacted: its record and records are as they were; the replica's records too.
    assert record(reg, sf).to_json() == before.sf_rec.to_json()
    assert before.records(sf) == before.sf_recs
    assert before.records(ny) == before.ny_recs
    total = sum(len(recs) for recs in before.sf_recs.values())
    assert assert_identical(before.bs(sf), sp(sf), before.sf_rec.uuid, before.bs(ny), sp(ny), TOPICS) == total


def promote_crash_test(ec: EphemeralClusters, step: int) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)
    crash_run(reg, f"promote:{step}", "stream", "replica", "promote", "-path", ny)
    journal = record(reg, ny).promotion
    assert journal is not None and journal["done"] == list(PROMOTE_STEPS[:step])
    again = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
    if step < len(PROMOTE_STEPS):
        assert f"completed an interrupted promote of {ny}" in again.stderr, again.stderr
    else:
        assert f"{ny} was promoted from {sf} at " in again.stderr and "nothing left to do" in again.stderr
    head = ("path", "promotedfrom", "writable", "dryrun", "topic", "partition")
    assert [tuple(row[k] for k in head) for row in again.json()["data"]] == [
        (ny, sf, True, False, "t", p) for p in range(TOPICS["t"])
    ]
    check_promoted(ec, before)


@pytest.mark.parametrize(
    "step",
    [pytest.param(k, marks=[] if k == 2 else [pytest.mark.drcrash]) for k in range(1, len(PROMOTE_STEPS) + 1)],
)
def test_promote_crashed_after_each_step_is_completed_by_the_next_run(ec: EphemeralClusters, step: int) -> None:
    promote_crash_test(ec, step)


@pytest.mark.drcrash
@pytest.mark.parametrize("delay", [0.2, 0.3, 0.35, 0.45, 0.6])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_promote_stopped_by_a_signal_is_completed_by_the_next_run(
    ec: EphemeralClusters, sig: signal.Signals, delay: float
) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)
    proc = subprocess.Popen(
        [STREAMREPL_BIN, "stream", "replica", "promote", "-path", ny],
        env={**os.environ, "STREAMREPL_CLUSTERS": str(reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    if proc.returncode == 128 + sig:
        assert "interrupted" in err, err
    again = cli("stream", "replica", "promote", "-path", ny, registry=reg)
    assert again.code == 0
    check_promoted(ec, before)


def test_a_second_promote_refuses_while_one_runs_and_changes_nothing(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec, n=4)
    r = streams.resolve(registry.load(str(reg)), ny)
    running = OpLock(r, "promote")  # a run of this live process, as far as the second one can tell
    running.acquire()
    try:
        held = record(reg, ny)
        run = cli("stream", "replica", "promote", "-path", ny, registry=reg, check=False)
        line = one_error_line(run)
        assert f"a promote of {ny} is running (owner {running.owner}, since " in line, line
        assert "nothing was changed" in line, line
        assert record(reg, ny).to_json() == held.to_json()
    finally:
        running.release()
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    assert record(reg, ny).upstreams == []


def resync_pair(ec: EphemeralClusters) -> tuple[str, str, Sides]:
    """A replica set up by autosetup whose source topic was then deleted and created again outside streamrepl with
    other records (no gateway ran meanwhile): resync sets the replica's records aside and rebuilds it."""
    sf, ny = replicated_pair(ec)
    recreate_topic(ec.brokers["sanfrancisco"].bootstrap, kafka_topic_name(sp(sf), "t"), 2)
    write(ec.brokers["sanfrancisco"].bootstrap, kafka_topic_name(sp(sf), "t"), {0: NEW, 1: NEW}, "new")
    return sf, ny, Sides(ec, sf, ny)


def resync_args(sf: str, ny: str) -> tuple[str, ...]:
    return ("stream", "replica", "resync", "-path", sf, "-replica", ny, "-topic", "t")


def link_of(reg: Path, sf: str, ny: str) -> tuple[bool, str]:
    entry = record(reg, sf).replica(ny)
    assert entry is not None
    return entry.paused, str(entry.state)


def without_version(rec: Stream) -> dict:
    return {k: v for k, v in rec.to_json().items() if k not in ("version", "updated")}


def check_resynced(ec: EphemeralClusters, before: Sides, aside: str, tmp_path: Path) -> None:
    """The replica rebuilt as an uninterrupted resync leaves it: its records set aside whole, the link running, and
    (a gateway started) the replica the source's copy again; the source untouched."""
    reg, sf, ny = ec.registry_path, before.sf, before.ny
    rec = record(reg, ny)
    assert (rec.resync, rec.oplock) == (None, None)
    assert link_of(reg, sf, ny) == (False, "REPLICA_STATE_REPLICATING")
    assert without_version(record(reg, sf)) == without_version(before.sf_rec)
    assert key(read_all(before.bs(aside), sp(aside), TOPICS)) == key(before.ny_recs)
    assert true_ends(before.bs(ny), sp(ny), TOPICS) == {("t", 0): 0, ("t", 1): 0}  # rebuilt, no gateway yet
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        wait_until(lambda: same_ends(before.bs(sf), sp(sf), before.bs(ny), sp(ny), TOPICS), 60, "the copy again")
        gws.stop_all()
    assert assert_identical(before.bs(sf), sp(sf), before.sf_rec.uuid, before.bs(ny), sp(ny), TOPICS) == 2 * NEW
    assert before.records(sf) == before.sf_recs


def resync_crash_test(ec: EphemeralClusters, step: int, tmp_path: Path) -> None:
    reg = ec.registry_path
    sf, ny, before = resync_pair(ec)
    crash_run(reg, f"resync:{step}", *resync_args(sf, ny))
    j = record(reg, ny).resync
    assert j is not None and j["done"] == list(RESYNC_STEPS[:step])
    again = cli(*resync_args(sf, ny), registry=reg)
    assert f"completed the interrupted resync of {ny} from {sf}" in again.stderr, again.stderr
    check_resynced(ec, before, j["aside"], tmp_path)


@pytest.mark.parametrize(
    "step",
    [pytest.param(k, marks=[] if k == 3 else [pytest.mark.drcrash]) for k in range(1, len(RESYNC_STEPS) + 1)],
)
def test_resync_crashed_after_each_step_is_completed_by_the_next_run(
    ec: EphemeralClusters, step: int, tmp_path: Path
) -> None:
    resync_crash_test(ec, step, tmp_path)


def test_resync_crashed_before_its_copy_rolls_back_when_the_replica_changed_meanwhile(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny, before = resync_pair(ec)
    crash_run(reg, "resync:3", *resync_args(sf, ny))
    assert link_of(reg, sf, ny)[0] is True  # paused by the run that died
    aside = record(reg, ny).resync["aside"]  # type: ignore[index]
    # Something writes into the replica meanwhile (a record of the source's origin, as a gateway writes): the
    # set-aside copy would not hold what the plan saw.
    origin = [(policy.ORIGIN, before.sf_rec.uuid.encode())]
    write(ec.brokers["newyork"].bootstrap, kafka_topic_name(sp(ny), "t"), {0: 1}, "late", headers=origin)
    run = cli(*resync_args(sf, ny), registry=reg, check=False)
    assert run.code != 0
    last = run.stderr.strip().splitlines()[-1]
    assert f"rolled back the interrupted resync of {ny} from {sf}: resumed {sf} -> {ny}" in last, last
    assert (
        f"deleted its partial copy {aside}" in last
        and f"run 'streamrepl stream replica resync -path {sf} -replica {ny}' again" in last
    ), last
    assert (record(reg, ny).resync, record(reg, ny).oplock) == (None, None)
    assert link_of(reg, sf, ny) == (False, "REPLICA_STATE_REPLICATING")
    assert aside not in {r["path"] for r in cli_data("stream", "list", registry=reg)}
    ny_now = before.records(ny)
    assert key(ny_now)[("t", 0)] == key(before.ny_recs)[("t", 0)] + [
        (r.offset, r.key, r.value, r.headers, r.timestamp) for r in ny_now[("t", 0)][-1:]
    ]


@pytest.mark.drcrash
@pytest.mark.parametrize("delay", [0.5, 0.8, 1.0, 1.2, 1.8])
def test_resync_stopped_by_sigterm_rolls_back_or_is_completed(
    ec: EphemeralClusters, delay: float, tmp_path: Path
) -> None:
    reg = ec.registry_path
    sf, ny, before = resync_pair(ec)
    proc = subprocess.Popen(
        [STREAMREPL_BIN, *resync_args(sf, ny)],
        env={**os.environ, "STREAMREPL_CLUSTERS": str(reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    j = record(reg, ny).resync
    # Completed, though the signal may have come after its last step, before it exited (seen on noida-db).
    if proc.returncode == 0 or (j is None and f"replicating {sf} -> {ny} again" in err):
        aside = [r for r in cli_data("stream", "list", registry=reg) if r["path"].startswith(f"{ny}.aside-")]
        check_resynced(ec, before, aside[0]["path"], tmp_path)
    elif j is None:  # stopped before its journal, or rolled back: as it was
        assert proc.returncode != 143 or "rolled back" in err or "interrupted" in err, err
        assert link_of(reg, sf, ny) == (False, "REPLICA_STATE_REPLICATING"), err
        assert not [r for r in cli_data("stream", "list", registry=reg) if r["path"].startswith(f"{ny}.aside-")], err
        assert key(before.records(ny)) == key(before.ny_recs)
    else:
        assert proc.returncode != 143 or "again to complete it" in err, err
        again = cli(*resync_args(sf, ny), registry=reg)
        assert f"completed the interrupted resync of {ny} from {sf}" in again.stderr, again.stderr
        check_resynced(ec, before, j["aside"], tmp_path)


def test_replica_list_says_a_resync_did_not_finish(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny, _ = resync_pair(ec)
    crash_run(reg, "resync:2", *resync_args(sf, ny))
    (row,) = cli_data("stream", "replica", "list", "-path", sf, registry=reg)
    assert f"a resync of {ny} from {sf} did not finish" in row["lasterror"], row
    assert f"'streamrepl stream replica resync -path {sf} -replica {ny}' again" in row["lasterror"], row


def advised(lasterror: str, command: str) -> list[str]:
    """The words of the command `lasterror` advises ('streamrepl stream replica <command> ...')."""
    found = re.search(rf"'streamrepl (stream replica {command} [^']*)'", lasterror)
    assert found, lasterror
    return found.group(1).split()


def test_replica_list_of_the_old_primary_says_the_replica_was_promoted_and_its_advice_works(
    ec: EphemeralClusters,
) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec, n=4)
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    (row,) = cli_data("stream", "replica", "list", "-path", sf, registry=reg)
    error = row["lasterror"]
    assert f"replica stream {ny} was promoted to a writable primary at " in error, error
    assert "deleted and created again" not in error, error
    assert advised(error, "failback") == ["stream", "replica", "failback", "-path", ny, "-replica", sf]
    assert (row["replicaState"], row["isUptodate"]) == ("REPLICA_STATE_ERROR", False)
    # Dropping the link, as advised: the old primary has no replica left, the promoted stream stays as it is.
    promoted = record(reg, ny)
    cli(*advised(error, "remove"), registry=reg)
    assert cli_data("stream", "replica", "list", "-path", sf, registry=reg) == []
    assert record(reg, ny).to_json() == promoted.to_json()


def test_a_resync_refuses_while_a_promote_of_the_replica_runs(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny, _ = resync_pair(ec)
    running = OpLock(streams.resolve(registry.load(str(reg)), ny), "promote")
    running.acquire()
    try:
        held = record(reg, ny)
        run = cli(*resync_args(sf, ny), registry=reg, check=False)
        assert run.code != 0
        last = run.stderr.strip().splitlines()[-1]
        assert f"a promote of {ny} is running (owner {running.owner}" in last and "nothing was changed" in last, last
        assert record(reg, ny).to_json() == held.to_json()
        assert link_of(reg, sf, ny)[0] is False
    finally:
        running.release()


def test_failback_refuses_until_an_interrupted_promote_is_completed(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec, n=4)
    crash_run(reg, "promote:2", "stream", "replica", "promote", "-path", ny)
    held = record(reg, sf)
    run = cli(
        "stream", "replica", "failback", "-path", ny, "-replica", sf, "-dryrun", "true", registry=reg, check=False
    )
    assert one_error_line(run).endswith(
        f"the promote of {ny} did not finish; complete it first ('streamrepl stream replica promote -path {ny}')"
    )
    (row,) = cli_data("stream", "replica", "list", "-path", sf, registry=reg)
    assert f"replica stream {ny} is being promoted" in row["lasterror"], row
    assert record(reg, sf).to_json() == held.to_json()


def test_a_bad_crash_hook_value_is_one_line_and_changes_nothing(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec, n=2)
    held = record(reg, ny)
    run = run_proc(
        ["stream", "replica", "promote", "-path", ny],
        env={"STREAMREPL_CLUSTERS": str(reg), "STREAMREPL_CRASH_AFTER_STEP": "promote"},
    )
    assert one_error_line(run).endswith(
        "STREAMREPL_CRASH_AFTER_STEP=promote is not <command>:<step> (e.g. promote:2); fix it or unset it"
    )
    assert record(reg, ny).upstreams == held.upstreams and record(reg, ny).promotion is None


@pytest.mark.drcrash
def test_two_promotes_at_once_one_refuses(ec: EphemeralClusters, tmp_path: Path) -> None:
    """Two real processes: the first waits for a frozen gateway that still holds the replica's partitions (its report
    stays live for statustopic.LIVE_SECONDS), the second refuses meanwhile and changes nothing."""
    reg = ec.registry_path
    sf, ny = replicated_pair(ec, n=4)
    before = Sides(ec, sf, ny)
    newyork = registry.load(str(reg)).get("newyork")
    with Gateways(reg, "newyork", tmp_path) as gws:
        name = gws.start()
        wait_until(lambda: statustopic.held_units(newyork, [f"{ny}:"]), 60, "the gateway to hold the replica")
        gws.procs[name].send_signal(signal.SIGSTOP)
        try:
            first = subprocess.Popen(
                [STREAMREPL_BIN, "stream", "replica", "promote", "-path", ny],
                env={**os.environ, "STREAMREPL_CLUSTERS": str(reg)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            wait_until(
                lambda: "upstreams" in ((record(reg, ny).promotion or {}).get("done") or []), 30, "the first run"
            )
            second = cli("stream", "replica", "promote", "-path", ny, registry=reg, check=False)
            assert f"a promote of {ny} is running (owner " in one_error_line(second)
            assert first.poll() is None, "the first run did not wait for the gateway"
        finally:
            gws.procs[name].send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        assert f"{ny} is writable" in err, err
        gws.stop_all()
    check_promoted(ec, before)


def test_two_resyncs_at_once_the_second_refuses_and_changes_nothing(ec: EphemeralClusters, tmp_path: Path) -> None:
    """Two real processes: the first is frozen (SIGSTOP) once its journal is written, holding the lock; the second
    refuses in one line and changes nothing (links, records, metadata); the first, let go, completes."""
    reg = ec.registry_path
    sf, ny, before = resync_pair(ec)
    first = subprocess.Popen(
        [STREAMREPL_BIN, *resync_args(sf, ny)],
        env={**os.environ, "STREAMREPL_CLUSTERS": str(reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(lambda: record(reg, ny).resync is not None, 60, "the first run's journal", interval=0.02)
    first.send_signal(signal.SIGSTOP)
    try:
        sf_held, ny_held = record(reg, sf), record(reg, ny)
        ny_recs = before.records(ny)
        second = cli(*resync_args(sf, ny), registry=reg, check=False)
        line = one_error_line(second)
        assert f"a resync of {ny} is running (owner " in line and "nothing was changed" in line, line
        assert (record(reg, sf).to_json(), record(reg, ny).to_json()) == (sf_held.to_json(), ny_held.to_json())
        assert before.records(ny) == ny_recs
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    aside = record(reg, ny).resync
    assert aside is None
    (made,) = [r["path"] for r in cli_data("stream", "list", registry=reg) if r["path"].startswith(f"{ny}.aside-")]
    check_resynced(ec, before, made, tmp_path)


def test_a_resync_planned_before_another_one_finished_refuses_and_changes_nothing(
    ec: EphemeralClusters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two resyncs at once where the second plans before the first takes the lock and takes it after the first
    released it: its plan is stale (the replica was rebuilt meanwhile). It must refuse, not pause, copy aside and
    roll back over the first one's work."""
    reg = ec.registry_path
    sf, ny, before = resync_pair(ec)
    real = oplock.holding

    def after_the_other(r: streams.Resolved, command: str):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(oplock, "holding", real)
        cli(*resync_args(sf, ny), registry=reg)  # the other run, a process of its own, completes meanwhile
        return real(r, command)

    monkeypatch.setattr(oplock, "holding", after_the_other)
    with pytest.raises(StreamreplError) as refused:
        resync.resync(registry.load(str(reg)), sf, ny, topic="t")
    assert f"{ny} changed since this resync planned it" in str(refused.value), refused.value
    assert "nothing was changed" in str(refused.value), refused.value
    (aside,) = [r["path"] for r in cli_data("stream", "list", registry=reg) if r["path"].startswith(f"{ny}.aside-")]
    check_resynced(ec, before, aside, tmp_path)


def test_promote_interrupted_after_removing_the_upstream_says_so(
    ec: EphemeralClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped between removing the upstream and marking it done, promote said 'done: nothing'."""
    from streamrepl import promote, replicas

    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)
    real = replicas.upstream_remove

    def then_interrupted(*args: object) -> None:
        real(*args)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(replicas, "upstream_remove", then_interrupted)
    with pytest.raises(KeyboardInterrupt) as stopped:
        promote.promote(registry.load(str(reg)), ny)
    said = str(stopped.value)
    assert f"promote of {ny} stopped part way" in said and "nothing" not in said, said
    assert f"removed the upstream {sf}" in said and "run promote again to complete it" in said, said
    monkeypatch.setattr(replicas, "upstream_remove", real)
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    check_promoted(ec, before)


def test_promote_whose_broker_stops_answering_says_it_stopped_part_way(ec: EphemeralClusters) -> None:
    from streamrepl import promote
    from streamrepl.errors import Unreachable

    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)

    def stalled(_: object) -> list[str]:
        raise Unreachable("cluster 'newyork' (127.0.0.1:1) does not answer while writing stream metadata")

    with pytest.raises(StreamreplError) as stopped:
        promote.promote(registry.load(str(reg)), ny, wait_released=stalled)
    said = str(stopped.value)
    assert said.startswith("cluster 'newyork' (127.0.0.1:1) does not answer while writing stream metadata"), said
    assert f"promote of {ny} stopped part way" in said and "run promote again to complete it" in said, said
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    check_promoted(ec, before)


@pytest.mark.parametrize("delay", [pytest.param(0.05, marks=pytest.mark.drcrash), 0.5])
def test_promote_given_sigterm_early_says_what_was_done(ec: EphemeralClusters, delay: float) -> None:
    """At 0.5 s it exited 143 with no output at all (the signal came before its handler was set)."""
    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)
    proc = subprocess.Popen(
        [STREAMREPL_BIN, "stream", "replica", "promote", "-path", ny],
        env={**os.environ, "STREAMREPL_CLUSTERS": str(reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    if proc.returncode == 128 + signal.SIGTERM:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert "promote" in last and ("nothing was changed" in last or "run promote again" in last), err
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    check_promoted(ec, before)


def test_promote_of_a_replica_holding_another_upstreams_records_is_refused_and_changes_nothing(
    ec: EphemeralClusters,
) -> None:
    """A many-to-one replica whose other upstream was removed as promote advised: promoted, it took over the one
    source's identity and wrote it into partitions of the other origin (copystream and diffstreams then failed at
    their first record), and the removed upstream's link said the replica was 'deleted and created again'."""
    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    cli("stream", "topic", "create", "-path", ny, "-topic", "u", registry=reg)
    other = "0f0f0f0f-0000-4000-8000-0000000000aa"  # the removed upstream's records, as its gateway copied them
    write(
        ec.brokers["newyork"].bootstrap, kafka_topic_name(sp(ny), "u"), {0: 4}, "lon", [(policy.ORIGIN, other.encode())]
    )
    before = record(reg, ny)
    run = cli("stream", "replica", "promote", "-path", ny, registry=reg, check=False)
    line = one_error_line(run)
    assert f"{ny}:u[0] holds records of another stream (origin {other})" in line, line
    assert f"promote takes over the history of {sf} alone" in line and "nothing was changed" in line, line
    assert record(reg, ny).to_json() == before.to_json()
    dry = cli("stream", "replica", "promote", "-path", ny, "-dryrun", "true", registry=reg, check=False)
    assert one_error_line(dry) == line
