"""Benchmark: what `-networkcompression` buys across a bandwidth-capped line (issue 28, beside bench/wan.py).

Run:  PYTHONPATH=$PWD .venv/bin/python bench/probes/wan_compression.py [--mbit 100] [--rtt 0] [--records 40000]
                                                                [--codecs off,lz4,zstd] [--json out.json]

The source behind bench/wan.py's delay line capped at MBIT (each direction), the round trip RTT. For each codec
the source's own producer used (none, lz4: what the stored batches are) and each `-networkcompression` of the link,
RECORDS records of 1 KiB (half random hex, half repeated text: about 2:1 for lz4) are preloaded, a paused link is
resumed and one gateway timed until the replica holds them all; the idempotent C relay (bench/relay.c) is run through
the same capped line for each source codec. A Kafka fetch carries the batches as the source stored them: no client
setting asks a broker for another codec. Not a pytest test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: run.py, wan.py
import run as bench  # noqa: E402
import wan  # noqa: E402

PARTITIONS = 4


def value(i: int) -> bytes:
    return (os.urandom(256).hex() + "the quick brown fox jumps over the lazy dog " * 12)[:1024].encode()


def fill(bootstrap: str, topic: str, n: int, codec: str) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": codec, "batch.num.messages": 10000}
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, value(i), str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError(f"records not delivered to {topic}")


def gateway_run(a: argparse.Namespace, logdir: Path, line: wan.DelayLine, sb: str, codec: str, net: str) -> dict:
    from streamrepl import kafka, registry

    dst_cluster = registry.load().get(bench.DST)
    name = f"cz{codec}{net}"
    src, dst = bench.new_link(name, ["t"], True, "-networkcompression", net, partitions=PARTITIONS)
    bench.cli("stream", "topic", "create", "-path", dst, "-topic", "t")
    fill(sb, f"sr.{name}.t", a.records, codec)
    line.set(a.rtt, a.mbit)
    gw = bench.start_gateway(logdir, name, "-supervise", "false")
    try:
        bench.slots_settled(logdir, [name])
        time.sleep(1)
        bench.cli("stream", "replica", "resume", "-path", src, "-replica", dst)
        t0 = time.perf_counter()
        c = kafka.consumer(dst_cluster)
        got = 0
        while time.perf_counter() - t0 < 300 and got < a.records:
            got = bench.landed(dst_cluster, f"sr.{name}.t", a.records, c, list(range(PARTITIONS)) if got else None)
            time.sleep(0.05)
        dt = time.perf_counter() - t0
        c.close()
    finally:
        bench.stop_gateways([gw])
        line.set(0)
        bench.cli("stream", "replica", "remove", "-path", src, "-replica", dst, check=False)
    return {"records_s": round(got / dt), "seconds": round(dt, 3), "complete": got >= a.records}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mbit", type=float, default=100)
    ap.add_argument("--rtt", type=float, default=0)
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--codecs", default="off,lz4,zstd", help="the links' -networkcompression values")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    res: dict = {
        "machine": __import__("provenance").machine(),
        "started": time.time(),
        "mbit": a.mbit,
        "rtt_ms": a.rtt,
        "rows": [],
    }
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-wancz-"))
    with wan.clusters_behind_line(logdir / "brokers", {}) as b:
        line, sb, db = b.line, b.source, b.dest
        for codec in ("none", "lz4"):
            ctopic = f"cz.c.{codec}"
            bench.create_topic(sb, ctopic, PARTITIONS)
            fill(sb, ctopic, a.records, codec)
            bench.create_topic(db, f"{ctopic}.out", PARTITIONS)
            line.set(a.rtt, a.mbit)
            dt = bench.c_relay(sb, db, ctopic, f"{ctopic}.out", a.records, PARTITIONS, wan.IDEMPOTENT)
            line.set(0)
            row: dict = {"source_codec": codec, "load": os.getloadavg()[0]}
            row["c_relay"] = {"error": dt} if isinstance(dt, str) else {"records_s": round(a.records / dt)}
            for net in a.codecs.split(","):
                bench.log(f"source {codec}, -networkcompression {net}")
                row[f"gateway_{net}"] = gateway_run(a, logdir, line, sb, codec, net)
            bench.log(json.dumps(row))
            res["rows"].append(row)
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
