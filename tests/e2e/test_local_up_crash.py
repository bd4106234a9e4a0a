"""`local up` (and `local up -tls`) killed after each of its steps, then run again: it must end up as if the first run
had finished (every broker answers, over TLS with the certificate checked where asked, the registry says so) and
leave no process behind that `local down` would not stop.

$STREAMREPL_CRASH_AFTER_STEP=local-up:<k> exits hard right after the k-th step of the run (os._exit, as SIGKILL
would: no clean-up, the brokers it started keep running in their own sessions). The steps are counted as they happen
(a broker and a terminator per cluster), so the last case, one past the last step, checks that the cases cover them
all. Every case but a representative one is marked `drcrash` (out of the default run).
"""

from __future__ import annotations

import datetime
import os
import signal
import ssl
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.cli import run_proc
from support.streams import wait_until

from streamrepl import local, local_tls
from streamrepl.oplock import CRASH_EXIT

TLS = pytest.mark.skipif(
    local_tls.tunnel_binary() is None, reason="stunnel is not installed (apt-get install stunnel4)"
)

CLUSTERS = ("crasha", "crashb")
#: the steps of `local up -tls` for two new clusters: the CA (its key, its certificate), the server certificate (its
#: key, its certificate), each cluster's broker and terminator started, every broker ready, the state and registry
#: written, the ports remembered
TLS_STEPS = 11
#: the same without TLS: each broker started, ready, state and registry written, ports remembered
PLAIN_STEPS = 5


def _processes_of(sd: Path) -> set[int]:
    """The live processes writing their output into the state directory: every broker and terminator `local up`
    started there (their stdout is its log), recorded or not."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            out = os.readlink(entry / "fd" / "1")
            state = (entry / "stat").read_text().split(") ")[1][0]
        except OSError:
            continue
        if out.startswith(str(sd.resolve()) + "/") and state != "Z":
            found.add(int(entry.name))
    return found


def _up(sd: Path, tls: bool, hook: str | None = None) -> tuple[int, str]:
    args = ["local", "up", "-dir", str(sd), "-broker", "tansu", "-clusters", ",".join(CLUSTERS)]
    if tls:
        args += ["-tls", "true"]
    run = run_proc(args, env={"STREAMREPL_CRASH_AFTER_STEP": hook}, timeout=120)
    return run.code, run.stderr


def _round_trip(props: dict[str, str]) -> None:
    """A topic created, a record written and read back, with the registry's client settings."""
    conf = {k: str(v) for k, v in props.items()}
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(15)
    errors: list[object] = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    producer.produce(topic, b"v", key=b"k", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert errors == [None], errors
    consumer = Consumer({**conf, "group.id": "t", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None and (msg.key(), msg.value()) == (b"k", b"v")
    finally:
        consumer.close()


def _check_crash_then_again(tmp_path: Path, tls: bool, step: int, steps: int) -> None:
    sd = tmp_path / "local"
    try:
        code, err = _up(sd, tls, f"local-up:{step}")
        if step > steps:
            assert code == 0, f"a step past the {steps} known ran into the hook, or up failed: {err}"
            return
        assert code == CRASH_EXIT, (code, err)
        code, err = _up(sd, tls)
        assert code == 0, f"local up after a crash after step {step} failed: {err}"
        rows = local.status(sd)
        assert [(r["cluster"], r["running"]) for r in rows] == [(c, True) for c in CLUSTERS], rows
        doc = yaml.safe_load(local.registry_path(sd).read_text())
        recorded = set()
        for b in local._load(sd).values():
            props = doc["clusters"][b.cluster]
            assert props["bootstrap.servers"] == b.bootstrap, (props, b)
            if tls:
                assert b.tls_port and props["security.protocol"] == "SSL", props
                assert Path(props["ssl.ca.location"]) == (sd / "tls" / "ca.pem").resolve()
            _round_trip(props)
            recorded |= {b.pid, b.tunnel_pid} - {0}
        assert _processes_of(sd) == recorded, "a process `local up` started is running but not recorded"
    finally:
        local.down(sd)
        left = _processes_of(sd)
        for pid in left:  # so that a failing case leaves nothing running
            os.kill(pid, signal.SIGKILL)
        assert left == set(), "`local down` left a process of the crashed `local up` running"


@TLS
@pytest.mark.parametrize(
    "step",
    [pytest.param(k, marks=[] if k in (6, TLS_STEPS + 1) else [pytest.mark.drcrash]) for k in range(1, TLS_STEPS + 2)],
)
def test_local_up_tls_killed_after_each_step_and_run_again_works(tmp_path: Path, step: int) -> None:
    _check_crash_then_again(tmp_path, True, step, TLS_STEPS)


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(k, marks=[] if k in (1, PLAIN_STEPS + 1) else [pytest.mark.drcrash])
        for k in range(1, PLAIN_STEPS + 2)
    ],
)
def test_local_up_killed_after_each_step_and_run_again_works(tmp_path: Path, step: int) -> None:
    _check_crash_then_again(tmp_path, False, step, PLAIN_STEPS)


def _served(port: int) -> bytes:
    """The certificate the TLS terminator on `port` presents (DER); b"" while it does not answer (it reloads)."""
    try:
        return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port), timeout=5))
    except OSError:
        return b""


def _on_file(sd: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert((sd / "tls" / local_tls.SERVER_CERT).read_text())


@TLS
@pytest.mark.parametrize("step", [1, 2])
def test_local_up_tls_killed_while_it_renews_the_certificate_has_the_next_one_serve_the_new_one(
    tmp_path: Path, step: int
) -> None:
    """A server certificate about to expire is made again and the running terminators told to read it (SIGHUP);
    killed after its new key (1) or its new certificate (2) is in place, the next `up` must still get them to serve
    the new one (before: killed after 2, the terminators kept serving the old certificate, which nothing renewed)."""
    sd = tmp_path / "local"
    try:
        assert _up(sd, True)[0] == 0
        soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        local_tls.issue_server(sd / "tls", not_after=soon)
        local.reload_tls(sd)
        ports = [b.tls_port for b in local._load(sd).values()]
        wait_until(lambda: all(_served(p) == _on_file(sd) for p in ports), 30, "the terminators to serve it")
        expiring = _on_file(sd)
        code, err = _up(sd, True, f"local-up:{step}")
        assert code == CRASH_EXIT, (code, err)
        code, err = _up(sd, True)
        assert code == 0, err
        assert _on_file(sd) != expiring
        wait_until(lambda: all(_served(p) == _on_file(sd) for p in ports), 30, "the terminators to serve the new one")
        doc = yaml.safe_load(local.registry_path(sd).read_text())
        for name in CLUSTERS:
            _round_trip(doc["clusters"][name])
    finally:
        local.down(sd)
        left = _processes_of(sd)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == set()


@TLS
def test_local_up_tls_killed_after_starting_a_dead_terminator_again_leaves_none_behind(tmp_path: Path) -> None:
    sd = tmp_path / "local"
    try:
        assert _up(sd, True)[0] == 0
        dead = next(iter(local._load(sd).values()))
        os.kill(dead.tunnel_pid, signal.SIGKILL)
        wait_until(lambda: not local._tunnel_is_ours(dead, sd), 10, "the terminator to die")
        code, err = _up(sd, True, "local-up:1")  # the terminator started again, not recorded yet
        assert code == CRASH_EXIT, (code, err)
        code, err = _up(sd, True)
        assert code == 0, err
        recorded = {p for b in local._load(sd).values() for p in (b.pid, b.tunnel_pid)}
        assert _processes_of(sd) == recorded
        doc = yaml.safe_load(local.registry_path(sd).read_text())
        _round_trip(doc["clusters"][dead.cluster])
    finally:
        local.down(sd)
        left = _processes_of(sd)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == set()
