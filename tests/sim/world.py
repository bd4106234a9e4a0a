"""One schedule: a source and a destination cluster in the model, gateways running the real replication code, and
a seeded scheduler that interleaves source writes, faults and gateway steps; then the contract is checked.

    python -m tests.sim.run --seed N      replays schedule N (PYTHONPATH=. from the repository's root)
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamrepl import kafka, metastore, policy, replicas, statustopic, stream_ops, topics
from streamrepl.errors import StreamreplError
from streamrepl.kafka import clients
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster, Registry
from streamrepl.replication.gateway import Gateway
from streamrepl.replication.links import Unit
from streamrepl.replication.membership import GatewayFenced, SeatTaken
from streamrepl.replication.pauses import PauseWatch
from streamrepl.replication.quiet import reports_lost_connection
from streamrepl.replication.reports import REPORT_SECONDS
from streamrepl.settings import GatewaySettings

from . import clock as simclock
from .model import Broker, Model

TUNING = GatewaySettings(
    session_ms=6000, message_timeout_ms=2000, linger_ms=5, throttle_rate=1000, cursor_sync_seconds=1
)
TOPIC = "t"
SRC, DST = "/sf/s", "/ny/s"
#: once the faults stop, how long (simulated seconds) every partition has to catch up or fail with a reason
SETTLE_SECONDS = 120.0
#: brokers as the gateway's decisions see them: (exact watermark, expires dead members, static members, LeaveGroup)
FLAVOURS = {
    "kafka": (True, True, True, True),
    "tansu": (False, True, False, False),
    "noida": (True, False, True, True),
}


@dataclass
class Config:
    flavour: str
    partitions: int
    gateways: int
    ticks: int
    #: the kinds of faults this schedule may draw
    faults: tuple[str, ...]


def draw_config(rng: random.Random) -> Config:
    kinds = ("kill", "restart_same", "restart_new", "stop", "pause", "crash_dst", "crash_src", "flaky", "lost_answers")
    faults = tuple(k for k in kinds if rng.random() < 0.5) or ("kill",)
    if rng.random() < 0.1:
        faults += ("recreate_src",)
    return Config(rng.choice(sorted(FLAVOURS)), rng.randint(1, 3), rng.randint(1, 3), rng.randint(40, 160), faults)


def draw_restart(rng: random.Random) -> Config:
    """Gateways killed and new ones started (new ids), on a broker that never expires a dead member (issue 23)."""
    return Config("noida", rng.randint(1, 3), rng.randint(1, 2), rng.randint(40, 160), ("kill", "restart_new"))


#: how a schedule's configuration is drawn from its seed (`--profile` of run.py)
PROFILES = {"default": draw_config, "restart": draw_restart}


@dataclass
class SimGateway:
    gw: Gateway
    #: the process (an id started again is another process): what the model knows its clients by
    tag: str = ""
    alive: bool = True
    frozen_until: float = 0.0
    #: the simulated time at the end of its last step
    stepped_at: float = 0.0
    next_refresh: float = 0.0


@dataclass
class Outcome:
    seed: int
    config: Config
    violations: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    steps: int = 0
    #: ticks that ended with a partition held by two running gateways (no record written meanwhile: see check_write)
    held_twice: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


class World:
    def __init__(self, seed: int, profile: str = "default"):
        self.seed = seed
        self.rng = random.Random(seed)
        self.profile = profile
        self.config = PROFILES[profile](self.rng)
        self.clock = simclock.SimClock()
        self.model = Model(self.clock, random.Random(seed * 7919 + 1))
        exact, expires, static, leave = FLAVOURS[self.config.flavour]
        self.src = self.model.add("sf", exact_watermark=exact, expires_members=expires)
        self.dst = self.model.add("ny", exact_watermark=exact, expires_members=expires)
        props = {
            "streamrepl.watermark.exact": str(exact).lower(),
            "streamrepl.group.static": str(static).lower(),
            "streamrepl.group.leave": str(leave).lower(),
        }
        self.reg = Registry(
            Path("clusters.yaml"),
            "ny",
            {n: Cluster(n, {"bootstrap.servers": f"sim:{n}", **props}) for n in ("sf", "ny")},
        )
        self.gateways: dict[str, SimGateway] = {}
        #: every gateway process started (an id started again replaces its entry in `gateways`, not here)
        self.procs: list[SimGateway] = []
        self.ids = 0
        #: when the faults stopped (settle), and how often each gateway id was fenced since
        self.faults_stopped_at: float | None = None
        self.fences_after: dict[str, int] = {}
        self.out = Outcome(seed, self.config)
        #: (partition, offset) -> every source record ever written there (a changed history has several)
        self.history: dict[tuple[int, int], list[Any]] = {}
        self.src_kt = kafka_topic_name(StreamPath("sf", "/s"), TOPIC)
        self.dst_kt = kafka_topic_name(StreamPath("ny", "/s"), TOPIC)

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self) -> None:
        stream_ops.create(self.reg, SRC, {})
        stream_ops.create(self.reg, DST, {})
        topics.create(self.reg, SRC, TOPIC, self.config.partitions)
        replicas.add(self.reg, SRC, DST)
        replicas.upstream_add(self.reg, DST, SRC)
        for b in (self.src, self.dst):
            b.save()

    def event(self, text: str) -> None:
        self.out.events.append(f"t={self.clock.now - 1000:.2f} {text}")

    # -- the gateways ------------------------------------------------------------------------------
    def start_gateway(self, gid: str | None = None) -> None:
        if gid is None:
            self.ids += 1
            gid = f"gw{self.ids}"
        tag = f"{gid}#{len(self.out.events)}"
        self.model.current_gateway = tag
        gw: Gateway | None = None
        made: list[Gateway] = []

        def source_consumer(cluster: Cluster, strands: int = 1) -> kafka.Consumer:
            # replication.feeds.source_consumer without its thread (discovery.learn_cached): a lost connection
            # is reported to the partition table, as by the gateway's own
            on_lost = made[0].feeds.source_lost
            return kafka.consumer(cluster, **{"fetch.wait.max.ms": 10, **reports_lost_connection(cluster, on_lost)})

        try:
            gw = Gateway(self.reg, "ny", gid, TUNING, new_source_consumer=source_consumer)
            made.append(gw)
            gw.group.threaded_look = False
            gw.pause_watch = PauseWatch(gw.pause_watch.limit, clock=self.clock.monotonic)
            if not self.dst.up:
                self.clock.now = self.dst.down_until  # _wait_for_destination would sleep until then
            if not gw.begin(threads=False):
                return
        except StreamreplError as e:
            # `gateway start` exits with this error; its supervisor starts it again later (restart_same)
            if gw is not None:
                self.gateways[gid] = SimGateway(gw, tag, alive=False)
                self.procs.append(self.gateways[gid])
            self.event(f"start {gid} failed: {e}")
            return
        finally:
            self.model.current_gateway = ""
        assert gw is not None
        self.gateways[gid] = SimGateway(gw, tag)
        self.procs.append(self.gateways[gid])
        self.event(f"start {gid}")

    def live(self) -> list[SimGateway]:
        return [g for g in self.gateways.values() if g.alive]

    def step_gateway(self, g: SimGateway) -> None:
        gw = g.gw
        if self.clock.now < g.frozen_until:
            return
        self.model.current_gateway = g.tag
        try:
            if self.clock.now >= g.next_refresh:
                g.next_refresh = self.clock.now + 2.0
                # The plan watcher is a thread of its own: its waits (a cluster that does not answer) do not hold the
                # loop up, so the clock is put back to where the loop is (see docs/simulation.md)
                started = self.clock.now
                gw.watcher.refresh()
                self.clock.now = started
            if gw.step() is None:
                g.alive = False
        except (SeatTaken, GatewayFenced) as e:
            self.event(f"{gw.id} exits: {e}")
            g.alive = False
            if self.faults_stopped_at is not None:
                # Once the faults stopped, a gateway may find its seat taken once (its reports were lost or late
                # meanwhile); started again, it must keep it (seeds 140, 8745: its report was still queued when it
                # joined, and the adopter took the seat again at once).
                self.fences_after[gw.id] = self.fences_after.get(gw.id, 0) + 1
                if self.fences_after[gw.id] == 2:
                    self.out.violations.append(
                        f"{gw.id} was fenced again at t={self.clock.now - 1000:.2f}, after the faults stopped"
                    )
            if isinstance(e, SeatTaken):
                self.start_gateway(gw.id)  # its supervisor starts it again under its id
        except Exception as e:  # noqa: BLE001 - the gateway's process would die of it: a finding
            g.alive = False
            self.out.violations.append(f"{gw.id} died of {e!r} at t={self.clock.now - 1000:.2f}")
        finally:
            self.model.current_gateway = ""
            g.stepped_at = self.clock.now
        self.out.steps += 1

    # -- faults ------------------------------------------------------------------------------------
    def write_source(self, n: int) -> None:
        for _ in range(n):
            p = self.rng.randrange(self.config.partitions)
            part = self.src.partition(self.src_kt, p)
            if part is None:
                return
            key = None if self.rng.random() < 0.2 else f"k{self.rng.randrange(1000)}".encode()
            value = None if self.rng.random() < 0.05 else f"v{self.rng.randrange(10**6)}".encode()
            headers = (("h", f"{self.rng.randrange(9)}".encode()),) if self.rng.random() < 0.3 else ()
            ts = int(self.clock.time() * 1000) - self.rng.randrange(5000)
            from .model import Rec

            off = self.src.append(self.src_kt, p, [Rec(key, value, headers, ts)])
            self.history.setdefault((p, off), []).append((key, value, headers, ts))

    def fault(self) -> None:
        kind = self.rng.choice(self.config.faults)
        live = self.live()
        if kind == "kill" and live:
            g = self.rng.choice(live)
            g.alive = False  # SIGKILL: its objects are dropped, nothing is flushed or left
            self.event(f"kill {g.gw.id}")
        elif kind == "restart_same":
            dead = [gid for gid, g in self.gateways.items() if not g.alive and gid not in {x.gw.id for x in live}]
            if dead:
                self.start_gateway(self.rng.choice(dead))
        elif kind == "restart_new" and len(live) < 4:
            self.start_gateway()
        elif kind == "stop" and live:
            g = self.rng.choice(live)
            g.alive = False
            g.gw.request_stop()
            self.event(f"stop {g.gw.id}")
            g.gw.shutdown()
        elif kind == "pause" and live:
            g = self.rng.choice(live)
            g.frozen_until = self.clock.now + self.rng.uniform(0.5, 12)
            self.event(f"pause {g.gw.id} until {g.frozen_until - 1000:.1f}")
        elif kind in ("crash_dst", "crash_src"):
            b = self.dst if kind == "crash_dst" else self.src
            b.crash(self.rng.uniform(0.2, 5))
            self.event(f"crash {b.name}")
        elif kind == "flaky":
            b = self.rng.choice([self.src, self.dst])
            b.flaky, b.flaky_until = self.rng.uniform(0.05, 0.5), self.clock.now + self.rng.uniform(1, 10)
            self.event(f"flaky {b.name}")
        elif kind == "lost_answers":
            self.dst.lost_answers = self.rng.choice([0.0, 0.01, 0.1])
            self.event(f"lost answers {self.dst.lost_answers}")
        elif kind == "recreate_src":
            t = self.src.topics.get(self.src_kt)
            if t is not None:
                del self.src.topics[self.src_kt]
                self.src.create_topic(self.src_kt, len(t.partitions), t.configs)
                self.event("source topic deleted and created again")

    def heal(self) -> None:
        for b in (self.src, self.dst):
            b.flaky = b.lost_answers = 0.0
            b.down_until = min(b.down_until, self.clock.now)
        for g in self.live():
            g.frozen_until = 0.0

    # -- the run -----------------------------------------------------------------------------------
    def mark_silent(self) -> None:
        self.model.silent = {g.tag for g in self.procs if not g.alive or self.clock.now < g.frozen_until}

    def tick(self, faults: bool) -> None:
        self.mark_silent()
        self.clock.advance(self.rng.choice((0.01, 0.05, 0.2)))
        if self.rng.random() < 0.6:
            self.write_source(self.rng.randint(1, 4))
        if faults and self.rng.random() < 0.08:
            self.fault()
        for b in (self.src, self.dst):
            if self.rng.random() < 0.5:
                b.save()
        live = self.live()
        self.rng.shuffle(live)
        for g in live:
            if g.alive:
                self.step_gateway(g)
        self.check_owners()

    def run(self) -> Outcome:
        clients.set_backend(self.model.make)
        self.model.on_append = self.check_write
        simclock.install(self.clock)
        logging.getLogger("streamrepl").setLevel(logging.CRITICAL)
        metastore.close_clients()
        try:
            self.setup()
            for _ in range(self.config.gateways):
                self.start_gateway()
            for _ in range(self.config.ticks):
                self.tick(faults=True)
            self.settle()
        finally:
            metastore.close_clients()
            simclock.uninstall()
            clients.set_backend(None)
        return self.out

    def settle(self) -> None:
        """The faults stop: the brokers come back, a gateway runs, the sources take a few more records; within
        SETTLE_SECONDS every partition catches up or fails with a reason."""
        self.heal()
        self.event("faults stop")
        self.faults_stopped_at = self.clock.now
        if not self.live():
            self.start_gateway()
        self.write_source(self.config.partitions * 2)
        deadline = self.clock.now + SETTLE_SECONDS
        while self.clock.now < deadline:
            self.mark_silent()
            self.clock.advance(0.2)
            for g in self.live():
                self.step_gateway(g)
            self.check_owners()
            if not self.live():
                self.start_gateway()
            if self.settled():
                break
        # The gateways' reports of what they hold and what failed land within a report period (reports.py): what
        # `replica list` says is checked once they could have.
        until = self.clock.now + REPORT_SECONDS + 1
        while self.clock.now < until:
            self.mark_silent()
            self.clock.advance(0.2)
            for g in self.live():
                self.step_gateway(g)
        self.check_replicas(final=True)
        self.check_uptodate()
        errored = self.errored()
        for p in range(self.config.partitions):
            s, d = self.src.partition(self.src_kt, p), self.dst.partition(self.dst_kt, p)
            self.event(
                f"partition {p}: source end {s.end if s else None}, replica end {d.end if d else None}"
                + (f", ERROR: {errored[p]}" if p in errored else "")
            )

    # -- the contract ------------------------------------------------------------------------------
    def errored(self, reported: bool = False) -> dict[int, str]:
        """The partitions in ERROR in the running gateways' tables; with `reported`, also those the gateways' last
        reports say are (what `replica list` shows: a gateway fenced and started again at the very moment of the
        final check has an empty table, while its last process's report of the ERROR stands; seeds 140, 8745)."""
        out: dict[int, str] = {}
        if reported:
            prefix = f"unit|{DST}|{SRC}|"
            for key, body in statustopic.read(self.reg.get("ny"), prefix).items():
                if body.get("state") == "error":
                    out[int(key.rsplit("|", 1)[1])] = str(body.get("error", ""))
        for g in self.live():
            for unit, why in g.gw.table.errored.items():
                out[unit.partition] = why
        return out

    def settled(self) -> bool:
        errored = self.errored()
        for p in range(self.config.partitions):
            if p in errored:
                continue
            s, d = self.src.partition(self.src_kt, p), self.dst.partition(self.dst_kt, p)
            if s is None or d is None or d.end != s.end or any(g.gw.session.producer.queue for g in self.live()):  # type: ignore[attr-defined]
                return False
            if self.replica_problem(p, s, d) is not None:
                return False
        return True

    def replica_problem(self, p: int, s: Any, d: Any) -> str | None:
        """Why replica partition p does not hold its source exactly (None: it does)."""
        for o in range(d.log_start, d.end):
            r = d.at(o)
            if policy.is_filler(list(r.headers)):
                if o >= s.log_start and o < s.end:
                    return f"partition {p}: a filler at offset {o}, where the source holds a record"
                continue
            if o < s.log_start or o >= s.end:
                return f"partition {p}: offset {o} is past the source's end {s.end}"
            src = s.at(o)
            got = (r.key, r.value, tuple(policy.user_headers(list(r.headers))), r.timestamp)
            if got != (src.key, src.value, src.headers, src.timestamp):
                return f"partition {p}: offset {o} holds {got}, the source {src}"
        return None

    def check_replicas(self, final: bool) -> None:
        errored = self.errored(reported=final)
        for p in range(self.config.partitions):
            s, d = self.src.partition(self.src_kt, p), self.dst.partition(self.dst_kt, p)
            if d is None or s is None:
                self.out.violations.append(f"partition {p}: the replica or source topic is missing")
                continue
            if p in errored:
                if not errored[p].strip():
                    self.out.violations.append(f"partition {p}: in ERROR without a reason")
                for o in range(d.log_start, d.end):
                    r = d.at(o)
                    if policy.is_filler(list(r.headers)):
                        continue
                    got = (r.key, r.value, tuple(policy.user_headers(list(r.headers))), r.timestamp)
                    if got not in self.history.get((p, o), []):
                        self.out.violations.append(f"partition {p}: offset {o} holds a record no source had there")
                        break
                continue
            problem = self.replica_problem(p, s, d)
            if problem is None and d.end != s.end:
                problem = f"partition {p}: the replica ends at {d.end}, its source at {s.end}"
            if problem is not None:
                self.out.violations.append(
                    f"not caught up or in ERROR {SETTLE_SECONDS:.0f} s after the faults: {problem}"
                )

    def running(self, g: SimGateway) -> bool:
        """Alive and running now: not frozen, and not standing still past its pause watch's limit (one gateway's step
        that waits moves the clock for all; one that stood still that long lets everything go at its next step,
        before it writes: pauses.py)."""
        return g.alive and self.clock.now >= g.frozen_until and self.clock.now - g.stepped_at <= g.gw.pause_watch.limit

    def check_write(self, broker: Broker, topic: str, partition: int, rec: Any) -> None:
        """A record lands in a replica partition: no other running gateway may hold that partition then."""
        if broker is not self.dst or topic != self.dst_kt or not rec.gateway:
            return
        unit = Unit(StreamPath("ny", "/s"), TOPIC, partition)
        for h in self.procs:
            if h.tag != rec.gateway and self.running(h) and unit in h.gw.table.units:
                writer = rec.gateway.split("#")[0]
                v = f"{unit.key} written by {writer} while {h.gw.id} holds it (t={self.clock.now - 1000:.2f})"
                if v not in self.out.violations:
                    self.out.violations.append(v)

    def check_owners(self) -> None:
        held: dict[Unit, str] = {}
        for g in self.live():
            if not self.running(g):
                continue
            for unit in g.gw.table.units:
                if unit in held:
                    # Held by two for a moment (a static member's return fences the seat another gateway adopted:
                    # the adopter learns it at its next poll); a record written meanwhile is check_write's.
                    self.out.held_twice += 1
                held[unit] = g.gw.id

    def check_uptodate(self) -> None:
        try:
            rows = replicas.list_replicas(self.reg, SRC)
        except Exception as e:  # noqa: BLE001 - reported as what it is
            self.out.violations.append(f"replica list failed: {e!r}")
            return
        up = bool(rows and rows[0].get("isUptodate"))
        if up:
            errored = self.errored()
            for p in range(self.config.partitions):
                s, d = self.src.partition(self.src_kt, p), self.dst.partition(self.dst_kt, p)
                bad = p in errored or s is None or d is None or d.end != s.end or self.replica_problem(p, s, d)
                if bad:
                    self.out.violations.append(f"replica list says isUptodate while partition {p} is not: {bad}")


def run_seed(seed: int, profile: str = "default") -> Outcome:
    return World(seed, profile).run()


def replay_command(seed: int, profile: str = "default") -> str:
    extra = f" --profile {profile}" if profile != "default" else ""
    return f"PYTHONPATH=. python -m tests.sim.run --seed {seed}{extra}"


def broker(world: World, name: str) -> Broker:
    return world.model.brokers[name]
