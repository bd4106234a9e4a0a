"""Benchmark: what replication costs as the work grows (issue 15, item 4).

    .venv/bin/python bench/scale.py                                   (the full ladder, about 15 minutes)
    .venv/bin/python bench/scale.py --sizes 1x1x4/1,5x4x4/1 --idle-seconds 10     (a quick run)
    .venv/bin/python bench/scale.py --setup-only --sizes 1x1x4/1,5x5x4/1,20x10x4/1   (stream set-up alone)

Each size is STREAMSxTOPICSxPARTITIONS/GATEWAYS: that many source streams, each with TOPICS topics of
PARTITIONS partitions, each replicated (not paused) into its own replica stream in a second cluster, applied by
GATEWAYS gateway processes. Every size gets a fresh pair of embedded brokers (`--broker tansu|noida`), so
one size's topics never load the next one's brokers. For each size it prints:

  set-up     seconds to create the streams, their topics and replicas through the Python API (what an operator's
             commands do, without a process start each); with --setup-only only this is measured, no gateway runs,
             with two more columns: `read ms`, the median time to read every stream record of the source cluster
             again in the same process (what a gateway's plan watcher does whenever a metadata topic's end moved),
             and `log records`, how many records the source cluster's metadata log then holds
  acquired   seconds from starting the gateways until every replica partition is held (each gateway's log
             says which partitions it acquired since its slots were last assigned)
  RSS        resident memory (VmRSS) of the gateways (with their cursor-sync workers) and of each broker
  idle CPU   % of one core used by the gateways (with their workers), the source broker and the
             destination broker while no record flows, from the CPU seconds in /proc/<pid>/stat over
             --idle-seconds: robust to other load on the machine, unlike wall-clock figures (the first
             gateway's threads by name in the log and the JSON: which client costs what)
  trickle    with --trickle R: % of one core used by the same processes while R records/s go into partition 0 of one
             topic of each stream (one busy partition a link: the rest of each link stays quiet), over another
             --idle-seconds window; logged and in the JSON
  wake       ms from one record produced into an idle partition until it is in the replica (--wakes tries, one
             at a time, each into a partition that never had a record): what idling costs in latency
  new topic  seconds from `stream topic create` on a source stream (plus one record) until that record is
             in the replica (its partition's end, asked every 2 ms): the watcher noticing, the replica topic made,
             the partition acquired
  records/s  --records records of 100 B produced round-robin over every source partition, timed from the
             first produce until every one is read back from the replicas (wall clock: noisy on a shared
             machine; the per-size ratio to the first size is what to compare)

Not a test; figures go to BENCHMARKS.md with the command and the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from data import COMPRESSION, Records  # noqa: E402
from provenance import provenance  # noqa: E402  (bench/ is on the path: this file runs as a script)

from streamrepl.local import EphemeralClusters  # noqa: E402

SRC, DST = "sanfrancisco", "newyork"
PY = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
DEFAULT_SIZES = "1x1x4/1,5x5x4/1,20x10x4/1,50x20x4/2"


def log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_size(text: str) -> tuple[int, int, int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)(?:/(\d+))?", text.strip())
    if not m:
        raise SystemExit(f"bad size {text!r}: give STREAMSxTOPICSxPARTITIONS/GATEWAYS, e.g. 20x10x4/1")
    s, t, p, g = (int(x) if x else 1 for x in m.groups())
    return s, t, p, g


def tree(pid: int) -> list[int]:
    """pid and its descendants (a gateway runs its cursor sync in a child process)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / TICKS


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads by name, digits dropped (librdkafka names its threads rdk:main,
    rdk:broker12...; Python's are named by streamrepl or "python")."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = re.sub(r"\d+", "", (task / "comm").read_text().strip())
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return out


def idle_cpu(groups: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """% of one core each group of processes used over `seconds` (CPU seconds / wall seconds)."""
    before = {k: cpu_seconds(v) for k, v in groups.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    return {k: round(100 * (cpu_seconds(v) - before[k]) / dt, 1) for k, v in groups.items()}


def trickle_cpu(
    groups: dict[str, list[int]], sb: str, topics: list[str], per_second: float, seconds: float
) -> dict[str, float]:
    """% of one core each group used over `seconds` while one record every 1/per_second s goes to partition 0 of each
    of `topics` in turn: light traffic that keeps those partitions from going quiet (every link has one busy
    partition when `topics` holds one topic of each stream)."""
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": sb, "linger.ms": 0})
        i = 0
        while not stop.wait(1 / per_second / len(topics)):
            p.produce(topics[i % len(topics)], value=b"trickle", partition=0)
            p.poll(0)
            i += 1
        p.flush(10)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(2)  # the partitions woken, their feeds in their links' consumers
    try:
        return idle_cpu(groups, seconds)
    finally:
        stop.set()
        t.join(15)


def set_up(reg: object, streams: int, topics: int, partitions: int) -> list[str]:
    """Source streams with their topics, each with a running replica; returns the source Kafka topics."""
    from streamrepl import replicas, stream_ops
    from streamrepl import streams as streams_api
    from streamrepl import topics as topics_api
    from streamrepl.paths import kafka_topic_name

    out = []
    for i in range(streams):
        src, dst = f"/{SRC}/s{i}", f"/{DST}/s{i}"
        stream_ops.create(reg, src, {"defaultpartitions": partitions})  # type: ignore[arg-type]
        for j in range(topics):
            topics_api.create(reg, src, f"t{j}")  # type: ignore[arg-type]
            out.append(kafka_topic_name(streams_api.resolve(reg, src).path, f"t{j}"))  # type: ignore[arg-type]
        stream_ops.create(reg, dst, {}, copymetafrom=src)  # type: ignore[arg-type]
        replicas.add(reg, src, dst)  # type: ignore[arg-type]
        replicas.upstream_add(reg, dst, src)  # type: ignore[arg-type]
    return out


def stream_read_ms(reg: object, tries: int = 5) -> float:
    """Median ms to read every stream record of the source cluster again, in the process that wrote them: what a
    gateway's plan watcher does each time a metadata topic's end moved, and every command's first step."""
    from streamrepl.metastore import MetaStore

    cluster = reg.get(SRC)  # type: ignore[attr-defined]
    times = []
    for _ in range(tries):
        t = time.monotonic()
        MetaStore(cluster).streams()
        times.append(1000 * (time.monotonic() - t))
    return round(statistics.median(times), 1)


def metadata_records(bootstrap: str) -> int:
    """How many records the source cluster's metadata log holds."""
    from streamrepl.paths import METADATA_TOPIC

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-meta"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(METADATA_TOPIC, 0), timeout=10, cached=False)[1])
    finally:
        c.close()


def start_gateway(logdir: Path, name: str) -> subprocess.Popen[bytes]:
    out = open(logdir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [PY, "-m", "streamrepl", "gateway", "start", "-cluster", DST, "-id", name],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=os.environ,
    )


def held(logdir: Path, names: list[str]) -> tuple[int, set[str]]:
    """Slots owned by the named gateways together, and the partitions they acquired since their last assignment."""
    slots, units = 0, set()
    for name in names:
        path = logdir / f"{name}.log"
        mine: set[str] = set()
        n = 0
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            if m := re.search(r"owns (\d+) slots", line):
                n, mine = int(m.group(1)), set()
            elif m := re.search(r"gave up (\d+) slots", line):
                n -= int(m.group(1))
            elif m := re.search(r"acquired (\S+) at offset", line):
                mine.add(m.group(1))
        slots += n
        units |= mine
    return slots, units


def wait_acquired(logdir: Path, names: list[str], want: int, t0: float, timeout: float) -> float:
    while time.monotonic() - t0 < timeout:
        slots, units = held(logdir, names)
        if slots == 64 and len(units) >= want:
            return time.monotonic() - t0
        time.sleep(0.2)
    slots, units = held(logdir, names)
    raise RuntimeError(f"only {len(units)}/{want} partitions acquired ({slots} slots) in {timeout:.0f}s: {logdir}")


def read_back(bootstrap: str, topic_parts: list[TopicPartition], want: int, timeout: float) -> tuple[int, float]:
    """Read the given replica partitions from offset 0 until `want` records came; (records, monotonic end)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "scale-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    c.assign(topic_parts)
    got, deadline, last = 0, time.monotonic() + timeout, time.monotonic()
    try:
        while got < want and time.monotonic() < deadline:
            n = sum(1 for m in c.consume(10000, timeout=0.1) if m.error() is None)
            if n:
                got, last = got + n, time.monotonic()
    finally:
        c.close()
    return got, last


def wake_delays(sb: str, db: str, src_topics: list[str], partitions: int, tries: int) -> list[float]:
    """One record into each of `tries` idle source partitions (chosen at random), one at a time: ms until it is in
    the replica. Run before any record flowed, so each replica partition is empty: it holds the record once its end
    is above 0, asked for every 2 ms (one ListOffsets request; exact enough on Tansu, whose end is the last batch's
    base offset + 1). A consumer of the replica was the first way to see it: its own fetches on Tansu added up to
    330 ms to single wakes (the gateway's log had the record acknowledged 97 ms after it was produced, the consumer
    saw it 429 ms after)."""
    p = Producer({"bootstrap.servers": sb, "linger.ms": 0})
    c = Consumer({"bootstrap.servers": db, "group.id": "scale-wake"})
    out = []
    try:
        every = [(t, i) for t in src_topics for i in range(partitions)]
        for topic, partition in random.sample(every, min(tries, len(every))):
            replica = TopicPartition(topic, partition)
            c.get_watermark_offsets(replica, timeout=5, cached=False)  # connected and known before the clock runs
            time.sleep(random.uniform(0.5, 1.0))
            t0 = time.monotonic()
            p.produce(topic, b"x", partition=partition)
            p.poll(0)
            while time.monotonic() - t0 < 30:
                if c.get_watermark_offsets(replica, timeout=5, cached=False)[1] > 0:
                    out.append(round(1000 * (time.monotonic() - t0), 1))
                    break
                time.sleep(0.002)
    finally:
        p.flush(10)
        c.close()
    return out


def new_topic_delay(reg: object, sb: str, db: str, timeout: float) -> float:
    """`stream topic create` on a replicated source stream, one record into it: seconds until it is in the replica,
    seen as the replica partition's end above 0 (ListOffsets every 2 ms, as for the wakes: a consumer of the replica
    waited for the topic's metadata and then for its own fetches, which on Tansu added up to hundreds of ms)."""
    from streamrepl import topics as topics_api

    replica = TopicPartition("sr.s0.fresh", 0)
    p = Producer({"bootstrap.servers": sb, "linger.ms": 0})
    c = Consumer({"bootstrap.servers": db, "group.id": "scale-fresh"})
    try:
        c.list_topics(timeout=5)  # connected before the clock runs
        t0 = time.monotonic()
        topics_api.create(reg, f"/{SRC}/s0", "fresh", partitions=1)  # type: ignore[arg-type]
        p.produce("sr.s0.fresh", b"x", partition=0)
        p.flush(10)
        while time.monotonic() - t0 < timeout:
            # Asked for by name first: a watermark query for a topic that did not exist yet never saw it appear.
            md = c.list_topics(replica.topic, timeout=5).topics.get(replica.topic)
            if md is not None and md.error is None and md.partitions:
                if c.get_watermark_offsets(replica, timeout=5, cached=False)[1] > 0:
                    return time.monotonic() - t0
            time.sleep(0.002)
    finally:
        c.close()
    raise RuntimeError(f"a new topic's record did not reach the replica in {timeout:.0f}s")


def throughput(sb: str, db: str, src_topics: list[str], partitions: int, n: int, timeout: float) -> dict:
    p = Producer({"bootstrap.servers": sb, "compression.type": COMPRESSION})
    tps = [(t, i) for t in src_topics for i in range(partitions)]
    data = Records(100)
    t0 = time.monotonic()
    for k in range(n):
        t, i = tps[k % len(tps)]
        while True:
            try:
                p.produce(
                    t, data.value(k), data.key(k), partition=i, headers=data.headers(k), timestamp=data.timestamp(k)
                )
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)
    produced = time.monotonic() - t0
    got, end = read_back(db, [TopicPartition(t, i, 0) for t, i in tps], n, timeout)
    return {"records": got, "complete": got >= n, "produce_s": round(produced, 2), "records_s": round(got / (end - t0))}


def profile(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """With BENCH_PROFILE=1: py-spy on the first gateway (raw stacks beside its log); it costs CPU of its own, so
    the idle figures of a profiled run are not the ones to record."""
    spy = shutil.which("py-spy", path=str(Path(PY).parent)) or shutil.which("py-spy")
    if not os.environ.get("BENCH_PROFILE") or spy is None:
        return None
    return subprocess.Popen(
        [spy, "record", "-p", str(pid), "-r", "50", "-f", "raw", "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run_size(size: str, args: argparse.Namespace) -> dict:
    streams, topics, partitions, gateways = parse_size(size)
    total = streams * topics * partitions
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-scale-"))
    row: dict = {"size": size, "partitions": total, "gateways": gateways, "logs": str(logdir)}
    with EphemeralClusters([SRC, DST], broker=args.broker) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        os.environ.pop("STREAMREPL_IDENTITY", None)
        from streamrepl import registry

        reg = registry.load()
        sb, db = ec.brokers[SRC].bootstrap, ec.brokers[DST].bootstrap
        t = time.monotonic()
        src_topics = set_up(reg, streams, topics, partitions)
        row["setup_s"] = round(time.monotonic() - t, 2)
        row["read_ms"] = stream_read_ms(reg)
        row["log_records"] = metadata_records(sb)
        log(f"{size}: {total} partitions set up in {row['setup_s']:.1f}s; stream records read in {row['read_ms']} ms")
        if args.setup_only:
            return row
        log(f"{size}: starting {gateways} gateway(s)")
        names = [f"gw{i}" for i in range(gateways)]
        t0 = time.monotonic()
        gws = [start_gateway(logdir, n) for n in names]
        try:
            row["acquired_s"] = round(wait_acquired(logdir, names, total, t0, args.timeout), 1)
            log(f"{size}: all acquired after {row['acquired_s']}s; settling {args.settle:.0f}s")
            time.sleep(args.settle)
            gw_pids = [p for g in gws for p in tree(g.pid)]
            groups = {
                "gateways": gw_pids,
                "source": [ec.brokers[SRC].pid],
                "destination": [ec.brokers[DST].pid],
                "gateway main processes": [g.pid for g in gws],  # without their cursor-sync workers
            }
            spy = profile(gws[0].pid, logdir / "gw0.idle.pyspy.txt")
            threads0, t_threads = thread_cpu(gws[0].pid), time.monotonic()
            row["idle_cpu_pct"] = idle_cpu(groups, args.idle_seconds)
            threads1, dt = thread_cpu(gws[0].pid), time.monotonic() - t_threads
            row["gw0_threads_cpu_pct"] = {
                k: round(100 * (v - threads0.get(k, 0.0)) / dt, 2)
                for k, v in sorted(threads1.items(), key=lambda kv: threads0.get(kv[0], 0.0) - kv[1])
                if v - threads0.get(k, 0.0) > 0
            }
            log(f"{size}: the first gateway's threads, % of a core: {row['gw0_threads_cpu_pct']}")
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            row["rss_MB"] = {k: rss_mb(v) for k, v in groups.items()}
            log(f"{size}: idle CPU {row['idle_cpu_pct']}, RSS {row['rss_MB']}")
            if args.trickle:
                firsts = src_topics[::topics]  # the first topic of each stream: one busy partition a link
                row["trickle_cpu_pct"] = trickle_cpu(groups, sb, firsts, args.trickle, args.idle_seconds)
                log(
                    f"{size}: CPU with one partition a link written, {args.trickle:g} records/s each: "
                    f"{row['trickle_cpu_pct']}"
                )
            if args.wakes:
                row["wake_ms"] = wake_delays(sb, db, src_topics, partitions, args.wakes)
                log(f"{size}: an idle partition woke after {row['wake_ms']} ms")
            row["new_topic_s"] = round(new_topic_delay(reg, sb, db, args.timeout), 2)
            if args.records:
                spy = profile(gws[0].pid, logdir / "gw0.throughput.pyspy.txt")
                row["throughput"] = throughput(sb, db, src_topics, partitions, args.records, args.timeout)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
            row["rss_after_MB"] = {k: rss_mb(v) for k, v in groups.items()}
        finally:
            for g in gws:
                g.terminate()
            for g in gws:
                try:
                    g.wait(30)
                except subprocess.TimeoutExpired:
                    g.kill()
                    g.wait()
    log(f"{size}: {json.dumps(row)}")
    return row


def report_setup(rows: list[dict]) -> None:
    head = ("size (SxTxP)", "streams x topics", "partitions", "set-up s", "ms per topic", "read ms", "log records")
    lines = [head]
    for r in rows:
        s, t, _, _ = parse_size(r["size"])
        lines.append(
            (
                r["size"],
                f"{s} x {t}",
                f"{r['partitions']:,}",
                f"{r['setup_s']:.2f}",
                f"{1000 * r['setup_s'] / (s * t):.0f}",
                f"{r['read_ms']:.1f}",
                f"{r['log_records']:,}",
            )
        )
    widths = [max(len(str(x[i])) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(x, widths, strict=True)).rstrip())


def report(rows: list[dict]) -> None:
    head = (
        "size (SxTxP/gw)",
        "partitions",
        "set-up s",
        "acquired s",
        "idle CPU % gw/src/dst",
        "RSS MB gw/src/dst",
        "wake ms p50/max",
        "new topic s",
        "records/s",
    )
    lines = [head]
    for r in rows:
        c, m = r["idle_cpu_pct"], r["rss_MB"]
        tp = r.get("throughput") or {}
        lines.append(
            (
                r["size"],
                f"{r['partitions']:,}",
                f"{r['setup_s']:.1f}",
                f"{r['acquired_s']:.1f}",
                f"{c['gateways']:.1f} / {c['source']:.1f} / {c['destination']:.1f}",
                f"{m['gateways']:.0f} / {m['source']:.0f} / {m['destination']:.0f}",
                f"{statistics.median(r['wake_ms']):.0f} / {max(r['wake_ms']):.0f}" if r.get("wake_ms") else "-",
                f"{r['new_topic_s']:.2f}",
                f"{tp['records_s']:,}" + ("" if tp.get("complete", True) else " (incomplete)") if tp else "-",
            )
        )
    widths = [max(len(str(x[i])) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(x, widths, strict=True)).rstrip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated SxTxP/G (default {DEFAULT_SIZES})")
    ap.add_argument("--broker", default="tansu", choices=["tansu", "noida"])
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="the idle CPU window")
    ap.add_argument("--wakes", type=int, default=5, help="idle partitions woken by one record each (0: none)")
    ap.add_argument(
        "--trickle",
        type=float,
        default=0.0,
        help="after the idle window, records/s into one partition of each stream for another window (0: skip it)",
    )
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after the last acquisition before measuring")
    ap.add_argument("--records", type=int, default=100_000, help="records of the throughput step (0: skip it)")
    ap.add_argument("--timeout", type=float, default=600.0, help="hang guard for each wait")
    ap.add_argument("--setup-only", action="store_true", help="only create the streams and time it (no gateway)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    a = ap.parse_args()
    about = provenance(a.note)
    rows = [run_size(s, a) for s in a.sizes.split(",") if s.strip()]
    (report_setup if a.setup_only else report)(rows)
    if a.json:
        about["data"] = Records(100).about()
        a.json.write_text(json.dumps({**about, "broker": a.broker, "sizes": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
