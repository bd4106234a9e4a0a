"""`gateway start -workers N`: the supervisor (replication/workers.py) with fake processes and a fake clock, and how
a worker is judged by the gateway list. No broker, no process."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from support.cli import one_error_line, run_cli

from streamrepl.registry import Cluster
from streamrepl.replication.allowlist import AllowList
from streamrepl.replication.workers import BACKOFF_SECONDS, REFUSED, Supervisor, worker_metrics_port

CLUSTER = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})


class FakeProcess:
    def __init__(self, k: int, wid: str):
        self.k, self.id = k, wid
        self.pid = 1000 + k
        self.code: int | None = None
        self.signals: list[int] = []
        #: the exit status a signal makes it exit with (None: it ignores the signal)
        self.on_signal: int | None = 0

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if self.on_signal is not None:
            self.code = self.on_signal


class Harness:
    def __init__(self, n: int):
        self.now = 0.0
        self.spawned: list[FakeProcess] = []
        self.sup = Supervisor("gw", n, self.spawn, clock=lambda: self.now, sleep=self.sleep)

    def spawn(self, k: int, wid: str) -> FakeProcess:
        self.spawned.append(FakeProcess(k, wid))
        return self.spawned[-1]

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def running(self) -> dict[str, FakeProcess]:
        return {w.id: w.proc for w in self.sup.workers if isinstance(w.proc, FakeProcess)}


def test_workers_get_ids_of_their_own_and_a_dead_one_starts_again_under_its_id_after_a_back_off() -> None:
    h = Harness(2)
    for w in h.sup.workers:
        h.sup._start(w)
    assert sorted(h.running()) == ["gw.w1", "gw.w2"]
    h.running()["gw.w1"].code = -signal.SIGKILL
    assert not h.sup.step()
    assert list(h.running()) == ["gw.w2"]  # waits for the back-off first
    h.now += BACKOFF_SECONDS / 2
    h.sup.step()
    assert len(h.spawned) == 2
    h.now += BACKOFF_SECONDS
    h.sup.step()
    assert [p.id for p in h.spawned] == ["gw.w1", "gw.w2", "gw.w1"] and sorted(h.running()) == ["gw.w1", "gw.w2"]
    # Dying young again (a failure: exit status 1) doubles the back-off.
    h.running()["gw.w1"].code = 1
    h.sup.step()
    h.now += BACKOFF_SECONDS * 1.5
    h.sup.step()
    assert len(h.spawned) == 3
    h.now += BACKOFF_SECONDS
    h.sup.step()
    assert len(h.spawned) == 4


def test_a_refused_worker_is_not_started_again_and_when_all_refused_the_supervisor_exits_1() -> None:
    refusing = Harness(2)

    def spawn(k: int, wid: str) -> FakeProcess:
        p = refusing.spawn(k, wid)
        p.code = REFUSED
        return p

    refusing.sup._spawn = spawn
    assert refusing.sup.run() == 1
    assert [p.id for p in refusing.spawned] == ["gw.w1", "gw.w2"]  # nobody started again


def test_a_refused_worker_leaves_the_others_running() -> None:
    h = Harness(2)
    for w in h.sup.workers:
        h.sup._start(w)
    h.running()["gw.w2"].code = REFUSED
    h.now += 100
    assert not h.sup.step()
    h.now += 100
    h.sup.step()
    assert list(h.running()) == ["gw.w1"] and len(h.spawned) == 2


def test_sigterm_is_forwarded_to_every_worker_and_a_clean_drain_exits_0() -> None:
    h = Harness(3)

    def sleep(seconds: float) -> None:
        h.now += seconds
        if h.now > 1 and not h.sup.stop_signal:
            h.sup.on_signal(signal.SIGTERM)

    h.sup._sleep = sleep
    assert h.sup.run() == 0
    assert [p.signals for p in h.spawned] == [[signal.SIGTERM]] * 3


def test_the_supervisor_waits_for_slow_drains_and_exits_1_when_one_did_not_stop_cleanly() -> None:
    h = Harness(2)
    for w in h.sup.workers:
        h.sup._start(w)
    slow, failing = h.spawned
    slow.on_signal, failing.on_signal = None, 3
    h.sup.on_signal(signal.SIGINT)
    assert not h.sup.step()  # the slow one is still draining
    assert slow.signals == [signal.SIGINT] and failing.signals == [signal.SIGINT]
    h.sup.step()
    assert slow.signals == [signal.SIGINT]  # forwarded once, not on every look
    slow.code = 0
    assert h.sup.step()
    assert h.sup.workers[0].final == 0 and h.sup.workers[1].final == 3


def test_a_planned_stop_starts_no_worker_waiting_for_its_back_off() -> None:
    h = Harness(2)
    for w in h.sup.workers:
        h.sup._start(w)
    h.spawned[0].code = -signal.SIGKILL
    h.sup.step()
    h.sup.on_signal(signal.SIGTERM)
    h.now += 10 * BACKOFF_SECONDS
    assert h.sup.step()
    assert len(h.spawned) == 2


def test_worker_metrics_ports_follow_the_first_and_0_stays_any_port() -> None:
    assert [worker_metrics_port(9100, k) for k in (1, 2, 3)] == [9100, 9101, 9102]
    assert [worker_metrics_port(0, k) for k in (1, 2)] == [0, 0]
    assert worker_metrics_port(None, 2) is None


def test_a_worker_is_allowed_by_its_supervisors_id_or_host_and_refused_by_neither() -> None:
    def judge(gateways: list[str], parent: str | None = "gw") -> str:
        return AllowList(CLUSTER, "gw.w1", "host1", read_list=lambda c: gateways, parent_id=parent).check_now()

    assert judge(["gw"]) == ""
    assert judge(["gw.w1"]) == ""
    assert judge(["host1"]) == ""
    assert "gw.w1" in judge(["other"])
    assert "gw.w1" in judge(["gw"], parent=None)  # a gateway started on its own is not allowed by a look-alike name


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("-workers", "0"), "-workers 0 is out of range; use 1 to 64"),
        (("-workers", "65"), "-workers 65 is out of range; use 1 to 64"),
        (("-workers", "-2"), "-workers -2 is out of range"),
        (("-workers", "two"), "'two' is not a valid integer"),
        (("-workers", "4", "-metricsport", "65534"), "needs ports up to 65537"),
        (("-parent", "a/b"), "-parent 'a/b' is not a gateway name"),
    ],
)
def test_bad_workers_are_one_line_errors_before_anything_starts(
    args: tuple[str, ...], says: str, tmp_path: Path
) -> None:
    reg = tmp_path / "clusters.yaml"
    reg.write_text("default: newyork\nclusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n")
    r = run_cli("-clusters", reg, "gateway", "start", "-cluster", "newyork", *args)
    line = one_error_line(r)
    assert r.code != 0 and "gateway start" in line and says in line, line
    envelope = run_cli("-clusters", reg, "gateway", "start", "-cluster", "newyork", *args, "-json")
    assert envelope.code != 0 and json.loads(envelope.stdout)["status"] == "ERROR", envelope
