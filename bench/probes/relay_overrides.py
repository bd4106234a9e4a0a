"""Benchmark: what the gateway's client settings cost the C relay (bench/relay.c), on one pair of Tansu brokers.

Run:  .venv/bin/python bench/probes/relay_overrides.py [--records N] [--sizes 100,1024] [--reps 3] [--sets base,gateway,...]

The source is filled once per size; then each set of `c.`/`p.` overrides (consumer / producer settings of the C
relay) runs in turn, round after round, so that the sets alternate within minutes on a shared machine. Prints
records/s and CPU per record (the relay's own process + both brokers'), as bench/run.py does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: run.py, wan.py
import run as bench  # noqa: E402

from streamrepl.local import EphemeralClusters  # noqa: E402

#: The gateway's settings where they differ from the C relay's (kafka/clients.py, replication/gateway.py)
GATEWAY = [
    "c.fetch.wait.max.ms=10",
    "c.isolation.level=read_committed",
    "c.enable.partition.eof=true",
    "p.enable.idempotence=true",
    "p.acks=all",
    "p.linger.ms=2",
    "p.queue.buffering.max.kbytes=65536",
    "p.queue.buffering.max.messages=200000",
]
SETS = {
    "base": [],
    "gateway": GATEWAY,
    "fetch-wait-10": ["c.fetch.wait.max.ms=10"],
    "read-committed": ["c.isolation.level=read_committed"],
    "partition-eof": ["c.enable.partition.eof=true"],
    "idempotence": ["p.enable.idempotence=true", "p.acks=all"],
    "linger-2": ["p.linger.ms=2"],
    "small-queue": ["p.queue.buffering.max.kbytes=65536", "p.queue.buffering.max.messages=200000"],
    "fetch-backoff-1s": ["c.fetch.queue.backoff.ms=1000"],  # librdkafka's default
    # What of idempotence costs the relay: the in-flight limit it implies, or the rest (sequence numbers, acks=all)
    "inflight-5": ["p.max.in.flight.requests.per.connection=5"],
    "acks-all": ["p.acks=all"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of: {', '.join(SETS)}")
    a = ap.parse_args()
    if not bench.C_RELAY.exists():
        print("no C relay: run bench/setup", file=sys.stderr)
        return 2
    n = a.records
    names = [s for s in a.sets.split(",") if s]
    with EphemeralClusters([bench.SRC, bench.DST]) as ec:
        sb, db = ec.brokers[bench.SRC].bootstrap, ec.brokers[bench.DST].bootstrap
        cpu = bench.CpuMeter([ec.brokers[bench.SRC].pid, ec.brokers[bench.DST].pid])
        k = 0
        for size in [int(x) for x in a.sizes.split(",") if x]:
            src = f"src{size}"
            bench.create_topic(sb, src)
            bench.fill(sb, src, n, b"v" * size)
            for _ in range(a.reps):
                for name in names:
                    k += 1
                    dst = f"dst{k}"
                    bench.create_topic(db, dst)
                    cpu.start()
                    t0 = time.perf_counter()
                    r = subprocess.run(
                        [str(bench.C_RELAY), sb, db, src, dst, str(bench.PARTITIONS), str(n), "o" * 36, *SETS[name]],
                        capture_output=True,
                        text=True,
                    )
                    dt = time.perf_counter() - t0
                    used = cpu.stop(n)
                    why = "" if r.returncode == 0 else f"  failed: {r.stderr.strip().splitlines()[-1:]}"
                    print(
                        f"{size:5d} B  {name:16} {n / dt / 1000:7.1f}k/s  CPU us/record"
                        f" {used['relay_cpu_us']:.2f}+{used['brokers_cpu_us']:.2f}{why}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
