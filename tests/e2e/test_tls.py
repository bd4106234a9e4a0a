"""Network encryption for real: `local up -tls` puts stunnel in front of each Tansu broker (which advertises the TLS
port), and streams replicate over TLS with the certificates checked; a wrong CA and an expired certificate are one
clear line each."""

from __future__ import annotations

import datetime
import json
import os
import signal
import uuid
from pathlib import Path

import pytest
import yaml
from support.cli import run_proc
from support.streams import Gateways, assert_identical, caught_up, cli, cli_json, cli_proc, produce, wait_until

from streamrepl import local, local_tls
from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath

pytestmark = [
    pytest.mark.skipif(local_tls.tunnel_binary() is None, reason="stunnel is not installed (apt-get install stunnel4)"),
]

SECRET = "Pa55-not-for-logs"


@pytest.fixture(scope="module")
def ec():
    # Brokers of their own: with TLS in front (and always Tansu: noida-db advertises the port it binds).
    with EphemeralClusters(["tlssf", "tlsny"], broker="tansu", tls=True) as clusters:
        yield clusters


def props(ec, name: str) -> dict[str, str]:
    """The cluster's client settings as the registry gives them (TLS, with the CA `local up -tls` made)."""
    return yaml.safe_load(ec.registry_path.read_text())["clusters"][name]  # type: ignore[no-any-return]


def registry_with(ec, tmp_path: Path, **changes: str) -> Path:
    """A copy of the registry with `changes` to every cluster's properties."""
    doc = yaml.safe_load(ec.registry_path.read_text())
    for entry in doc["clusters"].values():
        entry.update(changes)
    path = tmp_path / f"registry-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)  # it may hold a secret
    return path


def assert_one_clean_line(run, *wanted: str) -> str:
    assert run.code != 0, run
    text = run.stderr + run.stdout
    assert SECRET not in text and "Traceback" not in text and "unexpected" not in text, text
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    for w in wanted:
        assert w in lines[0], lines[0]
    return lines[0]


def test_local_up_tls_writes_a_registry_with_tls_and_certificate_checks_on(ec):
    for name, broker in ec.brokers.items():
        p = props(ec, name)
        assert p["security.protocol"] == "SSL"
        assert Path(p["ssl.ca.location"]) == (ec.state_dir / "tls" / "ca.pem").resolve()
        # Nothing turns the checks off: librdkafka checks the chain and the name (127.0.0.1) by default.
        assert not {"enable.ssl.certificate.verification", "ssl.endpoint.identification.algorithm"} & set(p)
        assert p["bootstrap.servers"] == f"127.0.0.1:{broker.tls_port}" and broker.tls_port != broker.port
    rows = cli_json("local", "status", "-dir", str(ec.state_dir), registry=ec.registry_path)
    assert [(r["cluster"], r["running"], r["bootstrap"]) for r in rows] == [
        (n, True, b.bootstrap) for n, b in ec.brokers.items()
    ]


def test_local_up_tls_refuses_noida_and_a_cluster_running_without_tls(tmp_path):
    run = run_proc(["local", "up", "-dir", str(tmp_path / "n"), "-tls", "true", "-broker", "noida", "-clusters", "x"])
    assert_one_clean_line(run, "tansu")
    assert not (tmp_path / "n").exists()
    run = run_proc(
        ["local", "up", "-dir", str(tmp_path / "e"), "-tls", "true"], env={"STREAMREPL_LOCAL_BROKER": "noida"}
    )
    assert_one_clean_line(run, "tansu")
    assert not (tmp_path / "e").exists()
    with EphemeralClusters(["plain"], state_dir=tmp_path / "p", broker="tansu"):
        run = run_proc(["local", "up", "-dir", str(tmp_path / "p"), "-tls", "true", "-clusters", "plain"])
        assert_one_clean_line(run, "already runs without TLS", "local down")


def test_replication_over_tls_with_certificate_checks_on(ec, tmp_path):
    reg = ec.registry_path
    name = f"enc{uuid.uuid4().hex[:6]}"
    src, dst = f"/tlssf/{name}", f"/tlsny/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", "3", registry=reg)
    for t in ("clicks", "buys"):
        cli("stream", "topic", "create", "-path", src, "-topic", t, registry=reg)
    cli("stream", "create", "-path", dst, "-copymetafrom", src, registry=reg)
    cli("stream", "replica", "add", "-path", src, "-replica", dst, "-networkencryption", "true", registry=reg)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src, registry=reg)
    rows = cli_json("stream", "replica", "list", "-path", src, registry=reg)
    assert rows[0]["networkencryption"] is True
    s, d = StreamPath("tlssf", "/" + name), StreamPath("tlsny", "/" + name)
    produce(props(ec, "tlssf"), s, "clicks", 900, 3)
    with Gateways(reg, "tlsny", tmp_path) as gws:
        gws.start()
        produce(props(ec, "tlssf"), s, "buys", 60, 3, batch=False)
        wait_until(lambda: caught_up(reg, src), 120, "the replica to catch up over TLS")
    uuid_src = cli_json("stream", "info", "-path", src, registry=reg)[0]["uuid"]
    n = assert_identical(props(ec, "tlssf"), s, uuid_src, props(ec, "tlsny"), d, {"clicks": 3, "buys": 3})
    assert n == 960
    log = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "cannot be reached over TLS" not in log


def test_a_wrong_ca_is_one_clear_line_without_the_secret(ec, tmp_path):
    other = tmp_path / "other-ca"
    local_tls.make_ca(other)
    reg = registry_with(ec, tmp_path, **{"ssl.ca.location": str(other / "ca.pem"), "sasl.password": SECRET})
    run = run_proc(["stream", "create", "-path", "/tlssf/wrongca"], env={"STREAMREPL_CLUSTERS": str(reg)}, timeout=120)
    line = assert_one_clean_line(run, "tlssf", "cannot be reached over TLS", "certificate", "ssl.ca.location")
    assert "does not answer" not in line
    run = run_proc(["stream", "list", "-cluster", "tlsny", "-json"], env={"STREAMREPL_CLUSTERS": str(reg)}, timeout=120)
    assert run.code != 0 and SECRET not in run.stdout + run.stderr
    desc = json.loads(run.stdout)["errors"][0]["desc"]
    assert "cannot be reached over TLS" in desc and "unable to get local issuer certificate" in desc
    # The CA is checked, not only named: a registry without one (the system's CAs) is refused the same way.
    reg = registry_with(ec, tmp_path, **{"ssl.ca.location": "probe"})
    run = cli_proc("stream", "list", "-cluster", "tlssf", registry=reg, check=False)
    assert_one_clean_line(run, "cannot be reached over TLS", "certificate")


def test_an_expired_certificate_is_one_clear_line_and_local_up_makes_a_new_one(ec, tmp_path):
    now = datetime.datetime.now(datetime.UTC)
    tls_dir = ec.state_dir / "tls"
    local_tls.issue_server(tls_dir, now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
    assert sorted(local.reload_tls(ec.state_dir)) == sorted(ec.brokers)
    try:
        run = cli_proc("stream", "list", "-cluster", "tlsny", registry=ec.registry_path, check=False)
        assert_one_clean_line(run, "tlsny", "cannot be reached over TLS", "certificate has expired")
    finally:
        # `local up -tls` on the running clusters makes a new certificate and has the terminators read it.
        local.up(list(ec.brokers), ec.state_dir, tls=True)
    cli("stream", "list", "-cluster", "tlsny", registry=ec.registry_path)


def test_networkencryption_is_refused_for_a_plaintext_cluster(ec, clusters):
    reg = ec.registry_path
    name = f"mixed{uuid.uuid4().hex[:6]}"
    plain = yaml.safe_load(Path(clusters.registry_path).read_text())["clusters"]["newyork"]
    doc = yaml.safe_load(reg.read_text())
    doc["clusters"]["newyork"] = plain
    mixed = Path(str(reg) + f".{name}.yaml")
    mixed.write_text(yaml.safe_dump(doc))
    mixed.chmod(0o600)
    try:
        cli("stream", "create", "-path", f"/tlssf/{name}", registry=mixed)
        run = cli(
            "stream",
            "replica",
            "autosetup",
            "-path",
            f"/tlssf/{name}",
            "-replica",
            f"/newyork/{name}",
            "-networkencryption",
            "true",
            registry=mixed,
            check=False,
        )
        assert_one_clean_line(run, "-networkencryption true", "newyork", "security.protocol")
        # Nothing half-made: the replica stream was not created.
        run = cli("stream", "info", "-path", f"/newyork/{name}", registry=mixed, check=False)
        assert run.code != 0
    finally:
        mixed.unlink()


def test_a_tls_terminator_that_died_is_started_again_by_local_up(ec):
    name = "tlsny"
    os.kill(ec.brokers[name].tunnel_pid, signal.SIGKILL)
    wait_until(
        lambda: not {r["cluster"]: r["running"] for r in local.status(ec.state_dir)}[name], 10, "the cluster shown down"
    )
    again = {b.cluster: b for b in local.up(list(ec.brokers), ec.state_dir, tls=True)}
    assert again[name].bootstrap == ec.brokers[name].bootstrap and again[name].pid == ec.brokers[name].pid
    assert again[name].tunnel_pid != ec.brokers[name].tunnel_pid
    assert all(r["running"] for r in local.status(ec.state_dir))
    ec.brokers.update(again)
    wait_until(
        lambda: cli("stream", "list", "-cluster", name, registry=ec.registry_path, check=False).code == 0, 30, "TLS"
    )
