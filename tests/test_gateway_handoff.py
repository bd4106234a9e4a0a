"""A planned stop hands a gateway's partitions over in seconds where the broker handles LeaveGroup (noida-db,
Apache Kafka), instead of waiting for the session to expire — which on noida-db never happens: its group coordinator
keeps a member that stopped heartbeating, so a gateway stopped with SIGTERM held its slots for good."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Run, run_cli
from support.streams import Gateways, wait_until

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own, noida-db: the test counts the slots of two gateways and stops one.
    with EphemeralClusters(["newyork"], broker="noida") as ec:
        yield ec


def slots(ec: EphemeralClusters) -> dict[str, int]:
    run: Run = run_cli("cluster", "gateway", "list", "-json", env={"STREAMREPL_CLUSTERS": str(ec.registry_path)})
    return {r["gateway"]: r["slots"] for r in run.data()}


def test_a_sigtermed_gateway_hands_its_slots_to_the_other_on_noida(ec: EphemeralClusters, tmp_path: Path) -> None:
    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        a, b = gws.start("hand-a"), gws.start("hand-b")
        wait_until(lambda: sorted(slots(ec).values()) == [32, 32], 120, "the two gateways to share the slots")
        gws.kill(a, signal.SIGTERM)
        # A hang guard, not a speed check (bench/run.py measures the handoff): without LeaveGroup it never happens.
        wait_until(lambda: slots(ec).get(b) == 64, 60, f"{b} to take over the slots of the stopped {a}")
