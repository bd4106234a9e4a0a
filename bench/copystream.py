"""Benchmark: copystream's records/s beside a plain producer's.

Run:  .venv/bin/python bench/copystream.py [-n N] [-partitions P] [-size B] [-master URL] [-mapreduce false]

The copy runs on Spark unless -mapreduce false (the figures recorded before small jobs ran in-process were Spark's).

Prints the figures as JSON (bench/run.py runs it for its copystream row).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from confluent_kafka import Producer
from data import COMPRESSION, Records

from streamrepl import stream_ops, streams, topics
from streamrepl.bulk.copystream import copystream
from streamrepl.errors import StreamreplError
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import load as load_registry


def benchmark(
    n: int = 1_000_000, partitions: int = 4, size: int = 100, master: str | None = None, mapreduce: bool = True
) -> dict[str, Any]:
    """copystream's records/s for `n` records of `size` bytes, beside a plain producer's rate.

    Starts two embedded clusters and fills a source stream (`partitions` partitions) with a
    plain confluent-kafka producer: bench/data.py's records of `size`-byte values (written with
    lz4, as users write JSON). The same producer loop then writes the same records into the destination's
    broker (the ceiling), copystream copies the source stream into a new stream on that
    broker (Spark start-up reported apart), and the plain producer runs once more: the two
    plain figures show how much the machine's load moved during the run.
    """

    def plain(bootstrap: str, kt: str) -> float:
        """Records/s of a plain producer with librdkafka's defaults (and lz4)."""
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "compression.type": COMPRESSION})
        produce, poll = p.produce, p.poll
        t0 = time.monotonic()
        for i in range(n):
            k, v, h, ts = data.key(i), data.value(i), data.headers(i), data.timestamp(i)
            while True:
                try:
                    produce(kt, v, key=k, partition=i % partitions, headers=h, timestamp=ts)
                    break
                except BufferError:
                    poll(0.005)
            if i % 10_000 == 0:
                poll(0)
        left = p.flush(120)
        if left:
            raise StreamreplError(f"{left} benchmark records were not acknowledged")
        return n / (time.monotonic() - t0)

    data = Records(size)
    with EphemeralClusters(["benchsrc", "benchdst"]) as ec:
        reg = load_registry(str(ec.registry_path))
        for path in ("/benchsrc/bench", "/benchdst/plain1", "/benchdst/plain2"):
            stream_ops.create(reg, path, {"defaultpartitions": partitions})
            topics.create(reg, path, "t", partitions)

        def kt(path: str) -> str:
            return kafka_topic_name(streams.resolve(reg, path).path, "t")

        src_rate = plain(ec.brokers["benchsrc"].bootstrap, kt("/benchsrc/bench"))
        before = plain(ec.brokers["benchdst"].bootstrap, kt("/benchdst/plain1"))
        res = copystream(reg, "/benchsrc/bench", "/benchdst/copy", master=master, mapreduce=mapreduce, progress=False)
        after = plain(ec.brokers["benchdst"].bootstrap, kt("/benchdst/plain2"))
        if not res.complete or res.records != n:
            raise StreamreplError(f"benchmark copy incomplete: {res.summary()} {res.failures or res.stopped}")
        ceiling = (before + after) / 2
        return {
            "records": n,
            "size": size,
            "partitions": partitions,
            "master": (master or "local[*]") if mapreduce else "in-process",
            "producer_into_source_rps": round(src_rate),
            "plain_producer_rps_before": round(before),
            "plain_producer_rps_after": round(after),
            "copystream_rps": round(res.rate),
            "copystream_seconds": round(res.seconds, 2),
            "spark_startup_seconds": round(res.spark_seconds, 2),
            "ratio": round(res.rate / ceiling, 3),
            "data": data.about(),
        }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bench/copystream.py", description="copystream benchmark")
    ap.add_argument("-n", type=int, default=1_000_000, help="records (default 1000000)")
    ap.add_argument("-partitions", type=int, default=4, help="partitions of the source topic (default 4)")
    ap.add_argument("-size", type=int, default=100, help="value bytes (default 100)")
    ap.add_argument("-master", default=None, help="Spark master (default local[*])")
    ap.add_argument("-mapreduce", default="true", choices=["true", "false"], help="false: copy in-process")
    a = ap.parse_args(argv)
    print(json.dumps(benchmark(a.n, a.partitions, a.size, a.master, a.mapreduce == "true"), indent=1))


if __name__ == "__main__":
    # Spark's tasks are functions of streamrepl.bulk, found by module name: nothing of this script runs in them.
    main()
