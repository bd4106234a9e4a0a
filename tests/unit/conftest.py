"""Unit tests: no broker (fakes stand in for the Kafka clients, a registry is a file). A test here that asks for a
broker fixture is refused at collection: it belongs in tests/e2e."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import BROKER_FIXTURES
from support.folders import in_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        wanted = BROKER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if wanted and in_folder(item, here):
            raise pytest.UsageError(
                f"{item.nodeid} asks for a broker ({', '.join(sorted(wanted))}): end-to-end tests go in tests/e2e"
            )
