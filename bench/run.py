"""Benchmark: gateway replication against a plain producer (ceiling) and a hand-written relay loop.

Run:  .venv/bin/python bench/run.py [--records N] [--json out.json]

Everything runs in one process tree against embedded Tansu brokers started here, so the ratios
are measured in one run on the same machine (absolute figures on a shared machine drift).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamrepl.local import EphemeralClusters

SRC, DST = "sanfrancisco", "newyork"
PARTITIONS = 4
VALUE = b"v" * 100
PY = sys.executable
BIN = str(Path(PY).with_name("streamrepl"))


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([PY, "-m", "streamrepl", *args], capture_output=True, text=True, env=os.environ)
    if check and r.returncode != 0:
        raise RuntimeError(f"streamrepl {' '.join(args)} failed ({r.returncode}): {r.stdout}\n{r.stderr}")
    return r


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def fill(bootstrap: str, topic: str, n: int) -> float:
    """Write n records (key, 100-byte value, one header, a timestamp) as fast as possible; seconds taken."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "batch.num.messages": 10_000,
        }
    )
    hdr = [("h", b"bench")]
    ts = int(time.time() * 1000)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, str(i).encode(), partition=i % PARTITIONS, headers=hdr, timestamp=ts)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered to {topic}")
    return time.perf_counter() - t0


def count(bootstrap_cluster: object, topic: str, c: Consumer | None = None) -> int:
    from streamrepl import broker

    own = c is None
    c = c or broker.consumer(bootstrap_cluster)  # type: ignore[arg-type]
    try:
        try:
            md = c.list_topics(topic, timeout=10).topics[topic]
            if md.error is not None or not md.partitions:
                return 0  # the replica's topic is created by the gateway when it starts applying
            ends = broker.true_ends(c, [TopicPartition(topic, p) for p in sorted(md.partitions)])
        except KafkaException as e:  # the replica's topic may not exist yet
            log(f"counting {topic}: {e}")
            return 0
        return sum(ends.values())
    finally:
        if own:
            c.close()


def hand_written(src: str, dst: str, src_topic: str, dst_topic: str, n: int) -> float:
    """What a user writes without this tool: consume a batch, produce each record, flush at the end."""
    c = Consumer(
        {
            "bootstrap.servers": src,
            "group.id": "bench-handwritten",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    p = Producer(
        {
            "bootstrap.servers": dst,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "batch.num.messages": 10_000,
        }
    )
    c.assign([TopicPartition(src_topic, i, 0) for i in range(PARTITIONS)])
    done = 0
    t0 = time.perf_counter()
    while done < n:
        for m in c.consume(10_000, timeout=0.5):
            if m.error():
                continue
            while True:
                try:
                    p.produce(
                        dst_topic, m.value(), m.key(), partition=m.partition(),
                        headers=m.headers(), timestamp=m.timestamp()[1],
                    )
                    break
                except BufferError:
                    p.poll(0.01)
            done += 1
        p.poll(0)
    p.flush(120)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def rss_peak(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def latency(src: str, dst_cluster: object, src_topic: str, dst_topic: str, rate: int, seconds: float) -> dict:
    from streamrepl import broker

    c = broker.consumer(dst_cluster, **{"enable.partition.eof": False, "fetch.wait.max.ms": 5})  # type: ignore[arg-type]
    c.assign([TopicPartition(dst_topic, i, 0) for i in range(PARTITIONS)])
    lat: list[float] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for m in c.consume(10_000, timeout=0.05):
                if m.error() is None:
                    lat.append(time.time() * 1000 - m.timestamp()[1])

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    p = Producer({"bootstrap.servers": src, "linger.ms": 1})
    total = int(rate * seconds)
    step = 0.01  # produce in 10 ms slices
    per = max(1, int(rate * step))
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        due = t0 + (sent // per) * step
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        for _ in range(min(per, total - sent)):
            p.produce(src_topic, VALUE, str(sent).encode(), partition=sent % PARTITIONS,
                      headers=[("h", b"lat")], timestamp=int(time.time() * 1000))
            sent += 1
        p.poll(0)
    p.flush(30)
    achieved = sent / (time.perf_counter() - t0)
    deadline = time.monotonic() + 30
    while len(lat) < total and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    th.join()
    c.close()
    got = sorted(lat)
    q = (lambda f: got[min(len(got) - 1, int(f * len(got)))]) if got else (lambda f: float("nan"))
    return {
        "rate_target": rate, "rate_achieved": round(achieved), "seconds": seconds, "sent": total,
        "received": len(got), "p50_ms": round(q(0.50), 1), "p99_ms": round(q(0.99), 1),
        "max_ms": round(got[-1], 1) if got else None,
    }


def time_cmd(args: list[str], runs: int = 5) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(args, capture_output=True, env=os.environ, check=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(), "kernel": platform.release()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rate", type=int, default=5_000, help="latency test produce rate (records/s)")
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--gateway-timeout", type=float, default=300.0)
    a = ap.parse_args()
    n = a.records
    rec_bytes = len(VALUE) + 6 + 7  # value + ~key + header, for MB/s
    res: dict = {"records": n, "value_bytes": len(VALUE), "partitions": PARTITIONS, "machine": machine()}
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-bench-"))
    with EphemeralClusters([SRC, DST]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        os.environ.pop("STREAMREPL_IDENTITY", None)
        from streamrepl import registry

        reg = registry.load()
        dst_cluster = reg.get(DST)
        sb, db = ec.brokers[SRC].bootstrap, ec.brokers[DST].bootstrap

        # 1. ceiling
        create_topic(db, "bench.ceiling")
        log(f"ceiling: {n} records into {DST}")
        dt = fill(db, "bench.ceiling", n)
        res["ceiling"] = {"seconds": round(dt, 3), "records_s": round(n / dt), "MB_s": round(n * rec_bytes / dt / 1e6, 1)}

        # 2. hand-written relay
        create_topic(sb, "bench.hw.src")
        create_topic(db, "bench.hw.dst")
        fill(sb, "bench.hw.src", n)
        log("hand-written consume-then-produce loop")
        dt = hand_written(sb, db, "bench.hw.src", "bench.hw.dst", n)
        got = count(dst_cluster, "bench.hw.dst")
        res["hand_written"] = {"seconds": round(dt, 3), "records_s": round(n / dt), "MB_s": round(n * rec_bytes / dt / 1e6, 1), "delivered": got}

        # 3. gateway
        log("gateway: setting up streams with the CLI")
        cli("stream", "create", "-path", "/sanfrancisco/b", "-defaultpartitions", str(PARTITIONS))
        cli("stream", "topic", "create", "-path", "/sanfrancisco/b", "-topic", "t")
        cli("stream", "topic", "create", "-path", "/sanfrancisco/b", "-topic", "l")
        cli("stream", "create", "-path", "/newyork/b", "-copymetafrom", "/sanfrancisco/b")
        cli("stream", "replica", "add", "-path", "/sanfrancisco/b", "-replica", "/newyork/b", "-paused", "true")
        cli("stream", "upstream", "add", "-path", "/newyork/b", "-upstream", "/sanfrancisco/b")
        fill(sb, "sr.b.t", n)
        gwlog = open(logdir / "gateway.log", "w")  # noqa: SIM115
        gw = subprocess.Popen([PY, "-m", "streamrepl", "gateway", "start", "-cluster", DST, "-id", "bench"],
                              stdout=gwlog, stderr=subprocess.STDOUT, env=os.environ)
        try:
            time.sleep(6)
            if gw.poll() is not None:
                raise RuntimeError(f"gateway exited {gw.returncode}; see {logdir / 'gateway.log'}")
            log("gateway: resume and time until the replica holds all records")
            cli("stream", "replica", "resume", "-path", "/sanfrancisco/b", "-replica", "/newyork/b")
            t0 = time.perf_counter()
            from streamrepl import broker

            c = broker.consumer(dst_cluster)
            got = 0
            while time.perf_counter() - t0 < a.gateway_timeout:
                got = count(dst_cluster, "sr.b.t", c)
                if got >= n:
                    break
                time.sleep(0.2)
            dt = time.perf_counter() - t0
            c.close()
            if got < n:
                log(f"gateway incomplete; topics on {DST}: {sorted(broker.topics(dst_cluster))}; log {logdir / 'gateway.log'}")
            res["gateway"] = {
                "seconds": round(dt, 3), "records_s": round(got / dt), "MB_s": round(got * rec_bytes / dt / 1e6, 1),
                "delivered": got, "complete": got >= n,
                "rss_after_throughput_MB": rss_peak(gw.pid),
            }
            log(f"gateway: {got} records in {dt:.1f}s")

            # 4. latency
            log(f"latency: {a.rate} records/s for {a.latency_seconds}s")
            res["latency"] = latency(sb, dst_cluster, "sr.b.l", "sr.b.l", a.rate, a.latency_seconds)
            res["gateway"]["peak_rss_MB"] = rss_peak(gw.pid)
        finally:
            gw.terminate()
            try:
                gw.wait(20)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait()
            gwlog.close()
        res["gateway_log"] = str(logdir / "gateway.log")

        # 5. CLI
        log("CLI timings")
        res["cli"] = {
            "help_s": round(time_cmd([BIN, "--help"]), 3),
            "stream_info_s": round(time_cmd([BIN, "stream", "info", "-path", "/sanfrancisco/b"]), 3),
        }

    # kcat peer
    res["kcat"] = "skipped: kcat not on PATH" if shutil.which("kcat") is None else "on PATH but not measured"
    ce, hw, g = res["ceiling"]["records_s"], res["hand_written"]["records_s"], res["gateway"]["records_s"]
    res["gateway"]["ratio_to_ceiling"] = round(g / ce, 3)
    res["gateway"]["ratio_to_hand_written"] = round(g / hw, 3)
    res["hand_written"]["ratio_to_ceiling"] = round(hw / ce, 3)
    report(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


def report(res: dict) -> None:
    ce, hw, g, lat, cl = res["ceiling"], res["hand_written"], res["gateway"], res["latency"], res["cli"]
    rows = [
        ("ceiling (plain producer)", f"{ce['records_s']:,}", f"{ce['MB_s']}", "1.00", ""),
        ("hand-written relay loop", f"{hw['records_s']:,}", f"{hw['MB_s']}", f"{hw['ratio_to_ceiling']:.2f}", ""),
        ("gateway (1 process)", f"{g['records_s']:,}", f"{g['MB_s']}", f"{g['ratio_to_ceiling']:.2f}",
         f"{g['ratio_to_hand_written']:.2f}x hand-written; {g['delivered']:,}/{res['records']:,} delivered"),
        ("kcat -> kcat", "-", "-", "-", res["kcat"]),
    ]
    w = [max(len(r[i]) for r in rows + [("what", "records/s", "MB/s", "x ceiling", "note")]) for i in range(5)]
    out = [f"records={res['records']:,} value={res['value_bytes']}B partitions={res['partitions']}"]
    for r in [("what", "records/s", "MB/s", "x ceiling", "note"), *rows]:
        out.append("  ".join(s.ljust(w[i]) if i in (0, 4) else s.rjust(w[i]) for i, s in enumerate(r)).rstrip())
    out.append(
        f"latency @ {lat['rate_achieved']:,}/s (target {lat['rate_target']:,}) for {lat['seconds']:.0f}s: "
        f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms ({lat['received']:,}/{lat['sent']:,} received)"
    )
    out.append(f"gateway peak RSS (VmHWM): {g.get('peak_rss_MB')} MB")
    out.append(f"CLI median of 5: streamrepl --help {cl['help_s']} s; stream info {cl['stream_info_s']} s")
    print("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())
