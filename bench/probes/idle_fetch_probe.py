"""What an idle consumer costs a broker, and whether the broker answers a waiting fetch when a record arrives;
beside it, what watching the same idle partitions' ends with ListOffsets costs instead (no fetch at all).

    .venv/bin/python bench/probes/idle_fetch_probe.py [--broker tansu|noida] [--partitions 800] [--waits 10,100,500]
        [--end-checks 20,50,100]

One broker, PARTITIONS idle partitions (topics of 4), read by CONSUMERS consumers (the partitions dealt out
between them) with `fetch.wait.max.ms` = each of --waits. For each wait it prints:
  cpu       % of one core the broker uses over --seconds while nothing is produced (CPU seconds from
            /proc/<pid>/stat), and the fetch requests per second that implies (from the consumers' statistics)
  wake      delay from producing one record into an idle partition to a consumer seeing it, median and max
            of --wakes tries at random moments: about half the wait when the broker answers a fetch only
            at its deadline, a few ms when it answers on arrival (long polling as Kafka does)
For each --end-checks period (ms; "" for none) one client asks for the latest offset of every partition in one
ListOffsets request of at most --chunk partitions (offsets_for_times with -1, as replication/quiet.py's EndWatch does) every period, and it prints
the broker's % of a core, the client's own (the whole probe process: what a gateway would pay), the request's
median time, and the wake: ms from producing one record into an idle partition until a request sees its end move.
Not a test; what it finds goes to docs/brokers.md's broker differences and BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from streamrepl.local import EphemeralClusters  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def probe(
    bootstrap: str, pid: int, tps: list[TopicPartition], consumers: int, wait_ms: int, a: argparse.Namespace
) -> dict:
    fetches = [0] * consumers

    def on_stats(i: int):
        def got(text: str) -> None:
            st = json.loads(text)
            fetches[i] = sum(b.get("req", {}).get("Fetch", 0) for b in st.get("brokers", {}).values())

        return got

    cs = []
    for i in range(consumers):
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"probe-{wait_ms}-{i}",
                "fetch.wait.max.ms": wait_ms,
                "enable.partition.eof": False,
                "statistics.interval.ms": 1000,
                "stats_cb": on_stats(i),
            }
        )
        c.assign([TopicPartition(tp.topic, tp.partition, tp.offset) for tp in tps[i::consumers]])
        cs.append(c)
    seen: dict[tuple[str, int], float] = {}
    stop = threading.Event()

    def pump(c: Consumer) -> None:
        while not stop.is_set():
            for m in c.consume(100, timeout=0.05):
                if m.error() is None:
                    seen[(m.topic(), m.partition())] = time.monotonic()

    threads = [threading.Thread(target=pump, args=(c,), daemon=True) for c in cs]
    for t in threads:
        t.start()
    time.sleep(3)  # connected, first fetches answered
    f0, c0, t0 = sum(fetches), cpu_seconds(pid), time.monotonic()
    time.sleep(a.seconds)
    time.sleep(1.1)  # one more statistics interval
    dt = time.monotonic() - t0
    row = {
        "wait_ms": wait_ms,
        "cpu_pct": round(100 * (cpu_seconds(pid) - c0) / dt, 1),
        "fetches_s": round((sum(fetches) - f0) / dt, 1),
    }
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    delays = []
    for _ in range(a.wakes):
        time.sleep(random.uniform(0.2, 0.2 + 2 * wait_ms / 1000))
        tp = random.choice(tps)
        key = (tp.topic, tp.partition)
        seen.pop(key, None)
        sent = time.monotonic()
        p.produce(tp.topic, b"x", partition=tp.partition)
        p.flush(5)
        while key not in seen and time.monotonic() - sent < 10:
            time.sleep(0.001)
        delays.append(1000 * (seen.get(key, time.monotonic()) - sent))
    row["wake_p50_ms"] = round(statistics.median(delays), 1)
    row["wake_max_ms"] = round(max(delays), 1)
    stop.set()
    for t in threads:
        t.join()
    for c in cs:
        c.close()
    return row


def end_check_probe(bootstrap: str, pid: int, tps: list[TopicPartition], period_ms: int, a: argparse.Namespace) -> dict:
    """ListOffsets requests (latest) for every partition each `period_ms`, from a thread, as a gateway would."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{period_ms}", "isolation.level": "read_committed"})
    ask = [TopicPartition(tp.topic, tp.partition, -1) for tp in tps]
    # librdkafka matches each answer to its request by a linear search: one request for 800 partitions cost the
    # client about 3 ms of CPU, four of 200 1.4 ms; --chunk partitions a request
    chunks = [ask[i : i + a.chunk] for i in range(0, len(ask), a.chunk)]
    ends: dict[tuple[str, int], int] = {}
    moved: dict[tuple[str, int], float] = {}
    took: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            t = time.monotonic()
            got = [tp for chunk in chunks for tp in c.offsets_for_times(chunk, timeout=5)]
            now = time.monotonic()
            took.append(now - t)
            for tp in got:
                key = (tp.topic, tp.partition)
                if key in ends and tp.offset > ends[key]:
                    moved[key] = now
                ends[key] = tp.offset
            stop.wait(max(0.0, period_ms / 1000 - (time.monotonic() - t)))

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    time.sleep(3)
    me = os.getpid()
    n0, c0, m0, t0 = len(took), cpu_seconds(pid), cpu_seconds(me), time.monotonic()
    time.sleep(a.seconds)
    dt = time.monotonic() - t0
    row = {
        "period_ms": period_ms,
        "cpu_pct": round(100 * (cpu_seconds(pid) - c0) / dt, 1),
        "client_cpu_pct": round(100 * (cpu_seconds(me) - m0) / dt, 1),
        "requests_s": round((len(took) - n0) / dt, 1),
        "request_ms_p50": round(1000 * statistics.median(took[n0:]), 1),
    }
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    delays = []
    for _ in range(a.wakes):
        time.sleep(random.uniform(0.2, 0.2 + 2 * period_ms / 1000))
        tp = random.choice(tps)
        key = (tp.topic, tp.partition)
        moved.pop(key, None)
        sent = time.monotonic()
        p.produce(tp.topic, b"x", partition=tp.partition)
        p.flush(5)
        while key not in moved and time.monotonic() - sent < 10:
            time.sleep(0.001)
        delays.append(1000 * (moved.get(key, time.monotonic()) - sent))
    row["wake_p50_ms"] = round(statistics.median(delays), 1)
    row["wake_max_ms"] = round(max(delays), 1)
    stop.set()
    th.join()
    c.close()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="tansu", choices=["tansu", "noida"])
    ap.add_argument("--partitions", type=int, default=800)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--waits", default="10,100,500")
    ap.add_argument("--end-checks", default="20,50,100", help='ListOffsets periods in ms ("": none)')
    ap.add_argument("--chunk", type=int, default=200, help="partitions per ListOffsets request")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--wakes", type=int, default=10)
    a = ap.parse_args()
    with EphemeralClusters(["probe"], broker=a.broker) as ec:
        b = ec.brokers["probe"]
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        names = [f"idle{i}" for i in range((a.partitions + 3) // 4)]
        for f in admin.create_topics([NewTopic(n, 4, 1) for n in names]).values():
            f.result(60)
        tps = [TopicPartition(n, i, 0) for n in names for i in range(4)][: a.partitions]
        c0, t0 = cpu_seconds(b.pid), time.monotonic()
        time.sleep(5)
        base = round(100 * (cpu_seconds(b.pid) - c0) / (time.monotonic() - t0), 1)
        print(
            f"{a.broker}: {len(tps)} idle partitions, {a.consumers} consumer(s), {a.chunk} partitions a ListOffsets;"
            f" broker alone {base} % of a core"
        )
        for w in [int(x) for x in a.end_checks.split(",") if x.strip()]:
            r = end_check_probe(b.bootstrap, b.pid, tps, w, a)
            print(
                f"ListOffsets every {w:>4} ms: broker {r['cpu_pct']:5.1f} % of a core, client {r['client_cpu_pct']} %,"
                f" {r['requests_s']} requests/s of {r['request_ms_p50']} ms; wake p50 {r['wake_p50_ms']} ms,"
                f" max {r['wake_max_ms']} ms",
                flush=True,
            )
        for w in [int(x) for x in a.waits.split(",") if x.strip()]:
            r = probe(b.bootstrap, b.pid, tps, a.consumers, w, a)
            print(
                f"fetch.wait.max.ms={w:>4}: broker {r['cpu_pct']:5.1f} % of a core, {r['fetches_s']:6.1f} fetches/s;"
                f" wake p50 {r['wake_p50_ms']} ms, max {r['wake_max_ms']} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
