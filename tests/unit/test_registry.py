"""The cluster registry: where it is found, how it is parsed, and that its secrets stay secret."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from streamrepl import registry
from streamrepl.errors import RegistryError

SECRET = "s3cr3t-Planted-pw"


def write(path: Path, clusters: dict[str, dict[str, object]], default: str | None = None, mode: int = 0o600) -> Path:
    doc: dict[str, object] = {"clusters": clusters}
    if default:
        doc["default"] = default
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(mode)
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The three places the registry is looked for, moved into tmp_path; none exists yet."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(registry.ENV_VAR, raising=False)
    system = tmp_path / "etc" / "streamrepl" / "clusters.yaml"
    monkeypatch.setattr(registry, "SYSTEM_PATH", system)
    return {
        "env": tmp_path / "env" / "clusters.yaml",
        "user": home / ".config" / "streamrepl" / "clusters.yaml",
        "system": system,
        "explicit": tmp_path / "explicit.yaml",
    }


# -- lookup order -----------------------------------------------------------------------------
def test_lookup_order(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, path in places.items():
        write(path, {name: {"bootstrap.servers": "127.0.0.1:1"}})

    assert set(registry.load().clusters) == {"user"}  # no env var: the user's file first
    monkeypatch.setenv(registry.ENV_VAR, str(places["env"]))
    assert set(registry.load().clusters) == {"env"}
    assert set(registry.load(str(places["explicit"])).clusters) == {"explicit"}
    monkeypatch.delenv(registry.ENV_VAR)
    places["user"].unlink()
    assert set(registry.load().clusters) == {"system"}
    places["system"].unlink()
    with pytest.raises(RegistryError, match="no cluster registry found"):
        registry.load()


def test_env_var_naming_a_missing_file_does_not_fall_through(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(places["user"], {"user": {"bootstrap.servers": "127.0.0.1:1"}})
    monkeypatch.setenv(registry.ENV_VAR, str(places["env"]))
    with pytest.raises(RegistryError, match=str(places["env"])):
        registry.load()


def test_explicit_path_expands_home(places: dict[str, Path]) -> None:
    write(places["user"], {"user": {"bootstrap.servers": "127.0.0.1:1"}})
    assert set(registry.load("~/.config/streamrepl/clusters.yaml").clusters) == {"user"}


def test_default_cluster(tmp_path: Path) -> None:
    p = write(tmp_path / "r.yaml", {"a": {"bootstrap.servers": "x:1"}, "b": {"bootstrap.servers": "y:1"}})
    assert registry.load(str(p)).default == "a"  # the first one when none is named
    p = write(tmp_path / "r.yaml", {"a": {"bootstrap.servers": "x:1"}, "b": {"bootstrap.servers": "y:1"}}, "b")
    assert registry.load(str(p)).default == "b"


def test_property_values_are_strings(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        "clusters:\n  a:\n    bootstrap.servers: h:1\n    enable.ssl.certificate.verification: false\n    socket.timeout.ms: 5000\n"
    )
    p.chmod(0o600)
    props = registry.load(str(p)).get("a").properties
    assert props == {
        "bootstrap.servers": "h:1",
        "enable.ssl.certificate.verification": "false",
        "socket.timeout.ms": "5000",
    }


def test_names_are_read_as_written(tmp_path: Path) -> None:
    """YAML 1.1 read the cluster names yes, on and 0123 as True, True and 83 (octal), and `default: 0123` as 83;
    names are text, as YAML 1.2 reads them."""
    text = (
        "default: 0123\nclusters:\n  yes:\n    bootstrap.servers: h:1\n  on:\n    bootstrap.servers: h:2\n"
        "  0123:\n    bootstrap.servers: h:3\n  1e3:\n    bootstrap.servers: h:4\n"
    )
    reg = registry.parse(text, tmp_path / "r.yaml")
    assert list(reg.clusters) == ["yes", "on", "0123", "1e3"]
    assert reg.default == "0123" and reg.get("0123").bootstrap == "h:3"
    assert registry.parse(text.replace("default: 0123", "default: on"), tmp_path / "r.yaml").default == "on"


@pytest.mark.parametrize("name", ["~", "null", "''"])
def test_a_cluster_named_null_is_refused_by_its_name(tmp_path: Path, name: str) -> None:
    """`~:` was read as the name None; `null` is a name like any other."""
    text = f"clusters:\n  {name}:\n    bootstrap.servers: h:1\n"
    if name == "null":
        assert list(registry.parse(text, tmp_path / "r.yaml").clusters) == ["null"]
        return
    with pytest.raises(RegistryError, match=r"cluster name '[~]?' .* is not valid"):
        registry.parse(text, tmp_path / "r.yaml")


def test_yaml_merge_keys_are_accepted(tmp_path: Path) -> None:
    """`<<: *base` was refused as 'not valid YAML'."""
    text = (
        "clusters:\n"
        "  a: &base\n    bootstrap.servers: h:1\n    security.protocol: SASL_SSL\n    sasl.mechanism: PLAIN\n"
        "  b:\n    <<: *base\n    bootstrap.servers: h:2\n"
        "  c:\n    <<: [*base, {socket.timeout.ms: 7000}]\n    sasl.mechanism: SCRAM-SHA-512\n"
    )
    reg = registry.parse(text, tmp_path / "r.yaml")
    assert reg.get("b").properties == {
        "bootstrap.servers": "h:2",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    assert reg.get("c").properties == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "socket.timeout.ms": "7000",
    }


def test_a_key_given_twice_beside_a_merge_is_still_an_error(tmp_path: Path) -> None:
    text = "clusters:\n  a: &base\n    bootstrap.servers: h:1\n  b:\n    <<: *base\n    acks: 1\n    acks: all\n"
    with pytest.raises(RegistryError, match="'acks' is given more than once"):
        registry.parse(text, tmp_path / "r.yaml")


def test_unknown_cluster_names_the_known_ones(tmp_path: Path) -> None:
    p = write(tmp_path / "r.yaml", {"a": {"bootstrap.servers": "x:1"}})
    with pytest.raises(Exception, match="unknown cluster 'zz' .*known: a"):
        registry.load(str(p)).get("zz")


# -- secrets ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "prop",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.key.pem",
        "SASL.PASSWORD",
    ],
)
def test_secret_properties_are_masked(prop: str) -> None:
    c = registry.Cluster("a", {"bootstrap.servers": "h:1", prop: SECRET, "sasl.username": "op"})
    assert registry.is_secret(prop)
    assert c.masked()[prop] == registry.MASK
    assert c.masked()["sasl.username"] == "op"
    assert c.secrets() == [SECRET]


def test_a_cluster_shows_masked_in_its_repr() -> None:
    """What a log line, an assertion or a traceback prints of a cluster holds no secret."""
    c = registry.Cluster("a", {"bootstrap.servers": f"op:{SECRET}-ui@h:1", "sasl.password": SECRET})
    assert SECRET not in repr(c) and SECRET not in str(c)
    assert "op:********@h:1" in repr(c)


@pytest.mark.parametrize("prop", ["bootstrap.servers", "sasl.username", "security.protocol", "ssl.ca.location"])
def test_ordinary_properties_are_shown(prop: str) -> None:
    assert not registry.is_secret(prop)


# -- a registry others can read -------------------------------------------------------------------
WARNING = "others can read it"


def test_no_warning_for_a_comment_that_mentions_a_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.yaml"
    p.write_text("# the password is kept elsewhere\nclusters:\n  a:\n    bootstrap.servers: h:1\n")
    p.chmod(0o644)
    registry.load(str(p))
    assert WARNING not in capsys.readouterr().err


def test_warning_for_a_secret_in_any_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        "clusters:\n  a:\n    bootstrap.servers: h:1\n  b:\n    bootstrap.servers: h:2\n"
        f"    sasl.oauthbearer.client.secret: {SECRET}\n"
    )
    p.chmod(0o644)
    registry.load(str(p))
    err = capsys.readouterr().err
    assert WARNING in err and SECRET not in err


@pytest.mark.parametrize(
    "line",
    [
        "sasl.password: 012345",  # octal to YAML: read back as 5349
        "sasl.password: Yes",  # a boolean to YAML
        "ssl.key.password: 2026-01-01",  # a date to YAML
        "sasl.password: 1.5e+3",  # a float to YAML
    ],
)
def test_a_secret_yaml_would_change_must_be_quoted(tmp_path: Path, line: str) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text(f"clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:9092\n    {line}\n")
    with pytest.raises(RegistryError) as e:
        registry.load(str(path))
    key, value = line.split(": ")
    assert f"property '{key}' of cluster 'a'" in e.value.message and "quote" in e.value.message
    assert value not in e.value.message
    path.write_text(f"clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:9092\n    {key}: '{value}'\n")
    assert registry.load(str(path)).get("a").properties[key] == value


def test_an_unknown_top_level_entry_is_an_error(tmp_path: Path) -> None:
    """A property indented wrongly lands at the top level, where it would be ignored without a word."""
    path = tmp_path / "clusters.yaml"
    path.write_text("clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:9092\nsasl.password: hunter2-planted\n")
    with pytest.raises(RegistryError) as e:
        registry.load(str(path))
    assert "unknown top-level entry 'sasl.password'" in e.value.message and "indent" in e.value.message
    assert "hunter2-planted" not in e.value.message


def test_x_prefixed_top_level_entries_are_templates_and_ignored(tmp_path: Path) -> None:
    """docker-compose's convention: `x-` keys hold YAML anchors for merge keys (`<<: *base`) and are not read."""
    path = tmp_path / "clusters.yaml"
    path.write_text(
        "x-base: &base\n  security.protocol: SASL_SSL\n  sasl.mechanism: SCRAM-SHA-512\n"
        "x-notes: anything at all, [even, a, list]\n"
        "clusters:\n  a:\n    <<: *base\n    bootstrap.servers: h:1\n"
        "  b:\n    <<: *base\n    bootstrap.servers: h:2\n    sasl.mechanism: PLAIN\n"
    )
    reg = registry.load(str(path))
    assert sorted(reg.clusters) == ["a", "b"]
    assert reg.get("a").properties == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "bootstrap.servers": "h:1",
    }
    assert reg.get("b").properties["sasl.mechanism"] == "PLAIN"


def test_a_top_level_template_without_the_x_prefix_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text("base: &base\n  acks: all\nclusters:\n  a:\n    <<: *base\n    bootstrap.servers: h:1\n")
    with pytest.raises(RegistryError) as e:
        registry.load(str(path))
    assert "unknown top-level entry 'base'" in e.value.message and "x-" in e.value.message


def test_an_error_quoting_a_registry_secret_shows_it_masked(tmp_path: Path) -> None:
    """A broker's own error text quoted in a command's error may carry the address as written, password and
    all (librdkafka names a broker `[user:password@host:1]:9092/bootstrap`): masked on the way out."""
    import click
    from click.testing import CliRunner

    from streamrepl.commands.common import app, handles_errors
    from streamrepl.errors import Unreachable

    reg = write(tmp_path / "clusters.yaml", {"a": {"bootstrap.servers": f"op:{SECRET}@127.0.0.1:1"}})

    @click.command()
    @handles_errors
    def quoting() -> None:
        raise Unreachable(f"[{app().registry.get('a').bootstrap}]:9092/bootstrap: Failed to resolve")

    for fmt in ([], ["-json"]):
        r = CliRunner().invoke(quoting, ["-clusters", str(reg), *fmt])
        assert r.exit_code == 1, r.output
        assert SECRET not in r.output + r.stderr and "[op:********@127.0.0.1:1]:9092" in r.output + r.stderr
