"""Benchmark: gateway replication against a plain producer (ceiling), a C relay and a hand-written relay loop.

Run:  .venv/bin/python bench/run.py [--records N] [--json out.json]

Everything runs in one process tree against embedded Tansu brokers started here, so the ratios
are measured in one run on the same machine (absolute figures on a shared machine drift).
The records are bench/data.py's (JSON order events, written with lz4 as users write them); --repeated-sizes adds
the older runs' values (one repeated byte) as rows of their own. Every relay is timed alike, from outside: from its
start of work (its clients connected, the gateway holding its slots) to the destination holding the last record,
read from the destination's watermarks and last batches (watch_until_landed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from data import COMPRESSION, Records, about_repeated_byte
from provenance import provenance

from streamrepl.local import EphemeralClusters

SRC, DST = "sanfrancisco", "newyork"
PARTITIONS = 4
SMALL = 100  # the value size of the latency and failover runs; throughput runs take --sizes
PY = sys.executable
BIN = str(Path(PY).with_name("streamrepl"))
C_RELAY = Path(__file__).with_name(".build") / "relay"  # bench/relay.c, compiled by bench/setup
# The relays that give what the gateway gives (each record once, at the source's partition, an idempotent producer):
# the goal's yardstick (DESIGN: 0.9x the fastest exact relay of the same run). The plain C relay and the hand-written
# loop (neither idempotent) stay the "fastest relay" of the older tables.
EXACT_RELAYS = ("c_relay_idempotent",)
VALUES = "bench/data.py"  # a throughput row's values: the records users send ...
VALUES_REPEATED = "one repeated byte"  # ... or the older benchmarks' b"v" * size
LATEST = -1  # ListOffsets' "latest" (offsets_for_times): a partition's high watermark
#: what a run writes: bench/data.py's records, or (bytes) one repeated value, the older benchmarks' b"v" * size
Data = Records | bytes
_records: dict[int, Records] = {}


def records(size: int) -> Records:
    """bench/data.py's records of `size`-byte values, made once a process (the same seed: the same records)."""
    if size not in _records:
        _records[size] = Records(size)
    return _records[size]


def value_bytes(data: Data) -> int:
    return data.size if isinstance(data, Records) else len(data)


def record_bytes(data: Data) -> int:
    """A record's key and value, for MB/s."""
    return value_bytes(data) + (len(data.key(500_000)) if isinstance(data, Records) else 6)


def about(data: Data) -> dict:
    """How the data was made, for the results file."""
    return data.about() if isinstance(data, Records) else about_repeated_byte(len(data))


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


def delete_topic(bootstrap: str, name: str) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.delete_topics([name]).values():
        with contextlib.suppress(KafkaException):
            f.result(30)


def fill(bootstrap: str, topic: str, n: int, data: Data | None = None, partitions: int = PARTITIONS) -> float:
    """Write n records as fast as possible, round-robin over the partitions, with a producer of ordinary settings
    (librdkafka's defaults; lz4 for bench/data.py's records, none for a repeated value); seconds taken. `data`:
    bench/data.py's records (100 B by default) or one repeated value (key str(i), one header, one timestamp)."""
    data = records(SMALL) if data is None else data
    conf = {"bootstrap.servers": bootstrap}
    if isinstance(data, Records):
        conf["compression.type"] = COMPRESSION
    p = Producer(conf)
    if isinstance(data, Records):
        key, value, headers, stamp = data.key, data.value, data.headers, data.timestamp
    else:
        hdr, ts = [("h", b"bench")], int(time.time() * 1000)
        key, value, headers, stamp = (lambda i: b"%d" % i), (lambda i: data), (lambda i: hdr), (lambda i: ts)
    t0 = time.perf_counter()
    for i in range(n):
        k, v, h, ts = key(i), value(i), headers(i), stamp(i)
        while True:
            try:
                p.produce(topic, v, k, partition=i % partitions, headers=h, timestamp=ts)
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
    from streamrepl import kafka

    own = c is None
    c = c or kafka.consumer(bootstrap_cluster)  # type: ignore[arg-type]
    try:
        try:
            md = c.list_topics(topic, timeout=10).topics[topic]
            if md.error is not None or not md.partitions:
                return 0  # the replica's topic is created by the gateway when it starts applying
            ends = kafka.true_ends(c, [TopicPartition(topic, p) for p in sorted(md.partitions)])
        except KafkaException as e:  # the replica's topic may not exist yet
            log(f"counting {topic}: {e}")
            return 0
        return sum(ends.values())
    finally:
        if own:
            c.close()


def landed(cluster: object, topic: str, n: int, c: Consumer, partitions: list[int] | None = None) -> int:
    """Records in the replica, cheaply enough to ask every 50 ms while a gateway writes: the high watermarks of
    all partitions in one ListOffsets request (on Tansu the base offset of each partition's last batch + 1, an
    under-count by less than a batch), and the true ends (which read each partition's last batch: up to 1 MB a
    partition) only once the watermarks are within the largest batches of n. `partitions`: the replica's, once
    known (the topic is not listed again). Reading true ends every 50 ms all the way took the destination broker
    more CPU per record than the gateway's own writes, in the gateway rows only; one metadata and two ListOffsets
    requests a partition (librdkafka's watermark query asks for the low and the high end) still cost it
    0.3-1.0 us a record at 1 KiB (issue 15)."""

    try:
        if partitions is None:
            md = c.list_topics(topic, timeout=10).topics[topic]
            if md.error is not None or not md.partitions:
                return 0  # the replica's topic is created by the gateway when it starts applying
            partitions = sorted(md.partitions)
        latest = [TopicPartition(topic, p, LATEST) for p in partitions]
        highs = sum(max(tp.offset, 0) for tp in c.offsets_for_times(latest, timeout=10))
    except KafkaException as e:
        log(f"counting {topic}: {e}")
        return 0
    return count(cluster, topic, c) if highs >= n - 10_000 * len(partitions) else highs


def hand_written(src: str, dst: str, src_topic: str, dst_topic: str, n: int, partitions: int = PARTITIONS) -> None:
    """What a user writes without this tool: consume a batch, produce each record, flush at the end. Run as a
    child of this script (`--hand-written`) so that it is timed like the other relays (ready_go)."""
    c = Consumer(
        {
            "bootstrap.servers": src,
            "group.id": "bench-handwritten",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    p = Producer({"bootstrap.servers": dst})  # librdkafka's defaults, as a user's loop has them
    c.list_topics(src_topic, timeout=30)  # the connections made before the clock, as the others' are
    p.list_topics(dst_topic, timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    c.assign([TopicPartition(src_topic, i, 0) for i in range(partitions)])
    done = 0
    while done < n:
        for m in c.consume(10_000, timeout=0.5):
            if m.error():
                continue
            while True:
                try:
                    p.produce(
                        dst_topic,
                        m.value(),
                        m.key(),
                        partition=m.partition(),
                        headers=m.headers(),
                        timestamp=m.timestamp()[1],
                    )
                    break
                except BufferError:
                    p.poll(0.01)
            done += 1
        p.poll(0)
    p.flush(120)
    print(done, round(time.perf_counter() - t0, 6), flush=True)
    sys.stdin.read()  # until the bench has read this process's CPU time
    c.close()


def watch_until_landed(
    c: Consumer,
    topic: str,
    n: int,
    t0: float,
    timeout: float,
    partitions: int | None = None,
    gone: Callable[[], bool] = lambda: False,
) -> dict:
    """Poll the destination every 50 ms (landed) from t0 until it holds n records of `topic`: the records there, when
    the first and the last were seen. The one end of every relay's clock, read from outside the relay. `gone`: the
    relay has exited (it will write no more: one more look, then the answer)."""
    got, first = 0, None
    parts = list(range(partitions)) if partitions else None
    while time.perf_counter() - t0 < timeout:
        got = landed(None, topic, n, c, parts)
        if got and parts is None:
            parts = list(range(len(c.list_topics(topic, timeout=10).topics[topic].partitions)))
        if got and first is None:
            first = (time.perf_counter(), got)
        if got >= n:
            break
        if gone():
            got = max(got, landed(None, topic, n, c, parts))
            break
        time.sleep(0.05)
    end = time.perf_counter()
    dt = end - t0
    steady = (got - first[1]) / (end - first[0]) if first and end > first[0] and got > first[1] else None
    return {
        "seconds": round(dt, 3),
        "records_s": round(got / dt) if dt > 0 else 0,
        "delivered": got,
        "complete": got >= n,
        "steady_records_s": round(steady) if steady else None,
        "first_record_s": round(first[0] - t0, 3) if first else None,
    }


def reader(bootstrap: str) -> Consumer:
    """The outside reader of a destination: a consumer that only asks for watermarks and reads last batches."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )


def ready_go(
    argv: list[str],
    dst: str,
    dst_topic: str,
    n: int,
    partitions: int,
    cpu: CpuMeter | None = None,
    timeout: float = 600,
    env: dict | None = None,
) -> dict:
    """Run a relay that says "ready" once its clients are connected and starts on a line on stdin (bench/relay.c
    with RELAY_WAIT, the hand-written loop): its clock and its CPU from the go to the destination holding the last
    record, read from outside (watch_until_landed), as the gateway's are from `replica resume`. A row, or
    {"error": why}."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, **(env or {})}
    )
    assert proc.stdin is not None and proc.stdout is not None

    def why() -> str:
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit {proc.returncode}"

    c = reader(dst)
    try:
        if proc.stdout.readline().strip() != "ready":
            proc.wait(30)
            return {"error": f"{Path(argv[0]).name} did not start: {why()}"}
        if cpu is not None:
            cpu.start([proc.pid])
        t0 = time.perf_counter()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        row = watch_until_landed(c, dst_topic, n, t0, timeout, partitions, lambda: proc.poll() is not None)
        used = cpu.stop(max(row["delivered"], 1)) if cpu is not None else {}
        own = proc.stdout.readline().split()  # its own count and seconds, from the go to its flush
        proc.stdin.close()
        proc.wait(60)
        if proc.returncode:
            return {"error": f"{Path(argv[0]).name} failed: {why()}"}
        return {**used, **row, "own_seconds": float(own[1]) if len(own) == 2 else None}
    finally:
        c.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def c_relay_run(
    src: str,
    dst: str,
    src_topic: str,
    dst_topic: str,
    n: int,
    partitions: int = PARTITIONS,
    overrides: tuple = (),
    cpu: CpuMeter | None = None,
) -> dict:
    """bench/relay.c: librdkafka consume -> produce in C, one origin header added per record, timed by ready_go.
    `overrides`: the relay's c./p. settings (e.g. "p.enable.idempotence=true", the idempotent relay)."""
    if not C_RELAY.exists():
        return {"error": "no C relay (run bench/setup)"}
    origin = "00000000-0000-4000-8000-00000000c0de"  # as long as a stream's uuid, like the gateway's header
    argv = [str(C_RELAY), src, dst, src_topic, dst_topic, str(partitions), str(n), origin, *overrides]
    return ready_go(argv, dst, dst_topic, n, partitions, cpu, env={"RELAY_WAIT": "1"})


def c_relay(
    src: str, dst: str, src_topic: str, dst_topic: str, n: int, partitions: int = PARTITIONS, overrides: tuple = ()
) -> float | str:
    """c_relay_run's seconds (from its start of work to the destination holding the last record), or why not."""
    r = c_relay_run(src, dst, src_topic, dst_topic, n, partitions, overrides)
    return r["error"] if "error" in r else float(r["seconds"])


def hand_written_run(src: str, dst: str, src_topic: str, dst_topic: str, n: int, cpu: CpuMeter) -> dict:
    argv = [PY, __file__, "--hand-written", src, dst, src_topic, dst_topic, str(n)]
    return ready_go(argv, dst, dst_topic, n, PARTITIONS, cpu)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU used by the relay under test and by the two brokers while it runs: on a shared machine the CPU spent
    per record is steadier than records/s, and it says where a relay's cost goes (its own work or the brokers')."""

    def __init__(self, broker_pids: list[int]):
        self.broker_pids = broker_pids

    def start(self, relay_pids: list[int] | None = None) -> None:
        self.relay_pids = relay_pids
        self._relay0 = self._relay()
        self._brokers0 = sum(cpu_seconds(p) for p in self.broker_pids)

    def _relay(self) -> float:
        if self.relay_pids is None:  # this process (the hand-written loop) and its finished children (the C relay)
            own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
        return sum(cpu_seconds(p) for p in self.relay_pids)

    def used(self) -> tuple[float, float]:
        """CPU seconds of the relay and of the brokers since start()."""
        relay = self._relay() - self._relay0
        return relay, sum(cpu_seconds(p) for p in self.broker_pids) - self._brokers0

    def stop(self, records: int) -> dict:
        relay, brokers = self.used()
        return {"relay_cpu_us": round(relay / records * 1e6, 2), "brokers_cpu_us": round(brokers / records * 1e6, 2)}


def rss_peak(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def latency(src: str, dst_cluster: object, src_topic: str, dst_topic: str, rate: int, seconds: float) -> dict:
    from streamrepl import kafka

    c = kafka.consumer(dst_cluster, **{"enable.partition.eof": False, "fetch.wait.max.ms": 5})  # type: ignore[arg-type]
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
    p = Producer({"bootstrap.servers": src, "linger.ms": 1, "compression.type": COMPRESSION})
    data = records(SMALL)
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
            p.produce(
                src_topic,
                data.value(sent),
                data.key(sent),
                partition=sent % PARTITIONS,
                headers=data.headers(sent),
                timestamp=int(time.time() * 1000),  # now, not the data's: the latency is read from it
            )
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
        "rate_target": rate,
        "rate_achieved": round(achieved),
        "seconds": seconds,
        "sent": total,
        "received": len(got),
        "p50_ms": round(q(0.50), 1),
        "p99_ms": round(q(0.99), 1),
        "max_ms": round(got[-1], 1) if got else None,
    }


def time_cmd(args: list[str], runs: int = 5) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(args, capture_output=True, env=os.environ, check=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def kcat_relay(src: str, dst: str, src_topic: str, dst_topic: str, n: int, cpu: CpuMeter) -> dict:
    """kcat consuming the source piped into kcat producing to the destination (key and value kept, headers and
    timestamps not: no exact relay). kcat has no ready signal: its clock starts as it is launched (a C program's
    start-up and its connections, tens of ms) and ends, like the others', when the destination holds the last record."""
    if shutil.which("kcat") is None:
        return {"error": "kcat not on PATH (bench/setup installs it)"}
    cerr, perr = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # files: a full pipe would stall kcat
    t0 = time.perf_counter()
    consume = subprocess.Popen(
        ["kcat", "-C", "-b", src, "-t", src_topic, "-o", "beginning", "-e", "-q", "-K", "\t", "-c", str(n)],
        stdout=subprocess.PIPE,
        stderr=cerr,
    )
    produce = subprocess.Popen(
        ["kcat", "-P", "-b", dst, "-t", dst_topic, "-K", "\t"], stdin=consume.stdout, stderr=perr
    )
    assert consume.stdout is not None
    consume.stdout.close()  # the producer's, now
    cpu.start([consume.pid, produce.pid])
    c = reader(dst)
    try:
        gone = lambda: consume.poll() is not None and produce.poll() is not None  # noqa: E731
        row = watch_until_landed(c, dst_topic, n, t0, 300, PARTITIONS, gone)
        used = cpu.stop(max(row["delivered"], 1))
    finally:
        c.close()
        for proc in (consume, produce):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if consume.returncode or produce.returncode or not row["complete"]:
        cerr.seek(0)
        perr.seek(0)
        why = (cerr.read() + perr.read()).decode(errors="replace").strip().splitlines()
        return {
            "error": f"kcat failed ({row['delivered']:,} of {n:,} landed): {why[-1] if why else consume.returncode}"
        }
    return {**used, **row}


def start_gateway(logdir: Path, name: str, *extra: str) -> subprocess.Popen:
    out = open(logdir / f"{name}.log", "a")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [PY, "-m", "streamrepl", "gateway", "start", "-cluster", DST, "-id", name, *extra],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=os.environ,
    )


def slots_settled(logdir: Path, names: list[str], timeout: float = 90, logs: list[str] | None = None) -> float:
    """Wait until the named gateways (fresh processes) together own all 64 slots, each some; seconds waited.
    Read from their logs ("gateway ID owns N slots", "... gave up N slots"), which say it at once; `logs` names the
    log files when they are not the gateways' own (the workers of `-workers N` write to their supervisor's)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        owned = dict.fromkeys(names, 0)
        for log_name in logs or names:
            path = logdir / f"{log_name}.log"
            for line in path.read_text().splitlines() if path.exists() else []:
                if (m := re.search(r"gateway (\S+) owns (\d+) slots", line)) and m.group(1) in owned:
                    owned[m.group(1)] = int(m.group(2))
                elif (m := re.search(r"gateway (\S+) gave up (\d+) slots", line)) and m.group(1) in owned:
                    owned[m.group(1)] -= int(m.group(2))
        if sum(owned.values()) == 64 and all(owned.values()):
            return time.monotonic() - t0
        time.sleep(0.2)
    raise RuntimeError(f"gateways {names} did not settle their slots in {timeout:.0f}s; logs in {logdir}")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the workers of a `gateway start -workers N`)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def stop_gateways(gws: list[subprocess.Popen]) -> None:
    for gw in gws:
        gw.terminate()
    for gw in gws:
        try:
            gw.wait(30)
        except subprocess.TimeoutExpired:
            gw.kill()
            gw.wait()


def new_link(name: str, topics: list[str], paused: bool, *extra: str, partitions: int = PARTITIONS) -> tuple[str, str]:
    src, dst = f"/{SRC}/{name}", f"/{DST}/{name}"
    cli("stream", "create", "-path", src, "-defaultpartitions", str(partitions))
    for t in topics:
        cli("stream", "topic", "create", "-path", src, "-topic", t)
    cli("stream", "create", "-path", dst, "-copymetafrom", src)
    cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", str(paused).lower(), *extra)
    cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    return src, dst


def gateway_throughput(
    sb: str,
    dst_cluster: object,
    logdir: Path,
    n: int,
    data: Data,
    gateways: int,
    timeout: float,
    cpu: CpuMeter,
    workers: int = 0,
    suffix: str = "",
    partitions: int = PARTITIONS,
    filled: Callable[[], None] | None = None,
) -> dict:
    """n records preloaded on the source; `gateways` gateway processes, or (workers > 0) one `gateway start -workers
    N`; timed from `replica resume` until the replica holds all n, and from its first record to its last (the steady
    rate, start-up excluded). `filled` is called once the source holds the records, before the gateways start
    (bench/wan.py adds the round trip there)."""
    from streamrepl import kafka

    size = value_bytes(data)
    name = (f"g{size}w{workers}" if workers else f"g{size}x{gateways}") + suffix
    src, dst = new_link(name, ["t"], paused=True, partitions=partitions)
    cli("stream", "topic", "create", "-path", dst, "-topic", "t")
    fill(sb, f"sr.{name}.t", n, data, partitions)
    if filled is not None:
        filled()
    if workers:
        gws = [start_gateway(logdir, name, "-workers", str(workers))]
        # -workers 1 is a plain gateway under its own id; N > 1 are workers <id>.w1 ... <id>.wN
        names = [f"{name}.w{k}" for k in range(1, workers + 1)] if workers > 1 else [name]
        logs = [name]
    else:
        names = [f"{name}-{i}" for i in range(gateways)]
        gws = [start_gateway(logdir, n) for n in names]
        logs = names
    try:
        slots_settled(logdir, names, logs=logs)
        time.sleep(1)  # a plan read after the slots: the partitions are acquired (paused link: nothing to do)
        # The relay's processes: the gateways, or the supervisor and its workers.
        pids = [g.pid for g in gws] + [c for g in gws for c in children(g.pid)]
        # What the gateways and the brokers use while nothing flows (the link paused): a cost per second, which the
        # run pays for as long as it lasts, beside the cost per record.
        cpu.start(pids)
        idle_t0 = time.perf_counter()
        time.sleep(2)
        idle = [x / (time.perf_counter() - idle_t0) for x in cpu.used()]
        profiler = None
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if os.environ.get("BENCH_PROFILE") and spy:
            profiled = pids[-1]  # a worker, not the supervisor (`gateway start` supervises by default)
            # py-spy on the first gateway for the whole run: where a gateway's time goes (BENCHMARKS.md)
            profiler = subprocess.Popen(
                [spy, "record", "-p", str(profiled), "-r", "100", "-f", "raw", "--nonblocking"]
                + ["-o", str(logdir / f"{name}.pyspy.txt")]
                # BENCH_PROFILE=idle: the samples of waiting threads too (where the loop waits, not only works)
                + (["--idle"] if os.environ["BENCH_PROFILE"] == "idle" else []),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cli("stream", "replica", "resume", "-path", src, "-replica", dst)
        # CPU is counted from here, like the rate: the command's own reads before its write (the links' state, as
        # `replica list` shows it) cost the source broker 0.17-0.34 s of CPU, more with every stream the run has
        # made, which the brokers' column charged to the gateway's records (0.4-0.9 us a record at 400,000).
        cpu.start(pids)
        t0 = time.perf_counter()
        c = kafka.consumer(dst_cluster)  # type: ignore[arg-type]
        row = watch_until_landed(c, f"sr.{name}.t", n, t0, timeout)
        used = cpu.stop(max(row["delivered"], 1))
        c.close()
        rss = [rss_peak(p) for p in pids]
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
            log(f"profile of {names[0]}: {logdir / f'{name}.pyspy.txt'}")
    finally:
        stop_gateways(gws)
        # The next row's gateway must not serve this link: a gateway fetches every partition it acquires, with a
        # 10 ms wait, until it has been quiet for 5 s, and compares each partition's last batch with the source.
        # With the earlier rows' links left in place, the second and later rows paid that for 3-5 idle links
        # during their run (450-800 more fetches on the source, 5-7 MB read on each side; the brokers' column up
        # by 1-2 us a record at 1 KiB), which the C relay and the loop never do.
        cli("stream", "replica", "remove", "-path", src, "-replica", dst, check=False)
        # And the records go, for the memory (Tansu keeps them all in it): 2.4 GB a row at 1 KiB, 1,000,000 records.
        for path in (dst, src):
            cli("stream", "delete", "-path", path, check=False)
    # first_record_s: from `replica resume` (the command returned) to the first replicated record seen
    return {
        "gateways": gateways,
        "workers": workers,
        **row,
        "MB_s": round(row["delivered"] * record_bytes(data) / row["seconds"] / 1e6, 1),
        "peak_rss_MB": max((r for r in rss if r), default=None),
        **used,
        "idle_relay_cpu_pct": round(idle[0] * 100, 1),
        "idle_brokers_cpu_pct": round(idle[1] * 100, 1),
    }


def relay_round(
    a: argparse.Namespace,
    sb: str,
    db: str,
    dst_cluster: object,
    logdir: Path,
    n: int,
    data: Data,
    tag: str,
    cpu: CpuMeter,
    skip: set[str],
    rnd: int,
) -> dict[str, dict]:
    """One run of every relay over the n records of bench.src<tag's size>, each into a topic of its own (`tag`),
    deleted once measured (Tansu keeps every record in memory: a round at 1 KiB wrote 5 GB)."""
    src_topic = f"bench.src{tag.split('r')[0]}"
    out: dict[str, dict] = {}

    def result(r: dict, topic: str) -> dict:
        if "error" not in r:
            r["MB_s"] = round(r["delivered"] * record_bytes(data) / r["seconds"] / 1e6, 1)
        delete_topic(db, topic)
        return r

    def loop() -> dict:
        log(f"{tag}, round {rnd + 1}: hand-written consume-then-produce loop")
        create_topic(db, f"bench.hw{tag}")
        return result(hand_written_run(sb, db, src_topic, f"bench.hw{tag}", n, cpu), f"bench.hw{tag}")

    def c() -> dict:
        log(f"{tag}, round {rnd + 1}: C relay")
        create_topic(db, f"bench.c{tag}")
        return result(c_relay_run(sb, db, src_topic, f"bench.c{tag}", n, cpu=cpu), f"bench.c{tag}")

    def c_idempotent() -> dict:
        # The yardstick of the goal "0.9x the fastest exact relay": the gateway's delivery guarantee
        # (an idempotent producer) in C, no Python; the plain C relay above is reported beside it for reference.
        log(f"{tag}, round {rnd + 1}: idempotent C relay")
        create_topic(db, f"bench.ci{tag}")
        r = c_relay_run(sb, db, src_topic, f"bench.ci{tag}", n, overrides=("p.enable.idempotence=true",), cpu=cpu)
        return result(r, f"bench.ci{tag}")

    suffix = "" if rnd == 0 else f"r{rnd}"
    suffix += "" if isinstance(data, Records) else "b"

    def gateways(g: int) -> Callable[[], dict]:
        def run() -> dict:
            log(f"{tag}, round {rnd + 1}: {g} gateway process(es)")
            return gateway_throughput(sb, dst_cluster, logdir, n, data, g, a.gateway_timeout, cpu, suffix=suffix)

        return run

    def workers(w: int) -> Callable[[], dict]:
        def run() -> dict:
            log(f"{tag}, round {rnd + 1}: one gateway start -workers {w}")
            return gateway_throughput(
                sb, dst_cluster, logdir, n, data, 1, a.gateway_timeout, cpu, workers=w, suffix=suffix
            )

        return run

    steps: list[tuple[str, Callable[[], dict]]] = [
        ("hand_written", loop),
        ("c_relay", c),
        ("c_relay_idempotent", c_idempotent),
    ]
    steps += [(f"gateway{g}", gateways(g)) for g in (int(x) for x in a.gateways.split(",") if x)]
    steps += [(f"workers{w}", workers(w)) for w in (int(x) for x in a.workers.split(",") if x)]
    # Each round starts one relay further on: in a fixed order the gateway always ran last, into brokers that held
    # the most (the relays' topics are deleted once measured now, but the gateways' streams stay until the end).
    k = rnd % len(steps)
    for key, step in steps[k:] + steps[:k]:
        out[key] = step()
    if rnd == 0 and "kcat" not in skip:
        log(f"{tag}: kcat | kcat")
        create_topic(db, f"bench.kcat{tag}")
        out["kcat"] = result(kcat_relay(sb, db, src_topic, f"bench.kcat{tag}", n, cpu), f"bench.kcat{tag}")
    return out


def median_run(results: list[dict]) -> dict:
    """The round with the median records/s (its other figures with it), and every round's records/s."""
    ok = sorted((r for r in results if "records_s" in r), key=lambda r: r["records_s"])
    if not ok:
        return results[0]
    mid = dict(ok[(len(ok) - 1) // 2])
    if len(results) > 1:
        mid["rounds_records_s"] = [r.get("records_s") for r in results]
    return mid


def median_ratio(runs: list[dict], yardsticks: list[dict]) -> float:
    """The median over the rounds of a relay's records/s to the yardstick's of the same round."""
    ratios = [
        r["records_s"] / y["records_s"]
        for r, y in zip(runs, yardsticks, strict=True)
        if r.get("records_s") and y.get("records_s")
    ]
    return round(statistics.median(ratios), 3) if ratios else 0.0


def latency_run(sb: str, dst_cluster: object, src_cluster: object, logdir: Path, rate: int, seconds: float) -> dict:
    """The floor (produce and consume on the source broker itself) and the same through a gateway, one run."""
    create_topic(sb, "bench.floor")
    floor = latency(sb, src_cluster, "bench.floor", "bench.floor", rate, seconds)
    src, dst = new_link("lat", ["l"], paused=False)
    gw = start_gateway(logdir, "lat", "-metricsport", "0", "-metricsaddr", "127.0.0.1")
    try:
        slots_settled(logdir, ["lat"])
        time.sleep(3)
        through = latency(sb, dst_cluster, "sr.lat.l", "sr.lat.l", rate, seconds)
        through["peak_rss_MB"] = rss_peak(gw.pid)
    finally:
        stop_gateways([gw])
    return {"floor": floor, "gateway": through}


def owners(unit_prefix: str) -> dict[str, list[str]]:
    """gateway id -> the replica partitions it reports (cluster gateway list)."""
    rows = json.loads(cli("cluster", "gateway", "list", "-dstcluster", DST, "-json").stdout)["data"]
    return {r["gateway"]: [u for u in str(r.get("replicates", "")).split() if u.startswith(unit_prefix)] for r in rows}


def read_partition(cluster: object, topic: str, partition: int, end: int) -> list[tuple]:
    from streamrepl import kafka

    c = kafka.consumer(cluster, **{"enable.partition.eof": True})  # type: ignore[arg-type]
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    while len(out) < end and time.monotonic() < deadline:
        for m in c.consume(10_000, timeout=0.5):
            if m.error() is None:
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    c.close()
    return out


def compare_copies(src_cluster: object, dst_cluster: object, topic: str, src_ends: dict) -> dict[str, int]:
    """Every record of every partition of `topic`, source against replica, by key and offset (bench/handoff.py
    too): source records missing from the copy, extra copies, and records not at their offset."""
    lost = doubled = misplaced = 0
    for i in range(PARTITIONS):
        a = read_partition(src_cluster, topic, i, src_ends[(topic, i)])
        b = read_partition(dst_cluster, topic, i, src_ends[(topic, i)])
        keys_b: dict[bytes | None, int] = {}
        for r in b:
            keys_b[r[1]] = keys_b.get(r[1], 0) + 1
        lost += sum(1 for r in a if r[1] not in keys_b)
        doubled += sum(k - 1 for k in keys_b.values() if k > 1)
        misplaced += sum(1 for x, y in zip(a, b, strict=False) if x != y) + abs(len(a) - len(b))
    return {"lost": lost, "doubled": doubled, "misplaced": misplaced}


def join_wait(bootstrap: str, session_ms: int) -> float:
    """Seconds from a consumer's subscribe to its first assignment, alone in a new group, with the gateways'
    session timeout: the broker's own share of every rebalance, failover included (Tansu waits half the
    session before it completes a join, whatever the members' rebalance timeout)."""
    group = f"bench-join-{time.monotonic_ns()}"
    assigned: list[float] = []
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": 1000,
            "partition.assignment.strategy": "roundrobin",
        }
    )
    t0 = time.perf_counter()
    c.subscribe(["__streamrepl_gateway_slots"], on_assign=lambda _c, _p: assigned.append(time.perf_counter()))
    while not assigned and time.perf_counter() - t0 < 60:
        c.poll(0.05)
    c.close()
    return round(assigned[0] - t0, 2) if assigned else float("nan")


def failover(sb: str, src_cluster: object, dst_cluster: object, logdir: Path, rate: int) -> dict:
    """Two gateways under a steady produce; SIGKILL the one that owns partition 0; time from the kill to the
    next record applied to that partition (by the survivor); then every record compared, offset by offset."""
    from streamrepl import kafka

    src, dst = new_link("fo", ["f"], paused=False)
    # Unsupervised, so that the SIGKILL is a crash of the gateway: a supervisor's death reaches its worker as the
    # SIGTERM of its parent-death signal (a planned stop).
    gws = {name: start_gateway(logdir, name, "-supervise", "false") for name in ("fo-a", "fo-b")}
    slots_settled(logdir, list(gws))
    p = Producer({"bootstrap.servers": sb, "linger.ms": 1, "compression.type": COMPRESSION})
    data = records(SMALL)
    stop = threading.Event()
    sent = [0]

    def producer() -> None:
        while not stop.is_set():
            for _ in range(rate // 100):
                i = sent[0]
                p.produce("sr.fo.f", data.value(i), data.key(i), partition=i % PARTITIONS, headers=data.headers(i))
                sent[0] += 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(30)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    c = kafka.consumer(dst_cluster)  # type: ignore[arg-type]
    tp = TopicPartition("sr.fo.f", 0)
    try:
        unit = f"{dst}:f[0]"
        found = None
        deadline = time.monotonic() + 60
        while found is None and time.monotonic() < deadline:
            time.sleep(1)
            try:
                found = next((g for g, units in owners(f"{dst}:").items() if unit in units and g in gws), None)
            except RuntimeError:
                found = None
        if found is None:
            raise RuntimeError(f"no gateway reported {unit}; logs in {logdir}")
        time.sleep(3)
        victim = gws.pop(found)
        victim.kill()
        killed = time.perf_counter()
        victim.wait()
        time.sleep(0.2)  # what the victim had on the wire has landed by now
        frozen = kafka.true_end(c, tp)
        resumed = None
        while time.perf_counter() - killed < 90:
            if kafka.true_end(c, tp) > frozen:
                resumed = time.perf_counter() - killed
                break
            time.sleep(0.05)
        time.sleep(2)
    finally:
        stop.set()
        th.join()
    # Nothing lost, nothing doubled: wait for the replica, then compare every record of every partition.
    tps = [TopicPartition("sr.fo.f", i) for i in range(PARTITIONS)]
    src_c = kafka.consumer(src_cluster)  # type: ignore[arg-type]
    src_ends = kafka.true_ends(src_c, tps)
    deadline = time.monotonic() + 120
    while kafka.true_ends(c, tps) != src_ends and time.monotonic() < deadline:
        time.sleep(0.5)
    c.close()
    src_c.close()
    stop_gateways(list(gws.values()))
    counts = compare_copies(src_cluster, dst_cluster, "sr.fo.f", src_ends)
    from streamrepl import settings

    session_ms = settings.gateway().session_ms
    return {
        "session_timeout_s": session_ms / 1000,
        "broker_join_wait_s": join_wait(dst_cluster.bootstrap, session_ms),  # type: ignore[attr-defined]
        "victim": found,
        "seconds_to_next_record": round(resumed, 2) if resumed else None,
        "records": sum(src_ends.values()),
        **counts,
    }


def produce_latency(logdir: Path, n: int = 500, reg: object = None) -> dict:
    """streamrepl.client.StreamProducer.send(), one record at a time (each waits for its acknowledgement), into
    a stream with an asynchronous replica and into one with a synchronous replica, one gateway for both. `reg`: the
    producer's registry (its addresses of both clusters), by default the gateway's ($STREAMREPL_CLUSTERS)."""
    from streamrepl import registry
    from streamrepl.client import StreamProducer

    new_link("pasync", ["p"], paused=False)
    new_link("psync", ["p"], False, "-synchronous", "true")
    gw = start_gateway(logdir, "produce-latency")
    out: dict = {}
    try:
        slots_settled(logdir, ["produce-latency"])
        reg = reg or registry.load()
        for mode, path in (("async", f"/{SRC}/pasync:p"), ("sync", f"/{SRC}/psync:p")):
            with contextlib.closing(StreamProducer(path, reg, sync_timeout=20.0, sync_stall=15.0)) as p:
                p.send(value=b"warm-up", timeout=60)  # the gateway's first acquisition is not a latency
                times, synchronous = [], 0
                for i in range(n):
                    t0 = time.perf_counter()
                    d = p.send(value=records(SMALL).value(i), key=records(SMALL).key(i))
                    times.append((time.perf_counter() - t0) * 1000)
                    synchronous += bool(d.synchronous)
            times.sort()
            out[mode] = {
                "records": n,
                "p50_ms": round(times[n // 2], 2),
                "p99_ms": round(times[min(n - 1, int(n * 0.99))], 2),
                "max_ms": round(times[-1], 2),
                "acknowledged_synchronously": synchronous,
            }
    finally:
        stop_gateways([gw])
    return out


def copystream_run(n: int) -> dict:
    script = str(Path(__file__).with_name("copystream.py"))
    r = subprocess.run([PY, script, "-n", str(n)], capture_output=True, text=True, env=os.environ)
    if r.returncode:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:]}
    return json.loads(r.stdout)


def throughput_block(
    a: argparse.Namespace,
    ec: EphemeralClusters,
    logdir: Path,
    n: int,
    data: Data,
    gateway_counts: list[int],
    worker_counts: list[int],
    skip: set[str],
) -> dict:
    """Every relay over the same n records of one size and kind, a.rounds times: one row of the table."""
    os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
    os.environ.pop("STREAMREPL_IDENTITY", None)
    from streamrepl import registry

    dst_cluster = registry.load().get(DST)
    sb, db = ec.brokers[SRC].bootstrap, ec.brokers[DST].bootstrap
    cpu = CpuMeter([ec.brokers[SRC].pid, ec.brokers[DST].pid])
    size = value_bytes(data)
    tag = f"{size}" if isinstance(data, Records) else f"{size}b"
    row: dict = {"value_bytes": size, "values": VALUES_REPEATED if isinstance(data, bytes) else VALUES, **about(data)}
    log(f"{tag}: ceiling, {n} records into {DST}")
    create_topic(db, f"bench.ceiling{tag}")
    dt = fill(db, f"bench.ceiling{tag}", n, data)
    row["ceiling"] = {"records_s": round(n / dt), "MB_s": round(n * record_bytes(data) / dt / 1e6, 1)}
    delete_topic(db, f"bench.ceiling{tag}")
    create_topic(sb, f"bench.src{tag}")
    fill(sb, f"bench.src{tag}", n, data)
    gateway_rows = [f"gateway{g}" for g in gateway_counts] + [f"workers{w}" for w in worker_counts]
    # Each round runs every relay once more, in turn (relay_round), into topics of its own: on a shared
    # machine one run's rows drift apart by up to a quarter (BENCHMARKS.md), so the figures are medians of
    # the rounds and the ratios the medians of each round's own ratios.
    runs: dict[str, list[dict]] = {}
    row["rounds"] = a.rounds if isinstance(data, Records) else min(a.rounds, a.repeated_rounds)
    for rnd in range(row["rounds"]):
        rtag = tag if rnd == 0 else f"{tag}r{rnd}"
        for key, result in relay_round(a, sb, db, dst_cluster, logdir, n, data, rtag, cpu, skip, rnd).items():
            runs.setdefault(key, []).append(result)
    for key, results in runs.items():
        row[key] = median_run(results)
    ce = row["ceiling"]["records_s"]
    for k in ("c_relay", "c_relay_idempotent", "hand_written", "kcat", *gateway_rows):
        if "records_s" in row.get(k, {}):
            row[k]["ratio_to_ceiling"] = round(row[k]["records_s"] / ce, 3)
    # The fastest relay of each round (the C relay, or the loop where the brokers bind both), beside the yardstick.
    relays = {k: row[k]["records_s"] for k in ("c_relay", "hand_written") if "records_s" in row[k]}
    if relays:
        row["fastest_relay"] = max(relays, key=relays.__getitem__)
    yardsticks = [runs[k] for k in relays]
    for g in gateway_rows:
        r = row[g]
        for k in (*relays, *EXACT_RELAYS):
            if k in runs:
                r[f"ratio_to_{k}"] = median_ratio(runs[g], runs[k])
        if yardsticks:
            fastest = [max(pair, key=lambda x: x.get("records_s", 0)) for pair in zip(*yardsticks, strict=True)]
            r["ratio_to_fastest_relay"] = median_ratio(runs[g], fastest)
        for k in EXACT_RELAYS:
            if k in runs:  # after the first record seen, both sides (start-up and the first fetch apart)
                steady = [{"records_s": x.get("steady_records_s")} for x in runs[g]]
                their = [{"records_s": x.get("steady_records_s")} for x in runs[k]]
                r[f"steady_ratio_to_{k}"] = median_ratio(steady, their)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records per throughput run")
    ap.add_argument("--sizes", default="100,1024", help="value sizes of the throughput runs (bytes, bench/data.py)")
    ap.add_argument(
        "--repeated-sizes",
        default="100,1024",
        help="value sizes of the extra rows whose values are one repeated byte (the older runs' data; '' for none)",
    )
    ap.add_argument(
        "--repeated-rounds", type=int, default=1, help="rounds of the repeated-byte rows (at most --rounds)"
    )
    ap.add_argument("--hand-written", nargs=5, help=argparse.SUPPRESS)  # the loop's own process (ready_go)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rate", type=int, default=5_000, help="latency test produce rate (records/s)")
    ap.add_argument("--latency-seconds", type=float, default=30.0)
    ap.add_argument("--gateway-timeout", type=float, default=300.0)
    ap.add_argument("--copystream", type=int, default=1_000_000, help="records for copystream (0: skip)")
    ap.add_argument(
        "--skip", default="", help="steps to leave out, comma-separated: kcat, latency, failover, produce, cli"
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="run every relay this many times, interleaved; report medians"
    )
    ap.add_argument("--gateways", default="1,2", help="gateway processes of each throughput run (comma-separated)")
    ap.add_argument(
        "--workers",
        default="",
        help="also runs with ONE `gateway start -workers N` for each N (comma-separated; rows 'workersN')",
    )
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    a = ap.parse_args()
    if a.hand_written:
        src, dst, src_topic, dst_topic, count = a.hand_written
        hand_written(src, dst, src_topic, dst_topic, int(count))
        return 0
    gateway_counts = [int(x) for x in a.gateways.split(",") if x]
    worker_counts = [int(x) for x in a.workers.split(",") if x]
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    n = a.records
    sizes = [int(x) for x in a.sizes.split(",") if x]
    blocks: list[Data] = [records(size) for size in sizes]
    blocks += [b"v" * int(x) for x in a.repeated_sizes.split(",") if x]
    res: dict = {
        **provenance(a.note),
        "records": n,
        "rounds": a.rounds,
        "partitions": PARTITIONS,
        "uptime_before": os.getloadavg(),
        "data": [about(d) for d in blocks],
        "throughput": [],
    }
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-bench-"))
    res["logs"] = str(logdir)
    for data in blocks:
        # Fresh brokers for each size and kind of data: Tansu keeps every record in memory.
        with EphemeralClusters([SRC, DST]) as ec:
            res["throughput"].append(throughput_block(a, ec, logdir, n, data, gateway_counts, worker_counts, skip))
    res["uptime_after_throughput"] = os.getloadavg()
    with EphemeralClusters([SRC, DST]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        from streamrepl import registry

        reg = registry.load()
        src_cluster, dst_cluster = reg.get(SRC), reg.get(DST)
        sb = ec.brokers[SRC].bootstrap
        if "latency" not in skip:
            log(f"latency: {a.rate} records/s for {a.latency_seconds}s, floor then through a gateway")
            res["latency"] = latency_run(sb, dst_cluster, src_cluster, logdir, a.rate, a.latency_seconds)
        if "failover" not in skip:
            log("failover: SIGKILL of the gateway that owns a partition")
            res["failover"] = failover(sb, src_cluster, dst_cluster, logdir, 2_000)
        if "produce" not in skip:
            log("produce latency: StreamProducer.send, asynchronous and synchronous replica")
            res["produce_latency"] = produce_latency(logdir)
        if "cli" not in skip:
            log("CLI timings")
            res["cli"] = {
                "help_s": round(time_cmd([BIN, "--help"]), 3),
                "stream_info_s": round(time_cmd([BIN, "stream", "info", "-path", "/sanfrancisco/lat"]), 3),
            }
    if a.copystream:
        log(f"copystream: {a.copystream} records (bench/copystream.py)")
        res["copystream"] = copystream_run(a.copystream)
    report(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


def report(res: dict) -> None:
    head = ("what", "records/s", "MB/s", "x ceiling", "CPU us/rec: relay+brokers", "note")
    out = []
    for row in res["throughput"]:
        rows = [
            (
                "ceiling (plain producer)",
                f"{row['ceiling']['records_s']:,}",
                f"{row['ceiling']['MB_s']}",
                "1.00",
                "",
                "",
            )
        ]
        labels = [
            ("c_relay", "C relay (librdkafka)"),
            ("c_relay_idempotent", "idempotent C relay"),
            ("hand_written", "hand-written relay loop"),
            ("kcat", "kcat | kcat"),
            *((k, f"gateway, {k[7:]} process(es)") for k in row if k.startswith("gateway")),
            *((k, f"one gateway start -workers {k[7:]}") for k in row if k.startswith("workers")),
        ]
        for key, label in labels:
            if key not in row:
                continue
            r = row[key]
            if "error" in r:
                rows.append((label, "-", "-", "-", "-", r["error"]))
                continue
            note = f"{r['delivered']:,}/{res['records']:,} delivered"
            if key == row.get("fastest_relay"):
                note = f"the fastest relay (yardstick); {note}"
            if key.startswith(("gateway", "workers")):
                vs = "; ".join(
                    f"{r[f'ratio_to_{k}']:.2f}x {what}"
                    for k, what in (
                        ("c_relay_idempotent", "idempotent C relay"),
                        ("c_relay", "C relay"),
                        ("hand_written", "hand-written"),
                    )
                    if f"ratio_to_{k}" in r
                )
                note = (
                    f"{r['ratio_to_fastest_relay']:.2f}x fastest relay ({vs}); steady {r['steady_records_s'] or 0:,}/s after the first"
                    f" record; {note}; peak RSS {r['peak_rss_MB']} MB; idle (link paused) CPU: gateway"
                    f" {r.get('idle_relay_cpu_pct')} %, brokers {r.get('idle_brokers_cpu_pct')} % of a core"
                )
            if "rounds_records_s" in r:
                note += "; rounds: " + " / ".join(f"{x:,}" if x else "-" for x in r["rounds_records_s"])
            used = f"{r['relay_cpu_us']}+{r['brokers_cpu_us']}" if "relay_cpu_us" in r else ""
            rows.append((label, f"{r['records_s']:,}", f"{r['MB_s']}", f"{r['ratio_to_ceiling']:.2f}", used, note))
        w = [max(len(x[i]) for x in [*rows, head]) for i in range(6)]
        rounds = f" rounds={row.get('rounds', res['rounds'])} (medians)" if row.get("rounds", res["rounds"]) > 1 else ""
        out.append(
            f"records={res['records']:,} value={row['value_bytes']}B ({row.get('values')}, lz4 ratio"
            f" {row.get('lz4_ratio')}) partitions={res['partitions']}{rounds}"
        )
        for r in [head, *rows]:
            out.append("  ".join(x.ljust(w[i]) if i in (0, 5) else x.rjust(w[i]) for i, x in enumerate(r)).rstrip())
        out.append("")
    for key, label in (
        ("floor", "latency floor (produce -> consume, one broker)"),
        ("gateway", "latency through a gateway"),
    ):
        if "latency" not in res:
            break
        lat = res["latency"][key]
        out.append(
            f"{label} @ {lat['rate_achieved']:,}/s for {lat['seconds']:.0f}s: p50 {lat['p50_ms']} ms,"
            f" p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms ({lat['received']:,}/{lat['sent']:,} received)"
        )
    fo = res.get("failover")
    if fo:
        out.append(
            f"failover (session timeout {fo['session_timeout_s']} s): next record {fo['seconds_to_next_record']} s"
            f" after SIGKILL of {fo['victim']}; {fo['records']:,} records: lost {fo['lost']}, doubled {fo['doubled']},"
            f" misplaced {fo['misplaced']}; the broker completes a join {fo.get('broker_join_wait_s')} s after it"
            " starts"
        )
    for mode, pl in res.get("produce_latency", {}).items():
        out.append(
            f"produce latency, {mode} replica ({pl['records']} sends, each waits for its acknowledgement):"
            f" p50 {pl['p50_ms']} ms, p99 {pl['p99_ms']} ms, max {pl['max_ms']} ms;"
            f" {pl['acknowledged_synchronously']} acknowledged synchronously"
        )
    cs = res.get("copystream")
    if cs and "error" not in cs:
        out.append(f"copystream: {json.dumps(cs)}")
    elif cs:
        out.append(f"copystream failed: {cs['error']}")
    cl = res.get("cli")
    if cl:
        out.append(f"CLI median of 5: streamrepl --help {cl['help_s']} s; stream info {cl['stream_info_s']} s")
    print("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())
