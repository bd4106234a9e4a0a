"""Embedded clusters: real Tansu brokers on loopback, started, reused, frozen and stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from support.cli import STREAMREPL_BIN, one_error_line, run_cli
from support.local import alive, produce_one, round_trip

from streamrepl import local
from streamrepl.errors import InvalidArgument, NotFound, Unreachable


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    sd = tmp_path / "local"
    yield sd
    # Whatever a test left running (frozen or not) must not outlive it.
    for row in local.status(sd):
        if row["running"]:
            local.thaw(row["cluster"], sd)
    local.down(sd)


def test_up_starts_reachable_brokers_and_is_idempotent(state_dir: Path) -> None:
    brokers = local.up(state_dir=state_dir)
    assert [b.cluster for b in brokers] == list(local.DEFAULT_CLUSTERS)
    assert len({b.port for b in brokers}) == 2
    for b in brokers:
        assert b.bootstrap == f"127.0.0.1:{b.port}"
        assert Path(b.log) == state_dir / "logs" / f"{b.cluster}.log"
        round_trip(b.bootstrap)

    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert registry == {
        "default": "sanfrancisco",
        "clusters": {b.cluster: {"bootstrap.servers": b.bootstrap} for b in brokers},
    }

    again = local.up(list(local.DEFAULT_CLUSTERS), state_dir)
    assert again == brokers

    rows = local.status(state_dir)
    assert [(r["cluster"], r["bootstrap"], r["pid"], r["running"]) for r in rows] == [
        (b.cluster, b.bootstrap, b.pid, True) for b in brokers
    ]


def test_up_adds_a_cluster_and_keeps_the_others(state_dir: Path) -> None:
    (first,) = local.up(["alpha"], state_dir)
    (second,) = local.up(["beta"], state_dir)
    assert first.port != second.port
    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert registry["default"] == "alpha"
    assert list(registry["clusters"]) == ["alpha", "beta"]
    assert set(json.loads((state_dir / "state.json").read_text())) == {"alpha", "beta"}
    assert [r["running"] for r in local.status(state_dir)] == [True, True]


def test_up_restarts_a_dead_broker(state_dir: Path) -> None:
    (old,) = local.up(["alpha"], state_dir)
    assert local.down(state_dir) == ["alpha"]
    # Record it again as if the broker had died behind our back.
    (state_dir / "state.json").write_text(json.dumps({"alpha": {"port": old.port, "pid": old.pid, "log": old.log}}))
    assert local.status(state_dir)[0]["running"] is False
    (new,) = local.up(["alpha"], state_dir)
    assert new.pid != old.pid
    round_trip(new.bootstrap)


@pytest.mark.parametrize("name", ["", "-x", "a/b", "a b", "_x"])
def test_invalid_cluster_name(state_dir: Path, name: str) -> None:
    with pytest.raises(InvalidArgument):
        local.up([name], state_dir)
    assert not (state_dir / "state.json").exists()


def test_freeze_and_thaw() -> None:
    # Brokers of its own: it tests EphemeralClusters itself, and freezes one.
    with local.EphemeralClusters(["a", "b"]) as ec:
        assert ec.registry_path.exists()
        a = ec.brokers["a"]
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic("frozen", num_partitions=1, replication_factor=1)])["frozen"].result(10)

        ec.freeze("a")
        err = produce_one(a.bootstrap, "frozen", b"stalled", timeout_ms=1500)
        assert err is not None
        round_trip(ec.brokers["b"].bootstrap)  # the other cluster is unaffected

        ec.thaw("a")
        assert produce_one(a.bootstrap, "frozen", b"back") is None
        ec.freeze("a")  # left frozen on purpose: exit must still stop it
        pids = [b.pid for b in ec.brokers.values()]
        state_dir = ec.state_dir
    assert not any(alive(pid) for pid in pids)
    assert not state_dir.exists()


def test_freeze_unknown_cluster(state_dir: Path) -> None:
    with pytest.raises(NotFound):
        local.freeze("nosuch", state_dir)


def test_down_stops_only_our_brokers(state_dir: Path) -> None:
    brokers = local.up(["alpha", "beta"], state_dir)
    foreign = subprocess.Popen(["sleep", "100"])
    try:
        state = json.loads((state_dir / "state.json").read_text())
        # A stale record whose PID now belongs to someone else, even on a broker's port.
        state["gamma"] = {"port": brokers[0].port, "pid": foreign.pid, "log": "x"}
        (state_dir / "state.json").write_text(json.dumps(state))

        assert local.down(state_dir, ["beta"]) == ["beta"]
        assert not alive(brokers[1].pid) and alive(brokers[0].pid)
        assert list(yaml.safe_load(local.registry_path(state_dir).read_text())["clusters"]) == [
            "alpha",
            "gamma",
        ]

        assert sorted(local.down(state_dir)) == ["alpha"]
        assert not alive(brokers[0].pid)
        assert foreign.poll() is None and alive(foreign.pid)
        assert local.status(state_dir) == []
        assert not local.registry_path(state_dir).exists()
        assert local.down(state_dir) == []
    finally:
        foreign.kill()
        foreign.wait()


def test_default_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMREPL_LOCAL_DIR", str(tmp_path))
    assert local.default_state_dir() == tmp_path
    assert local.registry_path() == tmp_path / "clusters.yaml"
    monkeypatch.delenv("STREAMREPL_LOCAL_DIR")
    assert local.default_state_dir() == Path(os.path.expanduser("~/.local/state/streamrepl/local"))


def test_broker_that_fails_to_start_reports_its_log(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake-tansu"
    fake.write_text("#!/bin/sh\necho 'error: address already in use' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CALF_TANSU_BIN", str(fake))
    with pytest.raises(Unreachable, match="address already in use"):
        local.up(["alpha"], state_dir, broker="tansu")
    assert local.status(state_dir) == []


def _time_wait_ports() -> set[int]:
    """Local ports on loopback with a connection in TIME_WAIT (state 06 of /proc/net/tcp)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local_addr, state = line.split()[1], line.split()[3]
        if state == "06" and local_addr.startswith("0100007F:"):
            out.add(int(local_addr.split(":")[1], 16))
    return out


def _connected(port: int) -> socket.socket:
    """A client connection the broker has accepted and answered (an ApiVersions v0 request): one still in the listen
    queue is reset, not closed, when the broker dies, and leaves no TIME_WAIT."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
    (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
    # All of it: a close with unread data resets the connection too.
    assert len(conn.recv(size, socket.MSG_WAITALL)) == size
    return conn


def _left_in_time_wait(ports: set[int], conns: list[socket.socket]) -> None:
    """Close our side of connections a stopped broker closed first: its port is then in TIME_WAIT."""
    for c in conns:
        assert c.recv(1) == b"", "the broker did not close the connection"  # its side first
        c.close()
    deadline = time.monotonic() + 30
    while not ports <= _time_wait_ports():
        assert time.monotonic() < deadline, f"ports {ports - _time_wait_ports()} not in TIME_WAIT"
        time.sleep(0.1)


def test_up_after_down_comes_back_on_the_same_ports_despite_time_wait(state_dir: Path) -> None:
    """Running gateways keep the bootstrap they read: `up` after `down` must bring each cluster back where it was.
    It took new ports when clients had been connected (the broker closes first, so its port is in TIME_WAIT)."""
    brokers = local.up(["alpha", "beta"], state_dir)
    conns = [_connected(b.port) for b in brokers]
    assert sorted(local.down(state_dir)) == ["alpha", "beta"]
    _left_in_time_wait({b.port for b in brokers}, conns)
    again = local.up(["alpha", "beta"], state_dir)
    assert [b.port for b in again] == [b.port for b in brokers]
    assert all(a.pid != b.pid for a, b in zip(again, brokers, strict=True))
    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert [c["bootstrap.servers"] for c in registry["clusters"].values()] == [b.bootstrap for b in brokers]
    for b in again:
        round_trip(b.bootstrap)


def test_up_after_a_crash_comes_back_on_the_same_port_despite_time_wait(state_dir: Path) -> None:
    (old,) = local.up(["alpha"], state_dir)
    conn = _connected(old.port)
    os.kill(old.pid, signal.SIGKILL)
    _left_in_time_wait({old.port}, [conn])
    assert local.status(state_dir)[0]["running"] is False
    (new,) = local.up(["alpha"], state_dir)
    assert (new.port, new.bootstrap) == (old.port, old.bootstrap) and new.pid != old.pid
    round_trip(new.bootstrap)


def test_a_port_another_program_took_is_replaced_and_said(state_dir: Path) -> None:
    (old,) = local.up(["alpha"], state_dir)
    local.down(state_dir)
    said: list[str] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", old.port))
        squatter.listen()
        (new,) = local.up(["alpha"], state_dir, warn=said.append)
    assert new.port != old.port
    assert len(said) == 1 and f"127.0.0.1:{old.port}" in said[0] and new.bootstrap in said[0], said
    round_trip(new.bootstrap)
    # The new port is the one remembered from now on.
    local.down(state_dir)
    (again,) = local.up(["alpha"], state_dir)
    assert again.port == new.port


@pytest.mark.parametrize(
    "args",
    [("-broker", "bogus"), ("-broker", ""), ("-clusters", "a b")],
    ids=["bogus-broker", "empty-broker", "bad-name"],
)
def test_refused_up_leaves_no_state_directory(tmp_path: Path, args: tuple[str, str]) -> None:
    sd = tmp_path / "new" / "local"
    run = run_cli("local", "up", "-dir", sd, *args)
    assert run.code == 1
    assert "unknown broker" in one_error_line(run) or "invalid cluster name" in one_error_line(run)
    assert not (tmp_path / "new").exists()
    run = run_cli("local", "up", "-dir", sd, env={"STREAMREPL_LOCAL_BROKER": "bogus"})
    assert "STREAMREPL_LOCAL_BROKER" in one_error_line(run)
    assert not (tmp_path / "new").exists()


MALFORMED_STATES = {
    "not-json": ("{not json", "invalid JSON"),
    "a-list": ("[1, 2]", "an array, not an object"),
    "record-not-object": ('{"a": 5}', "cluster 'a'"),
    "port-string": ('{"a": {"port": "x", "pid": 1, "log": "l"}}', "port"),
    "pid-missing": ('{"a": {"port": 1, "log": "l"}}', "pid"),
    "pid-bool": ('{"a": {"port": 1, "pid": true, "log": "l"}}', "pid"),
    "unknown-field": ('{"a": {"port": 1, "pid": 1, "log": "l", "colour": 1}}', "colour"),
    "broker-number": ('{"a": {"port": 1, "pid": 1, "log": "l", "broker": 3}}', "broker"),
    "port-too-big": ('{"a": {"port": 70000, "pid": 1, "log": "l"}}', "port 70000"),
    "pid-zero": ('{"a": {"port": 1, "pid": 0, "log": "l"}}', "pid 0"),
    "bad-name": ('{"a b": {"port": 1, "pid": 1, "log": "l"}}', "'a b' is not a valid cluster name"),
    "not-utf8": ('{"\udcff": 1}', "invalid JSON"),
    "broker-unknown": ('{"a": {"port": 1, "pid": 1, "log": "l", "broker": "kafka"}}', 'broker "kafka"'),
}


@pytest.mark.parametrize("verb", ["status", "down", "up"])
@pytest.mark.parametrize("case", MALFORMED_STATES, ids=list(MALFORMED_STATES))
def test_a_malformed_state_file_is_one_clear_line(tmp_path: Path, verb: str, case: str) -> None:
    text, what = MALFORMED_STATES[case]
    sd = tmp_path / "local"
    sd.mkdir()
    (sd / "state.json").write_bytes(text.encode(errors="surrogateescape"))
    args = ["local", verb, "-dir", sd, *(["-clusters", "a"] if verb == "up" else [])]
    line = one_error_line(run_cli(*args))
    assert line.startswith(f"ERROR (22) - local {verb}: ") and str(sd / "state.json") in line, line
    assert what in line and "remove it" in line and "unexpected" not in line, line
    doc = run_cli(*args, "-json").json()
    assert doc["status"] == "ERROR" and what in doc["errors"][0]["desc"], doc
    assert (sd / "state.json").read_bytes() == text.encode(errors="surrogateescape")
    assert {p.name for p in sd.iterdir()} <= {".lock", "state.json"}


def test_up_prints_only_shell_lines_on_stdout_so_that_eval_works(tmp_path: Path) -> None:
    sd = tmp_path / "a dir; with $pecial 'chars'" / "local"
    try:
        script = f'eval "$({STREAMREPL_BIN} local up -clusters alpha -dir "$1")" && printf %s "$STREAMREPL_CLUSTERS"'
        p = subprocess.run(["bash", "-c", script, "bash", str(sd)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p
        assert p.stdout == str(local.registry_path(sd)), p
        (alpha,) = local.status(sd)
        # The table goes to stderr, for the eye.
        assert p.stderr.splitlines()[0].split("\t")[:3] == ["cluster", "broker", "bootstrap"], p.stderr
        assert alpha["bootstrap"] in p.stderr
        # -json and -noheader are for programs: what they ask for on stdout, as before.
        doc = json.loads(
            subprocess.run(
                [STREAMREPL_BIN, "local", "up", "-clusters", "alpha", "-dir", sd, "-json"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
        )
        assert [r["bootstrap"] for r in doc["data"]] == [alpha["bootstrap"]]
        rows = run_cli("local", "up", "-clusters", "alpha", "-dir", sd, "-noheader")
        assert rows.code == 0 and rows.stdout.split("\t")[:3] == ["alpha", alpha["broker"], alpha["bootstrap"]], rows
    finally:
        local.down(sd)
