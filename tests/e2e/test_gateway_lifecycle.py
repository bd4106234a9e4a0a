"""Gateways always come back: the lifecycle matrix, on a registry a user writes (bootstrap.servers only).

Every case runs real gateway processes against brokers of its own (it kills and freezes gateways, and counts the
slots) under a steady producer, and ends by comparing every record of the replica with its source (offset, key,
value, headers, timestamp). The time from the event to the replica catching up with records produced after it is
printed (`lifecycle:` lines, collected in BENCHMARKS.md), never asserted: the deadlines only guard against a hang.

The matrix runs on the broker of $STREAMREPL_LOCAL_BROKER (Tansu by default; CI runs it on noida-db too). On Tansu a
dead member is expired after its session; on noida-db never, and a gateway takes the dead one's seat instead
(replication/membership.py). Marked `lifecycle`, so that `-m 'not lifecycle'` leaves it out.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_cli
from support.clusters import BROKER, ON_NOIDA
from support.streams import (
    Gateways,
    SteadyProducer,
    link,
    new_stream,
    new_topics,
    produce,
    sp,
    tally,
    true_ends,
    uuid_of,
)

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida_matrix

LIFECYCLE = pytest.mark.lifecycle

CLUSTER = "newyork"
SRC, DST = f"/{CLUSTER}/lc-src", f"/{CLUSTER}/lc-dst"
TOPICS = {"t": 4}
RATE = 200  # records/s into the source, spread over its partitions
HANG_GUARD = 150.0  # seconds: a deadline against a hang, not a speed check


class Rig:
    """One cluster holding the source stream and its replica, a steady producer, and the gateways."""

    def __init__(self, ec: EphemeralClusters, logdir: Path):
        self.ec = ec
        self.reg = ec.registry_path
        self.bs = ec.brokers[CLUSTER].bootstrap
        self.env = {"STREAMREPL_CLUSTERS": str(self.reg)}
        new_stream(self.reg, SRC)
        new_topics(self.reg, SRC, TOPICS)
        new_stream(self.reg, DST)
        link(self.reg, SRC, DST)
        self.gws = Gateways(self.reg, CLUSTER, logdir)
        self.producer = SteadyProducer(self.bs, sp(SRC), TOPICS, RATE).start()

    def slots(self) -> dict[str, int]:
        rows = run_cli("cluster", "gateway", "list", "-json", env=self.env).data()
        return {r["gateway"]: r["slots"] for r in rows if r.get("state", "") != "stopped" and r["slots"]}

    def caught_up_since(self, label: str, since: float) -> float:
        """Wait until the replica holds what the source held a moment ago; prints and returns the seconds since
        `since` (the event)."""
        target = true_ends(self.bs, sp(SRC), TOPICS)
        deadline = time.monotonic() + HANG_GUARD
        while True:
            got = true_ends(self.bs, sp(DST), TOPICS)
            if all(got[k] >= v for k, v in target.items()):
                took = time.monotonic() - since
                print(f"lifecycle: {BROKER} {label}: {took:.1f} s")
                return took
            assert time.monotonic() < deadline, f"{label}: the replica did not catch up ({got} < {target})"
            time.sleep(0.5)

    def finish(self) -> None:
        """Stop producing, let the gateways catch up, and compare every record."""
        self.producer.stop()
        self.caught_up_since("final catch-up", time.monotonic())
        t = tally(self.bs, sp(SRC), uuid_of(self.reg, SRC), self.bs, sp(DST), TOPICS)
        assert t.ok and t.records == self.producer.sent, t


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    # Brokers of its own for each case: gateways are killed and frozen, and a dead member may stay in the group.
    with EphemeralClusters([CLUSTER]) as ec:
        r = Rig(ec, tmp_path)
        try:
            yield r
        finally:
            for p in r.gws.procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
            r.gws.__exit__()
            r.producer._stop.set()


def _start(rig: Rig, *names: str) -> None:
    for name in names:
        rig.gws.start(name)


def _all_slots_with(rig: Rig, names: set[str]) -> bool:
    s = rig.slots()
    return sum(s.values()) == 64 and set(s) <= names and bool(s)


def wait(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + HANG_GUARD
    while not pred():
        assert time.monotonic() < deadline, f"not within {HANG_GUARD:.0f} s: {what}"
        time.sleep(0.5)


@pytest.mark.parametrize(
    ("sig", "same_id"),
    [
        pytest.param(signal.SIGKILL, False, id="sigkill-new-id"),
        pytest.param(signal.SIGTERM, False, id="sigterm-new-id", marks=LIFECYCLE),
        pytest.param(signal.SIGKILL, True, id="sigkill-same-id", marks=LIFECYCLE),
        pytest.param(signal.SIGTERM, True, id="sigterm-same-id", marks=LIFECYCLE),
    ],
)
def test_a_gateway_started_after_the_last_one_died_gets_every_slot(rig: Rig, sig: int, same_id: bool) -> None:
    """The regression of the hand-written registry: g1 owned every slot and was killed; g2 (another id) got 0 slots
    for good (Tansu with static membership, noida-db always)."""
    _dies_and_one_starts(rig, sig, "lc-a" if same_id else "lc-b", f"then {'the same' if same_id else 'a new'} id")


def _dies_and_one_starts(rig: Rig, sig: int, name: str, label: str) -> None:
    """lc-a owns every slot and is killed with `sig`; `name` is started and must own every slot."""
    _start(rig, "lc-a")
    wait(lambda: rig.slots() == {"lc-a": 64}, "lc-a to own every slot")
    rig.caught_up_since("first start", time.monotonic())
    rig.gws.kill("lc-a", sig)
    event = time.monotonic()
    _start(rig, name)
    wait(lambda: rig.slots().get(name) == 64, f"{name} to own every slot")
    rig.caught_up_since(f"{signal.Signals(sig).name} {label}", event)
    rig.finish()


@LIFECYCLE
def test_the_same_with_the_broker_named_in_the_registry(rig: Rig) -> None:
    """A registry of an earlier `local up` names the broker (`streamrepl.broker`): a label now, which decides nothing
    (the probes do), so a gateway comes back the same way."""
    import yaml

    doc = yaml.safe_load(rig.reg.read_text())
    doc["clusters"][CLUSTER]["streamrepl.broker"] = rig.ec.brokers[CLUSTER].broker
    rig.reg.write_text(yaml.safe_dump(doc))
    _dies_and_one_starts(rig, signal.SIGKILL, "lc-b", "then a new id, the broker named in the registry")


@LIFECYCLE
def test_one_of_three_dies_and_the_other_two_take_its_slots(rig: Rig) -> None:
    _start(rig, "lc-1", "lc-2", "lc-3")
    wait(lambda: sorted(rig.slots().values()) == [21, 21, 22], "three gateways to share the slots")
    rig.gws.kill("lc-2", signal.SIGKILL)
    event = time.monotonic()
    wait(lambda: _all_slots_with(rig, {"lc-1", "lc-3"}), "lc-1 and lc-3 to own every slot")
    rig.caught_up_since("one of three SIGKILLed", event)
    rig.finish()


@LIFECYCLE
def test_all_three_die_and_one_new_gateway_takes_everything(rig: Rig) -> None:
    _start(rig, "lc-1", "lc-2", "lc-3")
    wait(lambda: sorted(rig.slots().values()) == [21, 21, 22], "three gateways to share the slots")
    for name in ("lc-1", "lc-2", "lc-3"):
        rig.gws.kill(name, signal.SIGKILL)
    event = time.monotonic()
    _start(rig, "lc-4")
    wait(lambda: rig.slots().get("lc-4") == 64, "lc-4 to own every slot")
    rig.caught_up_since("all three SIGKILLed, a new one started", event)
    rig.finish()


@LIFECYCLE
def test_a_frozen_gateway_whose_slots_moved_never_writes_again(rig: Rig) -> None:
    """SIGSTOP one of two gateways until the other has its slots, then SIGCONT: the frozen one must not write into
    the partitions the other now applies (the fence: its group membership was expired, or its seat adopted and the
    broker fenced it; and its queued writes are thrown away after the freeze: replication/pauses.py)."""
    _start(rig, "lc-x", "lc-y")
    wait(lambda: sorted(rig.slots().values()) == [32, 32], "two gateways to share the slots")
    frozen = rig.gws.procs["lc-x"]
    frozen.send_signal(signal.SIGSTOP)
    event = time.monotonic()
    wait(lambda: rig.slots().get("lc-y") == 64, "lc-y to own every slot")
    rig.caught_up_since("one of two frozen (SIGSTOP)", event)
    frozen.send_signal(signal.SIGCONT)
    time.sleep(8)  # what the thawed gateway would write, it writes now
    rig.finish()
    # The thawed gateway either stopped (fenced) or rejoined and shares the slots again; both are fine.
    assert frozen.poll() in (None, 1), "stopped to start again (its seat was taken), or rejoined; not final"


@LIFECYCLE
@pytest.mark.skipif(
    not ON_NOIDA,
    reason="Tansu keeps nothing across a restart (memory storage): there a frozen broker stands for an outage, as in the chaos suite",
)
def test_the_broker_started_again_on_its_port_and_then_moved_to_another(rig: Rig, tmp_path: Path) -> None:
    """The cluster's only broker stops and comes back: on its port (`local up` waits for nothing, its port in TIME_WAIT
    is bound again), then on another one while something holds the old (the registry is rewritten; the gateway, which
    dialed the old address for good, stops when its registry entry changes and its supervisor starts it again)."""
    import socket

    import yaml

    from streamrepl import local

    rig.gws.start("lc-r", supervise=True)
    wait(lambda: rig.slots().get("lc-r") == 64, "lc-r to own every slot")
    sent = rig.producer.stop()
    rig.caught_up_since("before the restarts", time.monotonic())
    port = rig.ec.brokers[CLUSTER].port

    local.down(rig.ec.state_dir)
    (again,) = local.up([CLUSTER], rig.ec.state_dir)
    assert again.port == port
    event = time.monotonic()
    produce(rig.bs, sp(SRC), "t", 200, 4, start=sent, tag="after-restart-")
    rig.caught_up_since("broker stopped and started again on its port", event)

    local.down(rig.ec.state_dir)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        (moved,) = local.up([CLUSTER], rig.ec.state_dir)
    assert moved.port != port
    doc = yaml.safe_load(rig.reg.read_text())
    assert doc["clusters"][CLUSTER]["bootstrap.servers"] == moved.bootstrap
    rig.bs = moved.bootstrap
    event = time.monotonic()
    produce(rig.bs, sp(SRC), "t", 200, 4, start=sent + 200, tag="after-move-")
    rig.caught_up_since("broker moved to another port", event)
    t = tally(rig.bs, sp(SRC), uuid_of(rig.reg, SRC), rig.bs, sp(DST), TOPICS)
    assert t.ok and t.records == sent + 400, t
    log = (tmp_path / "lc-r.log").read_text()
    assert f"changed the settings of cluster {CLUSTER}" in log, log[-3000:]
