"""Benchmark: time from `stream replica resume` to the first record in the replica.

Run:  .venv/bin/python bench/resume.py [--runs 5] [--broker tansu|noida]

A gateway runs for the destination cluster; each run creates a paused link whose source already holds records,
waits until the gateway has read the plan (paused: nothing to apply), then resumes the link and polls the replica's
partition end every 5 ms, from the moment the resume is in the metadata (written in this process, as
`stream replica resume` writes it). Printed beside it: the target (0.5 s) and the
gateway's plan-change poll period (the watcher asks each cluster for the end of its metadata topic that often), the
floor of what a resume can cost without a push from the metadata writer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from data import COMPRESSION, Records
from provenance import provenance  # bench/ is on the path: this file runs as a script

from streamrepl import registry, replicas
from streamrepl.local import EphemeralClusters

PY = sys.executable
TARGET = 0.5


def cli(*args: str) -> None:
    r = subprocess.run([PY, "-m", "streamrepl", *args], capture_output=True, text=True, env=os.environ)
    if r.returncode != 0:
        raise RuntimeError(f"streamrepl {' '.join(args)} failed: {r.stderr}")


def replica_end(c: Consumer, topic: str) -> int:
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
    return int(high)


def one_run(i: int, src_bs: str, dst_bs: str) -> float:
    name = f"resume{i}"
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", "1")
    cli("stream", "topic", "create", "-path", src, "-topic", "t")
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "topic", "create", "-path", dst, "-topic", "t")
    cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true")
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    p = Producer({"bootstrap.servers": src_bs, "compression.type": COMPRESSION})
    data = Records(100)
    for k in range(100):
        p.produce(f"sr.{name}.t", value=data.value(k), key=data.key(k), partition=0, headers=data.headers(k))
    p.flush(30)
    time.sleep(3)  # the gateway has read the plan with the paused link (a full read every 2 s)
    c = Consumer({"bootstrap.servers": dst_bs, "group.id": f"probe-{name}"})
    try:
        if replica_end(c, f"sr.{name}.t") != 0:
            raise RuntimeError(f"the replica of {name} holds records before the resume: the paused link was applied")
        started = time.monotonic()
        # In this process, so that the time is the gateway's alone: the resume is in the metadata when this returns.
        replicas.set_paused(registry.load(os.environ["STREAMREPL_CLUSTERS"]), src, dst, False)
        resumed = time.monotonic()
        while replica_end(c, f"sr.{name}.t") == 0:
            if time.monotonic() - started > 60:
                raise RuntimeError("no record reached the replica in 60 s")
            time.sleep(0.005)
        return time.monotonic() - resumed
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--broker", default="tansu", choices=["tansu", "noida"])
    ap.add_argument("--json", type=Path, help="also write the results to this file")
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    args = ap.parse_args()
    about = provenance(args.note)
    logdir = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    with EphemeralClusters(["sanfrancisco", "newyork"], broker=args.broker) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        src_bs, dst_bs = ec.brokers["sanfrancisco"].bootstrap, ec.brokers["newyork"].bootstrap
        with open(logdir / "gateway.log", "a") as out:
            gw = subprocess.Popen(
                [PY, "-m", "streamrepl", "gateway", "start", "-cluster", "newyork", "-id", "bench-resume"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=os.environ,
            )
        try:
            times = [one_run(i, src_bs, dst_bs) for i in range(args.runs)]
        finally:
            gw.terminate()
            gw.wait(60)
    from streamrepl.replication.watcher import CHANGE_POLL_SECONDS

    median = statistics.median(times)
    print(
        f"broker {args.broker}: resume to first record over {args.runs} runs (s): "
        + ", ".join(f"{t:.3f}" for t in times)
    )
    print(f"  median {median:.3f} s, max {max(times):.3f} s; target {TARGET} s: median {median / TARGET:.2f}x of it")
    print(
        f"  yardstick: the gateway's plan-change poll period {CHANGE_POLL_SECONDS} s ({median / CHANGE_POLL_SECONDS:.1f}x)"
    )
    print(f"  gateway log: {logdir / 'gateway.log'}")
    if args.json:
        res = {
            **about,
            "data": Records(100).about(),
            "broker": args.broker,
            "runs_s": [round(t, 3) for t in times],
            "median_s": round(median, 3),
            "max_s": round(max(times), 3),
            "target_s": TARGET,
            "change_poll_s": CHANGE_POLL_SECONDS,
        }
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
