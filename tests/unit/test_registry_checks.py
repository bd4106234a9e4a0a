"""The registry's own checks, each a test before its fix: a cluster or a property given twice, passwords inside
bootstrap.servers and OAUTHBEARER extensions never shown, streamrepl's own properties (`streamrepl.*`) checked and
never passed to a Kafka client."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli

from streamrepl import registry
from streamrepl.errors import RegistryError

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


@pytest.mark.parametrize(
    ("prop", "message"),
    [
        ("streamrepl.brokr: tansu", "unknown property 'streamrepl.brokr'"),
        ("streamrepl.broker: kafkaa", "use one of"),
        ("streamrepl.source.consumers: 0", "'0'; use a whole number from 1 to 16"),
        ("streamrepl.source.consumers: 17", "'17'; use a whole number from 1 to 16"),
        ("streamrepl.source.consumers: four", "'four'; use a whole number from 1 to 16"),
        ("streamrepl.source.consumers: 2.5", "'2.5'; use a whole number from 1 to 16"),
        ("streamrepl.source.consumers: true", "use a whole number from 1 to 16"),
    ],
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


def test_the_number_of_source_consumers_is_read_from_the_registry(tmp_path: Path) -> None:
    """`streamrepl.source.consumers`: how many consumers a gateway reads a lane of this source with (lanes.py)."""
    from streamrepl.kafka import client_config

    reg = registry.parse(
        "clusters:\n  a:\n    bootstrap.servers: h:1\n    streamrepl.source.consumers: 2\n"
        "  b:\n    bootstrap.servers: h:1\n",
        tmp_path / "c",
    )
    assert reg.get("a").source_consumers == 2 and reg.get("b").source_consumers is None
    assert "streamrepl.source.consumers" not in client_config(reg.get("a"))
