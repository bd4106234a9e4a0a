"""End-to-end tests: against real embedded brokers (the session's shared `clusters`, or a module's own), each marked
`e2e` here; the modules that need more (Spark, the lifecycle matrix, the noida-db subsets) add their markers."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.folders import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "e2e")
