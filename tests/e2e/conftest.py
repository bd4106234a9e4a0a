"""End-to-end tests: against real embedded brokers (the session's shared `clusters`, or a module's own), each marked
`e2e` here; the modules that need more (Spark, the lifecycle matrix, the noida-db subsets) add their markers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.env import Env, own_env
from support.folders import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "e2e")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """Brokers of the module's own, sanfrancisco and newyork, named by $STREAMREPL_CLUSTERS while the module runs; a
    module that needs other clusters or a given broker overrides this fixture with `own_env(...)`."""
    with own_env(tmp_path_factory, register=True) as e:
        yield e
