"""Benchmark: gateway replication against a plain producer (ceiling), a C relay and a hand-written relay loop.

Run:  .venv/bin/python bench/run.py [--records N] [--json out.json]

Everything runs in one process tree against embedded Tansu brokers started here, so the ratios
are measured in one run on the same machine (absolute figures on a shared machine drift).
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
from provenance import provenance

from streamrepl.local import EphemeralClusters

SRC, DST = "sanfrancisco", "newyork"
PARTITIONS = 4
VALUE = b"v" * 100  # the latency and failover runs' value; throughput runs take --sizes
PY = sys.executable
BIN = str(Path(PY).with_name("streamrepl"))
C_RELAY = Path(__file__).with_name(".build") / "relay"  # bench/relay.c, compiled by bench/setup
# The relays that give what the gateway gives (each record once, at the source's partition, an idempotent producer):
# the goal's yardstick (DESIGN: 0.9x the fastest exact relay of the same run). The plain C relay and the hand-written
# loop (neither idempotent) stay the "fastest relay" of the older tables.
EXACT_RELAYS = ("c_relay_idempotent",)
LATEST = -1  # ListOffsets' "latest" (offsets_for_times): a partition's high watermark


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


def fill(bootstrap: str, topic: str, n: int, value: bytes = VALUE, partitions: int = PARTITIONS) -> float:
    """Write n records (key, value, one header, a timestamp) as fast as possible; seconds taken."""
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
                p.produce(topic, value, str(i).encode(), partition=i % partitions, headers=hdr, timestamp=ts)
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
    dt = time.perf_counter() - t0
    c.close()
    return dt


def c_relay(
    src: str, dst: str, src_topic: str, dst_topic: str, n: int, partitions: int = PARTITIONS, overrides: tuple = ()
) -> float | str:
    """bench/relay.c: librdkafka consume -> produce in C, one origin header added per record. Seconds from its
    start (process start-up included) until all n are acknowledged, or why it could not run. `overrides`: the
    relay's c./p. settings (e.g. "p.enable.idempotence=true", the idempotent relay of bench/wan.py)."""
    if not C_RELAY.exists():
        return "no C relay (run bench/setup)"
    origin = "00000000-0000-4000-8000-00000000c0de"  # as long as a stream's uuid, like the gateway's header
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(C_RELAY), src, dst, src_topic, dst_topic, str(partitions), str(n), origin, *overrides],
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    if r.returncode:
        why = r.stderr.strip().splitlines()
        return f"C relay failed: {why[-1] if why else r.returncode}"
    return dt


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
            p.produce(
                src_topic,
                VALUE,
                str(sent).encode(),
                partition=sent % PARTITIONS,
                headers=[("h", b"lat")],
                timestamp=int(time.time() * 1000),
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


def kcat_relay(src: str, dst: str, src_topic: str, dst_topic: str, n: int) -> float | str:
    """kcat consuming the source piped into kcat producing to the destination (key and value kept).
    Seconds taken, or why it could not run."""
    if shutil.which("kcat") is None:
        return "kcat not on PATH (bench/setup installs it)"
    t0 = time.perf_counter()
    consume = subprocess.Popen(
        ["kcat", "-C", "-b", src, "-t", src_topic, "-o", "beginning", "-e", "-q", "-K", "\t", "-c", str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    produce = subprocess.run(
        ["kcat", "-P", "-b", dst, "-t", dst_topic, "-K", "\t"], stdin=consume.stdout, capture_output=True
    )
    _, err = consume.communicate()
    if consume.returncode or produce.returncode:
        why = (err or produce.stderr).decode(errors="replace").strip().splitlines()
        return f"kcat failed: {why[-1] if why else consume.returncode}"
    return time.perf_counter() - t0


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
    value: bytes,
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

    name = (f"g{len(value)}w{workers}" if workers else f"g{len(value)}x{gateways}") + suffix
    src, dst = new_link(name, ["t"], paused=True, partitions=partitions)
    cli("stream", "topic", "create", "-path", dst, "-topic", "t")
    fill(sb, f"sr.{name}.t", n, value, partitions)
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
        got, first = 0, None
        while time.perf_counter() - t0 < timeout:
            got = landed(dst_cluster, f"sr.{name}.t", n, c, list(range(partitions)) if got else None)
            if got and first is None:
                first = (time.perf_counter(), got)
            if got >= n:
                break
            time.sleep(0.05)
        end = time.perf_counter()
        used = cpu.stop(max(got, 1))
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
    dt = end - t0
    steady = (got - first[1]) / (end - first[0]) if first and end > first[0] and got > first[1] else None
    return {
        "gateways": gateways,
        "workers": workers,
        "seconds": round(dt, 3),
        "records_s": round(got / dt),
        "delivered": got,
        "complete": got >= n,
        "steady_records_s": round(steady) if steady else None,
        # from `replica resume` (the command returned) to the first replicated record seen (polled every 50 ms)
        "first_record_s": round(first[0] - t0, 3) if first else None,
        "MB_s": round(got * (len(value) + 13) / dt / 1e6, 1),
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
    value: bytes,
    tag: str,
    cpu: CpuMeter,
    skip: set[str],
    rnd: int,
) -> dict[str, dict]:
    """One run of every relay over the n records of bench.src<size>, each into a topic of its own (`tag`)."""
    size = len(value)
    rec_bytes = size + 13
    out: dict[str, dict] = {}

    def result(dt: float | str, topic: str, used: dict | None = None) -> dict:
        """A relay's row: what it moved into `topic` in dt seconds, or why it could not run (dt a string)."""
        if isinstance(dt, str):
            return {"error": dt}
        return {
            **(used or {}),
            "records_s": round(n / dt),
            "MB_s": round(n * rec_bytes / dt / 1e6, 1),
            "delivered": count(dst_cluster, topic),
        }

    def loop() -> dict:
        log(f"{size} B, round {rnd + 1}: hand-written consume-then-produce loop")
        create_topic(db, f"bench.hw{tag}")
        cpu.start()
        dt: float | str = hand_written(sb, db, f"bench.src{size}", f"bench.hw{tag}", n)
        return result(dt, f"bench.hw{tag}", cpu.stop(n))

    def c() -> dict:
        log(f"{size} B, round {rnd + 1}: C relay")
        create_topic(db, f"bench.c{tag}")
        cpu.start()
        dt = c_relay(sb, db, f"bench.src{size}", f"bench.c{tag}", n)
        return result(dt, f"bench.c{tag}", cpu.stop(n))

    def c_idempotent() -> dict:
        # The yardstick of the goal "0.9x the fastest exact relay": the gateway's delivery guarantee
        # (an idempotent producer) in C, no Python; the plain C relay above is reported beside it for reference.
        log(f"{size} B, round {rnd + 1}: idempotent C relay")
        create_topic(db, f"bench.ci{tag}")
        cpu.start()
        dt = c_relay(sb, db, f"bench.src{size}", f"bench.ci{tag}", n, overrides=("p.enable.idempotence=true",))
        return result(dt, f"bench.ci{tag}", cpu.stop(n))

    suffix = "" if rnd == 0 else f"r{rnd}"

    def gateways(g: int) -> Callable[[], dict]:
        def run() -> dict:
            log(f"{size} B, round {rnd + 1}: {g} gateway process(es)")
            return gateway_throughput(sb, dst_cluster, logdir, n, value, g, a.gateway_timeout, cpu, suffix=suffix)

        return run

    def workers(w: int) -> Callable[[], dict]:
        def run() -> dict:
            log(f"{size} B, round {rnd + 1}: one gateway start -workers {w}")
            return gateway_throughput(
                sb, dst_cluster, logdir, n, value, 1, a.gateway_timeout, cpu, workers=w, suffix=suffix
            )

        return run

    steps: list[tuple[str, Callable[[], dict]]] = [
        ("hand_written", loop),
        ("c_relay", c),
        ("c_relay_idempotent", c_idempotent),
    ]
    steps += [(f"gateway{g}", gateways(g)) for g in (int(x) for x in a.gateways.split(",") if x)]
    steps += [(f"workers{w}", workers(w)) for w in (int(x) for x in a.workers.split(",") if x)]
    # Each round starts one relay further on: every relay writes to brokers that hold the records of the relays run
    # before it (Tansu keeps them all in memory), and a run's rounds got slower as they filled (1 KiB, three runs at
    # e596213: the relays of the first rounds 104-206k/s, of the third 101-135k/s). In a fixed order the gateway
    # always ran last, into the fullest brokers of its round.
    k = rnd % len(steps)
    for key, step in steps[k:] + steps[:k]:
        out[key] = step()
    if rnd == 0:
        log(f"{size} B: kcat | kcat")
        create_topic(db, f"bench.kcat{tag}")
        dt = "skipped" if "kcat" in skip else kcat_relay(sb, db, f"bench.src{size}", f"bench.kcat{tag}", n)
        out["kcat"] = result(dt, f"bench.kcat{tag}")
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
    p = Producer({"bootstrap.servers": sb, "linger.ms": 1})
    stop = threading.Event()
    sent = [0]

    def producer() -> None:
        while not stop.is_set():
            for _ in range(rate // 100):
                p.produce("sr.fo.f", VALUE, str(sent[0]).encode(), partition=sent[0] % PARTITIONS)
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
                    d = p.send(value=VALUE, key=str(i).encode())
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="records per throughput run")
    ap.add_argument("--sizes", default="100,1024", help="value sizes of the throughput runs (bytes)")
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
    gateway_counts = [int(x) for x in a.gateways.split(",") if x]
    worker_counts = [int(x) for x in a.workers.split(",") if x]
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    n = a.records
    res: dict = {**provenance(a.note), "records": n, "rounds": a.rounds, "partitions": PARTITIONS, "throughput": []}
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-bench-"))
    res["logs"] = str(logdir)
    with EphemeralClusters([SRC, DST]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        os.environ.pop("STREAMREPL_IDENTITY", None)
        from streamrepl import registry

        reg = registry.load()
        src_cluster, dst_cluster = reg.get(SRC), reg.get(DST)
        sb, db = ec.brokers[SRC].bootstrap, ec.brokers[DST].bootstrap
        cpu = CpuMeter([ec.brokers[SRC].pid, ec.brokers[DST].pid])
        for size in [int(x) for x in a.sizes.split(",") if x]:
            value = b"v" * size
            row: dict = {"value_bytes": size}
            rec_bytes = size + 13
            log(f"{size} B: ceiling, {n} records into {DST}")
            create_topic(db, f"bench.ceiling{size}")
            dt = fill(db, f"bench.ceiling{size}", n, value)
            row["ceiling"] = {"records_s": round(n / dt), "MB_s": round(n * rec_bytes / dt / 1e6, 1)}
            create_topic(sb, f"bench.src{size}")
            fill(sb, f"bench.src{size}", n, value)
            gateway_rows = [f"gateway{g}" for g in gateway_counts] + [f"workers{w}" for w in worker_counts]
            # Each round runs every relay once more, in turn (relay_round), into topics of its own: on a shared
            # machine one run's rows drift apart by up to a quarter (BENCHMARKS.md), so the figures are medians of
            # the rounds and the ratios the medians of each round's own ratios.
            runs: dict[str, list[dict]] = {}
            for rnd in range(a.rounds):
                tag = f"{size}" if rnd == 0 else f"{size}r{rnd}"
                for key, result in relay_round(a, sb, db, dst_cluster, logdir, n, value, tag, cpu, skip, rnd).items():
                    runs.setdefault(key, []).append(result)
            for key, results in runs.items():
                row[key] = median_run(results)
            ce = row["ceiling"]["records_s"]
            for k in ("c_relay", "c_relay_idempotent", "hand_written", "kcat", *gateway_rows):
                if "records_s" in row.get(k, {}):
                    row[k]["ratio_to_ceiling"] = round(row[k]["records_s"] / ce, 3)
            # The yardstick: the fastest relay of each round (the C relay, or the loop where the brokers bind both).
            relays = {k: row[k]["records_s"] for k in ("c_relay", "hand_written") if "records_s" in row[k]}
            best = max(relays, key=relays.__getitem__)
            row["fastest_relay"] = best
            yardsticks = [runs[k] for k in relays]
            for g in gateway_rows:
                r = row[g]
                for k in (*relays, *EXACT_RELAYS):
                    if k in runs:
                        r[f"ratio_to_{k}"] = median_ratio(runs[g], runs[k])
                fastest = [max(pair, key=lambda x: x.get("records_s", 0)) for pair in zip(*yardsticks, strict=True)]
                r["ratio_to_fastest_relay"] = median_ratio(runs[g], fastest)
                for k in EXACT_RELAYS:
                    if k in runs:  # the rate after the first record (the relay's own figure holds its start)
                        steady = [{"records_s": x.get("steady_records_s")} for x in runs[g]]
                        r[f"steady_ratio_to_{k}"] = median_ratio(steady, runs[k])
            res["throughput"].append(row)

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
        rounds = f" rounds={res['rounds']} (medians)" if res.get("rounds", 1) > 1 else ""
        out.append(f"records={res['records']:,} value={row['value_bytes']}B partitions={res['partitions']}{rounds}")
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
