"""Chaos scenarios (issue 7 §1): embedded clusters, three gateways, a steady producer, faults injected,
and at the end every replica compared with its source record by record, counting lost, doubled and
misplaced records. Sized so that the whole suite runs in about seven minutes on two cores; CHAOS_SIZE=full runs the
size the issues ask for (20 SIGKILLs over at least 500,000 records, 60 s with no gateway, more broker crashes:
about half an hour). See RELIABILITY.md for the sizes and the tables.

    .venv/bin/python -m pytest -m chaos tests/chaos -q
    CHAOS_SIZE=full .venv/bin/python -m pytest -m chaos tests/chaos -q
"""

from __future__ import annotations

import random
import signal
import time
import uuid

from chaostools import FULL, Chaos, applied, settle, wait_writing
from support.clusters import not_on_noida
from support.freeze import broker_frozen, frozen
from support.streams import (
    Gateways,
    SteadyProducer,
    Tally,
    cli,
    link,
    new_stream,
    new_topics,
    replica_rows,
    sp,
)

TOPICS = {"clicks": 3, "views": 3, "buys": 3}
SEED = int(time.time())
#: seconds of random SIGKILLs (at 7000 records/s: ~350,000 records; the issue asks for 500,000, scaled to fit;
#: the full size, CHAOS_SIZE=full, goes on until both FULL_KILLS and FULL_RECORDS are reached)
KILL_WINDOW = 40
FULL_KILLS, FULL_RECORDS = 20, 500_000
#: Why the scenarios that kill or stall gateways do not apply on noida-db (bench/probes/broker_probe.py: kill).
NOIDA_KEEPS_DEAD_MEMBERS = (
    "noida-db's group coordinator never expires a member that died or stopped heartbeating: its partitions stay"
    " assigned to it and a new member's join waits for it, so replication stops"
)
#: seconds with no gateway at all (the issue asks for 60, scaled to fit; 60 at the full size)
ALL_DOWN = 60 if FULL else 30
#: seconds each broker is frozen
FREEZE = 30


def pair(c: Chaos, topics: dict[str, int], multimaster: bool = False) -> tuple[str, str]:
    n = f"chaos{uuid.uuid4().hex[:6]}"
    src = new_stream(c.reg, f"/sanfrancisco/{n}")
    dst = new_stream(c.reg, f"/newyork/{n}", copyfrom=src)
    new_topics(c.reg, src, topics)
    link(c.reg, src, dst)
    if multimaster:
        link(c.reg, dst, src)
    return src, dst


def finish(c: Chaos, scenario: str, faults: str, t: Tally, started: float, *links: tuple[str, str]) -> None:
    c.record(scenario, faults, t, time.monotonic() - started)
    errors = [
        (s, r["lasterror"])
        for s, _ in links
        for r in replica_rows(c.reg, s).values()
        if r["replicaState"] == "REPLICA_STATE_ERROR"
    ]
    for s, d in links:  # the gateways need not carry this scenario's partitions any longer
        cli("stream", "replica", "remove", "-path", s, "-replica", d, registry=c.reg)
    assert t.ok, t
    assert not errors, errors


@not_on_noida(NOIDA_KEEPS_DEAD_MEMBERS)
def test_random_sigkills_over_a_long_produce(chaos: Chaos) -> None:
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    rng = random.Random(SEED)
    src, dst = pair(c, TOPICS)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=7000, tag="k").start()
    kills = 0
    try:
        wait_writing(c, dst, TOPICS)
        end = time.monotonic() + KILL_WINDOW
        down: dict[str, float] = {}  # gateway -> when to restart it

        def go_on() -> bool:
            if FULL:
                return kills < FULL_KILLS or producer.sent < FULL_RECORDS
            return time.monotonic() < end

        while go_on():
            time.sleep(rng.uniform(4, 8))
            for name, when in list(down.items()):
                if time.monotonic() >= when:
                    c.gws.start(name)
                    del down[name]
            victim = rng.choice([n for n in c.gws.procs if n not in down])
            c.gws.kill(victim, signal.SIGKILL)
            kills += 1
            down[victim] = time.monotonic() + rng.choice([0, 0, 3, 8])
            if len(down) == 3:  # keep one alive most of the time; all down is another scenario
                first = min(down, key=down.__getitem__)
                c.gws.start(first)
                del down[first]
        for name in down:
            c.gws.start(name)
    finally:
        sent = producer.stop()
    t = settle(c, src, dst, TOPICS)
    assert t.records == sent
    finish(c, "random SIGKILLs of 3 gateways", f"{kills} SIGKILLs (seed {SEED})", t, started, (src, dst))


def test_destination_then_source_frozen_multimaster(chaos: Chaos) -> None:
    """A multi-master pair, each side producing its own topics; newyork is frozen 30 s (the destination of
    sanfrancisco's topics), then sanfrancisco (their source) 30 s. Both sides compared."""
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    west, east = {"west": 3}, {"east": 3}
    a, b = pair(c, west, multimaster=True)
    new_topics(c.reg, b, east)
    with Gateways(c.reg, "sanfrancisco", c.logdir) as sf:
        sf.start("sf0")
        pa = SteadyProducer(c.bs("sanfrancisco"), sp(a), west, rate=2000, tag="w").start()
        pb = SteadyProducer(c.bs("newyork"), sp(b), east, rate=2000, tag="e").start()
        try:
            wait_writing(c, b, west)
            wait_writing(c, a, east)
            for cluster in ("newyork", "sanfrancisco"):
                with broker_frozen(c.ec, cluster):
                    time.sleep(FREEZE)
                time.sleep(2)
        finally:
            sent = pa.stop() + pb.stop()
        t = settle(c, a, b, west) + settle(c, b, a, east)
        assert t.records == sent
        finish(
            c,
            "multi-master: destination then source frozen",
            f"newyork SIGSTOP {FREEZE} s, then sanfrancisco SIGSTOP {FREEZE} s",
            t,
            started,
            (a, b),
            (b, a),
        )


@not_on_noida(NOIDA_KEEPS_DEAD_MEMBERS)
def test_all_gateways_down_then_one_restarted(chaos: Chaos) -> None:
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    src, dst = pair(c, TOPICS)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=4000, tag="d").start()
    try:
        wait_writing(c, dst, TOPICS)
        for name in list(c.gws.procs):
            c.gws.kill(name, signal.SIGKILL)
        time.sleep(ALL_DOWN)
        c.gws.start("ny0")
        wait_writing(c, dst, TOPICS)
        time.sleep(3)
    finally:
        sent = producer.stop()
    t = settle(c, src, dst, TOPICS)
    assert t.records == sent
    finish(
        c, "all gateways down, then one restarted", f"3 SIGKILLs, {ALL_DOWN} s with no gateway", t, started, (src, dst)
    )


def test_pause_resume_throttle_remove_readd_under_load(chaos: Chaos) -> None:
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    src, dst = pair(c, TOPICS)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=3000, tag="p").start()
    steps = 0

    def verb(*args: str) -> None:
        nonlocal steps
        cli("stream", "replica", *args, "-path", src, "-replica", dst, registry=c.reg)
        steps += 1
        time.sleep(2.5)

    try:
        wait_writing(c, dst, TOPICS)
        for _ in range(2):
            verb("pause")
            verb("resume")
            verb("edit", "-throttle", "true")
            verb("edit", "-throttle", "false")
        # Throttled for a while: the replica falls behind (3000 records/s against 9 x 150).
        verb("edit", "-throttle", "true")
        time.sleep(3)
        behind = applied(c, src, TOPICS) - applied(c, dst, TOPICS)
        verb("edit", "-throttle", "false")
        verb("remove")
        time.sleep(2)
        cli("stream", "replica", "add", "-path", src, "-replica", dst, registry=c.reg)
        steps += 1
        wait_writing(c, dst, TOPICS)
    finally:
        sent = producer.stop()
    assert behind > 3000, f"throttle had no visible effect ({behind} records behind)"
    t = settle(c, src, dst, TOPICS)
    assert t.records == sent
    finish(c, "pause/resume, throttle on/off, remove + re-add", f"{steps} verbs under load", t, started, (src, dst))


@not_on_noida(NOIDA_KEEPS_DEAD_MEMBERS)
def test_gateways_restarted_during_rebalances(chaos: Chaos) -> None:
    """A fourth gateway joining or leaving starts a rebalance; while it runs, other gateways are restarted
    (SIGTERM, which drains, and SIGKILL)."""
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    rng = random.Random(SEED + 1)
    src, dst = pair(c, TOPICS)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=4000, tag="r").start()
    restarts = 0
    try:
        for cycle in range(3):
            wait_writing(c, dst, TOPICS)
            if cycle % 2 == 0:
                c.gws.start("ny3")  # joins: a rebalance starts
            else:
                c.gws.kill("ny3", signal.SIGTERM)  # leaves: a rebalance starts
            time.sleep(rng.uniform(0.2, 1.5))
            victim = rng.choice(["ny0", "ny1", "ny2"])
            c.gws.kill(victim, rng.choice([signal.SIGTERM, signal.SIGKILL]))
            c.gws.start(victim)
            restarts += 1
        wait_writing(c, dst, TOPICS)
        if "ny3" in c.gws.procs:
            c.gws.kill("ny3", signal.SIGTERM)
    finally:
        sent = producer.stop()
    t = settle(c, src, dst, TOPICS)
    assert t.records == sent
    finish(
        c,
        "gateways restarted during rebalances",
        f"3 rebalances (a 4th gateway joining/leaving), {restarts} restarts during them",
        t,
        started,
        (src, dst),
    )


@not_on_noida(NOIDA_KEEPS_DEAD_MEMBERS)
def test_gateway_stalled_past_its_session(chaos: Chaos) -> None:
    """A gateway frozen (SIGSTOP) longer than its session: the others take its partitions over; when it
    resumes it must not write into them (it has not heard yet that they are gone)."""
    c = chaos
    c.ensure_gateways()
    started = time.monotonic()
    src, dst = pair(c, TOPICS)
    producer = SteadyProducer(c.bs("sanfrancisco"), sp(src), TOPICS, rate=4000, tag="z").start()
    try:
        wait_writing(c, dst, TOPICS)
        with frozen(c.gws.procs["ny1"]):
            time.sleep(15)
        time.sleep(5)
    finally:
        sent = producer.stop()
    t = settle(c, src, dst, TOPICS)
    assert t.records == sent
    finish(c, "a gateway frozen past its session, then resumed", "SIGSTOP 15 s, SIGCONT", t, started, (src, dst))
