"""Benchmark: the gateway's own CPU per record, without brokers, against the hand-written loop's.

Run:  .venv/bin/python bench/probes/write_cost.py [--records N] [--sizes 100,1024]

Records (key, value, one header, a timestamp; 4 partitions) are built in memory and handed, 10,000 at a time,
to what the gateway does with a fetched batch (Mover.apply_batch's grouping, then OffsetPreservingWriter.write)
and to the hand-written relay loop's body (bench/run.py), both producing into a producer that is never
connected (librdkafka queues the records; nothing is sent). CPU time of this thread, best of 5: on a machine
other work shares, CPU time moves far less than records/s, so this isolates the per-record Python work that
bench/run.py's throughput rows mix with the brokers'.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from confluent_kafka import Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from streamrepl.applier import OffsetPreservingWriter  # noqa: E402

PARTITIONS = 4
BATCH = 10_000


def hand_written(p: Producer, msgs: list[Message]) -> None:
    produce = p.produce
    for m in msgs:
        if m.error():
            continue
        produce("d", m.value(), m.key(), partition=m.partition(), headers=m.headers(), timestamp=m.timestamp()[1])


def gateway(p: Producer, msgs: list[Message]) -> None:
    writers = [
        OffsetPreservingWriter(p, "d", i, 0, "dst-uuid", "00000000-0000-4000-8000-000000000000")
        for i in range(PARTITIONS)
    ]
    for start in range(0, len(msgs), BATCH):
        by_tp: dict[tuple[str | None, int | None], list[Message]] = {}
        for m in msgs[start : start + BATCH]:
            if m.error() is None:
                by_tp.setdefault((m.topic(), m.partition()), []).append(m)
        for (_, partition), batch in by_tp.items():
            writers[partition or 0].write(batch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024")
    a = ap.parse_args()
    n = a.records
    p = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # never reached: records only queue
            "queue.buffering.max.messages": 10_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "linger.ms": 100_000,
            "log_level": 0,
        }
    )
    for size in [int(x) for x in a.sizes.split(",") if x]:
        value = b"v" * size
        msgs = [
            Message(
                topic="sr.g.t",
                partition=i % PARTITIONS,
                offset=i // PARTITIONS,
                key=str(i).encode(),
                value=value,
                headers=[("h", b"bench")],
                timestamp=(1, 1_700_000_000_000 + i),
            )
            for i in range(n)
        ]

        cost = {}
        for name, body in (("hand-written loop", hand_written), ("gateway writer", gateway)):
            best = float("inf")
            for _ in range(5):
                t0 = time.thread_time()
                body(p, msgs)
                best = min(best, time.thread_time() - t0)
                p.purge()
                p.poll(0)
            cost[name] = best / n * 1e6
        hw = cost["hand-written loop"]
        for name, us in cost.items():
            print(f"{size} B  {name:18}  {us:5.2f} us/record  {us / hw:.2f}x hand-written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
