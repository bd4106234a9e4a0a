"""The cluster registry through the CLI: lookup order, secrets masked in `cluster list` and in errors, the warning when others can read a registry holding secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

from streamrepl import registry
from streamrepl.local import EphemeralClusters

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
def secret_registry(clusters: EphemeralClusters, tmp_path: Path) -> Path:
    """A registry for the live sanfrancisco broker that also holds secrets (ignored on PLAINTEXT)."""
    return write(
        tmp_path / "secret.yaml",
        {
            "sanfrancisco": {
                "bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap,
                "sasl.username": "operator",
                "sasl.password": SECRET,
                "ssl.key.password": SECRET + "2",
            }
        },
    )


@pytest.mark.parametrize("fmt", [[], ["-json"], ["-noheader"]])
def test_cluster_list_masks_secrets(secret_registry: Path, fmt: list[str]) -> None:
    r = run_cli("cluster", "list", "-clusters", secret_registry, *fmt)
    assert r.code == 0, r
    assert SECRET not in r.stdout + r.stderr
    assert registry.MASK in r.stdout
    assert "sasl.username=operator" in r.stdout
    if fmt == ["-json"]:
        [row] = json.loads(r.stdout)["data"]
        assert row["cluster"] == "sanfrancisco" and row["answers"] is True and row["default"] is True
        assert "sasl.password=" + registry.MASK in row["properties"]


def test_errors_never_show_secrets(secret_registry: Path) -> None:
    for args in (
        ["stream", "info", "-path", "/sanfrancisco/nope"],
        ["stream", "create", "-path", "/sanfrancisco/x", "-ttl", "-1"],
        ["stream", "info", "-path", f"/sanfrancisco/{SECRET}"],
    ):
        r = run_cli(*args, "-clusters", secret_registry)
        assert r.code != 0
        assert SECRET not in r.stdout + r.stderr.replace(f"/sanfrancisco/{SECRET}", "")


# -- -clusters option and $STREAMREPL_CLUSTERS through the CLI -----------------------------------
def test_cli_lookup_order(clusters: EphemeralClusters, tmp_path: Path) -> None:
    bs = clusters.brokers["sanfrancisco"].bootstrap
    env_reg = write(tmp_path / "env.yaml", {"fromenv": {"bootstrap.servers": bs}})
    root_reg = write(tmp_path / "root.yaml", {"fromroot": {"bootstrap.servers": bs}})
    verb_reg = write(tmp_path / "verb.yaml", {"fromverb": {"bootstrap.servers": bs}})

    def names(*args: object) -> list[str]:
        r = run_cli(*args, env={registry.ENV_VAR: str(env_reg)})
        assert r.code == 0, r
        return [row["cluster"] for row in json.loads(r.stdout)["data"]]

    assert names("cluster", "list", "-json") == ["fromenv"]
    assert names("-clusters", root_reg, "cluster", "list", "-json") == ["fromroot"]
    assert names("--clusters", root_reg, "cluster", "list", "-json") == ["fromroot"]
    assert names("cluster", "list", "-json", "-clusters", verb_reg) == ["fromverb"]
    # The option nearer the verb wins.
    assert names("-clusters", root_reg, "cluster", "list", "-json", "-clusters", verb_reg) == ["fromverb"]


# -- a registry others can read -------------------------------------------------------------------
WARNING = "others can read it"


@pytest.mark.parametrize(
    "mode, secret, warned",
    [
        (0o644, True, True),  # world-readable
        (0o640, True, True),  # group-readable
        (0o604, True, True),
        (0o600, True, False),
        (0o400, True, False),
        (0o644, False, False),  # nothing secret in it: nothing to warn about
    ],
)
def test_warning_when_others_can_read_secrets(
    clusters: EphemeralClusters, tmp_path: Path, mode: int, secret: bool, warned: bool
) -> None:
    props: dict[str, object] = {"bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap}
    if secret:
        props["sasl.password"] = SECRET
    p = write(tmp_path / "r.yaml", {"sanfrancisco": props}, mode=mode)
    r = run_cli("-clusters", p, "cluster", "list", "-json")
    assert r.code == 0, r
    assert (WARNING in r.stderr) == warned, r.stderr
    assert SECRET not in r.stderr + r.stdout
    if warned:
        [line] = r.stderr.splitlines()
        assert line.startswith("warning: ") and f"chmod 600 {p}" in line
        json.loads(r.stdout)  # stdout stays machine-readable
