"""A planned stop hands a gateway's partitions over in seconds where the broker handles LeaveGroup (noida-db,
Apache Kafka), instead of waiting for the session to expire — which on noida-db never happens: its group coordinator
keeps a member that stopped heartbeating, so a gateway stopped with SIGTERM held its slots for good."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Run, run_cli
from support.streams import Gateways, produce, same_ends, sp, tally, uuid_of, wait_until

from streamrepl.local import EphemeralClusters

#: long: CI runs it in a step of its own (`-m slow`), out of the default run
pytestmark = pytest.mark.slow


@pytest.fixture
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own, noida-db, for each test: it counts the slots of two gateways and stops one; a gateway left
    # dead in the group (SIGKILL at the end of a test) would hold its slots there for good.
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


def test_a_dead_gateways_partitions_are_taken_over_on_noida(ec: EphemeralClusters, tmp_path: Path) -> None:
    """noida-db's group coordinator never expires a member that dies: its partitions stayed with it for good, and the
    way out was to start that gateway again. Now a live gateway takes the dead one's seat in the slot group (its
    group.instance.id) once its reports stop (membership.SlotGroup.adopt_dead), and the replica catches up without it.
    """
    env = {"STREAMREPL_CLUSTERS": str(ec.registry_path)}
    src, dst = "/newyork/stallsrc", "/newyork/stalldst"
    for path in (src, dst):
        assert run_cli("stream", "create", "-path", path, env=env).code == 0
    assert run_cli("stream", "topic", "create", "-path", src, "-topic", "t", "-partitions", "4", env=env).code == 0
    assert run_cli("stream", "replica", "add", "-path", src, "-replica", dst, env=env).code == 0
    assert run_cli("stream", "upstream", "add", "-path", dst, "-upstream", src, env=env).code == 0
    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        gws.start("stall-a")
        gws.start("stall-b")
        wait_until(lambda: sorted(slots(ec).values()) == [32, 32], 120, "the two gateways to share the slots")

        def row() -> dict:
            return run_cli("stream", "replica", "list", "-path", src, "-json", env=env).data()[0]  # type: ignore[no-any-return]

        wait_until(lambda: not row()["lasterror"], 60, "the link to be replicating with no error")
        held = run_cli("cluster", "gateway", "list", "-json", env=env).data()
        victim = next(r["gateway"] for r in held if "stalldst" in r["replicates"])
        survivor = ({"stall-a", "stall-b"} - {victim}).pop()
        gws.kill(victim, signal.SIGKILL)
        bs = ec.brokers["newyork"].bootstrap
        produce(bs, sp(src), "t", 200, 4)
        wait_until(lambda: slots(ec).get(survivor) == 64, 90, f"{survivor} to take over the slots of the dead {victim}")
        wait_until(lambda: same_ends(bs, sp(src), bs, sp(dst), {"t": 4}), 60, f"{survivor} to catch up")
        t = tally(bs, sp(src), uuid_of(ec.registry_path, src), bs, sp(dst), {"t": 4})
        assert t.ok and t.records >= 200, t
        wait_until(lambda: row()["isUptodate"], 30, "replica list to say the replica is up to date")
        log = (tmp_path / f"{survivor}.log").read_text()
        assert f"takes the seat of gateway {victim}" in log, log[-2000:]


def test_a_second_gateway_started_with_the_same_id_fences_the_first_which_stops_saying_so(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    """Static members share an id: the broker fences the older one. It went on as if it still owned its slots
    (librdkafka logged the fatal error, nothing else heard it), so two processes wrote the same partitions."""
    with Gateways(ec.registry_path, "newyork", tmp_path) as gws:
        gws.start("dup")
        wait_until(lambda: slots(ec).get("dup") == 64, 60, "the first gateway dup to own the slots")
        first = gws.procs.pop("dup")
        try:
            gws.start("dup")
            code = wait_until(lambda: first.poll(), 60, "the fenced gateway to stop")
        finally:
            if first.poll() is None:  # the test failed: do not leave it running
                first.kill()
                first.wait()
        assert code != 0
        log = (tmp_path / "dup.log").read_text()
        assert "another gateway was started with -id dup" in log, log[-2000:]
