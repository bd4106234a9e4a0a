"""Shared fixtures: one pair of embedded brokers per test session, and an in-process CLI runner.

Starting brokers costs about a second, so every end-to-end test shares the `clusters` fixture
(sanfrancisco and newyork) and keeps out of the others' way by using stream paths of its own
(`unique_path`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest
from clitools import Run, run_cli, unique_path

from streamrepl.local import EphemeralClusters

CLUSTERS = ["sanfrancisco", "newyork"]


@pytest.fixture(scope="session")
def clusters() -> Iterator[EphemeralClusters]:
    """Two embedded brokers for the whole session; $STREAMREPL_CLUSTERS names their registry."""
    with EphemeralClusters(CLUSTERS) as ec, pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMREPL_CLUSTERS", str(ec.registry_path))
        mp.delenv("STREAMREPL_IDENTITY", raising=False)
        yield ec
        # A Tansu broker waits for its connected clients before it stops: let go of any left.
        gc.collect()


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
