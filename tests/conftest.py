"""Shared fixtures: one pair of embedded brokers per test session, and an in-process CLI runner.

Starting brokers costs about a second, so every end-to-end test shares the `clusters` fixture
(sanfrancisco and newyork) and keeps out of the others' way by using stream paths of its own
(`new_path`). What the fixtures are made of lives in tests/support/.

Tests are in folders by kind, and each folder's conftest.py marks its tests: tests/e2e `e2e`,
tests/chaos `chaos` and `e2e`; tests/unit refuses a test that asks for a broker. So
`scripts/test -m 'not e2e'` runs the unit tests alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from support import Run, run_cli, shared_clusters, unique_path

from streamrepl.local import EphemeralClusters


def pytest_configure(config: pytest.Config) -> None:
    # No process outlives the run (support/runguard.py), and a line per test file says where the run is and how long
    # it should take (support/progress.py); each once, also when `-p support.<name>` loaded it already.
    for plugin in ("support.runguard", "support.progress"):
        if not config.pluginmanager.has_plugin(plugin):
            config.pluginmanager.import_plugin(plugin)


@pytest.fixture(scope="session")
def clusters() -> Iterator[EphemeralClusters]:
    """Two embedded brokers for the whole session; $STREAMREPL_CLUSTERS names their registry."""
    with shared_clusters() as ec:
        yield ec


@pytest.fixture
def cli(clusters: EphemeralClusters) -> Callable[..., Run]:
    """`cli("stream", "info", "-path", p, env={...})` -> Run(code, stdout, stderr), against `clusters`."""
    return run_cli


@pytest.fixture
def cli_offline() -> Callable[..., Run]:
    """The same runner for tests that need no broker."""
    return run_cli


@pytest.fixture
def new_path() -> Callable[..., str]:
    return unique_path
