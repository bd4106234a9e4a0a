"""`gateway start` (and `-workers N`): the supervisor (replication/workers.py) with fake processes and a fake clock,
the exit statuses it judges workers by (replication/exits.py), and how a worker is judged by the gateway list. No
broker, no gateway process."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import one_error_line, run_cli, run_proc

from streamrepl.errors import InvalidArgument, NotFound, PermissionDenied, StreamreplError
from streamrepl.registry import Cluster
from streamrepl.replication import exits
from streamrepl.replication.allowlist import AllowList
from streamrepl.replication.exits import BAD_INPUT, FENCED, REFUSED
from streamrepl.replication.membership import GatewayFenced
from streamrepl.replication.workers import (
    BACKOFF_SECONDS,
    Supervisor,
    Worker,
    exit_text,
    worker_metrics_port,
)

CLUSTER = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})


class FakeProcess:
    def __init__(self, w: Worker):
        self.k, self.id = w.k, w.id
        #: what it was told on its command line
        self.restarts, self.last_exit = w.restarts, w.last_exit
        self.pid = 1000 + w.k
        self.code: int | None = None
        self.signals: list[int] = []
        #: the exit status a signal makes it exit with (None: it ignores the signal)
        self.on_signal: int | None = 0
        #: what it says before a final exit
        self.words: tuple[int, str] | None = None

    def last_words(self) -> tuple[int, str] | None:
        return self.words

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

    def spawn(self, w: Worker) -> FakeProcess:
        self.spawned.append(FakeProcess(w))
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


def test_a_refused_worker_is_not_started_again_and_the_supervisor_exits_with_its_status() -> None:
    refusing = Harness(2)

    def spawn(w: Worker) -> FakeProcess:
        p = refusing.spawn(w)
        p.code = REFUSED
        return p

    refusing.sup._spawn = spawn
    assert refusing.sup.run() == REFUSED
    assert [p.id for p in refusing.spawned] == ["gw.w1", "gw.w2"]  # nobody started again


def test_a_worker_stopped_on_its_own_leaves_the_others_running() -> None:
    h = Harness(2)
    for w in h.sup.workers:
        h.sup._start(w)
    h.running()["gw.w2"].code = 0  # someone sent it SIGTERM, and it drained
    h.now += 100
    assert not h.sup.step()
    h.now += 100
    h.sup.step()
    assert list(h.running()) == ["gw.w1"] and len(h.spawned) == 2
    assert h.spawned[0].signals == []


def test_a_lone_worker_is_the_gateway_itself_and_is_told_its_restarts_and_last_exit() -> None:
    h = Harness(1)
    h.sup._start(h.sup.workers[0])
    assert list(h.running()) == ["gw"]  # the gateway's -id, not gw.w1: member ids stay those of an unsupervised start
    h.spawned[0].code = -signal.SIGSEGV
    h.sup.step()
    h.now += BACKOFF_SECONDS
    h.sup.step()
    assert [(p.id, p.restarts, p.last_exit) for p in h.spawned] == [("gw", 0, ""), ("gw", 1, "signal 11 (SIGSEGV)")]
    h.spawned[1].code = 1
    h.sup.step()
    h.now += 2 * BACKOFF_SECONDS
    h.sup.step()
    assert [(p.restarts, p.last_exit) for p in h.spawned[1:]] == [(1, "signal 11 (SIGSEGV)"), (2, "exit 1")]


@pytest.mark.parametrize("status", [BAD_INPUT, FENCED, REFUSED])
def test_a_final_exit_is_not_restarted_and_ends_the_supervisor_with_its_status_and_message(status: int) -> None:
    h = Harness(1)

    def spawn(w: Worker) -> FakeProcess:
        p = h.spawn(w)
        p.code, p.words = status, (errno.EINVAL, f"gateway {w.id}: what is wrong; how to fix it")
        return p

    h.sup._spawn = spawn
    assert h.sup.run() == status
    assert len(h.spawned) == 1
    assert h.sup.final is not None and h.sup.final.message == "gateway gw: what is wrong; how to fix it"
    assert h.sup.final.exit_status == status and h.sup.final.code == errno.EINVAL


def test_a_final_exit_without_last_words_still_says_what_it_means() -> None:
    h = Harness(1)
    h.sup._start(h.sup.workers[0])
    h.spawned[0].code = FENCED
    assert h.sup.step()
    assert h.sup.final is not None and "fenced" in h.sup.final.message and "gw" in h.sup.final.message


def test_a_final_exit_of_one_worker_stops_the_others_and_they_are_not_restarted() -> None:
    h = Harness(3)
    for w in h.sup.workers:
        h.sup._start(w)
    h.spawned[1].code = FENCED
    h.spawned[2].on_signal = None  # still draining
    assert not h.sup.step()
    assert not h.sup.step()
    assert [p.signals for p in h.spawned] == [[signal.SIGTERM], [], [signal.SIGTERM]]
    h.spawned[2].code = -signal.SIGKILL  # dies while draining: not started again either
    h.now += 100
    assert h.sup.step()
    assert len(h.spawned) == 3 and h.sup.final is not None and h.sup.final.exit_status == FENCED


def test_exit_texts_for_the_gateway_list() -> None:
    assert [exit_text(c) for c in (-signal.SIGKILL, -signal.SIGSEGV, 1, 3, -99)] == [
        "signal 9 (SIGKILL)",
        "signal 11 (SIGSEGV)",
        "exit 1",
        "exit 3",
        "signal 99",
    ]


def test_exit_statuses_are_distinct_and_say_which_errors_are_final() -> None:
    statuses = [exits.CLEAN, exits.FAILED, BAD_INPUT, FENCED, REFUSED]
    assert len(set(statuses)) == len(statuses) and all(0 <= s < 128 for s in statuses)
    assert exits.status_of(InvalidArgument("bad -metricsport")) == BAD_INPUT
    assert exits.status_of(NotFound("unknown cluster")) == BAD_INPUT
    assert exits.status_of(GatewayFenced("fenced")) == FENCED
    assert exits.status_of(PermissionDenied("not on the list")) == REFUSED
    assert exits.status_of(StreamreplError("anything else")) == exits.FAILED


def test_last_words_go_through_the_pipe_and_nothing_said_is_none() -> None:
    read, write = os.pipe()
    exits.tell_supervisor(write, errno.EPERM, "gateway x is not on the gateway list")
    os.close(write)
    assert exits.last_words(read) == (errno.EPERM, "gateway x is not on the gateway list")
    os.close(read)
    read, write = os.pipe()
    assert exits.last_words(read) is None  # the worker still holds its end, and wrote nothing
    os.close(write)
    os.close(read)


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


@contextlib.contextmanager
def _port_after_a_free_one() -> Iterator[tuple[socket.socket, int]]:
    """A port held open whose port before is free (as far as one can tell): worker 1 of `-workers 2` must be able to
    bind the port before it. Any port below a free one can be another process's."""
    for _ in range(50):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with socket.socket() as before:
            try:
                before.bind(("127.0.0.1", port - 1))
            except OSError:
                taken.close()
                continue
        taken.listen()
        with taken:
            yield taken, port
        return
    raise AssertionError("no port with a free one before it in 50 tries")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_metrics_port_in_use_is_one_line_at_once_not_a_worker_restarted_forever(workers: str, tmp_path: Path) -> None:
    reg = tmp_path / "clusters.yaml"
    reg.write_text("default: newyork\nclusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n")
    with _port_after_a_free_one() as (taken, port):
        # -workers 2 from the port before: worker 2's port is the one in use
        first = port - int(workers) + 1
        r = run_proc(
            ["gateway", "start", "-cluster", "newyork", "-metricsaddr", "127.0.0.1", "-metricsport", first]
            + ["-workers", workers, "-clusters", reg],
            timeout=45,
        )
    line = one_error_line(r)
    assert f"127.0.0.1:{port}" in line and "in use" in line and "-metricsport" in line, line
    assert r.code == BAD_INPUT


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("no.such.property: 3", 'No such configuration property: "no.such.property"'),
        ("security.protocol: bogus", 'Invalid value "bogus" for configuration property "security.protocol"'),
    ],
)
def test_a_bad_client_setting_in_the_registry_is_one_line_at_once_not_a_worker_restarted_forever(
    setting: str, says: str, tmp_path: Path
) -> None:
    """The Kafka client refuses it when the worker makes its first client: a final exit (bad settings), which the
    supervisor ends with."""
    reg = tmp_path / "clusters.yaml"
    reg.write_text(f"default: newyork\nclusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n    {setting}\n")
    r = run_proc(["gateway", "start", "-cluster", "newyork", "-clusters", reg], timeout=45)
    line = one_error_line(r)
    assert line.startswith("ERROR (2) - gateway start: ") and says in line, line
    assert r.code == BAD_INPUT


def test_a_kafka_client_refusing_its_settings_is_a_final_exit_and_other_kafka_errors_are_not() -> None:
    from streamrepl.kafka import KafkaError, KafkaException

    assert exits.status_of(KafkaException(KafkaError(KafkaError._INVALID_ARG, "bad value"))) == BAD_INPUT
    assert exits.status_of(KafkaException(KafkaError(KafkaError._TRANSPORT))) == exits.FAILED
    assert exits.status_of(RuntimeError("a bug")) == exits.FAILED
