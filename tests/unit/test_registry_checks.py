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


# -- a property the Kafka client refuses: the one at fault named, with what it takes ------------------------------
@pytest.mark.parametrize(
    ("props", "culprit", "allowed"),
    [
        # librdkafka checks the mechanism only once SASL is on: the protocol is not what is wrong.
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "ROT13"},
            "sasl.mechanism",
            "GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        ),
        (
            {"sasl.mechanism": "ROT13", "security.protocol": "SASL_SSL"},
            "sasl.mechanism",
            "GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        ),
        ({"security.protocol": "SASL_PLAIN"}, "security.protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"compression.type": "lzf"}, "compression.type", "none, gzip, snappy, lz4, zstd"),
    ],
)
def test_a_refused_property_is_named_with_the_values_it_takes(
    tmp_path: Path, props: dict[str, str], culprit: str, allowed: str
) -> None:
    from streamrepl import kafka

    cluster = registry.Cluster("a", {"bootstrap.servers": "127.0.0.1:1", "sasl.username": "u", **props})
    with pytest.raises(RegistryError) as e:
        kafka.admin_client(cluster)
    assert e.value.message.startswith(f"property '{culprit}' of cluster 'a' in the cluster registry is refused")
    assert e.value.message.endswith(f"; use one of {allowed}")
    assert "\n" not in e.value.message


def test_a_refused_mechanism_is_named_by_a_command(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text(
        "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n    security.protocol: SASL_PLAINTEXT\n"
        f"    sasl.mechanism: ROT13\n    sasl.password: {PASSWORD}\n"
    )
    path.chmod(0o600)
    for fmt in ([], ["-json"]):
        run = run_cli("stream", "list", "-cluster", "a", "-clusters", str(path), *fmt)
        assert run.code != 0, run
        assert "property 'sasl.mechanism' of cluster 'a'" in run.stdout + run.stderr, run
        assert "security.protocol'" not in run.stdout + run.stderr and PASSWORD not in run.stdout + run.stderr


# -- values YAML would turn into something else than text -------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("bootstrap.servers: !!binary aGVsbG8=", "binary"),
        ("client.id: !!binary aGVsbG8=", "binary"),
        ("client.id: 2026-01-01", "date"),
        ("client.id: 2026-01-01T10:00:00Z", "date"),
        ("client.id: !!set {a, b}", "single value"),
        ("client.id: !!omap [a: 1]", "single value"),
    ],
)
def test_a_value_that_is_not_text_to_yaml_is_refused_naming_cluster_and_property(
    tmp_path: Path, line: str, kind: str
) -> None:
    key = line.split(":")[0]
    text = (
        "clusters:\n  a:\n    " + ("" if key == "bootstrap.servers" else "bootstrap.servers: h:1\n    ") + line + "\n"
    )
    with pytest.raises(RegistryError) as e:
        registry.parse(text, tmp_path / "clusters.yaml")
    assert f"property '{key}' of cluster 'a'" in e.value.message and kind in e.value.message
    assert "\n" not in e.value.message


def test_a_binary_bootstrap_is_refused_by_a_command(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text("clusters:\n  a:\n    bootstrap.servers: !!binary aGVsbG8=\n")
    run = run_cli("cluster", "list", "-clusters", str(path), "-timeout", "0.2")
    assert run.code != 0 and "property 'bootstrap.servers' of cluster 'a'" in run.stderr, run
    assert "b'hello'" not in run.stdout + run.stderr
