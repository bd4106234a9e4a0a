"""Benchmark: the gateway across a WAN to its source, against the idempotent C relay through the same line (issue 28).

Run:  PYTHONPATH=$PWD .venv/bin/python bench/wan.py [--rtts 0,10,50,100] [--partitions 4,64] [--records 200000]
                                                    [--reps 2] [--json out.json] [--line-only]

This kernel has no netem: the round trip is added by a delay line (bench/delayline.c, built at run time by
bench/build-delayline into bench/.build), a TCP proxy that holds each direction for half the round trip and keeps the
bandwidth. It sits between the relays and the SOURCE cluster: the source is a Tansu broker started here whose
advertised listener is the line's port, so every connection a client makes to it (bootstrap and the broker's own
address from the metadata) crosses the line; the destination is on loopback, as the gateways run on its side.

First the line is measured alone (a plain TCP sender and receiver, directly and through it, and a 1-byte ping at
each round trip). Then for each round trip: a fresh pair of brokers; for each partition count, REPS rounds of the
idempotent C relay (bench/relay.c with enable.idempotence=true, librdkafka's defaults otherwise) and one gateway
(bench/run.py's gateway_throughput: a paused link, the records preloaded, `replica resume`, timed to the last
record). Set-up and preloading run with the line at 0 ms; the round trip is set before the relay or gateway starts.
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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402
from provenance import provenance  # noqa: E402

from streamrepl.local import EphemeralClusters  # noqa: E402
from streamrepl.local_brokers import Tansu  # noqa: E402

HERE = Path(__file__).resolve().parent
LINE_SRC = HERE / "delayline.c"
LINE_BIN = HERE / ".build" / "delayline"
IDEMPOTENT = ("p.enable.idempotence=true",)


def build_line() -> Path:
    """bench/build-delayline when the binary is missing or older than its source."""
    if not LINE_BIN.exists() or LINE_BIN.stat().st_mtime < LINE_SRC.stat().st_mtime:
        subprocess.run([str(HERE / "build-delayline")], check=True, capture_output=True)
    return LINE_BIN


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


@contextmanager
def clusters_behind_line(logdir: Path, source_props: dict[str, str]) -> Iterator[tuple[DelayLine, int, str, str, int]]:
    """The destination on loopback (streamrepl.local), the source a Tansu broker started here (as streamrepl.local
    starts one) that advertises the delay line's port; a registry naming the source by the line's address, in
    $STREAMREPL_CLUSTERS, with `source_props` in the source's entry (client settings the gateway's clients of the
    source get, where the gateway sets none of its own). Yields (line, source broker pid, source bootstrap, destination bootstrap, dest pid)."""
    logdir.mkdir(parents=True, exist_ok=True)
    tansu_port = free_port()
    line = DelayLine(f"127.0.0.1:{tansu_port}")
    cmd, env = Tansu().command(bench.SRC, tansu_port, logdir)
    cmd[cmd.index("--advertised-listener-url") + 1] = f"tcp://{line.address}"
    with open(logdir / "source-tansu.log", "ab") as out:
        src = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + 30
        while True:
            try:
                AdminClient({"bootstrap.servers": line.address, "log_level": 0}).list_topics(timeout=2)
                break
            except Exception:
                if time.monotonic() > deadline or src.poll() is not None:
                    raise RuntimeError(f"the source broker did not start; log {logdir / 'source-tansu.log'}") from None
                time.sleep(0.2)
        with EphemeralClusters([bench.DST]) as ec:
            reg = logdir / "clusters.yaml"
            doc = {
                "default": bench.SRC,
                "clusters": {
                    bench.SRC: {"bootstrap.servers": line.address, **source_props},
                    bench.DST: {"bootstrap.servers": ec.brokers[bench.DST].bootstrap},
                },
            }
            reg.write_text(yaml.safe_dump(doc, sort_keys=False))
            os.environ["STREAMREPL_CLUSTERS"] = str(reg)
            os.environ.pop("STREAMREPL_IDENTITY", None)
            yield line, src.pid, line.address, ec.brokers[bench.DST].bootstrap, ec.brokers[bench.DST].pid
    finally:
        src.terminate()
        try:
            src.wait(10)
        except subprocess.TimeoutExpired:
            src.kill()
            src.wait()
        line.close()


def sweep_point(a: argparse.Namespace, rtt: float, logdir: Path) -> list[dict]:
    """One round trip: fresh brokers; for each partition count, the C relay and the gateway in turn, REPS times."""
    from streamrepl import registry

    out = []
    value = b"v" * a.size
    with clusters_behind_line(logdir / f"rtt{rtt:g}", a.source_props) as (line, src_pid, sb, db, dst_pid):
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
                        dt = bench.c_relay(sb, db, src_topic, dst_topic, a.records, parts, IDEMPOTENT)
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
    ap.add_argument("--records", type=int, default=200_000, help="records per relay run")
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
    ap.add_argument("--json", type=Path)
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON (e.g. 'shared with 6 other jobs')")
    a = ap.parse_args()
    a.rtts = [float(x) for x in a.rtts.split(",") if x]
    a.partitions = [int(x) for x in a.partitions.split(",") if x]
    a.source_props = dict(p.split("=", 1) for p in a.source_prop)
    a.fans = [int(x) for x in a.source_consumers.split(",") if x] or [""]
    if not bench.C_RELAY.exists() and not a.line_only:
        print("no C relay: run bench/setup", file=sys.stderr)
        return 2
    res: dict = {**provenance(a.note), "records": a.records, "size": a.size, "started": time.time()}
    res["source_props"] = a.source_props
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
