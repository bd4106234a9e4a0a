"""Benchmark: produce throughput and p50/p99 latency through `streamrepl proxy start` against the broker direct.

Run:  .venv/bin/python bench/proxy.py [--records N] [--latency-samples N] [--rounds N] [--json out.json]

One embedded broker (Tansu, or $STREAMREPL_LOCAL_BROKER) and one proxy in front of it, both started here; each round
measures direct and through the proxy one after the other, so that the ratios come from the same machine at the same
time. Throughput: N records of 100 bytes, acks=all, librdkafka's batching, until flush() returns. Latency: one
record at a time, produce then flush, the time to its acknowledgement. The goal (issue 39) for a stream without a
synchronous replica: >= 0.8x the direct throughput, p99 within 5 ms of direct.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streamrepl.local import EphemeralClusters

CLUSTER = "sanfrancisco"
VALUE = b"v" * 100
BIN = str(Path(sys.executable).with_name("streamrepl"))


def start_proxy(registry: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [BIN, "proxy", "start", "-json", "-cluster", CLUSTER, "-listen", "127.0.0.1:0", "-loglevel", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "STREAMREPL_CLUSTERS": registry},
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.rstrip() == "}":
            break
    return proc, json.loads("".join(lines))["data"][0]["advertise"]


def throughput(bootstrap: str, topic: str, records: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    p.produce(topic, VALUE)
    p.flush(30)  # connections and metadata outside the measured time
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return records / (time.perf_counter() - t0)


def latencies(bootstrap: str, topic: str, samples: int) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    p.produce(topic, VALUE)
    p.flush(30)
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        p.produce(topic, VALUE)
        assert p.flush(30) == 0
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--latency-samples", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args()
    with EphemeralClusters([CLUSTER]) as ec:
        direct = ec.brokers[CLUSTER].bootstrap
        proc, through = start_proxy(str(ec.registry_path))
        try:
            admin = AdminClient({"bootstrap.servers": direct})
            admin.create_topics([NewTopic("bench-proxy", 4, 1)])["bench-proxy"].result(30)
            res: dict[str, dict[str, list[float]]] = {
                "direct": {"tput": [], "lat": []},
                "proxy": {"tput": [], "lat": []},
            }
            for _ in range(a.rounds):
                for name, bs in (("direct", direct), ("proxy", through)):
                    res[name]["tput"].append(throughput(bs, "bench-proxy", a.records))
                    res[name]["lat"] += latencies(bs, "bench-proxy", a.latency_samples)
        finally:
            proc.terminate()
            proc.wait(60)
    summary = {
        name: {
            "records_per_s": statistics.median(r["tput"]),
            "p50_ms": pct(r["lat"], 50),
            "p99_ms": pct(r["lat"], 99),
        }
        for name, r in res.items()
    }
    summary["ratio"] = {
        "throughput": summary["proxy"]["records_per_s"] / summary["direct"]["records_per_s"],
        "p99_added_ms": summary["proxy"]["p99_ms"] - summary["direct"]["p99_ms"],
        "p50_added_ms": summary["proxy"]["p50_ms"] - summary["direct"]["p50_ms"],
    }
    print(json.dumps(summary, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
