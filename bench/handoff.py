"""Benchmark: how fast a replica partition is written again when the gateway writing it stops, per broker.

Run:  .venv/bin/python bench/handoff.py [--brokers tansu,noida] [--rate 2000]

For each broker (Tansu, noida-db) and each way a gateway stops — a planned stop (SIGTERM: the gateway drains, and
leaves its group where the broker handles a LeaveGroup) and a crash (SIGKILL: nothing is said to the broker) — two
gateways replicate one topic of 4 partitions while a producer writes `--rate` records/s. The gateway that owns
partition 0 gets the signal; the clock runs from the signal to the next record applied to partition 0 by the other
gateway. Where no record comes within the session + 20 s (noida-db never expires a dead member), the figure is the
time until `stream replica list` reports the stall instead, and the victim is then started again under its id (what
that report says to do); the time from that restart to the next record on partition 0 is printed too. Every record is
compared at the end, per partition, offset by offset (lost / doubled / misplaced must all be 0).

Printed beside each figure: the yardsticks it is measured against, taken in the same run: the gateways' session
timeout, and the broker's own time to complete a join of a new group (the floor of any rebalance on that broker).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from data import COMPRESSION, Records
from provenance import provenance
from run import PARTITIONS, compare_copies, join_wait  # bench/ is on the path: this file runs as a script

from streamrepl import kafka, settings
from streamrepl.local import EphemeralClusters
from streamrepl.replication.reports import REPORT_SECONDS

PY = sys.executable
SRC, DST = "sanfrancisco", "newyork"
GRACE = 20.0  # seconds past the session after which a partition that did not move counts as "not moved"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([PY, "-m", "streamrepl", *args], capture_output=True, text=True, env=os.environ)
    if r.returncode != 0:
        raise RuntimeError(f"streamrepl {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def start_gateway(logdir: Path, name: str) -> subprocess.Popen:
    out = open(logdir / f"{name}.log", "a")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        # Unsupervised: the signal must reach the gateway itself. Under its supervisor (the default) a SIGKILL of the
        # supervisor reaches the worker as the SIGTERM of its parent-death signal, a planned stop, not a crash.
        [PY, "-m", "streamrepl", "gateway", "start", "-cluster", DST, "-id", name, "-supervise", "false"],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=os.environ,
    )


def owners(dst: str) -> tuple[dict[str, list[str]], dict[str, float]]:
    """gateway id -> the replica partitions of `dst` it reports writing (cluster gateway list), and gateway id -> how
    old its last report was when read (s, as of this call's return)."""
    rows = json.loads(cli("cluster", "gateway", "list", "-dstcluster", DST, "-json").stdout)["data"]
    held = {r["gateway"]: [u for u in str(r.get("replicates", "")).split() if u.startswith(dst + ":")] for r in rows}
    return held, {r["gateway"]: float(r.get("lastseen", 0)) for r in rows}


class OwnerWatch:
    """The owner of `unit` among the gateways `among`, once their reports have named the same settled split (each of
    them holding partitions, every one of `units` held by exactly one) for longer than `span` seconds.

    A gateway reports what it holds every REPORT_SECONDS, and at once when its counts change, so a report can lag a
    rebalance by up to a report period: a gateway killed on the strength of one may no longer own the partition (a
    noida-db run at 0 ms measured a "takeover" of 0.23 s so: the survivor had written it since before the kill). A
    split unchanged for longer than a period has been reported by each gateway since it held it."""

    def __init__(self, unit: str, among: set[str], units: set[str], span: float):
        self.unit, self.among, self.units, self.span = unit, among, units, span
        self._split: dict[str, frozenset[str]] | None = None
        self._since = 0.0

    def see(self, now: float, owners: dict[str, list[str]]) -> str | None:
        split = {g: frozenset(u) for g, u in owners.items() if g in self.among}
        held = [u for units in split.values() for u in units]
        settled = (
            set(split) == self.among and all(split.values()) and len(held) == len(set(held)) and set(held) == self.units
        )
        if not settled:
            self._split = None
            return None
        if split != self._split:
            self._split, self._since = split, now
            return None
        if now - self._since <= self.span:
            return None
        return next(g for g, units in split.items() if self.unit in units)


def wait_for_owner(dst: str, unit: str, among: set[str], timeout: float = 90) -> tuple[str, dict, float]:
    """The owner of `unit` (OwnerWatch), the split the reports named, and when (time.perf_counter()) the owner's last
    report was written, about (a report's age is given in tenths of a second)."""
    units = {f"{dst}:t[{i}]" for i in range(PARTITIONS)}
    watch = OwnerWatch(unit, among, units, span=REPORT_SECONDS + 1.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held, ages = owners(dst)
        read = time.perf_counter()
        found = watch.see(time.monotonic(), held)
        if found is not None:
            return found, {g: sorted(u) for g, u in held.items() if g in among}, read - ages[found]
        time.sleep(0.5)
    raise RuntimeError(f"no settled owner of {unit} among {sorted(among)} in {timeout:.0f} s")


def stall_reported(src: str) -> bool:
    rows = json.loads(cli("stream", "replica", "list", "-path", src, "-json").stdout)["data"]
    return any("stopped reporting" in str(r.get("lasterror", "")) for r in rows)


def compare(ec: EphemeralClusters, topic: str, src_ends: dict) -> dict[str, int]:
    return compare_copies(ec_cluster(ec, SRC), ec_cluster(ec, DST), topic, src_ends)


def ec_cluster(ec: EphemeralClusters, name: str) -> object:
    from streamrepl import registry

    return registry.load(str(ec.registry_path)).get(name)


def one_run(ec: EphemeralClusters, logdir: Path, name: str, sig: signal.Signals, rate: int) -> dict:
    src, dst = f"/{SRC}/{name}", f"/{DST}/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", str(PARTITIONS))
    cli("stream", "topic", "create", "-path", src, "-topic", "t")
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "replica", "add", "-path", src, "-replica", dst)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    topic = f"sr.{name}.t"
    names = [f"{name}-a", f"{name}-b"]
    gws = {n: start_gateway(logdir, n) for n in names}
    p = Producer({"bootstrap.servers": ec.brokers[SRC].bootstrap, "linger.ms": 1, "compression.type": COMPRESSION})
    data = Records(100)
    stop = threading.Event()
    sent = [0]

    def producer() -> None:
        while not stop.is_set():
            for _ in range(rate // 100):
                i = sent[0]  # bench/data.py's keys are unique: compare_copies matches records by key
                p.produce(topic, data.value(i), data.key(i), partition=i % PARTITIONS, headers=data.headers(i))
                sent[0] += 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(30)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    dst_c = kafka.consumer(ec_cluster(ec, DST))  # type: ignore[arg-type]
    tp = TopicPartition(topic, 0)
    session_s = settings.gateway().session_ms / 1000
    moved = stall = back = None
    try:
        # Killed as soon as the reports have named the same owner for a report period (at least 6 s of replication).
        victim_name, split, last_report = wait_for_owner(dst, f"{dst}:t[0]", set(names))
        victim = gws.pop(victim_name)
        victim.send_signal(sig)
        signalled, signalled_at = time.perf_counter(), time.time()  # the wall clock: to read the gateways' logs by
        if sig == signal.SIGKILL:
            victim.wait()
            time.sleep(0.2)  # what the victim had on the wire has landed by now
        frozen = kafka.true_end(dst_c, tp)
        stall_seen: list[float] = []  # the stall report, looked for meanwhile in a thread (a CLI run each time)

        def look_for_stall() -> None:
            while not stall_seen and moved is None and time.perf_counter() - signalled < session_s + GRACE + 30:
                if stall_reported(src):
                    stall_seen.append(time.perf_counter() - signalled)
                time.sleep(0.5)

        threading.Thread(target=look_for_stall, daemon=True).start()
        while time.perf_counter() - signalled < session_s + GRACE + 30:
            now = time.perf_counter()
            end = kafka.true_end(dst_c, tp)
            if end > frozen and (sig == signal.SIGKILL or victim.poll() is not None):
                moved = now - signalled
                break
            if sig != signal.SIGKILL and victim.poll() is None:
                frozen = end  # the victim drains what it has before it leaves; count from its exit
            if stall_seen and now - signalled > session_s + GRACE:
                break
            time.sleep(0.05)
        stall = stall_seen[0] if stall_seen else None
        if moved is None:
            gws[victim_name] = start_gateway(logdir, victim_name)  # the way out the stall message names
            restarted, frozen = time.perf_counter(), kafka.true_end(dst_c, tp)
            while time.perf_counter() - restarted < 60 and back is None:
                if kafka.true_end(dst_c, tp) > frozen:
                    back = time.perf_counter() - restarted
                time.sleep(0.05)
        victim.wait(60)
        time.sleep(2)
    finally:
        stop.set()
        th.join()
    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    src_c = kafka.consumer(ec_cluster(ec, SRC))  # type: ignore[arg-type]
    src_ends = kafka.true_ends(src_c, tps)
    deadline = time.monotonic() + 180
    while kafka.true_ends(dst_c, tps) != src_ends and time.monotonic() < deadline:
        time.sleep(0.5)
    dst_c.close()
    src_c.close()
    for gw in gws.values():
        gw.terminate()
    for gw in gws.values():
        try:
            gw.wait(30)
        except subprocess.TimeoutExpired:
            gw.kill()
    return {
        "signal": sig.name,
        "victim": victim_name,
        "owners_at_signal": split,
        # where a dead gateway's seat is adopted (noida-db) it is when its reports have been silent long enough
        "victim_reported_s_before_signal": round(signalled - last_report, 1),
        "signalled_at": datetime.fromtimestamp(signalled_at).strftime("%H:%M:%S.%f")[:-3],
        "seconds_to_next_record": round(moved, 2) if moved is not None else None,
        "seconds_to_stall_reported": round(stall, 2) if stall is not None else None,
        "seconds_from_restart_to_next_record": round(back, 2) if back is not None else None,
        "records": sum(src_ends.values()),
        **compare(ec, topic, src_ends),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default="tansu,noida")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    args = ap.parse_args()
    about = provenance(args.note)
    results = []
    for broker in args.brokers.split(","):
        logdir = Path(tempfile.mkdtemp(prefix=f"bench-handoff-{broker}-"))
        with EphemeralClusters([SRC, DST], broker=broker) as ec:
            os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
            session_ms = settings.gateway().session_ms
            runs = []
            for sig in (signal.SIGTERM, signal.SIGKILL):
                res = one_run(ec, logdir, f"ho{broker[0]}{sig.name[3:].lower()}", sig, args.rate)
                res.update(broker=broker, session_s=session_ms / 1000, logs=str(logdir))
                runs.append(res)
                print(json.dumps(res), flush=True)
            floor = join_wait(ec.brokers[DST].bootstrap, session_ms)  # the slot topic exists by now
            results += [dict(r, broker_join_s=floor) for r in runs]
    print()
    print(
        "| broker | stop | next record on the partition (s) | stall reported (s) | restarted: next record (s) |"
        " session (s) | broker's join (s) | records | lost | doubled | misplaced |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        moved = r["seconds_to_next_record"]
        stall = r["seconds_to_stall_reported"]
        print(
            f"| {r['broker']} | {r['signal']} | {moved if moved is not None else 'not moved'} |"
            f" {stall if stall is not None else '-'} | {r['seconds_from_restart_to_next_record'] or '-'} |"
            f" {r['session_s']} | {r['broker_join_s']} | {r['records']:,} |"
            f" {r['lost']} | {r['doubled']} | {r['misplaced']} |"
        )
    if args.json:
        about["data"] = Records(100).about()
        Path(args.json).write_text(json.dumps({**about, "runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
