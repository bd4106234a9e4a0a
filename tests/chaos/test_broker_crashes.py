"""Broker crashes (issue 12 §6), on noida-db whatever broker the rest of the suite runs on: it keeps its data on
disk and saves it every few seconds, so a SIGKILL loses what it took since its last save, as a real cluster
loses a tail in an unclean leader election. Brokers of their own (the scenarios kill them) and one gateway
(noida-db does not expire a dead group member: see test_chaos.NOIDA_KEEPS_DEAD_MEMBERS; no gateway is killed
here, and one keeps the broker's restarts the only fault).

- The destination broker SIGKILLed and started again under load: the gateway must take every partition up again
  from its real end and refill it from the source: nothing lost, nothing doubled, nothing reported as a conflict.
- The source broker SIGKILLed just after its newest records were replicated, then written again: it may come back
  without records the replica holds, and new records take their offsets. The replica must not mix the two
  histories silently: each partition either equals its source or is reported diverged in `replica list`
  (divergence.py). The table counts the partitions that equal their source; the diverged ones are named in the
  faults column, and a difference not reported fails the scenario.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from chaostools import FULL, Chaos, settle, wait_writing
from support.clusters import crash_broker, wait_saved
from support.streams import (
    Gateways,
    SteadyProducer,
    Tally,
    cli,
    compare,
    link,
    new_stream,
    new_topics,
    read_all,
    replica_rows,
    same_ends,
    sp,
    uuid_of,
    wait_until,
)

from streamrepl.local import EphemeralClusters

TOPICS = {"clicks": 3, "views": 3, "buys": 3}
#: destination broker crashes, a few seconds apart, under load
DEST_CRASHES = 6 if FULL else 2
#: source broker crashes, each followed by new records
SOURCE_CRASHES = 3 if FULL else 1


@pytest.fixture(scope="module")
def noida(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    logdir = tmp_path_factory.mktemp("broker-crash-gateways")
    with EphemeralClusters(["sanfrancisco", "newyork"], broker="noida") as ec:
        with Gateways(ec.registry_path, "newyork", logdir) as gws:
            gws.start("ny0")
            yield Chaos(ec, ec.registry_path, logdir, gws)


def pair(c: Chaos) -> tuple[str, str]:
    n = f"crash{uuid.uuid4().hex[:6]}"
    src = new_stream(c.reg, f"/sanfrancisco/{n}")
    dst = new_stream(c.reg, f"/newyork/{n}", copyfrom=src)
    new_topics(c.reg, src, TOPICS)
    link(c.reg, src, dst)
    return src, dst


def saved(c: Chaos, cluster: str) -> None:
    """The streams and the link just made must survive the crash, which is to take records only."""
    wait_saved(c.ec, cluster)


def gateway_alive(c: Chaos) -> None:
    assert c.gws.procs["ny0"].poll() is None, f"the gateway died; its log: {c.logdir / 'ny0.log'}"


def test_destination_broker_crashes_under_load(noida: Chaos) -> None:
    c = noida
    started = time.monotonic()
    src, dst = pair(c)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=3000, tag="dc").start()
    try:
        wait_writing(c, dst, TOPICS)
        saved(c, "newyork")
        for _ in range(DEST_CRASHES):
            time.sleep(4)
            crash_broker(c.ec, "newyork", down_seconds=1)
            gateway_alive(c)
        time.sleep(3)
    finally:
        sent = producer.stop()
    t = settle(c, src, dst, TOPICS)
    gateway_alive(c)
    assert t.records == sent
    errors = [r["lasterror"] for r in replica_rows(c.reg, src).values() if r["replicaState"] == "REPLICA_STATE_ERROR"]
    c.record(
        "destination broker (noida-db) SIGKILLed under load",
        f"{DEST_CRASHES} SIGKILLs of newyork's broker, each restarted 1 s later",
        t,
        time.monotonic() - started,
    )
    cli("stream", "replica", "remove", "-path", src, "-replica", dst, registry=c.reg)
    assert t.ok, t
    assert not errors, errors


def test_source_broker_crashes_never_leave_a_silently_mixed_replica(noida: Chaos) -> None:
    """Each crash gets a pair of its own: a replica reported diverged stops, so it cannot show the next one."""
    c = noida
    started = time.monotonic()
    same, diverged, unreported = Tally(), 0, []
    for i in range(SOURCE_CRASHES):
        part_same, part_diverged, error = source_crash_round(c, f"sc{i}-")
        same = same + part_same
        diverged += len(part_diverged)
        if part_diverged and "diverged" not in error:
            unreported.append((part_diverged[:3], error))
    c.record(
        "source broker (noida-db) SIGKILLed after replicating",
        f"{SOURCE_CRASHES} SIGKILLs of sanfrancisco's broker (a pair each); {diverged} of {9 * SOURCE_CRASHES}"
        " partitions diverged" + ("" if unreported else ", all reported in replica list"),
        same,
        time.monotonic() - started,
    )
    assert not unreported, f"replicas differ from their sources and nothing says so: {unreported}"


def source_crash_round(c: Chaos, tag: str) -> tuple[Tally, list, str]:
    """One pair, written, replicated, its source crashed and written again. Returns the tally of the partitions
    that equal their source (records: all the source's), the ones that differ, and the replica's error."""
    src, dst = pair(c)
    s, d = sp(src), sp(dst)
    sf, ny = c.bs("sanfrancisco"), c.bs("newyork")
    saved(c, "sanfrancisco")
    producer = SteadyProducer(sf, s, TOPICS, rate=3000, tag=tag).start()
    time.sleep(4)
    producer.stop()
    # Replicated, and (most likely) not saved by the source yet: the crash takes records the replica holds.
    wait_until(lambda: same_ends(sf, s, ny, d, TOPICS), 60, "the replica to catch up")
    crash_broker(c.ec, "sanfrancisco", down_seconds=1)
    gateway_alive(c)
    producer = SteadyProducer(sf, s, TOPICS, rate=3000, tag=f"{tag}after").start()
    time.sleep(3)
    producer.stop()

    def settled() -> dict | None:
        rows = replica_rows(c.reg, src)
        if rows[dst]["replicaState"] == "REPLICA_STATE_ERROR":
            time.sleep(3)  # the other partitions' checks
            return replica_rows(c.reg, src)
        return rows if same_ends(sf, s, ny, d, TOPICS) else None

    rows = wait_until(settled, 120, "the replica to catch up or be reported diverged")
    gateway_alive(c)
    error = rows[dst]["lasterror"] if rows[dst]["replicaState"] == "REPLICA_STATE_ERROR" else ""
    a, b = read_all(sf, s, TOPICS), read_all(ny, d, TOPICS)
    src_uuid = uuid_of(c.reg, src)
    same, diverged = Tally(), []
    for key in a:
        part = compare(a[key], b[key], src_uuid, f"{key[0]}[{key[1]}]")
        if part.ok:
            same = same + part
        else:
            diverged.append((key, part))
    same.records = sum(1 for recs in a.values() for r in recs if not r.filler)  # the source's, all partitions
    cli("stream", "replica", "remove", "-path", src, "-replica", dst, registry=c.reg)
    if not diverged:
        assert not error, error
    return same, diverged, error
