"""Misuse found by the second hardening round (issue 16's smaller items), each a test before its fix: the registry,
names and paths, and what an empty or oversized answer looks like. No broker is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_cli

from streamrepl import registry
from streamrepl.errors import InvalidArgument, RegistryError
from streamrepl.paths import parse_stream, validate_topic

PASSWORD = "pw-Planted-1234"


def test_a_cluster_named_twice_in_the_registry_is_an_error(tmp_path: Path) -> None:
    text = "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n  a:\n    bootstrap.servers: 127.0.0.1:2\n"
    with pytest.raises(RegistryError, match=r"'a'.*(twice|more than once)"):
        registry.parse(text, tmp_path / "clusters.yaml")


def test_a_property_given_twice_in_the_registry_is_an_error(tmp_path: Path) -> None:
    text = "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n    bootstrap.servers: 127.0.0.1:2\n"
    with pytest.raises(RegistryError, match=r"bootstrap.servers.*(twice|more than once)"):
        registry.parse(text, tmp_path / "clusters.yaml")


def test_a_password_inside_bootstrap_servers_is_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text(f"clusters:\n  a:\n    bootstrap.servers: 'user:{PASSWORD}@127.0.0.1:1'\n")
    path.chmod(0o600)
    reg = registry.parse(path.read_text(), path)
    assert PASSWORD in reg.secrets()
    run = run_cli("cluster", "list", "-clusters", str(path), "-timeout", "0.2", "-json")
    assert run.code == 0, run
    assert PASSWORD not in run.stdout + run.stderr
    assert "user:" in run.stdout  # the rest of the address is still shown


def test_oauthbearer_extensions_are_masked(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text(
        "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n"
        f"    sasl.oauthbearer.extensions: 'logicalCluster=lkc-1,secret={PASSWORD}'\n"
    )
    path.chmod(0o600)
    run = run_cli("cluster", "list", "-clusters", str(path), "-timeout", "0.2", "-json")
    assert run.code == 0, run
    assert PASSWORD not in run.stdout + run.stderr


@pytest.mark.parametrize("topic", [".", ".."])
def test_topics_named_dot_or_dot_dot_are_refused(topic: str) -> None:
    with pytest.raises(InvalidArgument, match="'.'"):
        validate_topic(topic)


def test_a_very_long_path_gives_a_short_error_line() -> None:
    raw = "/" + "x" * 10_000
    with pytest.raises(InvalidArgument) as e:
        parse_stream(raw, {"a"}, "a")
    assert len(str(e.value)) < 500
    assert "characters)" in str(e.value)


def test_local_status_with_nothing_running_prints_the_header(tmp_path: Path) -> None:
    run = run_cli("local", "status", "-dir", str(tmp_path))
    assert run.code == 0, run
    assert run.stdout.splitlines()[0].split("\t")[0] == "cluster", run
    run = run_cli("local", "status", "-dir", str(tmp_path), "-json")
    assert json.loads(run.stdout)["data"] == []


def test_every_man_page_header_fits_80_columns() -> None:
    """man prints the title(section) on both sides of the header line and the manual's name between them; when the
    three do not fit in 80 columns they overlap (`STREAMREPL-STREAM-REPLICA-AUTOSstreamrep...`)."""
    import shlex

    for page in sorted(Path(__file__).parent.parent.joinpath("man").glob("*.1")):
        th = next(line for line in page.read_text().splitlines() if line.startswith(".TH"))
        _, title, section, _, _, center = shlex.split(th.replace("\\-", "-"))
        side = len(f"{title}({section})")
        assert 2 * side + len(center) + 4 <= 80, f"{page.name}: {th}"


@pytest.mark.parametrize("perm", ['""', ""])
def test_an_empty_adminperm_is_refused(cli, new_path, perm: str) -> None:  # type: ignore[no-untyped-def]
    """`stream edit -adminperm '""'` was accepted, and after it nobody, root included, could edit the stream again."""
    alice = {"STREAMREPL_IDENTITY": "user=alice"}
    path = new_path()
    assert cli("stream", "create", "-path", path, env=alice).code == 0
    run = cli("stream", "edit", "-path", path, "-adminperm", perm, env=alice)
    assert run.code != 0 and "adminperm" in run.stderr and "\n" not in run.stderr.strip(), run
    assert cli("stream", "edit", "-path", path, "-ttl", "60", env=alice).code == 0  # still hers to edit
    run = cli("stream", "create", "-path", new_path(), "-adminperm", perm, env=alice)
    assert run.code != 0 and "adminperm" in run.stderr, run


def test_replica_list_has_the_same_columns_with_and_without_errors(cli, new_path) -> None:  # type: ignore[no-untyped-def]
    """`errorPartitions` appeared only when a partition was in error, so `cut -f` positions shifted."""
    src, dst = new_path(), new_path("newyork")
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    rows = cli("stream", "replica", "list", "-path", src, "-json").data()
    assert rows[0]["errorPartitions"] == 0, rows
    header = cli("stream", "replica", "list", "-path", src).stdout.splitlines()[0].split("\t")
    assert "errorPartitions" in header


def test_a_replica_deleted_and_created_again_is_an_error_in_replica_list(cli, new_path) -> None:  # type: ignore[no-untyped-def]
    """The re-created stream is another stream (new uuid, none of the replicated records); replica list kept showing
    the old uuid as if nothing had happened."""
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    assert cli("stream", "delete", "-path", dst).code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    row = cli("stream", "replica", "list", "-path", src, "-json").data()[0]
    assert row["replicaState"] == "REPLICA_STATE_ERROR", row
    assert "created again" in row["lasterror"] and "replica remove" in row["lasterror"], row
    assert row["isUptodate"] is False


@pytest.mark.parametrize(
    ("prop", "message"),
    [("streamrepl.brokr: tansu", "unknown property 'streamrepl.brokr'"), ("streamrepl.broker: kafkaa", "use one of")],
)
def test_streamrepls_own_registry_properties_are_checked(tmp_path: Path, prop: str, message: str) -> None:
    text = f"clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n    {prop}\n"
    with pytest.raises(RegistryError, match=message):
        registry.parse(text, tmp_path / "clusters.yaml")


def test_streamrepls_own_registry_properties_never_reach_a_kafka_client(tmp_path: Path) -> None:
    from streamrepl.kafka import client_config

    reg = registry.parse("clusters:\n  a:\n    bootstrap.servers: h:1\n    streamrepl.broker: noida\n", tmp_path / "c")
    assert reg.get("a").broker == "noida"
    assert "streamrepl.broker" not in client_config(reg.get("a"))
