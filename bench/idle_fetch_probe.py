"""What an idle consumer costs a broker, and whether the broker answers a waiting fetch when a record arrives.

    .venv/bin/python bench/idle_fetch_probe.py [--broker tansu|noida] [--partitions 800] [--waits 10,100,500]

One broker, PARTITIONS idle partitions (topics of 4), read by CONSUMERS consumers (the partitions dealt out
between them) with `fetch.wait.max.ms` = each of --waits. For each wait it prints:
  cpu       % of one core the broker uses over --seconds while nothing is produced (CPU seconds from
            /proc/<pid>/stat), and the fetch requests per second that implies (from the consumers' statistics)
  wake      delay from producing one record into an idle partition to a consumer seeing it, median and max
            of --wakes tries at random moments: about half the wait when the broker answers a fetch only
            at its deadline, a few ms when it answers on arrival (long polling as Kafka does)
Not a test; what it finds goes to README's broker differences and BENCHMARKS.md.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="tansu", choices=["tansu", "noida"])
    ap.add_argument("--partitions", type=int, default=800)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--waits", default="10,100,500")
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
        print(f"{a.broker}: {len(tps)} idle partitions, {a.consumers} consumer(s); broker alone {base} % of a core")
        for w in [int(x) for x in a.waits.split(",")]:
            r = probe(b.bootstrap, b.pid, tps, a.consumers, w, a)
            print(
                f"fetch.wait.max.ms={w:>4}: broker {r['cpu_pct']:5.1f} % of a core, {r['fetches_s']:6.1f} fetches/s;"
                f" wake p50 {r['wake_p50_ms']} ms, max {r['wake_max_ms']} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
