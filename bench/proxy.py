"""Benchmark: produce throughput and p50/p99 latency through `streamrepl proxy start` against the broker direct.

Run:  .venv/bin/python bench/proxy.py [--records N] [--latency-samples N] [--rounds N] [--sync] [--json out.json]

One embedded broker (Tansu, or $STREAMREPL_LOCAL_BROKER) and one proxy in front of it, both started here; each round
measures direct and through the proxy one after the other, so that the ratios come from the same machine at the same
time. Throughput: N records of 100 bytes, acks=all, librdkafka's batching, until flush() returns. Latency: one
record at a time, produce then flush, the time to its acknowledgement. The goal (issue 39) for a stream without a
synchronous replica: >= 0.8x the direct throughput, p99 within 5 ms of direct.

--sync adds a second cluster, a stream with a synchronous replica there and a gateway, and measures through the proxy
to a topic of that stream too ("proxy_sync": every acknowledgement held until the replica holds the record). The goal:
p50 about direct + one replication round.
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
REPLICA_CLUSTER = "newyork"
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


def sync_stream(registry: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A stream of CLUSTER with a synchronous replica on REPLICA_CLUSTER and a gateway copying it; its Kafka topic."""
    from streamrepl import kafka, replicas, stream_ops, topics
    from streamrepl import registry as registry_mod
    from streamrepl.paths import StreamPath, kafka_topic_name

    reg = registry_mod.load(registry)
    src, dst = f"/{CLUSTER}/benchsync", f"/{REPLICA_CLUSTER}/benchsync"
    stream_ops.create(reg, src, {"defaultpartitions": 4})
    stream_ops.create(reg, dst, {"defaultpartitions": 4})
    topics.create(reg, src, "bench")
    replicas.add(reg, src, dst, synchronous=True)
    replicas.upstream_add(reg, dst, src)
    gateway = subprocess.Popen(
        [BIN, "gateway", "start", "-cluster", REPLICA_CLUSTER, "-id", "bench-gw", "-supervise", "false"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "STREAMREPL_CLUSTERS": registry},
    )
    topic = kafka_topic_name(StreamPath(CLUSTER, "/benchsync"), "bench")
    p = kafka.producer(reg.get(CLUSTER))
    for part in range(4):
        p.produce(topic, b"warm-up", partition=part)
    assert p.flush(30) == 0
    replica_topic = kafka_topic_name(StreamPath(REPLICA_CLUSTER, "/benchsync"), "bench")
    deadline = time.monotonic() + 180
    while True:  # the gateway runs and copies: the proxy's holds measure replication, not the gateway's start
        reader = kafka.consumer(reg.get(REPLICA_CLUSTER))
        try:
            ends = kafka.true_ends(reader, [kafka.TopicPartition(replica_topic, part) for part in range(4)], timeout=5)
            if all(e >= 1 for e in ends.values()):
                return topic, gateway
        except Exception:  # noqa: BLE001 - the replica topic is not made yet
            pass
        finally:
            reader.close()
        assert time.monotonic() < deadline, "the gateway did not start copying"
        time.sleep(0.5)


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
    ap.add_argument("--sync", action="store_true", help="also through the proxy to a stream with a synchronous replica")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args()
    gateway = None
    with EphemeralClusters([CLUSTER, REPLICA_CLUSTER] if a.sync else [CLUSTER]) as ec:
        direct = ec.brokers[CLUSTER].bootstrap
        sync_topic = ""
        if a.sync:
            sync_topic, gateway = sync_stream(str(ec.registry_path))
        proc, through = start_proxy(str(ec.registry_path))  # after the stream: it holds it from its first Produce
        try:
            admin = AdminClient({"bootstrap.servers": direct})
            admin.create_topics([NewTopic("bench-proxy", 4, 1)])["bench-proxy"].result(30)
            res: dict[str, dict[str, list[float]]] = {
                "direct": {"tput": [], "lat": []},
                "proxy": {"tput": [], "lat": []},
            }
            series = [("direct", direct, "bench-proxy"), ("proxy", through, "bench-proxy")]
            if a.sync:
                res["proxy_sync"] = {"tput": [], "lat": []}
                series.append(("proxy_sync", through, sync_topic))
            for _ in range(a.rounds):
                for name, bs, topic in series:
                    res[name]["tput"].append(throughput(bs, topic, a.records))
                    res[name]["lat"] += latencies(bs, topic, a.latency_samples)
        finally:
            proc.terminate()
            proc.wait(60)
            if gateway is not None:
                gateway.terminate()
                gateway.wait(60)
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
    if "proxy_sync" in summary:
        summary["ratio"]["sync_throughput"] = (
            summary["proxy_sync"]["records_per_s"] / summary["direct"]["records_per_s"]
        )
        summary["ratio"]["sync_p50_added_ms"] = summary["proxy_sync"]["p50_ms"] - summary["direct"]["p50_ms"]
        summary["ratio"]["sync_p99_added_ms"] = summary["proxy_sync"]["p99_ms"] - summary["direct"]["p99_ms"]
    print(json.dumps(summary, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
