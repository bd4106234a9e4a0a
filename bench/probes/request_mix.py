"""Benchmark: what each relay asks of the brokers, by request kind, beside what the brokers spend per record.

Run:  .venv/bin/python bench/probes/request_mix.py [--records N] [--size 1024] [--rounds 3] [--sets base,gateway]

On one pair of Tansu brokers, round after round: the C relay (bench/relay.c) with each set of client settings of
bench/probes/relay_overrides.py, then one gateway process as bench/run.py runs it (`gateway_throughput`). Every librdkafka
client of both writes its statistics every 500 ms (the relay's with RELAY_STATS, the gateway's through a
sitecustomize that this script puts on the gateway's PYTHONPATH); for each relay it prints records/s, the CPU
each broker spent per record, and the requests each kind of client sent to each broker during the run. For the
gateway also: the brokers' CPU per record from its first replicated record on (start-up left out), and what the
`replica resume` command itself cost the brokers.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: run.py, wan.py
import relay_overrides  # noqa: E402
import run as bench  # noqa: E402

from streamrepl.local import EphemeralClusters  # noqa: E402

#: Put on a gateway's PYTHONPATH: its Producer, Consumer and AdminClient write their statistics to STATS_DIR.
SITECUSTOMIZE = """
import itertools, os
_dir = os.environ.get("REQUEST_MIX_STATS_DIR")
if _dir:
    import confluent_kafka as _ck
    import confluent_kafka.admin as _cka
    _n = itertools.count()

    def _with_stats(conf, kw, kind):
        conf = dict(conf or {})
        conf.update(kw)
        f = open(f"{_dir}/{os.getpid()}-{kind}-{next(_n)}.jsonl", "a")
        conf["stats_cb"] = lambda s, f=f: (f.write(s + "\\n"), f.flush())
        conf["statistics.interval.ms"] = 500
        return conf

    def _wrap(base, kind):
        class Wrapped(base):
            def __init__(self, conf=None, **kw):
                super().__init__(_with_stats(conf, kw, kind))
        Wrapped.__name__ = Wrapped.__qualname__ = base.__name__
        return Wrapped

    _ck.Producer, _ck.Consumer = _wrap(_ck.Producer, "producer"), _wrap(_ck.Consumer, "consumer")
    _admin_init = _cka.AdminClient.__init__  # its __init__ names the class: patched, not subclassed
    _cka.AdminClient.__init__ = lambda self, conf=None, **kw: _admin_init(self, _with_stats(conf, kw, "admin"))
"""


def snapshots(path: str) -> list[dict]:
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut short when the process ended
    return out


def requests_by_broker(snap: dict, roles: dict[str, str]) -> dict[str, dict[str, float]]:
    """API name -> requests so far, per broker role (src / dst), bootstrap connections included."""
    out: dict[str, dict[str, float]] = {}
    for b in snap.get("brokers", {}).values():
        role = roles.get(b["nodename"].rsplit(":", 1)[-1], b["nodename"])
        d = out.setdefault(role, defaultdict(float))
        for api, k in b.get("req", {}).items():
            d[api] += k
    return out


def requests_between(files: list[str], t0: float, t1: float, roles: dict[str, str]) -> dict:
    """(client kind, broker role) -> API -> requests between the last snapshots at or before t0 and t1
    (CLOCK_MONOTONIC seconds, librdkafka's 'ts')."""
    total: dict = defaultdict(lambda: defaultdict(float))
    for f in files:
        snaps = snapshots(f)
        kind = Path(f).name.split("-")[-2] if "relay" not in Path(f).name else Path(f).stem.rsplit("-", 1)[-1]
        before = [s for s in snaps if s["ts"] / 1e6 <= t0]
        after = [s for s in snaps if s["ts"] / 1e6 <= t1]
        if not after:
            continue
        a = requests_by_broker(before[-1], roles) if before else {}
        for role, apis in requests_by_broker(after[-1], roles).items():
            for api, k in apis.items():
                if k - a.get(role, {}).get(api, 0):
                    total[(kind, role)][api] += k - a.get(role, {}).get(api, 0)
    return total


def show(total: dict) -> None:
    for (kind, role), apis in sorted(total.items()):
        print(f"    {kind:8} -> {role}: " + ", ".join(f"{api} {int(k)}" for api, k in sorted(apis.items())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sets", default="base,gateway", help="the C relay's settings, of bench/probes/relay_overrides.py")
    a = ap.parse_args()
    if not bench.C_RELAY.exists():
        print("no C relay: run bench/setup", file=sys.stderr)
        return 2
    n, value = a.records, b"v" * a.size
    work = Path(tempfile.mkdtemp(prefix="request-mix-"))
    (work / "sitecustomize.py").write_text(SITECUSTOMIZE)
    with EphemeralClusters([bench.SRC, bench.DST]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        os.environ.pop("STREAMREPL_IDENTITY", None)
        from streamrepl import registry

        dst_cluster = registry.load().get(bench.DST)
        sb, db = ec.brokers[bench.SRC].bootstrap, ec.brokers[bench.DST].bootstrap
        roles = {sb.rsplit(":", 1)[1]: "src", db.rsplit(":", 1)[1]: "dst"}
        pids = [ec.brokers[bench.SRC].pid, ec.brokers[bench.DST].pid]

        def brokers_cpu() -> list[float]:
            return [bench.cpu_seconds(p) for p in pids]

        def per_record(c0: list[float], c1: list[float], records: int) -> str:
            return " / ".join(f"{(y - x) / records * 1e6:.2f}" for x, y in zip(c0, c1, strict=True))

        bench.create_topic(sb, f"bench.src{a.size}")
        bench.fill(sb, f"bench.src{a.size}", n, value)
        # Hooks into bench/run.py's gateway row: the resume command, the first record landed, the end.
        marks: dict = {}
        cli, landed, stop = bench.cli, bench.landed, bench.stop_gateways

        def hooked_cli(*args: str, **kw: bool) -> subprocess.CompletedProcess[str]:
            if "resume" not in args:
                return cli(*args, **kw)
            c0, marks["resume"] = brokers_cpu(), time.monotonic()
            out = cli(*args, **kw)
            marks["resume_cost"] = (time.monotonic() - marks["resume"], per_record(c0, brokers_cpu(), 1_000_000))
            return out

        def hooked_landed(*args: object, **kw: object) -> int:
            got = landed(*args, **kw)  # type: ignore[arg-type]
            if got and "first" not in marks:
                marks["first"] = (got, brokers_cpu())
            return got

        def hooked_stop(gws: list[subprocess.Popen]) -> None:
            marks["end"], marks["end_cpu"], marks["pids"] = time.monotonic(), brokers_cpu(), {g.pid for g in gws}
            time.sleep(1.2)  # one more statistics snapshot after the last record
            stop(gws)

        bench.cli, bench.landed, bench.stop_gateways = hooked_cli, hooked_landed, hooked_stop  # type: ignore[assignment]
        print("CPU: source / destination broker, us a record", flush=True)
        for rnd in range(a.rounds):
            for name in a.sets.split(","):
                stats = work / f"c-{name}-{rnd}"
                stats.mkdir()
                bench.create_topic(db, f"bench.c{name}{rnd}")
                c0, t0 = brokers_cpu(), time.monotonic()
                r = subprocess.run(
                    [str(bench.C_RELAY), sb, db, f"bench.src{a.size}", f"bench.c{name}{rnd}", str(bench.PARTITIONS)]
                    + [str(n), "o" * 36, *relay_overrides.SETS[name]],
                    env={**os.environ, "RELAY_STATS": str(stats / "relay")},
                    capture_output=True,
                    text=True,
                )
                t1 = time.monotonic()
                failed = f"  failed: {r.stderr.strip()[-200:]}" if r.returncode else ""
                print(
                    f"round {rnd + 1} C relay {name}: {n / (t1 - t0) / 1000:.1f}k/s, CPU {per_record(c0, brokers_cpu(), n)}{failed}"
                )
                show(requests_between(glob.glob(str(stats / "*.jsonl")), 0, 1e18, roles))
            stats = work / f"g-{rnd}"
            stats.mkdir()
            env = {k: os.environ.get(k) for k in ("REQUEST_MIX_STATS_DIR", "PYTHONPATH")}
            os.environ.update(REQUEST_MIX_STATS_DIR=str(stats), PYTHONPATH=str(work))
            try:
                res = bench.gateway_throughput(
                    sb, dst_cluster, work, n, value, 1, 300, bench.CpuMeter(pids), suffix=f"m{rnd}"
                )
            finally:
                for k, v in env.items():
                    os.environ.pop(k) if v is None else os.environ.update({k: v})
            got, first_cpu = marks.pop("first")
            seconds, resume_cost = marks["resume_cost"]
            print(
                f"round {rnd + 1} gateway: {res['records_s'] / 1000:.1f}k/s, CPU {res['brokers_cpu_us']:.2f} both;"
                f" from its first record on {per_record(first_cpu, marks['end_cpu'], n - got)};"
                f" the resume command: {seconds:.2f} s, brokers' CPU {resume_cost} s"
            )
            files = [f for f in glob.glob(str(stats / "*.jsonl")) if int(Path(f).name.split("-")[0]) in marks["pids"]]
            show(requests_between(files, marks["resume"], marks["end"] + 1.0, roles))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
