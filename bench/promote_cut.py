"""Benchmark: `replica promote` under load, its per-partition cut against `-consistent true` (issue 24).

Run:  PYTHONPATH=$PWD .venv/bin/python bench/promote_cut.py [--brokers tansu,noida] [--partitions 8] [--rate 1000]
                                                            [--warmup 15] [--reps 3] [--json out.json]

For each broker, each mode and each rep: a fresh stream pair (one topic of --partitions partitions) replicated by two
gateways while a producer writes --rate records/s (CreateTime = the wall clock, spread over the partitions); after
--warmup seconds `stream replica promote -path <replica> [-consistent true] -json` runs while the producer goes on,
then the producer and the gateways stop. Per run:

- seconds: promote's wall time (the CLI process);
- spreadms: how far apart the partitions' last kept records are (max - min timestamp) after the cut;
- setaside: records the replica had and set aside (0 for the per-partition cut);
- lacks: records the source held at promote time that the promoted stream does not keep (its source's end as promote
  read it, minus the kept end, summed);
- after_missing: kept records whose timestamp is later than a record missing from another partition (the first
  record past a partition's kept end on the source): what a consumer of the promoted stream sees that did not happen
  before something it will never see. The consistent cut's aim is 0, bar caught-up partitions (they hold all their
  source had at their last report; a record written after it and never replicated is not known to promote).

Records are compared by reading both streams whole. Not a pytest test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Producer

from streamrepl import kafka, policy, registry
from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath, kafka_topic_name

PY = sys.executable
SRC, DST = "sanfrancisco", "newyork"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([PY, "-m", "streamrepl", *args], capture_output=True, text=True, env=os.environ)
    if r.returncode != 0:
        raise RuntimeError(f"streamrepl {' '.join(args)} failed: {r.stderr.strip()} {r.stdout.strip()}")
    return r


def stamps(cluster: Any, kt: str, p: int, end: int) -> list[int]:
    """The timestamps of a partition's records below `end` (fillers as None-free gaps: left out)."""
    c = kafka.consumer(cluster)
    out: list[int] = []
    try:
        if end <= 0:
            return out
        for m in kafka.read_partition(c, kafka.TopicPartition(kt, p, 0), timeout=120):
            if cast(int, m.offset()) >= end:
                break
            if not policy.is_filler(m.headers()):
                out.append(m.timestamp()[1])
    finally:
        c.close()
    return out


def one_run(ec: EphemeralClusters, logdir: Path, partitions: int, rate: int, warmup: float, consistent: bool) -> dict:
    name = f"p{uuid.uuid4().hex[:6]}"
    src, dst = f"/{SRC}/{name}", f"/{DST}/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", str(partitions))
    cli("stream", "topic", "create", "-path", src, "-topic", "t")
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "replica", "add", "-path", src, "-replica", dst)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    kt_src, kt_dst = (
        kafka_topic_name(StreamPath(SRC, f"/{name}"), "t"),
        kafka_topic_name(StreamPath(DST, f"/{name}"), "t"),
    )
    gws = []
    for i in range(2):
        log = open(logdir / f"{name}-{i}.log", "a")  # noqa: SIM115 - lives as long as the process
        gws.append(
            subprocess.Popen(
                [
                    PY,
                    "-m",
                    "streamrepl",
                    "gateway",
                    "start",
                    "-cluster",
                    DST,
                    "-id",
                    f"{name}-{i}",
                    "-supervise",
                    "false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ,
            )
        )
    p = Producer({"bootstrap.servers": ec.brokers[SRC].bootstrap, "linger.ms": 5, "enable.idempotence": True})
    stop = threading.Event()
    sent = [0]

    def producer() -> None:
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while sent[0] < due:
                p.produce(kt_src, b"v" * 100, str(sent[0]).encode(), partition=sent[0] % partitions)
                sent[0] += 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(30)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    try:
        time.sleep(warmup)
        args = ["stream", "replica", "promote", "-path", dst, "-json"] + (["-consistent", "true"] if consistent else [])
        t0 = time.perf_counter()
        rows = json.loads(cli(*args).stdout)["data"]
        seconds = time.perf_counter() - t0
    finally:
        stop.set()
        th.join()
        for g in gws:
            g.terminate()
        for g in gws:
            g.wait(60)
    reg = registry.load(str(ec.registry_path))
    s_cl, d_cl = reg.get(SRC), reg.get(DST)
    s_ends = kafka.topic_ends(s_cl, [kt_src])
    kept_ts, next_missing, lacks, setaside = [], [], 0, 0
    for r in rows:
        part = r["partition"]
        kept = r.get("keptend", r["cutoffset"])
        kept_ts.append(stamps(d_cl, kt_dst, part, kept))
        source = stamps(s_cl, kt_src, part, s_ends[(kt_src, part)])
        if len(source) > kept:
            next_missing.append(source[kept])
        lacks += max(0, r["sourceend"] - kept) if r["sourceend"] >= 0 else 0
        setaside += r.get("setaside", 0)
    first_missing = min(next_missing) if next_missing else None
    lasts = [ts[-1] for ts in kept_ts if ts]
    return {
        "mode": "consistent" if consistent else "partition",
        "seconds": round(seconds, 2),
        "spreadms": max(lasts) - min(lasts) if lasts else 0,
        "replicatedspreadms": rows[0]["spreadms"],
        "setaside": setaside,
        "lacks": lacks,
        "after_missing": sum(1 for ts in kept_ts for x in ts if first_missing is not None and x > first_missing),
        "kept": sum(len(ts) for ts in kept_ts),
        "caughtup": sum(1 for r in rows if r.get("caughtup")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default="tansu,noida")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    results: list[dict] = []
    for broker in a.brokers.split(","):
        with tempfile.TemporaryDirectory() as logs, EphemeralClusters([SRC, DST], broker=broker) as ec:
            os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
            for rep in range(a.reps):
                for consistent in (False, True):
                    row = {
                        "broker": broker,
                        "rep": rep,
                        **one_run(ec, Path(logs), a.partitions, a.rate, a.warmup, consistent),
                    }
                    print(json.dumps(row), flush=True)
                    results.append(row)
    print(
        "broker      mode        seconds(median)  spreadms(median)  setaside(median)  lacks(median)  after_missing(median)"
    )
    for broker in a.brokers.split(","):
        for mode in ("partition", "consistent"):
            rs = [r for r in results if r["broker"] == broker and r["mode"] == mode]
            if rs:
                med = {
                    k: statistics.median(r[k] for r in rs)
                    for k in ("seconds", "spreadms", "setaside", "lacks", "after_missing")
                }
                print(
                    f"{broker:<11} {mode:<11} {med['seconds']:>15} {med['spreadms']:>17} {med['setaside']:>17}"
                    f" {med['lacks']:>14} {med['after_missing']:>22}"
                )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
