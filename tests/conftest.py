"""Shared fixtures: one pair of embedded brokers per test session, and an in-process CLI runner.

Starting brokers costs about a second, so every end-to-end test shares the `clusters` fixture
(sanfrancisco and newyork) and keeps out of the others' way by using stream paths of its own
(`new_path`). What the fixtures are made of lives in tests/support/.

Every test that needs a broker through these fixtures is marked `e2e` here, so that
`scripts/test -m 'not e2e'` runs the unit tests alone; modules that start brokers of their own
carry the marker themselves (`pytestmark`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from support import BROKER_FIXTURES, Run, run_cli, shared_clusters, unique_path

from streamrepl.local import EphemeralClusters


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


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
