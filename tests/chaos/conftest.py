"""The chaos suite's shared set-up: one pair of embedded brokers and three newyork gateways for all
scenarios, and the table of results (scenario, records, faults, lost, doubled, misplaced) printed at
the end of the run and written to $STREAMREPL_CHAOS_REPORT when set (RELIABILITY.md holds one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaostools import ROWS, THROTTLE_RATE, Chaos, table
from support.folders import mark_folder
from support.streams import Gateways

from streamrepl.local import EphemeralClusters


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "chaos", "e2e")


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    logdir = tmp_path_factory.mktemp("chaos-gateways")
    # Brokers of its own, not the session's shared ones: the scenarios freeze them.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as ec:
        env = {"STREAMREPL_THROTTLE_RATE": str(THROTTLE_RATE)}
        with Gateways(ec.registry_path, "newyork", logdir, env=env) as gws:
            c = Chaos(ec, ec.registry_path, logdir, gws)
            c.ensure_gateways()
            yield c


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    text = table(ROWS)
    terminalreporter.write_sep("=", "chaos: records compared one by one")
    terminalreporter.write_line(text)
    dest = os.environ.get("STREAMREPL_CHAOS_REPORT")
    if dest:
        Path(dest).write_text(text + "\n")
