"""An empty answer still prints its header (and `-json` an empty `data`), as maprcli does: scripts read columns by
name, and a missing header looked like a failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import run_cli

from streamrepl.local import EphemeralClusters


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # A cluster of its own: it must hold no stream and run no gateway.
    with EphemeralClusters(["empty"]) as ec:
        yield ec


@pytest.mark.parametrize(
    ("args", "first_column"),
    [(["stream", "list"], "path"), (["cluster", "gateway", "list"], "cluster")],
)
def test_an_empty_list_prints_its_header(ec: EphemeralClusters, args: list[str], first_column: str) -> None:
    env = {"STREAMREPL_CLUSTERS": str(ec.registry_path)}
    run = run_cli(*args, env=env)
    assert run.code == 0, run
    assert run.stdout.splitlines()[0].split("\t")[0] == first_column, run
    assert run_cli(*args, "-json", env=env).json()["data"] == []


def test_a_stream_without_topics_lists_the_header(ec: EphemeralClusters) -> None:
    env = {"STREAMREPL_CLUSTERS": str(ec.registry_path)}
    assert run_cli("stream", "create", "-path", "/empty/notopics", env=env).code == 0
    run = run_cli("stream", "topic", "list", "-path", "/empty/notopics", env=env)
    assert run.code == 0 and run.stdout.splitlines()[0].split("\t")[0] == "topic", run
