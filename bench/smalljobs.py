"""Benchmark: copystream and diffstreams end to end, in-process against Spark, for a few stream sizes.

Run:  .venv/bin/python bench/smalljobs.py [-sizes 10000,100000,1000000] [-partitions 4] [-size 100]

Each figure is a whole `streamrepl` command in a fresh process, as a user or cron runs it (interpreter start,
planning, the copy or comparison, and for Spark its start-up), on two embedded brokers. Yardsticks of the same
run: `streamrepl --help` (a process that only starts) and the plain producer that fills the source. The
ratio spark/in-process above 1 means in-process is faster; where it crosses 1 is where copystream's and
diffstreams' limits (streamrepl/bulk/inprocess.py) belong. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Producer

from streamrepl import stream_ops, streams, topics
from streamrepl.errors import StreamreplError
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import load as load_registry


def fill(bootstrap: str, kt: str, n: int, partitions: int, size: int) -> float:
    """n records (key, header, timestamp, `size`-byte value) into kt; the producer's records/s."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    value, headers, ts = b"v" * size, [("seq", b"12345678")], int(time.time() * 1000)
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(kt, value, key=b"k%d" % i, partition=i % partitions, headers=headers, timestamp=ts + i)
                break
            except BufferError:
                p.poll(0.005)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120):
        raise StreamreplError("benchmark records were not acknowledged")
    return n / (time.monotonic() - t0)


def timed(env: dict[str, str], *args: str) -> tuple[float, dict[str, Any]]:
    """Seconds of one streamrepl command in a fresh process, and its -json document."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "streamrepl", *args, "-json"], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if p.returncode != 0:
        raise StreamreplError(f"streamrepl {' '.join(args)} failed: {p.stdout[-500:]} {p.stderr[-500:]}")
    return seconds, json.loads(p.stdout)


def benchmark(sizes: list[int], partitions: int = 4, size: int = 100) -> dict[str, Any]:
    with EphemeralClusters(["benchsrc", "benchdst"]) as ec:
        env = dict(os.environ, STREAMREPL_CLUSTERS=str(ec.registry_path))
        reg = load_registry(str(ec.registry_path))
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "streamrepl", "--help"], env=env, capture_output=True, check=True)
        out: dict[str, Any] = {"partitions": partitions, "size": size, "help_seconds": round(time.monotonic() - t0, 2)}
        rows = []
        for n in sizes:
            src = f"/benchsrc/s{n}"
            stream_ops.create(reg, src, {"defaultpartitions": partitions})
            topics.create(reg, src, "t", partitions)
            rate = fill(
                ec.brokers["benchsrc"].bootstrap,
                kafka_topic_name(streams.resolve(reg, src).path, "t"),
                n,
                partitions,
                size,
            )
            row: dict[str, Any] = {"records": n, "producer_rps": round(rate)}
            for engine, flag in (("inprocess", "false"), ("spark", "true")):
                dst = f"/benchdst/{engine}{n}"
                secs, doc = timed(env, "copystream", "-src", src, "-dst", dst, "-mapreduce", flag)
                if doc["data"][0]["records"] != n:
                    raise StreamreplError(f"copy of {n} records copied {doc['data'][0]['records']}")
                row[f"copy_{engine}_s"] = round(secs, 2)
                row[f"copy_{engine}_spark_startup_s"] = doc["data"][0]["sparkstartupseconds"]
                secs, doc = timed(env, "diffstreams", "-src", src, "-dst", dst, "-mapreduce", flag)
                if not all(r["match"] for r in doc["data"]):
                    raise StreamreplError(f"the copy of {n} records does not match its source")
                row[f"diff_{engine}_s"] = round(secs, 2)
            row["copy_spark_over_inprocess"] = round(row["copy_spark_s"] / row["copy_inprocess_s"], 2)
            row["diff_spark_over_inprocess"] = round(row["diff_spark_s"] / row["diff_inprocess_s"], 2)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
        out["rows"] = rows
        return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bench/smalljobs.py", description="in-process against Spark, by size")
    ap.add_argument("-sizes", default="10000,100000,1000000", help="records per stream, comma-separated")
    ap.add_argument("-partitions", type=int, default=4)
    ap.add_argument("-size", type=int, default=100, help="value bytes (default 100)")
    a = ap.parse_args(argv)
    print(json.dumps(benchmark([int(s) for s in a.sizes.split(",")], a.partitions, a.size), indent=1))


if __name__ == "__main__":
    main()
