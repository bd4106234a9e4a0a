"""The journal and the lock of `stream replica failback`: a run that dies after any step (the crash hook), or is
stopped by SIGINT/SIGTERM, is completed or rolled back by the next run, which says which; every message's advice,
followed, ends in a failed-back pair; two runs at once: one refuses and changes nothing.

A pair on brokers of the module's own, the source still up: `ny` was promoted from `sf`, then `sf` took a few more
records (its diverged tail, set aside by failback) and `ny` its own. No gateway runs: autosetup copies directly.
Crash points other than a representative one are marked `drcrash`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from support import one_error_line
from support.cli import STREAMREPL_BIN
from support.clusters import registered_clusters
from support.dr import TOPICS, crash_run, key, record, replicated_pair
from support.histories import write
from support.streams import assert_identical, cli, cli_data, produce, read_all, sp, wait_until

from streamrepl import failback, oplock, policy, registry, streams
from streamrepl.errors import StreamreplError
from streamrepl.journal import FAILBACK_STEPS
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with registered_clusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


class Pair:
    """A promoted pair ready to fail back, and what failback must leave: `sf` a replica of `ny`, record for record,
    and `sf`'s whole history (its diverged tail too) in the set-aside stream."""

    def __init__(self, ec: EphemeralClusters, n: int = 20):
        self.ec, self.reg = ec, ec.registry_path
        self.sf, self.ny = replicated_pair(ec, n)
        cli("stream", "replica", "promote", "-path", self.ny, registry=self.reg)
        produce(self.bs(self.sf), sp(self.sf), "t", 4, 2, start=1000, tag="tail")
        produce(self.bs(self.ny), sp(self.ny), "t", 6, 2, start=2000, tag="ny")
        self.sf_recs = read_all(self.bs(self.sf), sp(self.sf), TOPICS)
        self.ny_recs = read_all(self.bs(self.ny), sp(self.ny), TOPICS)

    def bs(self, path: str) -> str:
        return self.ec.brokers[sp(path).cluster].bootstrap

    def args(self, *extra: str) -> tuple[str, ...]:
        return ("stream", "replica", "failback", "-path", self.ny, "-replica", self.sf, *extra)

    def asides(self) -> list[str]:
        return [r["path"] for r in cli_data("stream", "list", registry=self.reg) if r["path"].startswith(self.sf + ".")]

    def check_failed_back(self) -> None:
        ny_rec, sf_rec = record(self.reg, self.ny), record(self.reg, self.sf)
        assert (ny_rec.failback, ny_rec.oplock, sf_rec.oplock) == (None, None, None)
        entry = ny_rec.replica(self.sf)
        assert entry is not None and (str(entry.state), entry.paused) == ("REPLICA_STATE_REPLICATING", False)
        assert sf_rec.upstream(self.ny) is not None
        (aside,) = self.asides()
        assert key(read_all(self.bs(aside), sp(aside), TOPICS)) == key(self.sf_recs)
        assert read_all(self.bs(self.ny), sp(self.ny), TOPICS) == self.ny_recs
        total = sum(len(r) for r in self.ny_recs.values())
        assert (
            assert_identical(self.bs(self.ny), sp(self.ny), ny_rec.uuid, self.bs(self.sf), sp(self.sf), TOPICS) == total
        )

    def check_untouched(self) -> None:
        """As before any failback: nothing set aside, `sf` as it was, no journal, no lock."""
        ny_rec, sf_rec = record(self.reg, self.ny), record(self.reg, self.sf)
        assert (ny_rec.failback, ny_rec.oplock, sf_rec.oplock) == (None, None, None)
        assert ny_rec.replica(self.sf) is None
        assert self.asides() == []
        assert read_all(self.bs(self.sf), sp(self.sf), TOPICS) == self.sf_recs


def advice(text: str) -> list[str]:
    """The command the last line of `text` tells the operator to run (quoted 'streamrepl ...')."""
    last = text.strip().splitlines()[-1]
    found = re.findall(r"'streamrepl ([^']*)'", last)
    assert found, f"no command to run in: {last}"
    return found[-1].split()


def failback_crash_test(ec: EphemeralClusters, step: int) -> None:
    pair = Pair(ec)
    crash_run(pair.reg, f"failback:{step}", *pair.args())
    j = record(pair.reg, pair.ny).failback
    assert j is not None and j["done"] == list(FAILBACK_STEPS[:step]) and j["old"] == pair.sf
    again = cli(*pair.args(), registry=pair.reg)
    assert f"completed the interrupted failback of {pair.sf} from {pair.ny}" in again.stderr, again.stderr
    # The rerun's table has a fresh run's columns, in its order: `-noheader` scripts read them by position.
    assert again.stdout.splitlines()[0].split() == list(FRESH_COLUMNS), again.stdout
    pair.check_failed_back()


#: a fresh failback's columns, in its order
FRESH_COLUMNS = (
    "topic",
    "partition",
    "oldprimary",
    "oldend",
    "newprimary",
    "newend",
    "forkoffset",
    "setaside",
    "aside",
)


@pytest.mark.parametrize(
    "step",
    [pytest.param(k, marks=[] if k == 3 else [pytest.mark.drcrash]) for k in range(1, len(FAILBACK_STEPS) + 1)],
)
def test_failback_crashed_after_each_step_is_completed_by_the_next_run(ec: EphemeralClusters, step: int) -> None:
    failback_crash_test(ec, step)


def test_failback_crashed_after_its_copy_rolls_back_when_the_old_primary_changed_meanwhile(
    ec: EphemeralClusters,
) -> None:
    """Its copy no longer holds the old primary whole: deleting it would lose the new record. The rerun rolls back,
    says so and what to run; run, that completes the failback."""
    pair = Pair(ec)
    crash_run(pair.reg, "failback:2", *pair.args())
    aside = record(pair.reg, pair.ny).failback["aside"]  # type: ignore[index]
    origin = [(policy.ORIGIN, record(pair.reg, pair.sf).uuid.encode())]
    write(pair.bs(pair.sf), kafka_topic_name(sp(pair.sf), "t"), {0: 1}, "late", headers=origin)
    pair.sf_recs = read_all(pair.bs(pair.sf), sp(pair.sf), TOPICS)
    run = cli(*pair.args(), registry=pair.reg, check=False)
    assert run.code != 0
    last = run.stderr.strip().splitlines()[-1]
    assert f"rolled back the interrupted failback of {pair.sf} from {pair.ny}" in last, last
    assert f"deleted its copy {aside}" in last and f"nothing of {pair.sf} was changed" in last, last
    pair.check_untouched()
    assert advice(run.stderr) == list(pair.args())
    cli(*advice(run.stderr), registry=pair.reg)
    pair.check_failed_back()


def test_replica_list_says_a_failback_did_not_finish_and_its_advice_completes_it(ec: EphemeralClusters) -> None:
    pair = Pair(ec)
    crash_run(pair.reg, "failback:3", *pair.args())  # the old primary is deleted: its history is only aside
    (row,) = cli_data("stream", "replica", "list", "-path", pair.ny, registry=pair.reg)
    assert f"a failback of {pair.sf} from {pair.ny} did not finish" in row["lasterror"], row
    assert row["isUptodate"] is False
    cli(*advice(row["lasterror"]), registry=pair.reg)
    pair.check_failed_back()


def test_failback_of_a_missing_old_primary_without_a_journal_is_refused(ec: EphemeralClusters) -> None:
    pair = Pair(ec, n=4)
    cli("stream", "delete", "-path", pair.sf, registry=pair.reg)
    run = cli(*pair.args(), registry=pair.reg, check=False)
    line = one_error_line(run)
    assert f"stream {pair.sf} does not exist" in line, line
    assert f"'streamrepl stream replica autosetup -path {pair.ny} -replica {pair.sf}'" in line, line
    assert record(pair.reg, pair.ny).failback is None


def _start(pair: Pair) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [STREAMREPL_BIN, *pair.args()],
        env={**os.environ, "STREAMREPL_CLUSTERS": str(pair.reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _registered(pair: Pair) -> bool:
    rec = record(pair.reg, pair.ny)
    return rec.replica(pair.sf) is not None or "setup" in ((rec.failback or {}).get("done") or [])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_failback_stopped_while_setting_up_the_replica_is_completed_by_the_advice(
    ec: EphemeralClusters, sig: signal.Signals
) -> None:
    """Stopped once autosetup registered the old primary as a replica (its copy under way, or done): a rerun of
    failback said 'remove that entry first', and autosetup, as its own message said, left the journal behind."""
    pair = Pair(ec, n=3000)
    proc = _start(pair)
    wait_until(lambda: _registered(pair) or proc.poll() is not None, 120, "autosetup to register", interval=0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    if proc.returncode != 0:
        assert proc.returncode == 128 + sig, err
        cli(*advice(err), registry=pair.reg)
    pair.check_failed_back()


@pytest.mark.drcrash
@pytest.mark.parametrize("delay", [0.3, 0.6, 1.0, 1.5, 2.5])
def test_failback_stopped_by_sigint_ends_failed_back_or_untouched(ec: EphemeralClusters, delay: float) -> None:
    pair = Pair(ec, n=400)
    proc = _start(pair)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    if proc.returncode == 0:
        pair.check_failed_back()
        return
    if record(pair.reg, pair.ny).failback is None:
        pair.check_untouched()  # rolled back, or stopped before its journal
    cli(*pair.args(), registry=pair.reg)
    pair.check_failed_back()


def test_two_failbacks_at_once_the_second_refuses_and_changes_nothing(ec: EphemeralClusters) -> None:
    """Two real processes: the first is frozen (SIGSTOP) once its journal is written, holding the lock; the second
    refuses; the first, let go, completes."""
    pair = Pair(ec)
    first = _start(pair)
    wait_until(lambda: record(pair.reg, pair.ny).failback is not None, 60, "the first run's journal", interval=0.02)
    first.send_signal(signal.SIGSTOP)
    try:
        ny_held, sf_held = record(pair.reg, pair.ny), record(pair.reg, pair.sf)
        second = cli(*pair.args(), registry=pair.reg, check=False)
        line = one_error_line(second)
        assert f"a failback of {pair.ny} is running (owner " in line and "nothing was changed" in line, line
        assert record(pair.reg, pair.ny).to_json() == ny_held.to_json()
        assert record(pair.reg, pair.sf).to_json() == sf_held.to_json()
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    pair.check_failed_back()
    # Once it is done, a third run refuses as well: the old primary is the new one's replica now.
    assert "already registered as a replica" in one_error_line(cli(*pair.args(), registry=pair.reg, check=False))


def test_a_failback_planned_before_another_one_finished_refuses_and_changes_nothing(
    ec: EphemeralClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second run plans, then the first (a process of its own) completes before the second takes the lock: the
    second must refuse without deleting the old primary again or touching the first one's set-aside copy."""
    pair = Pair(ec)
    real = oplock.holding

    def after_the_other(r: streams.Resolved, command: str):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(oplock, "holding", real)
        cli(*pair.args(), registry=pair.reg)
        return real(r, command)

    monkeypatch.setattr(oplock, "holding", after_the_other)
    with pytest.raises(StreamreplError) as refused:
        failback.failback(registry.load(str(pair.reg)), pair.ny, pair.sf)
    assert "already registered as a replica" in str(refused.value), refused.value
    pair.check_failed_back()


def test_an_interrupt_that_a_callback_turned_into_a_system_error_is_the_interrupt() -> None:
    """Seen on noida-db: SIGTERM while autosetup's copy ran ended failback with 'unexpected SystemError: <method
    'startswith' of 'str' objects> returned a result with an exception set', no advice, exit 1."""
    try:
        try:
            raise KeyboardInterrupt("stop")
        except KeyboardInterrupt:
            raise SystemError("<method 'startswith' of 'str' objects> returned a result with an exception set")  # noqa: B904
    except SystemError as e:
        found = oplock.interrupt_in(e)
    assert isinstance(found, KeyboardInterrupt) and str(found) == "stop"
    assert oplock.interrupt_in(SystemError("a real one")) is None
    assert oplock.interrupt_in(StreamreplError("not an interrupt")) is None
